"""
Tests for L{vehicle_local.model._model}: the scripted OpenAI-compatible server,
driven over a real loopback port with treq (and a raw client for disconnects).
"""

from __future__ import annotations

import json
from typing import Any

import treq
from twisted.internet import reactor
from twisted.internet.defer import Deferred
from twisted.internet.endpoints import TCP4ClientEndpoint, connectProtocol
from twisted.internet.protocol import Protocol
from twisted.internet.task import Clock, deferLater
from twisted.python.failure import Failure
from twisted.trial.unittest import TestCase
from twisted.web.client import Agent, HTTPConnectionPool

from vehicle_local.model import Error, Hang, ScriptedModel, Text, ToolCall, Usage


def _sse(body: bytes) -> list[Any]:
    """
    The C{data:} payloads of an SSE body, JSON-decoded except C{[DONE]}.
    """
    events: list[Any] = []
    for block in body.split(b"\n\n"):
        if not block.strip():
            continue
        assert block.startswith(b"data: "), block
        payload = block[len(b"data: ") :]
        events.append(payload.decode() if payload == b"[DONE]" else json.loads(payload))
    return events


def _text(events: list[Any]) -> str:
    return "".join(
        event["choices"][0]["delta"].get("content", "")
        for event in events
        if isinstance(event, dict) and event["choices"]
    )


def _toolCalls(events: list[Any]) -> list[dict[str, Any]]:
    """
    Reassemble streamed tool calls the way an OpenAI client does.
    """
    calls: dict[int, dict[str, Any]] = {}
    for event in events:
        if not isinstance(event, dict) or not event["choices"]:
            continue
        for part in event["choices"][0]["delta"].get("tool_calls", []):
            call = calls.setdefault(part["index"], {"id": None, "name": "", "arguments": ""})
            if "id" in part:
                call["id"] = part["id"]
            function = part.get("function", {})
            call["name"] += function.get("name", "")
            call["arguments"] += function.get("arguments", "")
    return [calls[index] for index in sorted(calls)]


def _finish(events: list[Any]) -> list[str]:
    return [
        event["choices"][0]["finish_reason"]
        for event in events
        if isinstance(event, dict) and event["choices"] and event["choices"][0]["finish_reason"]
    ]


class _Raw(Protocol):
    """
    A bare HTTP client: sends one request, collects bytes.
    """

    def __init__(self, request: bytes) -> None:
        self.request = request
        self.received = b""
        self.lost: Deferred[None] = Deferred()

    def connectionMade(self) -> None:
        self.transport.write(self.request)

    def dataReceived(self, data: bytes) -> None:
        self.received += data

    def connectionLost(self, reason: Failure) -> None:
        self.lost.callback(None)


def _messageEvents(body: bytes) -> list[Any]:
    """
    The data of each event of an Anthropic messages stream (or of a Google
    stream of responses).
    """
    return [json.loads(line[len("data: "):]) for line in body.decode().splitlines()
            if line.startswith("data: ")]


