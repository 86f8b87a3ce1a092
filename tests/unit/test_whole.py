"""
Tests for the whole-request shortcut of L{vehicle.web._limits}: a plain
request that arrives in one read is read at once (L{wholeRequest}) and
handed to Twisted's channel (L{vehicle._twistedparts.takeWhole}); anything
else is read line by line.  Either way the host answers alike: the same
requests, whole and cut into pieces, to a channel with the shortcut and one
without, see the same request and write the same bytes, and leave their
channels ready for the next request alike.
"""

from __future__ import annotations

import re
from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from twisted.internet.address import IPv4Address
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from twisted.trial.unittest import SynchronousTestCase
from twisted.web.resource import Resource
from twisted.web.server import NOT_DONE_YET, Request

from vehicle._twistedparts import atRest
from vehicle.web import MAX_BODY_BYTES, VehicleSite
from vehicle.web import _limits
from vehicle.web._limits import (
    HEADERS_LIMIT,
    MAX_HEADERS,
    REQUEST_LINE_LIMIT,
    GuardedChannel,
    wholeRequest,
)

from tests.support._fuzz import examples
from tests.support._hints import assertAnnotationsResolve
from tests.support.spies import spyOn


PLAIN = (
    b"PATCH /sessions/s1 HTTP/1.1\r\nHost: h\r\nx-graph-id:  g1 \t\r\n"
    b"content-length: 5\r\n\r\nhello"
)


