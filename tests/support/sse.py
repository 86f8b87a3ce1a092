"""
The host's events for the clients' tests: L{event}, one event of a session
as the host records it, and L{FakeStream}, an SSE answer that streams them
with the host's own encoder (L{vehicle.web.sseEncode}).
"""

from __future__ import annotations

from typing import Any

from twisted.internet.error import ConnectionLost
from twisted.internet.interfaces import IPushProducer
from twisted.python.failure import Failure
from twisted.web.client import ResponseDone, ResponseFailed
from zope.interface import implementer

from vehicle import PROTOCOL
from vehicle.protocol import Event, fromJSON
from vehicle.web import sseEncode


def event(seq: int, kind: str = "session.renamed", sessionId: str = "s1") -> dict[str, Any]:
    return {"protocol": PROTOCOL, "seq": seq, "type": kind, "sessionId": sessionId,
            "timestamp": "2026-01-01T00:00:00Z", "data": {}}


def encoded(one: dict[str, Any]) -> bytes:
    """
    The SSE message of C{one} (an event as the host writes it, what it
    leaves out filled in), made by the host's own encoder.
    """
    fields = {k: v for k, v in one.items() if k != "protocol"}
    fields.setdefault("timestamp", "2026-01-01T00:00:00.000Z")
    fields.setdefault("sessionId", "s1")
    fields.setdefault("data", {})
    return sseEncode(fromJSON(fields, Event))


@implementer(IPushProducer)
class FakeStream:
    """
    A 200 SSE answer the test feeds and ends (or cuts): its body goes to
    the protocol given to C{deliverBody}, which it connects to itself as
    the transport (an L{IPushProducer}, as an L{IResponse}'s is).
    """

    code = 200

    def __init__(self) -> None:
        self.protocol: Any = None
        self.stopped = False
        self.ended = False

    def deliverBody(self, protocol: Any) -> None:
        self.protocol = protocol
        protocol.makeConnection(self)

    def write(self, data: bytes) -> None:
        self.protocol.dataReceived(data)

    def send(self, *events: dict[str, Any]) -> None:
        """
        Stream C{events} (as the host writes them), each encoded by the
        host's own encoder.
        """
        for one in events:
            self.write(encoded(one))

    def end(self) -> None:
        self.ended = True
        self.protocol.connectionLost(Failure(ResponseDone()))

    def cut(self) -> None:
        self.ended = True
        self.protocol.connectionLost(Failure(ResponseFailed([Failure(ConnectionLost())])))

    def pauseProducing(self) -> None:
        pass

    def resumeProducing(self) -> None:
        pass

    def stopProducing(self) -> None:
        self.stopped = True
        if not self.ended:
            self.cut()
