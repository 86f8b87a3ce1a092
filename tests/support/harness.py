"""
A host in memory for route tests: the real registry and app on a temp data
dir and a L{Clock}, called through L{StubTreq}.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

from treq.testing import StubTreq
from twisted.internet.testing import MemoryReactorClock
from twisted.internet.interfaces import IProcessTransport
from twisted.trial.unittest import SynchronousTestCase
from zope.interface import implementer

from vehicle._tap import buildHost
from vehicle.models import ModelCatalog
from vehicle.protocol import Answer, RunBudget, SessionCreated
from vehicle.session import Caller, Registry, Session, SessionMeta, isoTimestamp
from vehicle.settings import Settings
from vehicle.store import GroupWriter

from tests.support._headers import bytesNames


SECRET = "test-secret-0123456789"

MODELS = {
    "providers": {
        "scripted": {
            "baseUrl": "http://127.0.0.1:9/v1",
            "api": "openai-completions",
            "apiKey": "sk-test-not-real",
            "models": [{"id": "echo-1", "name": "Echo"}, {"id": "echo-2", "name": "Echo 2"}],
        }
    }
}


def identity(
    principal: str = "alice",
    graph: str | None = "g1",
    role: str = "owner",
    client: str | None = None,
    secret: str | None = SECRET,
    token: str | None = None,
) -> dict[str, str]:
    headers = {"x-user-id": principal}
    if secret is not None:
        headers["x-internal-service"] = secret
    if graph is not None:
        headers["x-graph-id"] = graph
        headers["x-sophia-graph-role"] = role
    else:
        headers["x-sophia-caller-role"] = role
    if client is not None:
        headers["x-vehicle-client-id"] = client
    if token is not None:
        headers["x-sophia-delegated-token"] = token
    return headers


@implementer(IProcessTransport)
def newSession(
    registry: Registry, caller: Caller, model: str = "scripted/echo-1",
    sessionId: str | None = None, title: str | None = None, budget: RunBudget | None = None,
) -> Session:
    """
    A chat session made by C{caller} on its graph (holding the lease), as a
    create makes it, without the web package.
    """
    assert caller.graphId is not None
    meta = SessionMeta(
        sessionId=sessionId or registry.newSessionId(), graphId=caller.graphId,
        principal=caller.principal,
        role=caller.role, model=model, createdAt=isoTimestamp(registry.clock.seconds()),
        budget=budget or RunBudget(maxTurns=12, maxCostUsd=0.25),
    )
    made: list[tuple[Session, Any]] = []
    registry.maker.create(
        caller, meta, requestId="create-1", raw={"requestId": "create-1"},
        answerFor=lambda made: Answer(type="session.created", value=SessionCreated(
            session=made.summary(), clientId=caller.clientId, holdsLease=True,
        )),
        title=title, claim=True,
    ).addCallback(made.append)
    # The memory reactor has no threads: the create is made at once.
    [(session, _)] = made
    return session


class FakePiTransport:
    """
    Stands for a pi child: records what the host writes, answers nothing
    unless a test says so (L{FakeLauncher.reply}).
    """

    pid = 4242

    def __init__(self, protocol: Any) -> None:
        self.protocol = protocol
        self.written: list[dict[str, Any]] = []
        self.toChild: dict[int, bytes] = {}
        self.closed: set[int] = set()
        self.signals: list[str] = []

    def writeToChild(self, fd: int, data: bytes) -> None:
        self.toChild[fd] = self.toChild.get(fd, b"") + data

    def closeChildFD(self, fd: int) -> None:
        self.closed.add(fd)

    def write(self, data: bytes) -> None:
        for line in data.splitlines():
            if line.strip():
                self.written.append(json.loads(line))

    def writeSequence(self, seq: Any) -> None:
        self.write(b"".join(seq))

    def closeStdin(self) -> None:
        self.closed.add(0)

    def closeStdout(self) -> None:
        pass

    def closeStderr(self) -> None:
        pass

    def loseConnection(self) -> None:
        self.closeStdin()

    def signalProcess(self, signal: str) -> None:
        from twisted.internet.error import ProcessTerminated
        from twisted.python.failure import Failure

        self.signals.append(signal)
        self.protocol.processEnded(Failure(ProcessTerminated(None, 15, None)))

    def getPeer(self) -> Any:
        return None

    def getHost(self) -> Any:
        return None

    def registerProducer(self, producer: Any, streaming: bool) -> None:
        pass

    def unregisterProducer(self) -> None:
        pass


class FakeLauncher:
    """
    A launcher whose pi children are L{FakePiTransport}s: route tests run
    without pi, and commands simply wait for a body that never answers.
    """

    def __init__(self, mcpUrl: str | None = None) -> None:
        #: The graph's MCP endpoint the bodies are told of, if any.
        self.mcpUrl = mcpUrl
        self.spawned: list[FakePiTransport] = []
        #: What each body was spawned with.
        self.kwargs: list[dict[str, Any]] = []

    def secrets(self) -> list[str]:
        return []

    def spawn(self, protocol: Any, **kw: Any) -> FakePiTransport:
        self.kwargs.append(kw)
        transport = FakePiTransport(protocol)
        self.spawned.append(transport)
        protocol.makeConnection(transport)
        return transport

    def reply(self, record: dict[str, Any], index: int = -1) -> None:
        transport = self.spawned[index]
        transport.protocol.outReceived(json.dumps(record).encode() + b"\n")


class Harness:
    """
    One host: call it with L{call}, restart it with L{restart}.
    """

    def __init__(self, testCase: SynchronousTestCase, root: Path | None = None,
                 writer: Callable[[], GroupWriter] | None = None, **settings: Any) -> None:
        """
        @param writer: makes the data dir's writer for each start (by
            default the memory reactor's: it writes at once).
        """
        self.testCase = testCase
        self.clock = MemoryReactorClock()
        self.clock.advance(1_796_000_000)
        self.root = root or Path(testCase.mktemp())
        self.overrides = settings
        self.makeWriter = writer
        self._start()

    def _start(self) -> None:
        settings = Settings(
            secret=SECRET, dataDir=self.root, listen="tcp:0:interface=127.0.0.1", **self.overrides
        )
        environ: dict[str, str] = {}
        models = ModelCatalog(json.loads(json.dumps(MODELS["providers"])), "scripted/echo-1")
        self.launcher = FakeLauncher()
        self.api, self.host = buildHost(
            settings, models, self.clock, launcher=self.launcher,
            writer=self.makeWriter() if self.makeWriter is not None else None,
        )
        self.host.startService()
        self.stub = StubTreq(self.api.resource())
        del environ

    def restart(self) -> None:
        self._stopHost()
        self._start()

    def stop(self) -> None:
        self._stopHost()

    def _stopHost(self) -> None:
        self.host.stopService()
        # On the memory clock the bodies' stop waits for time that only the
        # test advances; a real host is done with its data dir (its lock
        # held until then) before the next one starts.  Close the logs now,
        # so that nothing of this host writes beside the next one's.
        self.api.registry.close()
        # On a memory reactor the proxies' sockets never finish closing, so
        # the stop never reaches the run folder: let it go here, as the
        # host does once they have closed.
        agent = self.host.bodies.agent
        if agent is not None:
            agent.removeRunDir()

    def request(self, method: str, path: str, body: Any = None, raw: bytes | None = None,
                headers: dict[str, str] | None = None, **who: Any):
        hdrs = identity(**who)
        hdrs["content-type"] = "application/json"
        if headers:
            hdrs.update(headers)
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        return self.stub.request(method, "http://host" + path, headers=bytesNames(hdrs), data=data)

    def call(self, method: str, path: str, body: Any = None, **kw: Any) -> tuple[int, Any]:
        d = self.request(method, path, body, **kw)
        self.stub.flush()
        response = self.testCase.successResultOf(d)
        content = self.testCase.successResultOf(response.content())
        return response.code, json.loads(content)

    def create(self, requestId: str = "create-1", **kw: Any) -> dict[str, Any]:
        body = {"requestId": requestId}
        who = {k: kw.pop(k) for k in list(kw) if k in ("principal", "graph", "role", "client", "token")}
        body.update(kw)
        code, frame = self.call("POST", "/sessions", body, **who)
        assert code == 201, frame
        return frame["value"]["session"]


#: A valid body for each command type, and what a fresh session answers it
#: (a frame type, a refusal's code, or None where either may come).
COMMAND_EXAMPLES: dict[str, tuple[dict[str, Any], str | None]] = {
    "prompt": ({"text": "hi"}, "command.accepted"),
    "follow_up": ({"text": "more", "contextRefs": ["doc-1"]}, "command.accepted"),
    "steer": ({"text": "left"}, "command.accepted"),
    "cancel": ({"targetCommandId": "nothing"}, "not_cancellable"),
    "fork": ({"entryId": "e1"}, None),
    "clone": ({}, None),
    "set_room_policy": ({"policy": "co-drive"}, "room.policy"),
    "accept_chime": ({"chimeId": "c1"}, "chime_not_pending"),
    "reject_chime": ({"chimeId": "c1"}, "chime_not_pending"),
    "abort": ({}, "command.accepted"),
    "shutdown": ({}, "command.accepted"),
}
