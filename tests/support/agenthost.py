"""
An in-memory host for the agent profile's tests (L{AgentHarness}): the
harness of L{tests.support.harness} on a memory reactor whose Unix ports
stop like real ones, its bodies' spawns recorded, and the bwrap probe
answered by L{ProbeSpawner}.
"""

from __future__ import annotations

import errno
import json
from pathlib import Path
from typing import Any, Mapping, Sequence

from twisted.internet.defer import succeed
from twisted.internet.error import ProcessDone, ProcessTerminated
from twisted.internet.protocol import ProcessProtocol
from twisted.internet.testing import MemoryReactorClock
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase
from treq.testing import StubTreq

from vehicle.agent import AgentProfile
from vehicle._tap import buildHost
from vehicle.models import ModelCatalog
from vehicle.settings import Settings

from tests.support.harness import MODELS, SECRET, FakeLauncher, Harness


class _Port:
    """
    A listening port that stops like a real one (with a L{Deferred}).
    """

    def __init__(self, address: str) -> None:
        self.address = address
        self.stopped = False

    def stopListening(self) -> Any:
        self.stopped = True
        return succeed(None)


class Reactor(MemoryReactorClock):
    """
    A memory reactor whose Unix ports stop with a L{Deferred} (the proxy
    awaits it).
    """

    def listenUNIX(self, address: str, factory: Any, backlog: int = 50,
                   mode: int = 0o666, wantPID: int = 0) -> _Port:
        self.unixServers.append((address, factory, backlog, mode, wantPID))
        return _Port(address)


class ProbeSpawner:
    """
    Answers the bwrap probe at once: exits 0, or with C{status} and
    C{stderr}, or raises C{error} as a missing binary would.
    """

    def __init__(self) -> None:
        self.calls: list[tuple[str, list[str], dict[str, str]]] = []
        self.status = 0
        self.stderr = b""
        self.error: OSError | None = None

    def refuse(self, stderr: bytes, status: int = 1) -> None:
        self.status, self.stderr, self.error = status, stderr, None

    def missing(self) -> None:
        self.error = FileNotFoundError(errno.ENOENT, "No such file or directory")

    def allow(self) -> None:
        self.status, self.stderr, self.error = 0, b"", None

    def __call__(self, protocol: ProcessProtocol, executable: str,
                 args: Sequence[str], env: Mapping[str, str]) -> Any:
        if self.error is not None:
            raise self.error
        self.calls.append((executable, list(args), dict(env)))
        transport = _ProbeTransport()
        protocol.makeConnection(transport)  # type: ignore[arg-type]
        if self.stderr:
            protocol.errReceived(self.stderr)
        if self.status == 0:
            protocol.processEnded(Failure(ProcessDone(0)))
        else:
            protocol.processEnded(Failure(ProcessTerminated(self.status)))
        return transport


class _ProbeTransport:
    def signalProcess(self, signal: str) -> None:
        pass


class AgentHarness(Harness):
    """
    L{Harness} on a L{MemoryReactorClock}, with the probe answered by
    L{ProbeSpawner}.
    """

    #: More providers for the host's catalogue, beside the scripted one
    #: (never changed in place).
    providers: Mapping[str, Any] = {}

    def __init__(self, testCase: SynchronousTestCase, **settings: Any) -> None:
        self.providers = settings.pop("providers", {})
        self.spawner = ProbeSpawner()
        # Absolute, as Settings.fromEnvironment makes it: the box refuses
        # relative paths.
        super().__init__(testCase, root=Path(testCase.mktemp()).absolute(), **settings)

    def _start(self) -> None:
        if not isinstance(self.clock, Reactor):
            now = self.clock.seconds()
            self.clock = Reactor()
            self.clock.advance(now)
        settings = Settings(
            secret=SECRET, dataDir=self.root, listen="tcp:0:interface=127.0.0.1", **self.overrides
        )
        models = ModelCatalog(
            json.loads(json.dumps({**MODELS["providers"], **self.providers})), "scripted/echo-1"
        )
        self.launcher = FakeLauncher()
        self.api, self.host = buildHost(settings, models, self.clock, launcher=self.launcher)
        # buildHost wires one AgentProfile: the bodies' (HostService.host).
        self.agent: AgentProfile = self.host.bodies.agent
        self.agent.spawner = self.spawner
        self.host.startService()
        self.stub = StubTreq(self.api.resource())

    def createAgent(self, requestId: str = "create-agent", **kw: Any) -> tuple[int, Any]:
        who = {k: kw.pop(k) for k in list(kw) if k in ("principal", "graph", "role", "client")}
        body = {"requestId": requestId, "profile": "agent", **kw}
        return self.call("POST", "/sessions", body, **who)

    def prompt(self, sessionId: str, requestId: str, **who: Any) -> tuple[int, Any]:
        return self.call(
            "POST", f"/sessions/{sessionId}/commands",
            {"type": "prompt", "requestId": requestId, "text": "hello"}, **who,
        )

    def command(self, sessionId: str, commandId: str) -> dict[str, Any]:
        code, frame = self.call("GET", f"/sessions/{sessionId}")
        assert code == 200, frame
        return next(c for c in frame["value"]["commands"] if c["commandId"] == commandId)

    def commandIds(self, sessionId: str) -> list[str]:
        code, frame = self.call("GET", f"/sessions/{sessionId}")
        assert code == 200, frame
        return [c["commandId"] for c in frame["value"]["commands"]]

    def events(self, sessionId: str) -> list[dict[str, Any]]:
        code, frame = self.call("GET", f"/sessions/{sessionId}/events?since=0")
        assert code == 200, frame
        return list(frame["value"]["events"])
