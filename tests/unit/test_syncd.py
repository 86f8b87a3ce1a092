"""
The sync helper's own module (L{vehicle._syncd}): its wire, its errors, a
whole append, the helper's messages and its loop over a real socket.
"""

from __future__ import annotations

import errno
import fcntl
import os
import signal
import socket
import struct
import subprocess
import sys
import threading
from collections import deque
from pathlib import Path
from typing import Any

from twisted.trial.unittest import SynchronousTestCase

from tests.support._hints import assertAnnotationsResolve
from vehicle import _syncd
from vehicle.store._jsonl import JsonlLog
from vehicle._syncd import (
    MAX_FDS,
    MAX_FRAME,
    Chain,
    Helper,
    StepMarks,
    WholeAppends,
    fsyncFully,
    OsOps,
    appendWhole,
    errorFrom,
    errorOf,
    frame,
    serve,
    takeFrames,
)


class _Ops(OsOps):
    """
    The real calls, noted; a write can be made short or failing.
    """

    def __init__(self) -> None:
        self.calls: list[tuple[str, int]] = []
        self.short: int | None = None
        self.failWrite: OSError | None = None
        self.failSync: OSError | None = None
        #: Fail only the writes to this descriptor.
        self.failOn: int | None = None

    def write(self, fd: int, data: bytes | memoryview) -> int:
        self.calls.append(("write", fd))
        if self.failWrite is not None and self.failOn in (None, fd):
            raise self.failWrite
        if self.short is not None:
            data = data[:self.short]
        return super().write(fd, data)

    def fsync(self, fd: int) -> None:
        self.calls.append(("fsync", fd))
        if self.failSync is not None:
            raise self.failSync
        super().fsync(fd)

    def ftruncate(self, fd: int, size: int) -> None:
        self.calls.append(("ftruncate", fd))
        super().ftruncate(fd, size)

    def close(self, fd: int) -> None:
        self.calls.append(("close", fd))
        super().close(fd)


class WireTests(SynchronousTestCase):
    """
    Frames and errors.
    """

    def test_framesRoundTrip(self) -> None:
        """
        Frames taken from a buffer come out as they went in, and a frame
        not yet whole stays in the buffer.
        """
        first = ("batch", {0: None}, [(1, 0, ((7, 0, b"x\n"),))], {7: (0, None)})
        second = ("open", 9)
        data = frame(first) + frame(second)
        buffer = bytearray(data[:-3])
        self.assertEqual(takeFrames(buffer), [first])
        self.assertEqual(len(buffer), len(frame(second)) - 3)
        buffer += data[-3:]
        self.assertEqual(takeFrames(buffer), [second])
        self.assertEqual(buffer, bytearray())
        self.assertEqual(takeFrames(bytearray(b"\0\0")), [])

    def test_cutAnywhere(self) -> None:
        """
        Three frames cut at any two points come out whole and in order, each
        once it is whole.
        """
        messages = [("open", 3), ("batch", {0: None}, [(1, 0, ((3, 0, b"x" * 40),))], {}),
                    ("forget", (3, 4))]
        data = b"".join(frame(m) for m in messages)
        for first in range(len(data) + 1):
            for second in range(first, len(data) + 1, 7):
                buffer = bytearray()
                out: list[tuple[Any, ...]] = []
                for piece in (data[:first], data[first:second], data[second:]):
                    buffer += piece
                    out += takeFrames(buffer)
                self.assertEqual(out, messages, (first, second))
                self.assertEqual(buffer, bytearray())

    def test_frameOverTheLimit(self) -> None:
        """
        A length over L{MAX_FRAME} is refused before anything is read.
        """
        self.assertRaises(ValueError, takeFrames, bytearray(struct.pack("!I", MAX_FRAME + 1)))
        buffer = bytearray(struct.pack("!I", MAX_FRAME))
        self.assertEqual(takeFrames(buffer), [])

    def test_notAMessage(self) -> None:
        """
        A frame that is not a non-empty tuple is refused.
        """
        import marshal

        for value in ([1], (), "open"):
            body = marshal.dumps(value)
            self.assertRaises(ValueError, takeFrames,
                              bytearray(struct.pack("!I", len(body)) + body))

    def test_errors(self) -> None:
        """
        An C{OSError} and a C{ValueError} cross with their arguments.
        """
        back = errorFrom(errorOf(OSError(errno.EIO, "Input/output error")))
        self.assertIsInstance(back, OSError)
        self.assertEqual((back.errno, back.strerror), (errno.EIO, "Input/output error"))
        value = errorFrom(errorOf(ValueError("closed")))
        self.assertIsInstance(value, ValueError)
        self.assertEqual(value.args, ("closed",))
        self.assertEqual(errorOf(OSError(Path("/x"))), ("os", ("/x",)))


