# -*- test-case-name: tests.unit.test_acp -*-
"""
What the Agent Client Protocol and the host say to each other, without
I/O: an editor's prompt as a command's C{text} and C{contextRefs}; the
host's events, transcript and summaries as C{session/update}s, replays and
C{SessionInfo}s; how a command ended as a prompt's stop reason; the host's
refusals as JSON-RPC errors.
"""

from __future__ import annotations

import re
from typing import Callable, Sequence

from attrs import define, field, frozen

from vehicle.body import stripContextNote
from vehicle.clients._acprpc import (
    AUTH_REQUIRED,
    INTERNAL_ERROR,
    INVALID_PARAMS,
    RESOURCE_NOT_FOUND,
    RPCError,
)
from vehicle.protocol import JSON, JSONObject, objectOf, objectsOf, textOf


#: What a command's C{contextRefs} may hold (the host's limits).
MAX_CONTEXT_REFS = 64
MAX_CONTEXT_REF = 300

#: The host's refusals that are the caller's credentials, or the caller's
#: own mistake in the request (JSON-RPC "invalid params").
_AUTH_CODES = frozenset({"unauthorized", "identity_required", "invalid_identity"})
_PARAMS_CODES = frozenset(
    {
        "invalid_request",
        "invalid_json",
        "body_too_large",
        "graph_mismatch",
        "model_not_allowed",
        "invalid_model_key",
    }
)

#: pi's words when a provider refused to answer (its C{stopReason} is then
#: C{error}): OpenAI-style C{content_filter}, Anthropic's C{refusal} and
#: C{sensitive}, Google's safety stops.
_REFUSAL = re.compile(r"content_filter|refus|sensitive|safety|prohibited", re.IGNORECASE)

#: A tool's kind (ACP's C{ToolKind}) by words in its name, first match wins.
_KINDS: Sequence[tuple[str, str]] = (
    ("bash", "execute"),
    ("exec", "execute"),
    ("search", "search"),
    ("find", "search"),
    ("grep", "search"),
    ("delete", "delete"),
    ("trash", "delete"),
    ("remove", "delete"),
    ("move", "move"),
    ("rename", "move"),
    ("edit", "edit"),
    ("write", "edit"),
    ("create", "edit"),
    ("update", "edit"),
    ("fetch", "fetch"),
    ("read", "read"),
    ("get", "read"),
    ("list", "read"),
)


def toolKind(name: str | None) -> str:
    """
    ACP's kind for a tool, from its name (C{other} when nothing fits).
    """
    lowered = (name or "").lower()
    for word, kind in _KINDS:
        if word in lowered:
            return kind
    return "other"


def promptCommand(blocks: Sequence[JSONObject]) -> tuple[str, list[str]]:
    """
    An editor's prompt as a command's C{text} and C{contextRefs}: text
    blocks in order; each resource link's name in its place in the text and
    its URI among the C{contextRefs} (what the person had open).

    @raise RPCError: C{INVALID_PARAMS} for a content type this agent does
        not advertise (images, audio, embedded resources), a malformed
        block, no text at all, or more references than the host takes.
    """
    parts: list[str] = []
    refs: list[str] = []
    for index, block in enumerate(blocks):
        kind = block.get("type")
        where = f"prompt[{index}]"
        if kind == "text":
            text = block.get("text")
            if not isinstance(text, str):
                raise RPCError(
                    INVALID_PARAMS, f"Invalid params: {where}.text is a string", {"field": where}
                )
            parts.append(text)
        elif kind == "resource_link":
            uri, name = block.get("uri"), block.get("name")
            if not isinstance(uri, str) or not uri or not isinstance(name, str):
                raise RPCError(
                    INVALID_PARAMS,
                    f"Invalid params: {where} is a resource link with a uri and a name",
                    {"field": where},
                )
            if len(uri) > MAX_CONTEXT_REF:
                raise RPCError(
                    INVALID_PARAMS,
                    f"Invalid params: {where}.uri is longer than {MAX_CONTEXT_REF} characters",
                    {"field": where},
                )
            parts.append(name)
            if uri not in refs:
                refs.append(uri)
        else:
            raise RPCError(
                INVALID_PARAMS,
                f"Invalid params: {where} is {kind!r}; this agent takes text and resource_link "
                "blocks only (its promptCapabilities)",
                {"field": where},
            )
    if len(refs) > MAX_CONTEXT_REFS:
        raise RPCError(
            INVALID_PARAMS,
            f"Invalid params: at most {MAX_CONTEXT_REFS} resource links a prompt",
            {"field": "prompt"},
        )
    text = "".join(parts)
    if not text.strip():
        raise RPCError(INVALID_PARAMS, "Invalid params: the prompt has no text", {"field": "prompt"})
    return text, refs


