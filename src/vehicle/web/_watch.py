# -*- test-case-name: tests.unit.test_watch -*-
"""
Watching a session: the long-poll answer (C{watch.completed}) and the SSE
stream that replays from a cursor and then follows live.  A slow SSE client
is paused (its producer), never buffered without bound: when it drains, it
catches up from the durable log, so it misses nothing and sees nothing twice.
"""

from __future__ import annotations

import json
from typing import Callable, ClassVar

from attrs import define, field
from twisted.internet.defer import CancelledError, Deferred
from twisted.internet.interfaces import IDelayedCall, IPushProducer, IReactorTime
from twisted.internet.task import LoopingCall
from twisted.logger import Logger
from twisted.web.server import Request
from zope.interface import implementer

from vehicle import PROTOCOL
from vehicle._timers import cancelIfActive
from vehicle.errors import VehicleError
from vehicle.protocol import Event, WatchCompleted, toObject
from vehicle.session import MAX_WAIT_MS, Session


#: The largest cursor a client may send (a session's seqs stay far below).
MAX_CURSOR = 10**15


def wholeNumber(raw: str | None, name: str, maximum: int) -> int:
    """
    A whole number from a query argument or a header, from 0 to
    C{maximum}; absent or empty is 0.  Its text is bounded before it is
    converted, so that no length of digits costs more than a refusal.

    @raise VehicleError: C{invalid_request}.
    """
    if raw is None or raw == "":
        return 0
    if not (raw.isascii() and raw.isdigit()) or len(raw) > len(str(maximum)) + 2:
        raise VehicleError(
            "invalid_request",
            f"{name} must be a whole number from 0 to {maximum}",
            {"field": name},
        )
    value = int(raw)
    if value > maximum:
        raise VehicleError(
            "invalid_request",
            f"{name} must be a whole number from 0 to {maximum}",
            {"field": name},
        )
    return value


def parseCursor(raw: str | None, name: str, session: Session) -> int:
    """
    A client's cursor (C{since} or C{Last-Event-ID}): a whole number no
    greater than the session's own cursor.

    @raise VehicleError: C{invalid_request}.
    """
    value = wholeNumber(raw, name, MAX_CURSOR)
    if value > session.cursor:
        raise VehicleError(
            "invalid_request",
            f"{name} {value} is beyond this session's last event ({session.cursor})",
            {"field": name, "cursor": session.cursor},
        )
    return value


def parseWait(raw: str | None) -> int:
    return wholeNumber(raw, "waitMs", MAX_WAIT_MS)


def wantsEventStream(accept: bytes | str | None) -> bool:
    """
    Whether an C{Accept} header asks for the SSE stream: it names
    C{text/event-stream} (in any case, with any parameters) with a
    non-zero C{q}, and prefers no JSON type to it.  Wildcards alone never
    choose the stream.
    """
    if not accept:
        return False
    text = accept.decode("latin-1") if isinstance(accept, bytes) else accept
    sse: float | None = None
    json_: float = 0.0
    for item in text.split(",")[:64]:
        kind, _, params = item.partition(";")
        kind = kind.strip().lower()
        q = _quality(params)
        if kind == "text/event-stream":
            sse = q if sse is None else max(sse, q)
        elif kind == "application/json" or kind.endswith("+json"):
            json_ = max(json_, q)
    return sse is not None and sse > 0 and sse >= json_


def _quality(params: str) -> float:
    for param in params.split(";"):
        name, _, value = param.partition("=")
        if name.strip().lower() == "q":
            try:
                q = float(value.strip()[:8])
            except ValueError:
                return 0.0
            return q if 0.0 <= q <= 1.0 else 0.0
    return 1.0


async def longPoll(
    session: Session, since: int, waitMs: int, clock: IReactorTime
) -> WatchCompleted:
    """
    The events after C{since} (at most L{WATCH_LIMIT}); with none and a
    C{waitMs}, wait for the next one (or the time to run out).
    """
    events, more = session.feed.after(since)
    if not events and waitMs > 0 and not session.deleted:
        waiting = session.feed.next()
        timer = clock.callLater(waitMs / 1000.0, waiting.cancel)
        try:
            await waiting
        except CancelledError:
            pass
        finally:
            cancelIfActive(timer)
        events, more = session.feed.after(since)
    cursor = (events[-1].seq or since) if events else since
    return WatchCompleted(events=tuple(events), cursor=cursor, more=more)


