# -*- test-case-name: tests.unit.test_web,tests.unit.test_crash,tests.unit.test_session_parts -*-
"""
One conversation, its own owner: its meta and title, its verbs (claim,
release, rename, a command, a chime, a branch remembered), and its parts,
which are its alone: the journal (L{_journal}: the two logs and the one
durable step of a request), the lease (L{_lease}), the command state
machine (L{_command}), the room (L{_room}) and the watchers
(L{_watchers}).

It knows nothing of HTTP or of pi.  The host's request rules (trust,
idempotency, which session) stand above it and call its verbs with a
L{Caller} and a parsed request; the body's conductor (L{IConductor}) is
handed the commands it accepts and asks it to move them on.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import ClassVar, Literal, Protocol

from attrs import define, field
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure

from vehicle.errors import VehicleError
from vehicle.protocol import (
    JSON,
    Answer,
    BodyState,
    ChimeRequest,
    ClaimRequest,
    Command,
    CommandAccepted,
    CommandCancelled,
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
    toObject,
)
from vehicle.session._chimes import Chimes
from vehicle.session._command import CommandBook, adoptedPreview, commandOf
from vehicle.session._interfaces import IConductor, RunSettled
from vehicle.session._journal import Journal
from vehicle.session._lease import LeaseKeeper
from vehicle.session._restore import Derived
from vehicle.session._room import Room
from vehicle.session._values import Caller, Lease, SessionMeta, isoTimestamp
from vehicle.session._watchers import Feed, Watchers
from vehicle.store import After, GroupWriter, writeJsonAtomic


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


class Nobody:
    """
    Followers of a session nobody follows (yet).
    """

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
    _room: Room = field(factory=Room)
    _leases: LeaseKeeper = field(init=False)
    _book: CommandBook = field(init=False)
    _chimes: Chimes = field(init=False)
    _watchers: Watchers = field(init=False)
    #: Its events, for those who read or watch them.
    feed: Feed = field(init=False)

    @_leases.default
    def _newLeaseKeeper(self) -> LeaseKeeper:
        return LeaseKeeper(clock=self.clock, emit=self.emit)

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

    @feed.default
    def _newFeed(self) -> Feed:
        return Feed(log=self._journal, watchers=self._watchers, clock=self.clock)

    def __attrs_post_init__(self) -> None:
        self._journal.owner = self

    @classmethod
    def open(
        cls, meta: SessionMeta, directory: Path, clock: IReactorTime, title: str | None,
        writer: GroupWriter | None = None,
    ) -> tuple[Session, list[Event], list[RequestRecord]]:
        """
        A session over its folder's logs (made when missing), with the
        records read back from them (for L{restore}); C{title} is what
        C{meta.json} holds; C{writer} writes a served session's lines
        (none while its folder is built aside).
        """
        journal, events, requests = Journal.open(meta.sessionId, directory, clock, title, writer)
        return cls(meta=meta, clock=clock, title=title, journal=journal), events, requests

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
    def cursor(self) -> int:
        return self.feed.cursor

    @property
    def updatedAt(self) -> float:
        at = self._journal.lastAt()
        return self.meta.createdSeconds if at is None else at

    @property
    def roomPolicy(self) -> str:
        return self._room.policy

    def commands(self) -> list[Command]:
        """
        Every command of the session, in the order they were accepted.
        """
        return list(self._book.commands.values())

    def findCommand(self, commandId: str) -> Command | None:
        return self._book.get(commandId)

    def openCommands(self) -> list[Command]:
        return self._book.open()

    def waitingChimes(self) -> list[HeldChime]:
        return self._room.waiting()

    def knowsRequest(self, requestId: str) -> bool:
        return requestId in self._journal.requests

    def answering(self, requestId: str) -> Deferred[None] | None:
        """
        While the request C{requestId} is being made durable, what fires
        once it is (or was refused): a retry waits for it, then replays.
        """
        return self._journal.answering(requestId)

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
        lease = self.currentLease()
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
            lease=lease.info() if lease else None,
            roomPolicy=self._room.policy,
        )

    def durableState(self) -> dict[str, object]:
        """
        Everything about the session its logs say, by name: what a session
        read back from disk must agree with (the crash tests compare them).
        """
        lease = self._leases.lease
        return {
            "title": self.title,
            "preview": self.preview,
            "roomPolicy": self._room.policy,
            "lease": lease,
            "commands": dict(self._book.commands),
            "chimes": dict(self._room.chimes),
            "requests": dict(self._journal.requests),
            "history": list(self._journal.history),
        }

    # -- events -----------------------------------------------------------------

    def emit(self, eventType: str, data: JSONObject | None = None) -> Event:
        """
        Append a durable event (L{Journal.emit}); the lease and the
        watchers follow it (L{told}).
        """
        return self._journal.emit(eventType, data)

    def told(self, event: Event) -> None:
        self._leases.observe(event)
        self._watchers.publish(event)

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
        person's with C{takeover}.
        """
        self.meta.checkDriver(caller)
        ttlMs = request.ttlMs if request.ttlMs is not None else defaultTtlMs
        claimed, effects = self._leases.claimEffects(caller, ttlMs, request.takeover)
        answer = Answer(type="driver.claimed", value=DriverClaimed(
            lease=claimed.lease, tookOverFrom=claimed.tookOverFrom,
            session=self.summary(ahead=len(effects)),
        ))
        return self._commit("claim", caller, request.requestId, request.raw, answer, effects)

    def takeLease(self, caller: Caller, ttlMs: int) -> None:
        """
        Take the lease and say so at once, remembering no request (a new
        session's creator: its creation is remembered by its maker).
        """
        _, effects = self._leases.claimEffects(caller, ttlMs, takeover=False)
        for eventType, data in effects:
            self.emit(eventType, data)

    def release(self, caller: Caller, requestId: str, raw: JSONObject) -> Deferred[JSONObject]:
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
        self.title = normalizeTitle(request.title)
        answer = Answer(type="session.renamed", value=SessionRenamed(session=self.summary(1)))
        sent = self._commit(
            "rename", caller, request.requestId, request.raw, answer,
            [("session.renamed", {"title": self.title})], after=self._metaRewrite(),
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
        kind = request.type
        if kind.leased:
            self.meta.checkDriver(caller)
            self._leases.require(caller)
        if kind == CommandType.cancel:
            return self._cancel(caller, request)
        if kind == CommandType.setRoomPolicy:
            return self._chimes.setPolicy(caller, request)
        if kind in (CommandType.acceptChime, CommandType.rejectChime):
            return self._chimes.resolve(caller, request)
        command = commandOf(request, caller.holder(), self._book.now())
        return self._book.accept(
            command, Answer(type="command.accepted", value=CommandAccepted(command=command)),
            caller=caller, requestId=request.requestId, raw=request.raw,
        )

    def _cancel(self, caller: Caller, request: CommandRequest) -> Deferred[JSONObject]:
        targetId = request.targetCommandId or ""
        target = self._book.get(targetId)
        if (
            target is None
            or target.status not in (CommandStatus.accepted, CommandStatus.queued)
            or target.text is None
        ):
            raise VehicleError(
                "not_cancellable",
                f"command {targetId!r} is not waiting in the queue",
                {"targetCommandId": targetId,
                 "status": target.status.value if target else None},
            )
        command = commandOf(request, caller.holder(), self._book.now())
        sent = self._book.accept(
            command,
            Answer(type="command.cancelled",
                   value=CommandCancelled(command=command, cancelled=targetId)),
            caller=caller, requestId=request.requestId, raw=request.raw,
        )
        if self.conductor is None:
            # Nothing was delivered anywhere: taking it out is bookkeeping.
            self.move(targetId, CommandStatus.cancelled, reason="cancelled")
            self.move(command.commandId, CommandStatus.completed)
        return sent

    # -- chimes -------------------------------------------------------------------

    def chime(
        self, caller: Caller, request: ChimeRequest, immediate: bool = True
    ) -> Deferred[JSONObject]:
        """
        A collaborator's attributed message, as the room's policy says
        (L{Chimes.chime}).
        """
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
        self._book.move(
            commandId, status, disposition=disposition, error=error, code=code, reason=reason
        )

    def requeue(self, commandId: str) -> None:
        self._book.requeue(commandId)

    def releaseLeaseOf(self, holder: Holder, reason: str) -> None:
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

        def tell(_: None) -> None:
            history = self._journal.history
            if seq <= len(history) and history[seq - 1].type == "run.settled":
                self.followers.settled(self, run)

        self._journal.settle().addCallback(tell)

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

    def forgetting(self) -> None:
        self._leases.drop()

    def appendRecord(self, record: RequestRecord) -> None:
        """
        The request that made this session, written in its folder before
        it is published.
        """
        self._journal.appendRecord(record)

    def writeMeta(self) -> None:
        """
        Rewrite C{meta.json} whole (atomically): the fixed meta and the title.
        """
        self._metaRewrite()[1]()

    def _metaRewrite(self) -> After:
        """
        C{meta.json} as it is now, to be written whole (atomically) by
        whoever runs it: the key is its path.
        """
        path = os.path.join(self.directory, "meta.json")
        meta, title = self.meta, self.title
        # Its content is made by whoever writes it (frozen values: the
        # writer's thread may), not on every rename.
        return path, lambda: writeJsonAtomic(Path(path), {**toObject(meta), "title": title})

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
        self._leases.stop()
        if self._journal.writer is not None:
            # Its folder is about to move: a title not yet rewritten is in the log.
            self._journal.writer.forgetLater(self._metaRewrite()[0])
        written = self._journal.finish(
            "session.deleted", {"trashedAs": trashedAs, "by": toObject(caller.holder())},
        )
        self.deleted = True

        def deleted(event: Event) -> Event:
            self._leases.cancelTimer()
            return event

        def refused(failure: Failure) -> Failure:
            self.deleted = False
            return failure

        return written.addCallbacks(deleted, refused)

    def trashed(self, trashDir: Path) -> None:
        """
        The directory now lives in the trash.
        """
        self._journal.directory = trashDir
