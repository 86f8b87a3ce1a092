"""
The host's side of the sync helper (L{vehicle.store._syncer}): what it sends,
what it does with the answer, a helper that ends, the real process (its
environment, its descriptors, a kill, the data directory's lock).
"""

from __future__ import annotations

import errno
import os
import signal
import sys
from pathlib import Path
from typing import Any, Sequence

from twisted.internet import reactor
from twisted.internet.defer import Deferred, succeed
from twisted.internet.error import ConnectionDone
from twisted.internet.interfaces import IReactorProcess, IReactorSocket, IReactorThreads
from twisted.internet.testing import MemoryReactorClock
from twisted.internet.threads import deferToThread
from twisted.logger import capturedLogs
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase, TestCase
from zope.interface import implementer

from tests.support._crashfs import CrashFiles
from tests.support._hints import assertAnnotationsResolve
from tests.support.syncloop import Loopback, loopbackWriter
from vehicle.store import Chain, DataDirLock, DataDirLocked, GroupWriter, JsonlLog, Line, writerFor
from vehicle.store import _syncer
from vehicle.store._jsonl import observeLogs
from vehicle.store._syncer import (
    MOST_DEATHS,
    STDERR_CHARS,
    SyncHelper,
    helperArgv,
    processStarter,
)


class _HeldLink:
    """
    A link whose helper answers only when the test says.
    """

    def __init__(self, owner: SyncHelper) -> None:
        self.owner = owner
        self.sent: list[tuple[list[int], list[tuple[Any, ...]]]] = []
        self.closed = False

    def send(self, fds: Sequence[int], messages: Sequence[tuple[Any, ...]]) -> None:
        self.sent.append((list(fds), list(messages)))

    def close(self) -> Deferred[None]:
        self.closed = True
        return succeed(None)

    def die(self) -> None:
        self.owner.lost(self, Failure(ConnectionDone()))


class _Fallback:
    def __init__(self) -> None:
        self.ran: list[Any] = []

    def __call__(self, work: Any) -> Deferred[None]:
        self.ran.append(work)
        work()
        return succeed(None)


