# -*- test-case-name: tests.unit.test_supervise -*-
"""
How the local run and the gardend stand-in keep a child process: one
L{Supervised} service per child, made in the image of Twisted's
L{twisted.runner.procmon.ProcessMonitor} (the child is spawned when the
service starts; stopping sends C{TERM}, then C{KILL} after C{killTime}).
It differs where a part of the local run must:

  - a child that ends is not restarted: its end is news for its owner
    (L{Supervised.whenEnded}), who decides (the local run stops the rest);
  - C{stopService} returns a L{Deferred} that fires once the child is gone,
    so the tree above waits for it;
  - its output goes to a log file of its own (closed when it ends), the
    last lines kept for a report, and it is ready once its health check
    answers (L{Supervised.whenHealthy}).

L{InTurn} is the tree that holds them: a L{MultiService} whose children
stop one after another, the last added first.
"""

from __future__ import annotations

import os
import signal
from collections import deque
from pathlib import Path
from typing import Any, BinaryIO, Callable, ClassVar, Mapping, Optional, Sequence

from attrs import define, field
from twisted.application.service import IServiceCollection, MultiService, Service
from twisted.internet.defer import Deferred, maybeDeferred, succeed
from twisted.internet.error import ProcessDone, ProcessExitedAlready, ProcessTerminated
from twisted.internet.interfaces import IReactorProcess, IReactorTime
from twisted.internet.protocol import ProcessProtocol
from twisted.logger import Logger
from twisted.python.failure import Failure

from vehicle._reactors import IHostReactor


#: Called with a part's name and each whole line it writes (C{-v}).
Echo = Callable[[str, str], None]


@define(eq=False)
class ChildProcess(ProcessProtocol):
    """
    One life of one child: its output appended to a log file as it comes
    (and the last lines kept for a report), an optional echo of each whole
    line, and its end.

    @ivar name: what the operator calls this part (C{vehicle}, C{model}).
    @ivar logPath: where its output goes.
    @ivar echo: called with each whole line of output (C{-v}).
    @ivar exitStatus: its exit status (or C{-signal}) once it is gone.
    """

    name: str
    logPath: Path
    echo: Optional[Echo] = None
    tailLines: int = 40
    exitStatus: Optional[int] = None
    _tail: deque[str] = field(init=False)
    _partial: bytes = field(init=False, default=b"")
    _log: Optional[BinaryIO] = field(init=False, default=None)
    _waiting: list["Deferred[int]"] = field(init=False, factory=list)

    def __attrs_post_init__(self) -> None:
        self._tail = deque(maxlen=self.tailLines)

    def spawn(
        self,
        reactor: IReactorProcess,
        command: str,
        args: Sequence[str],
        env: Mapping[str, str],
        path: Optional[Path] = None,
    ) -> "ChildProcess":
        """
        Start the child (stdin closed; stdout and stderr to the log).  A
        child that cannot be spawned has ended (as procmon has it), with
        the reason as its last line.
        """
        self.logPath.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.logPath, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        self._log = os.fdopen(fd, "ab", buffering=0)
        try:
            reactor.spawnProcess(
                self,
                command,
                [command, *args],
                env=dict(env),
                path=str(path) if path is not None else None,
                childFDs={0: "w", 1: "r", 2: "r"},
            )
        except OSError as e:
            self.childDataReceived(2, f"cannot start {command}: {e}\n".encode("utf-8"))
            self.processEnded(Failure(ProcessTerminated(exitCode=127)))
        return self

    def connectionMade(self) -> None:
        assert self.transport is not None
        self.transport.closeStdin()

    def childDataReceived(self, childFD: int, data: bytes) -> None:
        if self._log is not None:
            self._log.write(data)
        lines = (self._partial + data).split(b"\n")
        self._partial = lines.pop()
        if len(self._partial) > 65536:
            lines.append(self._partial)
            self._partial = b""
        for raw in lines:
            line = raw.decode("utf-8", "replace").rstrip("\r")
            self._tail.append(line)
            if self.echo is not None:
                self.echo(self.name, line)

    def lastLines(self) -> list[str]:
        """
        The last lines the child wrote (its partial last line included).
        """
        lines = list(self._tail)
        if self._partial:
            lines.append(self._partial.decode("utf-8", "replace"))
        return lines

    @property
    def running(self) -> bool:
        return self.exitStatus is None

    def signal(self, name: str) -> None:
        """
        Send the child C{name} (C{TERM}, C{KILL}) unless it is gone.
        """
        if self.running and self.transport is not None:
            try:
                self.transport.signalProcess(name)
            except ProcessExitedAlready:
                pass

    def whenEnded(self) -> "Deferred[int]":
        """
        A L{Deferred} that fires with the exit status once the child is
        gone (at once when it is).
        """
        if self.exitStatus is not None:
            return succeed(self.exitStatus)
        d: Deferred[int] = Deferred()
        self._waiting.append(d)
        return d

    def processEnded(self, reason: Failure) -> None:
        value = reason.value
        signalled = getattr(value, "signal", None)
        if isinstance(value, ProcessDone):
            status = 0
        elif signalled:
            status = -int(signalled)
        else:
            status = int(getattr(value, "exitCode", None) or 1)
        self.exitStatus = status
        if self._log is not None:
            self._log.close()
            self._log = None
        waiting, self._waiting = self._waiting, []
        for d in waiting:
            d.callback(status)


