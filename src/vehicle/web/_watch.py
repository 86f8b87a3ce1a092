# -*- test-case-name: tests.unit.test_watch -*-
"""
Watching a session: the long-poll answer (C{watch.completed}) and the SSE
stream that replays from a cursor and then follows live.  Each event is
encoded once for all watchers (on its L{Entry}); a session's streams are
fed by one L{Fanout}, which writes the same bytes to every stream up to
date.  A slow SSE client is paused (its producer), never buffered without
bound: when it drains, it catches up from the durable log, so it misses
nothing and sees nothing twice; a client that reads nothing for long is cut,
and resumes from its C{Last-Event-ID}.
"""

from __future__ import annotations

import json
from typing import Callable, ClassVar, Iterable

from attrs import define, field, frozen
from twisted.internet.defer import CancelledError, Deferred
from twisted.internet.interfaces import IDelayedCall, IPushProducer, IReactorTime
from twisted.internet.task import LoopingCall
from twisted.logger import Logger
from twisted.web.server import Request
from zope.interface import implementer

from vehicle import PROTOCOL
from vehicle._timers import cancelIfActive
from vehicle.errors import VehicleError, encode
from vehicle.protocol import Event, toJSON, toObject
from vehicle.session import MAX_WAIT_MS, Entry, Session
from vehicle.web._frames import encodedFrame


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
) -> tuple[list[Entry], int, bool]:
    """
    The events after C{since} (at most L{WATCH_LIMIT}) as entries, the
    cursor to send next and whether more may follow; with none and a
    C{waitMs}, wait for the next one (or the time to run out).
    """
    entries, more = session.feed.entriesAfter(since)
    if not entries and waitMs > 0 and not session.deleted:
        waiting = session.feed.next()
        timer = clock.callLater(waitMs / 1000.0, waiting.cancel)
        try:
            await waiting
        except CancelledError:
            pass
        finally:
            cancelIfActive(timer)
        entries, more = session.feed.entriesAfter(since)
    cursor = (entries[-1].event.seq or since) if entries else since
    return entries, cursor, more


def eventJSON(event: Event) -> bytes:
    """
    An event as a frame's value holds it (compact JSON): what a long-poll's
    answer is made of.
    """
    return encode(toJSON(event))


def watchFrame(entries: list[Entry], cursor: int, more: bool) -> bytes:
    """
    The bytes of C{watch.completed}: the frame L{encode} makes of
    L{WatchCompleted}, from each event's bytes made once for every reader.
    """
    return encodedFrame(
        "watch.completed", {"events": [], "cursor": cursor, "more": more}, "events",
        [entry.encoded(eventJSON) for entry in entries],
    )


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


#: How many streams one turn of a fan-out serves before it lets the reactor
#: do other work (the session's writer first).
SLICE = 100
#: After a turn, a fan-out waits this many times the time it spent serving
#: that turn before it starts the next, and what comes meanwhile is joined
#: into the next turn (one write to each stream, not one per event).  The
#: time counted is the offers', not the sends the reactor makes of them
#: after each slice, nor its rounds between slices: beside 1,000 watchers
#: (py-spy, 3 here) the turns took 30 % of the reactor and the sends 14 %
#: more, against the requests' 31 %.  8 leaves the session's writer over
#: half its solo rate (issue 16).  A turn that took microseconds (a few
#: streams) delays the next by as little; none waits over
#: L{MAX_PACE_SECONDS}.
PACE = 8
#: The longest a fan-out waits between turns, however long the last took.
MAX_PACE_SECONDS = 0.1
#: The most a stream is written at once: more waits to see whether the
#: client reads (a paused stream takes the rest from the log).
MAX_WRITE = 64 * 1024
#: A fan-out waits for its pace only while the events pending come to less
#: than this: half of L{MAX_WRITE}, half of what a stream's transport holds
#: before it pauses the stream.
TURN_BYTES = MAX_WRITE // 2
#: How long a stream may stay paused (its client reading nothing) before it
#: is cut: the client reconnects with C{Last-Event-ID} and misses nothing.
STALL_SECONDS = 60.0


