# -*- test-case-name: tests.unit.test_web,tests.unit.test_crash -*-
"""
The registry of sessions: the sessions this host serves, found for a
caller, listed, and rebuilt from disk at start.  How a session's folder is
made and published, or moved to the trash, is its maker's (L{Maker},
C{registry.maker}, which a branch uses directly); the registry serves what
the maker publishes.
"""

from __future__ import annotations

import uuid
from typing import ClassVar

from attrs import define, field
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger

from vehicle.errors import VehicleError
from vehicle.protocol import JSON, CommandStatus, Event, JSONObject, RequestRecord, SessionDeleted, fromJSON, objectOf, textOf
from vehicle.session._lineage import finishBranch
from vehicle.session._maker import Maker
from vehicle.session._observers import Observers
from vehicle.session._requests import Remembered, fingerprint, replayed
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
    #: (principal, requestId) -> (fingerprint, answer) for POST /sessions.
    _creations: dict[tuple[str, str], Remembered] = field(factory=dict)
    #: Who follows sessions' lives (the bodies, the mirror, public
    #: accounting), in the order they are to hear.
    observers: Observers = field(factory=Observers)
    maker: Maker = field(init=False)

    @maker.default
    def _newMaker(self) -> Maker:
        return Maker(dataDir=self.dataDir, clock=self.clock, home=self,
                     defaultLeaseTtlMs=self.defaultLeaseTtlMs)

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
        return replayed(
            self._creations.get((caller.principal, requestId)), requestId, request,
            f"create:{caller.graphId}",
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
                record.fingerprint, record.frame
            )
        self._adopt(session)

    def _adopt(self, session: Session) -> None:
        self.sessions[session.sessionId] = session
        session.followers = self.observers
        self.observers.created(session)

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
        for key, (_, frame) in list(self._creations.items()):
            made = objectOf(objectOf(frame.get("value")).get("session"))
            if made.get("sessionId") == session.sessionId:
                del self._creations[key]

    # -- start --------------------------------------------------------------

    def loadAll(self) -> None:
        """
        Rebuild every session from disk: first sweep what a cut request
        left half made, then load each session (finishing a request cut
        between its record and its events, a delete cut before its move,
        a branch cut before its source heard of it); commands left open by
        a host that died are reported C{interrupted}.
        """
        self.dataDir.ensure()
        for line in self.dataDir.sweep():
            self._log.info("Start: {what}", what=line)
        reserved = set(self.dataDir.emptyTrashReservations())
        branches: list[tuple[Session, RequestRecord]] = []
        for sessionId in self.dataDir.listSessionIds():
            try:
                session, records = self._load(sessionId)
            except Exception as e:  # noqa: BLE001 - one bad session never stops the host
                self._log.error(
                    "Session {sessionId} could not be loaded and is left on disk: {error}",
                    sessionId=sessionId,
                    error=str(e),
                )
                continue
            last = session.feed.last()
            trashedAs = textOf(last.data.get("trashedAs")) if last is not None else None
            if last is not None and last.type == "session.deleted" and trashedAs in reserved:
                # A delete cut before its move (its trash name still
                # reserved; a session an operator moved back from the trash
                # has none, and is served again).
                session.close()
                reserved.discard(trashedAs)
                self._finishCutDelete(session, last)
                continue
            self._adopt(session)
            branches += [(session, r) for r in records if r.kind == "branched"]
        for line in self.dataDir.sweepTrash():
            self._log.info("Start: {what}", what=line)
        for branchSession, record in branches:
            finishBranch(self.sessions, branchSession, record)
        for session in list(self.sessions.values()):
            for command in session.openCommands():
                session.move(command.commandId, CommandStatus.interrupted, reason="host_restarted")

    def _finishCutDelete(self, session: Session, last: Event) -> None:
        sessionId = session.sessionId
        try:
            self.maker.finishDelete(session, last)
        except Exception as e:  # noqa: BLE001
            self._log.error("Start: could not finish deleting {sessionId}: {error}",
                            sessionId=sessionId, error=str(e))
        else:
            self._log.info("Start: finished deleting {sessionId} (trash/{name})",
                           sessionId=sessionId, name=last.data.get("trashedAs"))

    def _load(self, sessionId: str) -> tuple[Session, list[RequestRecord]]:
        """
        One session read back from its folder, with its request records.
        """
        directory = self.dataDir.sessionDir(sessionId)
        metaJSON = objectOf(readJson(directory / "meta.json"))
        meta = metaOf(metaJSON)
        title = textOf(metaJSON.get("title"))
        session, events, requestRecords = Session.open(
            meta, directory, self.clock, title, self.dataDir.writer
        )
        try:
            session.restore(events, requestRecords)
        except BaseException:
            session.close()
            raise
        for record in requestRecords:
            if record.kind == "create" and record.requestId is not None:
                self._creations[(record.principal, record.requestId)] = (
                    fingerprint(record.body, f"create:{meta.graphId}"), record.frame,
                )
        last = session.feed.last()
        if session.title != title and not (last is not None and last.type == "session.deleted"):
            # meta.json follows the log: put right what a cut rename left.
            session.writeMeta()
            self._log.info("Start: rewrote the title in {sessionId}'s meta.json", sessionId=sessionId)
        return session, requestRecords

    def close(self) -> None:
        for session in self.sessions.values():
            session.close()
