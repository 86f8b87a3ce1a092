"""
Tests for L{vehicle.web._limits}: a real L{VehicleSite} over a
L{StringTransport} on a L{Clock}.  Bodies over 1 MiB are C{body_too_large}
413 whether announced or chunked; a client that trickles its headers is cut
off at the deadline.
"""

from __future__ import annotations

import json

from twisted.trial.unittest import SynchronousTestCase

from vehicle.errors import VehicleError
from vehicle.web import MAX_BODY_BYTES
from vehicle.web._limits import refusalBytes

from tests.support.harness import Harness
from tests.support.rawhttp import RawConnection
from tests.support.schemas import assertValidFrame


class BodyLimitTests(SynchronousTestCase):
    """
    C{body_too_large} by C{Content-Length} and by chunks.
    """

    def setUp(self) -> None:
        self.h = Harness(self)
        self.addCleanup(self.h.stop)
        self.sid = self.h.create()["sessionId"]

    def assertTooLarge(self, conn: RawConnection) -> None:
        self.assertEqual(conn.status(), 413, conn.output()[:300])
        frame = conn.frame()
        assertValidFrame(self, frame)
        self.assertEqual(frame["code"], "body_too_large")
        self.assertEqual(frame["details"]["limit"], MAX_BODY_BYTES)

    def padded(self, size: int) -> bytes:
        """
        A create body of exactly C{size} bytes (its title is far too long).
        """
        shell = b'{"requestId":"big","title":""}'
        return shell[:-2] + b"a" * (size - len(shell)) + shell[-2:]

    def test_atTheLimit(self) -> None:
        """
        A body of exactly 1 MiB reaches validation (its title is too long:
        C{invalid_request}), it is not refused by size.
        """
        conn = RawConnection(self.h)
        body = self.padded(MAX_BODY_BYTES)
        conn.send(conn.head("POST", "/sessions", length=len(body)) + body)
        self.assertEqual(conn.status(), 400)
        self.assertEqual(conn.frame()["code"], "invalid_request")

    def test_byContentLength(self) -> None:
        """
        One byte over, announced by C{Content-Length}, is 413 and nothing is
        created.
        """
        conn = RawConnection(self.h)
        body = self.padded(MAX_BODY_BYTES + 1)
        conn.send(conn.head("POST", "/sessions", length=len(body)) + body)
        self.assertTooLarge(conn)
        code, frame = self.h.call("GET", "/sessions")
        self.assertEqual(len(frame["value"]["sessions"]), 1)

    def test_hugeContentLengthAnsweredAtOnce(self) -> None:
        """
        A C{Content-Length} far over the limit is answered before any body
        arrives, and the connection is closed.
        """
        conn = RawConnection(self.h)
        conn.send(conn.head("POST", "/sessions", length=1 << 40))
        self.assertTooLarge(conn)
        self.assertTrue(conn.transport.disconnecting)

    def test_byChunks(self) -> None:
        """
        A chunked body that grows over the limit is 413 (no length was
        announced).
        """
        conn = RawConnection(self.h)
        conn.send(conn.head("POST", f"/sessions/{self.sid}/commands", chunked=True))
        chunk = b"x" * 65536
        for _ in range(MAX_BODY_BYTES // len(chunk) + 1):
            conn.send(b"%x\r\n" % len(chunk) + chunk + b"\r\n")
        conn.send(b"0\r\n\r\n")
        self.assertTooLarge(conn)

    def test_smallChunkedBodyAccepted(self) -> None:
        """
        A chunked body under the limit is read whole and handled.
        """
        conn = RawConnection(self.h)
        body = json.dumps({"requestId": "k", "ttlMs": 5000}).encode()
        conn.send(conn.head("POST", f"/sessions/{self.sid}/claim", chunked=True))
        conn.send(b"%x\r\n" % 5 + body[:5] + b"\r\n")
        conn.send(b"%x\r\n" % (len(body) - 5) + body[5:] + b"\r\n0\r\n\r\n")
        self.assertEqual(conn.status(), 200, conn.output())
        frame = conn.frame()
        assertValidFrame(self, frame)
        self.assertEqual(frame["value"]["lease"]["ttlMs"], 5000)

    def test_endlessChunksCutOff(self) -> None:
        """
        A chunked body that goes on far past the limit is answered and the
        connection dropped, without waiting for its end.
        """
        conn = RawConnection(self.h)
        conn.send(conn.head("POST", f"/sessions/{self.sid}/commands", chunked=True))
        chunk = b"x" * (1 << 20)
        for _ in range(17):
            if conn.transport.disconnecting:
                break
            conn.send(b"%x\r\n" % len(chunk) + chunk + b"\r\n")
        self.assertTooLarge(conn)
        self.assertTrue(conn.transport.disconnecting)


class HeaderDeadlineTests(SynchronousTestCase):
    """
    A client that trickles its headers is cut off on the clock.
    """

    def setUp(self) -> None:
        self.h = Harness(self)
        self.addCleanup(self.h.stop)

    def test_trickleCutOff(self) -> None:
        """
        Headers sent a line at a time, never finished, are answered
        C{request_timeout} (408, the frame) and cut off when the deadline
        passes, whatever arrived meanwhile.
        """
        conn = RawConnection(self.h, headerTimeout=10)
        conn.send(b"GET /health HTTP/1.1\r\n")
        for _ in range(9):
            self.h.clock.advance(1)
            conn.send(b"x-slow: 1\r\n")
        self.assertFalse(conn.transport.disconnecting)
        self.h.clock.advance(1)
        self.assertTrue(conn.transport.disconnecting)
        self.assertEqual(conn.status(), 408)
        frame = conn.frame()
        assertValidFrame(self, frame)
        self.assertEqual(frame["code"], "request_timeout")

    def test_idleConnectionCutOff(self) -> None:
        """
        A connection that sends nothing is cut off at the deadline too.
        """
        conn = RawConnection(self.h, headerTimeout=5)
        self.h.clock.advance(4.9)
        self.assertFalse(conn.transport.disconnecting)
        self.h.clock.advance(0.1)
        self.assertTrue(conn.transport.disconnecting)

    def test_promptHeadersServed(self) -> None:
        """
        Headers that arrive in time are served, and the deadline does not
        fire afterwards on a request still being answered.
        """
        conn = RawConnection(self.h, headerTimeout=10)
        conn.send(conn.head("GET", "/health"))
        self.assertEqual(conn.status(), 200)
        assertValidFrame(self, conn.frame())
        self.h.clock.advance(9)
        self.assertFalse(conn.transport.disconnecting)

    def test_nextRequestHasItsOwnDeadline(self) -> None:
        """
        On a kept-alive connection, the next request's headers get a fresh
        deadline.
        """
        conn = RawConnection(self.h, headerTimeout=10)
        self.h.clock.advance(8)
        conn.send(conn.head("GET", "/health"))
        self.assertEqual(conn.status(), 200)
        self.h.clock.advance(5)
        self.assertFalse(conn.transport.disconnecting)
        conn.send(b"GET /health HTTP/1.1\r\n")
        self.h.clock.advance(9.9)
        self.assertFalse(conn.transport.disconnecting)
        self.h.clock.advance(0.1)
        self.assertTrue(conn.transport.disconnecting)


class RefusalBytesTests(SynchronousTestCase):
    """
    L{refusalBytes}: a whole response, made by L{vehicle.errors.answerError}.
    """

    def test_whole(self) -> None:
        """
        The status line with its reason (Twisted's, or the host's own for
        431), the frame's headers, C{Connection: close}, the length, then
        the frame.
        """
        raw = refusalBytes(VehicleError("headers_too_large", "too many", {"limit": 1}))
        head, _, body = raw.partition(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        self.assertEqual(lines[0], b"HTTP/1.1 431 Request Header Fields Too Large")
        self.assertEqual(
            sorted(lines[1:]),
            sorted([
                b"Content-Type: application/json",
                b"Cache-Control: no-store",
                b"Connection: close",
                b"Content-Length: %d" % len(body),
            ]),
        )
        frame = json.loads(body)
        assertValidFrame(self, frame)
        self.assertEqual((frame["code"], frame["details"]), ("headers_too_large", {"limit": 1}))
        self.assertTrue(refusalBytes(VehicleError("body_too_large", "x")).startswith(
            b"HTTP/1.1 413 Request Entity Too Large\r\n"))
