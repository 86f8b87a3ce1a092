"""
Route tests' common ground: L{RouteTestCase}, a host in memory per test
(L{tests.support.harness}) whose every answer is held to the protocol's
schemas and the error table, and the client identities C{TAB1}, C{TAB2}.
"""

from __future__ import annotations

from typing import Any

from twisted.trial.unittest import SynchronousTestCase

from vehicle.errors import STATUS

from tests.support.harness import Harness
from tests.support.schemas import assertValidFrame


TAB1 = {"client": "tab-1"}
TAB2 = {"client": "tab-2"}


class RouteTestCase(SynchronousTestCase):
    """
    A host in memory per test; every answer it gives is checked against the
    schemas and the error table.
    """

    harnessSettings: dict[str, Any] = {}

    def setUp(self) -> None:
        self.h = Harness(self, **self.harnessSettings)
        self.addCleanup(self.h.stop)

    def call(self, method: str, path: str, body: Any = None, **kw: Any) -> tuple[int, dict[str, Any]]:
        code, frame = self.h.call(method, path, body, **kw)
        assertValidFrame(self, frame)
        # Never a failure of the host's own; a 503 only where the error
        # table has one (isolation_unavailable, credit_pool_exhausted, ...).
        self.assertNotEqual(frame.get("code"), "internal", frame)
        if frame["type"] != "error" or STATUS[frame["code"]] < 500:
            self.assertLess(code, 500, frame)
        if frame["type"] == "error":
            self.assertEqual(code, STATUS[frame["code"]], frame)
        else:
            self.assertIn(code, (200, 201, 202), frame)
        return code, frame

    def ok(self, method: str, path: str, body: Any = None, **kw: Any) -> dict[str, Any]:
        code, frame = self.call(method, path, body, **kw)
        self.assertNotEqual(frame["type"], "error", frame)
        return frame

    def refused(self, errorCode: str, method: str, path: str, body: Any = None, **kw: Any) -> dict[str, Any]:
        code, frame = self.call(method, path, body, **kw)
        self.assertEqual(frame["type"], "error", frame)
        self.assertEqual(frame["code"], errorCode, frame)
        return frame

    def create(self, requestId: str = "create-1", **kw: Any) -> str:
        who = {k: kw.pop(k) for k in list(kw) if k in ("principal", "graph", "role", "client")}
        frame = self.ok("POST", "/sessions", {"requestId": requestId, **kw}, **who)
        self.assertEqual(frame["type"], "session.created")
        return frame["value"]["session"]["sessionId"]

    def events(self, sessionId: str, since: int = 0, **who: Any) -> list[dict[str, Any]]:
        frame = self.ok("GET", f"/sessions/{sessionId}/events?since={since}", **who)
        return frame["value"]["events"]

    def types(self, sessionId: str, since: int = 0, **who: Any) -> list[str]:
        return [e["type"] for e in self.events(sessionId, since, **who)]

    def summary(self, sessionId: str, **who: Any) -> dict[str, Any]:
        return self.ok("GET", f"/sessions/{sessionId}", **who)["value"]["session"]

    def prompt(self, sessionId: str, requestId: str, text: str = "hello", **who: Any) -> tuple[int, dict[str, Any]]:
        return self.call(
            "POST", f"/sessions/{sessionId}/commands",
            {"requestId": requestId, "type": "prompt", "text": text}, **who,
        )

    def session(self, sessionId: str):
        return self.h.api.registry.sessions[sessionId]
