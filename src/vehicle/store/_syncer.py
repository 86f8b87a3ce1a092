# -*- test-case-name: tests.unit.test_syncer -*-
"""
The host's side of the sync helper (L{vehicle._syncd}): a runner for the
group writer (L{SyncHelper}) that hands each batch's lines to a process of
its own, which writes and syncs them phase by phase and says how it went.

What stays on the reactor's thread is one C{write} of the batch to a Unix
socket and one read of the answer; the writer's thread (which took the
interpreter's lock back after every C{write} and C{fsync}, each time
costing the reactor a wake-up of it) is left the work after a step (a
C{meta.json} rewritten once a second) and, should the helper not start,
every batch.

The helper:

  - is started with the first batch that has lines, with an empty
    environment and no argument but its own file, so no secret reaches it;
    it holds its socket and, when given, the data directory's lock (so no
    second host takes the directory while it finishes a batch of this
    one's);
  - keeps a copy of each log's descriptor, passed once over the socket
    (again when the host's number for it is reused by another log);
  - ends when the host closes its end (at shutdown, or when the host dies),
    after the batch in hand;
  - if it ends with a batch in hand, every step of that batch fails and
    each of its logs refuses more (what is on the disk is in doubt: the
    owner opens them afresh); the next batch starts a new helper.  After
    three helpers in a row ended without answering a batch, the host gives
    up on them and makes the syncs on the writer's thread.
"""

from __future__ import annotations

import errno
import socket
import sys
from typing import Any, Callable, ClassVar, Sequence, cast
from typing import Protocol as TypingProtocol

from attrs import define, field
from twisted.internet.defer import Deferred, succeed
from twisted.internet.interfaces import (
    IProcessTransport,
    IReactorProcess,
    IReactorSocket,
    IReactorThreads,
)
from twisted.internet.protocol import ProcessProtocol, Protocol, ServerFactory
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.python.threadpool import ThreadPool

from vehicle import _syncd
from vehicle._reactors import IClientReactor
from vehicle._syncd import errorFrom, errorOf, frame, takeFrames
from vehicle.store._jsonl import JsonlLog
from vehicle.store._writer import (
    Batch,
    GroupWriter,
    WorkRunner,
    _Step,
    finishBatch,
    threadedRunner,
)


#: How many batches go by between two sweeps of the descriptors the helper
#: keeps for logs since closed.
SWEEP_EVERY = 256

#: The most of what the helper writes to its stderr that one log line keeps.
STDERR_CHARS = 2000

#: How many helpers may end in a row, without answering a batch, before
#: the host makes its syncs on the writer's thread.
MOST_DEATHS = 3


class HelperReactor(IReactorProcess, IReactorSocket):
    """
    What the helper needs of a reactor: to spawn it, and to adopt its
    socket.
    """


def helperArgv() -> list[str]:
    """
    The helper's command: this interpreter, isolated (no environment, no
    site, no user folder on its path), running the helper's file.
    """
    return [sys.executable, "-I", "-S", _syncd.__file__]


class Link(TypingProtocol):
    """
    The way to a helper: its process over a socket (L{processStarter}), or
    one on this thread (a test's).  It tells its L{SyncHelper} of each
    answer (L{SyncHelper.answered}) and of its end (L{SyncHelper.lost}).
    """

    def send(self, fds: Sequence[int], messages: Sequence[tuple[Any, ...]]) -> None:
        """
        Pass C{fds} (one for each C{open} among C{messages}, in order),
        then C{messages}.
        """

    def close(self) -> Deferred[None]:
        """
        Let the helper go; fires once it has ended.
        """


Starter = Callable[["SyncHelper"], Link]


@define(eq=False)
class _Flight:
    batch: Batch
    done: Deferred[None]
    #: The logs of the batch by the key the helper knows them by.
    logs: dict[int, JsonlLog]


class _ProcessLink(Protocol):
    """
    The helper's process, and the host's end of its socket.
    """

    def __init__(self, owner: SyncHelper) -> None:
        self.owner = owner
        self.buffer = bytearray()
        self.ended: Deferred[None] = Deferred()
        self.process: IProcessTransport | None = None

    def send(self, fds: Sequence[int], messages: Sequence[tuple[Any, ...]]) -> None:
        transport: Any = self.transport
        for fd in fds:
            transport.sendFileDescriptor(fd)
        transport.write(b"".join(frame(m) for m in messages))

    def close(self) -> Deferred[None]:
        assert self.transport is not None
        self.transport.loseConnection()
        return self.ended

    def dataReceived(self, data: bytes) -> None:
        self.buffer += data
        try:
            answers = takeFrames(self.buffer)
        except ValueError as e:
            self.owner._log.error("The sync helper said what it never says: {error}", error=str(e))
            answers = []
            assert self.transport is not None
            self.transport.loseConnection()
        for answer in answers:
            self.owner.answered(self, answer)

    def connectionLost(self, reason: Failure = Failure(ConnectionError())) -> None:
        self.owner.lost(self, reason)