def rpcErrorFor(frame: JSONObject, explain: Callable[[JSONObject], str]) -> RPCError:
    """
    The JSON-RPC error for a refusal by the host or gardend (an C{error}
    frame): credentials are "authentication required", an unknown session
    "resource not found", a malformed request "invalid params", anything
    else (a held lease, a session running, gardend unreachable) an error
    of the implementation.  C{data} carries the host's C{code} and
    C{details}.

    @param explain: one line for the person (L{explainRefusal}'s).
    """
    code = str(frame.get("code") or "error")
    data: JSONObject = {"code": code, "details": frame.get("details")}
    if code in _AUTH_CODES:
        return RPCError(AUTH_REQUIRED, explain(frame), data)
    if code == "not_found":
        return RPCError(RESOURCE_NOT_FOUND, f"not found: {frame.get('message')}", data)
    if code in _PARAMS_CODES:
        return RPCError(INVALID_PARAMS, f"Invalid params: {frame.get('message')}", data)
    return RPCError(INTERNAL_ERROR, f"{code}: {frame.get('message')}", data)


def leaseHeldMessage(sessionId: str, holder: JSON, canTakeOver: bool) -> str:
    """
    Why a prompt cannot be sent: another client drives the session
    (C{holder}, the refusal's C{details.holder}).
    """
    lease = objectOf(holder)
    who = f"client {lease.get('clientId', '?')} of {lease.get('principal', '?')}"
    text = f"session {sessionId} is driven by another {who}"
    if canTakeOver:
        return (
            text + ": it is yours elsewhere (another editor, a ride); start vehicle acp with "
            '--takeover, or send _meta {"vehicle": {"takeover": true}}, to take it over'
        )
    return text + ": it cannot be taken over"


def _text(item: JSONObject) -> str:
    """
    An item's C{text}, or C{""}.
    """
    return textOf(item.get("text")) or ""


def _textBlock(text: str) -> JSONObject:
    return {"type": "text", "text": text}


# -- session/update's updates --------------------------------------------------


@frozen
class MessageChunk:
    """
    Words said: a C{user_message_chunk} or an C{agent_message_chunk}; or
    thought: an C{agent_thought_chunk}.
    """

    kind: str
    text: str
    messageId: str | None = None

    def toJSON(self) -> JSONObject:
        update: JSONObject = {"sessionUpdate": self.kind, "content": _textBlock(self.text)}
        if self.messageId is not None:
            update["messageId"] = self.messageId
        return update


@frozen
class ToolCall:
    """
    A C{tool_call}: a tool call seen for the first time, titled by its
    tool's name, of the kind that name says (L{toolKind}).
    """

    toolCallId: str
    name: str | None
    status: str

    @property
    def title(self) -> str:
        return self.name or "tool"

    @property
    def kind(self) -> str:
        return toolKind(self.name)

    def toJSON(self) -> JSONObject:
        return {
            "sessionUpdate": "tool_call",
            "toolCallId": self.toolCallId,
            "title": self.title,
            "kind": self.kind,
            "status": self.status,
            "rawInput": {},
        }