class ScriptedModelTests(TestCase):
    """
    The scripted model over real loopback HTTP.
    """

    timeout = 20

    async def _start(self, model: ScriptedModel) -> None:
        port = await model.listen(reactor)
        self.addCleanup(port.stopListening)
        self.model = model
        pool = HTTPConnectionPool(reactor, persistent=False)
        self.http = treq.client.HTTPClient(Agent(reactor, pool=pool))

    async def post(self, body: dict[str, Any], key: str = "sk-test") -> tuple[int, bytes]:
        assert self.model.url is not None
        response = await self.http.post(
            self.model.url + "/chat/completions",
            json=body,
            headers={b"authorization": f"Bearer {key}"},
        )
        return response.code, await response.content()

    async def until(self, predicate: Any) -> None:
        """
        Let the real reactor run until C{predicate()} holds.
        """
        for _ in range(500):
            if predicate():
                return
            await deferLater(reactor, 0.01, lambda: None)
        self.fail("condition never held")

    async def rawRequest(self, body: dict[str, Any]) -> _Raw:
        assert self.model.url is not None
        port = int(self.model.url.split(":")[2].split("/")[0])
        payload = json.dumps(body).encode()
        raw = _Raw(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Content-Type: application/json\r\nContent-Length: "
            + str(len(payload)).encode()
            + b"\r\n\r\n"
            + payload
        )
        await connectProtocol(TCP4ClientEndpoint(reactor, "127.0.0.1", port), raw)
        return raw

    async def test_urlEndsInV1(self) -> None:
        """
        After C{listen}, C{url} is a loopback base URL ending in C{/v1}.
        """
        await self._start(ScriptedModel(reactor=reactor))
        assert self.model.url is not None
        self.assertTrue(self.model.url.startswith("http://127.0.0.1:"))
        self.assertTrue(self.model.url.endswith("/v1"))

    async def test_echoStreams(self) -> None:
        """
        With an empty script a plain prompt is echoed as SSE text deltas,
        a C{stop} finish, a usage chunk and C{[DONE]}.
        """
        await self._start(ScriptedModel(reactor=reactor))
        code, body = await self.post(
            {
                "model": "fake-1",
                "stream": True,
                "stream_options": {"include_usage": True},
                "messages": [
                    {"role": "system", "content": "be brief"},
                    {"role": "user", "content": [{"type": "text", "text": "hi there"}]},
                ],
            }
        )
        self.assertEqual(code, 200)
        events = _sse(body)
        self.assertEqual(events[-1], "[DONE]")
        self.assertEqual(_text(events), "Hello from the scripted model (you said: 'hi there')")
        self.assertEqual(_finish(events), ["stop"])
        self.assertEqual(events[0]["choices"][0]["delta"]["role"], "assistant")
        self.assertEqual(events[0]["model"], "fake-1")
        self.assertEqual(events[-2]["usage"]["total_tokens"], 1050)

    async def test_textInChunks(self) -> None:
        """
        A queued L{Text} is streamed in exactly C{chunks} content deltas.
        """
        await self._start(ScriptedModel(reactor=reactor))
        self.model.enqueue(Text("abcdefghij", chunks=4))
        _, body = await self.post({"model": "m", "stream": True, "messages": [{"role": "user", "content": "x"}]})
        events = _sse(body)
        deltas = [
            event["choices"][0]["delta"]["content"]
            for event in events[1:]
            if isinstance(event, dict) and event["choices"][0]["delta"].get("content")
        ]
        self.assertEqual(deltas, ["abc", "def", "gh", "ij"])
        # No usage chunk unless stream_options.include_usage asks for it.
        self.assertFalse(any(isinstance(event, dict) and "usage" in event for event in events))

    async def test_thinkingBeforeText(self) -> None:
        """
        A L{Text} with C{thinking} streams it first as C{reasoning_content}
        deltas, then the text as C{content}; the non-streamed answer carries
        it beside the content.  C{[[THINK]]} in the last user message does
        the same for the echo.
        """
        await self._start(ScriptedModel(reactor=reactor))
        self.model.enqueue(Text("the answer", chunks=2, thinking="pondering"))
        _, body = await self.post({"model": "m", "stream": True, "messages": [{"role": "user", "content": "x"}]})
        deltas = [
            (key, event["choices"][0]["delta"][key])
            for event in _sse(body)
            if isinstance(event, dict) and event["choices"]
            for key in ("reasoning_content", "content")
            if event["choices"][0]["delta"].get(key)
        ]
        self.assertEqual(
            deltas,
            [("reasoning_content", "ponde"), ("reasoning_content", "ring"),
             ("content", "the a"), ("content", "nswer")],
        )
        self.model.enqueue(Text("whole", thinking="why"))
        _, body = await self.post({"model": "m", "messages": [{"role": "user", "content": "x"}]})
        self.assertEqual(
            json.loads(body)["choices"][0]["message"],
            {"role": "assistant", "content": "whole", "reasoning_content": "why"},
        )
        _, body = await self.post(
            {"model": "m", "messages": [{"role": "user", "content": "hi [[THINK]]"}]}
        )
        message = json.loads(body)["choices"][0]["message"]
        self.assertEqual(message["reasoning_content"],
                         "The person said 'hi [[THINK]]'; I should greet them.")
        self.assertEqual(message["content"], "Hello from the scripted model (you said: 'hi [[THINK]]')")
        _, body = await self.post({"model": "m", "messages": [{"role": "user", "content": "hi"}]})
        self.assertNotIn("reasoning_content", json.loads(body)["choices"][0]["message"])

    async def test_refuseMarker(self) -> None:
        """
        C{[[REFUSE]]} is answered as a provider's refusal: a short text that
        ends with C{finish_reason} C{content_filter}, streamed or not;
        C{[[CUT]]} as an answer that ran out of tokens (C{length}).
        """
        await self._start(ScriptedModel(reactor=reactor))
        messages = [{"role": "user", "content": "do the bad thing [[REFUSE]]"}]
        _, body = await self.post({"model": "m", "stream": True, "messages": messages})
        events = _sse(body)
        self.assertEqual(_finish(events), ["content_filter"])
        self.assertEqual(_text(events), "I can't help with that.")
        _, body = await self.post({"model": "m", "messages": messages})
        self.assertEqual(json.loads(body)["choices"][0]["finish_reason"], "content_filter")
        _, body = await self.post({"model": "m", "stream": True,
                                   "messages": [{"role": "user", "content": "go on [[CUT]]"}]})
        self.assertEqual(_finish(_sse(body)), ["length"])

    async def test_nonStreamJson(self) -> None:
        """
        Without C{stream}, the answer is one C{chat.completion} JSON object.
        """
        await self._start(ScriptedModel(reactor=reactor))
        self.model.enqueue(Text("whole answer", usage=Usage(prompt=4, completion=2)))
        code, body = await self.post({"model": "m", "messages": [{"role": "user", "content": "x"}]})
        self.assertEqual(code, 200)
        answer = json.loads(body)
        self.assertEqual(answer["object"], "chat.completion")
        self.assertEqual(answer["choices"][0]["message"], {"role": "assistant", "content": "whole answer"})
        self.assertEqual(answer["choices"][0]["finish_reason"], "stop")
        self.assertEqual(answer["usage"], {"prompt_tokens": 4, "completion_tokens": 2, "total_tokens": 6})

    async def test_severalToolCalls(self) -> None:
        """
        A queued sequence of L{ToolCall}s is one answer with several calls,
        streamed as OpenAI tool-call deltas, finishing with C{tool_calls}.
        """
        await self._start(ScriptedModel(reactor=reactor))
        self.model.enqueue([ToolCall("read", {"path": "a.txt"}, id="call_a"), ToolCall("bash", {"command": "ls"})])
        _, body = await self.post({"model": "m", "stream": True, "messages": [{"role": "user", "content": "x"}]})
        events = _sse(body)
        calls = _toolCalls(events)
        self.assertEqual([call["name"] for call in calls], ["read", "bash"])
        self.assertEqual(calls[0]["id"], "call_a")
        self.assertTrue(calls[1]["id"].startswith("call_"))
        self.assertEqual(json.loads(calls[0]["arguments"]), {"path": "a.txt"})
        self.assertEqual(json.loads(calls[1]["arguments"]), {"command": "ls"})
        self.assertEqual(_finish(events), ["tool_calls"])

    async def test_toolMarker(self) -> None:
        """
        C{[[TOOL:name]]} asks for one tool call, then answers with text once
        a tool result follows the user message.
        """
        await self._start(ScriptedModel(reactor=reactor))
        user = {"role": "user", "content": 'do it [[TOOL:sophia_echo {"text": "yo"}]]'}
        _, body = await self.post({"model": "m", "stream": True, "messages": [user]})
        [call] = _toolCalls(_sse(body))
        self.assertEqual(call["name"], "sophia_echo")
        self.assertEqual(json.loads(call["arguments"]), {"text": "yo"})
        assistant = {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": call["id"], "type": "function", "function": {"name": call["name"], "arguments": call["arguments"]}}],
        }
        result = {"role": "tool", "tool_call_id": call["id"], "content": "echo:yo"}
        _, body = await self.post({"model": "m", "stream": True, "messages": [user, assistant, result]})
        events = _sse(body)
        self.assertEqual(_toolCalls(events), [])
        self.assertEqual(_text(events), "The tool sophia_echo answered.")

    async def test_loopMarker(self) -> None:
        """
        C{[[LOOP:name]]} asks for a tool call every time, results or not.
        """
        await self._start(ScriptedModel(reactor=reactor))
        user = {"role": "user", "content": "[[LOOP:spin]]"}
        assistant = {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "spin", "arguments": "{}"}}],
        }
        result = {"role": "tool", "tool_call_id": "c1", "content": "done"}
        _, body = await self.post({"model": "m", "stream": True, "messages": [user, assistant, result]})
        [call] = _toolCalls(_sse(body))
        self.assertEqual(call["name"], "spin")

    async def test_usageWithCost(self) -> None:
        """
        A step's L{Usage} is reported in the usage chunk, with C{cost} when set.
        """
        await self._start(ScriptedModel(reactor=reactor))
        self.model.enqueue(Text("x", usage=Usage(prompt=7, completion=3, costUsd=0.25)))
        _, body = await self.post(
            {"model": "m", "stream": True, "stream_options": {"include_usage": True}, "messages": [{"role": "user", "content": "x"}]}
        )
        [usage] = [event["usage"] for event in _sse(body) if isinstance(event, dict) and "usage" in event]
        self.assertEqual(usage, {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10, "cost": 0.25})

    async def test_missingToolResultRefused(self) -> None:
        """
        A conversation whose assistant C{tool_calls} lack matching C{tool}
        messages is refused with 400 and an OpenAI error body, as real
        providers do; the request is still recorded.
        """
        await self._start(ScriptedModel(reactor=reactor))
        self.model.enqueue(Text("never sent"))
        messages = [
            {"role": "user", "content": "x"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "a", "arguments": "{}"}},
                    {"id": "c2", "type": "function", "function": {"name": "b", "arguments": "{}"}},
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "ok"},
            {"role": "user", "content": "go on"},
        ]
        code, body = await self.post({"model": "m", "stream": True, "messages": messages})
        self.assertEqual(code, 400)
        error = json.loads(body)["error"]
        self.assertEqual(error["type"], "invalid_request_error")
        self.assertIn("c2", error["message"])
        self.assertNotIn("c1,", error["message"])
        self.assertEqual(len(self.model.requests), 1)
        # The queued step was not consumed by the refused request.
        _, body = await self.post({"model": "m", "messages": [{"role": "user", "content": "x"}]})
        self.assertEqual(json.loads(body)["choices"][0]["message"]["content"], "never sent")

    async def test_recordsAuthorization(self) -> None:
        """
        Every request is recorded with lowercased headers, including
        C{authorization}, and its decoded body.
        """
        await self._start(ScriptedModel(reactor=reactor))
        body = {"model": "m", "messages": [{"role": "user", "content": "x"}]}
        await self.post(body, key="sk-$weird!key")
        [(headers, recorded)] = self.model.requests
        self.assertEqual(headers["authorization"], "Bearer sk-$weird!key")
        self.assertEqual(recorded, body)

    async def test_errors(self) -> None:
        """
        A queued L{Error} answers with its status; C{[[ERROR]]} with a 500.
        """
        await self._start(ScriptedModel(reactor=reactor))
        self.model.enqueue(Error(429, "slow down"))
        code, body = await self.post({"model": "m", "stream": True, "messages": [{"role": "user", "content": "x"}]})
        self.assertEqual((code, json.loads(body)["error"]["message"]), (429, "slow down"))
        code, body = await self.post({"model": "m", "stream": True, "messages": [{"role": "user", "content": "[[ERROR]]"}]})
        self.assertEqual(code, 500)
        self.assertEqual(json.loads(body)["error"]["type"], "server_error")

    async def test_badJsonRefused(self) -> None:
        """
        A body that is not a JSON object is refused with 400.
        """
        await self._start(ScriptedModel(reactor=reactor))
        assert self.model.url is not None
        response = await self.http.post(self.model.url + "/chat/completions", data=b"[1,")
        self.assertEqual(response.code, 400)
        self.assertIn("error", json.loads(await response.content()))

    async def postTo(self, path: str, body: Any, key: dict[bytes, str]) -> tuple[int, bytes]:
        """
        POST C{body} as JSON to C{path} under the model's C{/v1}, with the
        C{key} header its API's client sends.
        """
        assert self.model.url is not None
        response = await self.http.post(
            self.model.url + path, data=json.dumps(body).encode(),
            headers={**key, b"content-type": "application/json"},
        )
        return response.code, await response.content()

    async def postMessages(self, body: Any) -> tuple[int, bytes]:
        return await self.postTo("/messages?beta=true", body, {b"x-api-key": "sk-ant-test"})

    async def test_messagesAPI(self) -> None:
        """
        The same script behind Anthropic's messages API: an echo streamed
        as that API's events (the message with its input tokens, a text
        block in deltas, the stop reason with the output tokens); a tool
        marker as a C{tool_use} block whose input comes in pieces, and text
        once a C{tool_result} answers it; the request recorded with its
        headers.
        """
        await self._start(ScriptedModel(reactor=reactor))
        user = {"role": "user", "content": [{"type": "text", "text": "hi there"}]}
        code, body = await self.postMessages(
            {"model": "claude-1", "stream": True, "system": "be brief", "messages": [user]}
        )
        self.assertEqual(code, 200)
        events = _messageEvents(body)
        names = [line[len("event: "):] for line in body.decode().splitlines()
                 if line.startswith("event: ")]
        self.assertEqual(names, [e["type"] for e in events])
        self.assertEqual(names[0], "message_start")
        self.assertEqual(names[-1], "message_stop")
        self.assertEqual(events[0]["message"]["usage"]["input_tokens"], 1000)
        text = "".join(e["delta"]["text"] for e in events if e["type"] == "content_block_delta")
        self.assertEqual(text, "Hello from the scripted model (you said: 'hi there')")
        self.assertEqual(events[-2]["delta"]["stop_reason"], "end_turn")
        self.assertEqual(events[-2]["usage"]["output_tokens"], 50)
        headers, recorded = self.model.requests[-1]
        self.assertEqual((headers["x-api-key"], recorded["system"]), ("sk-ant-test", "be brief"))

        asking = {"role": "user", "content": 'do it [[TOOL:sophia_echo {"text": "yo"}]]'}
        _, body = await self.postMessages({"model": "m", "stream": True, "messages": [asking]})
        events = _messageEvents(body)
        [start] = [e for e in events if e["type"] == "content_block_start"]
        self.assertEqual(start["content_block"]["name"], "sophia_echo")
        given = "".join(e["delta"]["partial_json"] for e in events
                        if e["type"] == "content_block_delta")
        self.assertEqual(json.loads(given), {"text": "yo"})
        self.assertEqual(events[-2]["delta"]["stop_reason"], "tool_use")
        callId = start["content_block"]["id"]
        answered = [
            asking,
            {"role": "assistant", "content": [{"type": "tool_use", "id": callId,
                                               "name": "sophia_echo", "input": {"text": "yo"}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": callId,
                                          "content": "echo:yo"}]},
        ]
        _, body = await self.postMessages({"model": "m", "stream": True, "messages": answered})
        events = _messageEvents(body)
        text = "".join(e["delta"]["text"] for e in events if e["type"] == "content_block_delta")
        self.assertEqual(text, "The tool sophia_echo answered.")

    async def test_messagesAPIRefusals(self) -> None:
        """
        A body that is not a conversation, a queued L{Error} and
        C{[[ERROR]]} are answered with that API's error object.
        """
        await self._start(ScriptedModel(reactor=reactor))
        code, body = await self.postMessages([1])
        self.assertEqual((code, json.loads(body)["type"]), (400, "error"))
        code, body = await self.postMessages({"model": "m"})
        self.assertEqual(code, 400)
        self.model.enqueue(Error(429, "slow down"))
        code, body = await self.postMessages({"model": "m", "messages": [{"role": "user", "content": "x"}]})
        self.assertEqual((code, json.loads(body)["error"]["message"]), (429, "slow down"))
        code, body = await self.postMessages(
            {"model": "m", "messages": [{"role": "user", "content": "[[ERROR]]"}]}
        )
        self.assertEqual((code, json.loads(body)["error"]["type"]), (500, "api_error"))

    async def postGenerate(self, body: Any) -> tuple[int, list[Any]]:
        code, content = await self.postTo(
            "/models/gemini-1:streamGenerateContent?alt=sse", body, {b"x-goog-api-key": "g-test"}
        )
        if code != 200:
            return code, [json.loads(content)]
        return code, _messageEvents(content)

    async def test_generateContentAPI(self) -> None:
        """
        The same script behind Google's generateContent: an echo streamed
        as responses of text parts, the last with the finish reason and the
        usage; a tool marker as a C{functionCall} part, and text once a
        C{functionResponse} answers it.
        """
        await self._start(ScriptedModel(reactor=reactor))
        user = {"role": "user", "parts": [{"text": "hi there"}]}
        code, responses = await self.postGenerate(
            {"contents": [user], "systemInstruction": {"parts": [{"text": "be brief"}]}}
        )
        self.assertEqual(code, 200)
        parts = [p for r in responses for p in r["candidates"][0]["content"]["parts"]]
        self.assertEqual("".join(p["text"] for p in parts),
                         "Hello from the scripted model (you said: 'hi there')")
        self.assertEqual(responses[-1]["candidates"][0]["finishReason"], "STOP")
        self.assertEqual(responses[-1]["usageMetadata"]["totalTokenCount"], 1050)
        self.assertEqual(self.model.requests[-1][0]["x-goog-api-key"], "g-test")

        asking = {"role": "user", "parts": [{"text": 'do it [[TOOL:sophia_echo {"text": "yo"}]]'}]}
        _, responses = await self.postGenerate({"contents": [asking]})
        [call] = [p["functionCall"] for r in responses
                  for p in r["candidates"][0]["content"]["parts"] if "functionCall" in p]
        self.assertEqual((call["name"], call["args"]), ("sophia_echo", {"text": "yo"}))
        answered = [
            asking,
            {"role": "model", "parts": [{"functionCall": call}]},
            {"role": "user", "parts": [{"functionResponse": {"name": "sophia_echo",
                                                             "response": {"output": "echo:yo"}}}]},
        ]
        _, responses = await self.postGenerate({"contents": answered})
        parts = [p for r in responses for p in r["candidates"][0]["content"]["parts"]]
        self.assertEqual("".join(p["text"] for p in parts), "The tool sophia_echo answered.")

    async def test_generateContentRefusals(self) -> None:
        """
        A body with no C{contents}, a queued L{Error} and C{[[ERROR]]} are
        answered with Google's error object.
        """
        await self._start(ScriptedModel(reactor=reactor))
        code, [error] = await self.postGenerate({"model": "m"})
        self.assertEqual((code, error["error"]["status"]), (400, "INVALID_ARGUMENT"))
        self.model.enqueue(Error(429, "slow down"))
        code, [error] = await self.postGenerate({"contents": [{"role": "user", "parts": []}]})
        self.assertEqual((code, error["error"]["message"]), (429, "slow down"))
        code, [error] = await self.postGenerate(
            {"contents": [{"role": "user", "parts": [{"text": "[[ERROR]]"}]}]}
        )
        self.assertEqual((code, error["error"]["status"]), (500, "INTERNAL"))

    async def test_responsesAPI(self) -> None:
        """
        The same script behind OpenAI's responses API: an echo as a message
        item whose text comes in deltas, the response completed with its
        usage; a tool marker as a function call item whose arguments come
        in pieces, and text once its output is in the input; a cut ends
        the response incomplete; a refusal is OpenAI's error object.
        """
        await self._start(ScriptedModel(reactor=reactor))

        async def post(body: Any) -> tuple[int, bytes]:
            return await self.postTo("/responses", body, {b"authorization": "Bearer sk-r"})

        user = {"role": "user", "content": [{"type": "input_text", "text": "hi there"}]}
        code, body = await post({"model": "r-1", "stream": True, "input": [user]})
        self.assertEqual(code, 200)
        events = _messageEvents(body)
        self.assertEqual(events[0]["type"], "response.created")
        text = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
        self.assertEqual(text, "Hello from the scripted model (you said: 'hi there')")
        self.assertEqual(events[-1]["type"], "response.completed")
        self.assertEqual(events[-1]["response"]["usage"]["total_tokens"], 1050)

        asking = {"role": "user", "content": 'do it [[TOOL:sophia_echo {"text": "yo"}]]'}
        _, body = await post({"model": "r-1", "stream": True, "input": [asking]})
        events = _messageEvents(body)
        [item] = [e["item"] for e in events if e["type"] == "response.output_item.done"]
        self.assertEqual((item["type"], item["name"]), ("function_call", "sophia_echo"))
        given = "".join(e["delta"] for e in events
                        if e["type"] == "response.function_call_arguments.delta")
        self.assertEqual(json.loads(given), {"text": "yo"})
        answered = [asking, item, {"type": "function_call_output", "call_id": item["call_id"],
                                   "output": "echo:yo"}]
        _, body = await post({"model": "r-1", "stream": True, "input": answered})
        text = "".join(e["delta"] for e in _messageEvents(body)
                       if e["type"] == "response.output_text.delta")
        self.assertEqual(text, "The tool sophia_echo answered.")

        _, body = await post({"model": "r-1", "stream": True,
                              "input": [{"role": "user", "content": "[[CUT]]"}]})
        last = _messageEvents(body)[-1]
        self.assertEqual((last["type"], last["response"]["incomplete_details"]["reason"]),
                         ("response.incomplete", "max_output_tokens"))
        code, body = await post({"model": "r-1"})
        self.assertEqual((code, json.loads(body)["error"]["type"]), (400, "invalid_request_error"))

    async def test_slowMarkerIsPacedByTheReactor(self) -> None:
        """
        C{[[SLOW]]} streams C{slowDeltas} deltas C{slowDelayMs} apart on the
        model's clock: nothing more is written until the clock moves.
        """
        clock = Clock()
        clock.advance(1_000_000)
        await self._start(ScriptedModel(reactor=clock, slowDeltas=3, slowDelayMs=500))
        raw = await self.rawRequest({"model": "m", "stream": True, "messages": [{"role": "user", "content": "[[SLOW]]"}]})
        await self.until(lambda: b"data: " in raw.received)
        self.assertNotIn(b"slow-0", raw.received)
        clock.advance(0.4)
        await deferLater(reactor, 0.05, lambda: None)
        self.assertNotIn(b"slow-0", raw.received)
        clock.advance(0.1)
        await self.until(lambda: b"slow-0" in raw.received)
        self.assertNotIn(b"slow-1", raw.received)
        clock.advance(0.5)
        clock.advance(0.5)
        await self.until(lambda: b"[DONE]" in raw.received)
        self.assertIn(b"slow-2", raw.received)
        raw.transport.loseConnection()
        await raw.lost

    async def test_disconnectStopsTheStream(self) -> None:
        """
        When the client goes away mid-stream the model counts a disconnect
        and cancels its pending write.
        """
        clock = Clock()
        await self._start(ScriptedModel(reactor=clock))
        self.model.enqueue(Text("abcdef", chunks=3, delayMs=1000))
        raw = await self.rawRequest({"model": "m", "stream": True, "messages": [{"role": "user", "content": "x"}]})
        await self.until(lambda: b"data: " in raw.received)
        self.assertEqual(len(clock.getDelayedCalls()), 1)
        raw.transport.loseConnection()
        await raw.lost
        await self.until(lambda: self.model.disconnects == 1)
        self.assertEqual(clock.getDelayedCalls(), [])

    async def test_hangUntilDisconnect(self) -> None:
        """
        L{Hang} never answers; the client's disconnect is counted.
        """
        await self._start(ScriptedModel(reactor=reactor))
        self.model.enqueue(Hang())
        raw = await self.rawRequest({"model": "m", "stream": True, "messages": [{"role": "user", "content": "x"}]})
        await self.until(lambda: len(self.model.requests) == 1)
        await deferLater(reactor, 0.05, lambda: None)
        self.assertEqual(raw.received, b"")
        raw.transport.loseConnection()
        await raw.lost
        await self.until(lambda: self.model.disconnects == 1)
