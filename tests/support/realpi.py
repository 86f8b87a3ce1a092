"""
Real, pinned pi (C{.venv/pi}, or C{$VEHICLE_PI_ROOT}, as the host finds it) in the live tests: C{PI_ROOT}, the runtime;
L{PiProcess}, the parent's side of a pi RPC child (its boot config on fd 3,
its stdout records); L{spawnPi}, which starts one on the real reactor and
stops it at the test's cleanup; C{DEADLINE} for a record to come.  Only the
live tests import this.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Sequence

from twisted.internet import reactor
from twisted.internet.defer import Deferred
from twisted.internet.error import ProcessExitedAlready
from twisted.internet.protocol import ProcessProtocol
from twisted.python.failure import Failure

from vehicle.body._picommand import SOPHIA_EXTENSION, piArgv, piEnvironment
from vehicle.settings import defaultPiRoot


PI_ROOT = defaultPiRoot()
#: Generous: a cold pi start takes about 1.3 s.
DEADLINE = 15.0

Record = dict[str, Any]


class PiProcess(ProcessProtocol):
    """
    A pi RPC child: writes the boot config to fd 3, collects stdout records.
    """

    def __init__(self, boot: bytes) -> None:
        self.boot = boot
        self.records: list[Record] = []
        self.stderr = b""
        self.ended: Deferred[None] = Deferred()
        self.reason: Failure | None = None
        self._buffer = b""
        self._waiters: list[tuple[Callable[[Record], bool], Deferred[Record]]] = []

    def connectionMade(self) -> None:
        self.transport.writeToChild(3, self.boot)
        self.transport.closeChildFD(3)

    def childDataReceived(self, childFD: int, data: bytes) -> None:
        if childFD == 2:
            self.stderr += data
            return
        self._buffer += data
        *lines, self._buffer = self._buffer.split(b"\n")
        for line in lines:
            if line.strip():
                self._received(json.loads(line))

    def _received(self, record: Record) -> None:
        self.records.append(record)
        for waiter in list(self._waiters):
            predicate, d = waiter
            if predicate(record):
                self._waiters.remove(waiter)
                d.callback(record)

    def processEnded(self, reason: Failure) -> None:
        self.reason = reason
        waiters, self._waiters = self._waiters, []
        for _, d in waiters:
            d.errback(Exception(f"pi exited: {reason.value}; stderr: {self.stderr[-2000:]!r}"))
        self.ended.callback(None)

    def send(self, command: Record) -> None:
        self.transport.writeToChild(0, json.dumps(command).encode("utf-8") + b"\n")

    def waitFor(self, predicate: Callable[[Record], bool]) -> Deferred[Record]:
        """
        The first record from now on that satisfies C{predicate}.
        """
        d: Deferred[Record] = Deferred()
        self._waiters.append((predicate, d))
        return d.addTimeout(DEADLINE, reactor)

    def ofType(self, kind: str) -> list[Record]:
        return [record for record in self.records if record.get("type") == kind]


def spawnPi(
    testCase: Any,
    pi: Any,
    dirs: dict[str, Path],
    process: Any,
    *,
    tools: Sequence[str] | None = None,
    mcp: bool = False,
) -> Any:
    """
    Start real pi in C{dirs} with C{process} (which writes its boot config
    to fd 3 and has an C{ended} Deferred); stop it at the test's cleanup.
    """
    argv = piArgv(
        pi,
        sessionDir=dirs["sessions"],
        sessionFile=None,
        extension=SOPHIA_EXTENSION,
        model="sophia/fake-1",
        tools=tools,
        mcp=mcp,
    )
    env = piEnvironment(home=dirs["home"], agentDir=dirs["agent"],
                        path=f"{pi.node.parent}:/usr/bin:/bin")
    transport = reactor.spawnProcess(
        process,
        str(pi.node),
        argv,
        env=env,
        path=str(dirs["work"]),
        childFDs={0: "w", 1: "r", 2: "r", 3: "w"},
    )

    def stop() -> Deferred[None]:
        if not process.ended.called:
            transport.closeChildFD(0)
            killer = reactor.callLater(5, _kill, transport)
            process.ended.addCallback(lambda _: killer.cancel() if killer.active() else None)
        return process.ended

    testCase.addCleanup(stop)
    return transport


def _kill(transport: Any) -> None:
    try:
        transport.signalProcess("KILL")
    except ProcessExitedAlready:
        pass
