"""
Tests for L{vehicle._twistedparts}, the one module that leans on Twisted's
private names: each name still exists with the signature relied on, Twisted
still calls each hook where the host counts on it, the default of each
hook is still Twisted's own answer, and no name of the host's own channel
or request shadows one of Twisted's.  A Twisted release that changes any
of these fails here, not in production.
"""

from __future__ import annotations

import inspect
from twisted.internet.task import Clock
from twisted.protocols.basic import LineReceiver
from twisted.internet.testing import StringTransport
from twisted.trial.unittest import SynchronousTestCase
from twisted.web import http
from twisted.web.http import HTTPChannel
from twisted.web.http_headers import Headers
from twisted.web.resource import Resource
from twisted.web.server import Request, Site

from vehicle._request import BoundedRequest
from vehicle._twistedparts import (
    PRIVATE_NAMES,
    PRIVATE_SET,
    PRIVATE_STATE,
    MalformedRequestHook,
    StarRequestHook,
    atRest,
    takeWhole,
)
from vehicle.web import LimitedRequest, VehicleSite
from vehicle.web._limits import GuardedChannel


class PrivateNamesTests(SynchronousTestCase):
    """
    Every private name the module uses is there, as it is relied on.
    """

    def test_namesAndSignatures(self) -> None:
        """
        Each name in L{PRIVATE_NAMES} is a function of its class or module
        taking the parameters listed (the methods only C{self}: they are
        called with nothing).
        """
        self.assertEqual(len(PRIVATE_NAMES), 3)
        for owner, name, parameters in PRIVATE_NAMES:
            method = owner.__dict__.get(name)
            self.assertTrue(callable(method), f"{owner.__name__}.{name} is gone")
            self.assertEqual(
                tuple(inspect.signature(method).parameters), parameters, f"{owner.__name__}.{name}"
            )

    def test_stateAsRelied(self) -> None:
        """
        Each attribute in L{PRIVATE_STATE} is there on an instance just
        made, with the value listed.
        """
        self.assertEqual(len(PRIVATE_STATE), 4)
        made = {HTTPChannel: HTTPChannel(), LineReceiver: LineReceiver(), Headers: Headers()}
        for owner, name, value in PRIVATE_STATE:
            self.assertEqual(getattr(made[owner], name, KeyError), value, f"{owner.__name__}.{name}")

    def test_setAsTwistedSetsThem(self) -> None:
        """
        Twisted's parser keeps a request's line under the names in
        L{PRIVATE_SET} from its first line to its end, then removes them;
        its headers are where L{PRIVATE_STATE} says.
        """
        channel, _ = _channel(_Recording)
        channel.requestFactory = _Answering  # type: ignore[assignment]
        self.assertFalse(any(hasattr(channel, name) for name in PRIVATE_SET))
        channel.dataReceived(b"POST /p HTTP/1.1\r\nX-A: b\r\ncontent-length: 2\r\n\r\na")
        self.assertEqual(
            [getattr(channel, name) for name in PRIVATE_SET], [b"POST", b"/p", b"HTTP/1.1"]
        )
        self.assertEqual(channel.requests[-1].requestHeaders._rawHeaders,
                         {b"X-A": [b"b"], b"Content-Length": [b"2"]})
        channel.dataReceived(b"b")
        self.assertFalse(any(hasattr(channel, name) for name in PRIVATE_SET))

    def test_everyOverrideListed(self) -> None:
        """
        The hooks override exactly the listed names, and nothing else of
        Twisted's that starts with an underscore.
        """
        listed = {(owner, name) for owner, name, _ in PRIVATE_NAMES}
        for hook, base in ((MalformedRequestHook, HTTPChannel), (StarRequestHook, Request)):
            own = {name for name in vars(hook) if name.startswith("_") and not name.startswith("__")}
            self.assertEqual({(base, name) for name in own}, {p for p in listed if p[0] is base})

    def test_nothingShadowed(self) -> None:
        """
        The names the host's channel, site and requests add are none of
        Twisted's (a Twisted that adds one, say C{clock} or C{_deadline}, to
        L{HTTPChannel} would otherwise be overridden without a word); the
        names they share with Twisted are the public ones they mean to
        override (and their own constructors).
        """
        overrides = {
            GuardedChannel: (HTTPChannel, {
                "MAX_LENGTH", "totalHeadersSize", "maxHeaders", "connectionMade",
                "dataReceived", "rawDataReceived", "lineReceived", "headerReceived",
                "lineLengthExceeded", "allHeadersReceived", "allContentReceived",
                "requestDone", "connectionLost", "getHost", "getPeer",
            }),
            MalformedRequestHook: (HTTPChannel, {"_respondToBadRequestAndDisconnect"}),
            BoundedRequest: (Request, {
                "content", "gotLength", "handleContentChunk", "process",
                "processingFailed",
            }),
            LimitedRequest: (Request, set()),
            StarRequestHook: (Request, {"_handleStar"}),
            VehicleSite: (Site, {"requestFactory", "protocol", "buildProtocol", "log"}),
        }
        for ours, (theirs, meant) in overrides.items():
            names = set(vars(ours)) | set(getattr(ours, "__annotations__", {}))
            shared = {
                name for name in names
                if hasattr(theirs, name) and not (name.startswith("__") and name.endswith("__"))
            }
            self.assertEqual(shared, meant, ours.__name__)