def sseEncode(event: Event) -> bytes:
    """
    One SSE message: C{id} (durable events only), C{event}, C{data} (the
    event as a frame, on one line: JSON escapes every line break).
    """
    data = json.dumps({"protocol": PROTOCOL, **toObject(event)}, separators=(",", ":"))
    lines = []
    if event.seq is not None:
        lines.append(f"id: {event.seq}")
    lines.append(f"event: {event.type}")
    lines.append(f"data: {data}")
    return ("\n".join(lines) + "\n\n").encode("utf-8")


@implementer(IPushProducer)
@define(eq=False)
class EventStream:
    """
    One SSE client: replays from C{since}, then follows live.
    """

    _log: ClassVar[Logger] = Logger()

    request: Request
    session: Session
    since: int
    clock: IReactorTime
    keepaliveSeconds: float = 15.0
    done: Deferred[None] = field(factory=Deferred)
    _sent: int = 0
    _paused: bool = False
    _stopped: bool = False
    _unsubscribe: Callable[[], None] | None = None
    _keepalive: LoopingCall | None = None
    _catchingUp: IDelayedCall | None = None

    def start(self) -> None:
        self._sent = self.since
        request = self.request
        request.setResponseCode(200)
        request.setHeader(b"content-type", b"text/event-stream; charset=utf-8")
        request.setHeader(b"cache-control", b"no-cache")
        request.setHeader(b"x-accel-buffering", b"no")
        channel = getattr(request, "channel", None)
        if channel is not None and hasattr(channel, "setTimeout"):
            channel.setTimeout(None)
        request.registerProducer(self, True)
        request.write(b": connected\n\n")
        self._unsubscribe = self.session.feed.subscribe(self._live)
        self._keepalive = LoopingCall(self._ping)
        self._keepalive.clock = self.clock
        self._keepalive.start(self.keepaliveSeconds, now=False)
        self._catchUp()

    def _catchUp(self) -> None:
        self._catchingUp = None
        if self._stopped or self._paused:
            return
        events, more = self.session.feed.after(self._sent)
        for event in events:
            self._write(event)
            if self._stopped:
                return
        if more:
            self._catchingUp = self.clock.callLater(0, self._catchUp)
        elif self.session.deleted:
            self.stop()

    def _live(self, event: Event) -> None:
        if self._stopped or self._paused:
            return
        if event.seq is None:
            self.request.write(sseEncode(event))
            return
        if event.seq == self._sent + 1 and self._catchingUp is None:
            self._write(event)
        elif self._catchingUp is None:
            self._catchUp()

    def _write(self, event: Event) -> None:
        if event.seq is None or event.seq <= self._sent:
            return
        self.request.write(sseEncode(event))
        self._sent = event.seq
        if event.type == "session.deleted":
            self.stop()

    def _ping(self) -> None:
        if not self._stopped and not self._paused:
            self.request.write(b": keepalive\n\n")

    # IPushProducer
    def pauseProducing(self) -> None:
        self._paused = True

    def resumeProducing(self) -> None:
        if self._paused:
            self._paused = False
            if self._catchingUp is None:
                self._catchUp()

    def stopProducing(self) -> None:
        self._halt()

    def stop(self) -> None:
        """
        End the stream (the session was deleted, or the host stops).
        """
        if self._stopped:
            return
        self._halt()
        if getattr(self.request, "channel", None) is not None and not self.request.finished:
            try:
                self.request.finish()
            except RuntimeError:
                pass

    def _halt(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        if self._unsubscribe is not None:
            self._unsubscribe()
        if self._keepalive is not None and self._keepalive.running:
            self._keepalive.stop()
        cancelIfActive(self._catchingUp)
        self._catchingUp = None
        try:
            self.request.unregisterProducer()
        except (AttributeError, RuntimeError):
            pass  # the connection is already gone
        if not self.done.called:
            self.done.callback(None)