class SyncHelperTests(SynchronousTestCase):
    """
    L{SyncHelper} with links of the test's.
    """

    def setUp(self) -> None:
        self.root = Path(self.mktemp()).absolute()
        self.root.mkdir(parents=True)
        self.links: list[_HeldLink] = []
        self.fallback = _Fallback()
        self.helper = SyncHelper(self.start, self.fallback)
        self.writer = GroupWriter(runner=self.helper, release=self.helper.stop)

    def start(self, owner: SyncHelper) -> Any:
        link = _HeldLink(owner)
        self.links.append(link)
        return link

    def log(self, name: str) -> JsonlLog:
        log, _ = JsonlLog.open(self.root / name)
        self.addCleanup(log.close)
        return log

    def line(self, log: JsonlLog, n: int, phase: int = 0) -> Line:
        return Line(log, log.line({"n": n}), phase)

    def test_answeredOnlyByTheHelper(self) -> None:
        """
        A step is answered once the helper says its batch is durable, not
        before; what the helper says it wrote is the log's.
        """
        a = self.log("a")
        done = self.writer.write(Chain(), [self.line(a, 1)])
        self.assertNoResult(done)
        [link] = self.links
        [(fds, messages)] = link.sent
        self.assertEqual(fds, [a.fd])
        self.assertEqual([m[0] for m in messages], ["open", "batch"])
        self.assertNoResult(done)
        size = a.size
        self.helper.answered(link, ("done", {}, {a.fd: (8, 1, 0.001, None)}))
        self.successResultOf(done)
        self.assertEqual(a.size, size + 8)

    def test_passedOnce(self) -> None:
        """
        A log's descriptor is passed once; again when its number comes to
        another log.
        """
        a = self.log("a")
        self.writer.write(Chain(), [self.line(a, 1)])
        [link] = self.links
        self.helper.answered(link, ("done", {}, {}))
        self.writer.write(Chain(), [self.line(a, 2)])
        self.assertEqual(link.sent[1][0], [])
        self.helper.answered(link, ("done", {}, {}))
        fd = a.fd
        a.close()
        b = self.log("b")
        self.assertEqual(b.fd, fd)
        self.writer.write(Chain(), [self.line(b, 1)])
        self.assertEqual(link.sent[2][0], [fd])

    def test_failuresAndChains(self) -> None:
        """
        A step the helper failed fails with its error; the later steps of
        its chain fail with it; another chain's step is answered.
        """
        a, b = self.log("a"), self.log("b")
        chain = Chain()
        first = self.writer.write(chain, [self.line(a, 1)])
        steps = [self.writer.write(chain, [self.line(a, 2)]),
                 self.writer.write(chain, [self.line(a, 3)]),
                 self.writer.write(Chain(), [self.line(b, 1)])]
        self.helper.answered(self.links[0], ("done", {}, {}))
        self.successResultOf(first)
        batch = self.links[0].sent[1][1][-1]
        index = batch[2][0][0]
        self.helper.answered(self.links[0], ("done", {index: ("os", (errno.EIO, "io"))},
                                             {a.fd: (0, 0, None, ("os", (errno.EIO, "io")))}))
        for d in steps[:2]:
            self.assertEqual(self.failureResultOf(d, OSError).value.errno, errno.EIO)
        self.successResultOf(steps[2])
        self.assertTrue(a.failed)
        self.assertFalse(b.failed)

    def test_refusedLogsHaveNoDescriptor(self) -> None:
        """
        A closed log's lines go with a key below zero and the log's
        refusal, no descriptor passed.
        """
        a = self.log("a")
        a.close()
        self.writer.write(Chain(), [self.line(a, 1)])
        [(fds, messages)] = self.links[0].sent
        self.assertEqual(fds, [])
        [batch] = messages
        self.assertEqual(list(batch[3]), [-1])
        self.assertEqual(batch[3][-1][1][0], "value")

    def test_deathFailsTheBatch(self) -> None:
        """
        A helper that ends with a batch in hand fails each of its steps
        and leaves its logs refusing more; the next batch starts another.
        """
        a = self.log("a")
        done = self.writer.write(Chain(), [self.line(a, 1)])
        with capturedLogs() as logs:
            self.links[0].die()
        self.assertEqual(self.failureResultOf(done, OSError).value.errno, errno.EIO)
        self.assertTrue(a.failed)
        self.assertIn("with a batch in hand", " ".join(str(e.get("log_format")) for e in logs))
        b = self.log("b")
        self.writer.write(Chain(), [self.line(b, 1)])
        self.assertEqual((len(self.links), self.helper.started), (2, 2))

    def test_idleDeath(self) -> None:
        """
        A helper that ends with nothing in hand costs nothing: the next
        batch starts another.
        """
        a = self.log("a")
        self.writer.write(Chain(), [self.line(a, 1)])
        self.helper.answered(self.links[0], ("done", {}, {}))
        with capturedLogs() as logs:
            self.links[0].die()
        self.assertEqual([e["log_level"].name for e in logs], ["warn"])
        self.assertIn("the next batch starts another", logs[0]["log_format"])
        self.writer.write(Chain(), [self.line(a, 2)])
        self.assertEqual(self.links[1].sent[0][0], [a.fd])

    def test_givesUp(self) -> None:
        """
        After three helpers in a row ended with a batch in hand, batches run
        on the writer's thread.
        """
        a = self.log("a")
        with capturedLogs():
            for n in range(MOST_DEATHS):
                d = self.writer.write(Chain(), [self.line(a, n)])
                self.links[-1].die()
                self.failureResultOf(d, OSError)
                a.close()
                a = self.log(f"a{n}")
        self.assertTrue(self.helper.gaveUp)
        self.successResultOf(self.writer.write(Chain(), [self.line(a, 9)]))
        self.assertEqual(len(self.links), MOST_DEATHS)
        self.assertEqual(len(self.fallback.ran), 1)
        self.assertEqual((self.root / "a2").read_bytes(), b'{"n":9}\n')

    def test_anAnswerResetsTheDeaths(self) -> None:
        """
        Deaths count only in a row.
        """
        a = self.log("a")
        with capturedLogs():
            for n in range(MOST_DEATHS * 2):
                d = self.writer.write(Chain(), [self.line(a, n)])
                if n % 2:
                    self.helper.answered(self.links[-1], ("done", {}, {}))
                    self.successResultOf(d)
                else:
                    self.links[-1].die()
                    self.failureResultOf(d, OSError)
                    a.close()
                    a = self.log(f"a{n}")
        self.assertFalse(self.helper.gaveUp)

    def test_deathsInARowOnly(self) -> None:
        """
        An answer starts the count of deaths again from nothing: two, an
        answer, two more is not three in a row; one more is.
        """
        a = self.log("a")

        def die() -> None:
            nonlocal a
            d = self.writer.write(Chain(), [self.line(a, 1)])
            with capturedLogs():
                self.links[-1].die()
            self.failureResultOf(d, OSError)
            a.close()
            a = self.log(f"a{len(self.links)}")

        die()
        die()
        self.successResultOf(self.answer(self.writer.write(Chain(), [self.line(a, 1)])))
        die()
        die()
        self.assertFalse(self.helper.gaveUp)
        die()
        self.assertTrue(self.helper.gaveUp)

    def answer(self, d: Deferred[None]) -> Deferred[None]:
        self.helper.answered(self.links[-1], ("done", {}, {}))
        return d

    def test_deathLeavesWhatItWroteUnsaid(self) -> None:
        """
        The logs of a batch in a dead helper's hand are refused from then on,
        their size and what they say they took as before; a refused log of
        the batch (no descriptor) is left as it was.
        """
        seen: list[tuple[str, Any]] = []

        class Seen:
            def appended(self, log: str, records: int) -> None:
                seen.append(("appended", records))

            def synced(self, log: str, seconds: float) -> None:
                seen.append(("synced", seconds))

        self.addCleanup(observeLogs, observeLogs(Seen()))
        a, closed = self.log("a"), self.log("closed")
        closed.close()
        size = a.size
        d = self.writer.write(Chain(), [self.line(closed, 1), self.line(a, 1)])
        with capturedLogs():
            self.links[0].die()
        self.failureResultOf(d, OSError)
        self.assertEqual((a.size, a.failed, seen), (size, True, []))
        self.assertFalse(closed.failed)

    def test_twoRefusedLogs(self) -> None:
        """
        Two refused logs of one batch keep their own refusals: a closed
        one's, and one that failed before.
        """
        a, closed = self.log("a"), self.log("closed")
        closed.close()
        failed = self.log("failed")
        failed.wroteElsewhere(0, 0, None, OSError(errno.EIO, "before"))
        steps = [self.writer.write(Chain(), [self.line(a, 1)])]
        steps += [self.writer.write(Chain(), [self.line(closed, 1)]),
                  self.writer.write(Chain(), [self.line(failed, 1)])]
        self.helper.answered(self.links[0], ("done", {}, {}))
        self.successResultOf(steps[0])
        [(_, messages)] = self.links[0].sent[1:]
        logs = messages[-1][3]
        kinds = sorted((key, refusal[0]) for key, (_, refusal) in logs.items() if key < 0)
        self.assertEqual(kinds, [(-2, "os"), (-1, "value")])
        self.assertEqual(sorted(logs), [-2, -1])

    def test_startFails(self) -> None:
        """
        A helper that cannot be started leaves the batches to the writer's
        thread.
        """

        def broken(owner: SyncHelper) -> Any:
            raise OSError(errno.ENOENT, "no python")

        self.helper.start = broken
        a = self.log("a")
        with capturedLogs():
            self.successResultOf(self.writer.write(Chain(), [self.line(a, 1)]))
        self.assertTrue(self.helper.gaveUp)
        self.assertEqual(len(self.fallback.ran), 1)
        self.assertEqual(len(self.flushLoggedErrors(OSError)), 1)

    def test_noLinesNoHelper(self) -> None:
        """
        A batch of work after a step only starts no helper; its work runs
        on the writer's thread.
        """
        ran: list[int] = []
        self.successResultOf(self.writer.write(Chain(), [], ("k", lambda: ran.append(1))))
        self.assertEqual((self.links, ran, len(self.fallback.ran)), ([], [1], 1))

    def test_afterWorkOnTheThread(self) -> None:
        """
        The work after a durable step runs on the writer's thread, once the
        helper answered; a batch with none runs nothing there.
        """
        a = self.log("a")
        ran: list[int] = []
        d = self.writer.write(Chain(), [self.line(a, 1)], ("k", lambda: ran.append(1)))
        self.assertEqual(ran, [])
        self.helper.answered(self.links[0], ("done", {}, {}))
        self.successResultOf(d)
        self.assertEqual((ran, len(self.fallback.ran)), ([1], 1))
        self.writer.write(Chain(), [self.line(a, 2)])
        self.helper.answered(self.links[0], ("done", {}, {}))
        self.assertEqual(len(self.fallback.ran), 1)

    def test_closedAfterTheBatch(self) -> None:
        """
        A log closed through the writer is closed once the helper answered.
        """
        a = self.log("a")
        self.writer.write(Chain(), [self.line(a, 1)])
        self.writer.close(a)
        self.assertFalse(a.closed)
        self.helper.answered(self.links[0], ("done", {}, {}))
        self.assertTrue(a.closed)

    def test_unaskedAnswer(self) -> None:
        """
        An answer that is not C{done} (whatever it sorts beside), or with no
        batch in hand, closes the link and is logged by its kind (cut).
        """
        a = self.log("a")
        for kind in ("what", "abc", "x" * 50):
            d = self.writer.write(Chain(), [self.line(a, 1)])
            link = self.links[-1]
            with capturedLogs() as logs:
                self.helper.answered(link, (kind, "more"))
            self.assertTrue(link.closed)
            self.assertEqual([e.get("kind") for e in logs], [kind[:40]])
            self.assertNoResult(d)
            with capturedLogs():
                link.die()
            self.failureResultOf(d, OSError)
            a.close()
            a = self.log(f"a{len(self.links)}")
        self.helper.answered(self.links[-1], ("done", {}, {}))

    def test_sweep(self) -> None:
        """
        Every L{SWEEP_EVERY} batches, and only then, the helper is told to
        forget the logs closed since they were passed, each once.
        """
        self.patch(_syncer, "SWEEP_EVERY", 4)
        a, b, c = self.log("a"), self.log("b"), self.log("c")
        fa, fb = a.fd, b.fd
        forgets: list[list[tuple[Any, ...]]] = []

        def batch(log: JsonlLog, n: int) -> None:
            self.writer.write(Chain(), [self.line(log, n)])
            link = self.links[0]
            forgets.append([m for m in link.sent[-1][1] if m[0] == "forget"])
            self.helper.answered(link, ("done", {}, {}))

        batch(a, 1)
        a.close()
        for n in range(2, 6):
            batch(b, n)
        b.close()
        for n in range(6, 11):
            batch(c, n)
        self.assertEqual(forgets, [[], [], [], [("forget", (fa,))], [], [], [],
                                   [("forget", (fb,))], [], []])

    def test_stop(self) -> None:
        """
        Stopping with no helper started is done at once; with one, it
        closes its link.
        """
        self.successResultOf(self.helper.stop())
        a = self.log("a")
        self.writer.write(Chain(), [self.line(a, 1)])
        self.helper.answered(self.links[0], ("done", {}, {}))
        self.helper.stop()
        self.assertTrue(self.links[0].closed)
        with capturedLogs() as logs:
            self.links[0].die()
        self.assertEqual(list(logs), [])


    def test_encoded(self) -> None:
        """
        A batch goes with its chains (each once, numbered, with where it was
        broken before), its steps' lines by key and phase, and each log's
        size as the host knows it.
        """
        a, b = self.log("a"), self.log("b")
        a.write(b"old\n")
        broken = Chain(brokenAt=1, failure=OSError(errno.EIO, "earlier"))
        chain = Chain()
        first = self.writer.write(chain, [self.line(a, 1)])
        brokenStep = self.writer.write(broken, [self.line(b, 1)])
        self.writer.write(chain, [self.line(a, 2), self.line(b, 2, phase=1)])
        link = self.links[0]
        self.helper.answered(link, ("done", {}, {}))
        self.successResultOf(first)
        fds, messages = link.sent[1]
        self.assertEqual(fds, [b.fd])
        kind, chains, steps, logs = messages[-1]
        self.assertEqual(kind, "batch")
        self.assertEqual(chains, {0: 1, 1: None})
        self.assertEqual([(number, [(k, p) for k, p, _ in lines]) for _, number, lines in steps],
                         [(0, [(b.fd, 0)]), (1, [(a.fd, 0), (b.fd, 1)])])
        self.assertEqual(steps[1][2][0][2], b'{"n":2}\n')
        # (The first answer reported nothing written: the size is as it was.)
        self.assertEqual(logs, {a.fd: (len(b"old\n"), None), b.fd: (0, None)})
        self.helper.answered(link, ("done", {}, {}))
        # The helper reports no failure of a chain broken before the batch:
        # its step fails by the host's own mark.
        self.assertIs(self.failureResultOf(brokenStep, OSError).value, broken.failure)

    def test_reportsOfRefusedLogsIgnored(self) -> None:
        """
        What the helper says of a refused log (its key below zero) changes
        nothing of it.
        """
        a = self.log("a")
        a.close()
        d = self.writer.write(Chain(), [self.line(a, 1)])
        self.helper.answered(self.links[0], ("done", {1: ("value", ("closed",))},
                                             {-1: (9, 1, 0.5, None)}))
        self.failureResultOf(d, ValueError)
        self.assertEqual(a.size, 0)

    def test_staleLinkIgnored(self) -> None:
        """
        The end of, or an answer from, a link that is no longer the helper's
        changes nothing.
        """
        a = self.log("a")
        d = self.writer.write(Chain(), [self.line(a, 1)])
        with capturedLogs():
            self.links[0].die()
        self.failureResultOf(d, OSError)
        a.close()
        b = self.log("b")
        later = self.writer.write(Chain(), [self.line(b, 1)])
        with capturedLogs():
            self.links[0].die()
            self.helper.answered(self.links[0], ("done", {}, {}))
        self.assertNoResult(later)
        self.assertIs(self.helper.link, self.links[1])
        self.helper.answered(self.links[1], ("done", {}, {}))
        self.successResultOf(later)


