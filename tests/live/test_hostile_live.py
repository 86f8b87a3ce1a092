"""
The live half of L{tests.unit.test_hostile}: L{LoopbackTests}
(real processes, sockets or the real reactor; see that module for the rest).
"""

from __future__ import annotations

import json
from typing import Any

from twisted.internet.defer import Deferred
from twisted.internet.endpoints import TCP4ClientEndpoint, connectProtocol
from twisted.internet.protocol import Protocol
from twisted.trial.unittest import TestCase

from vehicle.web import MAX_BODY_BYTES, VehicleSite
from vehicle.web._limits import REQUEST_LINE_LIMIT

from tests.support.harness import Harness
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
        site = VehicleSite(self.h.api.resource(), reactor)
        self.port = reactor.listenTCP(0, site, interface="127.0.0.1")
        self.addCleanup(self.port.stopListening)

    async def exchange(self, data: bytes) -> bytes:
        endpoint = TCP4ClientEndpoint(self.reactor, "127.0.0.1", self.port.getHost().port)
        protocol = _Collect(data)
        await connectProtocol(endpoint, protocol)
        return await protocol.closed

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
