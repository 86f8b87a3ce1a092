# -*- test-case-name: tests.unit.test_sockets,tests.live.test_nodelay_live -*-
"""
Streaming sockets send each small write at once (C{TCP_NODELAY}).

A stream of deltas is a run of small writes.  With Nagle's algorithm on (a
socket's default), a small write behind one the peer has not acknowledged
yet waits for that acknowledgement, and a peer that delays its ACKs (as
Linux does, up to 40 ms) holds every delta that long.  Every TCP socket a
delta crosses sets the option: the host's answers (its SSE streams), the
model proxy's connections to the provider, and the local run's scripted
model and gardend stand-in (L{NoDelayHTTPChannel}, L{NoDelayEndpoint}).
"""

from __future__ import annotations

from typing import Any

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IProtocol, IProtocolFactory, IStreamClientEndpoint
from twisted.web.http import HTTPChannel
from zope.interface import implementer


def noDelay(transport: Any) -> bool:
    """
    Turn Nagle's algorithm off on C{transport} if it is a TCP one.

    @return: whether it was set (a Unix socket, a test's fake transport or
        a closed socket has nothing to set).
    """
    setter = getattr(transport, "setTcpNoDelay", None)
    if setter is None:
        return False
    try:
        setter(True)
    except OSError:
        return False
    return True


class NoDelayHTTPChannel(HTTPChannel):
    """
    An HTTP/1.1 server channel whose answers leave at once (a site's
    C{protocol}).
    """

    def connectionMade(self) -> None:
        noDelay(self.transport)
        HTTPChannel.connectionMade(self)


@implementer(IStreamClientEndpoint)
class NoDelayEndpoint:
    """
    A TCP client endpoint whose connections send each write at once.
    """

    def __init__(self, wrapped: IStreamClientEndpoint) -> None:
        self.wrapped = wrapped

    def connect(self, protocolFactory: IProtocolFactory) -> "Deferred[IProtocol]":
        def connected(protocol: IProtocol) -> IProtocol:
            noDelay(getattr(protocol, "transport", None))
            return protocol

        return self.wrapped.connect(protocolFactory).addCallback(connected)
