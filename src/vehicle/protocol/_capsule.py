# -*- test-case-name: tests.unit.test_hardening -*-
"""
The capsule (spec, "Capsule"): a bounded summary of a session that is
safe to hand over: identity, posture, counts and the shape of the
conversation, never a secret, the text of a command or chime, tool
arguments or results, or any authority.
"""

from __future__ import annotations

from typing import Literal

from attrs import frozen

from vehicle.protocol._answers import BodyState, Parent, RunBudget
from vehicle.protocol._commands import Holder, omitted
from vehicle.protocol._json import JSONObject


CAPSULE_FORMAT = "sophia.vehicle-session-capsule.v2"


@frozen(kw_only=True)
class CapsuleIdentity:
    sessionId: str
    graphId: str
    profile: Literal["chat", "agent"]
    access: Literal["read", "write"]
    model: str
    parent: Parent | None
    isolation: str | None = omitted()


@frozen(kw_only=True)
class CapsulePosture:
    status: Literal["idle", "running"]
    body: BodyState
    cursor: int
    leaseHolder: Holder | None
    budget: RunBudget


@frozen(kw_only=True)
class CommandLine:
    """
    One of the last commands: what it was and where it stands, never its
    words.
    """

    commandId: str
    type: str
    status: str
    acceptedAt: str


@frozen(kw_only=True)
class CapsuleCommands:
    counts: dict[str, int]
    last: tuple[CommandLine, ...]


@frozen(kw_only=True)
class CapsuleItem:
    """
    One item of the transcript's tail: assistant text (capped) and tool
    names, a user turn's length only, a tool result's name and error flag.
    """

    role: Literal["assistant", "user", "toolResult"]
    text: str | None = omitted()
    tools: tuple[str | None, ...] | None = omitted()
    length: int | None = omitted()
    toolName: str | None = omitted()
    isError: bool | None = omitted()
    timestamp: str | None


@frozen(kw_only=True)
class Authority:
    mutations: Literal[False] = False


@frozen(kw_only=True)
class Capsule:
    """
    C{session.capsule}: C{GET /sessions/:id/capsule}.

    @ivar milestones: the events that mark the way of the conversation,
        each with its ids, statuses and counts only.
    """

    format: str = CAPSULE_FORMAT
    identity: CapsuleIdentity
    posture: CapsulePosture
    commands: CapsuleCommands
    milestones: tuple[JSONObject, ...]
    transcript: tuple[CapsuleItem, ...]
    authority: Authority = Authority()
