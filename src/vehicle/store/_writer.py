# -*- test-case-name: tests.unit.test_writer -*-
"""
Group commit: the one writer of a data directory (L{GroupWriter}).

The reactor thread decides what a request writes (its lines, numbered and
encoded) and hands them over as one step; the writer takes every step that
arrived while its last batch ran and makes the whole batch durable with one
C{fsync} per log it touched, off the reactor thread.  Each step's
L{Deferred} fires once its own lines are durable, never before; a step
whose lines are not durable fails, with the error that stopped them.

A batch is written in phases (a line's C{phase}): every line of phase 0,
each log's lines with one C{write}, then one sync of each log they went to,
then phase 1, and so on.  A
session's request record is phase 0 and its events phase 1, so an event is
never on the disk before the record of the request that made it, however
the kernel orders its writes.

A session's logs form a L{Chain}: its lines follow one another, so when one
of them fails (its write, or the sync of its log), the chain breaks there,
and that step and every later step of the chain fail with it (their lines
were numbered after the lost ones: written, they would leave a gap).  A
write carries every line of its log in the phase, so when it fails, every
step with a line in it fails, the first of them breaking the chain.  The
steps of the chain before the break, and every other chain, go on.  The
owner opens its logs afresh, with a new chain.

On a reactor without threads (a test's memory reactor) the writer runs
each batch at once, on the caller's thread: the same code, synchronous.
"""

from __future__ import annotations

from typing import Callable, ClassVar, Hashable, Protocol, Sequence, TypeVar

from attrs import define, field, frozen
from twisted.internet.defer import Deferred, fail, succeed
from twisted.internet.interfaces import (
    IDelayedCall,
    IReactorFromThreads,
    IReactorTime,
)
from twisted.internet.threads import deferToThreadPool
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.python.threadpool import ThreadPool

from vehicle._syncd import Chain, StepMarks, inPhases, runPhases
from vehicle._timers import cancelIfActive
from vehicle.store._jsonl import JsonlLog


T = TypeVar("T")


class Runner(Protocol):
    """
    Runs a batch: on the writer's own thread, in the sync helper's process
    (L{vehicle.store._syncer}), or at once.  A L{Batch} is called to run it
    on the caller's thread.
    """

    def __call__(self, work: Batch, /) -> Deferred[None]: ...


def runAtOnce(work: Callable[[], None]) -> Deferred[None]:
    """
    Run C{work} now, on this thread (a reactor without threads).  A bug
    becomes a failed L{Deferred}; a C{BaseException} that is not an
    C{Exception} (a test's simulated kill) goes on up, as it would have
    from a write made in place.
    """
    try:
        work()
    except Exception:
        return fail()
    return succeed(None)


class _AtOnce:
    """
    The first callback of a step's L{Deferred} in L{raiseAtOnce}: while
    C{now}, it keeps a failure to raise (and the L{Deferred} goes on with
    L{None}); after, it lets every result by.
    """

    def __init__(self) -> None:
        self.now = True
        self.refused: Failure | None = None

    def __call__(self, result: object) -> object:
        if self.now and isinstance(result, Failure):
            self.refused = result
            return None
        return result


def raiseAtOnce(written: Deferred[T]) -> Deferred[T]:
    """
    What C{written} says, on a L{Deferred} of the caller's own, unless it
    has failed already (a writer that runs at once refused it): then its
    failure is raised here and now, as a write made in place would have
    raised it, so that the caller does nothing more.

    Cancelling the caller's L{Deferred} (its client went away) ends only
    the caller's wait: the write goes on, and what follows it (the request
    remembered, its events told) still happens.  A write is never taken
    for refused because nobody waits for it any more.
    """
    early = _AtOnce()
    written.addBoth(early)
    early.now = False
    if early.refused is not None:
        early.refused.raiseException()
    theirs: Deferred[T] = Deferred()

    def settled(result: T | Failure) -> None:
        if theirs.called:
            return  # cancelled: a failure nobody waits for is not an error here
        if isinstance(result, Failure):
            theirs.errback(result)
        else:
            theirs.callback(result)

    written.addBoth(settled)
    return theirs


def writeAtOnce(lines: Sequence[Line], sync: bool = True) -> None:
    """
    Write C{lines} in place and make them durable, phase by phase (a
    session read back at start, with no writer yet).

    @param sync: C{False} in a session's folder while it is built aside:
        nobody reads it until its logs are synced, before it is published.
    @raise OSError: a write or a sync failed (the log refuses more).
    """
    for phase in inPhases((None, line) for line in lines):
        byLog: dict[JsonlLog, list[bytes]] = {}
        for _, line in phase:
            byLog.setdefault(line.log, []).append(line.data)
        for log, data in byLog.items():
            log.write(*data)
        if sync:
            for log in byLog:
                log.sync()


