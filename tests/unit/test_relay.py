"""
Tests for L{vehicle._relay}: an upstream answer streamed into the caller's
request, as both proxies (the model proxy, the stand-in's gateway) do.
"""

from __future__ import annotations

from typing import Any

from twisted.internet.defer import CancelledError
from twisted.internet.error import ConnectionLost
from twisted.internet.testing import StringTransport
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase
from twisted.web.client import ResponseDone
from twisted.web.http import PotentialDataLoss
from twisted.web.http_headers import Headers

from vehicle._relay import BodyRelay, copyAnswer, relayBody


class FakeRequest:
    """
    The parts of a server request the relay touches.
    """

    def __init__(self) -> None:
        self.written: list[bytes] = []
        self.finished = False
        self.channel: object | None = object()
        self.producer: Any = None
        self.code: int | None = None
        self.responseHeaders = Headers()

    def registerProducer(self, producer: Any, streaming: bool) -> None:
        assert streaming
        self.producer = producer

    def unregisterProducer(self) -> None:
        self.producer = None

    def write(self, data: bytes) -> None:
        assert not self.finished
        self.written.append(data)

    def setResponseCode(self, code: int) -> None:
        self.code = code


class FakeResponse:
    """
    An answer whose body is delivered by hand.
    """

    code = 200

    def __init__(self, headers: dict[bytes, list[bytes]] | None = None) -> None:
        self.headers = Headers(headers or {})
        self.protocol: Any = None
        self.transport = StringTransport()

    def deliverBody(self, protocol: Any) -> None:
        self.protocol = protocol
        protocol.makeConnection(self.transport)


class Upper:
    """
    A rewrite that holds back a trailing space until the next piece.
    """

    def __init__(self) -> None:
        self.held = b""

    def feed(self, data: bytes) -> bytes:
        data = (self.held + data).upper()
        self.held = b" " if data.endswith(b" ") else b""
        return data[: len(data) - len(self.held)]

    def flush(self) -> bytes:
        return self.held + b"!"


class BodyRelayTests(SynchronousTestCase):
    """
    L{relayBody} and L{BodyRelay}.
    """

    def setUp(self) -> None:
        self.request = FakeRequest()
        self.response = FakeResponse()

    def relay(self, rewrite: Any = None) -> BodyRelay:
        return relayBody(self.response, self.request, rewrite)  # type: ignore[arg-type]

    def test_streamsWithTheUpstreamAsProducer(self) -> None:
        """
        Each piece is written as it comes, the upstream is the request's
        producer until the body ends, and C{done} fires with L{None}.
        """
        relay = self.relay()
        self.assertIs(self.request.producer, self.response.transport)
        self.response.protocol.dataReceived(b"one ")
        self.response.protocol.dataReceived(b"two")
        self.assertEqual(self.request.written, [b"one ", b"two"])
        self.assertNoResult(relay.done)
        self.response.protocol.connectionLost(Failure(ResponseDone()))
        self.assertIsNone(self.request.producer)
        self.assertIsNone(self.successResultOf(relay.done))

    def test_dataLossIsAnEnd(self) -> None:
        """
        A body without a length that ends with its connection is whole.
        """
        relay = self.relay()
        self.response.protocol.connectionLost(Failure(PotentialDataLoss()))
        self.assertIsNone(self.successResultOf(relay.done))

    def test_brokenOff(self) -> None:
        """
        A body that broke off fails C{done}.
        """
        relay = self.relay()
        self.response.protocol.connectionLost(Failure(ConnectionLost()))
        self.failureResultOf(relay.done, ConnectionLost)

    def test_rewrite(self) -> None:
        """
        Every piece goes through the rewrite; its held-back tail is written
        at the end.
        """
        relay = self.relay(Upper())
        self.response.protocol.dataReceived(b"a ")
        self.response.protocol.dataReceived(b"b")
        self.response.protocol.connectionLost(Failure(ResponseDone()))
        self.assertEqual(b"".join(self.request.written), b"A B!")
        self.assertEqual(self.request.written[0], b"A")
        self.successResultOf(relay.done)

    def test_stopEndsQuietly(self) -> None:
        """
        L{BodyRelay.stop} stops the upstream; the end that follows is
        C{done} with L{None}, not a failure.
        """
        relay = self.relay()
        relay.stop()
        self.assertEqual(self.response.transport.producerState, "stopped")
        self.response.protocol.connectionLost(Failure(ConnectionLost()))
        self.assertIsNone(self.successResultOf(relay.done))

    def test_cancelStopsTheUpstream(self) -> None:
        """
        Cancelling C{done} (the caller went away) stops the upstream.
        """
        relay = self.relay()
        relay.done.cancel()
        self.assertEqual(self.response.transport.producerState, "stopped")
        self.failureResultOf(relay.done, CancelledError)
        self.response.protocol.connectionLost(Failure(ConnectionLost()))

    def test_nothingWrittenAfterTheRequestFinished(self) -> None:
        """
        Pieces that come after the caller's request finished are dropped.
        """
        self.relay()
        self.request.finished = True
        self.response.protocol.dataReceived(b"late")
        self.assertEqual(self.request.written, [])


class CopyAnswerTests(SynchronousTestCase):
    """
    L{copyAnswer}.
    """

    def test_statusAndHeaders(self) -> None:
        """
        The status and every header but the dropped ones are copied, each
        value rewritten when asked.
        """
        response = FakeResponse({b"Content-Type": [b"text/plain"], b"Connection": [b"close"],
                                 b"X-Key": [b"secret"]})
        response.code = 429
        request = FakeRequest()
        copyAnswer(response, request, [b"connection"],  # type: ignore[arg-type]
                   lambda value: value.replace(b"secret", b"[redacted]"))
        self.assertEqual(request.code, 429)
        self.assertEqual(request.responseHeaders.getRawHeaders(b"content-type"), [b"text/plain"])
        self.assertEqual(request.responseHeaders.getRawHeaders(b"x-key"), [b"[redacted]"])
        self.assertIsNone(request.responseHeaders.getRawHeaders(b"connection"))
