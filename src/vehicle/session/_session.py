# -*- test-case-name: tests.unit.test_web,tests.unit.test_crash,tests.unit.test_session_parts -*-
"""
The session aggregate: one conversation's meta and title, joined to its
parts: the journal (L{_journal}: the two logs, the one durable step of a
request and reading back after a refused write), the lease (L{_lease}), the
command state machine (L{_command}), the room (L{_room}: its policy and
chimes) and the watchers (L{_watchers}).

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

from vehicle.session._command import Command, CommandBook, Committer, adoptedPreview
from vehicle.session._journal import Journal
from vehicle.session._lease import LeaseKeeper
from vehicle.session._observers import Observers
from vehicle.session._restore import Derived
from vehicle.session._room import Room
from vehicle.session._watchers import Listener, Watchers
from vehicle.session._values import Caller, Lease, SessionMeta, isoTimestamp
from vehicle.store import writeJsonAtomic


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
    One conversation: its meta and title, joined to the parts that hold the
    rest by their own rules: the logs (L{Journal}), the lease
    (L{LeaseKeeper}), the commands (L{CommandBook}: only the session moves
    one, the body asks by L{setStatus}), the room (L{Room}), the watchers.
    What the logs say when read back goes to each part (L{restored}); a
    durable event goes to the lease and the watchers (L{told}).
    """

    _log: ClassVar[Logger] = Logger()

    meta: SessionMeta
    clock: IReactorTime
    title: str | None
    journal: Journal
    preview: str | None = None
    #: The preview is a branch's inherited one, until it says something.
    previewInherited: bool = False
    deleted: bool = False
    room: Room = field(factory=Room)
    conductor: IConductor | None = None
    #: The newest delegation token from the owner's requests: memory only.
    delegatedToken: str | None = field(default=None, repr=False)
    _onDeleted: list[Callable[["Session"], None]] = field(factory=list)
    #: Who follows this session's life (its registry's L{Observers}).
    observers: Observers = field(factory=Observers)
    leases: LeaseKeeper = field(init=False)
    book: CommandBook = field(init=False)
    watchers: Watchers = field(init=False)

    @leases.default
    def _newLeaseKeeper(self) -> LeaseKeeper:
        return LeaseKeeper(clock=self.clock, emit=self.emit)

    @book.default
    def _newCommandBook(self) -> CommandBook:
        return CommandBook(clock=self.clock, emit=self.emit, commit=self.journal.commit,
                           accepted=self.accepted)

    @watchers.default
    def _newWatchers(self) -> Watchers:
        return Watchers(self.meta.sessionId)

    def __attrs_post_init__(self) -> None:
        self.journal.owner = self

    @classmethod
    def open(
        cls, meta: SessionMeta, directory: Path, clock: IReactorTime, title: str | None
    ) -> tuple["Session", list[dict[str, Any]], list[dict[str, Any]]]:
        """
        A session over its folder's logs (made when missing), with the
        records read back from them (for L{Journal.restore}); C{title} is
        what C{meta.json} holds.
        """
        journal, events, requests = Journal.open(meta.sessionId, directory, clock, title)
        return cls(meta=meta, clock=clock, title=title, journal=journal), events, requests

    # -- identity and the parts' faces ------------------------------------

    @property
    def sessionId(self) -> str:
        return self.meta.sessionId

    @property
    def directory(self) -> Path:
        return self.journal.directory

    @property
    def closed(self) -> bool:
        return self.journal.closed

    @property
    def commands(self) -> dict[str, dict[str, Any]]:
        return self.book.records

    @property
    def chimes(self) -> dict[str, dict[str, Any]]:
        return self.room.chimes

    @property
    def roomPolicy(self) -> str:
        return self.room.policy

    @property
    def lease(self) -> Lease | None:
        # As it stands, without retiring a lapsed one (see currentLease).
        return self.leases.lease

    # What the crash tests compare between a live session and one read
    # back from disk.
    @property
    def _history(self) -> list[dict[str, Any]]:
        return self.journal.history

    @property
    def _requests(self) -> dict[str, tuple[str, dict[str, Any]]]:
        return self.journal.requests

    # -- events (the journal writes them, the watchers carry them) ---------

    @property
    def cursor(self) -> int:
        return self.journal.cursor

    @property
    def updatedAt(self) -> float:
        at = self.journal.lastAt()
        return self.meta.createdAt if at is None else at

    def emit(self, eventType: str, data: dict[str, Any] | None = None) -> dict[str, Any]:
        """
        Append a durable event (L{Journal.emit}); the lease and the
        watchers follow it (L{told}).
        """
        return self.journal.emit(eventType, data)

    def told(self, event: dict[str, Any]) -> None:
        self.leases.observe(event)
        self.watchers.publish(event)

    def broadcast(self, eventType: str, data: dict[str, Any]) -> None:
        """
        Send an ephemeral event (C{message.delta}) to live watchers only.
        """
        self.watchers.broadcast(eventType, data, isoTimestamp(self.clock.seconds()))

    def subscribe(self, listener: Listener) -> Callable[[], None]:
        return self.watchers.subscribe(listener)

    def eventsAfter(self, since: int, limit: int = WATCH_LIMIT) -> tuple[list[dict[str, Any]], bool]:
        return self.journal.eventsAfter(since, limit)

    def nextEvent(self) -> Deferred:
        return self.watchers.nextEvent()

    def runsSoFar(self) -> int:
        return self.journal.runsSoFar()

    # -- lease (the rules are L{LeaseKeeper}'s) ---------------------------

    def currentLease(self) -> Lease | None:
        return self.leases.current()

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

    # -- the durable step (the journal's) ---------------------------------

    def replay(self, requestId: str, request: Any, route: str) -> dict[str, Any] | None:
        return self.journal.replay(requestId, request, route)

    @property
    def commit(self) -> Committer:
        """The one durable step of an accepted request (L{Journal.commit})."""
        return self.journal.commit

    def reopenAt(self, directory: Path) -> None:
        """
        Go on at C{directory}, where the folder was published.
        """
        self.journal.reopenAt(directory)
        self.leases.armTimer()

    def forgetting(self) -> None:
        self.leases.drop()

    def restored(self, derived: Derived) -> None:
        """
        What the logs say the session is (L{Journal.restore}), taken by
        each part.
        """
        self.book.records = derived.commands
        self.room = Room(policy=derived.roomPolicy, chimes=derived.chimes)
        self.title = derived.title
        self.preview, self.previewInherited = derived.preview, derived.previewInherited
        self.leases.lease = derived.lease
        self.leases.armTimer()

    # -- meta -------------------------------------------------------------

    def writeMeta(self) -> None:
        """
        Rewrite C{meta.json} whole (atomically): the fixed meta and the title.
        """
        writeJsonAtomic(self.directory / "meta.json", {**self.meta.asJSON(), "title": self.title})

    # -- commands (the state machine is L{CommandBook}'s) -------------------

    def openCommands(self) -> list[dict[str, Any]]:
        return self.book.open()

    def running(self) -> bool:
        return self.conductor is not None and bool(self.conductor.running())

    def setStatus(self, commandId: str, status: str, **extra: Any) -> None:
        """
        Move a command on (L{CommandBook.setStatus}): the body asks, the
        session moves it.
        """
        self.book.setStatus(commandId, status, **extra)

    def requeue(self, commandId: str) -> None:
        self.book.requeue(commandId)

    def accepted(self, record: dict[str, Any], command: Command) -> None:
        """
        A command was accepted (L{CommandBook.accept}): its first words
        may become the session's preview, and the body is handed it (as
        the book made it, a typed value).
        """
        self.preview, self.previewInherited = adoptedPreview(
            self.preview, self.previewInherited, record
        )
        if self.conductor is not None:
            self.conductor.commandAccepted(command)

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

    # -- the end of a run, of the host, of the session ----------------------

    def settled(self, info: dict[str, Any]) -> None:
        """
        A run of this session settled (the body says so): its observers
        follow (the mirror catches up).
        """
        self.observers.settled(self, info)

    def close(self) -> None:
        self.leases.cancelTimer()
        self.journal.close()

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
        event: dict[str, Any] = self.journal.guarded(
            self.emit, "session.deleted", {"trashedAs": trashedAs, "by": caller.holder()}
        )
        self.close()
        self.deleted = True
        return event

    def trashed(self, trashDir: Path) -> None:
        """
        The directory now lives in the trash: tell whoever follows deletes.
        """
        self.journal.directory = trashDir
        for callback in self._onDeleted:
            callback(self)
        self.observers.deleted(self)
