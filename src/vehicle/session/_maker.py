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
from typing import Any, Callable, ClassVar, NoReturn, Protocol, cast

from attrs import define, evolve
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorCore, IReactorThreads, IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure

from vehicle._threads import threadRunner
from vehicle.protocol import Answer, Event, JSONObject, RecordKind, RequestRecord, textOf, toObject
from vehicle.session._journal import sentAnswer
from vehicle.session._requests import requestRecord, storageError
from vehicle.session._session import Session, normalizeTitle
from vehicle.session._values import Caller, FolderRecord, SessionMeta
from vehicle.store import DataDir, files, removeTree, runAtOnce


#: (sessionId, the session's folder) -> an agent's folders as made there.
FolderMaker = Callable[[str, Path], dict[str, FolderRecord]]


def movedFolders(folders: dict[str, FolderRecord], building: Path, final: Path) -> dict[str, FolderRecord]:
    """
    Folders recorded in a session's folder built aside, as they will be
    once it is published (renamed into place).
    """
    return {
        name: evolve(record, path=record.path.replace(str(building), str(final), 1))
        for name, record in folders.items()
    }


class Home(Protocol):
    """
    Where a published session is served from (the registry).
    """

    def served(self, session: Session, record: RequestRecord) -> None:
        """
        C{session} is published by the request C{record}: serve it.
        """

    def making(self, principal: str, requestId: str, made: Deferred[Any]) -> None:
        """
        The create C{requestId} of C{principal} is under way until C{made}
        fires.
        """


#: Blocking file work, run somewhere: fires once it is done.
Runner = Callable[[Callable[[], None]], "Deferred[None]"]