@frozen
class Line:
    """
    One line for a log, encoded (L{JsonlLog.line}), and the phase of its
    batch it is written in.
    """

    log: JsonlLog
    data: bytes
    phase: int = 0


#: Something to do once a step is durable, on the writer's thread (a
#: session's C{meta.json} rewritten after a rename): its key, and the work.
#: Of the steps of one batch with the same key, only the last one that was
#: made durable has its work done (the same file, rewritten once).  A
#: writer with a clock does it later, once for all the steps of a second.
After = tuple[Hashable, Callable[[], None]]


@define
class _Step(StepMarks):
    index: int
    chain: Chain
    lines: tuple[Line, ...]
    done: Deferred[None]
    after: After | None = None
    #: Work to do later, once this step is durable (a writer with a clock).
    later: After | None = None
    failure: BaseException | None = None
    #: What the C{after} work raised, under the work's key.
    afterFailure: tuple[Hashable, Failure] | None = None


@define
class _Close:
    logs: tuple[JsonlLog, ...]
    done: Deferred[None]


@frozen
class Batch:
    """
    The steps (and closes) a runner makes durable together; called, it runs
    on the caller's thread (L{runBatch}).

    @ivar steps: the steps among C{items}, in order.
    """

    items: Sequence[_Step | _Close]
    steps: list[_Step] = field(init=False)

    @steps.default
    def _steps(self) -> list[_Step]:
        return [s for s in self.items if isinstance(s, _Step)]

    def __call__(self) -> None:
        runBatch(self)


def runBatch(batch: Batch) -> None:
    """
    Make a batch durable, phase by phase (L{runPhases}), then finish it
    (L{finishBatch}).  Runs on the writer's thread; it only marks the
    steps (the reactor thread fires their L{Deferred}s).
    """
    runPhases(batch.steps)
    finishBatch(batch.items)


def finishBatch(batch: Sequence[_Step | _Close]) -> None:
    """
    After a batch's lines: the C{after} work of the steps made durable
    (only the last of each key), then the closes.  Every step is asked
    whether it is refused, those with no line too: a step of a chain that
    broke before it fails here, whoever wrote the batch.
    """
    last: dict[Hashable, _Step] = {}
    for step in batch:
        if isinstance(step, _Step) and not step.refused() and step.after is not None:
            last[step.after[0]] = step
    for key, step in last.items():
        assert step.after is not None
        try:
            step.after[1]()
        except Exception:
            step.afterFailure = key, Failure()
    for close in batch:
        if isinstance(close, _Close):
            for log in close.logs:
                try:
                    log.close()
                except OSError:
                    # Nothing is lost: whatever the log held was synced or refused.
                    pass