class WholeRequestTests(SynchronousTestCase):
    """
    L{wholeRequest} reads a plain request at once, and leaves anything
    else to Twisted's parser.
    """

    def test_plain(self) -> None:
        """
        The line, the headers by Twisted's spelling with their values
        stripped of spaces and tabs, the length and the body.
        """
        whole = wholeRequest(PLAIN, MAX_BODY_BYTES)
        assert whole is not None
        self.assertEqual(whole.line, (b"PATCH", b"/sessions/s1", b"HTTP/1.1"))
        self.assertEqual(whole.headers, {
            b"Host": [b"h"], b"X-Graph-Id": [b"g1"], b"Content-Length": [b"5"],
        })
        self.assertEqual((whole.length, whole.body), (5, b"hello"))

    def test_noBody(self) -> None:
        """
        A request without C{Content-Length} has no body; one header named
        twice keeps both values, in order; a length of zeros is C{0}.
        """
        whole = wholeRequest(b"GET / HTTP/1.0\r\nA: 1\r\na: 2\r\n\r\n", 10)
        assert whole is not None
        self.assertEqual(whole.headers, {b"A": [b"1", b"2"]})
        self.assertEqual((whole.length, whole.body), (0, b""))
        whole = wholeRequest(b"POST / HTTP/1.1\r\nContent-Length: 000\r\n\r\n", 10)
        assert whole is not None
        self.assertEqual((whole.length, whole.headers), (0, {b"Content-Length": [b"0"]}))

    def test_leadingZeros(self) -> None:
        """
        The length is kept without its leading zeros, as the line-by-line
        read keeps it.
        """
        whole = wholeRequest(b"POST / HTTP/1.1\r\ncontent-length: 0002\r\n\r\nab", 10)
        assert whole is not None
        self.assertEqual(whole.headers[b"Content-Length"], [b"2"])

    def test_atTheLimits(self) -> None:
        """
        A body of exactly the limit, a request line of exactly
        L{REQUEST_LINE_LIMIT}, and header lines of exactly L{HEADERS_LIMIT}
        bytes with their line ends, are read whole.
        """
        self.assertIsNotNone(wholeRequest(b"POST / HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc", 3))
        target = b"/" + b"a" * (REQUEST_LINE_LIMIT - len(b"GET / HTTP/1.1"))
        line = b"GET " + target + b" HTTP/1.1"
        self.assertEqual(len(line), REQUEST_LINE_LIMIT)
        self.assertIsNotNone(wholeRequest(line + b"\r\n\r\n", 0))
        header = b"\r\nX: " + b"v" * (HEADERS_LIMIT - 5)
        self.assertIsNotNone(wholeRequest(b"GET / HTTP/1.1" + header + b"\r\n\r\n", 0))
        lines = b"".join(b"\r\nX: v" for _ in range(MAX_HEADERS - 1))
        self.assertIsNotNone(wholeRequest(b"GET / HTTP/1.1" + lines + b"\r\n\r\n", 0))

    def test_notPlain(self) -> None:
        """
        Each way a request is not plain: L{None}.
        """
        lines = b"".join(b"\r\nX: v" for _ in range(MAX_HEADERS))
        notPlain = {
            "no end of head": b"GET / HTTP/1.1\r\nHost: h\r\n",
            "body short": b"POST / HTTP/1.1\r\nContent-Length: 5\r\n\r\nabc",
            "body long": b"POST / HTTP/1.1\r\nContent-Length: 1\r\n\r\nabc",
            "pipelined": b"GET / HTTP/1.1\r\n\r\nGET / HTTP/1.1\r\n\r\n",
            "over the limit": b"POST / HTTP/1.1\r\nContent-Length: 11\r\n\r\n" + b"a" * 11,
            "19 digits": b"POST / HTTP/1.1\r\nContent-Length: 1" + b"0" * 18 + b"\r\n\r\n",
            "more digits than int() reads": b"POST / HTTP/1.1\r\nContent-Length: "
            + b"1" * 5000 + b"\r\n\r\n",
            "length not digits": b"POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n",
            "two lengths": b"POST / HTTP/1.1\r\nContent-Length: 1\r\ncontent-length: 1\r\n\r\na",
            "chunked": b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n",
            "expect": b"POST / HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\na",
            "continuation": b"GET / HTTP/1.1\r\nX: a\r\n b\r\n\r\n",
            "tab continuation": b"GET / HTTP/1.1\r\nX: a\r\n\tb\r\n\r\n",
            "bare LF": b"GET / HTTP/1.1\r\nX: a\nY: b\r\n\r\n",
            "bare CR": b"GET / HTTP/1.1\r\nX: a\rb\r\n\r\n",
            "NUL": b"GET / HTTP/1.1\r\nX: a\x00b\r\n\r\n",
            "no colon": b"GET / HTTP/1.1\r\nno colon\r\n\r\n",
            "bad name": b"GET / HTTP/1.1\r\nbad name: x\r\n\r\n",
            "space before colon": b"GET / HTTP/1.1\r\nContent-Length : 1\r\n\r\na",
            "empty name": b"GET / HTTP/1.1\r\n: x\r\n\r\n",
            "empty first line": b"\r\nGET / HTTP/1.1\r\n\r\n",
            "bad request line": b"GET /  HTTP/1.1\r\n\r\n",
            "bad version": b"GET / HTTP/2.0\r\n\r\n",
            "not ASCII": b"GET /\xc3\xa9 HTTP/1.1\r\n\r\n",
            "long line": b"GET /" + b"a" * REQUEST_LINE_LIMIT + b" HTTP/1.1\r\n\r\n",
            "long headers": b"GET / HTTP/1.1\r\nX: " + b"v" * HEADERS_LIMIT + b"\r\n\r\n",
            "many headers": b"GET / HTTP/1.1" + lines + b"\r\n\r\n",
        }
        for what, data in notPlain.items():
            self.assertEqual((what, wholeRequest(data, 10)), (what, None))

    def test_namesSpelledOnceBounded(self) -> None:
        """
        Names are spelled by Twisted's headers and kept, at most
        C{_SPELLED_MOST} of them.
        """
        self.patch(_limits, "_SPELLED", {})
        self.patch(_limits, "_SPELLED_MOST", 2)
        for n in range(4):
            wholeRequest(b"GET / HTTP/1.1\r\nx-name-%d: v\r\n\r\n" % n, 0)
        self.assertEqual(_limits._SPELLED, {b"x-name-0": b"X-Name-0", b"x-name-1": b"X-Name-1"})
        whole = wholeRequest(b"GET / HTTP/1.1\r\nx-name-3: v\r\n\r\n", 0)
        assert whole is not None
        self.assertEqual(list(whole.headers), [b"X-Name-3"])


