"""
Tests for L{vehicle.body._translate}: pi's records in the orders pi emits
them, and the host events they become.
"""

from __future__ import annotations

import json
from typing import Any

from twisted.trial.unittest import SynchronousTestCase

from vehicle.body import HostEvent, Translator
from vehicle.protocol import PiQueue


ZERO_USAGE = {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 0,
              "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "total": 0}}

PLAIN_USAGE = {"input": 1000, "output": 50, "cacheRead": 0, "cacheWrite": 0, "reasoning": 0,
               "totalTokens": 1050,
               "cost": {"input": 0.003, "output": 0.00075, "cacheRead": 0, "cacheWrite": 0,
                        "total": 0.00375, "totalFromProvider": False}}

TOOL_USAGE = {"input": 1200, "output": 30, "cacheRead": 0, "cacheWrite": 0, "reasoning": 0,
              "totalTokens": 1230,
              "cost": {"input": 0.0036, "output": 0.00045, "cacheRead": 0, "cacheWrite": 0,
                       "total": 0.00405, "totalFromProvider": False}}

HELLO = "Hello from the fake model (you said: 'say hello [[PLAIN]]')"


def userMessage(text: str) -> dict[str, Any]:
    """
    A user message as pi reports it.
    """
    return {"role": "user", "content": [{"type": "text", "text": text}],
            "timestamp": 1796021986048}


def assistantMessage(content: list[dict[str, Any]], usage: dict[str, Any],
                     stopReason: str, **extra: Any) -> dict[str, Any]:
    """
    An assistant message as pi reports it.
    """
    return {"role": "assistant", "content": content, "api": "openai-completions",
            "provider": "sophia", "model": "fake-1", "usage": usage,
            "stopReason": stopReason, "timestamp": 1796021986151,
            "responseId": "chatcmpl-ea8889a48d09", "rawStopReason": stopReason,
            "durationMs": 134, "thinkingLevel": "off", **extra}


def delta(text: str) -> dict[str, Any]:
    """
    A C{text_delta} update.
    """
    return {"type": "message_update", "usage": ZERO_USAGE,
            "assistantMessageEvent": {"type": "text_delta", "contentIndex": 0, "delta": text}}


PLAIN_ASSISTANT = assistantMessage([{"type": "text", "text": HELLO}], PLAIN_USAGE, "stop")

PLAIN_USAGE_OUT = {"input": 1000, "output": 50, "cacheRead": 0, "cacheWrite": 0,
                   "totalTokens": 1050, "costUsd": 0.00375}


def plainRun(prompt: str = "say hello [[PLAIN]]", system: bool = True) -> list[dict[str, Any]]:
    """
    pi's records for a text-only run (pi.md 3.2).
    """
    records: list[dict[str, Any]] = [{"type": "agent_start"}, {"type": "turn_start"}]
    if system:
        sysMessage = {"role": "system", "content": "", "timestamp": 1796021986040}
        records += [{"type": "message_start", "message": sysMessage},
                    {"type": "message_end", "message": sysMessage}]
    records += [
        {"type": "message_start", "message": userMessage(prompt)},
        {"type": "message_end", "message": userMessage(prompt)},
        {"type": "message_start", "message": assistantMessage([], ZERO_USAGE, "pending")},
        {"type": "message_update", "usage": ZERO_USAGE,
         "assistantMessageEvent": {"type": "text_start", "contentIndex": 0}},
        delta("Hello"), delta(" from"),
        {"type": "message_update", "usage": PLAIN_USAGE,
         "assistantMessageEvent": {"type": "text_end", "contentIndex": 0, "content": HELLO}},
        {"type": "message_end", "message": PLAIN_ASSISTANT},
        {"type": "turn_end", "message": PLAIN_ASSISTANT, "toolResults": []},
        {"type": "agent_end", "messages": [userMessage(prompt), PLAIN_ASSISTANT],
         "willRetry": False},
        {"type": "agent_settled", "aborted": False},
    ]
    return records


def feedAll(translator: Translator, records: list[dict[str, Any]]) -> list[HostEvent]:
    """
    Feed every record, collecting the events in order.
    """
    events: list[HostEvent] = []
    for record in records:
        events.extend(translator.feed(record))
    return events


class TranslatorRunTests(SynchronousTestCase):
    """
    Whole runs, in pi's own orders.
    """

    def test_plainRun(self) -> None:
        """
        A text-only run yields started, the user message, ephemeral deltas,
        the assistant message with usage, ended and settled with totals; the
        system message and the other updates yield nothing.
        """
        translator = Translator()
        translator.setTools(["read", "bash", "edit", "write", "sophia_echo"])
        events = feedAll(translator, plainRun())
        self.assertEqual(events, [
            HostEvent("run.started", {"runId": "run-1",
                                      "tools": ["read", "bash", "edit", "write", "sophia_echo"]}),
            HostEvent("message.completed", {"runId": "run-1", "role": "user",
                                            "text": "say hello [[PLAIN]]"}),
            HostEvent("message.delta", {"runId": "run-1", "text": "Hello"}, durable=False),
            HostEvent("message.delta", {"runId": "run-1", "text": " from"}, durable=False),
            HostEvent("message.completed", {
                "runId": "run-1", "role": "assistant", "text": HELLO, "toolCalls": [],
                "stopReason": "stop", "usage": PLAIN_USAGE_OUT}),
            HostEvent("run.ended", {"runId": "run-1", "willRetry": False}),
            HostEvent("run.settled", {"runId": "run-1", "aborted": False, "stopReason": "stop",
                                      "turns": 1, "costUsd": 0.00375}),
        ])
        self.assertEqual(translator.currentRunId, "run-1")
        self.assertFalse(translator.runOpen)

    def test_runIdsCount(self) -> None:
        """
        Each new run gets the next id, and its totals start again.
        """
        translator = Translator()
        feedAll(translator, plainRun())
        events = feedAll(translator, plainRun("again", system=False))
        self.assertEqual(events[0], HostEvent("run.started", {"runId": "run-2", "tools": []}))
        self.assertEqual(events[-1].data, {"runId": "run-2", "aborted": False,
                                           "stopReason": "stop", "turns": 1,
                                           "costUsd": 0.00375})

    def test_toolRun(self) -> None:
        """
        A tool run (pi.md 3.3) yields tool.started without arguments but with
        their size, the UI request for the host to answer, tool.result
        without the result, and no event for the toolResult message; the
        totals count both assistant turns.
        """
        toolCall = {"type": "toolCall", "id": "call_499f7e3191", "name": "sophia_echo",
                    "arguments": {"text": "hello from the model"}}
        callMessage = assistantMessage([toolCall], TOOL_USAGE, "toolUse")
        toolResult = {"role": "toolResult", "toolCallId": "call_499f7e3191",
                      "toolName": "sophia_echo",
                      "content": [{"type": "text", "text": "echo:hello from the model token:tok-123"}],
                      "details": {"tokenLength": 7}, "isError": False, "durationMs": 0,
                      "timestamp": 1796021986368}
        uiRequest = {"type": "extension_ui_request", "id": "5b443055-c2d8-4839-aa2b-ea62bfa11490",
                     "method": "input", "title": "sophia.delegated-token",
                     "placeholder": "{\"toolName\":\"sophia_echo\",\"toolCallId\":\"call_499f7e3191\"}",
                     "timeout": 30000}
        records = [
            {"type": "agent_start"}, {"type": "turn_start"},
            {"type": "message_start", "message": userMessage("use the tool [[TOOL]]")},
            {"type": "message_end", "message": userMessage("use the tool [[TOOL]]")},
            {"type": "message_start", "message": assistantMessage([], ZERO_USAGE, "pending")},
            {"type": "message_update", "usage": ZERO_USAGE, "assistantMessageEvent": {
                "type": "toolcall_start", "contentIndex": 0, "id": "call_499f7e3191",
                "toolName": "sophia_echo"}},
            {"type": "message_update", "usage": ZERO_USAGE, "assistantMessageEvent": {
                "type": "toolcall_delta", "contentIndex": 0, "delta": "{\"text\": \"hello "}},
            {"type": "message_update", "usage": TOOL_USAGE, "assistantMessageEvent": {
                "type": "toolcall_end", "contentIndex": 0, "toolCall": toolCall}},
            {"type": "message_end", "message": callMessage},
            {"type": "tool_execution_start", "toolCallId": "call_499f7e3191",
             "toolName": "sophia_echo", "args": {"text": "hello from the model"}},
            uiRequest,
            {"type": "tool_execution_end", "toolCallId": "call_499f7e3191",
             "toolName": "sophia_echo", "result": {"content": toolResult["content"],
                                                   "details": {"tokenLength": 7}},
             "isError": False, "durationMs": 0},
            {"type": "message_start", "message": toolResult},
            {"type": "message_end", "message": toolResult},
            {"type": "turn_end", "message": callMessage, "toolResults": [toolResult]},
            {"type": "turn_start"},
            {"type": "message_start", "message": assistantMessage([], ZERO_USAGE, "pending")},
            delta("Hello"),
            {"type": "message_end", "message": PLAIN_ASSISTANT},
            {"type": "turn_end", "message": PLAIN_ASSISTANT, "toolResults": []},
            {"type": "agent_end", "messages": [], "willRetry": False},
            {"type": "agent_settled", "aborted": False},
        ]
        events = feedAll(Translator(), records)
        argsBytes = len(b'{"text":"hello from the model"}')
        self.assertEqual(events, [
            HostEvent("run.started", {"runId": "run-1", "tools": []}),
            HostEvent("message.completed", {"runId": "run-1", "role": "user",
                                            "text": "use the tool [[TOOL]]"}),
            HostEvent("message.completed", {
                "runId": "run-1", "role": "assistant", "text": "",
                "toolCalls": [{"id": "call_499f7e3191", "name": "sophia_echo"}],
                "stopReason": "toolUse",
                "usage": {"input": 1200, "output": 30, "cacheRead": 0, "cacheWrite": 0,
                          "totalTokens": 1230, "costUsd": 0.00405}}),
            HostEvent("tool.started", {"runId": "run-1", "toolCallId": "call_499f7e3191",
                                       "toolName": "sophia_echo", "argsBytes": argsBytes}),
            HostEvent("ui.request", uiRequest, durable=False),
            HostEvent("tool.result", {"runId": "run-1", "toolCallId": "call_499f7e3191",
                                      "toolName": "sophia_echo", "isError": False,
                                      "durationMs": 0}),
            HostEvent("message.delta", {"runId": "run-1", "text": "Hello"}, durable=False),
            HostEvent("message.completed", {
                "runId": "run-1", "role": "assistant", "text": HELLO, "toolCalls": [],
                "stopReason": "stop", "usage": PLAIN_USAGE_OUT}),
            HostEvent("run.ended", {"runId": "run-1", "willRetry": False}),
            HostEvent("run.settled", {"runId": "run-1", "aborted": False, "stopReason": "stop",
                                      "turns": 2, "costUsd": 0.0078}),
        ])
        for event in events:
            self.assertNotIn("tok-123", json.dumps(event.data))

    def test_blockedTool(self) -> None:
        """
        A blocked call's end has no C{durationMs} and reports the error.
        """
        translator = Translator()
        translator.feed({"type": "agent_start"})
        events = translator.feed({
            "type": "tool_execution_end", "toolCallId": "c", "toolName": "sophia_echo",
            "result": {"content": [{"type": "text", "text": "host refused delegated token"}]},
            "isError": True})
        self.assertEqual(events, [HostEvent("tool.result", {
            "runId": "run-1", "toolCallId": "c", "toolName": "sophia_echo", "isError": True})])

    def test_abortWithQueue(self) -> None:
        """
        An abort (pi.md 4b) ends in an aborted message, run.settled with
        C{aborted} and the aborted stop reason; the queue as last reported
        stays known.
        """
        translator = Translator()
        aborted = assistantMessage([{"type": "text", "text": "slow-0 slow-1 slow-2 "}],
                                   ZERO_USAGE, "aborted")
        events = feedAll(translator, [
            {"type": "agent_start"},
            {"type": "queue_update", "steering": ["steer S1 [[PLAIN]]"],
             "followUp": ["follow F1 [[PLAIN]]", "follow F2 [[PLAIN]]"]},
            {"type": "queue_update", "steering": [], "followUp": []},
            {"type": "queue_update", "steering": ["steer S1 [[PLAIN]]"],
             "followUp": ["follow F2 [[PLAIN]]"]},
            {"type": "message_update", "usage": ZERO_USAGE, "assistantMessageEvent": {
                "type": "text_end", "contentIndex": 0, "content": "slow-0 slow-1 slow-2 "}},
            {"type": "message_end", "message": aborted},
            {"type": "turn_end", "message": aborted, "toolResults": []},
            {"type": "agent_end", "messages": [aborted], "willRetry": False},
            {"type": "agent_settled", "aborted": True},
        ])
        self.assertEqual([e.type for e in events], [
            "run.started", "queue.updated", "queue.updated", "queue.updated",
            "message.completed", "run.ended", "run.settled"])
        self.assertEqual(events[1].data, {"steering": ["steer S1 [[PLAIN]]"],
                                          "followUp": ["follow F1 [[PLAIN]]",
                                                       "follow F2 [[PLAIN]]"]})
        self.assertEqual(events[2].data, {"steering": [], "followUp": []})
        self.assertEqual(events[-1].data, {"runId": "run-1", "aborted": True,
                                           "stopReason": "aborted", "turns": 1, "costUsd": 0})
        self.assertEqual(translator.queue, PiQueue(steering=("steer S1 [[PLAIN]]",),
                                                   followUp=("follow F2 [[PLAIN]]",)))

    def test_steeringInOneRun(self) -> None:
        """
        Steering and follow-ups delivered inside one run (pi.md 4a) keep
        its run id: one run.started, one run.settled.
        """
        translator = Translator()
        records: list[dict[str, Any]] = [{"type": "agent_start"}, {"type": "turn_start"}]
        for text in ("steer cmd", "followUp via prompt"):
            records += [
                {"type": "turn_end", "message": PLAIN_ASSISTANT, "toolResults": []},
                {"type": "turn_start"},
                {"type": "queue_update", "steering": [], "followUp": []},
                {"type": "message_end", "message": userMessage(text)},
                {"type": "message_end", "message": PLAIN_ASSISTANT},
            ]
        records += [{"type": "agent_end", "messages": [], "willRetry": False},
                    {"type": "agent_settled", "aborted": False}]
        events = feedAll(translator, records)
        self.assertEqual([e.type for e in events].count("run.started"), 1)
        self.assertEqual({e.data.get("runId") for e in events if e.type != "queue.updated"},
                         {"run-1"})
        self.assertEqual(events[-1].data["turns"], 2)

    def test_errorAndRetry(self) -> None:
        """
        A failed model request yields run.error; with pi retrying, the
        retry's agent_start continues the same run, and one run.settled ends
        it.
        """
        failed = assistantMessage([], ZERO_USAGE, "error",
                                  errorMessage="Connection error.: connect ECONNREFUSED 127.0.0.1:18080")
        translator = Translator()
        events = feedAll(translator, [
            {"type": "agent_start"},
            {"type": "message_end", "message": userMessage("hi")},
            {"type": "message_end", "message": failed},
            {"type": "agent_end", "messages": [failed], "willRetry": True},
            {"type": "auto_retry_start", "attempt": 1, "maxAttempts": 3, "delayMs": 2000,
             "errorMessage": "Connection error.: connect ECONNREFUSED 127.0.0.1:18080"},
            {"type": "agent_start"},
            {"type": "message_end", "message": PLAIN_ASSISTANT},
            {"type": "auto_retry_end", "success": True, "attempt": 1},
            {"type": "agent_end", "messages": [], "willRetry": False},
            {"type": "agent_settled", "aborted": False},
        ])
        error = "Connection error.: connect ECONNREFUSED 127.0.0.1:18080"
        self.assertEqual(events, [
            HostEvent("run.started", {"runId": "run-1", "tools": []}),
            HostEvent("message.completed", {"runId": "run-1", "role": "user", "text": "hi"}),
            HostEvent("message.completed", {
                "runId": "run-1", "role": "assistant", "text": "", "toolCalls": [],
                "stopReason": "error",
                "usage": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0,
                          "totalTokens": 0, "costUsd": 0},
                "errorMessage": error}),
            HostEvent("run.error", {"runId": "run-1", "message": error}),
            HostEvent("run.ended", {"runId": "run-1", "willRetry": True}),
            HostEvent("retry.started", {"attempt": 1, "maxAttempts": 3, "delayMs": 2000,
                                        "errorMessage": error}),
            HostEvent("message.completed", {
                "runId": "run-1", "role": "assistant", "text": HELLO, "toolCalls": [],
                "stopReason": "stop", "usage": PLAIN_USAGE_OUT}),
            HostEvent("run.ended", {"runId": "run-1", "willRetry": False}),
            HostEvent("run.settled", {"runId": "run-1", "aborted": False, "stopReason": "stop",
                                      "turns": 2, "costUsd": 0.00375}),
        ])