@define(eq=False)
class GroupWriter:
    """
    The writer of a data directory: steps in, batches out (see the module).

    @ivar runner: how a batch is run (L{threadedRunner}, or L{runAtOnce}).
    @ivar release: with a runner that holds something (the sync helper's
        process), how L{stop} lets it go.
    @ivar clock: with one, the work after a step (L{After}) waits
        C{laterSeconds} and is done once for every step of its key in that
        time; without, it is done in the step's batch.
    @ivar batches: how many batches it has run.
    @ivar steps: how many steps it has taken.
    """

    _log: ClassVar[Logger] = Logger()

    runner: Runner = runAtOnce
    release: Callable[[], Deferred[None]] | None = None
    clock: IReactorTime | None = None
    laterSeconds: float = 1.0
    batches: int = 0
    steps: int = 0
    _queue: list[_Step | _Close] = field(factory=list)
    #: A batch is being run (or its steps answered).
    _running: bool = False
    #: L{_pump} is under way further up this thread's stack.
    _pumping: bool = False
    _idle: list[Deferred[None]] = field(factory=list)
    #: Work waiting for its time, by key (the newest of each).
    _later: dict[Hashable, Callable[[], None]] = field(factory=dict)
    _timer: IDelayedCall | None = None
    #: Drained (the host is stopping): work after a step is done in its
    #: batch from now on, none left waiting on the clock.
    _drained: bool = False

    def write(
        self, chain: Chain, lines: Sequence[Line], after: After | None = None
    ) -> Deferred[None]:
        """
        Make C{lines} durable, after every line handed over before them.

        @param chain: the chain the lines belong to.
        @param after: work to do once they are durable (see L{After}); its
            failure is logged, not the step's.
        @return: fires once the lines are durable; fails with the C{OSError}
            (or C{ValueError}: a closed log) that kept them from being so,
            or with the error of a step before them in C{chain}.
        """
        self.steps += 1
        step = _Step(index=self.steps, chain=chain, lines=tuple(lines), done=Deferred())
        if self.clock is None or self._drained:
            step.after = after
        else:
            step.later = after
        self._queue.append(step)
        self._pump()
        return step.done

    def takeLater(self, key: Hashable) -> Callable[[], None] | None:
        """
        Take back the work waiting for its time under C{key}, not yet handed
        to a batch (its file is about to move: the caller does it first),
        or L{None}.  Work already handed to a batch is done before any step
        handed over after it is answered.
        """
        work = self._later.pop(key, None)
        if not self._later:
            cancelIfActive(self._timer)
            self._timer = None
        return work

    def close(self, *logs: JsonlLog) -> Deferred[None]:
        """
        Close C{logs} once every line handed over before is written.
        """
        close = _Close(logs=logs, done=Deferred())
        self._queue.append(close)
        self._pump()
        return close.done

    def drain(self) -> Deferred[None]:
        """
        Fires once everything handed over is done, the work waiting for its
        time included (the host is stopping); from now on the work after a
        step is done in the step's batch, none left waiting on the clock.
        """
        self._drained = True
        self._doLater()
        if self._quiet:
            return succeed(None)
        waiter: Deferred[None] = Deferred()
        self._idle.append(waiter)
        # A step answered meanwhile may have left work for later: drained too.
        return waiter.addCallback(lambda _: self.drain())

    def stop(self) -> Deferred[None]:
        """
        L{drain}, then let the runner go (L{release}, if it has one):
        fires once it has.
        """
        release, drained = self.release, self.drain()
        if release is not None:
            drained.addCallback(lambda _: release())
        return drained

    @property
    def _quiet(self) -> bool:
        """
        No batch running, none waiting.
        """
        return not self._running and not self._queue

    def _pump(self) -> None:
        if self._pumping:
            return
        self._pumping = True
        try:
            while not self._running and self._queue:
                batch, self._queue = self._queue, []
                self._running = True
                self.batches += 1
                try:
                    ran = self.runner(Batch(batch))
                except BaseException:
                    self._running = False
                    raise
                ran.addBoth(self._ran, batch)
        finally:
            self._pumping = False
        if self._quiet:
            idle, self._idle = self._idle, []
            for waiter in idle:
                waiter.callback(None)

    def _ran(self, result: object, batch: list[_Step | _Close]) -> None:
        """
        The batch ran: answer its steps, in the order they came, then take
        the next batch.  Steps handed over meanwhile wait for the next one.
        """
        broken = result if isinstance(result, Failure) else None
        for item in batch:
            if isinstance(item, _Close):
                item.done.callback(None)
            elif broken is not None:
                # Whatever stopped the batch, none of it is known durable.
                item.fail(broken.value or RuntimeError("the batch stopped"))
                item.done.errback(broken)
            else:
                if item.afterFailure is not None:
                    self._logAfter(*item.afterFailure)
                if item.failure is not None:
                    item.done.errback(Failure(item.failure))
                else:
                    if item.later is not None:
                        self._keepLater(item.later)
                    item.done.callback(None)
        self._running = False
        self._pump()

    def _keepLater(self, later: After) -> None:
        assert self.clock is not None
        key, work = later
        self._later[key] = work
        if self._timer is None:
            self._timer = self.clock.callLater(self.laterSeconds, self._doLater)

    def _doLater(self) -> None:
        """
        The work kept for later goes into the next batch, after what is
        queued already.
        """
        cancelIfActive(self._timer)
        self._timer = None
        later, self._later = self._later, {}
        for key, work in later.items():
            self.steps += 1
            self._queue.append(_Step(index=self.steps, chain=Chain(), lines=(),
                                     done=Deferred(), after=(key, work)))
        self._pump()

    def _logAfter(self, key: Hashable, failure: Failure) -> None:
        if isinstance(failure.value, OSError):
            self._log.warn("Work after a durable write ({key}) failed: {error}",
                           key=str(key), error=str(failure.value))
        else:
            self._log.failure("Work after a durable write ({key}) failed", failure, key=str(key))


#: A piece of work, and what runs it somewhere and says when it is done.
Work = Callable[[], None]
WorkRunner = Callable[[Work], Deferred[None]]


def threadedRunner(reactor: IReactorFromThreads, pool: ThreadPool) -> WorkRunner:
    """
    A runner that runs each batch in C{pool} (one thread: the writer's).
    """

    def run(work: Callable[[], None]) -> Deferred[None]:
        return deferToThreadPool(reactor, pool, work)

    return run
