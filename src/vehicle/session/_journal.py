# -*- test-case-name: tests.unit.test_crash,tests.unit.test_session_parts,tests.unit.test_digest -*-
"""
A session's journal: its two logs as written and as read back.  The events
(C{events.jsonl}, numbered from 1, read back from the log when a reader
asks: L{vehicle.session._eventlog}) and the requests it answered
(C{commands.jsonl}, remembered by id so that a retry replays).  The journal
writes a request's one durable step (L{Journal.commit}) and, when the disk
refuses a write, reads both logs back and hands what they say to the
session (L{JournalOwner}): memory never claims more than the disk holds.

A served session's lines go through its data directory's writer (group
commit, L{vehicle.store.GroupWriter}): the journal numbers and encodes
them on the reactor thread, in order, and the writer makes them durable
off it, many requests to one sync.  A request is answered, an event told
to those who follow the session, only once durable.  While a session's
folder is built aside (a create, a branch) its lines are written in place.

A journal is awake (its logs open, its requests remembered) or dormant:
then it knows only what its digest says (L{vehicle.session._digest}: the
cursor, the newest event's time, the highest run) and holds no file open.
Whatever needs more wakes it first (L{Journal.wake}): the logs are read
back, as at start.  It goes dormant only with nothing on its way to disk.
"""

from __future__ import annotations