class _Spawned:
    pid = 4242

    def __init__(self) -> None:
        self.stdinClosed = False

    def closeStdin(self) -> None:
        self.stdinClosed = True


class _SpawningReactor:
    """
    Spawns nothing; notes what it was asked.
    """

    def __init__(self) -> None:
        self.spawned: list[dict[str, Any]] = []
        self.adopted: list[tuple[int, Any]] = []

    def spawnProcess(self, protocol: Any, executable: str, args: list[str], env: Any = None,
                     path: Any = None, uid: Any = None, gid: Any = None, usePTY: bool = False,
                     childFDs: Any = None) -> _Spawned:
        self.spawned.append({"executable": executable, "args": args, "env": env,
                             "childFDs": childFDs, "protocol": protocol})
        return _Spawned()

    def adoptStreamConnection(self, fd: int, family: int, factory: Any) -> None:
        self.adopted.append((family, factory.buildProtocol(None)))


class ProcessStarterTests(SynchronousTestCase):
    """
    L{processStarter} with a reactor of the test's.
    """

    def start(self, holding: int | None) -> tuple[_SpawningReactor, Any]:
        spawning = _SpawningReactor()
        owner = SyncHelper(processStarter(spawning, holding), _Fallback())  # type: ignore[arg-type]
        link = owner.start(owner)
        return spawning, link

    def test_command(self) -> None:
        """
        The helper is spawned with its command, an empty environment, its
        socket as descriptor 3, the lock (when given) as 4, stdin closed;
        the host's end of the socket is adopted as the link.
        """
        import socket as socket_

        spawning, link = self.start(None)
        [spawned] = spawning.spawned
        self.assertEqual((spawned["executable"], spawned["args"], spawned["env"]),
                         (sys.executable, helperArgv(), {}))
        self.assertEqual(sorted(spawned["childFDs"]), [0, 1, 2, 3])
        self.assertEqual([spawned["childFDs"][n] for n in (0, 1, 2)], ["w", "r", "r"])
        self.assertEqual(spawning.adopted, [(socket_.AF_UNIX, link)])
        self.assertTrue(link.process.stdinClosed)
        spawning, _ = self.start(17)
        self.assertEqual(spawning.spawned[0]["childFDs"][4], 17)

    def test_badFrame(self) -> None:
        """
        What no helper says ends the link.
        """
        from twisted.internet.testing import StringTransport

        _, link = self.start(None)
        transport = StringTransport()
        link.makeConnection(transport)
        with capturedLogs() as logs:
            link.dataReceived(b"\xff\xff\xff\xff")
        self.assertTrue(transport.disconnecting)
        self.assertIn("never says", " ".join(str(e.get("log_format")) for e in logs))

    def test_stderrLogged(self) -> None:
        """
        What the helper writes on its stderr is logged.
        """
        spawning, _ = self.start(None)
        protocol = spawning.spawned[0]["protocol"]
        with capturedLogs() as logs:
            protocol.errReceived(b"Traceback: boom\n")
        self.assertEqual([e.get("text") for e in logs], ["Traceback: boom"])
        with capturedLogs() as logs:
            protocol.errReceived(b"x" * (STDERR_CHARS + 5))
        self.assertEqual([e.get("text") for e in logs], ["x" * STDERR_CHARS])


