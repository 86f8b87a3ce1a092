# -*- test-case-name: tests.unit.test_hardening -*-
"""
The capsule: a bounded summary of a session that is safe to hand over.  It
carries identity, posture, counts and the shape of the conversation, and
never a secret, the text of a command or chime, tool arguments or results,
or any authority.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from vehicle.session._session import Session


CAPSULE_FORMAT = "sophia.vehicle-session-capsule.v2"
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


def makeCapsule(session: Session, transcript: list[dict[str, Any]]) -> dict[str, Any]:
    summary = session.summary()
    commands = list(session.commands.values())
    lease = session.lease
    milestones = []
    for event in session.eventsAfter(0, limit=10**9)[0]:
        if event["type"] in _MILESTONE_TYPES:
            data = event.get("data") or {}
            milestones.append(
                {
                    "seq": event["seq"],
                    "type": event["type"],
                    **{k: data[k] for k in _MILESTONE_KEYS if k in data},
                }
            )
    items = []
    for item in transcript[-LAST_ITEMS:]:
        role = item.get("role")
        if role == "assistant":
            items.append(
                {
                    "role": "assistant",
                    "text": _capBytes(item.get("text") or "", ASSISTANT_TEXT_BYTES),
                    "tools": [c.get("name") for c in item.get("toolCalls") or []],
                    "timestamp": item.get("timestamp"),
                }
            )
        elif role == "user":
            items.append(
                {"role": "user", "length": len(item.get("text") or ""),
                 "timestamp": item.get("timestamp")}
            )
        elif role == "toolResult":
            items.append(
                {"role": "toolResult", "toolName": item.get("toolName"),
                 "isError": bool(item.get("isError")), "timestamp": item.get("timestamp")}
            )
    identity = {
        "sessionId": session.sessionId,
        "graphId": session.meta.graphId,
        "profile": session.meta.profile,
        "access": session.meta.access,
        "model": session.meta.model,
        "parent": session.meta.parent,
    }
    if session.meta.isolation:
        identity["isolation"] = session.meta.isolation
    return {
        "format": CAPSULE_FORMAT,
        "identity": identity,
        "posture": {
            "status": summary["status"],
            "body": summary["body"],
            "cursor": session.cursor,
            "leaseHolder": {"principal": lease.principal, "clientId": lease.clientId} if lease else None,
            "budget": {"maxTurns": session.meta.maxTurns, "maxCostUsd": session.meta.maxCostUsd},
        },
        "commands": {
            "counts": dict(Counter(c["status"] for c in commands)),
            "last": [
                {"commandId": c["commandId"], "type": c["type"], "status": c["status"],
                 "acceptedAt": c.get("acceptedAt")}
                for c in commands[-LAST_COMMANDS:]
            ],
        },
        "milestones": milestones[-MILESTONES:],
        "transcript": items,
        "authority": {"mutations": False},
    }
