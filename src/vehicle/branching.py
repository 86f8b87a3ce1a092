# -*- test-case-name: tests.test_branching -*-
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
from typing import Any, Callable

from attrs import evolve
from twisted.internet.threads import deferToThreadPool

from vehicle.body._conductor import stripContextNote
from vehicle.body._launcher import latestSessionFile
from vehicle.body._sessionfile import NothingToFork, branchSession, readSession
from vehicle.box import copyTree
from vehicle.errors import VehicleError
from vehicle.session import Caller, Registry, Session
from vehicle.session._session import _preview as previewOf
from vehicle.session._drive import answer, requireGraphPath


async def branch(
    registry: Registry,
    source: Session,
    caller: Caller,
    body: dict[str, Any],
    recordFolders: Callable[[str, Path], dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """
    Make the branch and return the answer (C{session.forked} or
    C{session.cloned}).  pi's file is copied on the reactor's thread (it is
    small next to a reply); an agent's workspace, the one large step, in
    the reactor's thread pool.
    """
    kind = body["type"]
    requireGraphPath(source, caller, "branch")
    if source.meta.profile == "agent" and caller.role != "owner":
        raise VehicleError(
            "forbidden_profile", "only the graph's owner may branch an agent session",
            {"role": caller.role},
        )
    piFile = latestSessionFile(source.directory / "pi")
    if piFile is None:
        raise VehicleError("nothing_to_fork", "nothing has been said in this session yet")
    entryId = body.get("entryId") if kind == "fork" else None
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
    session = registry.create(
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
            else session.directory / "work"
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
        if meta.profile == "agent" and recordFolders is not None:
            # A snapshot: links copied as links, never followed.
            await _inThread(registry.clock, copyTree,
                            registry.dataDir.workspaceDir(source.sessionId), workDir)
            session.meta = evolve(session.meta, folders=recordFolders(newId, session.directory))
            session.writeMeta()
    except Exception:
        # Half made: put it in the trash (never unlinked), then say so.
        registry.delete(caller, session)
        raise
    session.delegatedToken = source.delegatedToken
    if session.preview is None and inherited:
        session.preview = previewOf(stripContextNote(inherited))
        session.previewInherited = True
    selected = stripContextNote(result.selectedText) if result.selectedText is not None else None
    source.emit(
        f"session.{'forked' if kind == 'fork' else 'cloned'}",
        {"branchId": newId, "entryId": entryId, "by": caller.holder()},
    )
    value: dict[str, Any] = {"session": session.summary(), "parent": meta.parent}
    if kind == "fork":
        value["selectedText"] = selected
    frameType = "session.forked" if kind == "fork" else "session.cloned"
    return answer(frameType, value)


async def _inThread(reactor: Any, f: Callable[..., Any], *args: Any) -> Any:
    """
    Run blocking file work in the reactor's thread pool (inline where the
    reactor has none, as in tests on a fake clock).
    """
    getPool = getattr(reactor, "getThreadPool", None)
    if getPool is None:
        return f(*args)
    return await deferToThreadPool(reactor, getPool(), f, *args)