class ServiceFailed(Exception):
    """
    A supervised child ended, or never became healthy.

    @ivar service: the child's service (its process's C{lastLines()} tell
        why).
    """

    def __init__(self, service: "Supervised", reason: str) -> None:
        super().__init__(reason)
        self.service = service


class Named(Service):
    """
    A service that always has a name (its place in the tree).
    """

    name: str

    # Service's own are untyped: these are the same, typed, so that a
    # subclass's calls of them are checked.

    def startService(self) -> None:
        Service.startService(self)

    def stopService(self) -> Deferred[None] | None:
        Service.stopService(self)
        return None

    def setServiceParent(self, parent: IServiceCollection) -> None:
        Service.setServiceParent(self, parent)


@define(eq=False)
class Supervised(Named):
    """
    One child process as a service: spawned on C{startService}; on
    C{stopService}, sent C{TERM} and, if still there after C{killTime}
    seconds, C{KILL}, the returned L{Deferred} firing once it is gone.
    Never restarted.

    @ivar name: what the operator calls this part, and its name in the tree.
    @ivar environment: makes the child's environment as it starts (so what
        it names may be settled only by then: a port the tree above is
        listening on).
    @ivar url: where it answers once up (C{http://127.0.0.1:<port>}), for
        L{whenHealthy}.
    @ivar healthPath: the path under C{url} that answers 200 once it is up.
    @ivar process: its life, once started.
    """

    name: str
    command: str
    args: Sequence[str]
    environment: Callable[[], Mapping[str, str]]
    logPath: Path
    reactor: IHostReactor
    cwd: Optional[Path] = None
    url: Optional[str] = None
    healthPath: str = "/health"
    killTime: float = 10.0
    echo: Optional[Echo] = None
    process: Optional[ChildProcess] = field(init=False, default=None)

    def startService(self) -> None:
        Named.startService(self)
        self.process = ChildProcess(name=self.name, logPath=self.logPath, echo=self.echo)
        self.process.spawn(self.reactor, self.command, self.args, self.environment(), self.cwd)

    def stopService(self) -> "Deferred[None]":
        Named.stopService(self)
        process = self.process
        if process is None or not process.running:
            return succeed(None)
        process.signal("TERM")
        kill = self.reactor.callLater(self.killTime, process.signal, "KILL")

        def gone(status: int) -> None:
            if kill.active():
                kill.cancel()

        return process.whenEnded().addCallback(gone)

    def whenEnded(self) -> "Deferred[int]":
        """
        Fires with the child's exit status once it is gone.
        """
        assert self.process is not None, "not started"
        return self.process.whenEnded()

    async def whenHealthy(self, client: Any, seconds: float) -> None:
        """
        Wait until C{url + healthPath} answers 200.

        @param client: treq's HTTP client (or one with its C{get}).
        @raise ServiceFailed: when the child ends first, or C{seconds} pass.
        """
        assert self.process is not None and self.url is not None, "not started"
        url = self.url + self.healthPath
        if await waitHealthy(client, self.reactor, self.process, url, seconds):
            return
        if self.process.running:
            raise ServiceFailed(self, f"{url} did not answer 200 in {seconds:g} s")
        raise ServiceFailed(self, "it stopped before answering its health check")


class InTurn(MultiService):
    """
    A L{MultiService} whose children stop one at a time, the last added
    first, each once the one added after it has stopped (L{MultiService}
    asks them all at once): the host stops its bodies while the model and
    the gateway still answer.
    """

    _log: ClassVar[Logger] = Logger()

    def startService(self) -> None:
        # Typed, as L{Named}'s are.
        MultiService.startService(self)

    def stopService(self) -> "Deferred[None]":
        Service.stopService(self)
        return Deferred.fromCoroutine(self._stopInTurn())

    async def _stopInTurn(self) -> None:
        for service in reversed(list(self)):
            try:
                await maybeDeferred(service.stopService)
            except Exception:
                self._log.failure("{name} did not stop cleanly", name=service.name)


def describeStatus(status: int) -> str:
    """
    An exit status in words: C{exit status 1}, C{killed by SIGKILL}.
    """
    if status < 0:
        try:
            return f"killed by {signal.Signals(-status).name}"
        except ValueError:
            return f"killed by signal {-status}"
    return f"exit status {status}"


async def waitHealthy(
    client: Any, clock: IReactorTime, child: ChildProcess, url: str, seconds: float
) -> bool:
    """
    Poll C{url} with C{client} (treq's) every tenth of a second until it
    answers 200 (C{True}), C{child} ends or C{seconds} pass (C{False}).
    """
    deadline = clock.seconds() + seconds
    while child.running and clock.seconds() < deadline:
        try:
            response = await client.get(url, timeout=2)
            await response.content()
            if response.code == 200:
                return True
        except Exception:
            pass
        pause: Deferred[None] = Deferred()
        clock.callLater(0.1, pause.callback, None)
        await pause
    return False
