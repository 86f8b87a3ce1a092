# -*- test-case-name: tests.unit.test_translate -*-
"""
pi's stdout records turned into the host's events, without I/O.

Owns the naming of runs, the per-run totals, pi's queue as last reported,
and what of a record is kept (no tool arguments or results, texts capped).
"""

from __future__ import annotations

import json

from attrs import define, field, frozen

from vehicle.body._pimessage import PiMessage
from vehicle.body._sessionfile import MAX_TEXT_BYTES, capText
from vehicle.protocol import JSON, JSONObject, PiQueue, loads, objectOf, textOf


#: The prefix of a C{notify} message by which the extension reports a budget
#: stop: C{"sophia.budget " + JSON object}.
BUDGET_NOTICE_PREFIX = "sophia.budget "

#: The prefix of the C{notify} by which the extension names the active tools
#: before each run: C{"sophia.tools " + JSON list of names}.
TOOLS_NOTICE_PREFIX = "sophia.tools "

#: Extension UI methods that expect no answer (pi's fire-and-forget kinds).
_UI_NO_ANSWER = frozenset({"setStatus", "setWidget", "setTitle", "set_editor_text"})

#: pi's streamed pieces of an assistant message -> the ephemeral event that
#: carries each: its words, and what it thought before them.
_DELTAS: dict[JSON, str] = {"text_delta": "message.delta", "thinking_delta": "thinking.delta"}

#: pi record type -> the L{Translator} method that handles it.
_HANDLERS = {
    kind: "_on_" + kind
    for kind in (
        "agent_start",
        "agent_end",
        "agent_settled",
        "message_end",
        "message_update",
        "tool_execution_start",
        "tool_execution_end",
        "queue_update",
        "auto_retry_start",
        "compaction_start",
        "compaction_end",
        "extension_error",
        "extension_ui_request",
    )
}


@frozen
class HostEvent:
    """
    One event for the session's log.

    @ivar type: the event type (C{run.started}, ...), or C{ui.request} for an
        extension UI request the host must answer (C{data} is pi's record).
    @ivar data: the payload.
    @ivar durable: C{False} for what is never logged (deltas, UI requests).
    """

    type: str
    data: JSONObject
    durable: bool = True


def _capped(text: JSON) -> tuple[str, bool]:
    return capText(text if isinstance(text, str) else "", MAX_TEXT_BYTES)


def _scalars(record: JSONObject, skip: frozenset[str]) -> JSONObject:
    """
    The fields of C{record} that are neither objects nor lists, texts
    capped.
    """
    out: JSONObject = {}
    for key, value in record.items():
        if key in skip or isinstance(value, (dict, list)):
            continue
        out[key] = _capped(value)[0] if isinstance(value, str) else value
    return out


def _notice(message: str, prefix: str) -> JSON:
    """
    The JSON after C{prefix} in one of the extension's notices (L{None}
    when it does not parse).
    """
    try:
        return loads(message[len(prefix):])
    except ValueError:
        return None


def _strings(value: JSON) -> tuple[str, ...]:
    """
    The strings of a JSON list (anything else: none).
    """
    return tuple(v for v in value if isinstance(v, str)) if isinstance(value, list) else ()