class LoopbackTests(SynchronousTestCase):
    """
    The whole way through a helper on this thread, its writes through the
    crash layer.
    """

    def test_failedSyncFailsOnlyItsBatch(self) -> None:
        """
        A sync that fails fails the steps of its batch on that log, and
        the log refuses more; the next batch, on another log, is durable.
        """
        root = Path(self.mktemp()).absolute()
        root.mkdir()
        layer = CrashFiles(root)
        layer.install(self.patch)
        self.addCleanup(layer.uninstall)
        writer = loopbackWriter(self)
        a, _ = JsonlLog.open(root / "a")
        b, _ = JsonlLog.open(root / "b")
        self.addCleanup(a.close)
        self.addCleanup(b.close)
        layer.fail("fsync", errno.EIO)
        failed = writer.write(Chain(), [Line(a, a.line({"n": 1}))])
        self.assertEqual(self.failureResultOf(failed, OSError).value.errno, errno.EIO)
        self.assertTrue(a.failed)
        self.successResultOf(writer.write(Chain(), [Line(b, b.line({"n": 2}))]))
        self.assertEqual((root / "b").read_bytes(), b'{"n":2}\n')
        self.assertIsInstance(writer.runner, SyncHelper)
        [link] = self.__dict__["loopbacks"]
        self.assertIsInstance(link, Loopback)