@frozen(kw_only=True)
class ToolCallUpdate:
    """
    A C{tool_call_update}: a call's new status, or its output, or both.
    """

    toolCallId: str
    status: str | None = None
    output: str | None = None

    def toJSON(self) -> JSONObject:
        update: JSONObject = {"sessionUpdate": "tool_call_update", "toolCallId": self.toolCallId}
        if self.status is not None:
            update["status"] = self.status
        if self.output is not None:
            update["content"] = [{"type": "content", "content": _textBlock(self.output)}]
        return update


@frozen
class SessionInfoUpdate:
    """
    A C{session_info_update}: the session's new title.
    """

    title: JSON

    def toJSON(self) -> JSONObject:
        return {"sessionUpdate": "session_info_update", "title": self.title}


#: One change of a session, told to the editor (C{session/update}'s C{update}).
Update = MessageChunk | ToolCall | ToolCallUpdate | SessionInfoUpdate


def _calls(item: JSONObject) -> list[tuple[str, str | None]]:
    """
    The id and tool name of each of an item's C{toolCalls}.
    """
    calls = []
    for call in objectsOf(item.get("toolCalls")):
        callId = textOf(call.get("id"))
        if callId is not None:
            calls.append((callId, textOf(call.get("name"))))
    return calls


def pairResults(transcript: Sequence[JSONObject]) -> list[tuple[str, JSONObject]]:
    """
    Each tool result of a transcript with the id of the call it answers
    (the transcript's results carry no id: they follow their assistant
    message, one per call, matched by the tool's name in order).
    """
    unanswered: list[tuple[str, str | None]] = []
    pairs = []
    for item in transcript:
        role = item.get("role")
        if role == "assistant":
            unanswered = _calls(item)
        elif role == "toolResult" and unanswered:
            name = item.get("toolName")
            match = next((call for call in unanswered if call[1] == name), unanswered[0])
            unanswered.remove(match)
            pairs.append((match[0], item))
    return pairs


#: The chunks of an agent's message: its words, and what it thought first
#: (a message of its own, as ACP tells thoughts apart from words: the
#: message's id with C{-thought}).
WORDS = "agent_message_chunk"
THOUGHT = "agent_thought_chunk"

#: The host's ephemeral deltas, by the chunk each streams as.
_STREAMED = {"message.delta": WORDS, "thinking.delta": THOUGHT}


def _thoughtId(messageId: str) -> str:
    """
    The id of the thought before the message C{messageId}.
    """
    return messageId + "-thought"


def replay(transcript: Sequence[JSONObject]) -> list[Update]:
    """
    A session's transcript as the updates that show it again
    (C{session/load}): the person's words, the replies (each after what
    the model thought first, when it showed that), each tool call with its
    status and output.
    """
    results = {id(item): callId for callId, item in pairResults(transcript)}
    updates: list[Update] = []
    for item in transcript:
        role = item.get("role")
        text = _text(item)
        messageId = textOf(item.get("entryId"))
        if role == "user" and text:
            updates.append(MessageChunk("user_message_chunk", stripContextNote(text), messageId))
        elif role == "assistant":
            thinking = textOf(item.get("thinking"))
            if thinking:
                updates.append(MessageChunk(
                    THOUGHT, thinking, None if messageId is None else _thoughtId(messageId)))
            if text:
                updates.append(MessageChunk(WORDS, text, messageId))
            for callId, name in _calls(item):
                updates.append(ToolCall(callId, name, "pending"))
        elif role == "toolResult" and id(item) in results:
            updates.append(
                ToolCallUpdate(
                    toolCallId=results[id(item)],
                    status="failed" if item.get("isError") else "completed",
                    output=text,
                )
            )
    return updates


def sessionInfo(summary: JSONObject, cwd: str) -> JSONObject:
    """
    A summary as ACP's C{SessionInfo}: its title, else its preview.  A
    vehicle session belongs to a graph, not a folder: C{cwd} is the one
    the listing was asked for.
    """
    info: JSONObject = {"sessionId": summary["sessionId"], "cwd": cwd}
    title = summary.get("title") or summary.get("preview")
    if isinstance(title, str) and title:
        info["title"] = title
    updatedAt = textOf(summary.get("updatedAt"))
    if updatedAt is not None:
        info["updatedAt"] = updatedAt
    return info