@frozen
class Batch:
    """
    What one turn of a fan-out offers its streams, or a part of it of at
    most L{MAX_WRITE} bytes (L{batches}): events that came since the last
    turn (durable and ephemeral), in order, and their bytes joined once.

    @ivar start: the newest seq before them (what a stream up to date has).
    @ivar end: the newest seq among them (C{start} when none is durable).
    @ivar ends: the last of them is C{session.deleted}.
    @ivar ephemeral: one of them is ephemeral (has no seq).
    """

    start: int
    end: int
    data: bytes
    entries: tuple[Entry, ...]
    ends: bool
    ephemeral: bool = False


def batches(start: int, entries: Iterable[Entry]) -> list[Batch]:
    """
    The events of one turn (the newest seq before them C{start}) as batches
    of at most L{MAX_WRITE} bytes each (an event bigger than that alone in
    its own), in order: a stream takes them one write each, and one that
    its client stops reading on the way takes the rest from the log.
    """
    out: list[Batch] = []
    chunk: list[Entry] = []
    pieces: list[bytes] = []
    size = 0

    def close() -> None:
        nonlocal start
        end = max((e.event.seq for e in chunk if e.event.seq is not None), default=start)
        out.append(Batch(start=start, end=end, data=b"".join(pieces), entries=tuple(chunk),
                         ends=chunk[-1].event.type == "session.deleted",
                         ephemeral=any(e.event.seq is None for e in chunk)))
        start = end

    for entry in entries:
        data = entry.encoded(sseEncode)
        if chunk and size + len(data) > MAX_WRITE:
            close()
            chunk, pieces, size = [], [], 0
        chunk.append(entry)
        pieces.append(data)
        size += len(data)
    if chunk:
        close()
    return out


