# -*- test-case-name: tests.unit.test_public -*-
"""
The body of a conversation on the caller's own key: a model runtime of its
own, reaching the provider through a proxy that holds the caller's newest key
(memory only) and scrubs it out of any error before pi can record it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Mapping

from attrs import define
from twisted.internet.defer import Deferred

from vehicle.body import BodyPlan
from vehicle.box import ModelProxy, Upstream
from vehicle.errors import VehicleError
from vehicle.models import ModelCatalog, modelEntry
from vehicle.protocol import JSON, JSONObject
from vehicle.public._public import Public
from vehicle.session import Session
from vehicle._reactors import IHostReactor


@define(eq=False)
class OwnKeyBodies:
    """
    Plans bodies for C{byok} conversations.
    """

    reactor: IHostReactor
    public: Public
    models: ModelCatalog
    runDir: Callable[[], Path]

    @staticmethod
    def _modelEntry(spec: Mapping[str, JSON], modelId: str) -> JSONObject:
        """
        pi's entry for the caller's model: the catalogue's when it lists
        it, else a plain one.  pi needs C{cost} to account a run, so an
        unknown model costs what the provider reports (zero rates here).
        """
        listed = modelEntry(spec, modelId)
        if listed is not None:
            return dict(listed)
        return {
            "id": modelId, "name": modelId, "reasoning": False, "input": ["text"],
            "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0},
            "contextWindow": 128000, "maxTokens": 4096,
        }

    def requireKey(self, session: Session) -> None:
        """
        @raise VehicleError: C{model_key_required} while the host holds no
            key of the caller's for C{session} (after a restart, until the
            caller sends it again).
        """
        if self.public.keyFor(session) is None:
            raise VehicleError(
                "model_key_required",
                "this conversation runs on your own key: send it as X-Model-Key",
            )

    def upstreamFor(self, session: Session) -> Upstream:
        """
        The provider of C{session}'s model, reached with the caller's newest
        key (asked at each request), which is scrubbed out of any answer
        before pi sees it.
        """
        return Upstream.provider(
            self.models,
            session.meta.model,
            key=None,
            keySource=lambda: self.public.keyFor(session),
            scrub=True,
        )

    async def plan(self, session: Session) -> BodyPlan:
        self.requireKey(session)
        provider, modelId = session.meta.model.split("/", 1)
        proxy = ModelProxy(
            reactor=self.reactor,
            socketPath=self.runDir() / session.sessionId / "model.sock",
            model=self.upstreamFor(session),
            gate=lambda: session.conductor.meterModelRequest() if session.conductor else None,
        )
        await proxy.listen()
        # The bridge picks a free port and puts it in place of the 0.
        spec = self.models.proxied(provider, "http://127.0.0.1:0/v1", proxy.token)
        providers: dict[str, JSONObject] = {
            provider: {**spec, "models": [self._modelEntry(spec, modelId)]}
        }
        return BodyPlan(
            providers=providers,
            bootExtra={"bridge": {"socket": str(proxy.socketPath), "port": 0}},
            cleanup=lambda: Deferred.fromCoroutine(proxy.close()),
        )
