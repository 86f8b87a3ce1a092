# -*- test-case-name: tests.unit.test_crash,tests.unit.test_session_parts -*-
"""
A session's journal: its two logs as written and as read back.  The events
(C{events.jsonl}, numbered from 1, all kept in memory for the watchers) and
the requests it answered (C{commands.jsonl}, remembered by id so that a
retry replays).  The journal writes a request's one durable step
(L{Journal.commit}) and, when the disk refuses a write, reads both logs back
and hands what they say to the session (L{JournalOwner}): memory never
claims more than the disk holds.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, ClassVar, ParamSpec, Protocol, TypeVar

from attrs import define, field
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger

from vehicle.protocol import (
    JSON,
    Answer,
    Command,
    Effects,
    Event,
    JSONObject,
    RecordKind,
    RequestRecord,
    textOf,
    toObject,
)
from vehicle.session._requests import (
    Remembered,
    openLogs,
    replayed,
    requestRecord,
    storageError,
)
from vehicle.session._restore import Derived, derive, owedEvents
from vehicle.session._values import Caller, isoTimestamp, parseTimestamp
from vehicle.store import JsonlLog


P = ParamSpec("P")
T = TypeVar("T")


def sentAnswer(answer: Answer) -> JSONObject:
    """
    An answer as it is sent and remembered: C{{type, value}} in JSON.
    """
    return toObject(answer)


class JournalOwner(Protocol):
    """
    Whose journal it is (the session): told of every durable event written,
    and given what the logs say when they are read back.
    """

    def told(self, event: Event) -> None:
        """
        A durable event was written: those who follow events follow it.
        """

    def forgetting(self) -> None:
        """
        The logs are about to be read back after a refused write: drop what
        memory holds beyond them (the lease and its timer).
        """

    def restored(self, derived: Derived) -> None:
        """
        The logs were read back: take every piece of state they say.
        """


@define(eq=False)
class Journal:
    """
    One session's two logs and what they remember.  Mutations are
    synchronous on the reactor thread, so a request's record and its
    events are written without interleaving.
    """

    _log: ClassVar[Logger] = Logger()

    sessionId: str
    directory: Path
    clock: IReactorTime
    _events: JsonlLog
    _records: JsonlLog
    #: The title C{meta.json} held when the session was opened: the title
    #: unless the log renamed it since.
    baseTitle: str | None = None
    owner: JournalOwner | None = field(default=None, repr=False)
    #: Every durable event, in order (C{seq} is its place, from 1).
    history: list[Event] = field(factory=list)
    #: requestId -> (fingerprint, answer) of the requests answered.
    requests: dict[str, Remembered] = field(factory=dict)
    closed: bool = False

    @classmethod
    def open(
        cls, sessionId: str, directory: Path, clock: IReactorTime, baseTitle: str | None
    ) -> tuple[Journal, list[Event], list[RequestRecord]]:
        """
        The journal over a session's folder (its logs made when missing),
        with the event and request records read back (for L{restore}).
        """
        events, eventRecords, records, requestRecords = openLogs(directory)
        journal = cls(sessionId=sessionId, directory=directory, clock=clock,
                      events=events, records=records, baseTitle=baseTitle)
        return journal, eventRecords, requestRecords

    # -- reading ------------------------------------------------------------

    @property
    def cursor(self) -> int:
        return len(self.history)

    def last(self) -> Event | None:
        return self.history[-1] if self.history else None

    def lastAt(self) -> float | None:
        """
        When the newest event was written, if any.
        """
        return parseTimestamp(self.history[-1].timestamp) if self.history else None

    def eventsAfter(self, since: int, limit: int) -> tuple[list[Event], bool]:
        """
        The events with C{seq > since}, at most C{limit}, and whether more
        may exist.
        """
        start = max(0, since)
        return self.history[start : start + limit], start + limit < len(self.history)

    def runsSoFar(self) -> int:
        """
        The highest run number in the log (C{run-<n>}), so a revived body
        numbers its runs on from there: run ids stay unique for the
        session's whole life.
        """
        highest = 0
        for event in self.history:
            if event.type != "run.started":
                continue
            runId = textOf(event.data.get("runId"))
            if runId is not None and runId.startswith("run-") and runId[4:].isdigit():
                highest = max(highest, int(runId[4:]))
        return highest

    def replay(self, requestId: str, request: JSON, route: str) -> JSONObject | None:
        """
        The original frame of an accepted request with this id and body,
        or L{None} when the id is new.

        @raise VehicleError: C{request_id_conflict} for another body.
        """
        return replayed(self.requests.get(requestId), requestId, request, route)

    # -- writing ------------------------------------------------------------

    def emit(self, eventType: str, data: JSONObject | None = None) -> Event:
        """
        Append a durable event (written and synced before anyone sees it),
        then tell the owner.  A closed journal (the host is stopping: late
        news, a mirror pass) keeps nothing, and says so: the event it
        returns has no C{seq}.
        """
        event = Event(
            seq=None if self.closed else self.cursor + 1,
            type=eventType,
            timestamp=isoTimestamp(self.clock.seconds()),
            sessionId=self.sessionId,
            data=data or {},
        )
        if self.closed:
            self._log.warn(
                "Dropped {eventType} for {sessionId}: the session is closed",
                eventType=eventType, sessionId=self.sessionId,
            )
            return event
        self._events.append(toObject(event))
        self.history.append(event)
        if self.owner is not None:
            self.owner.told(event)
        return event

    def commit(
        self,
        kind: RecordKind,
        caller: Caller,
        requestId: str | None,
        raw: JSONObject,
        answer: Answer | JSONObject,
        effects: Effects,
        command: Command | None = None,
    ) -> JSONObject:
        """
        The one durable step of an accepted request: its record (its
        C{requestId}, fingerprint, answer, the command it makes and the
        events it implies) is one synced line of C{commands.jsonl}; its
        events follow.  A host cut between the two finishes the events at
        start (L{restore}), so a request answered is a request done, and a
        request whose record is missing was never answered.

        Without a C{requestId} (a rename may have none) nothing is
        remembered and the first event is the step.

        @param answer: the answer, or the answer as it was already sent
            (a branch's, which its own record holds too).
        @return: the answer as sent: what the record holds.

        @raise VehicleError: C{storage_unavailable} when the record cannot
            be written; the session is then read back from disk, so nothing
            of the refused request stays in memory.
        """
        if self._events.failed or self._records.failed:
            # An earlier write (the body's news, say) failed: read the
            # session back from disk before taking anything new.
            self.guarded(self.reload)
        sent = answer if isinstance(answer, dict) else sentAnswer(answer)
        if requestId is not None:
            record = requestRecord(
                kind, caller, requestId, raw, sent, self.clock.seconds(),
                cursor=self.cursor, effects=list(effects), command=command,
            )
            self.guarded(self._records.append, toObject(record))
            if record.fingerprint is not None:  # always, for a record written here
                self.requests[requestId] = (record.fingerprint, sent)
        for eventType, data in effects:
            self.guarded(self.emit, eventType, data)
        return sent

    def appendRecord(self, record: RequestRecord) -> None:
        """
        Append a request's record as it is (a new session's first, written
        before its folder is published).
        """
        self._records.append(toObject(record))

    def guarded(self, write: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """
        Do one durable write; when the disk refuses it (no space, an I/O
        error, an earlier failed sync), read the session back from disk
        (a failed fsync is never retried: the log is opened afresh) and
        refuse the request with a clear frame.
        """
        try:
            return write(*args, **kwargs)
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

    # -- opening, reading back, closing -------------------------------------

    def reopenAt(self, directory: Path) -> None:
        """
        Go on at C{directory}, where the session's folder was renamed to
        (published): its logs are opened there afresh.
        """
        events, _, records, _ = openLogs(directory)
        self.directory = directory
        self._events, self._records = events, records
        self.closed = False

    def reload(self) -> None:
        """
        Forget the in-memory state and read it back from the logs on disk
        (repairing a torn tail), as a restart would.
        """
        self._events.close()
        self._records.close()
        events, eventRecords, records, requestRecords = openLogs(self.directory)
        self._events, self._records = events, records
        if self.owner is not None:
            self.owner.forgetting()
        self.restore(eventRecords, requestRecords)

    def restore(self, events: list[Event], requests: list[RequestRecord]) -> None:
        """
        Derive every piece of state from the two logs read back from disk
        (L{vehicle.session._restore}): first write the events of a request
        whose record was written but whose events were cut off (L{commit}).
        """
        events = list(events)
        requests = list(requests)
        now = isoTimestamp(self.clock.seconds())
        for event, record in owedEvents(events, requests, self.sessionId, now):
            self._events.append(toObject(event))
            events.append(event)
            self._log.info(
                "Session {sessionId}: finished {eventType} of request {requestId} "
                "(the host was cut after its record)",
                sessionId=self.sessionId, eventType=event.type, requestId=record.requestId,
            )
        derived = derive(events, requests, self.baseTitle)
        self.history = events
        self.requests = derived.requests
        if self.owner is not None:
            self.owner.restored(derived)

    def close(self) -> None:
        self.closed = True
        self._events.close()
        self._records.close()