class AppendWholeTests(SynchronousTestCase):
    """
    L{appendWhole}.
    """

    def setUp(self) -> None:
        path = Path(self.mktemp())
        self.path = path
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        self.addCleanup(os.close, self.fd)
        os.write(self.fd, b"old\n")

    def test_shortWrites(self) -> None:
        """
        Short writes are followed by the rest.
        """
        ops = _Ops()
        ops.short = 2
        appendWhole(ops, self.fd, b"abcde\n", 4)
        self.assertEqual(self.path.read_bytes(), b"old\nabcde\n")
        self.assertEqual([c for c, _ in ops.calls], ["write"] * 3)

    def test_failureCutsBack(self) -> None:
        """
        A failed write cuts the file back to the size given and raises.
        """
        ops = _Ops()
        ops.short = 2
        appendWhole(ops, self.fd, b"ab", 4)
        ops.failWrite = OSError(errno.ENOSPC, "full")
        e = self.assertRaises(OSError, appendWhole, ops, self.fd, b"cd\n", 4)
        self.assertEqual(e.errno, errno.ENOSPC)
        self.assertEqual(self.path.read_bytes(), b"old\n")

    def test_failedCutBack(self) -> None:
        """
        A cut back that fails too leaves the write's error to raise.
        """
        ops = _Ops()
        ops.failWrite = OSError(errno.EIO, "io")
        ops.ftruncate = lambda fd, size: (_ for _ in ()).throw(OSError(errno.EBADF, "b"))  # type: ignore[method-assign]
        e = self.assertRaises(OSError, appendWhole, ops, self.fd, b"x\n", 4)
        self.assertEqual(e.errno, errno.EIO)