class _Echo(Resource):
    """
    Answers every request with what it saw of it, and keeps that.
    """

    isLeaf = True

    def __init__(self, later: bool = False) -> None:
        super().__init__()
        self.seen: list[Any] = []
        self.held: list[Request] = []
        self.later = later

    def render(self, request: Request) -> Any:
        body = request.content.read()
        seen = (
            request.method, request.uri, request.path, request.clientproto,
            sorted((k, tuple(v)) for k, v in request.requestHeaders.getAllRawHeaders()),
            sorted(request.received_cookies.items()), body, request.args,
        )
        self.seen.append(seen)
        request.setHeader(b"content-type", b"text/plain")
        if self.later:
            self.held.append(request)
            return NOT_DONE_YET
        return repr(seen).encode()


def _serve(data: list[bytes], readsWhole: bool, later: bool = False) -> tuple[Any, ...]:
    clock = Clock()
    clock.advance(1_796_000_000)
    echo = _Echo(later)
    site = VehicleSite(echo, clock)
    channel = site.buildProtocol(IPv4Address("TCP", "127.0.0.1", 4000))
    channel.readsWhole = readsWhole
    transport = StringTransport()
    channel.makeConnection(transport)
    for piece in data:
        if transport.disconnecting:
            break
        channel.dataReceived(piece)
        for request in echo.held:
            request.write(b"later")
            request.finish()
        echo.held.clear()
    return (
        # Twisted dates each answer by the wall clock: a second may turn
        # between two reads of the same bytes.
        echo.seen, re.sub(rb"\r\nDate: [^\r]*", b"\r\nDate: -", transport.value()),
        transport.disconnecting, channel.persistent,
        channel._answering, channel._refused, channel._started, channel._inRequest,
        channel._deadline is None, len(channel.requests),
        not transport.disconnecting and atRest(channel),
    )


#: A request's parts: plain ones (read whole), and each kind the parser
#: treats apart (one part in twenty, drawn by L{_part}).
_PLAIN_NAMES = st.sampled_from([
    b"Host", b"host", b"X-Graph-Id", b"x-user-id", b"Cookie", b"Connection", b"Content-Type",
    b"Accept", b"X-A", b"x!#$%&'*+-.^_`|~",
])
_HOSTILE_NAMES = st.sampled_from([
    b"content-length", b"Content-Length", b"Transfer-Encoding", b"Expect", b"bad name", b"",
    b" Host", b"Host ", b"X\x00", b"Caf\xc3\xa9", b"a:b",
])
_PLAIN_VALUES = st.one_of(
    st.sampled_from([
        b"h", b"", b" v ", b"\tv\t", b"close", b"keep-alive", b"a=1; b=2", b"application/json",
        b"\xff\xfe", b"3", b"  ",
    ]),
    st.binary(max_size=12).filter(lambda v: not set(v) & set(b"\r\n\x00")),
)
_HOSTILE_VALUES = st.one_of(
    st.sampled_from([
        b"chunked", b"100-continue", b"0", b"007", b"-1", b"1" * 19, b"x\x00y", b"x\ny", b"x\ry",
    ]),
    st.binary(max_size=12),
)
_PLAIN_LINES = st.builds(
    lambda m, t, v: m + b" " + t + b" " + v,
    st.sampled_from([b"GET", b"POST", b"PATCH", b"DELETE", b"OPTIONS", b"HEAD"]),
    st.sampled_from([b"/", b"/sessions/s1", b"/a?b=c&d", b"*", b"/%C3%A9", b"/a;b"]),
    st.sampled_from([b"HTTP/1.1"] * 5 + [b"HTTP/1.0"]),
)
_HOSTILE_LINES = st.one_of(
    st.builds(
        lambda m, t, v: m + b" " + t + b" " + v,
        st.sampled_from([b"GET", b"G(T", b""]),
        st.sampled_from([b"/", b"/\xc3\xa9", b"/a b", b""]),
        st.sampled_from([b"HTTP/1.1", b"HTTP/2.0", b"http/1.1"]),
    ),
    st.binary(max_size=20),
)