@implementer(IReactorThreads)
class _Threaded(MemoryReactorClock):
    """
    A memory reactor that says it has threads (the writer's pool is made,
    never started).
    """


class WriterForTests(SynchronousTestCase):
    def test_helperOnARealReactor(self) -> None:
        """
        With the helper asked for, a reactor that spawns and adopts sockets
        gets a L{SyncHelper}, which the writer lets go when it stops; one
        without threads writes at once.
        """
        writer = writerFor(reactor, helper=True)
        self.assertIsInstance(writer.runner, SyncHelper)
        self.assertEqual(writer.release, writer.runner.stop)  # type: ignore[attr-defined]
        self.assertIsNone(writerFor(reactor).release)
        self.assertNotIsInstance(writerFor(reactor).runner, SyncHelper)
        self.assertNotIsInstance(writerFor(MemoryReactorClock(), helper=True).runner, SyncHelper)

    def test_noHelperWithoutSpawning(self) -> None:
        """
        A reactor with threads that adopts sockets but cannot spawn gets
        the writer's thread, helper or not.
        """
        threaded = _Threaded()
        self.assertTrue(IReactorSocket.providedBy(threaded))
        self.assertFalse(IReactorProcess.providedBy(threaded))
        self.assertNotIsInstance(writerFor(threaded, helper=True).runner, SyncHelper)

    def test_argv(self) -> None:
        """
        The helper is this interpreter, isolated, on the helper's file.
        """
        argv = helperArgv()
        self.assertEqual(argv[:3], [sys.executable, "-I", "-S"])
        self.assertTrue(argv[3].endswith("_syncd.py"))


