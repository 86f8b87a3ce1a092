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
from twisted.internet.testing import StringTransport
from twisted.trial.unittest import SynchronousTestCase
from twisted.web import http
from twisted.web.http import HTTPChannel
from twisted.web.resource import Resource
from twisted.web.server import Request, Site

from vehicle._request import BoundedRequest
from vehicle._twistedparts import PRIVATE_NAMES, MalformedRequestHook, StarRequestHook
from vehicle.web import LimitedRequest, VehicleSite
from vehicle.web._limits import GuardedChannel


class PrivateNamesTests(SynchronousTestCase):
    """
    Every private name the module uses is there, as it is relied on.
    """

    def test_namesAndSignatures(self) -> None:
        """
        Each name in L{PRIVATE_NAMES} is a method of its class taking the
        parameters listed (only C{self}: it is called with nothing).
        """
        self.assertEqual(len(PRIVATE_NAMES), 2)
        for owner, name, parameters in PRIVATE_NAMES:
            method = owner.__dict__.get(name)
            self.assertTrue(callable(method), f"{owner.__name__}.{name} is gone")
            self.assertEqual(
                tuple(inspect.signature(method).parameters), parameters, f"{owner.__name__}.{name}"
            )

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
