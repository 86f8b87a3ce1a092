# -*- test-case-name: tests.unit.test_crash -*-
"""
A branch's lineage as its source's log tells it: a fork or clone is made
aside and published whole (L{vehicle.body.branch}); its source then
remembers the request and says C{session.forked} or C{session.cloned}
(L{branchEffects}).  A host cut between the two leaves a published branch
whose source never heard of it; start tells the source then
(L{finishBranch}), so a retry of the request replays rather than branches
again.
"""

from __future__ import annotations

from typing import Any, Mapping

from twisted.logger import Logger

from vehicle.session._session import Session
from vehicle.session._values import Caller


_log = Logger()


def branchEffects(
    kind: str, branchId: str, entryId: str | None, caller: Caller
) -> list[tuple[str, dict[str, Any]]]:
    """
    What a source's log says of a branch made from it.
    """
    return [(
        f"session.{'forked' if kind == 'fork' else 'cloned'}",
        {"branchId": branchId, "entryId": entryId, "by": caller.holder()},
    )]


def finishBranch(sessions: Mapping[str, Session], branch: Session, record: dict[str, Any]) -> None:
    """
    A branch published by a host cut before its source's record (C{record}
    is the branch's own, kind C{branched}): the source learns of it now
    (the request's record and C{session.forked}/C{session.cloned}).
    """
    source = sessions.get(record.get("source") or "")
    requestId = record.get("requestId")
    if source is None or not isinstance(requestId, str) or requestId in source.journal.requests:
        return
    request = record.get("body") or {}
    caller = Caller(principal=record["principal"], clientId=record["clientId"], role="viewer")
    source.commit(
        "branch", caller, requestId, request, record["frame"],
        branchEffects(request.get("type", "fork"), branch.sessionId, request.get("entryId"), caller),
    )
    _log.info("Start: told {source} of its branch {branch}",
              source=source.sessionId, branch=branch.sessionId)
