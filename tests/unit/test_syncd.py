"""
The sync helper's own module (L{vehicle._syncd}): its wire, its errors, a
whole append, the helper's messages and its loop over a real socket.
"""

from __future__ import annotations

import errno
import os
import socket
import struct
import threading
from collections import deque
from pathlib import Path
from typing import Any

from twisted.trial.unittest import SynchronousTestCase

from tests.support._hints import assertAnnotationsResolve
from vehicle import _syncd
from vehicle._syncd import (
    MAX_FRAME,
    Helper,
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
        self.helper = Helper(self.ops)
        self.root = Path(self.mktemp())
        self.root.mkdir()

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
        self.assertRaises(ValueError, self.helper.handle, ("open", 3), deque())

    def test_unknown(self) -> None:
        """
        A message it does not know is refused.
        """
        self.assertRaises(ValueError, self.helper.handle, ("sing",), deque())

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
        self.assertIsInstance(logs[a][2], float)
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

    def test_refusedAfterAFailure(self) -> None:
        """
        After a failed write, a later phase's line to that log is refused
        without a write.
        """
        a = self.log("a")
        self.ops.failWrite = OSError(errno.ENOSPC, "full")
        answer = self.helper.handle(("batch", {0: None, 1: None}, [
            (1, 0, ((a, 0, b"x\n"),)), (2, 1, ((a, 1, b"y\n"),)),
        ], {a: (0, None)}), deque())
        assert answer is not None
        self.assertEqual(set(answer[1]), {1, 2})
        self.assertIn("an earlier write failed", answer[1][2][1][0])
        self.assertEqual([c for c, _ in self.ops.calls if c == "write"], ["write"])


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
        buffer = bytearray()
        answers: list[tuple[Any, ...]] = []
        while not answers:
            buffer += ours.recv(4096)
            answers = takeFrames(buffer)
        self.assertEqual(answers[0][:2], ("done", {}))
        self.assertEqual(path.read_bytes(), b"line\n")
        ours.shutdown(socket.SHUT_WR)
        thread.join(30)
        self.assertEqual(ended, [None])
        theirs.close()

    def test_badFrameEnds(self) -> None:
        """
        What no host sends ends the helper with an error.
        """
        ours, theirs = socket.socketpair()
        self.addCleanup(ours.close)
        self.addCleanup(theirs.close)
        ours.sendall(frame(("sing",)))
        self.assertRaises(ValueError, serve, theirs, OsOps())


class AnnotationTests(SynchronousTestCase):
    def test_annotationsResolve(self) -> None:
        assertAnnotationsResolve(self, _syncd)
