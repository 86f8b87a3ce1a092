# -*- test-case-name: tests.test_session -*-
"""
The session aggregate: one conversation's meta, title, durable event log,
lease, idempotency records and commands, and the watchers of its events.

It knows nothing of HTTP or of pi: the web room calls it with a L{Caller},
and the body's conductor (see L{IConductor}) is handed accepted commands.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Callable, ClassVar, Iterable

from attrs import define, field
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.logger import Logger
from zope.interface import Interface

from vehicle.errors import VehicleError
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

    def commandAccepted(command: dict[str, Any]) -> None:
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
        Take the lease: free, or already ours (renewed), or the same
        principal's with C{takeover}.  Returns the frame's value.
        """
        now = self.clock.seconds()
        lease = self.currentLease()
        tookOverFrom = None
        if lease is not None and lease.heldBy(caller):
            self.lease = Lease(
                principal=caller.principal,
                clientId=caller.clientId,
                ttlMs=ttlMs,
                claimedAt=lease.claimedAt,
                renewedAt=now,
            )
            self.emit("lease.renewed", {**caller.holder(), "ttlMs": ttlMs})
        else:
            if lease is not None:
                if not (takeover and lease.principal == caller.principal):
                    raise self._leaseHeld(lease, caller)
                tookOverFrom = _holder(lease)
                self.emit(
                    "lease.revoked",
                    {**tookOverFrom, "by": caller.holder(), "reason": "takeover"},
                )
            self.lease = Lease(
                principal=caller.principal,
                clientId=caller.clientId,
                ttlMs=ttlMs,
                claimedAt=now,
                renewedAt=now,
            )
            self.emit("lease.claimed", {**caller.holder(), "ttlMs": ttlMs})
        self._armLeaseTimer()
        return {"lease": self.lease.asJSON(), "tookOverFrom": tookOverFrom}

    def release(self, caller: Caller, reason: str = "release") -> None:
        """
        Give the lease back.

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
        self.emit("lease.released", {**caller.holder(), "reason": reason})

    # -- idempotency ------------------------------------------------------

    def replay(self, requestId: str, body: Any, route: str) -> dict[str, Any] | None:
        """
        The original frame of an accepted request with this id and body,
        or L{None} when the id is new.

        @raise VehicleError: C{request_id_conflict} for another body.
        """
        return replayed(self._requests.get(requestId), requestId, body, route)

    def remember(
        self, kind: str, caller: Caller, requestId: str, body: Any, frame: dict[str, Any]
    ) -> None:
        """
        Keep an accepted request (in C{commands.jsonl}) so a retry replays.
        """
        digest = fingerprint(body, ROUTE_OF[kind])
        self._commandsLog.append(
            {
                "kind": kind,
                "requestId": requestId,
                "principal": caller.principal,
                "clientId": caller.clientId,
                "fingerprint": digest,
                "at": isoTimestamp(self.clock.seconds()),
                "body": body,
                "frame": frame,
            }
        )
        self._requests[requestId] = (digest, frame)

    # -- title ------------------------------------------------------------

    def rename(self, title: str | None) -> None:
        self.title = normalizeTitle(title)
        self.writeMeta()
        self.emit("session.renamed", {"title": self.title})

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

    def acceptCommand(
        self,
        caller: Caller,
        body: dict[str, Any],
        frameFor: Callable[[dict[str, Any]], dict[str, Any]],
        extra: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """
        Record a new command: the request is logged first (its intent, in
        C{commands.jsonl}), then C{command.accepted} is announced.  Returns
        the answer's frame, built by C{frameFor} from the command.
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
        self.remember("command", caller, body["requestId"], body, frame)
        self.commands[commandId] = command
        if (self.preview is None or self.previewInherited) and "text" in command and not command.get(
            "chimeAuthor"
        ):
            self.preview = _preview(command["text"])
            self.previewInherited = False
        self.emit(
            "command.accepted",
            {
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
            },
        )
        if self.conductor is not None:
            self.conductor.commandAccepted(command)
        return frame

    # -- summary ----------------------------------------------------------

    def summary(self) -> dict[str, Any]:
        lease = self.currentLease()
        out = self.meta.asJSON()
        out.pop("folders", None)  # host paths: not the client's business
        out.update(
            {
                "title": self.title,
                "preview": self.preview,
                "access": self.meta.access,
                "updatedAt": isoTimestamp(self.updatedAt),
                "cursor": self.cursor,
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

    def markDeleted(self, trashDir: Path, trashedAs: str, caller: Caller) -> None:
        """
        The directory now lives in the trash: write C{session.deleted} as
        the last event of the moved log, wake every watcher, forget timers.
        """
        self._cancelLeaseTimer()
        self._events.reopen(trashDir / "events.jsonl")
        self._commandsLog.close()
        self.directory = trashDir
        self.closed = False
        self.emit("session.deleted", {"trashedAs": trashedAs, "by": caller.holder()})
        self.closed = True
        self._cancelLeaseTimer()
        self._events.close()
        self.deleted = True
        for callback in self._onDeleted:
            callback(self)

    def close(self) -> None:
        self.closed = True
        self._cancelLeaseTimer()
        self._events.close()
        self._commandsLog.close()

    # -- rebuilding -------------------------------------------------------

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
        for event in events:
            self._history.append(event)
            kind, data = event["type"], event.get("data") or {}
            at = parseTimestamp(event["timestamp"])
            by = data.get("by") if isinstance(data.get("by"), dict) else {}
            if (
                lease is not None
                and by.get("principal") == lease.principal
                and by.get("clientId") == lease.clientId
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
                self.title = data.get("title")
            elif kind == "session.created" and self.preview is None and data.get("preview"):
                self.preview = data["preview"]
                self.previewInherited = True
            elif kind == "room.policy":
                self.roomPolicy = data.get("policy", self.roomPolicy)
            elif kind == "chime.resolved" and data.get("chimeId") in self.chimes:
                self.chimes[data["chimeId"]]["status"] = data.get("status")
        self.lease = lease
        for record in requests:
            self._requests[record["requestId"]] = (record["fingerprint"], record["frame"])
        self._armLeaseTimer()

    def restoreCommand(self, record: dict[str, Any]) -> None:
        """
        Re-create a command from its accepted request (C{commands.jsonl}),
        before the events move its status on.
        """
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
        self.commands[commandId] = command
        if self.preview is None and "text" in body and not body.get("chimeAuthor"):
            self.preview = _preview(body["text"])


def _holder(lease: Lease) -> dict[str, str]:
    return {"principal": lease.principal, "clientId": lease.clientId}


def _preview(text: str, limit: int = 160) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"
