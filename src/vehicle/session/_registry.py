# -*- test-case-name: tests.unit.test_web,tests.unit.test_crash -*-
"""
The registry of sessions: the sessions this host serves, found for a
caller, listed, and rebuilt from disk at start.  How a session's folder is
made and published, or moved to the trash, is its maker's (L{Maker},
C{registry.maker}, which a branch uses directly); the registry serves what
the maker publishes.

At start each session is taken from its digest when the digest still names
its logs (L{vehicle.session._digest}), dormant; otherwise its logs are read
back whole, what a cut host left is finished, and it goes dormant with a
new digest.  Start reads one small file per session, however long their
logs.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any, ClassVar

from attrs import define, field
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.internet.task import LoopingCall
from twisted.logger import Logger

from vehicle.errors import VehicleError
from vehicle.protocol import JSON, CommandStatus, JSONObject, RequestRecord, SessionDeleted, fromJSON, objectOf, textOf
from vehicle.session._digest import Digest, Origin, currentDigest, writeDigest
from vehicle.session._lineage import finishBranch
from vehicle.session._maker import Maker, offThread
from vehicle.session._observers import Observers
from vehicle.session._requests import Answering, checkSame, storageError
from vehicle.session._session import Session
from vehicle.session._values import Caller, SessionMeta
from vehicle.store import DataDir, readJson


def metaOf(data: JSONObject) -> SessionMeta:
    """
    A session's C{meta.json} read back (one written before a budget or a
    profile was kept has the defaults).

    @raise ValueError: it is not a session's meta.
    """
    return fromJSON(
        {"profile": "chat", **data, "budget": {"maxTurns": 12, "maxCostUsd": 0.25,
                                               **objectOf(data.get("budget"))}},
        SessionMeta,
    )


NOT_FOUND_MESSAGE = "no such session"

#: How long a session stays awake with nothing happening in it (no event,
#: no wake) before it goes dormant; how often the registry looks.
DORMANT_AFTER_SECONDS = 600.0
SWEEP_SECONDS = 60.0
#: How many sessions may be awake at once (each holds its two logs open)
#: before the least recently woken that may sleep are made dormant.
MAX_AWAKE = 256


def notFound() -> VehicleError:
    """
    The one answer for a session that is missing or not the caller's: the
    same body either way.
    """
    return VehicleError("not_found", NOT_FOUND_MESSAGE)


def visibleTo(session: Session, caller: Caller) -> bool:
    """
    Only the owner reads, drives, renames or deletes a session, and a
    request bound to another graph never sees it.
    """
    if session.deleted or caller.principal != session.meta.principal:
        return False
    return caller.graphId is None or caller.graphId == session.meta.graphId


@define(eq=False)
class Registry:
    """
    Every live (not deleted) session of this host, by id.
    """

    _log: ClassVar[Logger] = Logger()

    dataDir: DataDir
    clock: IReactorTime
    defaultLeaseTtlMs: int = 30 * 60 * 1000
    sessions: dict[str, Session] = field(factory=dict)
    #: (principal, requestId) -> (fingerprint, the session it made) for
    #: POST /sessions; the answer is read from that session's log.
    _creations: dict[tuple[str, str], tuple[str, str]] = field(factory=dict)
    #: Who follows sessions' lives (the bodies, the mirror, public
    #: accounting), in the order they are to hear.
    observers: Observers = field(factory=Observers)
    maker: Maker = field(init=False)
    _sweeper: LoopingCall | None = field(default=None, init=False)
    #: The sessions awake, the most recently woken last.
    _awake: dict[str, Session] = field(factory=dict, init=False)
    #: Dormant sessions with something to write (a lapsed lease), in turn.
    _due: dict[str, Session] = field(factory=dict, init=False)
    _writing: IDelayedCall | None = field(default=None, init=False)

    #: The creates under way, by (principal, requestId), and who waits.
    _making: Answering = field(factory=Answering, init=False)

    @maker.default
    def _newMaker(self) -> Maker:
        return Maker(dataDir=self.dataDir, clock=self.clock, home=self,
                     defaultLeaseTtlMs=self.defaultLeaseTtlMs, runner=offThread(self.clock))

    # -- lookup -------------------------------------------------------------

    def find(self, caller: Caller, sessionId: str) -> Session:
        """
        The caller's session, or C{not_found}, the same for a missing
        session as for someone else's.
        """
        session = self.sessions.get(sessionId)
        if session is None or not visibleTo(session, caller):
            raise notFound()
        return session

    def findForChime(self, caller: Caller, sessionId: str) -> Session:
        """
        A session anyone authenticated on its graph may chime into.
        """
        session = self.sessions.get(sessionId)
        if session is None or session.deleted or caller.graphId != session.meta.graphId:
            raise notFound()
        return session

    def listFor(self, caller: Caller) -> list[Session]:
        """
        The caller's sessions on the bound graph (every graph unbound), most
        recently active first.
        """
        mine = [s for s in self.sessions.values() if visibleTo(s, caller)]
        mine.sort(key=lambda s: (s.updatedAt, s.cursor), reverse=True)
        return mine

    def replayCreation(self, caller: Caller, requestId: str, request: JSON) -> JSONObject | None:
        # Per principal; the graph is part of the request (a create through
        # another graph's path is another request).
        known = self._creations.get((caller.principal, requestId))
        if known is None:
            return None
        digest, sessionId = known
        checkSame(digest, requestId, request, f"create:{caller.graphId}")
        return self._createdFrame(sessionId)

    def making(self, principal: str, requestId: str, made: Deferred[Any]) -> None:
        """
        A create is under way until C{made} fires (L{Maker.create}): a
        retry of it waits (L{creationUnderWay}).
        """
        key = (principal, requestId)
        self._making.begin(key)

        def settled(result: object) -> object:
            self._making.settled(key)
            return result

        made.addBoth(settled)

    def creationUnderWay(self, caller: Caller, requestId: str) -> Deferred[None] | None:
        """
        Fires once the create C{requestId} of C{caller} under way has been
        served or refused; L{None} when none is under way.
        """
        return self._making.waiter((caller.principal, requestId))

    def _createdFrame(self, sessionId: str) -> JSONObject:
        """
        The answer a create sent, read from the record that made the
        session.

        @raise VehicleError: C{storage_unavailable} when the log cannot be
            read.
        """
        session = self.sessions.get(sessionId)
        try:
            record = session.originRecord() if session is not None else None
        except OSError as e:
            raise storageError(e) from e
        return record.frame if record is not None else {}

    def _remember(self, session: Session) -> None:
        """
        The create that made C{session}, so that its retry replays.
        """
        origin = session.origin
        if origin is not None and origin.kind == "create" and origin.fingerprint is not None:
            self._creations[(origin.principal, origin.requestId)] = (
                origin.fingerprint, session.sessionId,
            )

    def newSessionId(self) -> str:
        return "s" + uuid.uuid4().hex

    # -- serving --------------------------------------------------------------

    def served(self, session: Session, record: RequestRecord) -> None:
        """
        The maker published C{session} by C{record}: serve it (a create is
        remembered for its replay).
        """
        if record.kind == "create" and record.requestId and record.fingerprint:
            self._creations[(record.principal, record.requestId)] = (
                record.fingerprint, session.sessionId,
            )
        self._adopt(session)

    def _adopt(self, session: Session) -> None:
        self.sessions[session.sessionId] = session
        session.followers = self.observers
        session.home = self
        if session.awake:
            self.woke(session)
        self.observers.created(session)

    # -- awake and dormant ------------------------------------------------------

    def woke(self, session: Session) -> None:
        """
        A session woke: past L{MAX_AWAKE} awake, the least recently woken
        that may sleep go dormant.
        """
        self._awake.pop(session.sessionId, None)
        self._awake[session.sessionId] = session
        if len(self._awake) <= MAX_AWAKE:
            return
        for other in list(self._awake.values()):
            if len(self._awake) <= MAX_AWAKE:
                break
            if other is not session and (other.closed or not other.awake or other.sleep()):
                del self._awake[other.sessionId]

    def due(self, session: Session) -> None:
        """
        A dormant session has something to write (its lease lapsed): it is
        woken for it in its turn, one a turn of the reactor, and goes
        dormant again.
        """
        self._due[session.sessionId] = session
        if self._writing is None:
            self._writing = self.clock.callLater(0, self._writeDue)

    def _writeDue(self) -> None:
        self._writing = None
        if not self._due:
            return
        sessionId = next(iter(self._due))
        session = self._due.pop(sessionId)
        if self._due:
            self._writing = self.clock.callLater(0, self._writeDue)
        if self.sessions.get(sessionId) is not session or session.closed or session.awake:
            return
        try:
            session.wake()
            session.currentLease()
        except Exception as e:  # noqa: BLE001 - one session's disk never stops the others
            self._log.error("Session {sessionId}: its lapsed lease could not be written "
                            "({error}); it is at its next wake", sessionId=sessionId,
                            error=str(e))
        session.whenWritten().addCallback(lambda _: session.sleep())

    async def delete(self, caller: Caller, session: Session) -> SessionDeleted:
        """
        Move the session to the trash (L{Maker.delete}): its observers are
        asked for their part of the answer first, and told after.
        """
        parts = self.observers.deleting(session)
        trashedAs = await self.maker.delete(caller, session)
        self._forget(session)
        self.observers.deleted(session)
        return SessionDeleted(
            sessionId=session.sessionId, trashedAs=trashedAs,
            mirror=objectOf(parts["mirror"]) if "mirror" in parts else None,
        )

    def _forget(self, session: Session) -> None:
        self.sessions.pop(session.sessionId, None)
        origin = session.origin
        if origin is not None and origin.kind == "create":
            key = (origin.principal, origin.requestId)
            if self._creations.get(key, ("", ""))[1] == session.sessionId:
                del self._creations[key]

    # -- start --------------------------------------------------------------

    def loadAll(self) -> None:
        """
        Rebuild every session from disk: first sweep what a cut request
        left half made, then load each session (from its digest, dormant,
        when the digest still names its logs; else from its logs, finishing
        a request cut between its record and its events), finish a delete
        cut before its move and a branch cut before its source heard of it;
        commands left open by a host that died are reported C{interrupted}.
        Every session read back whole then goes dormant with a new digest.
        """
        self.dataDir.ensure()
        for line in self.dataDir.sweep():
            self._log.info("Start: {what}", what=line)
        reserved = set(self.dataDir.emptyTrashReservations())
        branches: list[tuple[Session, Origin]] = []
        for sessionId in self.dataDir.listSessionIds():
            try:
                session = self._load(sessionId)
            except Exception as e:  # noqa: BLE001 - one bad session never stops the host
                self._log.error(
                    "Session {sessionId} could not be loaded and is left on disk: {error}",
                    sessionId=sessionId,
                    error=str(e),
                )
                continue
            trashedAs = session.deletedAs
            if trashedAs is not None and trashedAs in reserved:
                # A delete cut before its move (its trash name still
                # reserved; a session an operator moved back from the trash
                # has none, and is served again).
                session.close()
                reserved.discard(trashedAs)
                self._finishCutDelete(session)
                continue
            self._adopt(session)
            if session.origin is not None and session.origin.kind == "branched":
                branches.append((session, session.origin))
        for line in self.dataDir.sweepTrash():
            self._log.info("Start: {what}", what=line)
        for branchSession, origin in branches:
            self._finishBranch(branchSession, origin)
        for session in list(self.sessions.values()):
            if session.awake:
                for command in session.openCommands():
                    session.move(command.commandId, CommandStatus.interrupted, reason="host_restarted")
        self.sleepAll()
        self._sweeper = LoopingCall(self.sleepIdle)
        self._sweeper.clock = self.clock
        self._sweeper.start(SWEEP_SECONDS, now=False)

    def sleepAll(self) -> int:
        """
        Let every session that may go dormant do so (L{Session.sleep}).

        @return: how many did.
        """
        return sum(1 for session in list(self.sessions.values()) if session.sleep())

    def sleepIdle(self) -> int:
        """
        Let the sessions nothing happened in for L{DORMANT_AFTER_SECONDS}
        go dormant; the others awake have their digest brought up to date
        (L{Session.refreshDigest}).

        @return: how many went dormant.
        """
        quiet = self.clock.seconds() - DORMANT_AFTER_SECONDS
        slept = 0
        for session in list(self._awake.values()):
            if not session.awake or session.closed:
                del self._awake[session.sessionId]
            elif session.activeAt <= quiet and session.sleep():
                del self._awake[session.sessionId]
                slept += 1
            else:
                session.refreshDigest()
        return slept

    def _finishBranch(self, branch: Session, origin: Origin) -> None:
        """
        A branch whose source may not have heard of it: tell the source,
        unless it knows the request already (L{finishBranch}).
        """
        source = self.sessions.get(origin.source or "")
        if source is None or source.knowsRequest(origin.requestId):
            return
        try:
            record = branch.originRecord()
        except OSError as e:
            self._log.error("Start: could not read how {branch} was made: {error}",
                            branch=branch.sessionId, error=str(e))
            return
        if record is not None:
            finishBranch(self.sessions, branch, record)

    def _finishCutDelete(self, session: Session) -> None:
        sessionId = session.sessionId
        try:
            # Its newest event: the session.deleted that reserved the name.
            (last,), _ = session.feed.after(session.cursor - 1, limit=1)
            self.maker.finishDelete(session, last)
        except Exception as e:  # noqa: BLE001
            self._log.error("Start: could not finish deleting {sessionId}: {error}",
                            sessionId=sessionId, error=str(e))
        else:
            self._log.info("Start: finished deleting {sessionId} (trash/{name})",
                           sessionId=sessionId, name=session.deletedAs)

    def _load(self, sessionId: str) -> Session:
        """
        One session read back from its folder: from its digest when that
        still names its logs, else from the logs themselves.
        """
        directory = self.dataDir.sessionDir(sessionId)
        metaJSON = objectOf(readJson(directory / "meta.json"))
        meta = metaOf(metaJSON)
        title = textOf(metaJSON.get("title"))
        found: Digest | Session | None = currentDigest(directory)
        if found is None or found.openCommands:
            found = self._derive(meta, directory, title)
        if isinstance(found, Session):
            session = found
        else:
            session = Session.dormant(
                meta, directory, self.clock, title, found, self.dataDir.writer
            )
        self._remember(session)
        if session.title != title and session.deletedAs is None:
            # meta.json follows the log: put right what a cut rename left.
            session.writeMeta()
            self._log.info("Start: rewrote the title in {sessionId}'s meta.json", sessionId=sessionId)
        return session

    def _derive(self, meta: SessionMeta, directory: Path, title: str | None) -> Digest | Session:
        """
        A session's digest derived from its logs read back whole (what a
        cut request owed finished first), written, and the logs closed
        again: the dormant session is then made from the digest, so what
        the read back needed is let go at once.  A session with commands
        open is kept as read back, awake (its commands are reported
        interrupted; it goes dormant after).
        """
        session = self._readBack(meta, directory, title)
        if not session.canSleep():
            return session
        try:
            digest = session.digest()
            writeDigest(directory, digest)
        except OSError as e:
            self._log.warn("Start: the digest of {sessionId} could not be written ({error}); "
                           "it is derived again at the next start",
                           sessionId=meta.sessionId, error=str(e))
            return session
        session.close()
        return digest

    def _readBack(self, meta: SessionMeta, directory: Path, title: str | None) -> Session:
        """
        A session read back whole from its logs (finishing what a cut
        request owed).
        """
        session, events, requestRecords = Session.open(
            meta, directory, self.clock, title, self.dataDir.writer
        )
        try:
            session.restore(events, requestRecords)
        except BaseException:
            session.close()
            raise
        return session

    def close(self) -> None:
        """
        The host stops: every session that may goes dormant (its digest
        written, so the next start reads it), then each is closed.
        """
        if self._sweeper is not None and self._sweeper.running:
            self._sweeper.stop()
        if self._writing is not None and self._writing.active():
            self._writing.cancel()
        self._writing = None
        self.sleepAll()
        for session in self.sessions.values():
            session.close()
