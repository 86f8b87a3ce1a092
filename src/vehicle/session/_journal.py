# -*- test-case-name: tests.unit.test_crash,tests.unit.test_session_parts -*-
"""
A session's journal: its two logs as written and as read back.  The events
(C{events.jsonl}, numbered from 1, all kept in memory for the watchers) and
the requests it answered (C{commands.jsonl}, remembered by id so that a
retry replays).  The journal writes a request's one durable step
(L{Journal.commit}) and, when the disk refuses a write, reads both logs back
and hands what they say to the session (L{JournalOwner}): memory never
claims more than the disk holds.

A served session's lines go through its data directory's writer (group
commit, L{vehicle.store.GroupWriter}): the journal numbers and encodes
them on the reactor thread, in order, and the writer makes them durable
off it, many requests to one sync.  A request is answered, an event told
to those who follow the session, only once durable.  While a session's
folder is built aside (a create, a branch) its lines are written in place.
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar, Protocol

from attrs import define, field
from twisted.internet.defer import Deferred, succeed
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure

from vehicle.errors import VehicleError
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
from vehicle.store import After, Chain, GroupWriter, JsonlLog, Line, raiseAtOnce, writeAtOnce


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
    One session's two logs and what they remember.  Lines are taken on
    the reactor thread, in order (a request's record and its events
    without interleaving), and made durable by the writer.
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
    #: It takes no more lines (closed, or its last event is being written).
    closed: bool = False
    #: The writer its lines go through; L{None} while its folder is built
    #: aside (written in place, at once).
    writer: GroupWriter | None = field(default=None, repr=False)
    #: Its logs are closed for good.
    _shut: bool = False
    #: Its logs' lines, as the writer follows them (a new one when they
    #: are opened afresh).
    _chain: Chain = field(factory=Chain, repr=False)
    #: requestId -> who waits for it, while its step is being made durable.
    _pending: dict[str, list[Deferred[None]]] = field(factory=dict, repr=False)

    @classmethod
    def open(
        cls, sessionId: str, directory: Path, clock: IReactorTime, baseTitle: str | None,
        writer: GroupWriter | None = None,
    ) -> tuple[Journal, list[Event], list[RequestRecord]]:
        """
        The journal over a session's folder (its logs made when missing),
        with the event and request records read back (for L{restore}).

        @param writer: the writer of a served session; none for a folder
            built aside.
        """
        events, eventRecords, records, requestRecords = openLogs(directory)
        journal = cls(sessionId=sessionId, directory=directory, clock=clock,
                      events=events, records=records, baseTitle=baseTitle, writer=writer)
        return journal, eventRecords, requestRecords

    # -- reading ------------------------------------------------------------

    @property
    def cursor(self) -> int:
        """
        The seq of the last durable event.
        """
        return len(self.history)

    @property
    def taken(self) -> int:
        """
        The seq of the last event taken: durable, or being made so.
        """
        return self._events.lastSeq

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
        Take a durable event: numbered now, told to the owner once written
        and synced (nobody sees it before).  A closed journal (the host is
        stopping: late news, a mirror pass) keeps nothing, and says so:
        the event it returns has no C{seq}.

        @raise OSError: the disk refused it at once (a writer that runs at
            once): the session was read back.  Later, a refusal reads the
            session back and is logged.
        """
        if self.closed:
            self._log.warn(
                "Dropped {eventType} for {sessionId}: the session is closed",
                eventType=eventType, sessionId=self.sessionId,
            )
            return self._event(eventType, data, None)
        event = self._event(eventType, data, self.taken + 1)
        written = raiseAtOnce(self._write(None, [event]))
        written.addErrback(self._newsRefused, event)
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
        after: After | None = None,
    ) -> Deferred[JSONObject]:
        """
        The one durable step of an accepted request: its record (its
        C{requestId}, fingerprint, answer, the command it makes and the
        events it implies) is one line of C{commands.jsonl}, synced before
        its events are written.  A host cut between the two finishes the
        events at start (L{restore}), so a request answered is a request
        done, and a request whose record is missing was never answered.

        Without a C{requestId} (a rename may have none) nothing is
        remembered and the first event is the step.

        What the request changes in memory is changed at once, after
        this returns (the next request of the session sees it); its answer
        waits for the step to be durable.

        @param answer: the answer, or the answer as it was already sent
            (a branch's, which its own record holds too).
        @param after: work for the writer once the step is durable (a
            rename's C{meta.json}).
        @return: the answer as sent (what the record holds), once durable.

        @raise VehicleError: C{storage_unavailable} when the step cannot be
            written (at once, from a writer that runs at once; else as the
            L{Deferred}'s failure); the session is then read back from
            disk, so nothing of the refused request stays in memory.
        """
        self._refuseClosed()
        sent = answer if isinstance(answer, dict) else sentAnswer(answer)
        first = self.taken
        events = [self._event(eventType, data, first + n)
                  for n, (eventType, data) in enumerate(effects, 1)]
        record = None
        if requestId is not None:
            record = requestRecord(
                kind, caller, requestId, raw, sent, self.clock.seconds(),
                cursor=first, effects=list(effects), command=command,
            )
        written = self._write(record, events, after)
        if record is None or requestId is None:
            return raiseAtOnce(written.addCallbacks(lambda _: sent, _refusal))
        remembered = (record.fingerprint or "", sent)
        self._pending[requestId] = []

        def durable(_: None) -> JSONObject:
            self.requests[requestId] = remembered
            self._answered(requestId)
            return sent

        def refused(failure: Failure) -> Failure:
            self._answered(requestId)
            return _refusal(failure)

        return raiseAtOnce(written.addCallbacks(durable, refused))

    def finish(self, eventType: str, data: JSONObject) -> Deferred[Event]:
        """
        The log's last event (a delete's): taken, then nothing more is;
        once durable the logs are closed.  Refused, the session is read
        back and takes lines again.

        @raise VehicleError: C{storage_unavailable} (see L{commit}).
        """
        self._refuseClosed()
        event = self._event(eventType, data, self.taken + 1)
        written = self._write(None, [event])
        self.closed = True

        def refused(failure: Failure) -> Failure:
            self.closed = self._shut
            return failure

        def durable(_: None) -> Event:
            self.close()
            return event

        return raiseAtOnce(written.addCallbacks(durable, refused).addErrback(_refusal))

    def answering(self, requestId: str) -> Deferred[None] | None:
        """
        While the request C{requestId} is being made durable, what fires
        once it is (or was refused); else L{None}.
        """
        waiting = self._pending.get(requestId)
        if waiting is None:
            return None
        waiter: Deferred[None] = Deferred()
        waiting.append(waiter)
        return waiter

    def settle(self) -> Deferred[None]:
        """
        Fires once every line taken so far was written (or refused).
        """
        if self.writer is None or self._shut:
            return succeed(None)
        barrier = self.writer.write(self._chain, ())
        return barrier.addErrback(lambda _: None)

    def appendRecord(self, record: RequestRecord) -> None:
        """
        Append a request's record as it is (a new session's first, written
        before its folder is published).
        """
        self._records.append(toObject(record))

    def _refuseClosed(self) -> None:
        """
        @raise VehicleError: C{not_found}: the session is closed (deleted,
            or the host is stopping) and takes no request.
        """
        if self.closed:
            raise VehicleError("not_found", "no such session")

    def _event(self, eventType: str, data: JSONObject | None, seq: int | None) -> Event:
        return Event(
            seq=seq,
            type=eventType,
            timestamp=isoTimestamp(self.clock.seconds()),
            sessionId=self.sessionId,
            data=data or {},
        )

    def _write(
        self, record: RequestRecord | None, events: list[Event], after: After | None = None
    ) -> Deferred[None]:
        """
        Take a record and events: encoded and numbered here, in order, then
        made durable (the record first) by the writer, or in place while
        the folder is built aside.  Once durable they are the owner's.
        """
        lines = [Line(self._records, self._records.line(toObject(record)), 0)] if record else []
        lines += [Line(self._events, self._events.line(toObject(e)), 1) for e in events]
        if self.writer is None:
            writeAtOnce(lines)
            if after is not None:
                after[1]()
            self._durable(events)
            return succeed(None)
        chain = self._chain
        written = self.writer.write(chain, lines, after)
        return written.addCallbacks(lambda _: self._durable(events), self._refused,
                                    errbackArgs=(chain,))

    def _durable(self, events: list[Event]) -> None:
        for event in events:
            self.history.append(event)
            if self.owner is not None:
                self.owner.told(event)

    def _refused(self, failure: Failure, chain: Chain) -> Failure:
        """
        A step the writer could not make durable: the first of its chain
        reads the session back from disk (a failed fsync is never retried:
        the logs are opened afresh, with a new chain); the steps after it
        were refused with it.
        """
        if chain is self._chain and not self._shut:
            self._log.error(
                "Session {sessionId}: a durable write failed ({error}); reading it back from disk",
                sessionId=self.sessionId, error=str(failure.value),
            )
            try:
                self.reload()
            except Exception as again:  # noqa: BLE001 - reported, the host serves on
                self._log.error(
                    "Session {sessionId} could not be read back: {error}",
                    sessionId=self.sessionId, error=str(again),
                )
        return failure

    def _answered(self, requestId: str) -> None:
        """
        The request C{requestId} is settled: who waited for it goes on.
        """
        for waiter in self._pending.pop(requestId, []):
            waiter.callback(None)

    def _newsRefused(self, failure: Failure, event: Event) -> None:
        """
        An event taken outside any request was refused (the session was
        read back): said, as nobody waits for it.
        """
        self._log.error(
            "Session {sessionId}: {eventType} was not kept ({error})",
            sessionId=self.sessionId, eventType=event.type, error=str(failure.value),
        )

    # -- opening, reading back, closing -------------------------------------

    def reopenAt(self, directory: Path, writer: GroupWriter | None) -> None:
        """
        Go on at C{directory}, where the session's folder was renamed to
        (published): its logs are opened there afresh, and written by
        C{writer}.
        """
        events, _, records, _ = openLogs(directory)
        self.directory = directory
        self._events, self._records = events, records
        self._chain = Chain()
        self.writer = writer
        self.closed = self._shut = False

    def reload(self) -> None:
        """
        Forget the in-memory state and read it back from the logs on disk
        (repairing a torn tail), as a restart would.
        """
        self._events.close()
        self._records.close()
        events, eventRecords, records, requestRecords = openLogs(self.directory)
        self._events, self._records = events, records
        self._chain = Chain()
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
        """
        Take nothing more; close the logs once what was taken is written.
        """
        self.closed = self._shut = True
        if self.writer is None:
            self._events.close()
            self._records.close()
        else:
            self.writer.close(self._events, self._records)


def _refusal(failure: Failure) -> Failure:
    """
    A step the disk refused, as its request's refusal: C{storage_unavailable}.
    """
    error = failure.value
    if isinstance(error, OSError):
        raise storageError(error) from error
    return failure