@frozen(kw_only=True)
class RunOutcome:
    """
    How a run ended, as far as a prompt's stop reason needs.
    """

    aborted: bool
    stopReason: str | None = None
    errorMessage: str | None = None
    budget: str | None = None


def stopReason(
    terminal: str,
    data: JSONObject,
    run: RunOutcome | None,
    cancelled: bool,
) -> str:
    """
    The stop reason of a prompt whose command ended C{terminal}
    (C{completed}, C{aborted}, C{cancelled}, C{failed}, C{interrupted})
    with event C{data}, after C{run} (the last run that settled).

    @param cancelled: the editor sent C{session/cancel} for it.
    @raise RPCError: the command failed, was interrupted, or the model
        failed: the prompt is answered with an error.
    """
    if cancelled:
        return "cancelled"
    if terminal == "failed":
        raise RPCError(
            INTERNAL_ERROR,
            f"the prompt failed: {data.get('error') or 'no reason given'}",
            {"code": data.get("code") or "command_failed"},
        )
    if terminal == "interrupted":
        raise RPCError(
            INTERNAL_ERROR,
            f"the prompt was interrupted: {data.get('reason') or 'the host stopped'}",
            {"code": "command_interrupted"},
        )
    if terminal == "cancelled":
        return "max_turn_requests" if data.get("reason") == "budget_exceeded" else "cancelled"
    if run is not None and run.budget is not None:
        return "max_turn_requests"
    if terminal == "aborted":
        return "cancelled"
    if run is None:
        return "end_turn"
    if run.stopReason == "length":
        return "max_tokens"
    if run.stopReason == "error":
        message = run.errorMessage or "the model request failed"
        if _REFUSAL.search(message):
            return "refusal"
        raise RPCError(INTERNAL_ERROR, f"the model failed: {message}", {"code": "run_error"})
    if run.stopReason == "body_exited":
        raise RPCError(
            INTERNAL_ERROR, "the session's body died during the run", {"code": "body_exited"}
        )
    if run.aborted:
        return "cancelled"
    return "end_turn"


#: Terminal command events, by the status they carry.
TERMINAL = {
    "command.completed": "completed",
    "command.aborted": "aborted",
    "command.cancelled": "cancelled",
    "command.failed": "failed",
    "command.interrupted": "interrupted",
}


