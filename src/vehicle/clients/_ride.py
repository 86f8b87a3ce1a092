# -*- test-case-name: tests.unit.test_ride -*-
"""
The ride's line protocol: one request a line in, one frame a line out, in
order, one request at a time.  C{ready} first (the session made or found,
the lease claimed when free), C{closed} last (the lease released at the end
of the input).  Each request becomes one call to the host's routes
(L{vehicle.clients._lines}: what a line asks for).
"""

from __future__ import annotations

import secrets
from enum import Enum
from typing import Callable, ClassVar

from attrs import define, field, frozen
from twisted.internet.defer import CancelledError, Deferred, DeferredQueue
from twisted.logger import Logger

from vehicle.clients._link import (
    HostLink,
    errorFrame,
    leaseHeldBy,
    localFrame,
    sessionIdOf,
    summaryOf,
    valueOf,
)
from vehicle.clients._lines import COMMAND_OPS, OPS, WATCH_OPS, Call, Line, callFor, readLine
from vehicle.clients._stdio import MAX_LINE
from vehicle.protocol import JSONObject, intOf, textOf


__all__ = ["COMMAND_OPS", "OPS", "WATCH_OPS", "Call", "NewSession", "Ride", "randomId"]


#: The frames of a command that made a session whose lease is the caller's.
_CHILD_FRAMES = frozenset({"session.forked", "session.cloned"})

#: Refusals that mean this ride does not hold the lease (any more).
_LEASE_LOST = frozenset({"lease_held", "lease_required", "lease_not_held"})

class _Mark(Enum):
    """
    What the queue holds beside lines: the end of the input, and a line
    too long to read.
    """

    END = "end"
    TOO_LONG = "too long"


def randomId(prefix: str) -> str:
    """
    A fresh id (C{<prefix>-<hex>}) for a ride's own requests and client.
    """
    return f"{prefix}-{secrets.token_hex(8)}"


@frozen(kw_only=True)
class NewSession:
    """
    What C{--new} asks for.
    """

    profile: str | None = None
    model: str | None = None
    title: str | None = None

    def payload(self, requestId: str) -> JSONObject:
        payload: JSONObject = {"requestId": requestId}
        for name, value in (("profile", self.profile), ("model", self.model), ("title", self.title)):
            if value is not None:
                payload[name] = value
        return payload


