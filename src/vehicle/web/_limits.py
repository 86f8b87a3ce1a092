# -*- test-case-name: tests.test_limits -*-
"""
Request limits below the routes: a body over the limit is answered 413
whether its length was announced or it came in chunks (and it is never
buffered), and a client that trickles its headers is cut off.
"""

from __future__ import annotations

from io import BytesIO
from typing import Any, ClassVar

from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.logger import Logger
from twisted.web.http import HTTPChannel
from twisted.web.server import Request, Site

from vehicle.errors import VehicleError
from vehicle.web._frames import MAX_BODY_BYTES, encode, errorFrame


#: Beyond this much discarded body the connection is dropped.
HARD_LIMIT_BYTES = 16 * MAX_BODY_BYTES


class LimitedRequest(Request):
    """
    A request that keeps at most L{MAX_BODY_BYTES} of body in memory and
    answers C{body_too_large} for more.
    """

    limit: ClassVar[int] = MAX_BODY_BYTES
    tooLarge = False
    _received = 0

    def gotLength(self, length: int | None) -> None:
        # Never spool to a temporary file: keep the (bounded) body in memory.
        self.content = BytesIO()
        if length is not None and length > self.limit:
            self.tooLarge = True
            if length > HARD_LIMIT_BYTES:
                self._refuseNow()

    def handleContentChunk(self, data: bytes) -> None:
        self._received += len(data)
        if self._received > self.limit:
            if not self.tooLarge:
                self.tooLarge = True
                self.content = BytesIO()
            if self._received > HARD_LIMIT_BYTES:
                self._refuseNow()
            return
        self.content.write(data)

    def _refuseNow(self) -> None:
        # Answer at once and close: the client announced far too much.
        body = encode(errorFrame(_tooLarge()))
        transport = self.channel.transport if self.channel else None
        if transport is not None:
            transport.write(
                b"HTTP/1.1 413 Request Entity Too Large\r\n"
                b"Content-Type: application/json\r\nConnection: close\r\n"
                b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body
            )
            transport.loseConnection()
        self.channel = None

    def process(self) -> None:
        if self.channel is None:
            return  # already answered and cut off (far too large)
        if self.tooLarge:
            body = encode(errorFrame(_tooLarge()))
            self.setResponseCode(413)
            self.setHeader(b"content-type", b"application/json")
            self.setHeader(b"content-length", str(len(body)).encode())
            self.write(body)
            self.finish()
            return
        super().process()


def _tooLarge() -> VehicleError:
    return VehicleError(
        "body_too_large",
        f"the request body is larger than {MAX_BODY_BYTES} bytes",
        {"limit": MAX_BODY_BYTES},
    )


class GuardedChannel(HTTPChannel):
    """
    An HTTP channel that gives each request's headers a deadline.
    """

    _log: ClassVar[Logger] = Logger()
    headerTimeout: float = 10.0
    clock: IReactorTime | None = None
    _headerDeadline: IDelayedCall | None = None

    def connectionMade(self) -> None:
        super().connectionMade()
        self._armHeaderDeadline()

    def lineReceived(self, line: bytes) -> None:
        if self._headerDeadline is None:
            self._armHeaderDeadline()
        super().lineReceived(line)

    def allHeadersReceived(self) -> None:
        self._cancelHeaderDeadline()
        super().allHeadersReceived()

    def connectionLost(self, reason: Any) -> None:
        self._cancelHeaderDeadline()
        super().connectionLost(reason)

    def _armHeaderDeadline(self) -> None:
        if self.clock is None:
            return
        self._headerDeadline = self.clock.callLater(self.headerTimeout, self._headersTooSlow)

    def _cancelHeaderDeadline(self) -> None:
        if self._headerDeadline is not None and self._headerDeadline.active():
            self._headerDeadline.cancel()
        self._headerDeadline = None

    def _headersTooSlow(self) -> None:
        self._headerDeadline = None
        self._log.info("Cut off a client that did not finish its headers in time")
        if self.transport is not None:
            self.transport.abortConnection()


class VehicleSite(Site):
    """
    The host's site: limited requests, guarded channels, no access log of
    its own (the host logs what matters itself).
    """

    requestFactory = LimitedRequest

    def __init__(
        self, resource: Any, reactor: IReactorTime, headerTimeout: float = 10.0
    ) -> None:
        super().__init__(resource, reactor=reactor)
        self.headerTimeout = headerTimeout
        self.clockForChannels = reactor

    def buildProtocol(self, addr: Any) -> GuardedChannel:
        channel = GuardedChannel()
        channel.factory = self
        channel.requestFactory = self.requestFactory
        channel.site = self
        channel.timeOut = self.timeOut
        channel.callLater = self.clockForChannels.callLater  # type: ignore[method-assign]
        channel.clock = self.clockForChannels
        channel.headerTimeout = self.headerTimeout
        return channel

    def log(self, request: Any) -> None:
        pass