def offThread(reactor: IReactorTime) -> Runner:
    """
    Run file work in C{reactor}'s thread pool (L{threadRunner}); with a
    reactor without threads (a test's memory reactor), at once, a
    C{BaseException} that is not an C{Exception} (a test's simulated kill)
    going on up as from work made in place (L{runAtOnce}, where
    L{threadRunner} would keep it in a failed L{Deferred}).
    """
    if IReactorThreads(reactor, None) is None:
        return runAtOnce
    return threadRunner(cast(IReactorCore, reactor))


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
    #: Where a new session's syncs and rename are made (L{offThread}).
    runner: Runner = runAtOnce

    # -- making ---------------------------------------------------------------

    def prepare(
        self,
        caller: Caller,
        meta: SessionMeta,
        *,
        title: str | None,
        claim: bool,
        ttlMs: int | None = None,
        createdEvent: JSONObject | None = None,
        makeFolders: FolderMaker | None = None,
    ) -> Session:
        """
        Build a new session's folder aside (C{sessions/.new-<id>/}): its
        meta, its logs with C{session.created} and, unless C{claim} is
        false, the creating client's lease, written unsynced.  Nobody sees
        it until L{publish} syncs and renames it into place; a host cut
        before that leaves a folder start removes.
        """
        building = self.dataDir.buildingDir(meta.sessionId)
        layer = files()
        layer.mkdir(building, 0o700)
        try:
            layer.mkdir(building / "pi", 0o700)
            layer.mkdir(building / "work", 0o700)
            folders = makeFolders(meta.sessionId, building) if makeFolders is not None else {}
            if folders:
                meta = evolve(meta, folders=movedFolders(
                    folders, building, self.dataDir.sessionDir(meta.sessionId),
                ))
            session, _, _ = Session.open(meta, building, self.clock, normalizeTitle(title),
                                         aside=True)
            try:
                session.writeMeta()
                session.emit(
                    "session.created",
                    {"by": toObject(caller.holder()), "profile": meta.profile,
                     "model": meta.model, **(createdEvent or {})},
                )
                if claim:
                    session.takeLease(caller, ttlMs or self.defaultLeaseTtlMs)
            except BaseException:
                session.close()
                raise
        except BaseException:
            self.abandon(meta.sessionId)
            raise
        return session

    def record(
        self,
        kind: RecordKind,
        caller: Caller,
        requestId: str,
        raw: JSONObject,
        sent: JSONObject,
        route: str,
        source: str | None = None,
    ) -> RequestRecord:
        """
        The record of the request that makes a new session (with its answer
        as sent): what L{publish} writes in its folder.
        """
        return requestRecord(
            kind, caller, requestId, raw, sent, self.clock.seconds(), route=route, source=source
        )

    def publish(self, session: Session, record: RequestRecord) -> Deferred[None]:
        """
        The new session's one durable step: C{record} is written in the
        folder built aside, the folder is sealed and renamed into place by
        L{runner} (off the reactor's thread); the session is served once
        they are done, whoever still waits.

        @return: fires once it is served; fails with C{storage_unavailable}
            (or what else stopped it) when it is not.
        @raise VehicleError: C{storage_unavailable}, at once, when its record
            could not be written.
        """
        final = self.dataDir.sessionDir(session.sessionId)
        try:
            session.appendRecord(record)
            sealed = self.runner(lambda: self._seal(session))
        except BaseException as e:
            self._unpublished(session, final, record, e)

        def published(_: object) -> None:
            session.close()
            self._served(session, final, record)

        def refused(failure: Failure) -> None:
            self._unpublished(session, final, record,
                              failure.value or RuntimeError("the folder was not published"))

        return sealed.addCallbacks(published, refused)

    def _seal(self, session: Session) -> None:
        """
        Nothing in the folder was synced as it was written (nobody reads
        it): each file now, the folder as it is renamed into place.
        """
        session.seal()
        self.dataDir.publish(session.sessionId)

    def _unpublished(
        self, session: Session, final: Path, record: RequestRecord, error: BaseException
    ) -> NoReturn:
        """
        Publishing C{session} failed with C{error}: served all the same
        when its folder was renamed into place (only a sync after it
        failed: start would load it, so a retry replays), else removed.

        @raise VehicleError: C{storage_unavailable}, for an C{OSError}.
        """
        session.close()
        if final.is_dir():
            self._served(session, final, record)
        else:
            self._abandonQuietly(session.sessionId)
        if isinstance(error, OSError):
            raise storageError(error) from error
        raise error

    def _served(self, session: Session, directory: Path, record: RequestRecord) -> None:
        # Published: from now on its lines go through the data dir's writer.
        session.reopenAt(directory, self.dataDir.writer)
        self.home.served(session, record)

    def create(
        self,
        caller: Caller,
        meta: SessionMeta,
        *,
        requestId: str,
        raw: JSONObject,
        answerFor: Callable[[Session], Answer],
        title: str | None,
        claim: bool,
        ttlMs: int | None = None,
        makeFolders: FolderMaker | None = None,
    ) -> Deferred[tuple[Session, JSONObject]]:
        """
        Make a session (L{prepare}, then L{publish} with the creating
        request's record): fires with it and its answer as sent.
        A retry of the same request meanwhile waits for it
        (L{Home.making}).

        @raise VehicleError: C{storage_unavailable}, at once, when its
            folder could not be built.
        """
        try:
            session = self.prepare(
                caller, meta, title=title, claim=claim, ttlMs=ttlMs, makeFolders=makeFolders
            )
        except OSError as e:
            raise storageError(e) from e
        sent = sentAnswer(answerFor(session))
        record = self.record("create", caller, requestId, raw, sent, f"create:{caller.graphId}")
        published = self.publish(session, record)
        self.home.making(caller.principal, requestId, published)
        return published.addCallback(lambda _: (session, sent))

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

    async def delete(self, caller: Caller, session: Session) -> str:
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
        event = await session.markDeleted(trashedAs, caller)
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

    def finishDelete(self, session: Session, event: Event) -> None:
        """
        Move a deleted session's folder to the trash name its
        C{session.deleted} event reserved, with a note on how to bring it
        back.
        """
        sessionId = session.sessionId
        trashedAs = textOf(event.data.get("trashedAs"))
        if not trashedAs:
            raise ValueError(f"the deletion of {sessionId} names no trash folder")
        self.dataDir.finishTrash(
            sessionId,
            trashedAs,
            {
                "sessionId": sessionId,
                "graphId": session.meta.graphId,
                "deletedAt": event.timestamp,
                "by": event.data.get("by"),
                "restore": (
                    "stop the service, move this directory back to "
                    f"sessions/{sessionId}/, start it, and restore the "
                    "mirrored document from the workspace's Trash"
                ),
            },
        )
