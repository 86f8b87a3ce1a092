# -*- test-case-name: tests.unit.test_limits,tests.unit.test_hostile -*-
"""
Request limits below the routes, in one place: every refusal the HTTP layer
makes is the error frame (JSON, the error table's status), written once,
and then the connection is closed.

- One deadline for the whole request, request line to the body's last
  byte: a client that trickles either is answered C{request_timeout} and
  cut off (an idle connection, with nothing of a request yet, is just
  closed).
- A request line over L{REQUEST_LINE_LIMIT} is C{uri_too_long}; header
  lines over L{HEADERS_LIMIT} in all, or more than L{MAX_HEADERS} of them,
  are C{headers_too_large}.
- A body over L{MAX_BODY_BYTES} is C{body_too_large}: refused by its
  C{Content-Length} before any of it is read, or cut the moment a chunked
  body passes the limit.  Bodies are kept in memory (bounded), never
  spooled to a file, and never parsed as forms.
- Anything else Twisted finds malformed is C{invalid_request} (the one
  hook into Twisted's privates this needs is L{vehicle._twistedparts}'s).

A request that arrives whole in one read with every part of it plain
(L{wholeRequest}) skips Twisted's line-by-line parse: it is read at once and
handed to the channel as the parser would have had it.  Anything else (a
request in pieces, pipelined, chunked, with a continuation line, a length
over the limit, a name or byte Twisted would refuse) goes the line-by-line
way, where every limit and refusal above is made.

A refusal is a lingering close: the frame is written, the sending side of
the connection is closed (the client reads the answer, then the end), and
what the client still sends (the body it writes before it reads) is read
and discarded, for at most L{LINGER_SECONDS} and L{LINGER_BYTES}; then the
connection is cut.  Closing at once would let the unread body reset the
connection, and a client still writing would never read its answer.
"""

from __future__ import annotations

from typing import Any, cast

from attrs import define, field
from twisted.internet.interfaces import (
    IAddress,
    IConsumer,
    IDelayedCall,
    IReactorTime,
    ITCPTransport,
)
from twisted.internet.protocol import connectionDone
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.web.http import RESPONSES, HTTPChannel
from twisted.web.http_headers import Headers, InvalidHeaderName
from twisted.web.server import Site

from vehicle._sockets import noDelay
from vehicle._request import BoundedRequest, tooLarge
from vehicle._timers import cancelIfActive
from vehicle._twistedparts import MalformedRequestHook, atRest, parseRequestLine, takeWhole
from vehicle.errors import VehicleError, answerError
from vehicle.web._frames import MAX_BODY_BYTES


#: The longest request line, and the most header bytes (after it) and
#: header lines a request may have.
REQUEST_LINE_LIMIT = 16 * 1024
HEADERS_LIMIT = 16 * 1024
MAX_HEADERS = 500

#: After a refusal: how long, and how many more bytes, the host goes on
#: reading (and discarding) before it cuts the connection.
LINGER_SECONDS = 10.0
LINGER_BYTES = 16 * MAX_BODY_BYTES

_log = Logger()


class LimitedRequest(BoundedRequest):
    """
    A request that keeps at most L{MAX_BODY_BYTES} of body in memory (see
    L{BoundedRequest}).
    """

    limit = MAX_BODY_BYTES


#: The first bytes a header line may start with when its name, spaces
#: aside, is C{Content-Length} (any case).
_MAYBE_LENGTH = frozenset([b"c", b"C", *(bytes([space]) for space in b" \t\n\r\x0b\x0c")])

#: Reasons Twisted's table lacks.
_REASONS = {431: b"Request Header Fields Too Large"}


@define
class _Head:
    """
    The status and headers of an answer written straight to the transport
    (there is no request to answer through).
    """

    status: int = 200
    headers: dict[bytes, bytes] = field(factory=dict)

    def setResponseCode(self, code: int) -> None:
        self.status = code

    def setHeader(self, name: bytes, value: bytes) -> None:
        self.headers[name] = value


