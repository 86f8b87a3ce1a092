"""
Tests for L{vehicle.web._limits}: a real L{VehicleSite} over a
L{StringTransport} on a L{Clock}.  Bodies over 1 MiB are C{body_too_large}
413 whether announced or chunked; a client that trickles its headers is cut
off at the deadline; a refused connection lingers (its sending side closed,
what still comes read and dropped) for a bounded time and a bounded number
of bytes, then is cut.
"""

from __future__ import annotations

import json

from twisted.internet.address import IPv4Address
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from twisted.trial.unittest import SynchronousTestCase

from vehicle.errors import VehicleError
from vehicle.web import MAX_BODY_BYTES, VehicleSite
from vehicle._request import BoundedRequest
from vehicle.web._limits import (
    HEADERS_LIMIT,
    LINGER_BYTES,
    LINGER_SECONDS,
    MAX_HEADERS,
    REQUEST_LINE_LIMIT,
    GuardedChannel,
    _escapeTarget,
    refusalBytes,
)

from tests.support.byline import byLine
from tests.support.harness import Harness
from tests.support.rawhttp import RawConnection
from tests.support.schemas import assertValidFrame
from tests.support.spies import spyOn


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
        self.assertTrue(conn.closed)

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
            if conn.closed:
                break
            conn.send(b"%x\r\n" % len(chunk) + chunk + b"\r\n")
        self.assertTooLarge(conn)
        self.assertTrue(conn.closed)


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
        self.assertFalse(conn.closed)
        self.h.clock.advance(1)
        self.assertTrue(conn.closed)
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
        self.assertFalse(conn.closed)
        self.h.clock.advance(0.1)
        self.assertTrue(conn.closed)
        self.assertTrue(conn.cut)
        self.assertEqual(conn.output(), b"")

    def test_idleAfterAnAnswerCutSilently(self) -> None:
        """
        A kept-alive connection idle after its answer is cut at the next
        deadline with nothing more written (no C{request_timeout}: no
        request was under way).
        """
        conn = RawConnection(self.h, headerTimeout=10)
        conn.send(conn.head("GET", "/health"))
        self.assertEqual(conn.status(), 200)
        answered = conn.output()
        conn.send(b"")
        self.h.clock.advance(10)
        self.assertTrue(conn.cut)
        self.assertEqual(conn.output(), answered)

    def test_noDeadlineWhileAnswering(self) -> None:
        """
        A request being answered (a long-poll) is never cut by the
        deadline, even when the next request arrived meanwhile; the next
        one is answered once it is.
        """
        sid = self.h.create()["sessionId"]
        conn = RawConnection(self.h, headerTimeout=10)
        conn.send(conn.head("GET", f"/sessions/{sid}/events?since=2&waitMs=25000"))
        conn.send(conn.head("GET", "/health"))
        self.h.clock.advance(15)
        self.assertEqual(conn.output(), b"")
        self.assertFalse(conn.closed)
        self.h.clock.advance(10)
        self.assertEqual(conn.output().count(b"HTTP/1.1 200 "), 2)
        self.assertFalse(conn.closed)

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
        self.assertFalse(conn.closed)

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
        self.assertFalse(conn.closed)
        conn.send(b"GET /health HTTP/1.1\r\n")
        self.h.clock.advance(9.9)
        self.assertFalse(conn.closed)
        self.h.clock.advance(0.1)
        self.assertTrue(conn.closed)


class AddressTests(SynchronousTestCase):
    """
    A connection's addresses are asked of its transport once, whatever
    number of requests it carries; each request has them.
    """

    def test_askedOnce(self) -> None:
        h = Harness(self)
        self.addCleanup(h.stop)
        conn = RawConnection(h)
        asked: list[str] = []
        for name in ("getHost", "getPeer"):
            real = getattr(conn.transport, name)

            def counted(name: str = name, real: object = real) -> object:
                asked.append(name)
                return real()  # type: ignore[operator]

            self.patch(conn.transport, name, counted)
        # Where process is defined: a patch restored leaves no copy behind.
        requests = spyOn(self, BoundedRequest, "process")
        for _ in range(3):
            conn.send(conn.head("GET", "/health"))
        self.assertEqual(len(requests), 3)
        self.assertEqual(sorted(asked), ["getHost", "getPeer"])
        for request in requests:
            self.assertEqual(request.getHost(), conn.transport.getHost())
            self.assertEqual(request.getClientAddress(), IPv4Address("TCP", "127.0.0.1", 40000))


