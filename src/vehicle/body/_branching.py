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
from typing import Any, Awaitable, Callable

from attrs import evolve

from vehicle.body._modeltext import stripContextNote
from vehicle.body._spawner import latestSessionFile
from vehicle.body._sessionfile import NothingToFork, branchSession, readSession
from vehicle.box import copyTree
from vehicle.errors import VehicleError
from vehicle.session import (
    Caller,
    Registry,
    Session,
    answer,
    branchEffects,
    notFound,
    previewOf,
    requireGraphPath,
    storageError,
)


#: Runs blocking work off the reactor's thread and waits for it.
RunInThread = Callable[..., Awaitable[Any]]


async def branch(
    registry: Registry,
    source: Session,
    caller: Caller,
    request: dict[str, Any],
    recordFolders: Callable[[str, Path], dict[str, Any]] | None = None,
    runInThread: RunInThread | None = None,
) -> dict[str, Any]:
    """
    Make the branch and return the answer (C{session.forked} or
    C{session.cloned}).  pi's file is copied on the reactor's thread (it is
    small next to a reply); an agent's workspace, the one large step, by
    C{runInThread} (the reactor's thread pool; inline when none is given).
    """
    kind = request["type"]
    requireGraphPath(source, caller, "branch")
    if source.meta.profile == "agent" and caller.role != "owner":
        raise VehicleError(
            "forbidden_profile", "only the graph's owner may branch an agent session",
            {"role": caller.role},
        )
    piFile = latestSessionFile(source.directory / "pi")
    if piFile is None:
        raise VehicleError("nothing_to_fork", "nothing has been said in this session yet")
    entryId = request.get("entryId") if kind == "fork" else None
    newId = registry.newSessionId()
    points = readSession(piFile).forkPoints()
    if entryId is not None and entryId not in {p["entryId"] for p in points}:
        raise NothingToFork(entryId)
    # What the list shows for the branch until something is said in it: the
    # first message of the history it begins with.
    inherited = points[0]["text"] if points and points[0]["entryId"] != entryId else None
    meta = evolve(
        source.meta,
        sessionId=newId,
        principal=caller.principal,
        role=caller.role,
        createdAt=registry.clock.seconds(),
        parent={"sessionId": source.sessionId, "kind": kind, "entryId": entryId},
        folders=None,
    )
    title = None
    if kind == "clone" and (source.title or source.preview):
        # A clone is named as a copy of its source's name (its title, or
        # what the list shows for it).
        title = f"Copy of {source.title or source.preview}"
    # The branch is built aside and renamed into place whole (its record,
    # holding the answer, inside it): the one step that makes it.  The
    # source's record follows; start writes it should the host be cut
    # between the two.
    try:
        return await _build(registry, source, caller, request, recordFolders, kind, piFile,
                            entryId, newId, inherited, meta, title, runInThread or inline)
    except OSError as e:
        raise storageError(e) from e


async def _build(
    registry: Registry, source: Session, caller: Caller, request: dict[str, Any],
    recordFolders: Callable[[str, Path], dict[str, Any]] | None, kind: str, piFile: Path,
    entryId: str | None, newId: str, inherited: str | None, meta: Any, title: str | None,
    runInThread: RunInThread,
) -> dict[str, Any]:
    session = registry.maker.prepare(
        caller,
        meta,
        title=title,
        claim=True,
        createdEvent={
            "parent": meta.parent,
            **({"preview": previewOf(stripContextNote(inherited))} if inherited else {}),
        },
    )
    try:
        workDir = (
            registry.dataDir.workspaceDir(newId)
            if meta.profile == "agent"
            else registry.dataDir.sessionDir(newId) / "work"
        )
        result = branchSession(
            piFile,
            session.directory / "pi",
            entryId=entryId,
            newSessionId=str(uuid.uuid4()),
            now=datetime.datetime.fromtimestamp(registry.clock.seconds(), datetime.timezone.utc),
            cwd=str(workDir),
        )
        if not any(e.get("type") == "message" for e in readSession(result.path).entries):
            # A fork before the first message has no history: it starts empty.
            result.path.unlink()
        else:
            result.path.chmod(0o600)
        if meta.profile == "agent" and recordFolders is not None:
            # A snapshot: links copied as links, never followed.
            await runInThread(
                copyTree, registry.dataDir.workspaceDir(source.sessionId), workDir
            )
            building, final = str(session.directory), str(registry.dataDir.sessionDir(newId))
            folders = {
                name: {**identity, "path": str(identity["path"]).replace(building, final, 1)}
                for name, identity in recordFolders(newId, session.directory).items()
            }
            session.meta = evolve(session.meta, folders=folders)
            session.writeMeta()
        if source.deleted:
            raise notFound()
        earlier = source.replay(request["requestId"], request, "commands")
        if earlier is not None:
            # The same request, sent again while this one copied: it was
            # answered meanwhile, and this copy is not needed.
            session.close()
            registry.maker.abandon(newId)
            return earlier
        session.delegatedToken = source.delegatedToken
        if session.preview is None and inherited:
            session.preview = previewOf(stripContextNote(inherited))
            session.previewInherited = True
        selected = stripContextNote(result.selectedText) if result.selectedText is not None else None
        value: dict[str, Any] = {"session": session.summary(), "parent": meta.parent}
        if kind == "fork":
            value["selectedText"] = selected
        frame = answer("session.forked" if kind == "fork" else "session.cloned", value)
    except BaseException:
        # Half made and never announced: removed (start would remove it too).
        session.close()
        registry.maker.abandon(newId)
        raise
    try:
        registry.maker.publish(
            session, "branched", caller, request["requestId"], request, frame, "commands",
            {"source": source.sessionId},
        )
    finally:
        if newId in registry.sessions:
            # Published (even if a sync after it failed): the source
            # remembers it, so a retry replays rather than branches again.
            source.commit(
                "branch", caller, request["requestId"], request, frame,
                branchEffects(kind, newId, entryId, caller),
            )
    return frame


async def inline(f: Callable[..., Any], *args: Any) -> Any:
    """
    Run C{f} here and now: a L{RunInThread} for hosts without a thread pool
    (tests on a fake clock).
    """
    return f(*args)