class _Recording(MalformedRequestHook):
    """
    A channel that counts what Twisted's parser found malformed.
    """

    malformed = 0

    def requestMalformed(self) -> None:
        self.malformed += 1
        self.transport.loseConnection()


def _channel(factory: type[HTTPChannel]) -> tuple[HTTPChannel, StringTransport]:
    channel = factory()
    channel.requestFactory = http.Request  # type: ignore[assignment]
    transport = StringTransport()
    channel.makeConnection(transport)
    return channel, transport


#: Requests Twisted's parser refuses through the hook, by what is wrong.
MALFORMED = {
    "request line": b"NONSENSE\r\n\r\n",
    "header without a colon": b"GET / HTTP/1.1\r\nno colon here\r\n\r\n",
    "header name": b"GET / HTTP/1.1\r\nbad name: x\r\n\r\n",
    "NUL in a value": b"GET / HTTP/1.1\r\nx-a: b\x00c\r\n\r\n",
    "length not a number": b"POST / HTTP/1.1\r\ncontent-length: abc\r\n\r\n",
    "two lengths": b"POST / HTTP/1.1\r\ncontent-length: 1\r\ncontent-length: 1\r\n\r\nx",
    "unknown coding": b"POST / HTTP/1.1\r\ntransfer-encoding: gzip\r\n\r\n",
    "malformed chunk": b"POST / HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n",
}


class MalformedRequestHookTests(SynchronousTestCase):
    """
    Twisted's parser calls the hook for each kind of malformed request the
    host answers with a frame, and Twisted's own answer is the default.
    """

    def test_everyKindReachesTheHook(self) -> None:
        """
        Each malformed request reaches C{requestMalformed} once, and Twisted
        writes nothing of its own.
        """
        for what, data in MALFORMED.items():
            channel, transport = _channel(_Recording)
            channel.dataReceived(data)
            self.assertEqual((what, channel.malformed), (what, 1))  # type: ignore[attr-defined]
            self.assertEqual((what, transport.value()), (what, b""))

    def test_defaultIsTwistedsAnswer(self) -> None:
        """
        Without an override the hook is Twisted's bare C{400}, then the
        close: what the private method is relied on to do when called.
        """
        channel, transport = _channel(MalformedRequestHook)
        channel.dataReceived(MALFORMED["header without a colon"])
        self.assertEqual(transport.value(), b"HTTP/1.1 400 Bad Request\r\n\r\n")
        self.assertTrue(transport.disconnecting)

    def test_wellFormedNotReported(self) -> None:
        """
        A well-formed request never reaches the hook (it is answered).
        """
        channel, transport = _channel(_Recording)
        channel.requestFactory = _Answering  # type: ignore[assignment]
        channel.dataReceived(b"GET / HTTP/1.1\r\nhost: h\r\n\r\n")
        self.assertEqual(channel.malformed, 0)  # type: ignore[attr-defined]
        self.assertTrue(transport.value().startswith(b"HTTP/1.1 204 "))


class _Answering(http.Request):
    def process(self) -> None:
        self.setResponseCode(204)
        self.finish()


class _Holding(http.Request):
    """
    A request answered later: kept in L{held}.
    """

    held: list[http.Request] = []
    announced: int | None = None

    def gotLength(self, length: int | None) -> None:
        self.announced = length
        http.Request.gotLength(self, length)

    def process(self) -> None:
        self.held.append(self)


class _Watching(HTTPChannel):
    """
    A channel that looks at L{atRest} each time its parser hands it a line.
    """

    def __init__(self) -> None:
        HTTPChannel.__init__(self)
        self.seen: list[bool] = []

    def lineReceived(self, line: bytes) -> None:
        self.seen.append(atRest(self))
        HTTPChannel.lineReceived(self, line)


