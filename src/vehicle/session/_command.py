# -*- test-case-name: tests.test_conductor -*-
"""
A command as the session hands it to its body: a frozen value.  The session
owns the command's record (its status, its answer); whoever delivers it
keeps its own facts about it in its own fields.
"""

from __future__ import annotations

from typing import Any, Mapping

from attrs import field, frozen


@frozen(kw_only=True)
class Command:
    """
    One accepted command, as its deliverer reads it.

    @ivar by: the holder that sent it (C{principal}, C{clientId}).
    @ivar delivery: how a text command goes to pi while a run goes on
        (C{steer} or C{follow_up}), if the request named it.
    """

    commandId: str
    type: str
    by: Mapping[str, Any] = field(factory=dict)
    text: str | None = None
    contextRefs: tuple[str, ...] = ()
    chimeAuthor: str | None = None
    targetCommandId: str | None = None
    delivery: str | None = None

    @classmethod
    def fromRecord(cls, record: Mapping[str, Any]) -> "Command":
        """
        The value of a command's record (L{Session.commands}).
        """
        return cls(
            commandId=record["commandId"],
            type=record["type"],
            by=dict(record.get("by") or {}),
            text=record.get("text"),
            contextRefs=tuple(record.get("contextRefs") or ()),
            chimeAuthor=record.get("chimeAuthor"),
            targetCommandId=record.get("targetCommandId"),
            delivery=record.get("delivery"),
        )

    @property
    def hasText(self) -> bool:
        return self.text is not None
