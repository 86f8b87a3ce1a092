# -*- test-case-name: tests.test_session -*-
"""
The session aggregate: one conversation's meta, title and durable logs, and
the one durable step of a request (L{Session.commit}) and its undoing
(L{Session.reload}).  Its parts live beside it: the lease (L{_lease}), the
command state machine (L{_command}), the request log and idempotency rule
(L{_requests}), the watchers (L{_watchers}).

It knows nothing of HTTP or of pi: the web room calls it with a L{Caller},
and the body's conductor (see L{IConductor}) is handed accepted commands.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, ClassVar, Mapping

from attrs import define, field
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger
from zope.interface import Interface

from vehicle.session._command import (
    Command,
    CommandBook,
    acceptedData,
    adoptedPreview,
    commandRecord,
)
from vehicle.session._lease import LeaseKeeper
from vehicle.session._observers import Observers
from vehicle.session._restore import derive, owedEvents
from vehicle.session._requests import ROUTE_OF, openLogs, replayed, requestRecord, storageError
from vehicle.session._watchers import Listener, Watchers
from vehicle.session._values import (
    Caller,
    Lease,
    SessionMeta,
    isoTimestamp,
    parseTimestamp,
)
from vehicle.store import JsonlLog, writeJsonAtomic


#: How many events one watch answer carries at most (spec, "Watch").
WATCH_LIMIT = 500
#: The longest long-poll wait (spec, "Watch").
MAX_WAIT_MS = 30_000


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
    and asks it whether anything is under way; the host disposes of it and
    snapshots it; a body's door asks it to meter model requests.  Provided
    by the body room (L{vehicle.body.Conductor}).
    """

    def commandAccepted(command: Command) -> None:
        """
        A command was accepted and logged; deliver it.
        """

    def running() -> bool:
        """
        Is a run under way?
        """

    def bodyState() -> str:
        """
        C{dormant}, C{starting}, C{live} or C{stopping}.
        """

    def meterModelRequest() -> str | None:
        """
        May the body's door forward one more model request?  L{None} if so,
        else why not.
        """

    def snapshot() -> Deferred:
        """
        Fire with C{{transcript, queue, tools, stats}} for C{inspect}.
        """

    def dispose(reason: str) -> Deferred:
        """
        Dispose of the body (if any); fire when it is gone.
        """

    def close() -> Deferred:
        """
        The host stops: deliver nothing more, dispose of the body, and
        leave open commands open (the next start reports them).
        """