class _Adopt(ServerFactory):
    def __init__(self, link: _ProcessLink) -> None:
        self.link = link

    def buildProtocol(self, addr: Any) -> _ProcessLink:
        return self.link


class _Process(ProcessProtocol):
    def __init__(self, link: _ProcessLink) -> None:
        self.link = link

    def errReceived(self, data: bytes) -> None:
        self.link.owner._log.warn("The sync helper: {text}",
                                  text=data.decode("utf-8", "replace").strip()[:STDERR_CHARS])

    def processEnded(self, reason: Failure) -> None:
        self.link.ended.callback(None)


def processStarter(reactor: HelperReactor, holding: int | None = None,
                   argv: Callable[[], list[str]] = helperArgv) -> Starter:
    """
    Start the helper as a process of C{reactor}'s, its socket as its
    descriptor 3 and C{holding} (when given) as its 4, with an empty
    environment.
    """

    def start(owner: SyncHelper) -> Link:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            fds: dict[int, Any] = {0: "w", 1: "r", 2: "r", 3: theirs.fileno()}
            if holding is not None:
                fds[4] = holding
            link = _ProcessLink(owner)
            command = argv()
            link.process = reactor.spawnProcess(
                _Process(link), command[0], command, env={}, childFDs=fds
            )
            link.process.closeStdin()
            reactor.adoptStreamConnection(ours.fileno(), socket.AF_UNIX, _Adopt(link))
            return link
        finally:
            ours.close()
            theirs.close()

    return start