def _part(draw: Any, plain: st.SearchStrategy[bytes], hostile: st.SearchStrategy[bytes]) -> bytes:
    return draw(hostile) if draw(st.integers(0, 19)) == 0 else draw(plain)


@st.composite
def _requests(draw: Any) -> bytes:
    line = _part(draw, _PLAIN_LINES, _HOSTILE_LINES)
    headers = [
        (_part(draw, _PLAIN_NAMES, _HOSTILE_NAMES), _part(draw, _PLAIN_VALUES, _HOSTILE_VALUES))
        for _ in range(draw(st.integers(0, 6)))
    ]
    head = [line] + [name + b":" + value for name, value in headers]
    if draw(st.integers(0, 19)) == 0:
        head.insert(draw(st.integers(1, len(head))), draw(st.sampled_from([b" cont", b"\tcont"])))
    body = draw(st.binary(max_size=8))
    if body or draw(st.booleans()):
        # The right length mostly; at times one short or one over, or none.
        off = draw(st.sampled_from([0] * 12 + [-1, 1, None]))
        if off is not None:
            head.append(b"Content-Length: %d" % max(0, len(body) + off))
    request = b"\r\n".join(head) + b"\r\n\r\n" + body
    if draw(st.integers(0, 19)) == 0:
        request = draw(st.sampled_from([b"\r\n", b"\r\n\r\n"])) + request
    return request


@st.composite
def _pieces(draw: Any) -> list[bytes]:
    """
    One to three requests, then a plain one: each in a read of its own
    (mostly), all in one read, or cut at random points.
    """
    requests = draw(st.lists(_requests(), min_size=1, max_size=3))
    requests.append(b"GET /last HTTP/1.1\r\nHost: h\r\n\r\n")
    how = draw(st.integers(0, 5))
    if how <= 3:
        pieces = requests
    elif how == 4:
        pieces = [b"".join(requests)]
    else:
        data = b"".join(requests)
        cuts = sorted(draw(st.lists(st.integers(0, len(data)), max_size=3)))
        pieces, start = [], 0
        for cut in cuts + [len(data)]:
            pieces.append(data[start:cut])
            start = cut
    # The plain one again on its own, once the rest has been read.
    return [p for p in pieces if p] + [b"GET /again HTTP/1.1\r\nHost: h\r\n\r\n"]


class SameAnswerTests(SynchronousTestCase):
    """
    A channel that reads whole requests and one that reads every request
    line by line answer alike.
    """

    @examples(300)
    @given(_pieces(), st.booleans())
    def test_alike(self, pieces: list[bytes], later: bool) -> None:
        """
        The same pieces: the same requests seen by the resource, the same
        bytes written, the same state left (persistence, refusal, the
        deadline, the parser at rest), whether each answer is written at
        once or after the read.
        """
        self.assertEqual(_serve(pieces, True, later), _serve(pieces, False, later))

    def test_plainAlike(self) -> None:
        """
        A plain request, a refused one, one over the limit by its length,
        an HTTP/1.0 one (not kept alive), one with cookies: alike (and each
        one's answer is what it should be).
        """
        cases = {
            PLAIN: b"HTTP/1.1 200 ",
            b"GET / HTTP/1.1\r\nbad name: x\r\n\r\n": b"HTTP/1.1 400 ",
            b"POST / HTTP/1.1\r\nContent-Length: %d\r\n\r\n" % (MAX_BODY_BYTES + 1): b"HTTP/1.1 413 ",
            b"GET / HTTP/1.0\r\n\r\n": b"HTTP/1.0 200 ",
            b"GET / HTTP/1.1\r\nCookie: a=1; b=2\r\n\r\n": b"HTTP/1.1 200 ",
        }
        for data, status in cases.items():
            served = _serve([data], True)
            self.assertEqual(served, _serve([data], False))
            self.assertTrue(served[1].startswith(status), served[1][:40])