@define
class Translator:
    """
    Turns the records of one pi process into L{HostEvent}s.

    A run is everything from C{agent_start} to C{agent_settled}; a retry's
    C{agent_start} after C{agent_end{willRetry: true}} continues the same run.

    @ivar currentRunId: the id of the open run, or of the last one once it
        settled; C{None} before the first.
    @ivar runOpen: whether a run has started and not settled.
    @ivar queue: pi's queue as last reported.
    @ivar tools: the names of the active tools, as set by L{setTools}.
    """

    currentRunId: str | None = field(init=False, default=None)
    runOpen: bool = field(init=False, default=False)
    queue: PiQueue = field(init=False, factory=PiQueue)
    tools: list[str] = field(init=False, factory=list)
    #: The runs numbered so far (a revived body goes on from the log's).
    _runCount: int = 0
    _awaitingRetry: bool = field(init=False, default=False)
    _turns: int = field(init=False, default=0)
    _costUsd: float = field(init=False, default=0.0)
    _lastStopReason: str | None = field(init=False, default=None)

    @property
    def runCostUsd(self) -> float:
        """
        What the open (or last) run has cost so far, by pi's usage.
        """
        return round(self._costUsd, 9)

    def setTools(self, tools: list[str]) -> None:
        """
        Record the active tools' names (from C{get_state}/C{get_tools}); the
        next C{run.started} carries them.
        """
        self.tools = list(tools)

    def feed(self, record: JSONObject) -> list[HostEvent]:
        """
        Translate one stdout record (not a C{response}).

        @return: the host events it yields, often none.
        """
        kind = record.get("type")
        name = _HANDLERS.get(kind) if isinstance(kind, str) else None
        if name is None:
            return []
        result: list[HostEvent] = getattr(self, name)(record)
        return result

    def _run(self) -> JSONObject:
        return {} if self.currentRunId is None else {"runId": self.currentRunId}

    def _on_agent_start(self, record: JSONObject) -> list[HostEvent]:
        if self.runOpen and self._awaitingRetry:
            self._awaitingRetry = False
            return []
        self._runCount += 1
        self.currentRunId = f"run-{self._runCount}"
        self.runOpen = True
        self._awaitingRetry = False
        self._turns = 0
        self._costUsd = 0.0
        self._lastStopReason = None
        return [
            HostEvent(
                "run.started", {"runId": self.currentRunId, "tools": list(self.tools)}
            )
        ]

    def _on_agent_end(self, record: JSONObject) -> list[HostEvent]:
        willRetry = bool(record.get("willRetry", False))
        self._awaitingRetry = willRetry
        return [HostEvent("run.ended", {**self._run(), "willRetry": willRetry})]

    def _on_agent_settled(self, record: JSONObject) -> list[HostEvent]:
        data: JSONObject = {
            **self._run(),
            "aborted": bool(record.get("aborted", False)),
        }
        if self._lastStopReason is not None:
            data["stopReason"] = self._lastStopReason
        data["turns"] = self._turns
        data["costUsd"] = round(self._costUsd, 9)
        self.runOpen = False
        self._awaitingRetry = False
        return [HostEvent("run.settled", data)]

    def _on_message_end(self, record: JSONObject) -> list[HostEvent]:
        raw = record.get("message")
        if not isinstance(raw, dict):
            return []
        message = PiMessage.fromJSON(raw)
        if message.role not in ("user", "assistant"):
            return []
        text, truncated = _capped(message.text)
        data: JSONObject = {**self._run(), "role": message.role, "text": text}
        if truncated:
            data["truncated"] = True
        if message.role == "user":
            return [HostEvent("message.completed", data)]
        return self._assistantEnded(message, data)

    def _assistantEnded(self, message: PiMessage, data: JSONObject) -> list[HostEvent]:
        """
        An assistant message ended: a turn of the run, its cost counted;
        C{run.error} too when the model request failed.
        """
        usage = message.usage
        self._turns += 1
        self._costUsd += usage.costUsd
        if message.stopReason is not None:
            self._lastStopReason = message.stopReason
        data["toolCalls"] = [call.toJSON() for call in message.toolCalls]
        if message.thoughts:
            thinking, cut = _capped(message.thinking)
            data["thinking"] = thinking
            if cut:
                data["thinkingTruncated"] = True
        data["stopReason"] = message.stopReason
        data["usage"] = usage.toJSON()
        errorMessage = None
        if message.errorMessage is not None:
            errorMessage = _capped(message.errorMessage)[0]
            data["errorMessage"] = errorMessage
        events = [HostEvent("message.completed", data)]
        if message.stopReason == "error":
            events.append(
                HostEvent(
                    "run.error",
                    {
                        **self._run(),
                        "message": errorMessage
                        if errorMessage is not None
                        else "The model request failed.",
                    },
                )
            )
        return events

    def _on_message_update(self, record: JSONObject) -> list[HostEvent]:
        update = record.get("assistantMessageEvent")
        if not isinstance(update, dict):
            return []
        kind = _DELTAS.get(update.get("type"))
        if kind is None:
            return []
        text, _ = _capped(update.get("delta"))
        return [HostEvent(kind, {**self._run(), "text": text}, durable=False)]

    def _on_tool_execution_start(self, record: JSONObject) -> list[HostEvent]:
        args = record.get("args")
        argsBytes = len(
            json.dumps(args, ensure_ascii=False, separators=(",", ":")).encode(
                "utf-8", "surrogatepass"
            )
        )
        return [
            HostEvent(
                "tool.started",
                {
                    **self._run(),
                    "toolCallId": record.get("toolCallId"),
                    "toolName": record.get("toolName"),
                    "argsBytes": argsBytes,
                },
            )
        ]

    def _on_tool_execution_end(self, record: JSONObject) -> list[HostEvent]:
        data: JSONObject = {
            **self._run(),
            "toolCallId": record.get("toolCallId"),
            "toolName": record.get("toolName"),
            "isError": bool(record.get("isError", False)),
        }
        durationMs = record.get("durationMs")
        if isinstance(durationMs, (int, float)):
            data["durationMs"] = durationMs
        return [HostEvent("tool.result", data)]

    def _on_queue_update(self, record: JSONObject) -> list[HostEvent]:
        self.queue = PiQueue(
            steering=_strings(record.get("steering")),
            followUp=_strings(record.get("followUp")),
        )
        return [
            HostEvent(
                "queue.updated",
                {
                    "steering": [_capped(t)[0] for t in self.queue.steering],
                    "followUp": [_capped(t)[0] for t in self.queue.followUp],
                },
            )
        ]

    def _on_auto_retry_start(self, record: JSONObject) -> list[HostEvent]:
        return [
            HostEvent(
                "retry.started",
                {
                    "attempt": record.get("attempt"),
                    "maxAttempts": record.get("maxAttempts"),
                    "delayMs": record.get("delayMs"),
                    "errorMessage": _capped(record.get("errorMessage"))[0],
                },
            )
        ]

    def _on_compaction_start(self, record: JSONObject) -> list[HostEvent]:
        return [HostEvent("compaction.started", _scalars(record, frozenset({"type"})))]

    def _on_compaction_end(self, record: JSONObject) -> list[HostEvent]:
        data = _scalars(record, frozenset({"type"}))
        tokensBefore = objectOf(record.get("result")).get("tokensBefore")
        if isinstance(tokensBefore, (int, float)):
            data["tokensBefore"] = tokensBefore
        return [HostEvent("compaction.ended", data)]

    def _on_extension_error(self, record: JSONObject) -> list[HostEvent]:
        error = record.get("error", record.get("message"))
        if isinstance(error, dict):
            error = error.get("message")
        return [HostEvent("extension.error", {"message": _capped(error)[0]})]

    def _on_extension_ui_request(self, record: JSONObject) -> list[HostEvent]:
        method = record.get("method")
        if method == "notify":
            message = textOf(record.get("message")) or ""
            return self._notified(message, record.get("notifyType", "info"))
        if method in _UI_NO_ANSWER:
            return []
        return [HostEvent("ui.request", dict(record), durable=False)]

    def _notified(self, message: str, notifyType: JSON) -> list[HostEvent]:
        """
        A C{notify}: the extension naming the active tools (before each
        run) or reporting a budget stop, or a notice for the log.
        """
        if message.startswith(TOOLS_NOTICE_PREFIX):
            names = _notice(message, TOOLS_NOTICE_PREFIX)
            tools = _strings(names)
            if isinstance(names, list) and len(tools) == len(names):
                self.tools = list(tools)
            return []
        if message.startswith(BUDGET_NOTICE_PREFIX):
            facts = _notice(message, BUDGET_NOTICE_PREFIX)
            if isinstance(facts, dict):
                return [HostEvent("budget.exceeded", {**facts, **self._run()})]
        return [
            HostEvent(
                "body.notice",
                {"message": _capped(message)[0], "notifyType": notifyType},
            )
        ]
