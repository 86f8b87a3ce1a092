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
from vehicle.session._session import Session, fingerprint, normalizeTitle, replayed
from vehicle.session._values import Caller, SessionMeta
from vehicle.store import DataDir, JsonlLog, readJson


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

    def replayCreation(self, caller: Caller, requestId: str, body: Any) -> dict[str, Any] | None:
        # Per principal; the graph is part of the request (a create through
        # another graph's path is another request).
        return replayed(
            self._creations.get((caller.principal, requestId)), requestId, body,
            f"create:{caller.graphId}",
        )

    def newSessionId(self) -> str:
        return "s" + uuid.uuid4().hex

    def create(
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
        Make a session's directory and logs, write C{session.created} and,
        unless C{claim} is false, give the creating client the lease.
        """
        directory = self.dataDir.sessionDir(meta.sessionId)
        directory.mkdir(mode=0o700)
        (directory / "pi").mkdir(mode=0o700)
        (directory / "work").mkdir(mode=0o700)
        if makeFolders is not None:
            meta = evolve(meta, folders=makeFolders(meta.sessionId, directory))
        session, _, _ = self._open(meta, directory, normalizeTitle(title))
        session.writeMeta()
        session.emit(
            "session.created",
            {"by": caller.holder(), "profile": meta.profile, "model": meta.model,
             **(createdEvent or {})},
        )
        if claim:
            session.claim(caller, ttlMs or self.defaultLeaseTtlMs, takeover=False)
        self._adopt(session)
        return session

    def rememberCreation(
        self, session: Session, caller: Caller, requestId: str, body: Any, frame: dict[str, Any]
    ) -> None:
        session.remember("create", caller, requestId, body, frame)
        self._creations[(caller.principal, requestId)] = (
            fingerprint(body, f"create:{caller.graphId}"),
            frame,
        )

    def _adopt(self, session: Session) -> None:
        self.sessions[session.sessionId] = session
        session.whenDeleted(self._forget)
        for hook in self.onSession:
            hook(session)

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
        """
        now = self.clock.seconds()
        from vehicle.session._values import isoTimestamp

        session.close()
        trashedAs = self.dataDir.moveToTrash(
            session.sessionId,
            {
                "sessionId": session.sessionId,
                "graphId": session.meta.graphId,
                "deletedAt": isoTimestamp(now),
                "by": caller.holder(),
                "restore": (
                    "stop the service, move this directory back to "
                    f"sessions/{session.sessionId}/, start it, and restore the "
                    "mirrored document from the workspace's Trash"
                ),
            },
        )
        session.markDeleted(self.dataDir.trashDir(trashedAs), trashedAs, caller)
        return trashedAs

    # -- start --------------------------------------------------------------

    def loadAll(self) -> None:
        """
        Rebuild every session from disk; commands left open by a host that
        died are reported C{interrupted}.
        """
        self.dataDir.ensure()
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
            self._adopt(session)
            for command in session.openCommands():
                session.setStatus(command["commandId"], "interrupted", reason="host_restarted")

    def _open(
        self, meta: SessionMeta, directory: Path, title: str | None
    ) -> tuple[Session, list[dict[str, Any]], list[dict[str, Any]]]:
        """
        A session over its directory's logs (made when missing), with the
        records already in them.
        """
        events, eventRecords = JsonlLog.open(directory / "events.jsonl", seqField="seq")
        commands, requestRecords = JsonlLog.open(directory / "commands.jsonl")
        session = Session(
            meta=meta,
            directory=directory,
            clock=self.clock,
            title=title,
            events=events,
            commandsLog=commands,
        )
        return session, eventRecords, requestRecords

    def _load(self, sessionId: str) -> Session:
        directory = self.dataDir.sessionDir(sessionId)
        metaJSON = readJson(directory / "meta.json")
        meta = SessionMeta.fromJSON(metaJSON)
        session, eventRecords, requestRecords = self._open(
            meta, directory, metaJSON.get("title")
        )
        for record in requestRecords:
            if record.get("kind") == "command":
                session.restoreCommand(record)
            if record.get("kind") == "create":
                self._creations[(record["principal"], record["requestId"])] = (
                    fingerprint(record["body"], f"create:{meta.graphId}"),
                    record["frame"],
                )
        session.rebuild(eventRecords, requestRecords)
        return session

    def close(self) -> None:
        for session in self.sessions.values():
            session.close()
