# -*- test-case-name: tests.live.test_model -*-
"""
The provider APIs the scripted model speaks, as they go over the wire: an
answer (its text or tool calls, its usage) written as each API writes one,
and a conversation of each API read as the chat messages the script reads.

  - OpenAI's chat completions (pi's C{openai-completions}): one JSON body,
    or an event stream of chunks (L{Answer.completion}, L{Answer.frames});
  - OpenAI's responses (C{openai-responses}): its event stream
    (L{Answer.responseFrames}; L{chatFromInput});
  - Anthropic's messages (C{anthropic-messages}): its event stream
    (L{Answer.messageFrames}; L{chatFromMessages});
  - Google's generateContent (C{google-generative-ai}): its stream of
    responses (L{Answer.generateFrames}; L{chatFromContents}).
"""

from __future__ import annotations

import json
from collections import deque
from typing import Callable, Optional

from attrs import frozen

from vehicle.protocol import JSON, JSONObject


@frozen(kw_only=True)
class Usage:
    """
    Token counts (and optionally a provider-billed cost) to report.

    @ivar prompt: C{usage.prompt_tokens}.
    @ivar completion: C{usage.completion_tokens}.
    @ivar costUsd: when set, reported as C{usage.cost} (pi only believes it
        for OpenRouter endpoints; otherwise it prices tokens itself).
    """

    prompt: int
    completion: int
    costUsd: float | None = None


def textOf(content: JSON) -> str:
    """
    The text of a chat message's C{content} (a string or a list of parts).
    """
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            text
            for part in content
            if isinstance(part, dict) and part.get("type") == "text"
            for text in [part.get("text", "")]
            if isinstance(text, str)
        )
    return ""


def split(text: str, count: int) -> list[str]:
    """
    Cut C{text} into C{count} pieces (fewer if it is shorter), in order.
    """
    count = max(1, min(count, len(text)))
    size, extra = divmod(len(text), count)
    pieces, start = [], 0
    for index in range(count):
        end = start + size + (1 if index < extra else 0)
        pieces.append(text[start:end])
        start = end
    return pieces


@frozen(kw_only=True)
class Call:
    """
    One tool call of an answer, its arguments as JSON text.
    """

    id: str
    name: str
    arguments: str

    def toJSON(self) -> JSONObject:
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments},
        }