import json
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
    toObject,
)
from vehicle.session._digest import Digest, logsOf
from vehicle.session._eventlog import Entry, EventFile, Pages
from vehicle.session._requests import (
    Answering,
    Remembered,
    openLogs,
    recordOf,
    remembered,
    replayed,
    requestRecord,
    storageError,
)
from vehicle.session._restore import Derived, deletedAs, derive, owedEvents, runNumber
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

    def asleep(self) -> None:
        """
        The journal went dormant: drop what only an awake session keeps
        (what the logs say again when it wakes).
        """

    def woke(self) -> None:
        """
        The journal woke (its logs read back, L{restored} told).
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
    #: The two logs, open while the journal is awake; L{None} while dormant.
    _events: JsonlLog | None
    _records: JsonlLog | None
    #: The title C{meta.json} held when the session was opened: the title
    #: unless the log renamed it since.
    baseTitle: str | None = None
    owner: JournalOwner | None = field(default=None, repr=False)
    #: requestId -> (fingerprint, answer) of the requests answered (awake only).
    requests: dict[str, Remembered] = field(factory=dict)
    #: It takes no more lines (closed, or its last event is being written).
    closed: bool = False
    #: The newest durable event's seq (0 before the first).
    cursor: int = 0
    #: When the newest event was written (its timestamp, and in seconds).
    lastTimestamp: str | None = None
    _lastAt: float | None = None
    #: The trash name, when the newest event is C{session.deleted}.
    deletedAs: str | None = None
    #: The highest run number in the log (C{run-<n>}).
    _runs: int = 0
    #: The C{requestId}s of the branches this session made.
    branches: frozenset[str] = frozenset()
    #: When it last woke (L{wake}).
    wokeAt: float = 0.0
    #: The writer its lines go through; L{None} while its folder is built
    #: aside, or read back at start (written in place, at once).
    writer: GroupWriter | None = field(default=None, repr=False)
    #: Its folder is built aside: its lines are written in place and synced
    #: only when it is sealed (L{seal}), before it is published.
    aside: bool = False
    #: Its logs are closed for good.
    _shut: bool = False
    #: Its logs' lines, as the writer follows them (a new one when they
    #: are opened afresh).
    _chain: Chain = field(factory=Chain, repr=False)
    #: The requests whose step is being made durable, and who waits for them.
    _answering: Answering = field(factory=Answering, repr=False)
    _file: EventFile = field(init=False)
    _pages: Pages = field(init=False)

    @_file.default
    def _newFile(self) -> EventFile:
        return EventFile(logsOf(self.directory)[0])

    @_pages.default
    def _newPages(self) -> Pages:
        return Pages(self._file)

    @classmethod
    def open(
        cls, sessionId: str, directory: Path, clock: IReactorTime, baseTitle: str | None,
        writer: GroupWriter | None = None, aside: bool = False,
    ) -> tuple[Journal, list[Event], list[RequestRecord]]:
        """
        The journal over a session's folder (its logs made when missing),
        with the event and request records read back (for L{restore}).

        @param writer: the writer of a served session; none for a folder
            built aside, or read back at start.
        @param aside: the folder is built aside (see L{aside}).
        """
        events, eventRecords, records, requestRecords = openLogs(directory, syncFolder=not aside)
        journal = cls(sessionId=sessionId, directory=directory, clock=clock,
                      events=events, records=records, baseTitle=baseTitle, writer=writer,
                      aside=aside)
        return journal, eventRecords, requestRecords

    @classmethod
    def dormant(
        cls, sessionId: str, directory: Path, clock: IReactorTime, baseTitle: str | None,
        digest: Digest, writer: GroupWriter | None = None,
    ) -> Journal:
        """
        The journal of a session as its digest says it, its logs left
        closed until it wakes.
        """
        return cls(
            sessionId=sessionId, directory=directory, clock=clock, events=None, records=None,
            baseTitle=baseTitle, cursor=digest.cursor, lastTimestamp=digest.lastAt,
            lastAt=None if digest.lastAt is None else parseTimestamp(digest.lastAt),
            deletedAs=digest.deletedAs, runs=digest.runs, branches=frozenset(digest.branches),
            writer=writer,
        )

    # -- reading ------------------------------------------------------------

    @property
    def awake(self) -> bool:
        """
        Are the logs open (and the requests remembered)?
        """
        return self._events is not None

    @property
    def taken(self) -> int:
        """
        The seq of the last event taken: durable, or being made so.
        """
        return self._events.lastSeq if self._events is not None else self.cursor

    @property
    def busy(self) -> bool:
        """
        Is anything taken still on its way to disk (an event, a request's
        record)?
        """
        return self.taken != self.cursor or bool(self._answering)

    def lastAt(self) -> float | None:
        """
        When the newest event was written, if any.
        """
        return self._lastAt

    def eventsAfter(self, since: int, limit: int) -> tuple[list[Event], bool]:
        """
        The events with C{seq > since}, at most C{limit}, and whether more
        may exist.
        """
        entries, more = self.entriesAfter(since, limit)
        return [entry.event for entry in entries], more

    def entriesAfter(self, since: int, limit: int) -> tuple[list[Entry], bool]:
        """
        The events with C{seq > since} as entries (each encoded once for
        all its readers), at most C{limit}, and whether more may exist:
        read from the log, or from the pages kept of it.

        @raise OSError: the log cannot be read.
        """
        first = max(0, since) + 1
        last = min(self.cursor, first + limit - 1)
        return self._pages.entries(first, last), last < self.cursor

    def runsSoFar(self) -> int:
        """
        The highest run number in the log (C{run-<n>}), so a revived body
        numbers its runs on from there: run ids stay unique for the
        session's whole life.
        """
        return self._runs

    def replay(self, requestId: str, request: JSON, route: str) -> JSONObject | None:
        """
        The original frame of an accepted request with this id and body,
        or L{None} when the id is new.

        @raise VehicleError: C{request_id_conflict} for another body.
        """
        self.wake()
        return replayed(self.requests.get(requestId), requestId, request, route)

    def knows(self, requestId: str) -> bool:
        """
        Did this session answer a request with this id?  A branch it made
        is known without waking it.
        """
        if requestId in self.branches:
            return True
        self.wake()
        return requestId in self.requests

    def originRecord(self) -> RequestRecord | None:
        """
        The record of the request that made the session (a create, a
        branch), read from its request log: the first of those kinds.

        @raise OSError: the log cannot be read.
        """
        with open(logsOf(self.directory)[1], "rb") as f:
            for raw in f:
                if not raw.endswith(b"\n"):
                    break
                try:
                    record = recordOf(json.loads(raw))
                except (ValueError, TypeError, AttributeError):
                    continue
                if record.kind in ("create", "branched"):
                    return record
        return None

    # -- writing ------------------------------------------------------------

    def emit(self, eventType: str, data: JSONObject | None = None) -> Event:
        """
        Take a durable event: numbered now, told to the owner once written
        and synced (nobody sees it before).  A closed journal (the host is
        stopping: late news, a mirror pass) keeps nothing, and says so:
        the event it returns has no C{seq}.  A dormant journal wakes first.

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
        self.wake()
        event = self._event(eventType, data, self.taken + 1)
        written = raiseAtOnce(self._write(None, [event]))
        written.addErrback(self._newsRefused, event)
        return event

    def streamed(self, streams: bool) -> None:
        """
        Whether SSE streams follow the session: while they do, more pages
        of events are kept for them to share (L{Pages.streamed}).
        """
        self._pages.streamed(streams)

    def kept(self, entry: Entry) -> None:
        """
        A durable event as its readers get it: the newest page kept takes
        it, so that its readers share it.
        """
        self._pages.written(entry)

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
        self.wake()
        self._readBackIfFailed()
        sent = answer if isinstance(answer, dict) else sentAnswer(answer)
        first = self.taken
        events = [self._event(eventType, data, first + n)
                  for n, (eventType, data) in enumerate(effects, 1)]
        if requestId is None:
            return raiseAtOnce(self._write(None, events, after).addCallbacks(
                lambda _: sent, _refusal))
        record = requestRecord(
            kind, caller, requestId, raw, sent, self.clock.seconds(),
            cursor=first, effects=list(effects), command=command,
        )
        written = self._write(record, events, after)
        return raiseAtOnce(self._remembering(written, kind, requestId, record, sent))

    def _readBackIfFailed(self) -> None:
        """
        An earlier write (the body's news, say) failed and the session could
        not be read back then: read it back before taking more.

        @raise VehicleError: C{storage_unavailable}: it cannot be read.
        """
        if self.failed:
            try:
                self.reload()
            except OSError as e:
                raise storageError(e) from e

    def _remembering(
        self, written: Deferred[None], kind: RecordKind, requestId: str, record: RequestRecord,
        sent: JSONObject,
    ) -> Deferred[JSONObject]:
        """
        A request's step on its way to disk: a retry waits for it meanwhile
        (L{answering}); once durable the request is remembered (a retry
        replays it) and its answer sent.
        """
        self._answering.begin(requestId)

        def durable(_: None) -> JSONObject:
            self.requests[requestId] = remembered(record.fingerprint or "", sent)
            if kind == "branch":
                self.branches = self.branches | {requestId}
            self._answering.settled(requestId)
            return sent

        def refused(failure: Failure) -> Failure:
            self._answering.settled(requestId)
            return _refusal(failure)

        return written.addCallbacks(durable, refused)

    def finish(self, eventType: str, data: JSONObject) -> Deferred[Event]:
        """
        The log's last event (a delete's): taken, then nothing more is;
        once durable the logs are closed.  Refused, the session is read
        back and takes lines again.

        @raise VehicleError: C{storage_unavailable} (see L{commit}).
        """
        self._refuseClosed()
        self.wake()
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
        return self._answering.waiter(requestId)

    def hold(self, requestId: str) -> None:
        """
        The request C{requestId} is under way before its step (a branch
        being published): a retry waits for it (L{answering}) until it is
        let go (L{letGo}) or its step is settled.
        """
        self._answering.begin(requestId)

    def letGo(self, requestId: str) -> None:
        """
        The request C{requestId} held (L{hold}) is done: who waits goes on.
        """
        self._answering.settled(requestId)

    def settle(self) -> Deferred[None]:
        """
        Fires once every line taken so far was written (or refused).
        """
        if self.writer is None or self._shut:
            return succeed(None)
        barrier = self.writer.write(self._chain, ())
        return barrier.addErrback(lambda _: None)

    def durableEvent(self, seq: int) -> Deferred[Event | None]:
        """
        The event C{seq}, read from the log once every line taken so far
        was written; L{None} if it was refused (the session was read back
        without it) or the log cannot be read (said in the log).
        """

        def read(_: None) -> Event | None:
            if seq > self.cursor:
                return None
            try:
                events, _more = self.eventsAfter(seq - 1, 1)
            except (OSError, ValueError) as e:
                self._log.error("Session {sessionId}: its log could not be read ({error})",
                                sessionId=self.sessionId, error=str(e))
                return None
            return events[0] if events else None

        return self.settle().addCallback(read)

    def appendRecord(self, record: RequestRecord) -> None:
        """
        Append a request's record as it is (a new session's first, written
        before its folder is published: synced by L{seal}).
        """
        self.wake()
        assert self._records is not None  # awake
        self._records.append(toObject(record), sync=not self.aside)

    def seal(self) -> None:
        """
        Sync both logs of a folder built aside (its lines were written in
        place, unsynced): the folder may then be published.

        @raise OSError: a sync failed.
        """
        assert self._events is not None and self._records is not None  # awake
        self._events.sync()
        self._records.sync()

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
        assert self._events is not None and self._records is not None  # awake
        lines = [Line(self._records, self._records.line(toObject(record)), 0)] if record else []
        lines += [Line(self._events, self._events.line(toObject(e)), 1) for e in events]
        if self.writer is None:
            writeAtOnce(lines, sync=not self.aside)
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
            self._noted(event)
            if self.owner is not None:
                self.owner.told(event)

    def _noted(self, event: Event) -> None:
        """
        A durable event was written: what the journal knows of the log
        without reading it follows.
        """
        self.cursor = event.seq or self.cursor
        self.lastTimestamp, self._lastAt = event.timestamp, parseTimestamp(event.timestamp)
        self.deletedAs = deletedAs(event)
        self._runs = max(self._runs, runNumber(event))

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
                sessionId=self.sessionId, error=str(failure.value) or repr(failure.value),
            )
            try:
                self.reload()
            except Exception as again:  # noqa: BLE001 - reported, the host serves on
                self._log.error(
                    "Session {sessionId} could not be read back: {error}",
                    sessionId=self.sessionId, error=str(again),
                )
        return failure

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
        self._file.moved(logsOf(directory)[0])
        self._events, self._records = events, records
        self._chain = Chain()
        self.writer = writer
        self.aside = False
        self.closed = self._shut = False

    def moved(self, directory: Path) -> None:
        """
        The folder now lives at C{directory} (the trash): reads follow it.
        """
        self.directory = directory
        self._file.moved(logsOf(directory)[0])

    def wake(self) -> None:
        """
        Open the logs and read them back (as at start) when dormant; an
        awake or closed journal stays as it is.

        @raise OSError: a log cannot be read.
        @raise ValueError: a log is damaged.
        """
        if self.awake or self.closed:
            return
        self.wokeAt = self.clock.seconds()
        events, eventRecords, records, requestRecords = openLogs(self.directory)
        self._events, self._records = events, records
        self._chain = Chain()
        try:
            self.restore(eventRecords, requestRecords)
        except BaseException:
            self._closeLogs()
            raise
        if self.owner is not None:
            self.owner.woke()

    def sleep(self) -> bool:
        """
        Close the logs and forget what the logs say again when it wakes
        (its requests, the pages of events kept): the session keeps what
        its digest says.  Not while anything taken is on its way to disk.

        @return: whether it is dormant now.
        """
        if not self.awake:
            return True
        if self.busy:
            return False
        self._closeLogs()
        self.requests = {}
        self._pages.forget()
        if self.owner is not None:
            self.owner.asleep()
        return True

    @property
    def failed(self) -> bool:
        """
        Did a write to either log fail (the session is read back before the
        next)?
        """
        return any(log is not None and log.failed for log in (self._events, self._records))

    def _closeLogs(self) -> None:
        """
        Close the logs: at once when nothing of theirs is on its way
        through a writer, else once the writer has written what was taken.
        """
        busy = self.busy
        logs = [log for log in (self._events, self._records) if log is not None]
        self._events = self._records = None
        if self.writer is None or not busy:
            # Nothing of theirs is on its way through the writer: closed
            # here and now (a start reading back thousands of sessions holds
            # no descriptor until the writer's thread runs).
            for log in logs:
                log.close()
        elif logs:
            self.writer.close(*logs)

    def reload(self) -> None:
        """
        Forget the in-memory state and read it back from the logs on disk
        (repairing a torn tail), as a restart would.
        """
        for log in (self._events, self._records):
            if log is not None:
                log.close()
        self._events = self._records = None
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
            assert self._events is not None  # awake
            self._events.append(toObject(event))
            events.append(event)
            self._log.info(
                "Session {sessionId}: finished {eventType} of request {requestId} "
                "(the host was cut after its record)",
                sessionId=self.sessionId, eventType=event.type, requestId=record.requestId,
            )
        derived = derive(events, requests, self.baseTitle)
        self.requests = derived.requests
        self.cursor, self.deletedAs, self._runs = derived.cursor, derived.deletedAs, derived.runs
        self.lastTimestamp = derived.lastAt
        self._lastAt = None if derived.lastAt is None else parseTimestamp(derived.lastAt)
        self.branches = derived.branches
        self._file = EventFile(logsOf(self.directory)[0])
        self._pages = self._pages.reading(self._file)
        if self.owner is not None:
            self.owner.restored(derived)

    def close(self) -> None:
        """
        Take nothing more; close the logs once what was taken is written.
        """
        self.closed = self._shut = True
        self._closeLogs()


def _refusal(failure: Failure) -> Failure:
    """
    A step the disk refused, as its request's refusal: C{storage_unavailable}.
    """
    error = failure.value
    if isinstance(error, OSError):
        raise storageError(error) from error
    return failure
