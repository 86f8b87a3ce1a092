# -*- test-case-name: tests.unit.test_crash -*-
"""
A branch's lineage as its source's log tells it: a fork or clone is made
aside and published whole (L{vehicle.body.branch}); its source then
remembers the request and says C{session.forked} or C{session.cloned}
(L{Session.rememberBranch}).  A host cut between the two leaves a published
branch whose source never heard of it; start tells the source then
(L{finishBranch}), so a retry of the request replays rather than branches
again.
"""

from __future__ import annotations

from typing import Mapping

from twisted.logger import Logger

from vehicle.protocol import RequestRecord, textOf
from vehicle.session._session import Session
from vehicle.session._values import Caller


_log = Logger()


def finishBranch(sessions: Mapping[str, Session], branch: Session, record: RequestRecord) -> None:
    """
    A branch published by a host cut before its source's record (C{record}
    is the branch's own, kind C{branched}): the source learns of it now.
    """
    source = sessions.get(record.source or "")
    if source is None or record.requestId is None or source.knowsRequest(record.requestId):
        return
    caller = Caller(principal=record.principal, clientId=record.clientId, role="viewer")
    told = source.rememberBranch(
        caller, record.requestId, record.body, record.frame,
        "clone" if record.body.get("type") == "clone" else "fork",
        branch.sessionId, textOf(record.body.get("entryId")),
    )
    told.addCallbacks(
        lambda _: _log.info("Start: told {source} of its branch {branch}",
                            source=source.sessionId, branch=branch.sessionId),
        # Refused, it is told again at the next start.
        lambda failure: _log.error("Start: could not tell {source} of its branch {branch}: "
                                   "{error}", source=source.sessionId, branch=branch.sessionId,
                                   error=str(failure.value)),
    )
