# -*- test-case-name: tests.unit.test_hardening,tests.unit.test_crash -*-
"""
Fork and clone: a new session from a source session's conversation (a copy
of pi's file up to a point, made without a pi process), with the source's
delegation token, and for an agent a snapshot copy of its workspace.  The
source is not touched beyond an event saying a branch was made.
"""

from __future__ import annotations

import datetime
import uuid
from pathlib import Path
from typing import Any, Awaitable, Callable, Literal

from attrs import define, evolve

from vehicle.body._modeltext import stripContextNote
from vehicle.body._spawner import latestSessionFile
from vehicle.body._sessionfile import (
    BranchResult, NothingToFork, branchSession, hasConversation, readSession,
)
from vehicle.box import copyTree
from vehicle.errors import VehicleError
from vehicle.protocol import (
    Answer,
    CommandRequest,
    CommandType,
    JSONObject,
    Parent,
    SessionCloned,
    SessionForked,
    toObject,
)
from vehicle.session import (
    Caller,
    FolderMaker,
    Registry,
    Session,
    SessionMeta,
    isoTimestamp,
    movedFolders,
    notFound,
    previewOf,
    storageError,
)
from vehicle.store import raiseAtOnce


#: Runs blocking work off the reactor's thread and waits for it.
RunInThread = Callable[..., Awaitable[Any]]


@define(eq=False)
class _Branch:
    """
    One fork or clone being made: its request, its source, and what the
    new session is to be.
    """

    registry: Registry
    source: Session
    caller: Caller
    request: CommandRequest
    piFile: Path
    meta: SessionMeta
    entryId: str | None
    #: The first words of the history the branch begins with, if any.
    inherited: str | None

    @property
    def kind(self) -> Literal["fork", "clone"]:
        return "fork" if self.request.type == CommandType.fork else "clone"

    @property
    def branchId(self) -> str:
        return self.meta.sessionId

    def title(self) -> str | None:
        """
        A clone is named as a copy of its source's name (its title, or
        what the list shows for it); a fork has none of its own.
        """
        named = self.source.title or self.source.preview
        return f"Copy of {named}" if self.kind == "clone" and named else None

    def workDir(self) -> Path:
        dataDir = self.registry.dataDir
        if self.meta.profile == "agent":
            return dataDir.workspaceDir(self.branchId)
        return dataDir.sessionDir(self.branchId) / "work"


async def branch(
    registry: Registry,
    source: Session,
    caller: Caller,
    request: CommandRequest,
    recordFolders: FolderMaker | None = None,
    runInThread: RunInThread | None = None,
) -> JSONObject:
    """
    Make the branch and return its answer as sent (C{session.forked} or
    C{session.cloned}).  pi's file is copied on the reactor's thread (it is
    small next to a reply); an agent's workspace, the one large step, by
    C{runInThread} (the reactor's thread pool; inline when none is given).
    """
    source.meta.requireGraphPath(caller, "branch")
    if source.meta.profile == "agent" and caller.role != "owner":
        raise VehicleError(
            "forbidden_profile", "only the graph's owner may branch an agent session",
            {"role": caller.role},
        )
    piFile = latestSessionFile(source.directory / "pi")
    if piFile is None or not hasConversation(piFile):
        # (A new session made with a spare has pi's file before anyone spoke.)
        raise VehicleError("nothing_to_fork", "nothing has been said in this session yet")
    kind: Literal["fork", "clone"] = "fork" if request.type == CommandType.fork else "clone"
    entryId = request.entryId if kind == "fork" else None
    points = readSession(piFile).forkPoints()
    if entryId is not None and entryId not in {p.entryId for p in points}:
        raise NothingToFork(entryId)
    meta = evolve(
        source.meta,
        sessionId=registry.newSessionId(),
        principal=caller.principal,
        role=caller.role,
        createdAt=isoTimestamp(registry.clock.seconds()),
        parent=Parent(sessionId=source.sessionId, kind=kind, entryId=entryId),
        folders=None,
    )
    made = _Branch(
        registry=registry, source=source, caller=caller, request=request, piFile=piFile,
        meta=meta, entryId=entryId,
        # What the list shows for the branch until something is said in it:
        # the first message of the history it begins with.
        inherited=points[0].text if points and points[0].entryId != entryId else None,
    )
    try:
        return await _build(made, recordFolders, runInThread or inline)
    except OSError as e:
        raise storageError(e) from e