def refusalBytes(error: VehicleError) -> bytes:
    """
    A whole HTTP/1.1 response carrying C{error}'s frame (L{answerError}),
    closing the connection.
    """
    head = _Head()
    body = answerError(head, error)
    head.headers[b"connection"] = b"close"
    head.headers[b"content-length"] = b"%d" % len(body)
    reason = RESPONSES.get(head.status) or _REASONS.get(head.status, b"Error")
    lines = [b"HTTP/1.1 %d %s" % (head.status, reason)]
    lines += [_canonical(name) + b": " + value for name, value in head.headers.items()]
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


def _canonical(name: bytes) -> bytes:
    return b"-".join(part.capitalize() for part in name.split(b"-"))


@define(frozen=True)
class WholeRequest:
    """
    A request read at once (L{wholeRequest}): its line, its headers (by
    Twisted's spelling of each name, values stripped of spaces and tabs,
    in the order sent), the length it announced and its body.
    """

    line: tuple[bytes, bytes, bytes]
    headers: dict[bytes, list[bytes]]
    length: int
    body: bytes


#: Header names as sent, and as Twisted spells them (bounded: a client
#: sending ever new names gets them spelled, not kept).
_SPELLED: dict[bytes, bytes] = {}
_SPELLED_MOST = 512

#: Headers a whole request may not have: they change how the body is read,
#: or ask for an answer before it (Twisted's parser handles them).
_NOT_PLAIN = frozenset([b"Transfer-Encoding", b"Expect"])


#: The most digits of an announced C{Content-Length} read (leading zeros
#: aside): more is over any body limit, and C{int()} of thousands of digits
#: would raise out of the parser.
LENGTH_DIGITS = 18


def lengthDigits(value: bytes) -> bytes | None:
    """
    The digits of an announced length (C{value}, all digits) without their
    leading zeros, or L{None} when there are more than L{LENGTH_DIGITS}.
    """
    digits = value.lstrip(b"0") or b"0"
    return digits if len(digits) <= LENGTH_DIGITS else None


def _spelled(name: bytes) -> bytes | None:
    """
    C{name} as Twisted's headers spell it (kept in L{_SPELLED}, where the
    reader looks first), or L{None} if Twisted refuses it as a header name.
    """
    headers = Headers()
    try:
        headers.addRawHeader(name, b"")
    except InvalidHeaderName:
        return None
    [(known, _)] = headers.getAllRawHeaders()
    if len(_SPELLED) < _SPELLED_MOST:
        _SPELLED[name] = known
    return known


def wholeRequest(data: bytes, limit: int) -> WholeRequest | None:
    """
    C{data} as exactly one whole request, if every part of it is plain, else
    L{None} (and Twisted's parser reads it line by line).  Plain is: the
    head ends in an empty line, and no CR, LF or NUL is in it but the CRLFs
    that end its lines; the request line is ASCII, within
    L{REQUEST_LINE_LIMIT} and well-formed by Twisted's own judge; the header
    lines are within L{HEADERS_LIMIT} and L{MAX_HEADERS}, none continues
    the line before, each has a name Twisted accepts and a colon; no
    C{Transfer-Encoding} or C{Expect}; at most one C{Content-Length}, of at
    most L{LENGTH_DIGITS} digits and at most C{limit}; and exactly that many bytes follow
    the head (none of a next request).
    """
    head, end, body = data.partition(b"\r\n\r\n")
    if not end:
        return None
    breaks = head.count(b"\r\n")
    if head.count(b"\n") != breaks or head.count(b"\r") != breaks or b"\x00" in head:
        return None
    lines = head.split(b"\r\n")
    first = lines[0]
    if len(first) > REQUEST_LINE_LIMIT or not first.isascii():
        return None
    if len(head) - len(first) > HEADERS_LIMIT or len(lines) > MAX_HEADERS:
        return None
    try:
        line = parseRequestLine(first)
    except ValueError:
        return None
    headers: dict[bytes, list[bytes]] = {}
    length = 0
    for each in lines[1:]:
        name, colon, value = each.partition(b":")
        spelled = (_SPELLED.get(name) or _spelled(name)) if colon else None
        if spelled is None or spelled in _NOT_PLAIN:
            return None
        value = value.strip(b" \t")
        if spelled == b"Content-Length":
            digits = lengthDigits(value) if value.isdigit() else None
            if spelled in headers or digits is None:
                return None
            value, length = digits, int(digits)
        headers.setdefault(spelled, []).append(value)
    if length > limit or len(body) != length:
        return None
    return WholeRequest(line, headers, length, body)