@frozen(kw_only=True)
class Answer:
    """
    One answer, in both renderings (a JSON body, or an event stream of
    chunks): its C{text} streamed as C{chunks} deltas C{delay} seconds
    apart (after its C{thinking}, as reasoning), or its tool C{calls}.
    """

    id: str
    model: str
    created: int
    usage: Usage
    text: str | None = None
    chunks: int = 1
    delay: float = 0.0
    calls: tuple[Call, ...] = ()
    thinking: str | None = None
    finishReason: str = "stop"

    @property
    def finish(self) -> str:
        return self.finishReason if self.text is not None else "tool_calls"

    def usageJSON(self) -> JSONObject:
        out: JSONObject = {
            "prompt_tokens": self.usage.prompt,
            "completion_tokens": self.usage.completion,
            "total_tokens": self.usage.prompt + self.usage.completion,
        }
        if self.usage.costUsd is not None:
            out["cost"] = self.usage.costUsd
        return out

    def completion(self) -> bytes:
        """
        The answer as one C{chat.completion} body.
        """
        message: JSONObject = {"role": "assistant", "content": self.text}
        if self.thinking is not None:
            message["reasoning_content"] = self.thinking
        if self.calls:
            message["tool_calls"] = [call.toJSON() for call in self.calls]
        return json.dumps(
            {
                "id": self.id,
                "object": "chat.completion",
                "created": self.created,
                "model": self.model,
                "choices": [{"index": 0, "message": message, "finish_reason": self.finish}],
                "usage": self.usageJSON(),
            }
        ).encode("utf-8")

    def _event(self, choices: list[JSON], usage: JSONObject | None = None) -> bytes:
        record: JSONObject = {
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": choices,
        }
        if usage is not None:
            record["usage"] = usage
        return b"data: " + json.dumps(record).encode("utf-8") + b"\n\n"

    def _chunk(self, delta: JSONObject, finishReason: str | None = None) -> bytes:
        return self._event([{"index": 0, "delta": delta, "finish_reason": finishReason}])

    def frames(self, withUsage: bool) -> deque[tuple[float, bytes]]:
        """
        The answer as an event stream: each frame and the delay before it.

        @param withUsage: end with a chunk that carries the usage.
        """
        frames: deque[tuple[float, bytes]] = deque()
        frames.append((0, self._chunk({"role": "assistant", "content": ""})))
        if self.thinking is not None:
            for piece in split(self.thinking, self.chunks):
                frames.append((self.delay, self._chunk({"reasoning_content": piece})))
        if self.text is not None:
            for piece in split(self.text, self.chunks):
                frames.append((self.delay, self._chunk({"content": piece})))
        for index, call in enumerate(self.calls):
            opening = call.toJSON()
            opening["function"] = {"name": call.name, "arguments": ""}
            frames.append((0, self._chunk({"tool_calls": [{"index": index, **opening}]})))
            for piece in split(call.arguments, 3):
                frames.append(
                    (0, self._chunk(
                        {"tool_calls": [{"index": index, "function": {"arguments": piece}}]}
                    ))
                )
        frames.append((0, self._chunk({}, self.finish)))
        if withUsage:
            frames.append((0, self._event([], self.usageJSON())))
        frames.append((0, b"data: [DONE]\n\n"))
        return frames

    def messageFrames(self) -> deque[tuple[float, bytes]]:
        """
        The answer as Anthropic's messages stream: the message, one block
        for its text (its deltas C{delay} apart; its thinking is not sent)
        or one per tool call (its input in three pieces), then the stop
        reason and the usage.
        """
        frames: deque[tuple[float, bytes]] = deque()

        def add(event: JSONObject, delay: float = 0) -> None:
            frames.append((delay, _messageEvent(event)))

        add({"type": "message_start", "message": {
            "id": self.id, "type": "message", "role": "assistant", "model": self.model,
            "content": [], "stop_reason": None, "stop_sequence": None,
            "usage": {"input_tokens": self.usage.prompt, "output_tokens": 0}}})
        if self.text is not None:
            add({"type": "content_block_start", "index": 0,
                 "content_block": {"type": "text", "text": ""}})
            for piece in split(self.text, self.chunks):
                add({"type": "content_block_delta", "index": 0,
                     "delta": {"type": "text_delta", "text": piece}}, self.delay)
            add({"type": "content_block_stop", "index": 0})
        for index, call in enumerate(self.calls):
            add({"type": "content_block_start", "index": index, "content_block": {
                "type": "tool_use", "id": call.id, "name": call.name, "input": {}}})
            for piece in split(call.arguments, 3):
                add({"type": "content_block_delta", "index": index,
                     "delta": {"type": "input_json_delta", "partial_json": piece}})
            add({"type": "content_block_stop", "index": index})
        add({"type": "message_delta",
             "delta": {"stop_reason": _STOP_REASONS.get(self.finish, "end_turn"),
                       "stop_sequence": None},
             "usage": {"output_tokens": self.usage.completion}})
        add({"type": "message_stop"})
        return frames

    def generateFrames(self) -> deque[tuple[float, bytes]]:
        """
        The answer as Google's stream of responses: one for each piece of its
        text (C{delay} apart), or one with its function calls, then one with
        the finish reason and the usage.
        """
        frames: deque[tuple[float, bytes]] = deque()

        def add(parts: list[JSON], delay: float = 0, last: bool = False) -> None:
            candidate: JSONObject = {"content": {"parts": parts, "role": "model"}, "index": 0}
            response: JSONObject = {"candidates": [candidate], "responseId": self.id,
                                    "modelVersion": self.model}
            if last:
                candidate["finishReason"] = _FINISH_REASONS.get(self.finish, "STOP")
                response["usageMetadata"] = {
                    "promptTokenCount": self.usage.prompt,
                    "candidatesTokenCount": self.usage.completion,
                    "totalTokenCount": self.usage.prompt + self.usage.completion,
                }
            frames.append((delay, b"data: " + json.dumps(response).encode("utf-8") + b"\r\n\r\n"))

        if self.text is not None:
            for piece in split(self.text, self.chunks):
                add([{"text": piece}], self.delay)
        if self.calls:
            add([{"functionCall": {"id": call.id, "name": call.name,
                                   "args": json.loads(call.arguments)}} for call in self.calls])
        add([], last=True)
        return frames

    def responseFrames(self) -> deque[tuple[float, bytes]]:
        """
        The answer as OpenAI's responses stream: the response made, a
        message item whose text comes in deltas (C{delay} apart) or one
        function call item per call (its arguments in three pieces), each
        item done, then the response completed (or incomplete, for a cut
        or a refusal) with its usage.
        """
        frames: deque[tuple[float, bytes]] = deque()

        def add(event: JSONObject, delay: float = 0) -> None:
            frames.append((delay, _messageEvent(event)))

        response: JSONObject = {"id": self.id, "object": "response", "model": self.model,
                                "status": "in_progress", "output": []}
        add({"type": "response.created", "response": response})
        items: list[JSON] = []
        if self.text is not None:
            item: JSONObject = {"type": "message", "id": "msg_" + self.id, "role": "assistant",
                                "status": "in_progress", "content": []}
            add({"type": "response.output_item.added", "output_index": 0, "item": item})
            for piece in split(self.text, self.chunks):
                add({"type": "response.output_text.delta", "output_index": 0,
                     "content_index": 0, "item_id": item["id"], "delta": piece}, self.delay)
            text: JSON = [{"type": "output_text", "text": self.text, "annotations": []}]
            done: JSONObject = {**item, "status": "completed", "content": text}
            add({"type": "response.output_item.done", "output_index": 0, "item": done})
            items.append(done)
        for index, call in enumerate(self.calls):
            opened: JSONObject = {"type": "function_call", "id": "fc_" + call.id,
                                  "call_id": call.id, "name": call.name, "arguments": "",
                                  "status": "in_progress"}
            add({"type": "response.output_item.added", "output_index": index, "item": opened})
            for piece in split(call.arguments, 3):
                add({"type": "response.function_call_arguments.delta", "output_index": index,
                     "item_id": opened["id"], "delta": piece})
            done = {**opened, "arguments": call.arguments, "status": "completed"}
            add({"type": "response.output_item.done", "output_index": index, "item": done})
            items.append(done)
        incomplete = _INCOMPLETE.get(self.finish)
        final: JSONObject = {
            **response, "output": items,
            "status": "incomplete" if incomplete else "completed",
            "usage": {"input_tokens": self.usage.prompt, "output_tokens": self.usage.completion,
                      "total_tokens": self.usage.prompt + self.usage.completion},
        }
        if incomplete:
            final["incomplete_details"] = {"reason": incomplete}
        add({"type": "response.incomplete" if incomplete else "response.completed",
             "response": final})
        return frames


