# -*- test-case-name: tests.test_session -*-
"""
The registry of sessions: creates them, finds them for a caller, lists them,
rebuilds every one from disk at start, and deletes them into the trash.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any, Callable, ClassVar

from attrs import define, evolve, field
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger

from vehicle.errors import VehicleError
from vehicle.session._observers import Observers
from vehicle.session._requests import (
    fingerprint,
    openLogs,
    replayed,
    requestRecord,
    storageError,
)
from vehicle.session._session import Session, branchEffects, normalizeTitle
from vehicle.session._values import Caller, SessionMeta
from vehicle.store import DataDir, files, readJson, removeTree


NOT_FOUND_MESSAGE = "no such session"


def notFound() -> VehicleError:
    """
    The one answer for a session that is missing or not the caller's: the
    same body either way.
    """
    return VehicleError("not_found", NOT_FOUND_MESSAGE)


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
    #: (principal, requestId) -> (fingerprint, frame) for POST /sessions.
    _creations: dict[tuple[str, str], tuple[str, dict[str, Any]]] = field(factory=dict)
    #: Called with each session as it is created or loaded (the host wires
    #: conductors here).
    onSession: list[Callable[[Session], None]] = field(factory=list)
    #: Who follows sessions' lives (the mirror, public accounting): told
    #: of each session once its body is wired (L{onSession}).
    observers: Observers = field(factory=Observers)

    # -- lookup -------------------------------------------------------------

    def find(self, caller: Caller, sessionId: str) -> Session:
        """
        The caller's session, or C{not_found}, the same for a missing
        session as for someone else's.
        """
        session = self.sessions.get(sessionId)
        if session is None or not session.visibleTo(caller):
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
        mine = [s for s in self.sessions.values() if s.visibleTo(caller)]
        mine.sort(key=lambda s: (s.updatedAt, s.cursor), reverse=True)
        return mine

    # -- creation -----------------------------------------------------------

    def replayCreation(self, caller: Caller, requestId: str, request: Any) -> dict[str, Any] | None:
        # Per principal; the graph is part of the request (a create through
        # another graph's path is another request).
        return replayed(
            self._creations.get((caller.principal, requestId)), requestId, request,
            f"create:{caller.graphId}",
        )

    def newSessionId(self) -> str:
        return "s" + uuid.uuid4().hex

    def prepare(
        self,
        caller: Caller,
        meta: SessionMeta,
        *,
        title: str | None,
        claim: bool,
        ttlMs: int | None = None,
        createdEvent: dict[str, Any] | None = None,
        makeFolders: Callable[[str, Path], dict[str, Any]] | None = None,
    ) -> Session:
        """
        Build a new session's folder aside (C{sessions/.new-<id>/}): its
        meta, its logs with C{session.created} and, unless C{claim} is
        false, the creating client's lease.  Nobody sees it until
        L{publish} renames it into place; a host cut before that leaves a
        folder start removes.
        """
        building = self.dataDir.buildingDir(meta.sessionId)
        layer = files()
        layer.mkdir(building, 0o700)
        try:
            layer.mkdir(building / "pi", 0o700)
            layer.mkdir(building / "work", 0o700)
            if makeFolders is not None:
                final = str(self.dataDir.sessionDir(meta.sessionId))
                folders = {
                    name: {**identity, "path": str(identity["path"]).replace(str(building), final, 1)}
                    for name, identity in makeFolders(meta.sessionId, building).items()
                }
                meta = evolve(meta, folders=folders)
            session = self._open(meta, building, normalizeTitle(title))
            try:
                session.writeMeta()
                session.emit(
                    "session.created",
                    {"by": caller.holder(), "profile": meta.profile, "model": meta.model,
                     **(createdEvent or {})},
                )
                if claim:
                    session.claim(caller, ttlMs or self.defaultLeaseTtlMs, takeover=False)
            except BaseException:
                session.close()
                raise
        except BaseException:
            self.abandon(meta.sessionId)
            raise
        return session

    def publish(
        self,
        session: Session,
        kind: str,
        caller: Caller,
        requestId: str,
        request: Any,
        frame: dict[str, Any],
        route: str,
        extra: dict[str, Any] | None = None,
    ) -> None:
        """
        The new session's one durable step: its record (the request that
        made it, with the answer) is written in the folder built aside,
        and the folder is renamed into place.  Then it is served.
        """
        record = requestRecord(
            kind, caller, requestId, request, frame, route, self.clock.seconds(), **(extra or {})
        )
        final = self.dataDir.sessionDir(session.sessionId)
        try:
            session.appendRecord(record)
            session.close()
            self.dataDir.publish(session.sessionId)
        except BaseException as e:
            session.close()
            if final.is_dir():
                # Renamed into place; only the sync after it failed.  It
                # is served (start would load it), so a retry replays.
                self._served(session, final, kind, caller, requestId, record)
            else:
                self._abandonQuietly(session.sessionId)
            if isinstance(e, OSError):
                raise storageError(e) from e
            raise
        self._served(session, final, kind, caller, requestId, record)

    def _served(
        self, session: Session, directory: Path, kind: str, caller: Caller, requestId: str,
        record: dict[str, Any],
    ) -> None:
        session.reopenAt(directory)
        if kind == "create":
            self._creations[(caller.principal, requestId)] = (record["fingerprint"], record["frame"])
        self._adopt(session)

    def abandon(self, sessionId: str) -> None:
        """
        Remove a folder built aside that will not be published (and an
        agent's workspace made for it): it was never announced.
        """
        building = self.dataDir.buildingDir(sessionId)
        if building.is_dir():
            removeTree(building)
        workspace = self.dataDir.workspaceDir(sessionId)
        if workspace.is_dir() and not self.dataDir.sessionDir(sessionId).exists():
            removeTree(workspace)

    def _abandonQuietly(self, sessionId: str) -> None:
        try:
            self.abandon(sessionId)
        except Exception as e:  # noqa: BLE001 - start removes it anyway
            self._log.warn("Could not remove the half-made session {sessionId}: {error}",
                           sessionId=sessionId, error=str(e))

    def create(
        self,
        caller: Caller,
        meta: SessionMeta,
        *,
        requestId: str | None = None,
        request: Any = None,
        frameFor: Callable[[Session], dict[str, Any]] | None = None,
        **options: Any,
    ) -> tuple[Session, dict[str, Any]]:
        """
        Make a session in one step (L{prepare} with C{options}, then
        L{publish} with the creating request's record); returns it and the
        answer's frame.
        """
        try:
            session = self.prepare(caller, meta, **options)
        except OSError as e:
            raise storageError(e) from e
        frame = frameFor(session) if frameFor is not None else {}
        self.publish(
            session, "create", caller, requestId or meta.sessionId, request or {}, frame,
            f"create:{caller.graphId}",
        )
        return session, frame

    def _adopt(self, session: Session) -> None:
        self.sessions[session.sessionId] = session
        session.whenDeleted(self._forget)
        session.observers = self.observers
        for hook in self.onSession:
            hook(session)
        self.observers.created(session)

    def _forget(self, session: Session) -> None:
        self.sessions.pop(session.sessionId, None)
        for key, (_, frame) in list(self._creations.items()):
            value = frame.get("value") or {}
            if (value.get("session") or {}).get("sessionId") == session.sessionId:
                del self._creations[key]

    # -- deletion -----------------------------------------------------------

    def delete(self, caller: Caller, session: Session) -> str:
        """
        Move the session's directory to the trash; returns its trash name.
        The caller has already refused a running session and disposed the body.

        A name is reserved in the trash; C{session.deleted} naming it is the
        one durable step; the move follows, and start finishes it should
        the host be cut in between.
        """
        try:
            trashedAs = self.dataDir.reserveTrash(session.sessionId)
        except OSError as e:
            raise storageError(e) from e
        event = session.markDeleted(trashedAs, caller)
        try:
            self._finishDelete(session, event)
        except OSError as e:
            self._log.error(
                "Session {sessionId} is deleted; moving it to the trash failed ({error}) "
                "and is finished at the next start",
                sessionId=session.sessionId, error=str(e),
            )
        session.trashed(self.dataDir.trashDir(trashedAs))
        return trashedAs

    def _finishDelete(self, session: Session, event: dict[str, Any]) -> None:
        data = event.get("data") or {}
        sessionId = session.sessionId
        self.dataDir.finishTrash(
            sessionId,
            data["trashedAs"],
            {
                "sessionId": sessionId,
                "graphId": session.meta.graphId,
                "deletedAt": event["timestamp"],
                "by": data.get("by"),
                "restore": (
                    "stop the service, move this directory back to "
                    f"sessions/{sessionId}/, start it, and restore the "
                    "mirrored document from the workspace's Trash"
                ),
            },
        )

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
        branches: list[tuple[Session, dict[str, Any]]] = []
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
            last = session._history[-1] if session._history else None
            if (
                last is not None
                and last["type"] == "session.deleted"
                and last["data"].get("trashedAs") in reserved
            ):
                # A delete cut before its move (its trash name still
                # reserved; a session an operator moved back from the trash
                # has none, and is served again).
                session.close()
                reserved.discard(last["data"]["trashedAs"])
                try:
                    self._finishDelete(session, last)
                except Exception as e:  # noqa: BLE001
                    self._log.error("Start: could not finish deleting {sessionId}: {error}",
                                    sessionId=sessionId, error=str(e))
                else:
                    self._log.info("Start: finished deleting {sessionId} (trash/{name})",
                                   sessionId=sessionId, name=last["data"].get("trashedAs"))
                continue
            self._adopt(session)
            branches += [(session, r) for r in records if r.get("kind") == "branched"]
        for line in self.dataDir.sweepTrash():
            self._log.info("Start: {what}", what=line)
        for branchSession, record in branches:
            self._finishBranch(branchSession, record)
        for session in list(self.sessions.values()):
            for command in session.openCommands():
                session.setStatus(command["commandId"], "interrupted", reason="host_restarted")

    def _finishBranch(self, branch: Session, record: dict[str, Any]) -> None:
        """
        A branch published by a host cut before its source's record: the
        source learns of it now (the request's record and
        C{session.forked}/C{session.cloned}), so a retry replays it.
        """
        source = self.sessions.get(record.get("source") or "")
        requestId = record.get("requestId")
        if source is None or not isinstance(requestId, str) or requestId in source._requests:
            return
        request = record.get("body") or {}
        caller = Caller(principal=record["principal"], clientId=record["clientId"], role="viewer")
        source.commit(
            "branch", caller, requestId, request, record["frame"],
            branchEffects(request.get("type", "fork"), branch.sessionId, request.get("entryId"), caller),
        )
        self._log.info("Start: told {source} of its branch {branch}",
                       source=source.sessionId, branch=branch.sessionId)

    def _open(self, meta: SessionMeta, directory: Path, title: str | None) -> Session:
        """
        A session over its directory's logs (made when missing).
        """
        events, _, commands, _ = openLogs(directory)
        return Session(
            meta=meta,
            directory=directory,
            clock=self.clock,
            title=title,
            events=events,
            commandsLog=commands,
            baseTitle=title,
        )

    def _load(self, sessionId: str) -> tuple[Session, list[dict[str, Any]]]:
        directory = self.dataDir.sessionDir(sessionId)
        metaJSON = readJson(directory / "meta.json")
        meta = SessionMeta.fromJSON(metaJSON)
        events, eventRecords, commands, requestRecords = openLogs(directory)
        session = Session(
            meta=meta,
            directory=directory,
            clock=self.clock,
            title=metaJSON.get("title"),
            events=events,
            commandsLog=commands,
            baseTitle=metaJSON.get("title"),
        )
        try:
            session.restore(eventRecords, requestRecords)
        except BaseException:
            session.close()
            raise
        for record in requestRecords:
            if record.get("kind") == "create":
                self._creations[(record["principal"], record["requestId"])] = (
                    fingerprint(record["body"], f"create:{meta.graphId}"),
                    record["frame"],
                )
        if session.title != metaJSON.get("title") and not (
            session._history and session._history[-1]["type"] == "session.deleted"
        ):
            # meta.json follows the log: put right what a cut rename left.
            session.writeMeta()
            self._log.info("Start: rewrote the title in {sessionId}'s meta.json", sessionId=sessionId)
        return session, requestRecords

    def close(self) -> None:
        for session in self.sessions.values():
            session.close()