@define
class EventMapper:
    """
    One session's events as C{session/update}s, in order.

    Tracks what a live stream needs: the text and the thinking streamed of
    the assistant message under way (so its C{message.completed} adds only
    what is missing), the tool calls seen and those whose output is still to be
    read from the transcript, the prompts this editor sent (whose user
    message it already shows), and how the last run ended.

    @ivar gap: deltas may have been missed (the stream was joined or
        rejoined mid-message): deltas are held back until the message
        completes, which then sends what the editor has not seen.
    @ivar awaiting: tool calls that ended whose output is not shown yet.
    @ivar lastRun: how the last run that settled ended.
    """

    gap: bool = False
    awaiting: list[str] = field(factory=list)
    lastRun: RunOutcome | None = None
    #: What the deltas said of the message under way, by chunk kind.
    _said: dict[str, str] = field(factory=dict)
    _messages: int = 0
    _runId: str = "run"
    _ownTexts: list[str] = field(factory=list)
    _tools: dict[str, str | None] = field(factory=dict)
    _budget: str | None = None
    _lastStop: str | None = None
    _lastError: str | None = None

    def expectUser(self, text: str) -> None:
        """
        This editor sent C{text}: its user message is not shown again.
        """
        self._ownTexts.append(text)

    def forgetUser(self, text: str) -> None:
        """
        C{text} was not sent after all (the host refused it).
        """
        if text in self._ownTexts:
            self._ownTexts.remove(text)

    def _messageId(self) -> str:
        return f"{self._runId}-m{self._messages}"

    def feed(self, event: JSONObject) -> list[Update]:
        """
        The updates one event makes (often none).
        """
        kind = event.get("type")
        data = event.get("data")
        if not isinstance(data, dict):
            return []
        if kind in _STREAMED:
            return self._piece(_STREAMED[kind], data)
        if kind == "message.completed":
            return self._completed(data)
        if kind == "run.started":
            self._runId = str(data.get("runId") or "run")
            self._messages = 0
            self._budget = self._lastStop = self._lastError = None
            return []
        if kind == "budget.exceeded":
            self._budget = str(data.get("reason") or "budget")
            return []
        if kind == "run.settled":
            self.lastRun = RunOutcome(
                aborted=bool(data.get("aborted")),
                stopReason=textOf(data.get("stopReason")) or self._lastStop,
                errorMessage=self._lastError,
                budget=self._budget,
            )
            self.gap = False
            self._said = {}
            return []
        if kind == "tool.started":
            return self._toolStarted(data)
        if kind == "tool.result":
            return self._toolResult(data)
        if kind == "session.renamed":
            return [SessionInfoUpdate(data.get("title"))]
        return []

    def _chunkId(self, kind: str) -> str:
        messageId = self._messageId()
        return _thoughtId(messageId) if kind == THOUGHT else messageId

    def _piece(self, kind: str, data: JSONObject) -> list[Update]:
        text = textOf(data.get("text"))
        if self.gap or not text:
            return []
        self._said[kind] = self._said.get(kind, "") + text
        return [MessageChunk(kind, text, self._chunkId(kind))]

    def _completed(self, data: JSONObject) -> list[Update]:
        text = _text(data)
        if data.get("role") == "user":
            for own in self._ownTexts:
                if text.startswith(own):
                    self._ownTexts.remove(own)
                    return []
            return [MessageChunk("user_message_chunk", stripContextNote(text))] if text else []
        updates: list[Update] = []
        said, self._said = self._said, {}
        # What the model thought, then what it said: each as far as its
        # deltas did not carry it.
        for kind, whole in ((THOUGHT, textOf(data.get("thinking")) or ""), (WORDS, text)):
            before = said.get(kind, "")
            if whole.startswith(before) and len(whole) > len(before):
                updates.append(MessageChunk(kind, whole[len(before):], self._chunkId(kind)))
        self.gap = False
        self._messages += 1
        stop, error = textOf(data.get("stopReason")), textOf(data.get("errorMessage"))
        if stop is not None:
            self._lastStop = stop
        if error is not None:
            self._lastError = error
        for callId, name in _calls(data):
            if callId not in self._tools:
                self._tools[callId] = name
                updates.append(ToolCall(callId, name, "pending"))
        return updates

    def _toolStarted(self, data: JSONObject) -> list[Update]:
        callId = textOf(data.get("toolCallId"))
        if callId is None:
            return []
        if callId not in self._tools:
            name = self._tools[callId] = textOf(data.get("toolName"))
            return [ToolCall(callId, name, "in_progress")]
        return [ToolCallUpdate(toolCallId=callId, status="in_progress")]

    def _toolResult(self, data: JSONObject) -> list[Update]:
        callId = textOf(data.get("toolCallId"))
        if callId is None:
            return []
        self._tools.setdefault(callId, textOf(data.get("toolName")))
        if callId not in self.awaiting:
            self.awaiting.append(callId)
        return [
            ToolCallUpdate(toolCallId=callId, status="failed" if data.get("isError") else "completed")
        ]

    def outputs(self, transcript: Sequence[JSONObject]) -> list[Update]:
        """
        The output of each awaited tool call the transcript now holds; the
        rest stay awaited.
        """
        updates: list[Update] = []
        for callId, item in pairResults(transcript):
            if callId in self.awaiting:
                self.awaiting.remove(callId)
                updates.append(ToolCallUpdate(toolCallId=callId, output=_text(item)))
        return updates
