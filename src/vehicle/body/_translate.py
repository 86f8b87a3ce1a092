# -*- test-case-name: tests.unit.test_translate -*-
"""
pi's stdout records turned into the host's events, without I/O.

Owns the naming of runs, the per-run totals, pi's queue as last reported,
and what of a record is kept (no tool arguments or results, texts capped).
"""

from __future__ import annotations

import json
from typing import Any, Mapping

from attrs import define, field, frozen

from vehicle.body._sessionfile import (
    MAX_TEXT_BYTES,
    capText,
    messageText,
    messageToolCalls,
)


#: The prefix of a C{notify} message by which the extension reports a budget
#: stop: C{"sophia.budget " + JSON object}.
BUDGET_NOTICE_PREFIX = "sophia.budget "

#: The prefix of the C{notify} by which the extension names the active tools
#: before each run: C{"sophia.tools " + JSON list of names}.
TOOLS_NOTICE_PREFIX = "sophia.tools "

#: Extension UI methods that expect no answer (pi's fire-and-forget kinds).
_UI_NO_ANSWER = frozenset({"setStatus", "setWidget", "setTitle", "set_editor_text"})

_SCALARS = (str, int, float, bool, type(None))

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
    data: dict[str, Any]
    durable: bool = True


def _capped(text: Any) -> tuple[str, bool]:
    return capText(text if isinstance(text, str) else "", MAX_TEXT_BYTES)


def _number(value: Any) -> float | int:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return 0
    return value


def _usage(message: Mapping[str, Any]) -> dict[str, Any]:
    usage = message.get("usage")
    if not isinstance(usage, dict):
        usage = {}
    cost = usage.get("cost")
    return {
        "input": _number(usage.get("input")),
        "output": _number(usage.get("output")),
        "cacheRead": _number(usage.get("cacheRead")),
        "cacheWrite": _number(usage.get("cacheWrite")),
        "totalTokens": _number(usage.get("totalTokens")),
        "costUsd": _number(cost.get("total")) if isinstance(cost, dict) else 0,
    }