class ReadsWholeTests(SynchronousTestCase):
    """
    The host's channel takes the shortcut when it may, and only then.
    """

    def setUp(self) -> None:
        self.lines = spyOn(self, GuardedChannel, "lineReceived")

    def test_plainReadWhole(self) -> None:
        """
        A plain request in one read reaches no line-by-line parse, and
        leaves no deadline armed; the next one, too.
        """
        served = _serve([PLAIN, PLAIN], True)
        self.assertEqual(self.lines, [])
        self.assertEqual(len(served[0]), 2)
        self.assertTrue(served[8], "a deadline is left armed")

    def test_bigBodyReadWhole(self) -> None:
        """
        A body of some kilobytes, with its head in one read, is read whole
        too (a length is compared by value, however large).
        """
        body = b"x" * 4000
        data = b"PATCH /s HTTP/1.1\r\nContent-Length: 4000\r\n\r\n" + body
        served = _serve([data], True)
        self.assertEqual(self.lines, [])
        self.assertEqual(served[0][0][6], body)

    def test_piecesReadByLine(self) -> None:
        """
        A request in two reads, or two in one, is read line by line.
        """
        _serve([PLAIN[:10], PLAIN[10:]], True)
        self.assertNotEqual(self.lines, [])
        del self.lines[:]
        _serve([PLAIN + PLAIN], True)
        self.assertNotEqual(self.lines, [])

    def test_lengthOnlyByItsName(self) -> None:
        """
        Read line by line, only C{Content-Length} gives the body's length:
        other headers starting with a c, with a number for a value (before
        and after it in the alphabet), are kept as they came.
        """
        data = (b"PATCH / HTTP/1.1\r\ncache-control: 7\r\ncookie: 12\r\nconnection: 3\r\n"
                b"content-length: 2\r\n\r\nhi")
        served = _serve([data[:5], data[5:]], True)
        self.assertEqual(served, _serve([data], True))
        [seen] = served[0]
        self.assertEqual(seen[4], [
            (b"Cache-Control", (b"7",)), (b"Connection", (b"3",)),
            (b"Content-Length", (b"2",)), (b"Cookie", (b"12",)),
        ])
        self.assertEqual(seen[6], b"hi")

    def test_offReadsByLine(self) -> None:
        """
        With C{readsWhole} off, a plain request is read line by line.
        """
        _serve([PLAIN], False)
        self.assertNotEqual(self.lines, [])

    def test_whileAnsweringWaits(self) -> None:
        """
        A request that comes while the one before is being answered waits,
        put aside, and is read (whole: it is all there) once the first is
        answered.
        """
        clock = Clock()
        echo = _Echo(later=True)
        channel = VehicleSite(echo, clock).buildProtocol(None)
        transport = StringTransport()
        channel.makeConnection(transport)
        channel.dataReceived(PLAIN)
        self.assertEqual(self.lines, [])
        self.assertFalse(atRest(channel))
        channel.dataReceived(PLAIN)
        self.assertEqual(len(echo.seen), 1)
        echo.held.pop().finish()
        self.assertEqual(len(echo.seen), 2)
        self.assertEqual(self.lines, [])
        self.assertFalse(atRest(channel))
        echo.held.pop().finish()
        self.assertTrue(atRest(channel))


class AnnotationTests(SynchronousTestCase):
    def test_annotationsResolve(self) -> None:
        """
        Every annotation of the request limits' module and of the module of
        Twisted's private parts is a type (mutation testing reads them so).
        """
        from vehicle import _twistedparts

        assertAnnotationsResolve(self, _limits)
        assertAnnotationsResolve(self, _twistedparts)
