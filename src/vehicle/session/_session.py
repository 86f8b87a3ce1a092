# -*- test-case-name: tests.unit.test_web,tests.unit.test_crash,tests.unit.test_session_parts -*-
"""
One conversation, its own owner: its meta and title, its verbs (claim,
release, rename, a command, a chime, a branch remembered), and its parts,
which are its alone: the journal (L{_journal}: the two logs and the one
durable step of a request), the lease (L{_lease}), the command state
machine (L{_command}), the room (L{_room}), the watchers (L{_watchers}),
its dormancy (L{_dormancy}) and its C{meta.json} (L{_metafile}).

A session is awake or dormant: dormant, it keeps only what its digest says
(L{_digest}: the summary the list shows, the lease) and holds no file open;
whatever needs more (a verb, its commands, a replay) wakes it first, and its
logs are read back as at start.  L{Session.sleep} makes it dormant again
once nothing is under way in it (L{Dormancy}: when it may, and its digest).

It knows nothing of HTTP or of pi.  The host's request rules (trust,
idempotency, which session) stand above it and call its verbs with a
L{Caller} and a parsed request; the body's conductor (L{IConductor}) is
handed the commands it accepts and asks it to move them on.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, ClassVar, Literal, Protocol

from attrs import define, field
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure

from vehicle.protocol import (
    JSON,
    Answer,
    BodyState,
    ChimeRequest,
    ClaimRequest,
    Command,
    CommandAccepted,
    CommandRequest,
    CommandStatus,
    CommandType,
    Disposition,
    DriverClaimed,
    DriverReleased,
    Effects,
    Event,
    HeldChime,
    Holder,
    JSONObject,
    RecordKind,
    RenameRequest,
    RequestRecord,
    SessionRenamed,
    SessionSummary,
    toJSON,
    toObject,
)
from vehicle.session._chimes import Chimes
from vehicle.session._command import CommandBook, adoptedPreview, commandOf
from vehicle.session._digest import Digest, Origin
from vehicle.session._dormancy import Dormancy
from vehicle.session._eventlog import Entry
from vehicle.session._interfaces import IConductor, RunSettled
from vehicle.session._journal import Journal
from vehicle.session._lease import LeaseKeeper
from vehicle.session._metafile import MetaFile
from vehicle.session._requests import fingerprint
from vehicle.session._restore import Derived
from vehicle.session._room import Room
from vehicle.session._values import Caller, Lease, SessionMeta, isoTimestamp
from vehicle.session._watchers import Feed, Watchers
from vehicle.store import After, GroupWriter


def originOf(record: RequestRecord, graphId: str) -> Origin | None:
    """
    The request that made a session, in brief (its digest keeps it): a
    create's fingerprint is on the route its replay checks.
    """
    if record.requestId is None or record.kind not in ("create", "branched"):
        return None
    return Origin(
        kind=record.kind, principal=record.principal, requestId=record.requestId,
        fingerprint=fingerprint(record.body, f"create:{graphId}") if record.kind == "create" else None,
        source=record.source,
    )


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


class Followers(Protocol):
    """
    Who follows the session's life (its registry's observers): told by the
    session itself of what happens inside it.
    """

    def renamed(self, session: Session) -> None: ...

    def settled(self, session: Session, run: RunSettled) -> None: ...


class Home(Protocol):
    """
    Where a session is served from (its registry): told when it woke, and
    when, dormant, it has something to write (its lease lapsed).
    """

    def woke(self, session: Session) -> None: ...

    def due(self, session: Session) -> None: ...


class Nobody:
    """
    Followers of a session nobody follows (yet), and its home before it is
    served: a dormant session's lapsed lease is written when it next wakes.
    """

    def woke(self, session: Session) -> None:
        pass

    def due(self, session: Session) -> None:
        pass

    def renamed(self, session: Session) -> None:
        pass

    def settled(self, session: Session, run: RunSettled) -> None:
        pass


@define(eq=False)
class Session:
    """
    One conversation: its meta and title, its verbs, and the parts that
    hold the rest by their own rules, which nothing outside reaches.
    What the logs say when read back goes to each part (L{restored}); a
    durable event goes to the lease and the watchers (L{told}).
    """

    _log: ClassVar[Logger] = Logger()

    meta: SessionMeta
    clock: IReactorTime
    title: str | None
    _journal: Journal
    preview: str | None = None
    #: The preview is a branch's inherited one, until it says something.
    previewInherited: bool = False
    deleted: bool = False
    conductor: IConductor | None = None
    #: The newest delegation token from the owner's requests: memory only.
    delegatedToken: str | None = field(default=None, repr=False)
    #: Who follows this session's life (its registry's observers).
    followers: Followers = field(factory=Nobody)
    #: Where it is served from (its registry).
    home: Home = field(factory=Nobody, repr=False)
    #: The request that made it (a create, a branch), in brief.
    origin: Origin | None = None
    #: Its summary as the list last showed it: (what it showed, its bytes).
    _listed: tuple[tuple[object, ...], bytes] | None = field(default=None, repr=False)
    _room: Room = field(factory=Room)
    _leases: LeaseKeeper = field(init=False)
    _book: CommandBook = field(init=False)
    _chimes: Chimes = field(init=False)
    _watchers: Watchers = field(init=False)
    _dormancy: Dormancy = field(init=False)
    _metaFile: MetaFile = field(init=False)
    #: Its events, for those who read or watch them.
    feed: Feed = field(init=False)

    @_leases.default
    def _newLeaseKeeper(self) -> LeaseKeeper:
        return LeaseKeeper(clock=self.clock, emit=self.emit,
                           dormant=lambda: not self.awake, due=lambda: self.home.due(self))

    @_book.default
    def _newCommandBook(self) -> CommandBook:
        return CommandBook(clock=self.clock, emit=self.emit, commit=self._journal.commit,
                           accepted=self._accepted)

    @_chimes.default
    def _newChimes(self) -> Chimes:
        return Chimes(clock=self.clock, room=self._room, book=self._book,
                      commit=self._journal.commit)

    @_watchers.default
    def _newWatchers(self) -> Watchers:
        return Watchers(self.meta.sessionId)

    @_dormancy.default
    def _newDormancy(self) -> Dormancy:
        return Dormancy(session=self, journal=self._journal, book=self._book, room=self._room,
                        leases=self._leases)

    @_metaFile.default
    def _newMetaFile(self) -> MetaFile:
        return MetaFile(journal=self._journal)

    @feed.default
    def _newFeed(self) -> Feed:
        return Feed(log=self._journal, watchers=self._watchers, clock=self.clock)

    def __attrs_post_init__(self) -> None:
        self._journal.owner = self

    @classmethod
    def open(
        cls, meta: SessionMeta, directory: Path, clock: IReactorTime, title: str | None,
        writer: GroupWriter | None = None, aside: bool = False,
    ) -> tuple[Session, list[Event], list[RequestRecord]]:
        """
        A session over its folder's logs (made when missing), with the
        records read back from them (for L{restore}); C{title} is what
        C{meta.json} holds; C{writer} writes a served session's lines
        (none while its folder is built aside, or read back at start);
        C{aside}: its folder is built aside, its files synced only when it
        is sealed (L{seal}).
        """
        journal, events, requests = Journal.open(meta.sessionId, directory, clock, title, writer,
                                                 aside)
        return cls(meta=meta, clock=clock, title=title, journal=journal), events, requests

    @classmethod
    def dormant(
        cls, meta: SessionMeta, directory: Path, clock: IReactorTime, title: str | None,
        digest: Digest, writer: GroupWriter | None = None,
    ) -> Session:
        """
        A session as its digest says it (L{_digest}), dormant: its logs are
        read when it wakes (and written by C{writer}).  C{title} is what
        C{meta.json} holds.
        """
        journal = Journal.dormant(meta.sessionId, directory, clock, title, digest, writer)
        session = cls(
            meta=meta, clock=clock, title=digest.title, journal=journal, preview=digest.preview,
            previewInherited=digest.previewInherited, origin=digest.origin,
        )
        session._room.policy = digest.roomPolicy
        session._leases.lease = digest.lease
        session._leases.armTimer()
        session._dormancy.digested = (digest.events, digest.commands)
        return session

    # -- what it is -----------------------------------------------------------

    @property
    def sessionId(self) -> str:
        return self.meta.sessionId

    @property
    def directory(self) -> Path:
        return self._journal.directory

    @property
    def closed(self) -> bool:
        return self._journal.closed

    @property
    def awake(self) -> bool:
        """
        Are its logs open and its whole state in memory (L{wake})?
        """
        return self._journal.awake

    @property
    def deletedAs(self) -> str | None:
        """
        The trash name its newest event (C{session.deleted}) reserved, if
        it is deleted in its log.
        """
        return self._journal.deletedAs

    @property
    def cursor(self) -> int:
        return self.feed.cursor

    @property
    def updatedAt(self) -> float:
        at = self._journal.lastAt()
        return self.meta.createdSeconds if at is None else at

    @property
    def activeAt(self) -> float:
        """
        When something last happened in it: its newest event, or when it
        last woke.
        """
        return max(self.updatedAt, self._journal.wokeAt)

    @property
    def roomPolicy(self) -> str:
        return self._room.policy

    def commands(self) -> list[Command]:
        """
        Every command of the session, in the order they were accepted.
        """
        self.wake()
        return list(self._book.commands.values())

    def findCommand(self, commandId: str) -> Command | None:
        self.wake()
        return self._book.get(commandId)

    def openCommands(self) -> list[Command]:
        self.wake()
        return self._book.open()

    def waitingChimes(self) -> list[HeldChime]:
        self.wake()
        return self._room.waiting()

    def knowsRequest(self, requestId: str) -> bool:
        return self._journal.knows(requestId)

    def originRecord(self) -> RequestRecord | None:
        """
        The whole record of the request that made it (read from its log).

        @raise OSError: the log cannot be read.
        """
        return self._journal.originRecord()

    def answering(self, requestId: str) -> Deferred[None] | None:
        """
        While the request C{requestId} is being made durable, what fires
        once it is (or was refused): a retry waits for it, then replays.
        """
        return self._journal.answering(requestId)

    def holdRequest(self, requestId: str) -> None:
        """
        A request under way before its step (L{Journal.hold}).
        """
        self._journal.hold(requestId)

    def letRequestGo(self, requestId: str) -> None:
        """
        The request held is done (L{Journal.letGo}).
        """
        self._journal.letGo(requestId)

    def currentLease(self) -> Lease | None:
        """
        The lease, retired first if it has lapsed.
        """
        return self._leases.current()

    def running(self) -> bool:
        return self.conductor is not None and bool(self.conductor.running())

    def bodyState(self) -> BodyState:
        if self.conductor is None:
            return "dormant"
        return self.conductor.bodyState()

    def summary(self, ahead: int = 0) -> SessionSummary:
        """
        The session as the list and the answers show it.

        @param ahead: how many events the request being answered is about
            to write: its answer shows the session after them.
        """
        lease = self._leases.info()
        meta = self.meta
        return SessionSummary(
            sessionId=meta.sessionId,
            graphId=meta.graphId,
            principal=meta.principal,
            role=meta.role,
            profile=meta.profile,
            model=meta.model,
            createdAt=meta.createdAt,
            budget=meta.budget,
            parent=meta.parent,
            isolation=meta.isolation,
            graphs=meta.graphs,
            funding=meta.funding,
            title=self.title,
            preview=self.preview,
            access=meta.access,
            updatedAt=isoTimestamp(self.clock.seconds() if ahead else self.updatedAt),
            # An answer counts the events taken before its own (durable by
            # the time it is sent); a read, the durable ones.
            cursor=self._journal.taken + ahead if ahead else self.cursor,
            status="running" if self.running() else "idle",
            body=self.bodyState(),
            lease=lease,
            roomPolicy=self._room.policy,
        )

    def listed(self, encoder: Callable[[JSONObject], bytes]) -> bytes:
        """
        Its summary's bytes as the list shows it (L{summary}, made JSON and
        encoded by C{encoder}), made again only when something it shows
        changed: a list of many sessions encodes only those that did.
        """
        lease = self.currentLease()
        shows = (self.cursor, self.title, self.preview, self._room.policy, lease,
                 self.bodyState(), self.running(), self._journal.lastAt(), encoder)
        if self._listed is None or self._listed[0] != shows:
            self._listed = (shows, encoder(toJSON(self.summary())))
        return self._listed[1]

    def durableState(self) -> dict[str, object]:
        """
        Everything about the session its logs say, by name: what a session
        read back from disk must agree with (the crash tests compare them).
        """
        self.wake()
        lease = self._leases.lease
        return {
            "title": self.title,
            "preview": self.preview,
            "roomPolicy": self._room.policy,
            "lease": lease,
            "commands": dict(self._book.commands),
            "chimes": dict(self._room.chimes),
            "requests": dict(self._journal.requests),
            "history": self.feed.after(0, limit=max(1, self.cursor))[0],
        }

    # -- events -----------------------------------------------------------------

    def emit(self, eventType: str, data: JSONObject | None = None) -> Event:
        """
        Append a durable event (L{Journal.emit}); the lease and the
        watchers follow it (L{told}).
        """
        return self._journal.emit(eventType, data)

    def told(self, event: Event) -> None:
        entry = Entry(event)
        self._journal.kept(entry)
        self._leases.observe(event)
        self._watchers.publish(entry)

    # -- awake and dormant ------------------------------------------------------

    def wake(self) -> None:
        """
        Read its logs back (a dormant session) so that its whole state is
        in memory; an awake session stays as it is.

        @raise OSError: a log cannot be read.
        @raise ValueError: a log is damaged.
        """
        self._journal.wake()

    def canSleep(self) -> bool:
        """
        May it go dormant now (L{Dormancy.canSleep})?
        """
        return self._dormancy.canSleep()

    def digest(self) -> Digest:
        """
        What it is, in brief (L{Dormancy.digest}).

        @raise OSError: a log cannot be read.
        """
        return self._dormancy.digest()

    def sleep(self) -> bool:
        """
        Go dormant when it may (L{Dormancy.sleep}).

        @return: whether it sleeps now.
        """
        return self._dormancy.sleep()

    def refreshDigest(self) -> bool:
        """
        Bring its digest up to date, staying awake (L{Dormancy.refresh}).

        @return: whether its digest names its logs now.
        """
        return self._dormancy.refresh()

    def whenWritten(self) -> Deferred[None]:
        """
        Fires once every line taken so far is durable (or was refused).
        """
        return self._journal.settle()

    def asleep(self) -> None:
        self._book.commands = {}
        self._room.chimes = {}

    # -- the rules of a driver ----------------------------------------------------

    def requireLease(self, caller: Caller) -> None:
        """
        @raise VehicleError: C{lease_required} or C{lease_held}.
        """
        self._leases.require(caller)

    # -- the verbs --------------------------------------------------------------

    def replay(self, requestId: str, raw: JSON, route: str) -> JSONObject | None:
        """
        The answer already sent to this request, or L{None} when it is new.

        @raise VehicleError: C{request_id_conflict}.
        """
        return self._journal.replay(requestId, raw, route)

    def claim(
        self, caller: Caller, request: ClaimRequest, defaultTtlMs: int
    ) -> Deferred[JSONObject]:
        """
        Take the lease: free, ours already (renewed), or the same
        person's with C{takeover}.  Once it is durable the conductor hears
        of it (a command is likely soon).
        """
        self.wake()
        self.meta.checkDriver(caller)
        ttlMs = request.ttlMs if request.ttlMs is not None else defaultTtlMs
        claimed, effects = self._leases.claimEffects(caller, ttlMs, request.takeover)
        answer = Answer(type="driver.claimed", value=DriverClaimed(
            lease=claimed.lease, tookOverFrom=claimed.tookOverFrom,
            session=self.summary(ahead=len(effects)),
        ))
        return self._commit(
            "claim", caller, request.requestId, request.raw, answer, effects
        ).addCallback(self._claimed)

    def _claimed(self, sent: JSONObject) -> JSONObject:
        if self.conductor is not None:
            self.conductor.claimed()
        return sent

    def takeLease(self, caller: Caller, ttlMs: int) -> None:
        """
        Take the lease and say so at once, remembering no request (a new
        session's creator: its creation is remembered by its maker).
        """
        self.wake()
        _, effects = self._leases.claimEffects(caller, ttlMs, takeover=False)
        for eventType, data in effects:
            self.emit(eventType, data)

    def release(self, caller: Caller, requestId: str, raw: JSONObject) -> Deferred[JSONObject]:
        self.wake()
        effects = self._leases.releaseEffects(caller)
        answer = Answer(type="driver.released",
                        value=DriverReleased(session=self.summary(ahead=len(effects))))
        return self._commit("release", caller, requestId, raw, answer, effects)

    def rename(self, caller: Caller, request: RenameRequest) -> Deferred[JSONObject]:
        """
        Rename: the event is the step (with the request's record when it
        has a C{requestId}); C{meta.json} follows, rewritten by the writer
        after the step is durable (once a second at most, for all the
        renames of that second), and is put right at start should the
        host be cut between the two.
        """
        self.wake()
        self.title = normalizeTitle(request.title)
        answer = Answer(type="session.renamed", value=SessionRenamed(session=self.summary(1)))
        sent = self._commit(
            "rename", caller, request.requestId, request.raw, answer,
            [("session.renamed", {"title": self.title})],
            after=self._metaFile.rewrite(self.meta, self.title),
        )
        return sent.addCallback(self._renamed)

    def _renamed(self, sent: JSONObject) -> JSONObject:
        self.followers.renamed(self)
        return sent

    def command(self, caller: Caller, request: CommandRequest) -> Deferred[JSONObject]:
        """
        Accept one command for the body (a branch is the host's, not the
        session's): the driver's rights and the lease, then the verb.
        """
        self.wake()
        kind = request.type
        if kind.leased:
            self.meta.checkDriver(caller)
            self._leases.require(caller)
        if kind == CommandType.cancel:
            return self._book.cancel(caller, request, delivered=self.conductor is not None)
        if kind == CommandType.setRoomPolicy:
            return self._chimes.setPolicy(caller, request)
        if kind in (CommandType.acceptChime, CommandType.rejectChime):
            return self._chimes.resolve(caller, request)
        command = commandOf(request, caller.holder(), self._book.now())
        return self._book.accept(
            command, Answer(type="command.accepted", value=CommandAccepted(command=command)),
            caller=caller, requestId=request.requestId, raw=request.raw,
        )

    # -- chimes -------------------------------------------------------------------

    def chime(
        self, caller: Caller, request: ChimeRequest, immediate: bool = True
    ) -> Deferred[JSONObject]:
        """
        A collaborator's attributed message, as the room's policy says
        (L{Chimes.chime}).
        """
        self.wake()
        lease = self.currentLease()
        return self._chimes.chime(
            caller, request, lease.holder if lease is not None else None, immediate
        )

    # -- a branch, as its source remembers it -------------------------------------

    def rememberBranch(
        self, caller: Caller, requestId: str, raw: JSONObject, sent: JSONObject,
        kind: Literal["fork", "clone"], branchId: str, entryId: str | None,
    ) -> Deferred[JSONObject]:
        """
        A fork or clone of this session was published: the source
        remembers the request (a retry replays it) and says so
        (C{session.forked}, C{session.cloned}); fires once durable.
        """
        self.wake()
        return self._commit(
            "branch", caller, requestId, raw, sent,
            [(f"session.{'forked' if kind == 'fork' else 'cloned'}",
              {"branchId": branchId, "entryId": entryId, "by": toObject(caller.holder())})],
        )

    # -- what the body asks ---------------------------------------------------------

    def move(
        self,
        commandId: str,
        status: CommandStatus,
        *,
        disposition: Disposition | None = None,
        error: str | None = None,
        code: str | None = None,
        reason: str | None = None,
    ) -> None:
        """
        Move a command on (the book's rules): the body asks, the session
        moves it.
        """
        self.wake()
        self._book.move(
            commandId, status, disposition=disposition, error=error, code=code, reason=reason
        )

    def requeue(self, commandId: str) -> None:
        self.wake()
        self._book.requeue(commandId)

    def releaseLeaseOf(self, holder: Holder, reason: str) -> None:
        self.wake()
        self._leases.releaseOf(holder, reason)

    def settled(self, run: RunSettled) -> None:
        """
        A run of this session settled (the body says so): its followers
        hear of it (the mirror catches up, a credit run is debited) once
        its C{run.settled} event is durable, and not if it was refused.
        """
        seq = run.seq
        if seq is None:
            self.followers.settled(self, run)
            return

        def tell(event: Event | None) -> None:
            if event is not None and event.type == "run.settled":
                self.followers.settled(self, run)

        self._journal.durableEvent(seq).addCallback(tell)

    def _accepted(self, command: Command) -> None:
        """
        A command was accepted: its first words may become the session's
        preview, and the body is handed it, the very value the book holds.
        """
        self.preview, self.previewInherited = adoptedPreview(
            self.preview, self.previewInherited, command
        )
        if self.conductor is not None:
            self.conductor.commandAccepted(command)

    # -- its logs and its folder ------------------------------------------------------

    def _commit(
        self, kind: RecordKind, caller: Caller, requestId: str | None, raw: JSONObject,
        answer: Answer | JSONObject, effects: Effects, after: After | None = None,
    ) -> Deferred[JSONObject]:
        return self._journal.commit(kind, caller, requestId, raw, answer, effects, after=after)

    def restore(self, events: list[Event], requests: list[RequestRecord]) -> None:
        """
        Take up what the logs read back say (L{Journal.restore}).
        """
        self._journal.restore(events, requests)

    def woke(self) -> None:
        self.home.woke(self)

    def restored(self, derived: Derived) -> None:
        """
        What the logs say the session is, taken by each part.
        """
        self._book.commands = derived.commands
        self._room.policy, self._room.chimes = derived.room.policy, derived.room.chimes
        self.title = derived.title
        self.preview, self.previewInherited = derived.preview, derived.previewInherited
        self._leases.lease = derived.lease
        self._leases.armTimer()
        if derived.origin is not None:
            self.origin = originOf(derived.origin, self.meta.graphId)

    def forgetting(self) -> None:
        self._leases.drop()

    def appendRecord(self, record: RequestRecord) -> None:
        """
        The request that made this session, written in its folder before
        it is published.
        """
        self._journal.appendRecord(record)
        self.origin = originOf(record, self.meta.graphId)

    def writeMeta(self) -> None:
        """
        Rewrite C{meta.json} whole (atomically): the fixed meta and the title.
        """
        self._metaFile.write(self.meta, self.title)

    def seal(self) -> None:
        """
        Sync what was written in its folder built aside (its logs and
        C{meta.json}; the folder itself is synced as it is published).

        @raise OSError: a sync failed.
        """
        self._journal.seal()
        self._metaFile.seal()

    def reopenAt(self, directory: Path, writer: GroupWriter | None) -> None:
        """
        Go on at C{directory}, where the folder was published, its lines
        written by C{writer}.
        """
        self._journal.reopenAt(directory, writer)
        self._leases.armTimer()

    def close(self) -> None:
        self._leases.cancelTimer()
        self._journal.close()

    def markDeleted(self, trashedAs: str, caller: Caller) -> Deferred[Event]:
        """
        The delete's one durable step: C{session.deleted} (naming the trash
        directory already reserved) as the last event of the log.  From
        the moment it is taken the session is gone for new requests; once
        durable it wakes every watcher and the logs are closed; the maker
        then moves the directory (and start finishes that move should the
        host be cut before it ends).  Refused, the session is as before.

        @raise VehicleError: C{storage_unavailable} (see L{Journal.commit}).
        """
        self.wake()
        self._leases.stop()
        # Its folder is about to move: a title the writer has not yet
        # rewritten is rewritten here, before the move, once the delete is
        # durable (the trash's meta.json names the title).
        owed = self._metaFile.takeBack(self.meta, self.title)
        self._dormancy.withdraw()
        written = self._journal.finish(
            "session.deleted", {"trashedAs": trashedAs, "by": toObject(caller.holder())},
        )
        self.deleted = True

        def deleted(event: Event) -> Event:
            self._leases.cancelTimer()
            self._metaFile.settle(owed)
            return event

        def refused(failure: Failure) -> Failure:
            self.deleted = False
            self._metaFile.handBack(owed)
            return failure

        return written.addCallbacks(deleted, refused)

    def trashed(self, trashDir: Path) -> None:
        """
        The directory now lives in the trash.
        """
        self._journal.moved(trashDir)
