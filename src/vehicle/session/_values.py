# -*- test-case-name: tests.unit.test_session_parts,tests.unit.test_web -*-
"""
The session room's values: who calls (L{Caller}), what a session is fixed to
at creation (L{SessionMeta}), the lease, and the protocol's event names.
"""

from __future__ import annotations

import datetime
from typing import Any, Literal

from attrs import evolve, field, frozen


ROLES = ("owner", "editor", "viewer")

#: The events one durable step writes, in order: C{(type, data)} each.
Effects = list[tuple[str, dict[str, Any]]]
WRITER_ROLES = ("owner", "editor")

#: Every durable event type the host writes (spec, "Watch").
EVENT_TYPES = frozenset(
    """
    session.created session.revived session.shutdown session.forked session.cloned
    session.renamed session.deleted body.materialized body.dormant body.exited
    body.notice lease.claimed lease.renewed lease.released lease.revoked
    lease.expired command.accepted command.delivered command.completed
    command.aborted command.failed command.cancelled command.interrupted
    run.started run.ended run.settled run.error message.completed tool.started
    tool.result queue.updated queue.stranded budget.exceeded room.policy
    chime.received chime.resolved compaction.started compaction.ended
    retry.started extension.error abort.slow mirror.written mirror.failed
    """.split()
)

#: Ephemeral events: streamed to SSE watchers only, never logged.
EPHEMERAL_TYPES = frozenset({"message.delta"})

TEXT_COMMANDS = ("prompt", "follow_up", "steer")
#: Commands that need the exact lease (spec, "The lease").
LEASED_COMMANDS = frozenset(
    TEXT_COMMANDS
    + ("abort", "cancel", "shutdown", "set_room_policy", "accept_chime", "reject_chime")
)
COMMAND_TYPES = LEASED_COMMANDS | {"fork", "clone"}

OPEN_STATUSES = frozenset({"accepted", "queued", "delivered"})
FINAL_STATUSES = frozenset({"completed", "aborted", "failed", "cancelled", "interrupted"})


def isoTimestamp(seconds: float) -> str:
    """
    An ISO 8601 UTC timestamp with milliseconds, as pi writes them.
    """
    moment = datetime.datetime.fromtimestamp(seconds, tz=datetime.timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def parseTimestamp(text: str) -> float:
    """
    The inverse of L{isoTimestamp}.
    """
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


@frozen(kw_only=True)
class Caller:
    """
    Who is calling, as gardend vouched for it.

    @ivar principal: C{x-user-id}.
    @ivar clientId: C{x-vehicle-client-id}, else the principal.
    @ivar role: the role on the bound graph, else the caller's role.
    @ivar graphId: the bound graph, or L{None} on an unbound path.
    @ivar delegatedToken: the MCP delegation token (memory only).
    """

    principal: str
    clientId: str
    role: Literal["owner", "editor", "viewer"]
    graphId: str | None = None
    delegatedToken: str | None = field(default=None, repr=False)
    #: C{member} (this Sophia's own people), or a public caller:
    #: C{anonymous} (a visitor) or C{account} (a Sophia account).
    kind: str = "member"
    email: str | None = None
    emailVerified: bool = False
    #: Every public graph (public mode: a conversation reads them all).
    publicGraphs: tuple[str, ...] = ()
    #: The caller's own model key (C{x-model-key}): memory only.
    modelKey: str | None = field(default=None, repr=False)

    @property
    def public(self) -> bool:
        return self.kind != "member"

    def holder(self) -> dict[str, str]:
        return {"principal": self.principal, "clientId": self.clientId}


@frozen(kw_only=True)
class Lease:
    """
    Who drives a session, and until when (renewed by use).
    """

    principal: str
    clientId: str
    ttlMs: int
    claimedAt: float
    renewedAt: float

    @property
    def expiresAt(self) -> float:
        return self.renewedAt + self.ttlMs / 1000.0

    def heldBy(self, caller: Caller) -> bool:
        return self.principal == caller.principal and self.clientId == caller.clientId

    def renewed(self, now: float) -> "Lease":
        return evolve(self, renewedAt=max(now, self.renewedAt))

    def asJSON(self) -> dict[str, Any]:
        return {
            "principal": self.principal,
            "clientId": self.clientId,
            "ttlMs": self.ttlMs,
            "claimedAt": isoTimestamp(self.claimedAt),
            "expiresAt": isoTimestamp(self.expiresAt),
        }


@frozen(kw_only=True)
class SessionMeta:
    """
    What a session is fixed to at creation (C{meta.json}); only the title
    changes later, and it is kept beside it by the session.
    """

    sessionId: str
    graphId: str
    principal: str
    role: str
    profile: Literal["chat", "agent"]
    model: str
    createdAt: float
    maxTurns: int
    maxCostUsd: float
    parent: dict[str, Any] | None = None
    isolation: str | None = None
    graphs: tuple[str, ...] = ()
    #: An agent's folders as the host made them (path, device, inode).
    folders: dict[str, Any] | None = None
    #: A public conversation's door: C{byok} (the caller's key) or
    #: C{credit} (the house key, debited); L{None} for members.
    funding: str | None = None

    @property
    def access(self) -> str:
        return "write" if self.role in WRITER_ROLES else "read"

    def asJSON(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "sessionId": self.sessionId,
            "graphId": self.graphId,
            "principal": self.principal,
            "role": self.role,
            "profile": self.profile,
            "model": self.model,
            "createdAt": isoTimestamp(self.createdAt),
            "budget": {"maxTurns": self.maxTurns, "maxCostUsd": self.maxCostUsd},
            "parent": self.parent,
        }
        if self.isolation is not None:
            out["isolation"] = self.isolation
        if self.graphs:
            out["graphs"] = list(self.graphs)
        if self.folders:
            out["folders"] = self.folders
        if self.funding:
            out["funding"] = self.funding
        return out

    @classmethod
    def fromJSON(cls, data: dict[str, Any]) -> "SessionMeta":
        budget = data.get("budget") or {}
        return cls(
            sessionId=data["sessionId"],
            graphId=data["graphId"],
            principal=data["principal"],
            role=data["role"],
            profile=data.get("profile", "chat"),
            model=data["model"],
            createdAt=parseTimestamp(data["createdAt"]),
            maxTurns=int(budget.get("maxTurns", 12)),
            maxCostUsd=float(budget.get("maxCostUsd", 0.25)),
            parent=data.get("parent"),
            isolation=data.get("isolation"),
            graphs=tuple(data.get("graphs") or ()),
            folders=data.get("folders"),
            funding=data.get("funding"),
        )