def chatFromMessages(messages: list[JSON]) -> list[JSON]:
    """
    An Anthropic conversation as the chat messages the script reads: a
    user's text as a user message, each tool result as a C{tool} message,
    an assistant's turn as an assistant message.
    """
    chat: list[JSON] = []
    for message in messages:
        if not isinstance(message, dict):
            continue
        content = message.get("content")
        blocks: list[JSON] = (
            content if isinstance(content, list) else [{"type": "text", "text": content}]
        )
        if message.get("role") != "user":
            chat.append({"role": "assistant"})
            continue
        for block in blocks:
            if isinstance(block, dict) and block.get("type") == "tool_result":
                chat.append({"role": "tool", "tool_call_id": block.get("tool_use_id")})
        text = textOf(blocks)
        if text:
            chat.append({"role": "user", "content": text})
    return chat


#: How a chat finish reads as Google's finish reason (pi reads a finish
#: after function calls as their use).
_FINISH_REASONS = {
    "stop": "STOP", "length": "MAX_TOKENS", "content_filter": "SAFETY", "tool_calls": "STOP",
}


#: How a chat finish reads as an Anthropic stop reason.
_STOP_REASONS = {
    "stop": "end_turn", "length": "max_tokens", "content_filter": "refusal",
    "tool_calls": "tool_use",
}