class HelperTests(SynchronousTestCase):
    """
    L{Helper}: its messages.
    """

    def setUp(self) -> None:
        self.ops = _Ops()
        self.clock = 0.0
        self.helper = Helper(self.ops, now=self.tick)
        self.root = Path(self.mktemp())
        self.root.mkdir()

    def tick(self) -> float:
        """
        A clock that moves a quarter of a second each time it is read.
        """
        self.clock += 0.25
        return self.clock

    def log(self, name: str) -> int:
        fd = os.open(self.root / name, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        self.helper.handle(("open", fd + 1000), deque([fd]))
        return fd + 1000

    def read(self, name: str) -> bytes:
        return (self.root / name).read_bytes()

    def tearDown(self) -> None:
        for fd in self.helper.fds.values():
            os.close(fd)

    def test_openWithoutADescriptor(self) -> None:
        """
        An C{open} with no descriptor passed is refused.
        """
        e = self.assertRaises(ValueError, self.helper.handle, ("open", 3), deque())
        self.assertEqual(str(e), "an open with no descriptor")

    def test_unknown(self) -> None:
        """
        A message it does not know is refused.
        """
        e = self.assertRaises(ValueError, self.helper.handle, ("sing",), deque([5]))
        self.assertEqual(str(e), "an unknown message 'sing'")
        for kind in ("zzz", "aaa", "batc", "batchy", "opem"):
            e = self.assertRaises(ValueError, self.helper.handle, (kind,), deque([5]))
            self.assertEqual(str(e), f"an unknown message {kind!r}")

    def test_openAgainClosesTheOld(self) -> None:
        """
        A key passed again closes the descriptor kept under it before.
        """
        a = os.open(self.root / "a", os.O_WRONLY | os.O_CREAT, 0o600)
        b = os.open(self.root / "b", os.O_WRONLY | os.O_CREAT, 0o600)
        self.helper.handle(("open", 5), deque([a]))
        self.assertEqual(self.ops.calls, [])
        self.helper.handle(("open", 5), deque([b]))
        self.assertEqual((self.ops.calls, self.helper.fds), ([("close", a)], {5: b}))

    def test_forget(self) -> None:
        """
        C{forget} closes what is kept under its keys, and passes over keys
        it does not know.
        """
        key = self.log("a")
        fd = self.helper.fds[key]
        self.helper.handle(("forget", (key, 77)), deque())
        self.assertEqual((self.ops.calls, self.helper.fds), ([("close", fd)], {}))

    def test_phasesInOrder(self) -> None:
        """
        A batch writes each log's lines of a phase with one write, syncs
        each, then the next phase; it answers with each log's bytes, lines
        and sync time.
        """
        a, b = self.log("a"), self.log("b")
        answer = self.helper.handle(("batch", {0: None, 1: None}, [
            (1, 0, ((a, 1, b"a-event\n"), (b, 0, b"b-record\n"))),
            (2, 1, ((a, 0, b"a-record\n"), (a, 0, b"a-record2\n"))),
        ], {a: (0, None), b: (0, None)}), deque())
        assert answer is not None
        kind, failures, logs = answer
        self.assertEqual((kind, failures), ("done", {}))
        self.assertEqual(self.read("a"), b"a-record\na-record2\na-event\n")
        self.assertEqual(self.read("b"), b"b-record\n")
        fa, fb = self.helper.fds[a], self.helper.fds[b]
        self.assertEqual(self.ops.calls, [("write", fb), ("write", fa), ("fsync", fb),
                                          ("fsync", fa), ("write", fa), ("fsync", fa)])
        self.assertEqual(logs[a][:2], (len(b"a-record\na-record2\na-event\n"), 3))
        self.assertEqual(logs[b][:2], (len(b"b-record\n"), 1))
        # Two syncs of a, one of b, each a quarter of a second by the clock.
        self.assertEqual((logs[a][2], logs[b][2]), (0.5, 0.25))
        self.assertIsNone(logs[a][3])

    def test_writeFailureBreaksTheChain(self) -> None:
        """
        A failed write fails its steps, cuts the log back to the size the
        host gave, and no later line of their chains is written; another
        chain goes on.
        """
        a, b = self.log("a"), self.log("b")
        os.write(self.helper.fds[a], b"kept\n")
        self.ops.failWrite = OSError(errno.ENOSPC, "full")
        self.ops.failOn = self.helper.fds[a]
        answer = self.helper.handle(("batch", {0: None, 1: None}, [
            (1, 0, ((a, 0, b"a1\n"),)),
            (2, 0, ((b, 0, b"b2\n"),)),
            (3, 1, ((b, 0, b"b3\n"),)),
        ], {a: (5, None), b: (0, None)}), deque())
        assert answer is not None
        _, failures, logs = answer
        self.assertEqual(failures, {1: ("os", (errno.ENOSPC, "full")),
                                    2: ("os", (errno.ENOSPC, "full"))})
        self.assertEqual(self.read("a"), b"kept\n")
        self.assertEqual(self.read("b"), b"b3\n")
        self.assertEqual(logs[a], (0, 0, None, ("os", (errno.ENOSPC, "full"))))

    def test_syncFailure(self) -> None:
        """
        A failed sync fails every step written to that log, and says so.
        """
        a = self.log("a")
        self.ops.failSync = OSError(errno.EIO, "io")
        answer = self.helper.handle(("batch", {0: None}, [(4, 0, ((a, 0, b"x\n"),))],
                                     {a: (0, None)}), deque())
        assert answer is not None
        self.assertEqual(answer[1], {4: ("os", (errno.EIO, "io"))})
        self.assertEqual(answer[2][a], (2, 1, None, ("os", (errno.EIO, "io"))))

    def test_brokenBefore(self) -> None:
        """
        A step of a chain the host knew broken is not written, and not
        reported (the host fails it with its own error).
        """
        a = self.log("a")
        answer = self.helper.handle(("batch", {0: 3, 1: 9}, [
            (4, 0, ((a, 0, b"no\n"),)), (5, 1, ((a, 0, b"yes\n"),)),
        ], {a: (0, None)}), deque())
        assert answer is not None
        self.assertEqual(answer[1], {})
        self.assertEqual(self.read("a"), b"yes\n")

    def test_refusedLog(self) -> None:
        """
        A log the host says refuses its lines (no descriptor) fails its
        steps with the error the host gave.
        """
        answer = self.helper.handle(("batch", {0: None}, [(1, 0, ((-1, 0, b"x\n"),))],
                                     {-1: (0, ("value", ("closed",)))}), deque())
        assert answer is not None
        self.assertEqual(answer[1], {1: ("value", ("closed",))})
        self.assertEqual(answer[2][-1], (0, 0, None, None))

    def twoChainsOnOneLog(self, a: int) -> tuple[Any, ...]:
        """
        The answer to a batch of two steps on log C{a}, each of its own
        chain: step 1's line in the first phase, step 2's in the second.
        """
        answer = self.helper.handle(("batch", {0: None, 1: None}, [
            (1, 0, ((a, 0, b"x\n"),)), (2, 1, ((a, 1, b"y\n"),)),
        ], {a: (0, None)}), deque())
        assert answer is not None
        return answer

    def test_refusedAfterAFailure(self) -> None:
        """
        After a failed write, a later phase's line to that log is refused
        without a write.
        """
        a = self.log("a")
        self.ops.failWrite = OSError(errno.ENOSPC, "full")
        answer = self.twoChainsOnOneLog(a)
        self.assertEqual(set(answer[1]), {1, 2})
        self.assertIn("an earlier write failed", answer[1][2][1][0])
        self.assertEqual([c for c, _ in self.ops.calls if c == "write"], ["write"])

    def test_refusedAfterAFailedSync(self) -> None:
        """
        After a failed sync, a later phase's line to that log is refused
        without a write, even of a chain the failure did not break: what
        the log holds since its last sync is in doubt, as the host's own
        log (L{vehicle.store._jsonl.JsonlLog}, the same L{WholeAppends})
        refuses it.
        """
        a = self.log("a")
        self.ops.failSync = OSError(errno.EIO, "io")
        answer = self.twoChainsOnOneLog(a)
        self.assertEqual(answer[1][1], ("os", (errno.EIO, "io")))
        self.assertIn("an earlier write failed", answer[1][2][1][0])
        self.assertEqual([c for c, _ in self.ops.calls], ["write", "fsync"])
        self.assertTrue(issubclass(JsonlLog, WholeAppends))


def _answers(sock: socket.socket) -> list[tuple[Any, ...]]:
    """
    Read C{sock} until at least one whole answer came.
    """
    buffer = bytearray()
    answers: list[tuple[Any, ...]] = []
    while not answers:
        buffer += sock.recv(4096)
        answers = takeFrames(buffer)
    return answers


def _helperProcess(end: socket.socket, **options: Any) -> subprocess.Popen[bytes]:
    """
    The helper as the host starts it (its command, an empty environment),
    C{end} as its descriptor 3.
    """
    return subprocess.Popen(
        [sys.executable, "-I", "-S", _syncd.__file__], env={}, close_fds=False,
        stdin=subprocess.DEVNULL, preexec_fn=lambda: os.dup2(end.fileno(), 3), **options,
    )


class ServeTests(SynchronousTestCase):
    """
    L{serve} over a real socket, descriptors passed beside the bytes.
    """

    def test_serve(self) -> None:
        """
        The helper takes the descriptors passed, answers each batch, and
        returns when the host closes its end.
        """
        ours, theirs = socket.socketpair()
        self.addCleanup(ours.close)
        ended: list[object] = []
        thread = threading.Thread(
            target=lambda: ended.append(serve(theirs, OsOps())), daemon=True)
        thread.start()
        path = Path(self.mktemp())
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        self.addCleanup(os.close, fd)
        socket.send_fds(ours, [frame(("open", 40))], [fd])
        ours.sendall(frame(("batch", {0: None}, [(1, 0, ((40, 0, b"line\n"),))], {40: (0, None)})))
        answers = _answers(ours)
        self.assertEqual(answers[0][:2], ("done", {}))
        self.assertEqual(path.read_bytes(), b"line\n")
        ours.shutdown(socket.SHUT_WR)
        thread.join(30)
        self.assertEqual(ended, [None])
        theirs.close()

    def openFds(self) -> set[int]:
        return {int(n) for n in os.listdir("/proc/self/fd")}

    def test_manyAtOnce(self) -> None:
        """
        Up to L{MAX_FDS} descriptors passed in one message are all taken, in
        order; those no C{open} took are closed when the helper returns.
        """
        if not os.path.isdir("/proc/self/fd"):
            raise self.skipTest("reads /proc")
        ours, theirs = socket.socketpair()
        self.addCleanup(ours.close)
        self.addCleanup(theirs.close)
        root = Path(self.mktemp())
        root.mkdir()
        fds = [os.open(root / str(n), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
               for n in range(MAX_FDS)]
        for fd in fds:
            self.addCleanup(os.close, fd)
        before = self.openFds()
        opens = b"".join(frame(("open", n)) for n in range(3))
        socket.send_fds(ours, [opens], fds)
        ours.sendall(frame(("batch", {0: None}, [(1, 0, tuple((n, 0, b"%d\n" % n) for n in range(3)))],
                            {n: (0, None) for n in range(3)})))
        ours.shutdown(socket.SHUT_WR)
        serve(theirs, OsOps())
        self.assertEqual([(root / str(n)).read_bytes() for n in range(4)],
                         [b"0\n", b"1\n", b"2\n", b""])
        self.assertEqual(self.openFds(), before)

    def test_tooManyAtOnce(self) -> None:
        """
        More than L{MAX_FDS} in one message is refused (some were lost), and
        what did arrive is closed.
        """
        if not os.path.isdir("/proc/self/fd"):
            raise self.skipTest("reads /proc")
        ours, theirs = socket.socketpair()
        self.addCleanup(ours.close)
        self.addCleanup(theirs.close)
        fd = os.open(self.mktemp(), os.O_WRONLY | os.O_CREAT, 0o600)
        self.addCleanup(os.close, fd)
        before = self.openFds()
        socket.send_fds(ours, [frame(("open", 1))], [fd] * (MAX_FDS + 1))
        e = self.assertRaises(ValueError, serve, theirs, OsOps())
        self.assertEqual(str(e), "descriptors were lost on the way")
        self.assertEqual(self.openFds(), before)

    def test_theProcess(self) -> None:
        """
        The helper as its own process (its command, the socket as its
        descriptor 3, an empty environment): it writes and syncs a batch,
        answers, and exits with 0 when the host closes its end.
        """
        ours, theirs = socket.socketpair()
        self.addCleanup(ours.close)
        path = Path(self.mktemp())
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        self.addCleanup(os.close, fd)
        process = _helperProcess(theirs)
        theirs.close()
        socket.send_fds(ours, [frame(("open", 9))], [fd])
        ours.sendall(frame(("batch", {0: None}, [(1, 0, ((9, 0, b"line\n"),))], {9: (0, None)})))
        answers = _answers(ours)
        self.assertEqual(answers[0][:2], ("done", {}))
        self.assertEqual(answers[0][2][9][:2], (5, 1))
        self.assertEqual(path.read_bytes(), b"line\n")
        # A Ctrl-C, a stop or a hang-up sent to the host's group does not end
        # it: it still answers, and ends at the host's end.
        for name in _syncd.IGNORED:
            os.kill(process.pid, getattr(signal, name))
        ours.sendall(frame(("batch", {0: None}, [(2, 0, ((9, 0, b"more\n"),))], {9: (5, None)})))
        self.assertEqual(_answers(ours)[0][:2], ("done", {}))
        self.assertEqual(path.read_bytes(), b"line\nmore\n")
        ours.shutdown(socket.SHUT_WR)
        self.assertEqual(process.wait(30), 0)

    def test_theProcessRefusesNonsense(self) -> None:
        """
        A helper sent what no host sends ends with an error.
        """
        ours, theirs = socket.socketpair()
        self.addCleanup(ours.close)
        process = _helperProcess(theirs, stderr=subprocess.PIPE)
        theirs.close()
        ours.sendall(frame(("sing",)))
        _, err = process.communicate(timeout=30)
        self.assertNotEqual(process.returncode, 0)
        self.assertIn(b"an unknown message 'sing'", err)

    def test_badFrameEnds(self) -> None:
        """
        What no host sends ends the helper with an error.
        """
        ours, theirs = socket.socketpair()
        self.addCleanup(ours.close)
        self.addCleanup(theirs.close)
        ours.sendall(frame(("sing",)))
        self.assertRaises(ValueError, serve, theirs, OsOps())


class FsyncFullyTests(SynchronousTestCase):
    """
    L{fsyncFully}: the full sync where there is one.
    """

    def test_plain(self) -> None:
        """
        Without a full sync (Linux), C{os.fsync}.
        """
        synced: list[int] = []
        self.patch(_syncd, "_FULLFSYNC", None)
        self.patch(os, "fsync", synced.append)
        self.patch(fcntl, "fcntl", lambda *a: self.fail(f"fcntl{a}"))
        fsyncFully(7)
        self.assertEqual(synced, [7])

    def test_theOpsSyncFully(self) -> None:
        """
        The helper's own file calls sync with L{fsyncFully}.
        """
        synced: list[int] = []
        self.patch(_syncd, "_FULLFSYNC", None)
        self.patch(os, "fsync", synced.append)
        OsOps().fsync(9)
        self.assertEqual(synced, [9])

    def test_full(self) -> None:
        """
        With one (macOS), C{F_FULLFSYNC}; the plain sync only when the file
        system refuses it.
        """
        synced: list[int] = []
        calls: list[tuple[int, int]] = []
        refuse = [False]

        def fakeFcntl(fd: int, command: int) -> int:
            calls.append((fd, command))
            if refuse[0]:
                raise OSError(errno.ENOTTY, "Inappropriate ioctl for device")
            return 0

        self.patch(_syncd, "_FULLFSYNC", 51)
        self.patch(os, "fsync", synced.append)
        self.patch(fcntl, "fcntl", fakeFcntl)
        fsyncFully(7)
        self.assertEqual((calls, synced), ([(7, 51)], []))
        refuse[0] = True
        fsyncFully(8)
        self.assertEqual((calls, synced), ([(7, 51), (8, 51)], [8]))


class _Marked(StepMarks):
    def __init__(self, index: int, chain: Chain) -> None:
        self.index, self.chain, self.failure = index, chain, None


class StepMarksTests(SynchronousTestCase):
    """
    A step's failure and its chain's break.
    """

    def test_firstErrorKept(self) -> None:
        """
        A step that fails twice keeps its first error, and so does its
        chain; a later step of the chain is refused with it.
        """
        chain = Chain()
        step, later, earlier = _Marked(5, chain), _Marked(6, chain), _Marked(4, chain)
        first, second = OSError(errno.EIO, "first"), OSError(errno.ENOSPC, "second")
        step.fail(first)
        step.fail(second)
        self.assertIs(step.failure, first)
        self.assertEqual((chain.brokenAt, chain.failure), (5, first))
        self.assertTrue(later.refused())
        self.assertIs(later.failure, first)
        self.assertFalse(earlier.refused())
        earlier.fail(second)
        self.assertEqual((chain.brokenAt, chain.failure), (4, second))
        self.assertIn("brokenAt=4", repr(chain))

    def test_refusedFromWhereItBroke(self) -> None:
        """
        A chain broken at a step refuses that very step, as every later one.
        """
        error = OSError(errno.EIO, "before")
        at = _Marked(3, Chain(brokenAt=3, failure=error))
        self.assertTrue(at.refused())
        self.assertIs(at.failure, error)


class AnnotationTests(SynchronousTestCase):
    def test_annotationsResolve(self) -> None:
        assertAnnotationsResolve(self, _syncd)