@define(eq=False)
class Session:
    """
    One conversation.  Mutations are synchronous on the reactor thread, so a
    request is checked, logged and acknowledged without interleaving.

    Why one class of this size: a request's record and its events are one
    synced step, and a failed write reads everything back from disk
    (L{reload}, L{restore}).  What that step writes and what reading back
    derives (the log, the requests remembered, the commands, the lease, the
    chimes, the title and preview) must change together, so they are held
    here; each rule itself lives in its part (L{LeaseKeeper},
    L{CommandBook}, L{Watchers}, L{replayed}), and this class only joins
    them.
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
    preview: str | None = None
    #: The preview is a branch's inherited one, until it says something.
    previewInherited: bool = False
    deleted: bool = False
    closed: bool = False
    roomPolicy: str = "suggest"
    chimes: dict[str, dict[str, Any]] = field(factory=dict)
    conductor: IConductor | None = None
    #: The newest delegation token from the owner's requests: memory only.
    delegatedToken: str | None = field(default=None, repr=False)
    _onDeleted: list[Callable[["Session"], None]] = field(factory=list)
    #: Who follows this session's life (its registry's L{Observers}).
    observers: Observers = field(factory=Observers)
    #: The title C{meta.json} held when the session was opened: the title
    #: unless the log renamed it since.
    baseTitle: str | None = None
    leases: LeaseKeeper = field(init=False)
    book: CommandBook = field(init=False)
    watchers: Watchers = field(init=False)

    @leases.default
    def _newLeaseKeeper(self) -> LeaseKeeper:
        return LeaseKeeper(clock=self.clock, emit=self.emit)

    @book.default
    def _newCommandBook(self) -> CommandBook:
        return CommandBook(clock=self.clock, emit=self.emit)

    @property
    def commands(self) -> dict[str, dict[str, Any]]:
        """
        The records of the session's commands, by id (L{CommandBook}).
        """
        return self.book.records

    @watchers.default
    def _newWatchers(self) -> Watchers:
        return Watchers(self.meta.sessionId)

    @property
    def lease(self) -> Lease | None:
        """
        The lease as it stands (without retiring a lapsed one: see
        L{currentLease}).
        """
        return self.leases.lease

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
        self.leases.observe(event)
        self.watchers.publish(event)
        return event

    def broadcast(self, eventType: str, data: dict[str, Any]) -> None:
        """
        Send an ephemeral event (C{message.delta}) to live watchers only.
        """
        self.watchers.publish(
            {
                "type": eventType,
                "timestamp": isoTimestamp(self.clock.seconds()),
                "sessionId": self.sessionId,
                "data": data,
            }
        )

    def subscribe(self, listener: Listener) -> Callable[[], None]:
        """
        Call C{listener} with every event from now on (L{Watchers.subscribe}).
        """
        return self.watchers.subscribe(listener)

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
        A Deferred fired at the next durable event (L{Watchers.nextEvent}).
        """
        return self.watchers.nextEvent()

    # -- lease (the rules are L{LeaseKeeper}'s) ---------------------------

    def currentLease(self) -> Lease | None:
        return self.leases.current()

    def requireLease(self, caller: Caller) -> None:
        self.leases.require(caller)

    def claim(self, caller: Caller, ttlMs: int, takeover: bool) -> dict[str, Any]:
        """
        Take the lease and say so at once (a request that is remembered
        uses L{LeaseKeeper.claimEffects} and L{commit} instead).
        """
        value, effects = self.leases.claimEffects(caller, ttlMs, takeover)
        for eventType, data in effects:
            self.emit(eventType, data)
        return value

    def releaseLeaseOf(self, holder: Mapping[str, Any], reason: str) -> None:
        self.leases.releaseOf(holder, reason)

    # -- idempotency ------------------------------------------------------

    def replay(self, requestId: str, request: Any, route: str) -> dict[str, Any] | None:
        """
        The original frame of an accepted request with this id and body,
        or L{None} when the id is new.

        @raise VehicleError: C{request_id_conflict} for another body.
        """
        return replayed(self._requests.get(requestId), requestId, request, route)

    def commit(
        self,
        kind: str,
        caller: Caller,
        requestId: str | None,
        request: Any,
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
                kind, caller, requestId, request, frame, ROUTE_OF[kind], self.clock.seconds(),
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
        self.leases.armTimer()

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
        self.leases.drop()
        self.restore(eventRecords, requestRecords)

    # -- title ------------------------------------------------------------

    def rename(
        self, caller: Caller, request: dict[str, Any], frameFor: Callable[[int], dict[str, Any]]
    ) -> dict[str, Any]:
        """
        Rename: the event is the step (with the request's record when it
        has a C{requestId}); C{meta.json} follows, and is put right at
        start should the host be cut between the two.
        """
        self.title = normalizeTitle(request["title"])
        frame = frameFor(1)
        self.commit(
            "rename", caller, request.get("requestId"), request, frame,
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
        self.observers.renamed(self)
        return frame

    def writeMeta(self) -> None:
        """
        Rewrite C{meta.json} whole (atomically): the fixed meta and the title.
        """
        writeJsonAtomic(self.directory / "meta.json", {**self.meta.asJSON(), "title": self.title})

    # -- commands ---------------------------------------------------------

    def openCommands(self) -> list[dict[str, Any]]:
        return self.book.open()

    def running(self) -> bool:
        if self.conductor is not None and self.conductor.running():
            return True
        return False

    def setStatus(self, commandId: str, status: str, **extra: Any) -> None:
        """
        Move a command on (L{CommandBook.setStatus}): the body asks, the
        session moves it.
        """
        self.book.setStatus(commandId, status, **extra)

    def requeue(self, commandId: str) -> None:
        self.book.requeue(commandId)

    def acceptCommand(
        self,
        caller: Caller,
        request: dict[str, Any],
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
        commandId = request.get("commandId") or request["requestId"]
        self.book.refuseKnown(commandId)
        command = commandRecord(
            commandId, request, caller.holder(), isoTimestamp(self.clock.seconds())
        )
        command.update(extra or {})
        frame = frameFor(command)
        answerFrame = frameOf(command) if frameOf is not None else frame
        accepted = acceptedData(command, caller)
        self.commit(
            kind,
            requester or caller,
            (requestBody or request)["requestId"],
            requestBody or request,
            answerFrame,
            [*before, ("command.accepted", accepted), *after],
            command=dict(command),
        )
        self.adoptCommand(command)
        if self.conductor is not None:
            self.conductor.commandAccepted(Command.fromRecord(command))
        return answerFrame

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
        self.leases.stop()
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
        self.observers.deleted(self)

    def settled(self, info: dict[str, Any]) -> None:
        """
        A run of this session settled (the body says so): its observers
        follow (the mirror catches up).
        """
        self.observers.settled(self, info)

    def close(self) -> None:
        self.closed = True
        self.leases.cancelTimer()
        self._events.close()
        self._commandsLog.close()

    # -- rebuilding -------------------------------------------------------

    def restore(self, events: list[dict[str, Any]], requests: list[dict[str, Any]]) -> None:
        """
        Derive every piece of state from the two logs read back from disk
        (L{vehicle.session._restore}): first write the events of a request
        whose record was written but whose events were cut off (L{commit}).
        """
        events = list(events)
        requests = list(requests)
        now = isoTimestamp(self.clock.seconds())
        for event, record in owedEvents(events, requests, self.sessionId, now):
            self._events.append(event)
            events.append(event)
            self._log.info(
                "Session {sessionId}: finished {eventType} of request {requestId} "
                "(the host was cut after its record)",
                sessionId=self.sessionId, eventType=event["type"],
                requestId=record.get("requestId"),
            )
        derived = derive(events, requests, self.baseTitle)
        self._history = events
        self._requests = derived.requests
        self.book.records = derived.commands
        self.chimes = derived.chimes
        self.title = derived.title
        self.preview, self.previewInherited = derived.preview, derived.previewInherited
        self.roomPolicy = derived.roomPolicy
        self.leases.lease = derived.lease
        self.leases.armTimer()

    def adoptCommand(self, command: dict[str, Any]) -> None:
        """
        Take a new command's record in: its first words may become the
        session's preview.
        """
        self.commands[command["commandId"]] = command
        self.preview, self.previewInherited = adoptedPreview(
            self.preview, self.previewInherited, command
        )

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