async def _build(
    made: _Branch, recordFolders: FolderMaker | None, runInThread: RunInThread
) -> JSONObject:
    """
    The branch is built aside and renamed into place whole (its record,
    holding the answer, inside it): the one step that makes it.  The
    source's record follows; start writes it should the host be cut
    between the two.
    """
    registry, source, request = made.registry, made.source, made.request
    inherited = stripContextNote(made.inherited) if made.inherited else None
    session = registry.maker.prepare(
        made.caller,
        made.meta,
        title=made.title(),
        claim=True,
        createdEvent={
            "parent": {"sessionId": source.sessionId, "kind": made.kind, "entryId": made.entryId},
            **({"preview": previewOf(inherited)} if inherited else {}),
        },
    )
    try:
        result = _copyConversation(made, session)
        if made.meta.profile == "agent" and recordFolders is not None:
            await _copyWorkspace(made, session, recordFolders, runInThread)
        # The same request, sent again and made first, may have its record
        # on its way to the source's disk: known once it is there.
        waiting = source.answering(request.requestId)
        while waiting is not None:
            await waiting
            waiting = source.answering(request.requestId)
        if source.deleted:
            raise notFound()
        earlier = source.replay(request.requestId, request.raw, "commands")
        if earlier is not None:
            # The same request, sent again while this one copied: it was
            # answered meanwhile, and this copy is not needed.
            session.close()
            registry.maker.abandon(made.branchId)
            return earlier
        session.delegatedToken = source.delegatedToken
        if session.preview is None and inherited:
            session.preview, session.previewInherited = previewOf(inherited), True
        sent = _answer(made, session, result)
    except BaseException:
        # Half made and never announced: removed (start would remove it too).
        session.close()
        registry.maker.abandon(made.branchId)
        raise
    await _publish(made, session, sent)
    return sent


async def _copyWorkspace(
    made: _Branch, session: Session, recordFolders: FolderMaker, runInThread: RunInThread
) -> None:
    """
    An agent's branch gets a snapshot of its source's workspace (links
    copied as links, never followed), and the identities of its folders.
    """
    registry = made.registry
    await runInThread(
        copyTree, registry.dataDir.workspaceDir(made.source.sessionId), made.workDir()
    )
    session.meta = evolve(session.meta, folders=movedFolders(
        recordFolders(made.branchId, session.directory), session.directory,
        registry.dataDir.sessionDir(made.branchId),
    ))
    session.writeMeta()


async def _publish(made: _Branch, session: Session, sent: JSONObject) -> None:
    """
    The branch is announced, and its source remembers it (so a retry of
    the request replays the answer rather than branches again): answered
    once the source's record is durable.
    """
    registry, source, request = made.registry, made.source, made.request
    maker, requestId = registry.maker, request.requestId
    record = maker.record("branched", made.caller, requestId, request.raw, sent, "commands",
                          source=source.sessionId)

    def remember(result: object) -> object:
        if made.branchId not in registry.sessions:
            return result
        # Published (even if a sync after it failed): the source remembers
        # it, so a retry replays rather than branches again.
        remembered = source.rememberBranch(
            made.caller, requestId, request.raw, sent, made.kind, made.branchId, made.entryId,
        )
        return remembered.addCallback(lambda _: result)

    def letGo(result: object) -> object:
        source.letRequestGo(requestId)
        return result

    # While its folder is sealed off the reactor's thread and its source's
    # record written, the same request taken again waits for it (at the
    # door, or past it: L{_build}); the branch is made even if no one
    # waits for it any more.
    source.holdRequest(requestId)
    try:
        published = maker.publish(session, record)
    except BaseException:
        source.letRequestGo(requestId)
        raise
    await raiseAtOnce(published.addBoth(remember).addBoth(letGo))


def _copyConversation(made: _Branch, session: Session) -> BranchResult:
    """
    pi's file, up to the fork's entry (or whole, for a clone), copied into
    the branch's C{pi/} with its working folder; a fork before the first
    message has no history, and starts empty.
    """
    result = branchSession(
        made.piFile,
        session.directory / "pi",
        entryId=made.entryId,
        newSessionId=str(uuid.uuid4()),
        now=datetime.datetime.fromtimestamp(made.registry.clock.seconds(), datetime.timezone.utc),
        cwd=str(made.workDir()),
    )
    if not any(e.type == "message" for e in readSession(result.path).entries):
        result.path.unlink()
    else:
        result.path.chmod(0o600)
    return result


def _answer(made: _Branch, session: Session, result: BranchResult) -> JSONObject:
    """
    The branch's answer as sent: its summary and parent; a fork's with the
    text of the entry it was cut at.
    """
    assert made.meta.parent is not None
    summary, parent = session.summary(), made.meta.parent
    if made.kind == "clone":
        return toObject(Answer(type="session.cloned",
                               value=SessionCloned(session=summary, parent=parent)))
    selected = stripContextNote(result.selectedText) if result.selectedText is not None else None
    return toObject(Answer(type="session.forked", value=SessionForked(
        session=summary, parent=parent, selectedText=selected,
    )))


async def inline(f: Callable[..., Any], *args: Any) -> Any:
    """
    Run C{f} here and now: a L{RunInThread} for hosts without a thread pool
    (tests on a fake clock).
    """
    return f(*args)
