# -*- test-case-name: tests.unit.test_protocol -*-
"""
The requests a client sends, as the host reads them once they passed their
schema (C{protocol/schemas/*.request.schema.json}, which stays the truth of
the wire): one value each.  Each keeps the payload it was read from
(C{raw}): the idempotency rule compares payloads as they were sent (spec,
"Commands": the same C{requestId} with a different body is a conflict),
and a request's record keeps it as it came.
"""

from __future__ import annotations

from typing import Any, Literal

from attrs import field, frozen

from vehicle.protocol._commands import CommandType, Delivery, RoomPolicy
from vehicle.protocol._json import JSONObject


#: A field the codec neither reads nor writes (the payload itself).
SKIP = "vehicle.skip"

Profile = Literal["chat", "agent"]


def _raw() -> Any:
    """
    The payload a request was read from: kept, but not a field of the value.
    """
    return field(factory=dict, eq=False, repr=False, metadata={SKIP: True})


@frozen(kw_only=True)
class Budget:
    """
    A session's run budget as a create asks for it (each part optional).
    """

    maxTurns: int | None = None
    maxCostUsd: float | None = None


@frozen(kw_only=True)
class CreateRequest:
    """
    C{POST /sessions}.
    """

    requestId: str
    profile: Profile | None = None
    model: str | None = None
    title: str | None = None
    budget: Budget | None = None
    claim: bool | None = None
    ttlMs: int | None = None
    graphId: str | None = None
    raw: JSONObject = _raw()

    @property
    def chosenProfile(self) -> Profile:
        return self.profile or "chat"

    @property
    def claims(self) -> bool:
        """
        A create claims the lease unless it says not to.
        """
        return self.claim is not False


@frozen(kw_only=True)
class ClaimRequest:
    """
    C{POST /sessions/:id/claim}.
    """

    requestId: str
    ttlMs: int | None = None
    takeover: bool = False
    raw: JSONObject = _raw()


@frozen(kw_only=True)
class ReleaseRequest:
    """
    C{POST /sessions/:id/release}.
    """

    requestId: str
    raw: JSONObject = _raw()


@frozen(kw_only=True)
class RenameRequest:
    """
    C{PATCH /sessions/:id}: a title, or L{None} for none.
    """

    title: str | None
    requestId: str | None = None
    raw: JSONObject = _raw()


@frozen(kw_only=True)
class CommandRequest:
    """
    C{POST /sessions/:id/commands}: one verb and the fields it takes.
    """

    type: CommandType
    requestId: str
    commandId: str | None = None
    text: str | None = None
    contextRefs: tuple[str, ...] | None = None
    targetCommandId: str | None = None
    entryId: str | None = None
    policy: RoomPolicy | None = None
    chimeId: str | None = None
    raw: JSONObject = _raw()

    @property
    def id(self) -> str:
        """
        The command's id: its own, else its request's.
        """
        return self.commandId or self.requestId


@frozen(kw_only=True)
class ChimeRequest:
    """
    C{POST /sessions/:id/chimes}: a collaborator's attributed words.
    """

    requestId: str
    author: str
    text: str
    delivery: Delivery = "follow_up"
    raw: JSONObject = _raw()


@frozen(kw_only=True)
class GrantRequest:
    """
    C{POST /account/grants}: credit for an account.
    """

    principal: str
    amountUsd: float
    source: Literal["purchase", "operator"]
    idempotencyKey: str
    requestId: str | None = None
    note: str | None = None
    raw: JSONObject = _raw()
