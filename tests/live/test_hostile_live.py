"""
The live half of L{tests.unit.test_hostile}: L{LoopbackTests} and
L{TwistdRefusalTests} (real processes, sockets or the real reactor; see
that module for the rest).
"""

from __future__ import annotations

import http.client
import json
from typing import Any

from twisted.internet.defer import Deferred
from twisted.internet.endpoints import TCP4ClientEndpoint, connectProtocol
from twisted.internet.protocol import Protocol, connectionDone
from twisted.internet.threads import deferToThread
from twisted.trial.unittest import TestCase

from vehicle.web import MAX_BODY_BYTES, VehicleSite
from vehicle.web._limits import REQUEST_LINE_LIMIT, GuardedChannel

from tests.support.harness import Harness, identity
from tests.support.live import TwistdHost
from tests.support.schemas import assertValidFrame


class _Collect(Protocol):
    """
    A raw client: sends its bytes, keeps what comes back until the close.
    """

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.received = b""
        self.closed: Deferred[bytes] = Deferred()

    def connectionMade(self) -> None:
        self.transport.write(self.data)

    def dataReceived(self, data: bytes) -> None:
        self.received += data

    def connectionLost(self, reason: Any) -> None:
        self.closed.callback(self.received)


class _WatchedChannel(GuardedChannel):
    """
    The host's channel, saying when its connection is gone.
    """

    def connectionLost(self, reason: Any = connectionDone) -> None:
        super().connectionLost(reason)
        self.factory.gone.callback(None)


class _WatchedSite(VehicleSite):
    protocol = _WatchedChannel

    def buildProtocol(self, addr: Any) -> GuardedChannel:
        self.gone: Deferred[None] = Deferred()
        return super().buildProtocol(addr)


class LoopbackTests(TestCase):
    """
    On a real loopback socket: a refusal made below the routes reaches the
    client whole before the host closes the connection.
    """

    def setUp(self) -> None:
        self.h = Harness(self)
        self.addCleanup(self.h.stop)
        from twisted.internet import reactor

        self.reactor = reactor
        self.site = _WatchedSite(self.h.api.resource(), reactor)
        self.port = reactor.listenTCP(0, self.site, interface="127.0.0.1")
        self.addCleanup(self.port.stopListening)

    async def exchange(self, data: bytes) -> bytes:
        """
        Send C{data} on a new connection; what came back once both ends
        have closed (the client on the host's end of the answer, the host
        on the client's close).
        """
        endpoint = TCP4ClientEndpoint(self.reactor, "127.0.0.1", self.port.getHost().port)
        protocol = _Collect(data)
        await connectProtocol(endpoint, protocol)
        received = await protocol.closed
        await self.site.gone
        return received

    def assertFrameAnswer(self, raw: bytes, status: int, code: str) -> None:
        head, _, body = raw.partition(b"\r\n\r\n")
        self.assertTrue(head.startswith(b"HTTP/1.1 %d " % status), raw[:200])
        self.assertIn(b"content-type: application/json", head.lower())
        frame = json.loads(body)
        assertValidFrame(self, frame)
        self.assertEqual(frame["code"], code)

    async def test_tooLargeAndTooLong(self) -> None:
        """
        413 by length, 414 and a malformed header: each frame arrives
        whole, then the connection closes.
        """
        raw = await self.exchange(
            b"POST /sessions HTTP/1.1\r\nhost: h\r\ncontent-length: %d\r\n\r\n" % (MAX_BODY_BYTES + 1)
        )
        self.assertFrameAnswer(raw, 413, "body_too_large")
        raw = await self.exchange(b"GET /" + b"a" * (REQUEST_LINE_LIMIT + 1) + b" HTTP/1.1\r\n\r\n")
        self.assertFrameAnswer(raw, 414, "uri_too_long")
        raw = await self.exchange(b"GET /x HTTP/1.1\r\nno colon\r\n\r\n")
        self.assertFrameAnswer(raw, 400, "invalid_request")

    async def test_bodySentAnyway(self) -> None:
        """
        A client that sends its oversized body straight after the headers
        (no C{Expect}) still reads the 413: the host stops reading, not
        listening, so the unread body does not reset the connection first.
        """
        body = b"x" * (4 * MAX_BODY_BYTES)
        raw = await self.exchange(
            b"POST /sessions HTTP/1.1\r\nhost: h\r\ncontent-length: %d\r\n\r\n" % len(body) + body
        )
        self.assertFrameAnswer(raw, 413, "body_too_large")


def _postWhole(port: int, body: bytes, headers: dict[str, str]) -> tuple[int, dict[str, str], bytes]:
    """
    POST C{body} as a plain client does: every byte written before a byte
    of the answer is read (Python's L{http.client}; run in a thread).
    """
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        connection.request("POST", "/sessions", body=body, headers=headers)
        response = connection.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        connection.close()


class TwistdRefusalTests(TestCase):
    """
    The host as operators run it (C{twistd vehicle}) answers a body refused
    by its announced size with the frame, to a client that writes the whole
    body before it reads: the host lingers, so the unread body does not
    reset the connection before the answer is read.
    """

    timeout = 60

    async def test_oversizedBodyWrittenWhole(self) -> None:
        """
        4 MiB posted straight to the host by L{http.client} gets C{413}
        C{body_too_large} (the frame, JSON), not a broken pipe; and the host
        still answers the next request.
        """
        host = await TwistdHost(self).start()
        port = host.portNumber
        headers = {**identity(), "content-type": "application/json"}
        body = b"x" * (4 * MAX_BODY_BYTES)
        status, head, raw = await deferToThread(_postWhole, port, body, headers)
        self.assertEqual(status, 413, raw[:300])
        self.assertEqual(head["content-type"], "application/json")
        self.assertEqual(head["connection"], "close")
        frame = json.loads(raw)
        assertValidFrame(self, frame)
        self.assertEqual(frame["code"], "body_too_large")
        self.assertEqual(frame["details"], {"limit": MAX_BODY_BYTES})
        code, frame = await host.call("GET", "/sessions")
        self.assertEqual(code, 200, frame)
