# -*- test-case-name: tests.unit.test_relay -*-
"""
The one way a request is passed on to an upstream and its answer streamed
back, shared by the two reverse proxies of the project: the model proxy
of a box (L{vehicle.box.ModelProxy}) and the gardend stand-in's gateway.

Each proxy decides what to send (which headers, which credentials) and what
to refuse; this module only forwards the request as it came, copies the
answer's status and headers, and streams its body with the upstream as the
caller's producer (a slow caller slows the upstream instead of filling
memory).  A body can be rewritten on the way by a L{Rewrite} (the proxy takes
keys out of a provider's answer).
"""

from __future__ import annotations

from typing import Callable, Iterable, Protocol as TypingProtocol, cast

from treq.client import HTTPClient
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IPushProducer
from twisted.internet.protocol import Protocol, connectionDone
from twisted.python.failure import Failure
from twisted.web.client import ResponseDone
from twisted.web.http import PotentialDataLoss
from twisted.web.http_headers import Headers
from twisted.web.iweb import IResponse
from twisted.web.server import Request


class Rewrite(TypingProtocol):
    """
    Rewrites an answer's body that arrives in pieces.
    """

    def feed(self, data: bytes) -> bytes:
        """
        The next piece: what may be sent on now (a tail may be held back).
        """

    def flush(self) -> bytes:
        """
        The end of the body: what was held back.
        """


async def passOn(
    http: HTTPClient, request: Request, url: str | bytes, headers: Headers
) -> IResponse:
    """
    Send C{request}'s method and body to C{url} with C{headers}; the answer
    comes as soon as its headers do (its body is read by L{relayBody}).
    """
    body = request.content.read() if request.content is not None else b""
    response: IResponse = await http.request(
        request.method.decode("ascii"),
        url,
        headers=headers,
        data=body or None,
        unbuffered=True,
    )
    return response


def copyAnswer(
    response: IResponse,
    request: Request,
    drop: Iterable[bytes],
    rewrite: Callable[[bytes], bytes] | None = None,
) -> None:
    """
    Give C{request} the status and headers of C{response}, but for those
    named in C{drop} (lowercase: the connection's own); each value through
    C{rewrite} when given.
    """
    dropped = frozenset(drop)
    request.setResponseCode(response.code)
    for name, values in response.headers.getAllRawHeaders():
        if name.lower() not in dropped:
            if rewrite is not None:
                values = [rewrite(value) for value in values]
            request.responseHeaders.setRawHeaders(name, values)


class BodyRelay(Protocol):
    """
    Writes an upstream answer's body to the caller's request as it arrives.

    @ivar done: fires when the body ends: with L{None} when it came whole
        or was stopped here (L{stop}), with the failure when it broke off.
        Cancelling it stops the upstream.
    """

    def __init__(self, request: Request, rewrite: Rewrite | None = None) -> None:
        self.request = request
        self.rewrite = rewrite
        self.stopped = False
        self.done: Deferred[None] = Deferred(lambda _: self.stop())

    def connectionMade(self) -> None:
        self.request.registerProducer(self.transport, True)

    def dataReceived(self, data: bytes) -> None:
        if self.rewrite is not None:
            data = self.rewrite.feed(data)
        if data and not self.request.finished:
            self.request.write(data)

    def connectionLost(self, reason: Failure = connectionDone) -> None:
        if self.rewrite is not None and not self.request.finished:
            tail = self.rewrite.flush()
            if tail:
                self.request.write(tail)
        if self.request.channel is not None and self.request.producer is not None:
            self.request.unregisterProducer()
        if self.done.called:
            return
        if self.stopped or reason.check(ResponseDone, PotentialDataLoss):
            self.done.callback(None)
        else:
            self.done.errback(reason)

    def stop(self) -> None:
        """
        Stop the upstream (its connection is closed: a provider stops
        generating); L{done} then fires with L{None}.
        """
        self.stopped = True
        transport = self.transport
        if transport is not None:
            # deliverBody's transport is a push producer (IResponse).
            cast(IPushProducer, transport).stopProducing()


def relayBody(response: IResponse, request: Request, rewrite: Rewrite | None = None) -> BodyRelay:
    """
    Start streaming C{response}'s body into C{request}.
    """
    relay = BodyRelay(request, rewrite)
    response.deliverBody(relay)
    return relay