class GuardedChannel(MalformedRequestHook):
    """
    An HTTP channel that bounds each request (see the module's docstring),
    answers every refusal of its own with the error frame, and closes a
    refused connection by lingering.

    What it overrides hands on to L{HTTPChannel}'s own, named as Twisted's
    (C{HTTPChannel.lineReceived(self, line)}) rather than through
    C{super()}: the type checker lets a call of Twisted's unannotated code
    through only when it is named as Twisted's.
    """

    #: Seconds for a whole request to arrive (its line, headers and body).
    headerTimeout: float = 10.0
    #: A plain request that arrives in one read is read at once
    #: (L{wholeRequest}); C{False} reads every request line by line.
    readsWhole: bool = True
    #: After a refusal, the most seconds and bytes read before the cut.
    lingerSeconds: float = LINGER_SECONDS
    lingerBytes: int = LINGER_BYTES
    clock: IReactorTime | None = None

    # Twisted's own per-line and total bounds stay out of the way: ours
    # come first, and answer with a frame.
    MAX_LENGTH = max(REQUEST_LINE_LIMIT, HEADERS_LIMIT)
    totalHeadersSize = 1 << 62
    maxHeaders = 1 << 62

    # This class's own state.  None of these names is Twisted's
    # (tests.unit.test_twistedparts checks), so none shadows a part of
    # HTTPChannel.
    _deadline: IDelayedCall | None = None
    _refused = False
    #: Some of a request (its line at least) arrived and it is not whole yet.
    _inRequest = False
    #: Bytes of the next request arrived (perhaps not yet a whole line).
    _started = False
    #: A whole request is with the site, not yet answered.
    _answering = False
    _headerBytes = 0
    _headerCount = 0
    #: The request's C{Content-Length}, when it announced one.
    _announced: int | None = None
    _lingering: IDelayedCall | None = None
    _discarded = 0
    _cutOff = False
    #: The connection's two addresses, asked of the transport once: each
    #: request asks for both (the local one is a system call each time).
    _hostAddress: IAddress | None = None
    _peerAddress: IAddress | None = None

    def connectionMade(self) -> None:
        # An event stream's deltas leave at once, never behind an ACK
        # (Twisted's channel sets it too; this does not depend on that).
        noDelay(self.transport)
        HTTPChannel.connectionMade(self)
        self._armDeadline()

    def getHost(self) -> IAddress:
        if self._hostAddress is None:
            self._hostAddress = cast(IAddress, HTTPChannel.getHost(self))
        return self._hostAddress

    def getPeer(self) -> IAddress:
        if self._peerAddress is None:
            self._peerAddress = cast(IAddress, HTTPChannel.getPeer(self))
        return self._peerAddress

    # -- receiving ----------------------------------------------------------

    def dataReceived(self, data: bytes) -> None:
        if self._refused:
            self._discard(len(data))
            return
        if not self._answering:
            if self.readsWhole and atRest(self):
                whole = wholeRequest(data, self._limit())
                if whole is not None:
                    takeWhole(self, whole.line, whole.headers, whole.length, whole.body)
                    self.allContentReceived()
                    return
            # Bytes of the next request (those that come while one is
            # answered are handed back here once it is).
            self._started = self._started or bool(data)
            if self._deadline is None:
                self._armDeadline()
        HTTPChannel.dataReceived(self, data)

    def rawDataReceived(self, data: bytes) -> None:
        if self._refused:
            return
        HTTPChannel.rawDataReceived(self, data)

    def lineReceived(self, line: bytes) -> None:
        if self._refused:
            return
        if not self._inRequest:
            if line:
                if len(line) > REQUEST_LINE_LIMIT:
                    self.refuse(_uriTooLong())
                    return
                self._inRequest = True
                self._headerBytes = self._headerCount = 0
                self._announced = None
                line = _escapeTarget(line)
        elif line:
            self._headerBytes += len(line)
            self._headerCount += 1
            if self._headerBytes > HEADERS_LIMIT or self._headerCount > MAX_HEADERS:
                self.refuse(_headersTooLarge())
                return
        HTTPChannel.lineReceived(self, line)

    def headerReceived(self, line: bytes) -> bool:
        if line[:1] not in _MAYBE_LENGTH:
            # Not a Content-Length (whose name, spaces aside, starts with a
            # c): Twisted's own, as it is.
            accepted: bool = HTTPChannel.headerReceived(self, line)
            return accepted
        name, colon, value = line.partition(b":")
        value = value.strip(b" \t")
        length = None
        if colon and name.strip().lower() == b"content-length" and value.isdigit():
            # Read the length here, bounded: Twisted's int() of thousands of
            # digits would raise out of the parser (a silent close).
            length = lengthDigits(value)
            if length is None:
                self.refuse(tooLarge(self._limit()))
                return False
            line = b"Content-Length: " + length
        accepted = HTTPChannel.headerReceived(self, line)
        if accepted and length is not None:
            self._announced = int(length)
        return accepted

    def lineLengthExceeded(self, line: bytes) -> None:
        self.refuse(_headersTooLarge() if self._inRequest else _uriTooLong())

    def allHeadersReceived(self) -> None:
        if self._announced is not None and self._announced > self._limit():
            # Refused by its announced length: not a byte of it is kept.
            self.refuse(tooLarge(self._limit()))
            return
        HTTPChannel.allHeadersReceived(self)

    def allContentReceived(self) -> None:
        if self._refused:
            return
        self._inRequest = self._started = False
        self._answering = True
        self._cancelDeadline()
        HTTPChannel.allContentReceived(self)

    def requestDone(self, request: Any) -> None:
        # Before Twisted hands back what arrived meanwhile (the next
        # request), which arms the next deadline.
        self._answering = False
        HTTPChannel.requestDone(self, request)

    def requestMalformed(self) -> None:
        # Twisted's bare "400 Bad Request" for whatever it found malformed.
        self.refuse(VehicleError("invalid_request", "the request is not well-formed HTTP/1.1"))

    def connectionLost(self, reason: Failure = connectionDone) -> None:
        self._cancelDeadline()
        cancelIfActive(self._lingering)
        self._lingering = None
        HTTPChannel.connectionLost(self, reason)

    def _limit(self) -> int:
        # The body limit of the requests this channel makes.
        return int(getattr(self.requestFactory, "limit", MAX_BODY_BYTES))

    # -- refusing -----------------------------------------------------------

    def refuse(self, error: VehicleError) -> None:
        """
        Answer C{error} as the error frame, then close by lingering: nothing
        more is written, the sending side is closed, and what the client
        still sends is read and discarded (none of it is parsed) for at
        most L{lingerSeconds} and L{lingerBytes}, then the connection is
        cut.  The client's own close ends it sooner.
        """
        if self._refused:
            return
        self._refused = True
        self._cancelDeadline()
        if self.transport is None:
            return
        self.transport.write(refusalBytes(error))
        tcp = ITCPTransport(self.transport, None)
        if tcp is None:
            # A transport that can neither half-close nor be cut: close
            # once the answer is written.
            self.loseConnection()
            return
        # Nothing of this channel writes again (it stops producing for the
        # transport, as Twisted's own close does): the answer is flushed,
        # then the sending side is closed.
        consumer = IConsumer(self.transport, None)
        if consumer is not None:
            consumer.unregisterProducer()
        tcp.loseWriteConnection()
        if self.clock is not None:
            self._lingering = self.clock.callLater(self.lingerSeconds, self._cut)

    def _discard(self, size: int) -> None:
        self._discarded += size
        if self._discarded > self.lingerBytes:
            self._cut()

    def _cut(self) -> None:
        cancelIfActive(self._lingering)
        self._lingering = None
        tcp = ITCPTransport(self.transport, None)
        if tcp is not None and not self._cutOff:
            self._cutOff = True
            tcp.abortConnection()

    # -- the deadline -------------------------------------------------------

    def _armDeadline(self) -> None:
        if self.clock is None or self._refused:
            return
        self._deadline = self.clock.callLater(self.headerTimeout, self._tooSlow)

    def _cancelDeadline(self) -> None:
        cancelIfActive(self._deadline)
        self._deadline = None

    def _tooSlow(self) -> None:
        self._deadline = None
        _log.info("Cut off a client that did not send its request in time")
        if self._inRequest or self._started:
            self.refuse(
                VehicleError(
                    "request_timeout",
                    f"the request did not arrive whole within {self.headerTimeout:g} s",
                    {"limitSeconds": self.headerTimeout},
                )
            )
        elif self.transport is not None:
            # Nothing of a request: an idle connection is simply closed.
            self._refused = True
            cast(ITCPTransport, self.transport).abortConnection()


