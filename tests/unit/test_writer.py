"""
The group writer (L{vehicle.store.GroupWriter}) on its own: batches, one
sync per log per batch, phases in order, a failure breaking only its chain,
the work after a step, closes, the runners; and L{vehicle.store.raiseAtOnce},
L{vehicle.store.writeAtOnce}, L{vehicle.store.writerFor}.
"""

from __future__ import annotations

import errno
import os
import queue
import threading
from pathlib import Path
from typing import Any, Callable

from twisted.internet.defer import CancelledError, Deferred
from twisted.python.failure import Failure
from twisted.internet.interfaces import IReactorThreads
from twisted.internet.task import Clock
from twisted.internet.testing import MemoryReactorClock
from twisted.logger import capturedLogs
from twisted.trial.unittest import SynchronousTestCase
from zope.interface import implementer

from vehicle.store import (
    Chain,
    GroupWriter,
    JsonlLog,
    Line,
    OsFiles,
    raiseAtOnce,
    runAtOnce,
    useFiles,
    writeAtOnce,
    writerFor,
)

from vehicle.store import _writer

from tests.support._crashfs import Crash, CrashFiles
from tests.support._hints import assertAnnotationsResolve
from tests.support.batches import HeldBatches
from tests.support.syncloop import HeldThroughHelper


class _Calls(OsFiles):
    """
    The real layer, noting each write and sync by the file's name.
    """

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def write(self, fd: int, data: bytes | memoryview) -> int:
        self.calls.append(("write", os.path.basename(os.readlink(f"/proc/self/fd/{fd}"))))
        return super().write(fd, data)

    def fsync(self, fd: int) -> None:
        self.calls.append(("fsync", os.path.basename(os.readlink(f"/proc/self/fd/{fd}"))))
        super().fsync(fd)


