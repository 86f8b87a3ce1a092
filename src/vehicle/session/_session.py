# -*- test-case-name: tests.test_session -*-
"""
The session aggregate: one conversation's meta, title, durable event log,
lease, idempotency records and commands, and the watchers of its events.

It knows nothing of HTTP or of pi: the web room calls it with a L{Caller},
and the body's conductor (see L{IConductor}) is handed accepted commands.
"""

from __future__ import annotations

import errno
import hashlib
import json
from pathlib import Path
from typing import Any, Callable, ClassVar, Iterable, Mapping

from attrs import define, field
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.logger import Logger
from zope.interface import Interface

from vehicle.errors import VehicleError
from vehicle.session._command import Command
from vehicle.session._values import (
    FINAL_STATUSES,
    OPEN_STATUSES,
    Caller,
    Lease,
    SessionMeta,
    isoTimestamp,
    parseTimestamp,
)
from vehicle.store import JsonlLog, writeJsonAtomic


Listener = Callable[[dict[str, Any]], None]

#: The fields of a command's request that its record keeps.
COMMAND_FIELDS = (
    "text", "contextRefs", "targetCommandId", "entryId", "policy", "chimeId",
    "chimeAuthor", "delivery",
)

#: How many events one watch answer carries at most (spec, "Watch").
WATCH_LIMIT = 500
#: The longest long-poll wait (spec, "Watch").
MAX_WAIT_MS = 30_000


#: The route a kind of remembered request came by: a requestId reused on
#: another route is a conflict, never the other route's replay.
ROUTE_OF = {
    "create": "create", "claim": "claim", "release": "release", "rename": "rename",
    "command": "commands", "policy": "commands", "branch": "commands", "chime": "chimes",
    "branched": "commands",
}