def _uriTooLong() -> VehicleError:
    return VehicleError(
        "uri_too_long",
        f"the request line is longer than {REQUEST_LINE_LIMIT} bytes",
        {"limit": REQUEST_LINE_LIMIT},
    )


def _headersTooLarge() -> VehicleError:
    return VehicleError(
        "headers_too_large",
        f"the headers are larger than {HEADERS_LIMIT} bytes or {MAX_HEADERS} lines",
        {"limit": HEADERS_LIMIT, "maxHeaders": MAX_HEADERS},
    )


def _escapeTarget(line: bytes) -> bytes:
    """
    Percent-encode the bytes outside ASCII in a request line's target, so
    that a path of raw bytes reaches the app as the same path escaped
    (where the secret is checked before anything is said about it).
    """
    parts = line.split(b" ")
    if len(parts) != 3 or parts[1].isascii():
        return line
    target = b"".join(
        b"%%%02X" % byte if byte >= 0x80 else bytes([byte]) for byte in parts[1]
    )
    return b" ".join((parts[0], target, parts[2]))


class VehicleSite(Site):
    """
    The host's site: limited requests, guarded channels, no access log of
    its own (the host logs what matters itself).
    """

    requestFactory = LimitedRequest
    # A plain HTTP/1.1 channel of ours, not Twisted's HTTP/2-negotiating one.
    # Twisted types a site's protocol (and so what buildProtocol gives) as
    # that wrapper alone, though it builds whatever protocol it is given.
    protocol = GuardedChannel  # type: ignore[assignment]  # Site's type names its wrapper only

    def __init__(
        self, resource: Any, reactor: IReactorTime, headerTimeout: float = 10.0
    ) -> None:
        Site.__init__(self, resource, reactor=reactor)
        self.headerTimeout = headerTimeout
        self.clockForChannels = reactor

    def buildProtocol(self, addr: IAddress | None) -> GuardedChannel:  # type: ignore[override]  # idem
        channel = cast(GuardedChannel, Site.buildProtocol(self, addr))
        channel.clock = self.clockForChannels
        channel.headerTimeout = self.headerTimeout
        return channel

    def log(self, request: Any) -> None:
        pass