@define(eq=False)
class Ride:
    """
    One ride on one session.  Feed it lines (L{lineReceived}) and the end
    of the input (L{inputEnded}); it writes frames with C{write}.

    @ivar link: the host's routes, through gardend.
    @ivar clientId: this ride's C{x-vehicle-client-id} (the link sends it).
    @ivar write: called with each frame, in order.
    @ivar newId: makes the request ids of the ride's own requests.
    @ivar sessionId: the session, once ready.
    @ivar cursor: the last C{seq} the ride has reported; a C{watch} without
        C{since} starts there.
    @ivar holdsLease: whether this ride holds the session's lease, as far as
        its answers tell.
    @ivar closed: C{closed} was written; nothing more is read.
    @ivar watchOnly: the ride never claims the lease: C{ready} does not
        claim it, and only L{WATCH_OPS} are sent.
    @ivar children: the sessions this ride forked or cloned whose lease it
        was given; each is released when the ride ends.
    @ivar refusal: the frame that refused to open the session, if any.
    """

    _log: ClassVar[Logger] = Logger()

    link: HostLink
    clientId: str
    write: Callable[[JSONObject], None]
    newId: Callable[[str], str] = randomId
    sessionId: str | None = None
    cursor: int = 0
    holdsLease: bool = False
    closed: bool = False
    watchOnly: bool = False
    children: dict[str, None] = field(factory=dict)
    refusal: JSONObject | None = None
    _queue: DeferredQueue[bytes | _Mark] = field(init=False, factory=DeferredQueue)
    _ended: bool = field(init=False, default=False)
    _waiting: Deferred[JSONObject] | None = field(init=False, default=None)
    _interrupted: bool = field(init=False, default=False)

    # -- input --------------------------------------------------------------

    def lineReceived(self, line: bytes) -> None:
        """
        A request line; handled after those before it.
        """
        if not self._ended:
            self._queue.put(line)

    def lineTooLong(self) -> None:
        """
        A line too long to read: refused in its turn (C{body_too_large});
        the lines after it are read as usual.
        """
        if not self._ended:
            self._queue.put(_Mark.TOO_LONG)

    def inputEnded(self) -> None:
        """
        No more lines: the ride releases its lease and closes (once).
        """
        if not self._ended:
            self._ended = True
            self._queue.put(_Mark.END)

    def interrupt(self) -> None:
        """
        Stop soon (the process is asked to stop): a long-poll under way is
        given up without an answer, the lines not yet handled are dropped,
        and the ride ends as at the end of the input (the lease released,
        then C{closed} with C{reason: "interrupted"}).
        """
        self._interrupted = True
        self._queue.pending.clear()
        self._ended = True
        self._queue.put(_Mark.END)
        if self._waiting is not None:
            self._waiting.cancel()

    # -- the ride -------------------------------------------------------------

    async def run(self, *, new: NewSession | None = None, sessionId: str | None = None) -> int:
        """
        Open the session (C{new}, else C{sessionId}), write C{ready}, then
        answer each line until C{closed}.

        @return: 0, or 1 when the session could not be opened.
        """
        if not await self._open(new, sessionId):
            self._close(None, "refused")
            return 1
        while not self.closed:
            item = await self._queue.get()
            if item is _Mark.END:
                await self._finish()
            elif item is _Mark.TOO_LONG:
                self.write(
                    errorFrame(
                        "body_too_large",
                        f"the line is longer than {MAX_LINE} bytes; it was skipped",
                        details={"limit": MAX_LINE},
                    )
                )
            else:
                try:
                    await self._handle(item)
                except CancelledError:
                    raise
                except Exception:
                    self._log.failure("The ride failed to answer a line")
                    self.write(errorFrame("internal", "the ride failed to answer this line"))
        return 0

    async def _open(self, new: NewSession | None, sessionId: str | None) -> bool:
        if new is not None:
            frame = await self.link.call("POST", "/sessions", new.payload(self.newId("ride-create")))
            if frame.get("type") != "session.created":
                self.refusal = frame
                self.write(frame)
                return False
            summary = summaryOf(frame)
        else:
            assert sessionId is not None
            frame = await self.link.call("GET", self.link.sessionPath(sessionId))
            if frame.get("type") != "session.snapshot":
                self.refusal = frame
                self.write(frame)
                return False
            summary = summaryOf(frame)
            if summary.get("lease") is None and not self.watchOnly:
                claimed = await self.link.call(
                    "POST",
                    self.link.sessionPath(sessionId, "/claim"),
                    {"requestId": self.newId("ride-claim")},
                )
                if claimed.get("type") == "driver.claimed":
                    summary = summaryOf(claimed)
        self.sessionId = sessionIdOf(summary)
        self.cursor = intOf(summary.get("cursor")) or 0
        self._noteLease(summary)
        self.write(
            localFrame(
                "ready",
                None,
                {
                    "session": summary,
                    "cursor": self.cursor,
                    "clientId": self.clientId,
                    "holdsLease": self.holdsLease,
                },
            )
        )
        return True

    async def _finish(self) -> None:
        released = False
        if self.holdsLease and self.sessionId is not None:
            released = await self._release(self.sessionId)
            if released:
                self.holdsLease = False
        await self._releaseChildren()
        reason = "interrupted" if self._interrupted else "end_of_input"
        self._close(None, reason, released=released)

    async def _release(self, sessionId: str) -> bool:
        """
        Release this ride's lease on C{sessionId}; a refusal other than
        "it was not ours any more" is written, to say why it stays held.
        """
        frame = await self.link.call(
            "POST",
            self.link.sessionPath(sessionId, "/release"),
            {"requestId": self.newId("ride-release")},
        )
        if frame.get("type") == "driver.released":
            return True
        if frame.get("code") not in _LEASE_LOST | {"not_found"}:
            self.write(frame)
        return False

    async def _releaseChildren(self) -> None:
        """
        Release the leases of the sessions this ride forked or cloned (a
        ride that ends leaves no lease of its own behind).
        """
        children, self.children = list(self.children), {}
        for sessionId in children:
            await self._release(sessionId)

    def _close(self, requestId: str | None, reason: str, released: bool = False) -> None:
        self.closed = True
        self.write(
            localFrame(
                "closed",
                requestId,
                {
                    "sessionId": self.sessionId,
                    "reason": reason,
                    "cursor": self.cursor,
                    "released": released,
                },
            )
        )

    # -- one line -----------------------------------------------------------

    async def _handle(self, raw: bytes) -> None:
        line = readLine(raw, self.watchOnly, self.route)
        if line is None:
            return
        if not isinstance(line, Line):
            self.write(line)
            return
        requestId, op, call = line.requestId, line.op, line.call
        if op == "watch":
            # A long-poll may be given up (L{interrupt}); nothing else is.
            self._waiting = Deferred.fromCoroutine(
                self.link.call(call.method, call.path, call.payload, call.query)
            )
            try:
                frame = await self._waiting
            except CancelledError:
                if self._interrupted:
                    return
                raise
            finally:
                self._waiting = None
            if self._interrupted:
                return  # given up: its answer (or its cancellation) is not shown
        else:
            frame = await self.link.call(call.method, call.path, call.payload, call.query)
        if frame.get("requestId") is None:
            frame = {**frame, "requestId": requestId}
        self._observe(frame)
        self.write(frame)
        if frame.get("type") == "session.deleted":
            self.holdsLease = False
            await self._releaseChildren()
            self._close(requestId, "delete")
        elif frame.get("type") == "command.accepted" and op == "shutdown":
            self.holdsLease = False
            await self._releaseChildren()
            self._close(requestId, "shutdown")

    def route(self, op: str, request: JSONObject) -> Call:
        """
        The host's route for a request line (L{callFor}) naming C{op}, one
        of L{OPS}.

        @raise Refused: a malformed C{since}/C{waitMs}.
        """
        assert self.sessionId is not None
        return callFor(op, request, self.link.sessionPath, self.sessionId, self.cursor)

    def _observe(self, frame: JSONObject) -> None:
        """
        Follow the cursor and the lease through the answers.
        """
        if frame.get("type") == "error":
            if frame.get("code") in _LEASE_LOST:
                self.holdsLease = False
            return
        summary = summaryOf(frame)
        summaryId = textOf(summary.get("sessionId"))
        if summaryId is not None and summaryId == self.sessionId:
            self._noteLease(summary)
        elif summaryId is not None and frame.get("type") in _CHILD_FRAMES:
            if leaseHeldBy(summary, self.clientId):
                self.children[summaryId] = None
        cursor = intOf(valueOf(frame).get("cursor"))
        if frame.get("type") == "watch.completed" and cursor is not None:
            self.cursor = cursor

    def _noteLease(self, summary: JSONObject) -> None:
        self.holdsLease = leaseHeldBy(summary, self.clientId)
