# -*- test-case-name: tests.unit.test_session_parts,tests.unit.test_web -*-
"""
The session package's values: who calls (L{Caller}), what a session is fixed to
at creation (L{SessionMeta}, its C{meta.json}) and the lease (L{Lease}).
The protocol's own values (commands, events, answers) are
L{vehicle.protocol}'s.
"""

from __future__ import annotations

import datetime
import math
from typing import Literal

from attrs import evolve, field, frozen

from vehicle.errors import VehicleError
from vehicle.protocol import Funding, Holder, LeaseInfo, Parent, Profile, Role, RunBudget, omitted


#: The roles, by name.
ROLES: dict[str, Role] = {"owner": "owner", "editor": "editor", "viewer": "viewer"}
WRITER_ROLES: tuple[Role, ...] = ("owner", "editor")

#: What kind of caller: this Sophia's own people (C{member}), or a public
#: caller, a visitor (C{anonymous}) or a Sophia account (C{account}).
CallerKind = Literal["member", "anonymous", "account"]
CALLER_KINDS: dict[str, CallerKind] = {
    "member": "member", "anonymous": "anonymous", "account": "account"
}


#: The text up to the milliseconds of each whole second L{isoTimestamp}
#: wrote lately, by the second: a request writes several timestamps of a few
#: seconds (now, and its lease's claim and expiry), so one second kept would
#: be made again at nearly every call.  Emptied whole when full; each step
#: on it is one dict operation, safe from any thread.
_seconds: dict[float, str] = {}
SECONDS_KEPT = 256


def _secondText(whole: float) -> str:
    moment = datetime.datetime.fromtimestamp(whole, tz=datetime.timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.")


def isoTimestamp(seconds: float) -> str:
    """
    An ISO 8601 UTC timestamp with milliseconds, as pi writes them: the
    text C{datetime.fromtimestamp} gives, each second's part made once
    while it is kept (L{_seconds}).
    """
    # The microseconds as datetime.fromtimestamp rounds them (half even).
    fraction, whole = math.modf(seconds)
    micro = round(fraction * 1e6)
    if micro >= 1_000_000:
        whole, micro = whole + 1, micro - 1_000_000
    elif micro < 0:
        whole, micro = whole - 1, micro + 1_000_000
    text = _seconds.get(whole)
    if text is None:
        if len(_seconds) >= SECONDS_KEPT:
            _seconds.clear()
        text = _seconds[whole] = _secondText(whole)
    return f"{text}{micro // 1000:03d}Z"


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
    @ivar publicGraphs: every public graph (public mode: a conversation
        reads them all).
    @ivar modelKey: the caller's own model key (C{x-model-key}): memory only.
    """

    principal: str
    clientId: str
    role: Role
    graphId: str | None = None
    delegatedToken: str | None = field(default=None, repr=False)
    kind: CallerKind = "member"
    email: str | None = None
    emailVerified: bool = False
    publicGraphs: tuple[str, ...] = ()
    modelKey: str | None = field(default=None, repr=False)

    @property
    def public(self) -> bool:
        return self.kind != "member"

    def holder(self) -> Holder:
        return Holder(principal=self.principal, clientId=self.clientId)


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

    @property
    def holder(self) -> Holder:
        return Holder(principal=self.principal, clientId=self.clientId)

    def heldBy(self, who: Caller | Holder) -> bool:
        return self.principal == who.principal and self.clientId == who.clientId

    def renewed(self, now: float) -> Lease:
        return evolve(self, renewedAt=max(now, self.renewedAt))

    def info(self) -> LeaseInfo:
        return LeaseInfo(
            principal=self.principal,
            clientId=self.clientId,
            ttlMs=self.ttlMs,
            claimedAt=isoTimestamp(self.claimedAt),
            expiresAt=isoTimestamp(self.expiresAt),
        )


@frozen(kw_only=True)
class FolderRecord:
    """
    An agent's folder as the host made it: its path, device and inode.
    """

    path: str
    device: int
    inode: int


@frozen(kw_only=True)
class SessionMeta:
    """
    What a session is fixed to at creation (C{meta.json}, read and written
    through the protocol's codec); only the title changes later, and it is
    kept beside it by the session.

    @ivar createdAt: when it was made (ISO 8601, as the answers show it).
    @ivar folders: an agent's folders as the host made them.
    @ivar funding: a public conversation's door; L{None} for members.
    """

    sessionId: str
    graphId: str
    principal: str
    role: Role
    profile: Profile = "chat"
    model: str
    createdAt: str
    budget: RunBudget
    parent: Parent | None = None
    isolation: str | None = omitted()
    graphs: tuple[str, ...] | None = omitted()
    folders: dict[str, FolderRecord] | None = omitted()
    funding: Funding | None = omitted()

    @property
    def access(self) -> Literal["read", "write"]:
        return "write" if self.role in WRITER_ROLES else "read"

    @property
    def maxTurns(self) -> int:
        return self.budget.maxTurns

    @property
    def maxCostUsd(self) -> float:
        return self.budget.maxCostUsd

    @property
    def createdSeconds(self) -> float:
        return parseTimestamp(self.createdAt)

    @property
    def publicGraphs(self) -> tuple[str, ...]:
        return self.graphs or ()

    # -- who may drive a session fixed so ---------------------------------------

    def requireGraphPath(self, caller: Caller, verb: str) -> None:
        """
        Without the graph in the path the host does not know the caller's
        role on it (only their grant's highest role): no driving or
        branching so.

        @raise VehicleError: C{access_reduced}.
        """
        if caller.graphId is None:
            raise VehicleError(
                "access_reduced",
                f"{verb} a session through its graph's path (/g/<graph>/...), where your role "
                "on that graph is known",
                {"graphId": self.graphId},
            )

    def checkDriver(self, caller: Caller) -> None:
        """
        May this caller drive the session at all (its role now)?

        @raise VehicleError: C{access_reduced}.
        """
        self.requireGraphPath(caller, "drive")
        if self.access == "write" and caller.role not in WRITER_ROLES:
            raise VehicleError(
                "access_reduced",
                "your role on this graph now only reads; this session writes",
                {"role": caller.role},
            )
        if self.profile == "agent" and caller.role != "owner":
            raise VehicleError(
                "access_reduced",
                "an agent session is driven only by the graph's owner",
                {"role": caller.role},
            )