@define(eq=False)
class Fanout:
    """
    The SSE streams of one session, fed by one follower of its events: each
    event is encoded once (on its L{Entry}), the events of one turn of the
    reactor are joined once, and the same bytes go to every stream that is
    up to date.  A stream paused or behind takes nothing from here: it
    catches up from the log (L{EventStream}).  Streams are served
    L{SLICE} at a time, the reactor free between slices, and a turn follows
    the last no sooner than L{PACE} times the time that one spent serving,
    so a session with many watchers does not starve its writer; what comes
    meanwhile waits for the next turn, joined with the rest.
    """

    session: Session
    clock: IReactorTime
    streams: list[EventStream] = field(factory=list)
    _pending: list[Entry] = field(factory=list)
    #: The bytes of the events pending.
    _pendingBytes: int = 0
    #: The newest seq offered so far.
    _through: int = 0
    _batches: list[Batch] = field(factory=list)
    #: A turn's slices are being served (the streams left to serve).
    _serving: bool = False
    _toServe: list[EventStream] = field(factory=list)
    #: The next slice.
    _next: IDelayedCall | None = None
    #: The next turn, once the pace allows.
    _waiting: IDelayedCall | None = None
    _unfollow: Callable[[], None] | None = None
    #: The time spent serving the turn under way, slice by slice.
    _spent: float = 0.0
    #: When the next turn may start.
    _ready: float = 0.0

    def add(self, stream: EventStream) -> None:
        if self._unfollow is None:
            self._through = self.session.cursor
            self._unfollow = self.session.feed.follow(self._heard)
            self.session.feed.streamed(True)
        self.streams.append(stream)

    def remove(self, stream: EventStream) -> None:
        """
        A stream ended; the last one ends the fan-out's following.
        """
        if stream in self.streams:
            self.streams.remove(stream)
        if stream in self._toServe:
            self._toServe.remove(stream)
        if not self.streams:
            self.close()

    def close(self) -> None:
        if self._unfollow is not None:
            self._unfollow()
            self._unfollow = None
            self.session.feed.streamed(False)
        cancelIfActive(self._next)
        cancelIfActive(self._waiting)
        self._next = self._waiting = None
        self._pending, self._pendingBytes, self._toServe, self._serving = [], 0, [], False

    def _heard(self, entry: Entry) -> None:
        self._pending.append(entry)
        self._pendingBytes += len(entry.encoded(sseEncode))
        if not self._serving:
            self._schedule(atOnce=True)

    def _schedule(self, atOnce: bool) -> None:
        """
        Start the next turn when the pace allows, or as soon as the events
        pending fill half a write (L{TURN_BYTES}): joined further, a write
        would fill the stream's buffer and pause it.  C{atOnce}: run it in
        this call when it may start now (else in the reactor's next round).
        """
        full = self._pendingBytes >= TURN_BYTES
        if self._waiting is not None and not full:
            return
        cancelIfActive(self._waiting)
        self._waiting = None
        wait = self._ready - self.clock.seconds()
        if wait > 0 and not full:
            self._waiting = self.clock.callLater(wait, self._turn)
        elif atOnce:
            self._turn()
        else:
            self._waiting = self.clock.callLater(0, self._turn)

    def _turn(self) -> None:
        """
        Offer what came since the last turn to every stream.
        """
        self._waiting = None
        entries, self._pending, self._pendingBytes = tuple(self._pending), [], 0
        if not entries:
            return
        self._batches = batches(self._through, entries)
        self._through = self._batches[-1].end
        self._toServe = list(self.streams)
        self._serving = True
        self._serve()

    def _serve(self) -> None:
        self._next = None
        began = self.clock.seconds()
        slice_, self._toServe = self._toServe[:SLICE], self._toServe[SLICE:]
        for stream in slice_:
            for batch in self._batches:
                stream.offer(batch)
        now = self.clock.seconds()
        self._spent += now - began
        if self._toServe:
            self._next = self.clock.callLater(0, self._serve)
            return
        self._serving = False
        self._ready = now + min(PACE * self._spent, MAX_PACE_SECONDS)
        self._spent = 0.0
        if self._pending:
            self._schedule(atOnce=False)


