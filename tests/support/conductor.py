"""
One session on a temp data dir, its conductor, a fake pi and a clock: the
base of the conductor's tests (L{tests.unit.test_conductor}) and of the
bodies started at a claim (L{tests.unit.test_earlybodies}).  Every event
the conductor makes is held to C{event.schema.json}.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from twisted.internet.testing import MemoryReactorClock
from twisted.trial.unittest import SynchronousTestCase

from vehicle.body._conductor import Conductor
from vehicle.protocol import CommandRequest, fromRequest, toObject
from vehicle.session import Caller, Registry
from vehicle.store import DataDir

from tests.support.fakepi import STATE, FakePi
from tests.support.harness import FakeLauncher, newSession
from tests.support.schemas import validEvents


ALICE = Caller(principal="alice", clientId="tab-1", role="owner", graphId="g1")


class ConductorTestCase(SynchronousTestCase):
    """
    One session, its conductor, a fake pi and a clock.
    """

    idleSeconds = 600.0

    def setUp(self) -> None:
        self.clock = MemoryReactorClock()
        self.clock.advance(1_796_000_000)
        dataDir = DataDir(Path(self.mktemp()))
        dataDir.ensure()
        self.registry = Registry(dataDir=dataDir, clock=self.clock)
        self.session = newSession(self.registry, ALICE)
        self.addCleanup(self.registry.close)
        self.launcher = FakeLauncher()
        self.conductor = Conductor(
            session=self.session, launcher=self.launcher, clock=self.clock,
            idleSeconds=self.idleSeconds,
        )
        self.session.conductor = self.conductor
        self.pi = FakePi(self.launcher)
        self.seen = validEvents(self, self.session)

    # -- driving ------------------------------------------------------------

    def submit(self, kind: str, requestId: str, **fields: Any) -> dict[str, Any]:
        return self.session.command(
            ALICE, fromRequest({"type": kind, "requestId": requestId, **fields}, CommandRequest)
        )

    def status(self, commandId: str) -> str:
        return str(self.session.findCommand(commandId).status)

    def command(self, commandId: str) -> dict[str, Any]:
        return toObject(self.session.findCommand(commandId))

    def durable(self, kind: str | None = None) -> list[dict[str, Any]]:
        return [e for e in self.seen if "seq" in e and (kind is None or e["type"] == kind)]

    def data(self, kind: str) -> list[dict[str, Any]]:
        return [e["data"] for e in self.durable(kind)]

    def statusEvents(self, commandId: str) -> list[str]:
        return [e["type"] for e in self.durable()
                if e["type"].startswith("command.") and e["data"].get("commandId") == commandId]

    def running(self, text: str = "hello") -> None:
        """
        A prompt C{p1} whose run has started.
        """
        self.submit("prompt", "p1", text=text)
        self.pi.answer("get_state", STATE)
        self.pi.answer("prompt", {"disposition": "started"})
        self.pi.agentStart()
        self.pi.user(text)

    def queue(self, kind: str, requestId: str, text: str, **fields: Any) -> None:
        """
        A text command sent to pi while the run goes on, and queued there.
        """
        self.submit(kind, requestId, text=text, **fields)
        verb = "follow_up" if kind == "prompt" else kind
        if kind == "prompt":
            self.assertEqual(self.pi.pending("prompt")["streamingBehavior"], "followUp")
            verb = "prompt"
        self.pi.answer(verb, {"disposition": "queued"} if kind == "prompt" else None)
        self.assertEqual(self.status(requestId), "queued")
