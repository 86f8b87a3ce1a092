# -*- test-case-name: tests.unit.test_sessionfile,tests.unit.test_translate -*-
"""
pi's message as the host reads it, once, at the edge: its role, its text
parts, its thinking parts, its tool calls (without their arguments), its usage, why it stopped.
The same shape comes from a session file's C{message} entry and from an RPC
C{message_end} event (pi.md 3.4); whatever else pi puts in a message the
host does not read.
"""

from __future__ import annotations

from attrs import frozen

from vehicle.protocol import JSON, JSONObject, objectOf, textOf


def _count(value: JSON) -> int | float:
    """
    A number of pi's usage block as it is (an int stays an int on the
    wire); anything else counts as 0.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return 0
    return value


@frozen(kw_only=True)
class ToolCall:
    """
    One tool call of an assistant message: its id and the tool's name,
    never its arguments.
    """

    id: str | None
    name: str | None

    def toJSON(self) -> JSONObject:
        """
        C{{"id", "name"}}, as events and the transcript carry it.
        """
        return {"id": self.id, "name": self.name}


@frozen(kw_only=True)
class Usage:
    """
    What one assistant message cost, by pi's usage block (tokens, and the
    dollars of C{cost.total}).
    """

    input: int | float = 0
    output: int | float = 0
    cacheRead: int | float = 0
    cacheWrite: int | float = 0
    totalTokens: int | float = 0
    costUsd: int | float = 0

    @classmethod
    def fromJSON(cls, value: JSON) -> Usage:
        """
        Read pi's C{usage}; what is missing or not a number counts as 0.
        """
        usage = objectOf(value)
        cost = usage.get("cost")
        return cls(
            input=_count(usage.get("input")),
            output=_count(usage.get("output")),
            cacheRead=_count(usage.get("cacheRead")),
            cacheWrite=_count(usage.get("cacheWrite")),
            totalTokens=_count(usage.get("totalTokens")),
            costUsd=_count(cost.get("total")) if isinstance(cost, dict) else 0,
        )

    def toJSON(self) -> JSONObject:
        """
        The C{usage} of a C{message.completed} event.
        """
        return {
            "input": self.input,
            "output": self.output,
            "cacheRead": self.cacheRead,
            "cacheWrite": self.cacheWrite,
            "totalTokens": self.totalTokens,
            "costUsd": self.costUsd,
        }


def _parts(content: JSON, kind: str) -> tuple[str, ...]:
    """
    The strings of a message's C{content} parts of type C{kind}, each read
    from the part's field of the same name (C{text} of a C{text} part,
    C{thinking} of a C{thinking} part); a plain string (a user message may
    be one) is its only text part.
    """
    if isinstance(content, str):
        return (content,) if kind == "text" else ()
    if not isinstance(content, list):
        return ()
    return tuple(
        value
        for part in content
        if isinstance(part, dict) and part.get("type") == kind
        for value in (part.get(kind),)
        if isinstance(value, str)
    )


def _toolCalls(content: JSON) -> tuple[ToolCall, ...]:
    if not isinstance(content, list):
        return ()
    return tuple(
        ToolCall(id=textOf(part.get("id")), name=textOf(part.get("name")))
        for part in content
        if isinstance(part, dict) and part.get("type") == "toolCall"
    )


@frozen(kw_only=True)
class PiMessage:
    """
    One of pi's messages.

    @ivar role: C{user}, C{assistant}, C{toolResult}, C{system}, or what
        else pi may write (L{None} when it wrote none).
    @ivar texts: its text parts, in order.
    @ivar thoughts: an assistant message's thinking parts, in order.
    @ivar toolCalls: an assistant message's tool calls.
    @ivar stopReason: why an assistant message ended (C{stop}, C{toolUse},
        C{error}, C{aborted}).
    @ivar errorMessage: pi's words for a failed model request.
    @ivar usage: an assistant message's usage.
    @ivar toolName: a tool result's tool.
    @ivar isError: whether a tool result is a failure.
    """

    role: str | None
    texts: tuple[str, ...] = ()
    thoughts: tuple[str, ...] = ()
    toolCalls: tuple[ToolCall, ...] = ()
    stopReason: str | None = None
    errorMessage: str | None = None
    usage: Usage = Usage()
    toolName: str | None = None
    isError: bool = False

    @classmethod
    def fromJSON(cls, message: JSONObject) -> PiMessage:
        """
        Read one of pi's message objects.
        """
        content = message.get("content")
        return cls(
            role=textOf(message.get("role")),
            texts=_parts(content, "text"),
            thoughts=tuple(thought for thought in _parts(content, "thinking") if thought),
            toolCalls=_toolCalls(content),
            stopReason=textOf(message.get("stopReason")),
            errorMessage=textOf(message.get("errorMessage")),
            usage=Usage.fromJSON(message.get("usage")),
            toolName=textOf(message.get("toolName")),
            isError=bool(message.get("isError", False)),
        )

    @property
    def text(self) -> str:
        """
        The visible text: the text parts joined by newlines.
        """
        return "\n".join(self.texts)

    @property
    def thinking(self) -> str:
        """
        What the model thought before it answered: the thinking parts
        joined by newlines (C{""} when it showed none).
        """
        return "\n".join(self.thoughts)