@define(eq=False)
class SyncHelper:
    """
    A runner for L{vehicle.store.GroupWriter} (see the module).

    @ivar start: starts a helper (L{processStarter}).
    @ivar fallback: runs a piece of work on the writer's thread: the work
        after the steps, and every batch once the helper is given up.
    @ivar started: how many helpers were started.
    """

    _log: ClassVar[Logger] = Logger()

    start: Starter
    fallback: WorkRunner
    started: int = 0
    link: Link | None = None
    _flight: _Flight | None = None
    #: The log each key was last passed to the helper for.
    _sent: dict[int, JsonlLog] = field(factory=dict)
    _deaths: int = 0
    gaveUp: bool = False
    _stopping: bool = False
    _batches: int = 0

    def __call__(self, batch: Batch, /) -> Deferred[None]:
        if self.gaveUp:
            return self.fallback(batch)
        steps = batch.steps
        if not any(step.lines for step in steps):
            return self._finish(batch)
        if self.link is None:
            try:
                self.link = self.start(self)
            except Exception:
                self._log.failure("The sync helper did not start; syncing on the writer's thread")
                self.gaveUp = True
                return self.fallback(batch)
            self._sent.clear()
            self.started += 1
        link = self.link
        fds, messages, logs = self._encode(steps)
        flight = self._flight = _Flight(batch, Deferred(), logs)
        link.send(fds, messages)
        return flight.done

    def stop(self) -> Deferred[None]:
        """
        Let the helper go (the host is stopping; the writer has drained):
        fires once it has ended.
        """
        self._stopping = True
        if self.link is None:
            return succeed(None)
        return self.link.close()

    def lost(self, link: Link, reason: Failure) -> None:
        """
        The helper behind C{link} ended: the batch in its hand fails.
        """
        if link is not self.link:
            return
        self.link = None
        flight, self._flight = self._flight, None
        if flight is None:
            if not self._stopping:
                self._log.warn("The sync helper ended ({reason}); the next batch starts another",
                               reason=reason.getErrorMessage())
            return
        self._deaths += 1
        error = OSError(errno.EIO, "the sync helper ended with a batch in hand")
        for key, log in flight.logs.items():
            if key >= 0:
                # What it wrote is in doubt: the owner opens the log afresh.
                log.wroteElsewhere(0, 0, None, error)
        self._log.error("The sync helper ended with a batch in hand ({reason}); "
                        "its {steps} steps fail", reason=reason.getErrorMessage(),
                        steps=len(flight.batch.steps))
        if self._deaths >= MOST_DEATHS:
            self.gaveUp = True
            self._log.error("{deaths} sync helpers in a row ended without answering; "
                            "syncing on the writer's thread", deaths=self._deaths)
        flight.done.errback(Failure(error))

    # -- a batch out and its answer back -----------------------------------------

    def _encode(self, steps: list[_Step]) -> tuple[list[int], list[tuple[Any, ...]], dict[int, JsonlLog]]:
        """
        The descriptors to pass and the messages to send for C{steps}, and
        the batch's logs by their keys.
        """
        fds: list[int] = []
        messages: list[tuple[Any, ...]] = []
        self._batches += 1
        if self._batches % SWEEP_EVERY == 0:
            gone = tuple(fd for fd, log in self._sent.items() if log.fd != fd)
            if gone:
                # The helper's copies of logs closed since they were passed:
                # a deleted session's file is freed once no one holds it.
                messages.append(("forget", gone))
                for fd in gone:
                    del self._sent[fd]
        chains: dict[int, int | None] = {}
        chainNumbers: dict[int, int] = {}
        keys: dict[int, int] = {}
        logs: dict[int, tuple[int, Any]] = {}
        byKey: dict[int, JsonlLog] = {}
        wire = []
        for step in steps:
            number = chainNumbers.get(id(step.chain))
            if number is None:
                number = chainNumbers[id(step.chain)] = len(chainNumbers)
                chains[number] = step.chain.brokenAt
            lines = []
            for line in step.lines:
                log = line.log
                key = keys.get(id(log))
                if key is None:
                    refusal = log.refusal()
                    if refusal is None:
                        key = log.fd
                        assert key is not None
                        if self._sent.get(key) is not log:
                            fds.append(key)
                            messages.append(("open", key))
                            self._sent[key] = log
                    else:
                        # No descriptor: the helper raises its refusal.
                        key = -1 - len(byKey)
                    keys[id(log)] = key
                    logs[key] = (log.size, None if refusal is None else errorOf(refusal))
                    byKey[key] = log
                lines.append((key, line.phase, line.data))
            wire.append((step.index, number, tuple(lines)))
        messages.append(("batch", chains, wire, logs))
        return fds, messages, byKey

    def answered(self, link: Link, answer: tuple[Any, ...]) -> None:
        """
        The helper behind C{link} answered the batch in its hand.
        """
        flight = self._flight
        if link is not self.link or flight is None or answer[0] != "done":
            self._log.error("The sync helper answered what was not asked: {kind}",
                            kind=str(answer[0])[:40])
            link.close()
            return
        self._flight = None
        self._deaths = 0
        _, failures, reports = answer
        for key, (written, lines, syncing, failure) in reports.items():
            if key >= 0:
                flight.logs[key].wroteElsewhere(
                    written, lines, syncing, None if failure is None else errorFrom(failure)
                )
        if failures:
            byIndex = {step.index: step for step in flight.batch.steps}
            for index, failure in failures.items():
                byIndex[index].fail(errorFrom(failure))
        # A step of a chain broken before the batch (the helper reports no
        # failure of it) fails in finishBatch, which asks every step.
        self._finish(flight.batch).chainDeferred(flight.done)

    def _finish(self, batch: Batch) -> Deferred[None]:
        """
        The work after the steps (on the writer's thread, when there is
        any), then the closes.
        """
        if any(step.after is not None for step in batch.steps):
            return self.fallback(lambda: finishBatch(batch.items))
        finishBatch(batch.items)
        return succeed(None)


def writerFor(reactor: IClientReactor, helper: bool = False,
              holding: int | None = None) -> GroupWriter:
    """
    The writer of a data directory served with C{reactor}: its batches run
    on a thread of its own (started with the reactor, stopped after the
    services at shutdown), or, with C{helper}, in the sync helper's process
    (L{vehicle.store._syncer}), the thread left the work after a step and
    the batches should the helper not start; the work after a step done
    once a second at most.  On a reactor without threads, everything at
    once.

    @param holding: a descriptor the helper holds for its life (the data
        directory's lock).
    """
    threads = IReactorThreads(reactor, None)
    if threads is None:
        return GroupWriter()
    pool = ThreadPool(minthreads=1, maxthreads=1, name="vehicle-writer")
    reactor.callWhenRunning(pool.start)
    reactor.addSystemEventTrigger("during", "shutdown", pool.stop)
    thread = threadedRunner(threads, pool)
    if not (helper and IReactorProcess.providedBy(reactor) and IReactorSocket.providedBy(reactor)):
        return GroupWriter(runner=thread, clock=reactor)
    syncer = SyncHelper(processStarter(cast(HelperReactor, reactor), holding), thread)
    reactor.addSystemEventTrigger("during", "shutdown", syncer.stop)
    return GroupWriter(runner=syncer, release=syncer.stop, clock=reactor)