@implementer(IPushProducer)
@define(eq=False)
class EventStream:
    """
    One SSE client: replays from C{since}, then follows live (its session's
    L{Fanout} offers it each turn's events).  Paused by its transport, it
    writes nothing and, resumed, catches up from the log; paused longer
    than C{stallSeconds}, it is cut.
    """

    _log: ClassVar[Logger] = Logger()

    request: Request
    session: Session
    since: int
    clock: IReactorTime
    keepaliveSeconds: float = 15.0
    stallSeconds: float = STALL_SECONDS
    fanout: Fanout | None = None
    done: Deferred[None] = field(factory=Deferred)
    _sent: int = 0
    _paused: bool = False
    _stopped: bool = False
    _keepalive: LoopingCall | None = None
    _catchingUp: IDelayedCall | None = None
    _stall: IDelayedCall | None = None

    def start(self) -> None:
        self._sent = self.since
        request = self.request
        request.setResponseCode(200)
        request.setHeader(b"content-type", b"text/event-stream; charset=utf-8")
        request.setHeader(b"cache-control", b"no-cache")
        request.setHeader(b"x-accel-buffering", b"no")
        request.registerProducer(self, True)
        request.write(b": connected\n\n")
        if self.fanout is None:
            self.fanout = Fanout(session=self.session, clock=self.clock)
        self.fanout.add(self)
        self._keepalive = LoopingCall(self._ping)
        self._keepalive.clock = self.clock
        self._keepalive.start(self.keepaliveSeconds, now=False)
        self._catchUp()

    def offer(self, batch: Batch) -> None:
        """
        One turn's events: the whole batch when this stream is where it
        starts, the durable ones it lacks when it read ahead from the log,
        nothing while it is paused or catching up.
        """
        if self._stopped or self._paused or self._catchingUp is not None:
            return
        if self._sent == batch.start and len(batch.data) <= MAX_WRITE:
            self._write(batch)
        elif self._sent < batch.start:
            self._catchUp()
        elif self._sent < batch.end or batch.ephemeral:
            self._writeEach(batch)

    def _writeEach(self, batch: Batch) -> None:
        """
        What this stream lacks of C{batch}, whose start it read past from
        the log: the durable events after its last, and the ephemeral ones
        that came after that too; one that came before an event the stream
        already wrote is left out (the client would read it out of order).
        """
        after = batch.start  # the newest seq before the entry
        for entry in batch.entries:
            if self._stopped or self._paused:
                return
            seq = entry.event.seq
            if seq is None:
                if after >= self._sent:
                    self.request.write(entry.encoded(sseEncode))
                continue
            after = seq
            if seq > self._sent:
                self.request.write(entry.encoded(sseEncode))
                self._sent = seq
                if entry.event.type == "session.deleted":
                    self.stop()

    def _catchUp(self) -> None:
        """
        Write what the log holds after C{sent} (a page a turn, in writes of
        at most L{MAX_WRITE}: L{batches}), stopping at a pause; end the
        stream at the end of a deleted session.
        """
        self._catchingUp = None
        if self._stopped or self._paused:
            return
        entries, more = self.session.feed.entriesAfter(self._sent)
        for part in batches(self._sent, entries):
            self._write(part)
            if self._stopped or self._paused:
                return
        if more:
            self._catchingUp = self.clock.callLater(0, self._catchUp)
        elif self.session.deleted:
            self.stop()

    def _write(self, batch: Batch) -> None:
        """
        Write a batch whole: the stream now has everything up to its end.
        """
        self.request.write(batch.data)
        self._sent = batch.end
        if batch.ends:
            self.stop()

    def _ping(self) -> None:
        if not self._stopped and not self._paused:
            self.request.write(b": keepalive\n\n")

    # IPushProducer
    def pauseProducing(self) -> None:
        self._paused = True
        if self._stall is None and not self._stopped:
            self._stall = self.clock.callLater(self.stallSeconds, self._cut)

    def resumeProducing(self) -> None:
        cancelIfActive(self._stall)
        self._stall = None
        if self._paused:
            self._paused = False
            if self._catchingUp is None:
                self._catchUp()

    def stopProducing(self) -> None:
        self.stop()

    def _cut(self) -> None:
        """
        The client read nothing for C{stallSeconds}: drop the connection
        and what waits in its buffer.  It reconnects with the last
        C{Last-Event-ID} it read and misses nothing (every seq is in the
        log).
        """
        self._stall = None
        self._log.info(
            "Cut a stream of {sessionId} whose client read nothing for {seconds} s "
            "(at seq {seq}; it resumes from its last id)",
            sessionId=self.session.sessionId, seconds=self.stallSeconds, seq=self._sent,
        )
        transport = getattr(getattr(self.request, "channel", None), "transport", None)
        self.stop()
        if transport is not None and hasattr(transport, "abortConnection"):
            transport.abortConnection()
        elif transport is not None:
            transport.loseConnection()

    def stop(self) -> None:
        """
        End the stream (the session was deleted, the host stops, the client
        went or was cut): its L{done} fires, and the route awaiting it
        finishes the answer.
        """
        if self._stopped:
            return
        self._stopped = True
        if self.fanout is not None:
            self.fanout.remove(self)
        if self._keepalive is not None and self._keepalive.running:
            self._keepalive.stop()
        cancelIfActive(self._catchingUp)
        self._catchingUp = None
        cancelIfActive(self._stall)
        self._stall = None
        try:
            self.request.unregisterProducer()
        except (AttributeError, RuntimeError):
            pass  # the connection is already gone
        if not self.done.called:
            self.done.callback(None)
