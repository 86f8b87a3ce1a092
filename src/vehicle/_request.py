# -*- test-case-name: tests.unit.test_limits,tests.live.test_proxy -*-
"""
The host's HTTP request, shared by every server it runs (the app's site
and the proxies into boxes): its body bounded in memory, never a form, and a
failure answered with the protocol's error frame, never Twisted's page.
"""

from __future__ import annotations

from io import BytesIO
from typing import Any, BinaryIO, ClassVar

from twisted.logger import Logger
from twisted.web.server import Request

from vehicle._twistedparts import StarRequestHook
from vehicle.errors import VehicleError, answerError


_log = Logger()


class BoundedRequest(StarRequestHook):
    """
    A request that keeps at most L{limit} bytes of body in memory, asks its
    channel to refuse more (when the channel can), never parses a form body
    (the routes take JSON; a form is refused there, with the frame), and
    answers a failure nothing caught with the error frame.

    Twisted's own methods are called through L{Request} (C{Request.write(self,
    ...)}), not C{self} or C{super()}: the type checker lets a call of
    Twisted's unannotated code through only when it is named as Twisted's.
    """

    limit: ClassVar[int]
    #: Twisted declares it L{None} on the class; here it is always a file.
    content: BinaryIO
    _received = 0

    def __init__(self, channel: Any, *args: Any, **kw: Any) -> None:
        kw["parsePOSTFormSubmission"] = False
        Request.__init__(self, channel, *args, **kw)

    def gotLength(self, length: int | None) -> None:
        # Never spool to a temporary file: the body is bounded, keep it here.
        # (An announced length over the limit was refused by the channel.)
        self.content = BytesIO()

    def handleContentChunk(self, data: bytes) -> None:
        self._received += len(data)
        if self._received > self.limit:
            refuse = getattr(self.channel, "refuse", None)
            if refuse is not None:
                refuse(tooLarge(self.limit))
            return
        self.content.write(data)

    def process(self) -> None:
        # A channel that cannot refuse on its own (a proxy's plain one) let
        # the whole body come: it is still refused, whole, and never handed
        # to a resource cut short.
        if self._received > self.limit:
            self._answer(tooLarge(self.limit))
            return
        Request.process(self)

    def _answer(self, error: VehicleError) -> None:
        body = answerError(self, error)
        Request.setHeader(self, b"content-length", b"%d" % len(body))
        Request.write(self, body)
        Request.finish(self)

    def starRequested(self) -> None:
        # "OPTIONS *" and its kind: the app answers (the secret first, then
        # no such route), not Twisted's empty page.
        assert self.site is not None  # a request that arrived came through its site
        Request.render(self, self.site.getResourceFor(self))

    def processingFailed(self, reason: Any) -> Any:
        # A failure no route caught: logged, and still the error frame,
        # never Twisted's HTML page or a traceback.
        _log.failure("Unexpected failure answering {uri}", failure=reason, uri=self.uri)
        if self.finished or self.channel is None:
            return reason
        if self.startedWriting:
            Request.finish(self)  # the answer was under way: end it where it is
            return reason
        self._answer(VehicleError("internal", "the host failed to answer; nothing was changed"))
        return reason


def tooLarge(limit: int) -> VehicleError:
    return VehicleError(
        "body_too_large",
        f"the request body is larger than {limit} bytes",
        {"limit": limit},
    )