def fingerprint(body: Any, route: str | None = None) -> str:
    """
    A stable digest of a request (its route and body), to tell a replay
    from a conflict.
    """
    subject = body if route is None else {"route": route, "body": body}
    canonical = json.dumps(subject, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def replayed(
    known: tuple[str, dict[str, Any]] | None, requestId: str, body: Any, route: str
) -> dict[str, Any] | None:
    """
    The idempotency rule, in one place: a known request with the same body
    replays its frame, with another body it is a conflict.

    @param known: the remembered C{(fingerprint, frame)}, or L{None}.
    @raise VehicleError: C{request_id_conflict}.
    """
    if known is None:
        return None
    digest, frame = known
    if digest != fingerprint(body, route):
        raise VehicleError(
            "request_id_conflict",
            f"requestId {requestId!r} was already used with a different body",
            {"requestId": requestId},
        )
    return frame


def normalizeTitle(title: str | None) -> str | None:
    """
    Whitespace runs become one space, trimmed, at most 200 characters;
    empty means no title (spec, "Rename and delete").
    """
    if title is None:
        return None
    cleaned = " ".join(title.split())
    cleaned = cleaned[:200].rstrip()
    return cleaned or None


class IConductor(Interface):
    """
    What drives a session's body: the session hands it accepted commands
    and asks it whether anything is under way.  Provided by the body room.
    """

    def commandAccepted(command: Command) -> None:
        """
        A command was accepted and logged; deliver it.
        """

    def running() -> bool:
        """
        Is a run under way?
        """

    def snapshot() -> Deferred:
        """
        Fire with C{{transcript, queue, tools, stats}} for C{inspect}.
        """

    def dispose(reason: str) -> Deferred:
        """
        Dispose of the body (if any); fire when it is gone.
        """


@define(eq=False)
class Session:
    """
    One conversation.  Mutations are synchronous on the reactor thread, so a
    request is checked, logged and acknowledged without interleaving.
    """

    _log: ClassVar[Logger] = Logger()

    meta: SessionMeta
    directory: Path
    clock: IReactorTime
    title: str | None
    _events: JsonlLog
    _commandsLog: JsonlLog
    _history: list[dict[str, Any]] = field(factory=list)
    _requests: dict[str, tuple[str, dict[str, Any]]] = field(factory=dict)
    commands: dict[str, dict[str, Any]] = field(factory=dict)
    lease: Lease | None = None
    preview: str | None = None
    #: The preview is a branch's inherited one, until it says something.
    previewInherited: bool = False
    deleted: bool = False
    closed: bool = False
    roomPolicy: str = "suggest"
    chimes: dict[str, dict[str, Any]] = field(factory=dict)
    conductor: Any = None
    #: The newest delegation token from the owner's requests: memory only.
    delegatedToken: str | None = field(default=None, repr=False)
    _listeners: list[Listener] = field(factory=list)
    _waiters: list[Deferred] = field(factory=list)
    _leaseTimer: IDelayedCall | None = None
    _onDeleted: list[Callable[["Session"], None]] = field(factory=list)
    #: The title C{meta.json} held when the session was opened: the title
    #: unless the log renamed it since.
    baseTitle: str | None = None

    # -- identity -------------------------------------------------------

    @property
    def sessionId(self) -> str:
        return self.meta.sessionId

    def visibleTo(self, caller: Caller) -> bool:
        """
        Only the owner reads, drives, renames or deletes a session, and a
        request bound to another graph never sees it.
        """
        if self.deleted or caller.principal != self.meta.principal:
            return False
        return caller.graphId is None or caller.graphId == self.meta.graphId

    # -- events -----------------------------------------------------------

    @property
    def cursor(self) -> int:
        return self._history[-1]["seq"] if self._history else 0

    @property
    def updatedAt(self) -> float:
        if self._history:
            return parseTimestamp(self._history[-1]["timestamp"])
        return self.meta.createdAt

    def emit(self, eventType: str, data: dict[str, Any] | None = None) -> dict[str, Any]:
        """
        Append a durable event (written and synced before anyone sees it),
        then tell the watchers.
        """
        if self.closed:
            # The host is stopping: late news (a mirror pass) is not kept.
            self._log.warn(
                "Dropped {eventType} for {sessionId}: the session is closed",
                eventType=eventType, sessionId=self.sessionId,
            )
            return {"type": eventType, "data": data or {}}
        event = {
            "seq": self.cursor + 1,
            "type": eventType,
            "timestamp": isoTimestamp(self.clock.seconds()),
            "sessionId": self.sessionId,
            "data": data or {},
        }
        self._events.append(event)
        self._history.append(event)
        self._renewByUse(event)
        self._publish(event)
        return event

    def _renewByUse(self, event: dict[str, Any]) -> None:
        """
        Any event of a mutation by the lease's holder renews the lease: the
        same rule L{rebuild} applies to the log.
        """
        by = (event.get("data") or {}).get("by")
        lease = self.lease
        if self.deleted or event["type"] == "session.deleted":
            return
        if (
            lease is not None
            and isinstance(by, dict)
            and by.get("principal") == lease.principal
            and by.get("clientId") == lease.clientId
            and event["type"] not in ("lease.claimed", "lease.renewed")
        ):
            self.lease = lease.renewed(parseTimestamp(event["timestamp"]))
            self._armLeaseTimer()

    def broadcast(self, eventType: str, data: dict[str, Any]) -> None:
        """
        Send an ephemeral event (C{message.delta}) to live watchers only.
        """
        self._publish(
            {
                "type": eventType,
                "timestamp": isoTimestamp(self.clock.seconds()),
                "sessionId": self.sessionId,
                "data": data,
            }
        )

    def _publish(self, event: dict[str, Any]) -> None:
        for listener in list(self._listeners):
            try:
                listener(event)
            except Exception:
                self._log.failure("A watcher of {sessionId} failed", sessionId=self.sessionId)
        if "seq" in event:
            waiters, self._waiters = self._waiters, []
            for waiter in waiters:
                waiter.callback(None)

    def subscribe(self, listener: Listener) -> Callable[[], None]:
        """
        Call C{listener} with every event from now on (durable and
        ephemeral); returns the function that stops it.
        """
        self._listeners.append(listener)

        def unsubscribe() -> None:
            if listener in self._listeners:
                self._listeners.remove(listener)

        return unsubscribe

    def eventsAfter(self, since: int, limit: int = WATCH_LIMIT) -> tuple[list[dict[str, Any]], bool]:
        """
        The durable events with C{seq > since}, at most C{limit}, and
        whether more may exist.
        """
        start = max(0, since)
        chunk = self._history[start : start + limit]
        return chunk, start + limit < len(self._history)

    def nextEvent(self) -> Deferred:
        """
        A Deferred that fires (with L{None}) at the next durable event.
        Cancelling it just forgets it.
        """

        def cancel(d: Deferred) -> None:
            if d in self._waiters:
                self._waiters.remove(d)

        d: Deferred = Deferred(cancel)
        self._waiters.append(d)
        return d

    # -- lease ------------------------------------------------------------

    def currentLease(self) -> Lease | None:
        """
        The lease, after retiring it if it has lapsed (C{lease.expired}).
        """
        if self.lease is not None and self.clock.seconds() >= self.lease.expiresAt:
            expired = self.lease
            self.lease = None
            self._cancelLeaseTimer()
            self.emit("lease.expired", {**_holder(expired), "reason": "ttl"})
        return self.lease

    def _armLeaseTimer(self) -> None:
        self._cancelLeaseTimer()
        if self.lease is not None and not self.deleted:
            delay = max(0.0, self.lease.expiresAt - self.clock.seconds())
            self._leaseTimer = self.clock.callLater(delay, self._leaseTimerFired)

    def _cancelLeaseTimer(self) -> None:
        if self._leaseTimer is not None and self._leaseTimer.active():
            self._leaseTimer.cancel()
        self._leaseTimer = None

    def _leaseTimerFired(self) -> None:
        self._leaseTimer = None
        if self.lease is None or self.deleted:
            return
        if self.clock.seconds() >= self.lease.expiresAt:
            self.currentLease()
        else:
            self._armLeaseTimer()

    def requireLease(self, caller: Caller) -> None:
        """
        A mutation needs the exact lease: same principal and client.  Use
        renews it.

        @raise VehicleError: C{lease_required} or C{lease_held}.
        """
        lease = self.currentLease()
        if lease is None:
            raise VehicleError(
                "lease_required",
                "nobody holds this session's lease: claim it first",
            )
        if not lease.heldBy(caller):
            raise self._leaseHeld(lease, caller)
        # Renewed by use: by the event the accepted mutation writes (see
        # emit), so a refused one renews nothing and a restart agrees.

    def _leaseHeld(self, lease: Lease, caller: Caller) -> VehicleError:
        canTakeOver = lease.principal == caller.principal
        message = "another client holds this session's lease"
        if canTakeOver:
            message += " (claim with takeover: true to take it over)"
        return VehicleError(
            "lease_held",
            message,
            {"holder": lease.asJSON(), "canTakeOver": canTakeOver},
        )

    def claim(self, caller: Caller, ttlMs: int, takeover: bool) -> dict[str, Any]:
        """
        Take the lease and say so at once (a request that is remembered
        uses L{claimEffects} and L{commit} instead).
        """
        value, effects = self.claimEffects(caller, ttlMs, takeover)
        for eventType, data in effects:
            self.emit(eventType, data)
        return value

    def claimEffects(
        self, caller: Caller, ttlMs: int, takeover: bool
    ) -> tuple[dict[str, Any], list[tuple[str, dict[str, Any]]]]:
        """
        Take the lease: free, or already ours (renewed), or the same
        principal's with C{takeover}.  Returns the frame's value and the
        events that say so (for L{commit}, which writes them).
        """
        now = self.clock.seconds()
        lease = self.currentLease()
        tookOverFrom = None
        effects: list[tuple[str, dict[str, Any]]] = []
        if lease is not None and lease.heldBy(caller):
            self.lease = Lease(
                principal=caller.principal,
                clientId=caller.clientId,
                ttlMs=ttlMs,
                claimedAt=lease.claimedAt,
                renewedAt=now,
            )
            effects.append(("lease.renewed", {**caller.holder(), "ttlMs": ttlMs}))
        else:
            if lease is not None:
                if not (takeover and lease.principal == caller.principal):
                    raise self._leaseHeld(lease, caller)
                tookOverFrom = _holder(lease)
                effects.append((
                    "lease.revoked",
                    {**tookOverFrom, "by": caller.holder(), "reason": "takeover"},
                ))
            self.lease = Lease(
                principal=caller.principal,
                clientId=caller.clientId,
                ttlMs=ttlMs,
                claimedAt=now,
                renewedAt=now,
            )
            effects.append(("lease.claimed", {**caller.holder(), "ttlMs": ttlMs}))
        self._armLeaseTimer()
        return {"lease": self.lease.asJSON(), "tookOverFrom": tookOverFrom}, effects

    def release(self, caller: Caller, reason: str = "release") -> None:
        """
        Give the lease back and say so at once.
        """
        for eventType, data in self.releaseEffects(caller, reason):
            self.emit(eventType, data)

    def releaseLeaseOf(self, holder: Mapping[str, Any], reason: str) -> None:
        """
        Give the lease back for its holder when it is C{holder} (a shutdown
        its holder sent ends the lease with the body); otherwise nothing.
        """
        lease = self.currentLease()
        if lease is None or _holder(lease) != {
            "principal": holder.get("principal"), "clientId": holder.get("clientId"),
        }:
            return
        self.lease = None
        self._cancelLeaseTimer()
        self.emit("lease.released", {**_holder(lease), "reason": reason})

    def releaseEffects(
        self, caller: Caller, reason: str = "release"
    ) -> list[tuple[str, dict[str, Any]]]:
        """
        Give the lease back; returns the event that says so (for L{commit}).

        @raise VehicleError: C{lease_not_held} for anyone but the holder.
        """
        lease = self.currentLease()
        if lease is None or not lease.heldBy(caller):
            raise VehicleError(
                "lease_not_held",
                "this client does not hold the session's lease",
                {"holder": lease.asJSON() if lease else None},
            )
        self.lease = None
        self._cancelLeaseTimer()
        return [("lease.released", {**caller.holder(), "reason": reason})]

    # -- idempotency ------------------------------------------------------

    def replay(self, requestId: str, body: Any, route: str) -> dict[str, Any] | None:
        """
        The original frame of an accepted request with this id and body,
        or L{None} when the id is new.

        @raise VehicleError: C{request_id_conflict} for another body.
        """
        return replayed(self._requests.get(requestId), requestId, body, route)

    def commit(
        self,
        kind: str,
        caller: Caller,
        requestId: str | None,
        body: Any,
        frame: dict[str, Any],
        effects: list[tuple[str, dict[str, Any]]],
        command: dict[str, Any] | None = None,
    ) -> None:
        """
        The one durable step of an accepted request: its record (its
        C{requestId}, fingerprint, answer, the command it makes and the
        events it implies) is one synced line of C{commands.jsonl}; its
        events follow.  A host cut between the two finishes the events at
        start (L{restore}), so a request answered is a request done, and a
        request whose record is missing was never answered.

        Without a C{requestId} (a rename may have none) nothing is
        remembered and the first event is the step.

        @raise VehicleError: C{storage_unavailable} when the record cannot
            be written; the session is then read back from disk, so nothing
            of the refused request stays in memory.
        """
        if self._events.failed or self._commandsLog.failed:
            # An earlier write (the body's news, say) failed: read the
            # session back from disk before taking anything new.
            self._guarded(self.reload)
        if requestId is not None:
            record = requestRecord(
                kind, caller, requestId, body, frame, ROUTE_OF[kind], self.clock.seconds(),
                cursor=self.cursor,
                effects=[[eventType, data] for eventType, data in effects],
            )
            if command is not None:
                record["command"] = command
            self._guarded(self._commandsLog.append, record)
            self._requests[requestId] = (record["fingerprint"], frame)
        for eventType, data in effects:
            self._guarded(self.emit, eventType, data)

    def appendRecord(self, record: dict[str, Any]) -> None:
        """
        Append a request's record as it is (a new session's first, written
        before its folder is published).
        """
        self._commandsLog.append(record)

    def reopenAt(self, directory: Path) -> None:
        """
        Go on at C{directory}, where the session's folder was renamed to
        (published): its logs are opened there afresh.
        """
        events, _, commands, _ = openLogs(directory)
        self.directory = directory
        self._events, self._commandsLog = events, commands
        self.closed = False
        self._armLeaseTimer()

    def _guarded(self, write: Callable[..., Any], *args: Any) -> Any:
        """
        Do one durable write; when the disk refuses it (no space, an I/O
        error, an earlier failed sync), read the session back from disk
        (a failed fsync is never retried: the log is opened afresh) and
        refuse the request with a clear frame.
        """
        try:
            return write(*args)
        except OSError as e:
            self._log.error(
                "Session {sessionId}: a durable write failed ({error}); reading it back from disk",
                sessionId=self.sessionId, error=str(e),
            )
            try:
                self.reload()
            except Exception as again:  # noqa: BLE001 - reported, the host serves on
                self._log.error(
                    "Session {sessionId} could not be read back: {error}",
                    sessionId=self.sessionId, error=str(again),
                )
            raise storageError(e) from e

    def reload(self) -> None:
        """
        Forget the in-memory state and read it back from the logs on disk
        (repairing a torn tail), as a restart would: after a failed write,
        memory never claims more than the disk holds.
        """
        self._events.close()
        self._commandsLog.close()
        events, eventRecords, commands, requestRecords = openLogs(self.directory)
        self._events, self._commandsLog = events, commands
        self._cancelLeaseTimer()
        self._history = []
        self._requests = {}
        self.commands = {}
        self.chimes = {}
        self.lease = None
        self.preview = None
        self.previewInherited = False
        self.roomPolicy = "suggest"
        self.restore(eventRecords, requestRecords)

    # -- title ------------------------------------------------------------

    def rename(
        self, caller: Caller, body: dict[str, Any], frameFor: Callable[[int], dict[str, Any]]
    ) -> dict[str, Any]:
        """
        Rename: the event is the step (with the request's record when it
        has a C{requestId}); C{meta.json} follows, and is put right at
        start should the host be cut between the two.
        """
        self.title = normalizeTitle(body["title"])
        frame = frameFor(1)
        self.commit(
            "rename", caller, body.get("requestId"), body, frame,
            [("session.renamed", {"title": self.title})],
        )
        try:
            self.writeMeta()
        except OSError as e:
            # The title is durable in the log; meta.json is put right at start.
            self._log.warn(
                "Session {sessionId}: meta.json could not be rewritten ({error}); "
                "the title is kept in the log", sessionId=self.sessionId, error=str(e),
            )
        return frame

    def writeMeta(self) -> None:
        """
        Rewrite C{meta.json} whole (atomically): the fixed meta and the title.
        """
        writeJsonAtomic(self.directory / "meta.json", {**self.meta.asJSON(), "title": self.title})

    # -- commands ---------------------------------------------------------

    def openCommands(self) -> list[dict[str, Any]]:
        return [c for c in self.commands.values() if c["status"] in OPEN_STATUSES]

    def running(self) -> bool:
        if self.conductor is not None and self.conductor.running():
            return True
        return False

    def setStatus(self, commandId: str, status: str, **extra: Any) -> None:
        """
        Move a command on and announce it (C{command.<status>}); the
        C{queued} step has no event of its own.
        """
        command = self.commands[commandId]
        if command["status"] in FINAL_STATUSES:
            return
        command["status"] = status
        command.update({k: v for k, v in extra.items() if v is not None})
        command["updatedAt"] = isoTimestamp(self.clock.seconds())
        if status != "queued":
            self.emit(
                f"command.{status}",
                {"commandId": commandId, "status": status, **{k: v for k, v in extra.items() if v is not None}},
            )

    def requeue(self, commandId: str) -> None:
        """
        A command taken back from pi's queue waits to be sent again: it is
        C{accepted} once more (a step with no event of its own, as
        C{queued} is).
        """
        command = self.commands[commandId]
        if command["status"] not in FINAL_STATUSES:
            command["status"] = "accepted"
            command["updatedAt"] = isoTimestamp(self.clock.seconds())

    def acceptCommand(
        self,
        caller: Caller,
        body: dict[str, Any],
        frameFor: Callable[[dict[str, Any]], dict[str, Any]],
        extra: dict[str, Any] | None = None,
        *,
        kind: str = "command",
        requester: Caller | None = None,
        requestBody: dict[str, Any] | None = None,
        before: list[tuple[str, dict[str, Any]]] = (),  # type: ignore[assignment]
        after: list[tuple[str, dict[str, Any]]] = (),  # type: ignore[assignment]
        frameOf: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
    ) -> dict[str, Any]:
        """
        Accept a new command in one durable step (L{commit}): the request's
        record, holding the command whole, then C{command.accepted} (and
        whatever events C{before} and C{after} add: a chime's).  Returns
        the answer's frame, built by C{frameFor} from the command.

        A chime that becomes a command is remembered as the chimer's
        request (C{kind}, C{requester}, C{requestBody}), the command being
        the driver's; C{frameOf} then makes the chimer's answer.
        """
        commandId = body.get("commandId") or body["requestId"]
        if commandId in self.commands:
            raise VehicleError(
                "command_exists",
                f"a command with id {commandId!r} already exists in this session",
                {"commandId": commandId},
            )
        now = isoTimestamp(self.clock.seconds())
        command: dict[str, Any] = {
            "commandId": commandId,
            "requestId": body["requestId"],
            "type": body["type"],
            "status": "accepted",
            "disposition": None,
            "acceptedAt": now,
            "updatedAt": now,
            "by": caller.holder(),
        }
        for key in COMMAND_FIELDS:
            if key in body:
                command[key] = body[key]
        command.update(extra or {})
        frame = frameFor(command)
        answerFrame = frameOf(command) if frameOf is not None else frame
        accepted = {
            "commandId": commandId,
            "type": body["type"],
            "requestId": body["requestId"],
            "status": "accepted",
            "by": caller.holder(),
            **(
                {"textBytes": len(command["text"].encode("utf-8"))}
                if "text" in command
                else {}
            ),
        }
        self.commit(
            kind,
            requester or caller,
            (requestBody or body)["requestId"],
            requestBody or body,
            answerFrame,
            [*before, ("command.accepted", accepted), *after],
            command=dict(command),
        )
        self._adoptCommand(command)
        if self.conductor is not None:
            self.conductor.commandAccepted(Command.fromRecord(command))
        return answerFrame

    def _adoptCommand(self, command: dict[str, Any]) -> None:
        self.commands[command["commandId"]] = command
        if (self.preview is None or self.previewInherited) and "text" in command and not command.get(
            "chimeAuthor"
        ):
            self.preview = _preview(command["text"])
            self.previewInherited = False

    # -- summary ----------------------------------------------------------

    def summary(self, ahead: int = 0) -> dict[str, Any]:
        """
        The session as the list and the answers show it.

        @param ahead: how many events the request being answered is about
            to write (L{commit}): its answer shows the session after them.
        """
        lease = self.currentLease()
        out = self.meta.asJSON()
        out.pop("folders", None)  # host paths: not the client's business
        out.update(
            {
                "title": self.title,
                "preview": self.preview,
                "access": self.meta.access,
                "updatedAt": isoTimestamp(self.clock.seconds() if ahead else self.updatedAt),
                "cursor": self.cursor + ahead,
                "status": "running" if self.running() else "idle",
                "body": self.bodyState(),
                "lease": lease.asJSON() if lease else None,
                "roomPolicy": self.roomPolicy,
            }
        )
        return out

    def bodyState(self) -> str:
        if self.conductor is None:
            return "dormant"
        return str(self.conductor.bodyState())

    def whenDeleted(self, callback: Callable[["Session"], None]) -> None:
        self._onDeleted.append(callback)

    def markDeleted(self, trashedAs: str, caller: Caller) -> dict[str, Any]:
        """
        The delete's one durable step: C{session.deleted} (naming the trash
        directory already reserved) as the last event of the log.  It wakes
        every watcher; the registry then moves the directory (and start
        finishes that move should the host be cut before it ends).

        @return: the event.
        """
        self._cancelLeaseTimer()
        event = self._guarded(
            self.emit, "session.deleted", {"trashedAs": trashedAs, "by": caller.holder()}
        )
        self.close()
        self.deleted = True
        return event

    def trashed(self, trashDir: Path) -> None:
        """
        The directory now lives in the trash: tell whoever follows deletes.
        """
        self.directory = trashDir
        for callback in self._onDeleted:
            callback(self)

    def close(self) -> None:
        self.closed = True
        self._cancelLeaseTimer()
        self._events.close()
        self._commandsLog.close()

    # -- rebuilding -------------------------------------------------------

    def restore(self, events: list[dict[str, Any]], requests: list[dict[str, Any]]) -> None:
        """
        Derive every piece of state from the two logs read back from disk:
        first finish the events of a request whose record was written but
        whose events were cut off (L{commit}), then rebuild.
        """
        events = list(events)
        requests = list(requests)
        lastSeq = events[-1]["seq"] if events else 0
        for record in requests:
            effects, cursor = record.get("effects"), record.get("cursor")
            if not isinstance(effects, list) or not isinstance(cursor, int):
                continue
            have = max(0, lastSeq - cursor)
            for eventType, data in effects[have:]:
                lastSeq += 1
                event = {
                    "seq": lastSeq,
                    "type": eventType,
                    "timestamp": record.get("at") or isoTimestamp(self.clock.seconds()),
                    "sessionId": self.sessionId,
                    "data": data,
                }
                self._events.append(event)
                events.append(event)
                self._log.info(
                    "Session {sessionId}: finished {eventType} of request {requestId} "
                    "(the host was cut after its record)",
                    sessionId=self.sessionId, eventType=eventType,
                    requestId=record.get("requestId"),
                )
        for record in requests:
            self.restoreCommand(record)
        self.rebuild(events, requests)

    def rebuild(self, events: Iterable[dict[str, Any]], requests: Iterable[dict[str, Any]]) -> None:
        """
        Restore state from the logs read back at start.
        """
        requests = list(requests)
        for record in requests:
            if record.get("kind") == "chime":
                chime = ((record.get("frame") or {}).get("value") or {}).get("chime") or {}
                if chime.get("status") == "pending":
                    self.chimes[chime["chimeId"]] = {**chime, "text": record["body"]["text"]}
        lease: Lease | None = None
        title = self.baseTitle
        for event in events:
            self._history.append(event)
            kind, data = event["type"], event.get("data") or {}
            at = parseTimestamp(event["timestamp"])
            by = data.get("by") if isinstance(data.get("by"), dict) else {}
            if (
                lease is not None
                and by.get("principal") == lease.principal
                and by.get("clientId") == lease.clientId
                and kind not in ("lease.claimed", "lease.renewed")
            ):
                # Any mutation by the holder renewed the lease by use.
                lease = lease.renewed(at)
            if kind == "lease.claimed" or kind == "lease.renewed":
                claimedAt = lease.claimedAt if (kind == "lease.renewed" and lease) else at
                lease = Lease(
                    principal=data["principal"],
                    clientId=data["clientId"],
                    ttlMs=int(data["ttlMs"]),
                    claimedAt=claimedAt,
                    renewedAt=at,
                )
            elif kind in ("lease.released", "lease.revoked", "lease.expired"):
                if lease is not None and data.get("clientId") == lease.clientId:
                    lease = None
            elif kind.startswith("command.") and data.get("commandId") in self.commands:
                command = self.commands[data["commandId"]]
                command["status"] = data.get("status", kind.split(".", 1)[1])
                command["updatedAt"] = event["timestamp"]
                for key in ("disposition", "error", "reason"):
                    if key in data:
                        command[key] = data[key]
            elif kind == "session.renamed":
                title = data.get("title")
            elif kind == "session.created" and self.preview is None and data.get("preview"):
                self.preview = data["preview"]
                self.previewInherited = True
            elif kind == "room.policy":
                self.roomPolicy = data.get("policy", self.roomPolicy)
            elif kind == "chime.resolved" and data.get("chimeId") in self.chimes:
                self.chimes[data["chimeId"]]["status"] = data.get("status")
        self.title = title
        self.lease = lease
        for record in requests:
            # A session's own requests; the one that made it (a create, a
            # branch) is its registry's or its source's to replay.
            if (
                isinstance(record.get("requestId"), str)
                and "fingerprint" in record
                and record.get("kind") not in ("create", "branched")
            ):
                self._requests[record["requestId"]] = (record["fingerprint"], record["frame"])
        self._armLeaseTimer()

    def runsSoFar(self) -> int:
        """
        The highest run number in the log (C{run-<n>}), so a revived body
        numbers its runs on from there: run ids stay unique for the
        session's whole life.
        """
        highest = 0
        for event in self._history:
            if event["type"] != "run.started":
                continue
            runId = (event.get("data") or {}).get("runId")
            if isinstance(runId, str) and runId.startswith("run-") and runId[4:].isdigit():
                highest = max(highest, int(runId[4:]))
        return highest

    def restoreCommand(self, record: dict[str, Any]) -> None:
        """
        Re-create a command from the request that made it (its record in
        C{commands.jsonl} keeps it whole), before the events move its
        status on.
        """
        if isinstance(record.get("command"), dict):
            command = dict(record["command"])
            command["status"] = "accepted"
            self._adoptCommand(command)
            return
        if record.get("kind") != "command":
            return
        body = record.get("body") or {}
        commandId = body.get("commandId") or body.get("requestId")
        command = {
            "commandId": commandId,
            "requestId": body.get("requestId"),
            "type": body.get("type"),
            "status": "accepted",
            "disposition": None,
            "acceptedAt": record.get("at"),
            "updatedAt": record.get("at"),
            "by": {"principal": record.get("principal"), "clientId": record.get("clientId")},
        }
        for key in COMMAND_FIELDS:
            if key in body:
                command[key] = body[key]
        self._adoptCommand(command)


def requestRecord(
    kind: str, caller: Caller, requestId: str, body: Any, frame: dict[str, Any],
    route: str, now: float, **extra: Any,
) -> dict[str, Any]:
    """
    The line of C{commands.jsonl} that remembers an accepted request: who
    sent it, its fingerprint (on its route), its body and its answer.
    """
    return {
        "kind": kind,
        "requestId": requestId,
        "principal": caller.principal,
        "clientId": caller.clientId,
        "fingerprint": fingerprint(body, route),
        "at": isoTimestamp(now),
        "body": body,
        "frame": frame,
        **extra,
    }


def branchEffects(
    kind: str, branchId: str, entryId: str | None, caller: Caller
) -> list[tuple[str, dict[str, Any]]]:
    """
    What a source's log says of a branch made from it.
    """
    return [(
        f"session.{'forked' if kind == 'fork' else 'cloned'}",
        {"branchId": branchId, "entryId": entryId, "by": caller.holder()},
    )]


def storageError(error: OSError) -> VehicleError:
    """
    The refusal of a request the disk would not take (no space, an I/O
    error): nothing of it was kept.
    """
    return VehicleError(
        "storage_unavailable",
        f"the host could not write this request to its disk ({error.strerror or error}); "
        "try again later: a retry with the same requestId answers what was kept, if anything",
        {"errno": errno.errorcode.get(error.errno or 0)},
    )


def openLogs(
    directory: Path,
) -> tuple[JsonlLog, list[dict[str, Any]], JsonlLog, list[dict[str, Any]]]:
    """
    Open a session's two logs (made when missing) and read them back.
    """
    events, eventRecords = JsonlLog.open(directory / "events.jsonl", seqField="seq")
    try:
        commands, requestRecords = JsonlLog.open(directory / "commands.jsonl")
    except BaseException:
        events.close()
        raise
    return events, eventRecords, commands, requestRecords


def _holder(lease: Lease) -> dict[str, str]:
    return {"principal": lease.principal, "clientId": lease.clientId}


def _preview(text: str, limit: int = 160) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"
