# -*- test-case-name: tests.unit.test_hardening -*-
"""
The capsule of a session (L{vehicle.protocol.Capsule}), made from what the
session holds and the transcript the body package read: bounded by the
numbers below, whatever the session holds.
"""

from __future__ import annotations

from collections import Counter
from typing import Sequence

from vehicle.protocol import (
    JSON,
    Capsule,
    CapsuleCommands,
    CapsuleIdentity,
    CapsuleItem,
    CapsulePosture,
    CommandLine,
    JSONObject,
    textOf,
)
from vehicle.session._session import Session


LAST_COMMANDS = 16
MILESTONES = 128
LAST_ITEMS = 32
ASSISTANT_TEXT_BYTES = 4096

#: The events that mark the way of a conversation.
_MILESTONE_TYPES = frozenset(
    {
        "session.created", "session.revived", "session.shutdown", "session.forked",
        "session.cloned", "session.renamed", "body.materialized", "body.dormant",
        "body.exited", "lease.claimed", "lease.released", "lease.revoked", "lease.expired",
        "run.started", "run.settled", "run.error", "budget.exceeded", "chime.received",
        "chime.resolved", "mirror.written", "mirror.failed",
    }
)
#: The scalar facts of a milestone that are ids, statuses or counts.
_MILESTONE_KEYS = ("runId", "commandId", "chimeId", "branchId", "aborted", "stopReason",
                   "turns", "status", "reason", "kind", "created", "exitCode", "signal")


def _capBytes(text: str, limit: int) -> str:
    data = text.encode("utf-8")
    if len(data) <= limit:
        return text
    return data[:limit].decode("utf-8", "ignore")


def _item(item: JSONObject) -> CapsuleItem | None:
    """
    One transcript item as the capsule shows it, or L{None} (a role it
    leaves out).
    """
    role, timestamp = item.get("role"), textOf(item.get("timestamp"))
    if role == "assistant":
        calls = item.get("toolCalls")
        return CapsuleItem(
            role="assistant",
            text=_capBytes(textOf(item.get("text")) or "", ASSISTANT_TEXT_BYTES),
            tools=tuple(
                textOf(call.get("name")) for call in (calls if isinstance(calls, list) else [])
                if isinstance(call, dict)
            ),
            timestamp=timestamp,
        )
    if role == "user":
        return CapsuleItem(role="user", length=len(textOf(item.get("text")) or ""),
                           timestamp=timestamp)
    if role == "toolResult":
        return CapsuleItem(role="toolResult", toolName=textOf(item.get("toolName")),
                           isError=bool(item.get("isError")), timestamp=timestamp)
    return None


def _milestone(seq: int, eventType: str, data: JSONObject) -> JSONObject:
    milestone: dict[str, JSON] = {"seq": seq, "type": eventType}
    milestone.update((key, data[key]) for key in _MILESTONE_KEYS if key in data)
    return milestone


def makeCapsule(session: Session, transcript: Sequence[JSONObject]) -> Capsule:
    summary = session.summary()
    commands = session.commands()
    lease = session.currentLease()
    milestones = [
        _milestone(event.seq or 0, event.type, event.data)
        for event in session.feed.after(0, limit=10**9)[0]
        if event.type in _MILESTONE_TYPES
    ]
    items = [out for out in (_item(item) for item in transcript[-LAST_ITEMS:]) if out]
    meta = session.meta
    return Capsule(
        identity=CapsuleIdentity(
            sessionId=session.sessionId, graphId=meta.graphId, profile=meta.profile,
            access=meta.access, model=meta.model, parent=meta.parent, isolation=meta.isolation,
        ),
        posture=CapsulePosture(
            status=summary.status, body=summary.body, cursor=session.cursor,
            leaseHolder=lease.holder if lease else None, budget=meta.budget,
        ),
        commands=CapsuleCommands(
            counts=dict(Counter(c.status.value for c in commands)),
            last=tuple(
                CommandLine(commandId=c.commandId, type=c.type.value, status=c.status.value,
                            acceptedAt=c.acceptedAt)
                for c in commands[-LAST_COMMANDS:]
            ),
        ),
        milestones=tuple(milestones[-MILESTONES:]),
        transcript=tuple(items),
    )
