# -*- test-case-name: tests.unit.test_crash,tests.unit.test_web -*-
"""
How a session comes and goes on disk: its folder built aside and published
whole (a create, a branch), or abandoned unannounced; a delete reserved in
the trash, said in the log, then moved.  Each has one durable step, and
start finishes what a cut host left between the step and the move.  The
sessions that exist, and finding them, are the registry's (L{Registry}),
which L{Maker} tells of each session it publishes (L{Home.served}).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, ClassVar, Protocol

from attrs import define, evolve
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger

from vehicle.session._requests import requestRecord, storageError
from vehicle.session._session import Session, normalizeTitle
from vehicle.session._values import Caller, SessionMeta
from vehicle.store import DataDir, files, removeTree


class Home(Protocol):
    """
    Where a published session is served from (the registry).
    """

    def served(self, session: Session, record: dict[str, Any]) -> None:
        """
        C{session} is published by the request C{record}: serve it.
        """


@define(eq=False)
class Maker:
    """
    Makes sessions' folders (aside, then published) and moves them to the
    trash.
    """

    _log: ClassVar[Logger] = Logger()

    dataDir: DataDir
    clock: IReactorTime
    home: Home
    defaultLeaseTtlMs: int = 30 * 60 * 1000

    # -- making ---------------------------------------------------------------

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
            session, _, _ = Session.open(meta, building, self.clock, normalizeTitle(title))
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
            session.journal.appendRecord(record)
            session.close()
            self.dataDir.publish(session.sessionId)
        except BaseException as e:
            session.close()
            if final.is_dir():
                # Renamed into place; only the sync after it failed.  It
                # is served (start would load it), so a retry replays.
                self._served(session, final, record)
            else:
                self._abandonQuietly(session.sessionId)
            if isinstance(e, OSError):
                raise storageError(e) from e
            raise
        self._served(session, final, record)

    def _served(self, session: Session, directory: Path, record: dict[str, Any]) -> None:
        session.reopenAt(directory)
        self.home.served(session, record)

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

    # -- deleting -------------------------------------------------------------

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
            self.finishDelete(session, event)
        except OSError as e:
            self._log.error(
                "Session {sessionId} is deleted; moving it to the trash failed ({error}) "
                "and is finished at the next start",
                sessionId=session.sessionId, error=str(e),
            )
        session.trashed(self.dataDir.trashDir(trashedAs))
        return trashedAs

    def finishDelete(self, session: Session, event: dict[str, Any]) -> None:
        """
        Move a deleted session's folder to the trash name its
        C{session.deleted} event reserved, with a note on how to bring it
        back.
        """
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
