# -*- test-case-name: tests.unit.test_protocol -*-
"""
A line of a session's request log (C{commands.jsonl}): one accepted request
remembered whole, so that a retry replays it and start rebuilds from it.
"""

from __future__ import annotations

from typing import Literal

from attrs import frozen

from vehicle.protocol._commands import Command, omitted
from vehicle.protocol._json import JSONObject


#: What kind of request a record remembers.
RecordKind = Literal[
    "create", "claim", "release", "rename", "command", "policy", "branch", "chime", "branched"
]


@frozen(kw_only=True)
class RequestRecord:
    """
    One accepted request: who sent it, its fingerprint on its route, its
    payload (C{body}, its name in the log) and its answer as sent; for a
    session's own requests, the events it implies (C{effects}, numbered on
    from C{cursor}) so that start finishes what a cut host left; the
    command it made, whole; for a branch, its source.  The host writes
    every field it has; a record of an older host may lack some (L{None}).
    """

    kind: RecordKind
    requestId: str | None
    principal: str
    clientId: str
    fingerprint: str | None = omitted()
    at: str | None = omitted()
    body: JSONObject
    frame: JSONObject
    cursor: int | None = omitted()
    effects: list[tuple[str, JSONObject]] | None = omitted()
    command: Command | None = omitted()
    source: str | None = omitted()

