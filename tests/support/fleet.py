"""
A fleet for live tests (issue 19): C{twistd vehicle} processes in public
mode, each with its own data dir, all on one ledger, driven directly with
gardend's headers; each may serve C{/metrics} on a port of its own.
"""

from __future__ import annotations

import secrets
from typing import Any

from prometheus_client.parser import text_string_to_metric_families
from twisted.trial.unittest import TestCase

from vehicle_local.standin import freeLoopbackPort

from tests.support.live import TwistdHost
from tests.support.public import ACCOUNT, VISITOR, account, visitor


#: Public mode on the scripted model, as environment variables: the credit
#: proxy and the own-key proxy both run C{scripted/echo-1} (a run costs
#: $0.00375).
PUBLIC_ENV = {
    "VEHICLE_PUBLIC": "1",
    "VEHICLE_PUBLIC_PROVIDER": "scripted",
    "VEHICLE_PUBLIC_DEFAULT_MODEL": "scripted/echo-1",
    "VEHICLE_CREDIT_MODELS": "scripted/echo-1",
    "VEHICLE_CREDIT_DEFAULT_MODEL": "scripted/echo-1",
}

#: What one scripted run costs.
RUN_COST = 0.00375

#: A visitor's own key (the scripted model takes any).
OWN_KEY = "sk-or-fleet-key-0a1b2c3d"

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


class FleetHost(TwistdHost):
    """
    One host of a fleet: C{twistd vehicle} in public mode on C{ledgerUrl}
    (the file when L{None}), the rest of its settings as environment
    variables, C{/metrics} on a port of its own when C{metrics}.
    """

    def __init__(self, testCase: TestCase, ledgerUrl: str | None = None,
                 metrics: bool = False, **env: Any) -> None:
        settings = dict(PUBLIC_ENV, **env)
        if ledgerUrl is not None:
            settings["VEHICLE_LEDGER_URL"] = ledgerUrl
        super().__init__(testCase, **settings)
        self.metricsUrl: str | None = None
        if metrics:
            port = freeLoopbackPort()
            self.vehicleArgs = ("--metrics", f"tcp:{port}:interface=127.0.0.1")
            self.metricsUrl = f"http://127.0.0.1:{port}/metrics"

    async def scrape(self) -> Samples:
        """
        C{GET /metrics}: every sample by its name and its labels (sorted).
        """
        assert self.metricsUrl is not None
        response = await self.http.get(self.metricsUrl)
        body = (await response.content()).decode("utf-8")
        assert response.code == 200, body
        samples: Samples = {}
        for family in text_string_to_metric_families(body):
            for sample in family.samples:
                samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
        return samples

    # -- callers ---------------------------------------------------------------

    async def asAccount(self, principal: str, method: str, path: str, body: Any = None
                        ) -> tuple[int, Any]:
        who = dict(ACCOUNT, principal=principal)
        return await self.call(method, path, body, headers=account(), **who)

    async def asVisitor(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        return await self.call(method, path, body, headers=visitor(OWN_KEY), **VISITOR)

    async def prompt(self, sessionId: str, principal: str | None = None,
                     requestId: str | None = None) -> tuple[int, Any]:
        """
        A prompt on a public conversation: an account's (C{principal}) or
        the visitor's.
        """
        body = {"type": "prompt", "requestId": requestId or "p-" + secrets.token_hex(4),
                "text": "hello"}
        path = f"/sessions/{sessionId}/commands"
        if principal is None:
            return await self.asVisitor("POST", path, body)
        return await self.asAccount(principal, "POST", path, body)

    async def conversation(self, principal: str | None = None) -> str:
        """
        A new public conversation: on an account's credit, or the visitor's
        own key.
        """
        body = {"requestId": "c-" + secrets.token_hex(4)}
        if principal is None:
            code, frame = await self.asVisitor("POST", "/sessions", body)
        else:
            code, frame = await self.asAccount(principal, "POST", "/sessions", body)
        assert code == 201, frame
        return str(frame["value"]["session"]["sessionId"])

    async def completed(self, sessionId: str, commandId: str,
                        principal: str | None = None) -> None:
        """
        Wait for command C{commandId} of C{sessionId} to complete.
        """
        who: dict[str, Any] = (dict(VISITOR, headers=visitor(OWN_KEY)) if principal is None
                               else dict(ACCOUNT, principal=principal, headers=account()))
        await self.waitFor(
            sessionId,
            lambda e: e["type"] == "command.completed" and e["data"]["commandId"] == commandId,
            **who,
        )
