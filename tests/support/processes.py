"""
Child processes without processes: L{FakeProcessTransport} records what a
protocol does to its child, and L{ProcessReactor} (a L{MemoryReactorClock}
whose C{spawnProcess} records its arguments, as Twisted's own procmon tests
do) hands one to every protocol it is asked to spawn; a test ends a child
with L{SpawnedProcess.end}.  L{HealthClient} answers a child's health
checks.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence

from attrs import define, field
from twisted.internet.defer import Deferred, fail, succeed
from twisted.internet.error import ProcessDone, ProcessExitedAlready, ProcessTerminated
from twisted.internet.interfaces import IProcessProtocol, IProcessTransport
from twisted.internet.testing import MemoryReactorClock
from twisted.python.failure import Failure
from zope.interface import implementer


@implementer(IProcessTransport)
class FakeProcessTransport:
    """
    Records what the protocol does to its child.
    """

    pid = 4242

    def __init__(self) -> None:
        self.written: list[bytes] = []
        self.signals: list[str] = []
        self.stdinClosed = False
        self.exited = False

    def write(self, data: bytes) -> None:
        assert not self.stdinClosed, "write after closeStdin"
        self.written.append(data)

    def writeSequence(self, seq: list[bytes]) -> None:
        for data in seq:
            self.write(data)

    def writeToChild(self, childFD: int, data: bytes) -> None:
        raise NotImplementedError()

    def closeStdin(self) -> None:
        self.stdinClosed = True

    def closeStdout(self) -> None:
        pass

    def closeStderr(self) -> None:
        pass

    def closeChildFD(self, descriptor: int) -> None:
        pass

    def loseConnection(self) -> None:
        self.closeStdin()

    def getPeer(self) -> Any:
        return None

    def getHost(self) -> Any:
        return None

    def signalProcess(self, signalID: str | int) -> None:
        if self.exited:
            raise ProcessExitedAlready()
        self.signals.append(str(signalID))


@define
class SpawnedProcess:
    """
    One C{spawnProcess} call: its arguments, the protocol and the fake
    transport the protocol was connected to.
    """

    protocol: IProcessProtocol
    executable: str
    args: list[str]
    env: Optional[Mapping[str, str]]
    path: Optional[str]
    childFDs: Optional[Mapping[int, Any]]
    transport: FakeProcessTransport = field(factory=FakeProcessTransport)

    def end(self, exitCode: int = 0, signal: Optional[int] = None) -> None:
        """
        The child ends: with C{exitCode}, or killed by C{signal}.
        """
        self.transport.exited = True
        if signal is None and exitCode == 0:
            reason = Failure(ProcessDone(0))
        else:
            reason = Failure(ProcessTerminated(exitCode=None if signal else exitCode,
                                               signal=signal))
        self.protocol.processEnded(reason)


class ProcessReactor(MemoryReactorClock):
    """
    A memory reactor and clock whose C{spawnProcess} records the call and
    connects the protocol to a L{FakeProcessTransport}; C{spawnError}, when
    set, is raised instead (a program that cannot be started).
    """

    def __init__(self) -> None:
        super().__init__()
        self.spawned: list[SpawnedProcess] = []
        self.spawnError: Optional[Exception] = None

    def spawnProcess(
        self,
        processProtocol: IProcessProtocol,
        executable: Any,
        args: Sequence[Any],
        env: Optional[Mapping[Any, Any]] = None,
        path: Any = None,
        uid: Optional[int] = None,
        gid: Optional[int] = None,
        usePTY: bool = False,
        childFDs: Optional[Mapping[int, Any]] = None,
    ) -> IProcessTransport:
        if self.spawnError is not None:
            raise self.spawnError
        spawned = SpawnedProcess(
            protocol=processProtocol, executable=executable, args=list(args),
            env=env, path=path, childFDs=childFDs,
        )
        self.spawned.append(spawned)
        processProtocol.makeConnection(spawned.transport)
        return spawned.transport

    def named(self, word: str) -> SpawnedProcess:
        """
        The one spawned process whose arguments include C{word}.
        """
        found = [p for p in self.spawned if word in p.args]
        assert len(found) == 1, (word, [p.args for p in self.spawned])
        return found[0]


class _Response:
    def __init__(self, code: int) -> None:
        self.code = code

    def content(self) -> Deferred:
        return succeed(b"")


class HealthClient:
    """
    Answers health checks from a list (a status, or an exception to fail
    with), then 503.
    """

    def __init__(self, answers: list[Any] | None = None) -> None:
        self.answers = list(answers or [])
        self.urls: list[str] = []

    def get(self, url: str, timeout: float) -> Deferred:
        self.urls.append(url)
        answer = self.answers.pop(0) if self.answers else 503
        if isinstance(answer, Exception):
            return fail(answer)
        return succeed(_Response(answer))