class TranslatorRecordTests(SynchronousTestCase):
    """
    Single records and what becomes of them.
    """

    def setUp(self) -> None:
        self.translator = Translator()
        self.translator.feed({"type": "agent_start"})

    def test_toolsNotice(self) -> None:
        """
        A C{notify} starting C{sophia.tools } names the active tools: no
        event, and the next C{run.started} carries them; a broken one is
        ignored.
        """
        translator = Translator()
        names = ["mcp__graph__read_document", "read"]
        self.assertEqual(translator.feed({"type": "extension_ui_request", "id": "n1",
                                          "method": "notify",
                                          "message": "sophia.tools " + json.dumps(names)}), [])
        self.assertEqual(translator.feed({"type": "extension_ui_request", "id": "n2",
                                          "method": "notify", "message": "sophia.tools [oops"}), [])
        [started] = translator.feed({"type": "agent_start"})
        self.assertEqual(started.data["tools"], names)

    def test_budgetNotice(self) -> None:
        """
        A C{notify} starting C{sophia.budget } carries the extension's facts
        as budget.exceeded.
        """
        facts = {"limit": "turns", "max": 3, "used": 3}
        events = self.translator.feed({
            "type": "extension_ui_request", "id": "2741cfd1", "method": "notify",
            "message": "sophia.budget " + json.dumps(facts), "notifyType": "warning"})
        self.assertEqual(events, [HostEvent("budget.exceeded", {**facts, "runId": "run-1"})])

    def test_otherNotice(self) -> None:
        """
        Any other C{notify} (or a budget notice whose JSON is broken) is a
        body.notice.
        """
        for message in ("sophia budget: turn budget 3 reached", "sophia.budget {oops"):
            events = self.translator.feed({
                "type": "extension_ui_request", "id": "2741cfd1", "method": "notify",
                "message": message, "notifyType": "warning"})
            self.assertEqual(events, [HostEvent("body.notice", {
                "message": message, "notifyType": "warning"})])

    def test_fireAndForgetUi(self) -> None:
        """
        UI requests that expect no answer (status, widget, title) yield
        nothing; dialogs are handed to the host.
        """
        for method in ("setStatus", "setWidget", "setTitle", "set_editor_text"):
            self.assertEqual(self.translator.feed(
                {"type": "extension_ui_request", "id": "u", "method": method}), [])
        confirm = {"type": "extension_ui_request", "id": "u", "method": "confirm",
                   "title": "Sure?", "message": "?"}
        self.assertEqual(self.translator.feed(confirm),
                         [HostEvent("ui.request", confirm, durable=False)])

    def test_ignored(self) -> None:
        """
        Records the host has no event for yield nothing: turn markers, other
        message updates, tool updates, toolResult/system messages, entries,
        retry ends, responses, unknown types.
        """
        records = [
            {"type": "turn_start"},
            {"type": "turn_end", "message": PLAIN_ASSISTANT, "toolResults": []},
            {"type": "message_start", "message": userMessage("x")},
            {"type": "message_update", "usage": ZERO_USAGE,
             "assistantMessageEvent": {"type": "thinking_start", "contentIndex": 0}},
            {"type": "message_update", "usage": ZERO_USAGE,
             "assistantMessageEvent": {"type": "thinking_end", "contentIndex": 0,
                                       "content": "hmm"}},
            {"type": "message_update", "usage": ZERO_USAGE, "assistantMessageEvent": "odd"},
            {"type": "tool_execution_update", "toolCallId": "call_2cde157e76",
             "toolName": "bash", "args": {"command": "ls"}, "partialResult": {"content": []}},
            {"type": "message_end", "message": {"role": "toolResult", "toolCallId": "c",
                                                "toolName": "t", "content": [], "isError": False}},
            {"type": "message_end", "message": {"role": "system", "content": ""}},
            {"type": "entry_appended", "entry": {"type": "context_edit", "id": "44751bc0",
                                                 "parentId": "b95efc54",
                                                 "timestamp": "2026-11-30T07:03:58.329Z",
                                                 "targetId": "b95efc54", "replacement": None}},
            {"type": "auto_retry_end", "success": False, "attempt": 3,
             "finalError": "Connection error."},
            {"type": "response", "command": "parse", "success": False, "error": "x"},
            {"type": "something_new"},
            {"type": ["odd"]},
            {},
        ]
        for record in records:
            self.assertEqual(self.translator.feed(record), [], record)

    def test_compaction(self) -> None:
        """
        Compaction events pass their scalar fields, not the summary.
        """
        start = self.translator.feed({"type": "compaction_start", "reason": "threshold"})
        self.assertEqual(start, [HostEvent("compaction.started", {"reason": "threshold"})])
        end = self.translator.feed({
            "type": "compaction_end", "reason": "threshold", "aborted": False,
            "willRetry": False, "result": {"summary": "secret summary",
                                           "firstKeptEntryId": "ab", "tokensBefore": 90000}})
        self.assertEqual(end, [HostEvent("compaction.ended", {
            "reason": "threshold", "aborted": False, "willRetry": False,
            "tokensBefore": 90000})])

    def test_extensionError(self) -> None:
        """
        An extension error carries its message.
        """
        events = self.translator.feed({"type": "extension_error", "extensionPath": "/x/ext.js",
                                       "event": "before_provider_request", "error": "boom"})
        self.assertEqual(events, [HostEvent("extension.error", {"message": "boom"})])

    def test_thinking(self) -> None:
        """
        pi's C{thinking_delta}s become ephemeral C{thinking.delta} events,
        apart from the words' C{message.delta}s; the assistant message's
        thinking parts, joined, ride on its C{message.completed} (capped and
        flagged when long); a message that thought nothing carries no
        C{thinking}.
        """
        events = feedAll(self.translator, [
            {"type": "message_update", "usage": ZERO_USAGE,
             "assistantMessageEvent": {"type": "thinking_delta", "contentIndex": 0,
                                       "delta": "hmm, "}},
            {"type": "message_update", "usage": ZERO_USAGE,
             "assistantMessageEvent": {"type": "thinking_delta", "contentIndex": 0,
                                       "delta": "greet"}},
            delta("Hi"),
            {"type": "message_end", "message": assistantMessage(
                [{"type": "thinking", "thinking": "hmm, greet", "thinkingSignature": "r"},
                 {"type": "thinking", "thinking": ""},
                 {"type": "thinking", "thinking": "then speak"},
                 {"type": "text", "text": "Hi"}], PLAIN_USAGE, "stop")},
        ])
        self.assertEqual(events[:3], [
            HostEvent("thinking.delta", {"runId": "run-1", "text": "hmm, "}, durable=False),
            HostEvent("thinking.delta", {"runId": "run-1", "text": "greet"}, durable=False),
            HostEvent("message.delta", {"runId": "run-1", "text": "Hi"}, durable=False),
        ])
        self.assertEqual(events[3].data["thinking"], "hmm, greet\nthen speak")
        self.assertEqual(events[3].data["text"], "Hi")
        self.assertNotIn("thinkingTruncated", events[3].data)
        [long] = self.translator.feed({"type": "message_end", "message": assistantMessage(
            [{"type": "thinking", "thinking": "€" * 6000}], PLAIN_USAGE, "stop")})
        self.assertEqual(long.data["thinking"], "€" * 5461)
        self.assertIs(long.data["thinkingTruncated"], True)
        self.assertNotIn("truncated", long.data)
        [plain] = self.translator.feed({"type": "message_end", "message": PLAIN_ASSISTANT})
        self.assertNotIn("thinking", plain.data)

    def test_textsCapped(self) -> None:
        """
        Message texts are capped at 16 KiB and flagged; queue texts too.
        """
        long = "€" * 6000
        [event] = self.translator.feed({"type": "message_end", "message": userMessage(long)})
        self.assertEqual(event.data["text"], "€" * 5461)
        self.assertIs(event.data["truncated"], True)
        [queue] = self.translator.feed({"type": "queue_update", "steering": [long],
                                        "followUp": []})
        self.assertEqual(queue.data["steering"], ["€" * 5461])
        self.assertEqual(self.translator.queue.steering, (long,))

    def test_noRunYet(self) -> None:
        """
        Before any run, events carry no run id.
        """
        events = Translator().feed({"type": "message_end", "message": userMessage("x")})
        self.assertEqual(events, [HostEvent("message.completed", {"role": "user", "text": "x"})])