class AtRestTests(SynchronousTestCase):
    """
    L{atRest} tells a parser waiting for a request's first line, holding
    nothing, from every other state of Twisted's parser.
    """

    def setUp(self) -> None:
        self.patch(_Holding, "held", [])
        self.channel, self.transport = _channel(HTTPChannel)
        self.channel.requestFactory = _Holding  # type: ignore[assignment]

    def test_fresh(self) -> None:
        """
        A channel just connected is at rest.
        """
        self.assertTrue(atRest(self.channel))

    def test_partOfALine(self) -> None:
        """
        Part of a first line: not at rest.
        """
        self.channel.dataReceived(b"GE")
        self.assertFalse(atRest(self.channel))

    def test_blankLineSkipped(self) -> None:
        """
        A blank line before a request (skipped once by Twisted): not at
        rest.
        """
        self.channel.dataReceived(b"\r\n")
        self.assertFalse(atRest(self.channel))

    def test_partOfARequest(self) -> None:
        """
        A first line, some headers, part of a body: not at rest.
        """
        for part in (b"POST / HTTP/1.1\r\n", b"content-length: 2\r\n", b"\r\n", b"a"):
            self.channel.dataReceived(part)
            self.assertFalse(atRest(self.channel))

    def test_answeringThenAtRest(self) -> None:
        """
        A request being answered: not at rest; answered, at rest again.
        """
        self.channel.dataReceived(b"GET / HTTP/1.1\r\n\r\n")
        self.assertFalse(atRest(self.channel))
        _Holding.held.pop().finish()
        self.assertTrue(atRest(self.channel))

    def test_notPersistent(self) -> None:
        """
        Once a request closes the connection, never at rest again.
        """
        self.channel.dataReceived(b"GET / HTTP/1.0\r\n\r\n")
        _Holding.held.pop().finish()
        self.assertFalse(atRest(self.channel))

    def test_insideItsLoop(self) -> None:
        """
        Inside the parser's loop over lines (the request's line just taken,
        nothing else held yet): not at rest.
        """
        channel, _ = _channel(_Watching)
        channel.requestFactory = _Holding  # type: ignore[assignment]
        channel.dataReceived(b"GET / HTTP/1.1\r\n")
        self.assertEqual(channel.seen, [False])  # type: ignore[attr-defined]


class TakeWholeTests(SynchronousTestCase):
    """
    A request handed over with L{takeWhole} is answered by Twisted's own
    channel as the same request read line by line.
    """

    def serve(self, whole: bool) -> tuple[object, ...]:
        self.patch(_Holding, "held", [])
        channel, transport = _channel(HTTPChannel)
        channel.requestFactory = _Holding  # type: ignore[assignment]
        if whole:
            takeWhole(
                channel, (b"PATCH", b"/a?b=c", b"HTTP/1.0"),
                {b"Cookie": [b"k=v"], b"Content-Length": [b"2"]}, 2, b"hi",
            )
            channel.allContentReceived()
        else:
            channel.dataReceived(
                b"PATCH /a?b=c HTTP/1.0\r\nCookie: k=v\r\nContent-Length: 2\r\n\r\nhi"
            )
        [request] = _Holding.held
        seen = (
            request.method, request.uri, request.args, request.clientproto,
            list(request.requestHeaders.getAllRawHeaders()), request.received_cookies,
            request.content.read(), request.announced, channel.persistent, request.queued,
        )
        request.write(b"answer")
        request.finish()
        return seen + (transport.value(), transport.disconnecting)

    def test_asReadByLine(self) -> None:
        """
        The request's line, headers, cookies, announced length, body and the
        connection's persistence as Twisted's parser reads them; the same answer
        written, the same close.
        """
        whole = self.serve(True)
        self.assertEqual(whole, self.serve(False))
        self.assertEqual(whole[-1], True)


class _StarRecording(StarRequestHook):
    stars = 0

    def starRequested(self) -> None:
        type(self).stars += 1
        self.setResponseCode(299)
        self.finish()


class StarRequestHookTests(SynchronousTestCase):
    """
    L{Request.process} calls the hook for a target of C{*}, and Twisted's
    own answer is the default.
    """

    def serve(self, requestFactory: type[Request], data: bytes) -> bytes:
        # Its timeout's timer on a clock of its own, not the global reactor.
        site = Site(Resource(), reactor=Clock())
        channel = site.buildProtocol(None)
        assert channel is not None
        channel.requestFactory = requestFactory  # type: ignore[union-attr]
        transport = StringTransport()
        channel.makeConnection(transport)
        channel.dataReceived(data)
        return transport.value()

    def test_starReachesTheHook(self) -> None:
        """
        C{OPTIONS *} and C{GET *} reach C{starRequested}; a path does not.
        """
        _StarRecording.stars = 0
        self.addCleanup(setattr, _StarRecording, "stars", 0)
        for method in (b"OPTIONS", b"GET"):
            answer = self.serve(_StarRecording, method + b" * HTTP/1.1\r\nhost: h\r\n\r\n")
            self.assertTrue(answer.startswith(b"HTTP/1.1 299 "), answer)
        self.assertEqual(_StarRecording.stars, 2)
        answer = self.serve(_StarRecording, b"GET /x HTTP/1.1\r\nhost: h\r\n\r\n")
        self.assertTrue(answer.startswith(b"HTTP/1.1 404 "), answer)
        self.assertEqual(_StarRecording.stars, 2)

    def test_defaultIsTwistedsAnswer(self) -> None:
        """
        Without an override, C{OPTIONS *} is Twisted's empty C{200} and
        C{GET *} its C{405}: what the private method is relied on to do.
        """
        answer = self.serve(StarRequestHook, b"OPTIONS * HTTP/1.1\r\nhost: h\r\n\r\n")
        self.assertTrue(answer.startswith(b"HTTP/1.1 200 "), answer)
        answer = self.serve(StarRequestHook, b"GET * HTTP/1.1\r\nhost: h\r\n\r\n")
        self.assertTrue(answer.startswith(b"HTTP/1.1 405 "), answer)
        self.assertIn(b"Allow: OPTIONS", answer)