class WriterTests(SynchronousTestCase):
    """
    Steps in, batches out.
    """

    def setUp(self) -> None:
        self.root = Path(self.mktemp()).absolute()
        self.root.mkdir(parents=True)
        self.held = HeldBatches()
        self.writer = GroupWriter(runner=self.held)

    def log(self, name: str) -> JsonlLog:
        log, _ = JsonlLog.open(self.root / name)
        self.addCleanup(log.close)
        return log

    def calls(self) -> _Calls:
        layer = _Calls()
        self.addCleanup(useFiles, useFiles(layer))
        return layer

    def crash(self) -> CrashFiles:
        layer = CrashFiles(self.root)
        layer.install(self.patch)
        self.addCleanup(layer.uninstall)
        return layer

    def line(self, log: JsonlLog, n: int, phase: int = 0) -> Line:
        return Line(log, log.line({"n": n}), phase)

    def lines(self, name: str) -> list[int]:
        return [int(x.split(b":")[1].rstrip(b"}")) for x in (self.root / name).read_bytes().splitlines()]

    def test_stepsWaitForTheBatchThatSyncsThem(self) -> None:
        """
        A step is answered only once its batch has run (written and
        synced); the steps handed over while a batch runs make the next
        batch, with one write and one sync of their log for all of them.
        """
        a = self.log("a")
        layer = self.calls()
        first = self.writer.write(Chain(), [self.line(a, 1)])
        self.assertNoResult(first)
        later = [self.writer.write(Chain(), [self.line(a, n)]) for n in (2, 3)]
        self.assertEqual(len(self.held.waiting), 1)
        self.held.release()
        self.successResultOf(first)
        for d in later:
            self.assertNoResult(d)
        self.assertEqual(layer.calls, [("write", "a"), ("fsync", "a")])
        self.held.release()
        for d in later:
            self.successResultOf(d)
        self.assertEqual(layer.calls[2:], [("write", "a"), ("fsync", "a")])
        self.assertEqual((self.writer.batches, self.writer.steps), (2, 3))
        self.assertEqual(self.lines("a"), [1, 2, 3])

    def test_phasesInOrder(self) -> None:
        """
        Every line of phase 0 is written and synced before any line of
        phase 1 is written, whatever order the steps came in; within a
        phase, each log's lines go with one write, in the order of their
        steps.
        """
        records, events = self.log("records"), self.log("events")
        layer = self.calls()
        self.writer.write(Chain(), [])  # the first batch, held
        chain = Chain()
        done = [
            self.writer.write(chain, [self.line(records, 1), self.line(events, 1, 1)]),
            self.writer.write(chain, [self.line(events, 2, 1)]),
            self.writer.write(chain, [self.line(records, 2), self.line(events, 3, 1)]),
        ]
        self.held.releaseAll()
        for d in done:
            self.successResultOf(d)
        self.assertEqual(layer.calls, [
            ("write", "records"), ("fsync", "records"), ("write", "events"), ("fsync", "events"),
        ])
        self.assertEqual(self.lines("events"), [1, 2, 3])

    def test_syncFailureBreaksOnlyItsChain(self) -> None:
        """
        A failed sync fails the steps whose lines it should have made
        durable, and the later steps of their chain, in this batch and
        after; another chain's steps are made durable; a new chain of the
        same owner is taken again.
        """
        layer = self.crash()
        r1, e1, r2, e2 = (self.log(n) for n in ("r1", "e1", "r2", "e2"))
        one, two = Chain(), Chain()
        self.writer.write(Chain(), [])
        before = self.writer.write(one, [self.line(r1, 1)])
        lost = self.writer.write(one, [self.line(r1, 2), self.line(e1, 1, 1)])
        other = self.writer.write(two, [self.line(r2, 1), self.line(e2, 1, 1)])
        after = self.writer.write(one, [self.line(r1, 3)])
        layer.fail("fsync", errno.EIO, path=self.root / "e1")
        self.held.releaseAll()
        self.successResultOf(before)
        self.successResultOf(other)
        for d in (lost, after):
            self.assertEqual(self.failureResultOf(d, OSError).value.errno, errno.EIO)
        self.assertEqual((one.brokenAt, two.brokenAt), (3, None))
        again = self.writer.write(one, [self.line(r1, 4)])
        self.held.release()
        self.failureResultOf(again, OSError)
        fresh = self.log("r1-again")
        self.writer.write(Chain(), [self.line(fresh, 1)])
        self.held.release()
        self.assertEqual(self.lines("r2"), [1])
        self.assertEqual(self.lines("e2"), [1])

    def test_writeFailureKeepsWhatWentBefore(self) -> None:
        """
        A failed write fails every step with a line in it (a log's lines
        of a batch go with one write) and the chain's later steps, in
        another log too; what an earlier batch wrote is kept; nothing of
        the failed write is left in the file.
        """
        layer = self.crash()
        a, b = self.log("a"), self.log("b")
        chain = Chain()
        kept = self.writer.write(chain, [self.line(a, 1)])
        refused = self.writer.write(chain, [self.line(a, 2)])
        alsoRefused = self.writer.write(chain, [self.line(a, 3)])
        behind = self.writer.write(chain, [self.line(b, 1)])
        self.held.release()
        self.successResultOf(kept)
        layer.fail("write", errno.ENOSPC, path=self.root / "a")
        self.held.releaseAll()
        for d in (refused, alsoRefused, behind):
            self.assertEqual(self.failureResultOf(d, OSError).value.errno, errno.ENOSPC)
        self.assertEqual(chain.brokenAt, 2)
        self.assertEqual((self.lines("a"), self.lines("b")), ([1], []))

    def test_earlierStepsOfABrokenChainGoOn(self) -> None:
        """
        A step taken before the one that broke its chain goes on to its
        later phases (its events after its record); the steps after the
        break write nothing more.
        """
        layer = self.crash()
        records, events = self.log("records"), self.log("events")
        chain = Chain()
        self.writer.write(Chain(), [])
        other = self.log("other")
        first = self.writer.write(chain, [self.line(records, 1), self.line(events, 1, 1)])
        broken = self.writer.write(chain, [self.line(other, 1), self.line(events, 2, 1)])
        layer.fail("write", errno.EIO, path=self.root / "other")
        self.held.releaseAll()
        self.successResultOf(first)
        self.failureResultOf(broken, OSError)
        self.assertEqual((self.lines("records"), self.lines("events"), self.lines("other")),
                         ([1], [1], []))

    def test_aSyncFailureBreaksTheChainAtItsFirstStep(self) -> None:
        """
        A sync that fails covers several steps of a chain: the chain breaks
        at the first of them, so a step of the chain between them (its
        lines in a later phase only) is refused too: its event would follow
        the lost ones.
        """
        layer = self.crash()
        records, events = self.log("records"), self.log("events")
        chain = Chain()
        self.writer.write(Chain(), [])
        first = self.writer.write(chain, [self.line(records, 1), self.line(events, 1, 1)])
        between = self.writer.write(chain, [self.line(events, 2, 1)])
        last = self.writer.write(chain, [self.line(records, 2), self.line(events, 3, 1)])
        layer.fail("fsync", errno.EIO, path=self.root / "records")
        self.held.releaseAll()
        for d in (first, between, last):
            self.failureResultOf(d, OSError)
        self.assertEqual(chain.brokenAt, 2)
        self.assertEqual(self.lines("events"), [])

    def test_aLaterFailureDoesNotMoveTheBreakOn(self) -> None:
        """
        A chain broken by a write goes on breaking at the earliest step
        that failed: a sync failing afterwards for an earlier step moves
        the break back to it, never forward.
        """
        layer = self.crash()
        records, events = self.log("records"), self.log("events")
        chain = Chain()
        self.writer.write(Chain(), [])
        other = self.log("other")
        first = self.writer.write(chain, [self.line(records, 1), self.line(events, 1, 1)])
        between = self.writer.write(chain, [self.line(events, 2, 1)])
        last = self.writer.write(chain, [self.line(other, 1)])
        layer.fail("write", errno.ENOSPC, path=self.root / "other")
        layer.fail("fsync", errno.EIO, path=self.root / "records")
        self.held.releaseAll()
        self.assertEqual(self.failureResultOf(first, OSError).value.errno, errno.EIO)
        self.assertEqual(self.failureResultOf(last, OSError).value.errno, errno.ENOSPC)
        self.failureResultOf(between, OSError)
        self.assertEqual((chain.brokenAt, self.lines("events")), (2, []))

    def test_aRefusedStepStopsOnlyItself(self) -> None:
        """
        A step refused (its chain broken before the batch) is passed over:
        the steps after it in the batch are written.
        """
        a = self.log("a")
        broken = Chain(brokenAt=0, failure=OSError(errno.EIO, "earlier"))
        self.writer.write(Chain(), [])
        refused = self.writer.write(broken, [self.line(a, 1)])
        kept = self.writer.write(Chain(), [self.line(a, 2)])
        self.held.releaseAll()
        self.failureResultOf(refused, OSError)
        self.successResultOf(kept)
        self.assertEqual(self.lines("a"), [2])

    def test_aLogOfRefusedStepsOnlyStopsNoOtherLog(self) -> None:
        """
        When every step with a line for one log in a phase is refused, that
        log is passed over: the other logs of the phase are written.
        """
        a, b = self.log("a"), self.log("b")
        broken = Chain(brokenAt=0, failure=OSError(errno.EIO, "earlier"))
        self.writer.write(Chain(), [])
        refused = self.writer.write(broken, [self.line(a, 1)])
        kept = self.writer.write(Chain(), [self.line(b, 1)])
        self.held.releaseAll()
        self.failureResultOf(refused, OSError)
        self.successResultOf(kept)
        self.assertEqual((self.lines("a"), self.lines("b")), ([], [1]))

    def test_aFailedWriteWritesNothingMoreOfItsStep(self) -> None:
        """
        A step whose line could not be written writes none of its other
        lines; the steps after it in the batch are written.
        """
        layer = self.crash()
        a, b = self.log("a"), self.log("b")
        self.writer.write(Chain(), [])
        failed = self.writer.write(Chain(), [self.line(a, 1), self.line(b, 1)])
        kept = self.writer.write(Chain(), [self.line(b, 2)])
        layer.fail("write", errno.ENOSPC, path=self.root / "a")
        self.held.releaseAll()
        self.failureResultOf(failed, OSError)
        self.successResultOf(kept)
        self.assertEqual((self.lines("a"), self.lines("b")), ([], [2]))

    def test_aStepKeepsItsFirstError(self) -> None:
        """
        A step whose lines two failed syncs covered fails with the first.
        """
        layer = self.crash()
        a, b = self.log("a"), self.log("b")
        self.writer.write(Chain(), [])
        both = self.writer.write(Chain(), [self.line(a, 1), self.line(b, 1)])
        layer.fail("fsync", errno.EIO, path=self.root / "a")
        layer.fail("fsync", errno.ENOSPC, path=self.root / "b")
        self.held.releaseAll()
        self.assertEqual(self.failureResultOf(both, OSError).value.errno, errno.EIO)

    def test_aLineIsOfTheFirstPhase(self) -> None:
        """
        A line names no phase: it is written with phase 0's.
        """
        a = self.log("a")
        layer = self.calls()
        self.writer.write(Chain(), [])
        self.writer.write(Chain(), [Line(a, a.line({"n": 1}))])
        self.writer.write(Chain(), [Line(a, a.line({"n": 2}), 0)])
        self.held.releaseAll()
        self.assertEqual(layer.calls, [("write", "a"), ("fsync", "a")])

    def test_aCloseThatFailsStopsNothing(self) -> None:
        """
        A close the system refuses leaves the batch's other work done.
        """
        a = self.log("a")
        failing: Any = _RefusingClose()
        self.writer.write(Chain(), [])
        closed = self.writer.close(failing, a)
        written = self.writer.write(Chain(), [self.line(a, 1)])
        self.held.releaseAll()
        self.successResultOf(closed)
        self.successResultOf(written)
        self.assertTrue(failing.tried)
        self.assertRaises(ValueError, a.sync)

    def test_deepHandOversStayFlat(self) -> None:
        """
        A writer running at once whose answers hand over more steps, over
        and over, runs them one after the other, not inside each other:
        thousands of them need no deeper stack.
        """
        left = [3000]

        def again(_: None) -> None:
            left[0] -= 1
            if left[0]:
                # Handed over while a batch is answered: its answer comes
                # in the next batch, this callback already on it.
                self.writer.write(Chain(), []).addCallback(again)

        self.writer.write(Chain(), []).addCallback(again)
        self.writer.runner = runAtOnce
        self.held.release()
        self.assertEqual((left[0], self.writer.batches), (0, 3000))

    def test_afterOncePerKeyForWhatWasDurable(self) -> None:
        """
        The work after a step runs once it is durable, after the batch's
        syncs, once per key (the last durable step's); a refused step's
        work never runs.
        """
        a = self.log("a")
        layer = self.calls()
        ran: list[str] = []

        def work(name: str) -> tuple[str, Callable[[], None]]:
            return name[0], lambda: (ran.append(name), layer.calls.append(("after", name)))[0]

        self.writer.write(Chain(), [])
        broken = Chain(brokenAt=0, failure=OSError(errno.EIO, "earlier"))
        self.writer.write(Chain(), [self.line(a, 1)], after=work("k1"))
        self.writer.write(Chain(), [self.line(a, 2)], after=work("k2"))
        self.writer.write(Chain(), [self.line(a, 3)], after=work("j1"))
        refused = self.writer.write(broken, [self.line(a, 4)], after=work("k3"))
        self.held.releaseAll()
        self.failureResultOf(refused, OSError)
        self.assertEqual(ran, ["k2", "j1"])
        self.assertEqual(layer.calls[-3:], [("fsync", "a"), ("after", "k2"), ("after", "j1")])

    def test_afterFailureIsLogged(self) -> None:
        """
        Work after a step that fails does not fail the step: a disk's
        refusal is a warning, anything else a logged failure.
        """
        a = self.log("a")

        def refuse() -> None:
            raise OSError(errno.ENOSPC, "full")

        def bug() -> None:
            raise ZeroDivisionError()

        with capturedLogs() as events:
            one = self.writer.write(Chain(), [self.line(a, 1)], after=("meta", refuse))
            self.held.release()
            two = self.writer.write(Chain(), [self.line(a, 2)], after=("meta", bug))
            self.held.release()
        self.successResultOf(one)
        self.successResultOf(two)
        self.assertEqual([e["log_level"].name for e in events], ["warn", "critical"])
        self.assertEqual([e["key"] for e in events], ["meta", "meta"])
        self.assertIn("full", events[0]["error"])
        self.assertEqual(len(self.flushLoggedErrors(ZeroDivisionError)), 1)

    def test_laterOnceForItsSecond(self) -> None:
        """
        A writer with a clock does the work after its steps later: once a
        second at most, the newest of each key, for the steps made durable
        in that time; never a refused step's.
        """
        clock = Clock()
        writer = GroupWriter(runner=self.held, clock=clock)
        a = self.log("a")
        ran: list[str] = []
        broken = Chain(brokenAt=0, failure=OSError(errno.EIO, "earlier"))
        writer.write(Chain(), [self.line(a, 1)], after=("k", lambda: ran.append("k1")))
        self.held.release()
        writer.write(Chain(), [self.line(a, 2)], after=("k", lambda: ran.append("k2")))
        refused = writer.write(broken, [self.line(a, 3)], after=("k", lambda: ran.append("k3")))
        self.held.releaseAll()
        self.failureResultOf(refused, OSError)
        clock.advance(0.9)
        self.assertEqual((ran, self.held.waiting), ([], []))
        clock.advance(0.1)
        self.assertEqual(writer.steps, 4)
        self.held.release()
        self.assertEqual(ran, ["k2"])
        clock.advance(5)
        self.assertEqual((ran, self.held.waiting), (["k2"], []))

    def test_takeLater(self) -> None:
        """
        Work taken back before its time is the caller's: the writer does
        not do it; taking it again, or taking a key with nothing waiting,
        gives nothing.
        """
        clock = Clock()
        writer = GroupWriter(runner=self.held, clock=clock)
        ran: list[str] = []
        writer.write(Chain(), [], after=("k", lambda: ran.append("k")))
        writer.write(Chain(), [], after=("j", lambda: ran.append("j")))
        self.held.releaseAll()
        taken = writer.takeLater("k")
        self.assertIsNone(writer.takeLater("k"))
        self.assertIsNone(writer.takeLater("nothing"))
        clock.advance(1)
        self.held.releaseAll()
        self.assertEqual(ran, ["j"])
        assert taken is not None
        taken()
        self.assertEqual(ran, ["j", "k"])

    def test_takeTheLastLater(self) -> None:
        """
        Taking back the only work waiting stops the clock's call for it.
        """
        clock = Clock()
        writer = GroupWriter(runner=self.held, clock=clock)
        writer.write(Chain(), [], after=("k", lambda: None))
        self.held.releaseAll()
        self.assertEqual(len(clock.getDelayedCalls()), 1)
        writer.takeLater("k")
        self.assertEqual(clock.getDelayedCalls(), [])

    def test_drainDoesWhatWaits(self) -> None:
        """
        Draining does the work waiting for its time, then fires.
        """
        clock = Clock()
        writer = GroupWriter(runner=self.held, clock=clock)
        ran: list[str] = []
        writer.write(Chain(), [], after=("k", lambda: ran.append("k")))
        self.held.release()
        drained = writer.drain()
        self.assertNoResult(drained)
        self.assertEqual(clock.getDelayedCalls(), [])
        self.held.release()
        self.successResultOf(drained)
        self.assertEqual(ran, ["k"])

    def test_drainDoesWhatABatchLeft(self) -> None:
        """
        Work for later left by a step answered while draining (it was
        still being written when the drain began) is done before the drain
        fires: nothing waits on the clock after it.
        """
        clock = Clock()
        writer = GroupWriter(runner=self.held, clock=clock)
        ran: list[str] = []
        writer.write(Chain(), [], after=("k", lambda: ran.append("k")))
        drained = writer.drain()
        self.held.release()
        self.assertNoResult(drained)
        self.held.release()
        self.successResultOf(drained)
        self.assertEqual((ran, clock.getDelayedCalls()), (["k"], []))

    def test_afterDrainNothingWaits(self) -> None:
        """
        Once drained (the host stops), the work after a step is done in
        its batch: nothing is left on the clock.
        """
        clock = Clock()
        writer = GroupWriter(runner=self.held, clock=clock)
        self.successResultOf(writer.drain())
        ran: list[str] = []
        written = writer.write(Chain(), [], after=("k", lambda: ran.append("k")))
        self.held.release()
        self.successResultOf(written)
        self.assertEqual((ran, clock.getDelayedCalls()), (["k"], []))

    def test_closeAfterTheWritesBeforeIt(self) -> None:
        """
        A close handed over after a step closes the log once that step's
        line is written and synced.
        """
        a = self.log("a")
        self.writer.write(Chain(), [])
        written = self.writer.write(Chain(), [self.line(a, 1)])
        closed = self.writer.close(a)
        self.assertNoResult(closed)
        self.held.releaseAll()
        self.successResultOf(written)
        self.successResultOf(closed)
        self.assertEqual(self.lines("a"), [1])
        self.assertRaises(ValueError, a.sync)

    def test_drain(self) -> None:
        """
        Drained: at once when idle; else once the last batch is answered.
        """
        self.successResultOf(self.writer.drain())
        self.writer.write(Chain(), [])
        self.writer.write(Chain(), [])
        drained = self.writer.drain()
        self.held.release()
        self.assertNoResult(drained)
        self.held.release()
        self.successResultOf(drained)

    def test_drainedTwiceWhileABatchRuns(self) -> None:
        """
        Drained again while a batch runs (a second stop, say): neither
        fires before the batch is answered.
        """
        self.writer.write(Chain(), [])
        first = self.writer.drain()
        second = self.writer.drain()
        self.assertNoResult(first)
        self.assertNoResult(second)
        self.held.release()
        self.successResultOf(first)
        self.successResultOf(second)

    def test_answersInOrderThenTheNextBatch(self) -> None:
        """
        A batch's steps are answered in the order they came; a step handed
        over while they are answered waits for the next batch, after all of
        them.
        """
        seen: list[str] = []
        self.writer.write(Chain(), [])
        first = self.writer.write(Chain(), [])
        second = self.writer.write(Chain(), [])

        def handOver(_: None) -> None:
            seen.append("first")
            self.writer.write(Chain(), []).addCallback(lambda _: seen.append("third"))

        first.addCallback(handOver)
        second.addCallback(lambda _: seen.append("second"))
        self.held.release()
        self.held.release()
        self.assertEqual(seen, ["first", "second"])
        self.held.release()
        self.assertEqual(seen, ["first", "second", "third"])
        self.assertEqual(self.held.waiting, [])

    def test_failedBatchFailsItsStepsAndChains(self) -> None:
        """
        A batch that stops on a bug fails every step in it, and breaks
        their chains: nothing of them is known durable.
        """
        writer = GroupWriter()
        chain = Chain()

        def run(work: Callable[[], None]) -> Deferred[None]:
            return runAtOnce(lambda: 1 // 0 and None)

        writer.runner = run
        failed = writer.write(chain, [])
        self.failureResultOf(failed, ZeroDivisionError)
        self.assertEqual(chain.brokenAt, 1)
        writer.runner = runAtOnce
        self.failureResultOf(writer.write(chain, []), ZeroDivisionError)
        self.successResultOf(writer.write(Chain(), []))


class RunAtOnceTests(SynchronousTestCase):
    """
    The runner of a reactor without threads.
    """

    def test_done(self) -> None:
        """
        The work is done before it returns.
        """
        ran: list[int] = []
        self.successResultOf(runAtOnce(lambda: ran.append(1)))
        self.assertEqual(ran, [1])

    def test_bug(self) -> None:
        """
        A bug is a failed L{Deferred}.
        """
        self.failureResultOf(runAtOnce(lambda: 1 // 0 and None), ZeroDivisionError)

    def test_killGoesUp(self) -> None:
        """
        A simulated kill goes up to the caller, as from a write in place,
        and the writer is not left running: a later step is taken.
        """
        writer = GroupWriter()
        log: Any = _KillingLog()
        self.assertRaises(Crash, writer.write, Chain(), [Line(log, b"x")])
        self.successResultOf(writer.write(Chain(), []))


class _RefusingClose:
    """
    A log whose close the system refuses.
    """

    tried = False

    def close(self) -> None:
        self.tried = True
        raise OSError(errno.EIO, "no")


class _KillingLog:
    """
    A log whose write is a kill.
    """

    def write(self, data: bytes) -> None:
        raise Crash("killed")


class RaiseAtOnceTests(SynchronousTestCase):
    """
    L{raiseAtOnce}: a refusal now is raised now.
    """

    def test_failedRaises(self) -> None:
        """
        A failed L{Deferred} raises its error here.
        """
        d: Deferred[int] = Deferred()
        d.errback(OSError(errno.EIO, "no"))
        self.assertRaises(OSError, raiseAtOnce, d)

    def test_doneGoesOn(self) -> None:
        """
        A fired L{Deferred} keeps its result.
        """
        d: Deferred[int] = Deferred()
        d.callback(7)
        self.assertEqual(self.successResultOf(raiseAtOnce(d)), 7)

    def test_laterFailureStaysInTheDeferred(self) -> None:
        """
        A failure that comes later is the L{Deferred}'s, not raised.
        """
        d: Deferred[int] = Deferred()
        theirs = raiseAtOnce(d)
        d.errback(OSError(errno.EIO, "later"))
        self.failureResultOf(theirs, OSError)

    def test_laterSuccess(self) -> None:
        """
        A result that comes later is the caller's L{Deferred}'s.
        """
        d: Deferred[int] = Deferred()
        theirs = raiseAtOnce(d)
        d.callback(7)
        self.assertEqual(self.successResultOf(theirs), 7)

    def test_cancelledCallerLeavesTheWrite(self) -> None:
        """
        Cancelling the caller's L{Deferred} (its client went away) ends
        only the caller's wait: the write's own L{Deferred} is not
        cancelled, what was chained to it before runs with its result, and
        a later failure is nobody's error.
        """
        for result in (7, Failure(OSError(errno.EIO, "later"))):
            d: Deferred[int] = Deferred()
            seen: list[object] = []
            d.addBoth(lambda r: (seen.append(r), r)[1])
            theirs = raiseAtOnce(d)
            theirs.cancel()
            self.failureResultOf(theirs, CancelledError)
            self.assertEqual(seen, [])
            d.callback(result) if not isinstance(result, Failure) else d.errback(result)
            self.assertEqual(len(seen), 1)
            self.assertIsNone(self.successResultOf(d))


class WriteAtOnceTests(SynchronousTestCase):
    """
    L{writeAtOnce}: in place, phase by phase.
    """

    def test_phases(self) -> None:
        """
        Phase 0 is written and synced before phase 1; each log synced once
        per phase.
        """
        root = Path(self.mktemp()).absolute()
        root.mkdir()
        records, _ = JsonlLog.open(root / "records")
        events, _ = JsonlLog.open(root / "events")
        self.addCleanup(records.close)
        self.addCleanup(events.close)
        layer = _Calls()
        self.addCleanup(useFiles, useFiles(layer))
        writeAtOnce([Line(events, events.line({"n": 1}), 1), Line(records, records.line({"n": 1})),
                     Line(events, events.line({"n": 2}), 1)])
        self.assertEqual(layer.calls, [
            ("write", "records"), ("fsync", "records"), ("write", "events"), ("fsync", "events"),
        ])
        self.assertEqual(events.path.read_bytes().splitlines(), [b'{"n":1}', b'{"n":2}'])

    def test_raises(self) -> None:
        """
        A refused write is raised, and the log refuses more.
        """
        root = Path(self.mktemp()).absolute()
        root.mkdir()
        layer = CrashFiles(root)
        layer.install(self.patch)
        self.addCleanup(layer.uninstall)
        log, _ = JsonlLog.open(root / "a")
        self.addCleanup(log.close)
        layer.fail("fsync", errno.EIO)
        self.assertRaises(OSError, writeAtOnce, [Line(log, log.line({"n": 1}))])
        self.assertTrue(log.failed)


@implementer(IReactorThreads)
class _ThreadedReactor(MemoryReactorClock):
    """
    A memory reactor with threads: calls from threads queue up for the test.
    """

    def __init__(self) -> None:
        super().__init__()
        self.fromThreads: queue.Queue[tuple[Callable[..., Any], tuple[Any, ...]]] = queue.Queue()

    def callFromThread(self, f: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        self.fromThreads.put((f, args))

    def callInThread(self, f: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        raise AssertionError("the writer has a thread of its own")

    def getThreadPool(self) -> Any:
        raise AssertionError("the writer has a thread of its own")

    def suggestThreadPoolSize(self, size: int) -> None:
        pass


class WriterForTests(SynchronousTestCase):
    """
    L{writerFor}: its own thread, or at once.
    """

    def test_withoutThreads(self) -> None:
        """
        On a reactor without threads, batches run at once.
        """
        self.assertIs(writerFor(MemoryReactorClock()).runner, runAtOnce)

    def test_laterWithTheReactorsClock(self) -> None:
        """
        The writer of a reactor with threads keeps its work for later on
        the reactor's clock; without threads, it has no clock.
        """
        reactor = _ThreadedReactor()
        self.assertIs(writerFor(reactor).clock, reactor)
        self.assertIsNone(writerFor(MemoryReactorClock()).clock)

    def test_ownThread(self) -> None:
        """
        On a reactor with threads, a batch runs on the writer's own thread,
        started with the reactor and stopped at shutdown; its end comes
        back through the reactor.
        """
        reactor = _ThreadedReactor()
        writer = writerFor(reactor)
        [(start, _, _)] = reactor.whenRunningHooks
        [(stop, _, _)] = reactor.triggers["during"]["shutdown"]
        start()
        self.addCleanup(stop)
        log = _ThreadLog()
        done = writer.write(Chain(), [Line(log, b"x")])  # type: ignore[arg-type]
        self.assertNoResult(done)
        f, args = reactor.fromThreads.get(timeout=30)
        f(*args)
        self.successResultOf(done)
        [thread] = log.threads
        self.assertIn("vehicle-writer", thread)


class _ThreadLog:
    """
    A log that notes which thread writes and syncs it.
    """

    def __init__(self) -> None:
        self.threads: list[str] = []

    def write(self, data: bytes) -> None:
        self.threads.append(threading.current_thread().name)

    def sync(self) -> None:
        pass


class AnnotationTests(SynchronousTestCase):
    """
    The writer's annotations are types (what mypy reads).
    """

    def test_resolve(self) -> None:
        assertAnnotationsResolve(self, _writer)


class StopTests(SynchronousTestCase):
    """
    L{GroupWriter.stop}.
    """

    def test_stopsARunnerThatStops(self) -> None:
        """
        The writer is drained, then its runner is stopped when it has a
        C{stop}; one without is only drained.
        """
        held = HeldBatches()
        stops: list[Deferred[None]] = []

        class Stopping(HeldBatches):
            def stop(self) -> Deferred[None]:
                stops.append(Deferred())
                return stops[-1]

        runner = Stopping()
        writer = GroupWriter(runner=runner, release=runner.stop)
        root = Path(self.mktemp())
        root.mkdir()
        log, _ = JsonlLog.open(root / "a")
        self.addCleanup(log.close)
        writer.write(Chain(), [Line(log, log.line({"n": 1}))])
        stopped = writer.stop()
        self.assertEqual(stops, [])
        runner.release()
        self.assertEqual(len(stops), 1)
        self.assertNoResult(stopped)
        stops[0].callback(None)
        self.successResultOf(stopped)
        self.successResultOf(GroupWriter(runner=held).stop())
        self.successResultOf(GroupWriter().stop())


class HelperWriterTests(WriterTests):
    """
    The same, every batch written and synced through the sync helper's
    code (L{vehicle._syncd}) and its wire (L{vehicle.store._syncer}).
    """

    def setUp(self) -> None:
        super().setUp()
        self.held = HeldThroughHelper(self)
        self.writer = GroupWriter(runner=self.held)