def _scalars(record: Mapping[str, Any], skip: frozenset[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in record.items():
        if key in skip or not isinstance(value, _SCALARS):
            continue
        out[key] = _capped(value)[0] if isinstance(value, str) else value
    return out


@define
class Translator:
    """
    Turns the records of one pi process into L{HostEvent}s.

    A run is everything from C{agent_start} to C{agent_settled}; a retry's
    C{agent_start} after C{agent_end{willRetry: true}} continues the same run.

    @ivar currentRunId: the id of the open run, or of the last one once it
        settled; C{None} before the first.
    @ivar runOpen: whether a run has started and not settled.
    @ivar queue: pi's queue as last reported, C{{"steering": [...],
        "followUp": [...]}}.
    @ivar tools: the names of the active tools, as set by L{setTools}.
    """

    currentRunId: str | None = field(init=False, default=None)
    runOpen: bool = field(init=False, default=False)
    queue: dict[str, list[str]] = field(
        init=False, factory=lambda: {"steering": [], "followUp": []}
    )
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

    def feed(self, record: Mapping[str, Any]) -> list[HostEvent]:
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

    def _run(self) -> dict[str, Any]:
        return {} if self.currentRunId is None else {"runId": self.currentRunId}

    def _on_agent_start(self, record: Mapping[str, Any]) -> list[HostEvent]:
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

    def _on_agent_end(self, record: Mapping[str, Any]) -> list[HostEvent]:
        willRetry = bool(record.get("willRetry", False))
        self._awaitingRetry = willRetry
        return [HostEvent("run.ended", {**self._run(), "willRetry": willRetry})]

    def _on_agent_settled(self, record: Mapping[str, Any]) -> list[HostEvent]:
        data: dict[str, Any] = {
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

    def _on_message_end(self, record: Mapping[str, Any]) -> list[HostEvent]:
        message = record.get("message")
        if not isinstance(message, dict):
            return []
        role = message.get("role")
        if role not in ("user", "assistant"):
            return []
        text, truncated = _capped(messageText(message))
        data: dict[str, Any] = {**self._run(), "role": role, "text": text}
        if truncated:
            data["truncated"] = True
        if role == "user":
            return [HostEvent("message.completed", data)]
        stopReason = message.get("stopReason")
        usage = _usage(message)
        self._turns += 1
        self._costUsd += usage["costUsd"]
        if isinstance(stopReason, str):
            self._lastStopReason = stopReason
        data["toolCalls"] = messageToolCalls(message)
        data["stopReason"] = stopReason
        data["usage"] = usage
        errorMessage = message.get("errorMessage")
        if isinstance(errorMessage, str):
            errorMessage = _capped(errorMessage)[0]
            data["errorMessage"] = errorMessage
        events = [HostEvent("message.completed", data)]
        if stopReason == "error":
            events.append(
                HostEvent(
                    "run.error",
                    {
                        **self._run(),
                        "message": errorMessage
                        if isinstance(errorMessage, str)
                        else "The model request failed.",
                    },
                )
            )
        return events

    def _on_message_update(self, record: Mapping[str, Any]) -> list[HostEvent]:
        update = record.get("assistantMessageEvent")
        if not isinstance(update, dict) or update.get("type") != "text_delta":
            return []
        text, _ = _capped(update.get("delta"))
        return [HostEvent("message.delta", {**self._run(), "text": text}, durable=False)]

    def _on_tool_execution_start(self, record: Mapping[str, Any]) -> list[HostEvent]:
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

    def _on_tool_execution_end(self, record: Mapping[str, Any]) -> list[HostEvent]:
        data: dict[str, Any] = {
            **self._run(),
            "toolCallId": record.get("toolCallId"),
            "toolName": record.get("toolName"),
            "isError": bool(record.get("isError", False)),
        }
        if isinstance(record.get("durationMs"), (int, float)):
            data["durationMs"] = record["durationMs"]
        return [HostEvent("tool.result", data)]

    def _on_queue_update(self, record: Mapping[str, Any]) -> list[HostEvent]:
        queue = {}
        for key in ("steering", "followUp"):
            items = record.get(key)
            queue[key] = [
                item for item in (items if isinstance(items, list) else [])
                if isinstance(item, str)
            ]
        self.queue = queue
        return [
            HostEvent(
                "queue.updated",
                {key: [_capped(t)[0] for t in texts] for key, texts in queue.items()},
            )
        ]

    def _on_auto_retry_start(self, record: Mapping[str, Any]) -> list[HostEvent]:
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

    def _on_compaction_start(self, record: Mapping[str, Any]) -> list[HostEvent]:
        return [HostEvent("compaction.started", _scalars(record, frozenset({"type"})))]

    def _on_compaction_end(self, record: Mapping[str, Any]) -> list[HostEvent]:
        data = _scalars(record, frozenset({"type"}))
        result = record.get("result")
        if isinstance(result, dict) and isinstance(
            result.get("tokensBefore"), (int, float)
        ):
            data["tokensBefore"] = result["tokensBefore"]
        return [HostEvent("compaction.ended", data)]

    def _on_extension_error(self, record: Mapping[str, Any]) -> list[HostEvent]:
        error = record.get("error", record.get("message"))
        if isinstance(error, dict):
            error = error.get("message")
        return [HostEvent("extension.error", {"message": _capped(error)[0]})]

    def _on_extension_ui_request(self, record: Mapping[str, Any]) -> list[HostEvent]:
        method = record.get("method")
        if method == "notify":
            message = record.get("message")
            message = message if isinstance(message, str) else ""
            if message.startswith(TOOLS_NOTICE_PREFIX):
                # The extension names the active tools before each run.
                try:
                    names = json.loads(message[len(TOOLS_NOTICE_PREFIX):])
                except ValueError:
                    names = None
                if isinstance(names, list) and all(isinstance(n, str) for n in names):
                    self.tools = list(names)
                return []
            if message.startswith(BUDGET_NOTICE_PREFIX):
                try:
                    facts = json.loads(message[len(BUDGET_NOTICE_PREFIX):])
                except ValueError:
                    facts = None
                if isinstance(facts, dict):
                    return [HostEvent("budget.exceeded", {**facts, **self._run()})]
            return [
                HostEvent(
                    "body.notice",
                    {
                        "message": _capped(message)[0],
                        "notifyType": record.get("notifyType", "info"),
                    },
                )
            ]
        if method in _UI_NO_ANSWER:
            return []
        return [HostEvent("ui.request", dict(record), durable=False)]