def _messageEvent(event: JSONObject) -> bytes:
    return (
        b"event: " + str(event["type"]).encode("ascii") + b"\ndata: "
        + json.dumps(event).encode("utf-8") + b"\n\n"
    )


def chatFromContents(contents: list[JSON]) -> list[JSON]:
    """
    A Google conversation (its C{contents}) as the chat messages the script
    reads: a user's text as a user message, each function response as a
    C{tool} message, a model's turn as an assistant message.
    """
    chat: list[JSON] = []
    for content in contents:
        if not isinstance(content, dict):
            continue
        parts = content.get("parts")
        parts = parts if isinstance(parts, list) else []
        if content.get("role") == "model":
            chat.append({"role": "assistant"})
            continue
        for part in parts:
            if isinstance(part, dict) and "functionResponse" in part:
                chat.append({"role": "tool"})
        text = "".join(
            str(part["text"]) for part in parts
            if isinstance(part, dict) and isinstance(part.get("text"), str)
        )
        if text:
            chat.append({"role": "user", "content": text})
    return chat


def chatFromInput(items: list[JSON]) -> list[JSON]:
    """
    An OpenAI responses conversation (its C{input}) as the chat messages
    the script reads: a user's text as a user message, each function
    call's output as a C{tool} message, an assistant's message or call as
    an assistant message.
    """
    chat: list[JSON] = []
    for item in items:
        if not isinstance(item, dict):
            continue
        if item.get("type") == "function_call_output":
            chat.append({"role": "tool", "tool_call_id": item.get("call_id")})
        elif item.get("role") == "user":
            content = item.get("content")
            text = content if isinstance(content, str) else "".join(
                str(part.get("text")) for part in (content if isinstance(content, list) else [])
                if isinstance(part, dict) and part.get("type") == "input_text"
            )
            if text:
                chat.append({"role": "user", "content": text})
        elif item.get("role") == "assistant" or item.get("type") == "function_call":
            chat.append({"role": "assistant"})
    return chat


#: A chat finish that ends OpenAI's response incomplete, and why.
_INCOMPLETE = {"length": "max_output_tokens", "content_filter": "content_filter"}


def _openaiRefusal(status: int, message: str) -> bytes:
    kind = "invalid_request_error" if status < 500 else "server_error"
    return json.dumps(
        {"error": {"message": message, "type": kind, "param": None, "code": None}}
    ).encode()


def _anthropicRefusal(status: int, message: str) -> bytes:
    kind = "invalid_request_error" if status < 500 else "api_error"
    return json.dumps({"type": "error", "error": {"type": kind, "message": message}}).encode()


def _googleRefusal(status: int, message: str) -> bytes:
    kind = "INVALID_ARGUMENT" if status < 500 else "INTERNAL"
    return json.dumps({"error": {"code": status, "message": message, "status": kind}}).encode()


def _listed(
    name: str, read: Callable[[list[JSON]], list[JSON]]
) -> Callable[[JSONObject], Optional[list[JSON]]]:
    """
    Read a request's conversation from its list C{name} with C{read};
    L{None} when it has no such list.
    """

    def conversation(body: JSONObject) -> Optional[list[JSON]]:
        listed = body.get(name)
        return read(listed) if isinstance(listed, list) else None

    return conversation


@frozen
class Api:
    """
    One provider API besides OpenAI's, as the scripted model serves it: how
    a request's conversation is read (L{None}: the request has none), the
    answer streamed, a refusal written, and what a request without a
    conversation is told.
    """

    conversation: Callable[[JSONObject], Optional[list[JSON]]]
    frames: Callable[[Answer], deque[tuple[float, bytes]]]
    refusal: Callable[[int, str], bytes]
    missing: str


ANTHROPIC = Api(
    _listed("messages", chatFromMessages), Answer.messageFrames, _anthropicRefusal,
    "messages: Field required",
)

GOOGLE = Api(
    _listed("contents", chatFromContents), Answer.generateFrames, _googleRefusal,
    "contents is required",
)

RESPONSES = Api(
    _listed("input", chatFromInput), Answer.responseFrames, _openaiRefusal,
    "Missing required parameter: 'input'.",
)