def _fds(pid: int) -> dict[int, str]:
    path = Path(f"/proc/{pid}/fd")
    return {int(n): os.readlink(path / n) for n in os.listdir(path)}


class ProcessTests(TestCase):
    """
    The real helper process, on the real reactor.
    """

    timeout = 60

    def setUp(self) -> None:
        if not Path("/proc/self/fd").is_dir():
            raise self.skipTest("reads /proc")
        self.root = Path(self.mktemp()).absolute()
        self.root.mkdir(parents=True)
        self.fallback = _Fallback()
        self.links: list[Any] = []
        self.lock = DataDirLock(self.root)
        self.lock.acquire()
        self.addCleanup(self.lock.release)
        starter = processStarter(reactor, self.lock.fileno())

        def start(owner: SyncHelper) -> Any:
            link = starter(owner)
            self.links.append(link)
            return link

        self.helper = SyncHelper(start, self.fallback)
        self.writer = GroupWriter(runner=self.helper, release=self.helper.stop)
        self.addCleanup(self.helper.stop)

    def log(self, name: str) -> JsonlLog:
        log, _ = JsonlLog.open(self.root / name)
        self.addCleanup(log.close)
        return log

    async def test_writesAndHoldsNothingElse(self) -> None:
        """
        The helper writes and syncs the lines; its environment is empty, its
        command holds no secret, and it holds no descriptor of the host's
        but its socket, the lock, and the logs passed to it.
        """
        a, b = self.log("a"), self.log("b")
        await self.writer.write(Chain(), [Line(a, a.line({"n": 1})), Line(b, b.line({"n": 2}), 1)])
        self.assertEqual((self.root / "a").read_bytes(), b'{"n":1}\n')
        self.assertEqual((self.root / "b").read_bytes(), b'{"n":2}\n')
        pid = self.links[0].process.pid
        self.assertEqual(Path(f"/proc/{pid}/environ").read_bytes(), b"")
        self.assertEqual(Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[:-1],
                         [os.fsencode(x) for x in helperArgv()])
        held = _fds(pid)
        self.assertTrue(held[3].startswith("socket:"))
        self.assertEqual(held[4], str(self.root / "vehicle.lock"))
        others = {n: p for n, p in held.items() if n > 4}
        self.assertEqual(sorted(others.values()), [str(self.root / "a"), str(self.root / "b")])
        self.assertFalse(any(p.startswith(("socket:", "pipe:")) for n, p in held.items() if n > 3))

    async def test_killedWithABatchInHand(self) -> None:
        """
        A helper killed with a batch in hand fails that batch's steps; the
        next batch goes to a new helper and is durable.
        """
        a = self.log("a")
        await self.writer.write(Chain(), [Line(a, a.line({"n": 1}))])
        process = self.links[0].process
        os.kill(process.pid, signal.SIGSTOP)
        held = self.writer.write(Chain(), [Line(a, a.line({"n": 2}))])
        self.assertNoResult(held)
        ended = self.links[0].ended
        with capturedLogs():
            os.kill(process.pid, signal.SIGKILL)
            await ended
            try:
                await held
            except OSError as e:
                self.assertEqual(e.errno, errno.EIO)
            else:
                self.fail("a killed helper's batch was answered")
        self.assertTrue(a.failed)
        b = self.log("b")
        await self.writer.write(Chain(), [Line(b, b.line({"n": 3}))])
        self.assertEqual((self.root / "b").read_bytes(), b'{"n":3}\n')
        self.assertEqual(self.helper.started, 2)

    async def test_holdsTheLock(self) -> None:
        """
        The helper holds the data directory's lock: with the host's own
        let go, no second host takes the directory until the helper ends.
        """
        a = self.log("a")
        await self.writer.write(Chain(), [Line(a, a.line({"n": 1}))])
        self.lock.release()
        second = DataDirLock(self.root)
        self.assertRaises(DataDirLocked, second.acquire)
        await self.helper.stop()
        second.acquire()
        second.release()

    async def test_lockWaitsForADeadHoldersHelper(self) -> None:
        """
        A lock held with a pid in it that is no longer alive (a killed
        host whose helper finishes its batch) is waited for.
        """
        a = self.log("a")
        await self.writer.write(Chain(), [Line(a, a.line({"n": 1}))])
        self.lock.release()
        dead = await deferToThread(_deadPid)
        (self.root / "vehicle.lock").write_text(f"{dead}\n")
        second = DataDirLock(self.root)
        taking = deferToThread(second.acquire)
        await self.helper.stop()
        await taking
        self.assertTrue(second.held)
        second.release()


def _deadPid() -> int:
    """
    The pid of a process that has ended and been reaped.
    """
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    return pid


class AnnotationTests(SynchronousTestCase):
    def test_annotationsResolve(self) -> None:
        assertAnnotationsResolve(self, _syncer)


class WriterStopTests(SynchronousTestCase):
    def test_stopLetsTheHelperGo(self) -> None:
        """
        Stopping the writer drains it, then stops its sync helper; a
        runner with nothing to stop is only drained.
        """
        root = Path(self.mktemp()).absolute()
        root.mkdir()
        links: list[_HeldLink] = []

        def start(owner: SyncHelper) -> Any:
            links.append(_HeldLink(owner))
            return links[-1]

        helper = SyncHelper(start, _Fallback())
        writer = GroupWriter(runner=helper, release=helper.stop)
        log, _ = JsonlLog.open(root / "a")
        self.addCleanup(log.close)
        writer.write(Chain(), [Line(log, log.line({"n": 1}))])
        stopped = writer.stop()
        self.assertNoResult(stopped)
        self.assertFalse(links[0].closed)
        helper.answered(links[0], ("done", {}, {}))
        self.successResultOf(stopped)
        self.assertTrue(links[0].closed)
        self.successResultOf(GroupWriter().stop())