class LingeringTests(SynchronousTestCase):
    """
    A refusal is answered, then the connection lingers: nothing more is
    written, the sending side is closed, and what the client still sends is
    read and dropped, for at most L{LINGER_SECONDS} and L{LINGER_BYTES};
    then the connection is cut.
    """

    def setUp(self) -> None:
        self.h = Harness(self)
        self.addCleanup(self.h.stop)

    def refused(self) -> RawConnection:
        """
        A connection refused by its announced length, the frame written.
        """
        conn = RawConnection(self.h)
        conn.send(conn.head("POST", "/sessions", length=4 * MAX_BODY_BYTES))
        self.assertEqual(conn.status(), 413)
        self.assertEqual(conn.frame()["code"], "body_too_large")
        return conn

    def test_lingersThenCut(self) -> None:
        """
        After the refusal the sending side is closed but the connection is
        not: the body the client goes on sending is read and dropped,
        unparsed and unanswered, until L{LINGER_SECONDS} have passed; then
        the connection is cut.
        """
        conn = self.refused()
        answer = conn.output()
        self.assertTrue(conn.transport.writeClosed)
        self.assertFalse(conn.transport.disconnecting)
        self.assertIsNone(conn.transport.producer)  # the channel stopped producing
        conn.send(b"GET /health HTTP/1.1\r\n\r\n" + b"x" * MAX_BODY_BYTES)
        self.h.clock.advance(LINGER_SECONDS - 0.1)
        self.assertFalse(conn.cut)
        self.assertEqual(conn.output(), answer)
        self.h.clock.advance(0.1)
        self.assertTrue(conn.cut)
        self.assertEqual(conn.output(), answer)

    def test_boundedBytes(self) -> None:
        """
        A client that sends more than L{LINGER_BYTES} after the refusal is
        cut at once, without waiting for the time bound.
        """
        conn = self.refused()
        chunk = b"x" * (1 << 20)
        for _ in range(LINGER_BYTES // len(chunk)):
            conn.send(chunk)
        self.assertFalse(conn.cut)
        conn.send(b"x")
        self.assertTrue(conn.cut)
        conn.send(chunk)  # what is still in flight is dropped, cut once
        self.h.clock.advance(LINGER_SECONDS)
        self.assertEqual(conn.frame()["code"], "body_too_large")

    def test_clientCloseEndsIt(self) -> None:
        """
        A client that reads the answer and closes ends the lingering: the
        connection is never cut afterwards.
        """
        conn = self.refused()
        conn.lose()
        self.h.clock.advance(LINGER_SECONDS * 2)
        self.assertFalse(conn.cut)

    def test_everyRefusalLingers(self) -> None:
        """
        A chunked body over the limit, a request line too long and a
        malformed request are refused the same way: answered, then the
        sending side closed and the connection cut after the time bound.
        """
        for data, code in (
            (None, "body_too_large"),
            (b"GET /" + b"a" * (20 * 1024) + b" HTTP/1.1\r\n", "uri_too_long"),
            (b"GET /x HTTP/1.1\r\nno colon\r\n\r\n", "invalid_request"),
        ):
            conn = RawConnection(self.h)
            if data is None:
                conn.send(conn.head("POST", "/sessions", chunked=True))
                chunk = b"x" * 65536
                while not conn.closed:
                    conn.send(b"%x\r\n" % len(chunk) + chunk + b"\r\n")
            else:
                conn.send(data)
            self.assertEqual(conn.frame()["code"], code)
            self.assertTrue(conn.transport.writeClosed, code)
            self.assertFalse(conn.cut, code)
            self.h.clock.advance(LINGER_SECONDS)
            self.assertTrue(conn.cut, code)

    def test_withoutHalfClose(self) -> None:
        """
        On a transport that cannot half-close, the refusal is written and
        the connection closed at once (nothing to linger on).
        """
        site = VehicleSite(self.h.api.resource(), self.h.clock)
        channel = site.buildProtocol(IPv4Address("TCP", "127.0.0.1", 40000))
        transport = StringTransport()
        channel.makeConnection(transport)
        channel.dataReceived(b"POST /sessions HTTP/1.1\r\ncontent-length: %d\r\n\r\n" % (1 << 30))
        self.assertTrue(transport.value().startswith(b"HTTP/1.1 413 "))
        self.assertTrue(transport.disconnecting)


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


class DocumentedLimitsTests(SynchronousTestCase):
    """
    The limits are the ones docs/operating.md gives (the tests of each
    refusal hold the code to its constant; this holds the constants).
    """

    def test_values(self) -> None:
        """
        1 MiB of body, a 16 KiB request line, 16 KiB of header lines in
        at most 500, 10 s for a request to arrive, lingering 10 s and
        16 MiB.
        """
        self.assertEqual(
            (MAX_BODY_BYTES, REQUEST_LINE_LIMIT, HEADERS_LIMIT, MAX_HEADERS),
            (1 << 20, 16 << 10, 16 << 10, 500),
        )
        self.assertEqual((LINGER_SECONDS, LINGER_BYTES), (10.0, 16 << 20))
        self.assertEqual(GuardedChannel.headerTimeout, 10.0)
        self.assertEqual(VehicleSite(None, Clock()).headerTimeout, 10.0)


class EscapeTargetTests(SynchronousTestCase):
    """
    L{_escapeTarget}: a request line's target percent-encoded where it is
    not ASCII, nothing else touched.
    """

    def test_bytesOverASCII(self) -> None:
        """
        Each byte from C{0x80} up is escaped (in capitals); C{0x7f} and
        below, the method and the version are kept.
        """
        self.assertEqual(_escapeTarget(b"GET /a\x7f\x80\xff HTTP/1.1"),
                         b"GET /a\x7f%80%FF HTTP/1.1")

    def test_notThreeParts(self) -> None:
        """
        A line that is not three parts is left as it is (Twisted refuses
        it).
        """
        for line in (b"GET /\xff", b"GET /\xff HTTP/1.1 x", b"/\xff"):
            self.assertEqual(_escapeTarget(line), line)


BodyLimitByLineTests = byLine(BodyLimitTests)
HeaderDeadlineByLineTests = byLine(HeaderDeadlineTests)
LingeringByLineTests = byLine(LingeringTests)
