"""
L{RawConnection}: one client connection to a real L{VehicleSite} over a
L{HalfClosingTransport} (a L{StringTransport} that, like TCP, can close its
sending side alone) on the harness's clock, spoken in raw HTTP/1.1 bytes
(no socket).
"""

from __future__ import annotations

import json
import re
from typing import Any

from twisted.internet.address import IPv4Address
from twisted.internet.error import ConnectionDone
from twisted.internet.interfaces import ITCPTransport
from twisted.internet.testing import StringTransport
from twisted.python.failure import Failure
from zope.interface import implementer

from vehicle.web import VehicleSite

from tests.support.harness import Harness, identity


@implementer(ITCPTransport)
class HalfClosingTransport(StringTransport):
    """
    A L{StringTransport} that closes its sending side alone, as TCP's does
    (C{loseWriteConnection}); nothing may be written after that.

    @ivar writeClosed: C{loseWriteConnection} was called.
    """

    writeClosed = False
    noDelay = False

    def loseWriteConnection(self) -> None:
        self.writeClosed = True

    def write(self, data: bytes) -> None:
        if self.writeClosed:
            raise RuntimeError("written after its sending side was closed")
        super().write(data)

    def setTcpNoDelay(self, enabled: bool) -> None:
        self.noDelay = enabled

    def getTcpNoDelay(self) -> bool:
        return self.noDelay


class RawConnection:
    """
    One client connection to a real L{VehicleSite}: bytes in, bytes out.
    """

    def __init__(self, harness: Harness, headerTimeout: float = 10.0) -> None:
        self.site = VehicleSite(harness.api.resource(), harness.clock, headerTimeout=headerTimeout)
        self.protocol = self.site.buildProtocol(IPv4Address("TCP", "127.0.0.1", 40000))
        self.transport = HalfClosingTransport(peerAddress=IPv4Address("TCP", "127.0.0.1", 40000))
        self.protocol.makeConnection(self.transport)

    def send(self, data: bytes) -> None:
        self.protocol.dataReceived(data)

    def head(self, method: str, path: str, length: int | None = None, chunked: bool = False,
             extra: dict[str, str] | None = None, **who: Any) -> bytes:
        headers = identity(**who)
        headers["content-type"] = "application/json"
        headers["host"] = "host"
        if length is not None:
            headers["content-length"] = str(length)
        if chunked:
            headers["transfer-encoding"] = "chunked"
        headers.update(extra or {})
        lines = [f"{method} {path} HTTP/1.1"] + [f"{k}: {v}" for k, v in headers.items()]
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")

    @property
    def closed(self) -> bool:
        """
        The host is done with this connection: it closed its sending side
        (a refusal, lingering), or closed or cut the connection.
        """
        return self.transport.writeClosed or self.transport.disconnecting

    @property
    def cut(self) -> bool:
        """
        The host cut the connection (C{abortConnection}).
        """
        return self.transport.disconnected

    def output(self) -> bytes:
        return self.transport.value()

    def status(self) -> int | None:
        match = re.match(rb"HTTP/1\.[01] (\d{3})", self.output())
        return int(match.group(1)) if match else None

    def body(self) -> bytes:
        head, _, body = self.output().partition(b"\r\n\r\n")
        if b"transfer-encoding: chunked" in head.lower():
            out, rest = b"", body
            while rest:
                size, _, rest = rest.partition(b"\r\n")
                n = int(size, 16)
                if n == 0:
                    break
                out, rest = out + rest[:n], rest[n + 2:]
            return out
        return body

    def frame(self) -> dict[str, Any]:
        return json.loads(self.body())

    def lose(self) -> None:
        self.protocol.connectionLost(Failure(ConnectionDone()))
