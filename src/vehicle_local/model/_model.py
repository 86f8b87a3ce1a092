# -*- test-case-name: tests.live.test_model -*-
"""
A scripted OpenAI-compatible chat-completions server for tests and local runs
(which also answers OpenAI's responses API, Anthropic's messages API and
Google's generateContent from the same script: L{vehicle_local.model._wire}).

It owns the script (queued steps, or answers chosen by markers in the last
user message), the SSE and JSON renderings of an answer, and a record of every
request it received. Test-only: it records the C{authorization} header.
"""

from __future__ import annotations

import json
import re
from collections import deque
from typing import Any, BinaryIO, ClassVar, Sequence, Union, cast

from attrs import define, evolve, field, frozen
from klein import Klein
from twisted.internet.address import IPv4Address
from twisted.internet.defer import Deferred
from twisted.internet.endpoints import TCP4ServerEndpoint
from twisted.internet.interfaces import (
    IDelayedCall,
    IListeningPort,
    IReactorTCP,
    IReactorTime,
)
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.web.resource import IResource
from twisted.web.server import Request, Site

from vehicle._sockets import NoDelayHTTPChannel
from vehicle._timers import cancelIfActive
from vehicle.protocol import JSON, JSONObject, loads
from vehicle_local.model._wire import (
    ANTHROPIC,
    GOOGLE,
    RESPONSES,
    Answer,
    Api,
    Call,
    Usage,
    textOf,
)


__all__ = [
    "Usage",
    "Text",
    "ToolCall",
    "Error",
    "Hang",
    "StreamedError",
    "Step",
    "ScriptedModel",
]


@frozen
class Text:
    """
    Answer with C{text}, streamed as C{chunks} deltas C{delayMs} apart,
    after C{thinking} (when given) streamed the same way as the model's
    reasoning (C{reasoning_content}, as llama.cpp and DeepSeek send it);
    ended with C{finishReason} (C{content_filter}: the provider refused).
    """

    text: str
    chunks: int = 5
    delayMs: int = 0
    usage: Usage | None = field(default=None, kw_only=True)
    thinking: str | None = field(default=None, kw_only=True)
    finishReason: str = field(default="stop", kw_only=True)


@frozen
class ToolCall:
    """
    Answer with a call of tool C{name}; enqueue a sequence of these for an
    answer with several calls.
    """

    name: str
    arguments: JSONObject
    id: str | None = None
    usage: Usage | None = field(default=None, kw_only=True)


@frozen
class Error:
    """
    Answer with HTTP C{status} and an OpenAI error body carrying C{message}.
    """

    status: int
    message: str


@frozen
class Hang:
    """
    Never answer; the request stays open until the client disconnects.
    """


@frozen
class StreamedError:
    """
    Answer C{200} with an event stream whose one C{data:} event carries an
    error object with C{message}, as some providers report a failure once
    the stream has begun.  C{{key}} in C{message} stands for the bearer the
    request carried (a provider quoting the caller's key).  The event is
    written C{pieceBytes} at a time, C{delayMs} apart, so the key arrives
    cut across writes.
    """

    message: str
    pieceBytes: int = 7
    delayMs: int = 5


Step = Union[Text, ToolCall, Error, Hang, StreamedError, Sequence[ToolCall]]

_TOOL = re.compile(r"\[\[TOOL:([\w.-]+)(?:\s+(\{.*?\}))?\]\]", re.DOTALL)
_LOOP = re.compile(r"\[\[LOOP:([\w.-]+)(?:\s+(\{.*?\}))?\]\]", re.DOTALL)
_DEFAULT_ARGUMENTS: JSONObject = {"text": "hello from the model"}


def _globalReactor() -> Any:
    from twisted.internet import reactor

    return reactor


class _Refused(Exception):
    """
    The request is refused with an OpenAI error body.
    """

    def __init__(self, status: int, message: str, kind: str, param: str | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.kind = kind
        self.param = param


def _errorBody(message: str, kind: str, param: str | None = None) -> bytes:
    return json.dumps(
        {"error": {"message": message, "type": kind, "param": param, "code": None}}
    ).encode("utf-8")


def _checkToolResults(messages: list[JSON]) -> None:
    """
    Refuse, as real providers do, an assistant message whose C{tool_calls}
    are not all answered by the C{tool} messages right after it.
    """
    for index, message in enumerate(messages):
        if not isinstance(message, dict) or message.get("role") != "assistant":
            continue
        calls = message.get("tool_calls")
        wanted = [
            call.get("id") for call in (calls if isinstance(calls, list) else [])
            if isinstance(call, dict)
        ]
        if not wanted:
            continue
        answered: list[JSON] = []
        for follower in messages[index + 1 :]:
            if not isinstance(follower, dict) or follower.get("role") != "tool":
                break
            answered.append(follower.get("tool_call_id"))
        missing = [callId for callId in wanted if callId not in answered]
        if missing:
            raise _Refused(
                400,
                "An assistant message with 'tool_calls' must be followed by tool "
                "messages responding to each 'tool_call_id'. The following "
                "tool_call_ids did not have response messages: " + ", ".join(map(str, missing)),
                "invalid_request_error",
                f"messages.[{index}].role",
            )


@define
class _Stream:
    """
    Writes timed frames to a request, stopping at a disconnect.
    """

    request: Request
    reactor: IReactorTime
    frames: deque[tuple[float, bytes]]
    done: Deferred[None] = field(init=False)
    _pending: IDelayedCall | None = field(init=False, default=None)

    def start(self) -> Deferred[None]:
        self.done = Deferred(self._cancel)
        self._pump()
        return self.done

    def _pump(self) -> None:
        while self.frames:
            delay, data = self.frames.popleft()
            if delay > 0:
                self._pending = self.reactor.callLater(delay, self._write, data)
                return
            self.request.write(data)
        self.done.callback(None)

    def _write(self, data: bytes) -> None:
        self._pending = None
        self.request.write(data)
        self._pump()

    def _cancel(self, _: Deferred[None]) -> None:
        cancelIfActive(self._pending)
        self._pending = None
        self.frames.clear()


@define
class ScriptedModel:
    """
    An OpenAI-compatible chat-completions endpoint that answers from a script.

    Queued steps (L{enqueue}) are answered first, one per request; with an
    empty queue the last user message's marker decides: C{[[SLOW]]},
    C{[[TOOL:name]]}, C{[[LOOP:name]]}, C{[[ERROR]]}, C{[[REFUSE]]} (a
    refusal: C{content_filter}), C{[[CUT]]} (out of tokens: C{length}),
    else an echo (thought about first, as
    reasoning, when it has C{[[THINK]]}).

    @ivar reactor: the clock used to space streamed deltas.
    @ivar requests: every request received, as C{(headers, body)}; header
        names are lowercased.
    @ivar disconnects: how many clients went away before their answer ended.
    @ivar url: the base URL (ending in C{/v1}) once L{listen} has fired.
    """

    router: ClassVar[Klein] = Klein()
    _log: ClassVar[Logger] = Logger()

    reactor: IReactorTime = field(factory=_globalReactor)
    slowDeltas: int = 17
    slowDelayMs: int = 300
    defaultUsage: Usage = Usage(prompt=1000, completion=50)
    requests: list[tuple[dict[str, str], JSONObject]] = field(init=False, factory=list)
    disconnects: int = field(init=False, default=0)
    url: str | None = field(init=False, default=None)
    _script: deque[Step] = field(init=False, factory=deque)
    _counter: int = field(init=False, default=0)

    def enqueue(self, step: Step) -> None:
        """
        Answer the next unanswered request with C{step}.
        """
        self._script.append(step)

    def resource(self) -> IResource:
        """
        The web resource to serve (e.g. under a L{Site}).
        """
        return self.router.resource()

    def listen(self, reactor: IReactorTCP, port: int = 0) -> Deferred[IListeningPort]:
        """
        Listen on loopback C{port} (0: any free one) and set L{url}.
        """
        endpoint = TCP4ServerEndpoint(reactor, port, interface="127.0.0.1")
        site = Site(self.resource())
        site.noisy = False
        # Each delta leaves at once: pi waits for it (pi.md, section 13).
        site.protocol = NoDelayHTTPChannel  # type: ignore[assignment]  # Site's type names its H2 wrapper only

        def listening(listeningPort: IListeningPort) -> IListeningPort:
            address = listeningPort.getHost()
            assert isinstance(address, IPv4Address)
            self.url = f"http://127.0.0.1:{address.port}/v1"
            return listeningPort

        listened: Deferred[IListeningPort] = endpoint.listen(site)
        return listened.addCallback(listening)

    @router.route("/health", methods=["GET"])
    def health(self, request: Request) -> bytes:
        """
        Whether the model is up (for the local run's health check).
        """
        request.setHeader(b"content-type", b"application/json")
        return b'{"ok": true}'

    @router.route("/v1/chat/completions", methods=["POST"])
    def chatCompletions(self, request: Request) -> bytes | Deferred[None]:
        """
        Record the request, then answer it from the script.
        """
        body = self._received(request)
        if body is None:
            return self._refuse(
                request, _Refused(400, "We could not parse the JSON body of your request.", "invalid_request_error")
            )
        request.notifyFinish().addErrback(self._lost)
        messages = body.get("messages")
        if not isinstance(messages, list):
            return self._refuse(
                request, _Refused(400, "'messages' is a required property", "invalid_request_error", "messages")
            )
        try:
            _checkToolResults(messages)
        except _Refused as refused:
            return self._refuse(request, refused)
        step = self._script.popleft() if self._script else self._byMarker(messages)
        return self._answer(request, body, step)

    @router.route("/v1/messages", methods=["POST"])
    def messages(self, request: Request) -> bytes | Deferred[None]:
        """
        The same script behind Anthropic's messages API (pi's
        C{anthropic-messages}).
        """
        return self._serve(request, ANTHROPIC)

    @router.route("/v1/responses", methods=["POST"])
    def responses(self, request: Request) -> bytes | Deferred[None]:
        """
        The same script behind OpenAI's responses API (pi's
        C{openai-responses}).
        """
        return self._serve(request, RESPONSES)

    @router.route("/v1/models/<string:call>", methods=["POST"])
    def generateContent(self, request: Request, call: str) -> bytes | Deferred[None]:
        """
        The same script behind Google's generateContent (pi's
        C{google-generative-ai}, which streams: C{<model>:streamGenerateContent}).
        """
        return self._serve(request, GOOGLE)

    def _serve(self, request: Request, api: Api) -> bytes | Deferred[None]:
        """
        A request of C{api} recorded as it came, its conversation read for
        the markers, the answer streamed as that API streams one.
        """
        body = self._received(request)
        conversation = api.conversation(body) if body is not None else None
        if body is None or conversation is None:
            return self._refuseIn(request, api, 400, api.missing)
        request.notifyFinish().addErrback(self._lost)
        step = self._script.popleft() if self._script else self._byMarker(conversation)
        if isinstance(step, Hang):
            return Deferred()
        if isinstance(step, (Error, StreamedError)):
            return self._refuseIn(request, api, step.status if isinstance(step, Error) else 500,
                                  step.message)
        answer = self._compose(body, step)
        request.setHeader(b"content-type", b"text/event-stream")
        request.setHeader(b"cache-control", b"no-cache")
        return _Stream(request, self.reactor, api.frames(answer)).start()

    def _received(self, request: Request) -> JSONObject | None:
        """
        Record C{request} (its headers, its body when that is a JSON object,
        else C{{}}) and give its body, or L{None} when it is not an object.
        """
        headers = {
            name.decode("latin-1").lower(): ", ".join(v.decode("latin-1") for v in values)
            for name, values in request.requestHeaders.getAllRawHeaders()
        }
        try:
            body = loads(cast(BinaryIO, request.content).read())
        except ValueError:
            body = None
        received = body if isinstance(body, dict) else None
        self.requests.append((headers, received if received is not None else {}))
        return received

    def _refuseIn(self, request: Request, api: Api, status: int, message: str) -> bytes:
        request.setResponseCode(status)
        request.setHeader(b"content-type", b"application/json")
        return api.refusal(status, message)

    def _lost(self, reason: Failure) -> None:
        self.disconnects += 1
        self._log.debug("scripted model: client went away ({reason})", reason=reason.value)

    def _refuse(self, request: Request, refused: _Refused) -> bytes:
        request.setResponseCode(refused.status)
        request.setHeader(b"content-type", b"application/json")
        return _errorBody(refused.message, refused.kind, refused.param)

    def _byMarker(self, messages: list[JSON]) -> Step:
        lastUser, text = -1, ""
        for index, message in enumerate(messages):
            if isinstance(message, dict) and message.get("role") == "user":
                lastUser, text = index, textOf(message.get("content"))
        if "[[ERROR]]" in text:
            return Error(500, "The scripted model failed on purpose ([[ERROR]]).")
        if "[[REFUSE]]" in text:
            return Text("I can't help with that.", finishReason="content_filter")
        if "[[CUT]]" in text:
            return Text("This answer runs out of tok", finishReason="length")
        if "[[SLOW]]" in text:
            words = "".join(f"slow-{n} " for n in range(self.slowDeltas))
            return Text(words, chunks=self.slowDeltas, delayMs=self.slowDelayMs)
        loop = _LOOP.search(text)
        if loop is not None:
            return ToolCall(loop.group(1), _arguments(loop.group(2)))
        tool = _TOOL.search(text)
        if tool is not None:
            answered = any(
                isinstance(message, dict) and message.get("role") == "tool"
                for message in messages[lastUser + 1 :]
            )
            if not answered:
                return ToolCall(tool.group(1), _arguments(tool.group(2)))
            return Text(f"The tool {tool.group(1)} answered.")
        thinking = f"The person said '{text}'; I should greet them." if "[[THINK]]" in text else None
        return Text(f"Hello from the scripted model (you said: '{text}')", thinking=thinking)

    def _nextId(self, prefix: str) -> str:
        self._counter += 1
        return f"{prefix}{self._counter:010d}"

    def _answer(self, request: Request, body: JSONObject, step: Step) -> bytes | Deferred[None]:
        if isinstance(step, Hang):
            return Deferred()
        if isinstance(step, Error):
            kind = "invalid_request_error" if step.status < 500 else "server_error"
            return self._refuse(request, _Refused(step.status, step.message, kind))
        if isinstance(step, StreamedError):
            return self._streamedError(request, step)
        answer = self._compose(body, step)
        if not body.get("stream"):
            request.setHeader(b"content-type", b"application/json")
            return answer.completion()
        streamOptions = body.get("stream_options")
        withUsage = isinstance(streamOptions, dict) and bool(streamOptions.get("include_usage"))
        request.setHeader(b"content-type", b"text/event-stream")
        request.setHeader(b"cache-control", b"no-cache")
        return _Stream(request, self.reactor, answer.frames(withUsage)).start()

    def _compose(self, body: JSONObject, step: Text | ToolCall | Sequence[ToolCall]) -> Answer:
        """
        The answer C{step} makes to the request C{body}: its text, or its
        tool calls (each given an id when the script names none).
        """
        if isinstance(step, (Text, ToolCall)):
            usage = step.usage
        else:
            usage = next((call.usage for call in step if call.usage is not None), None)
        usage = usage or self.defaultUsage
        completionId = self._nextId("chatcmpl-")
        parts = Answer(
            id=completionId,
            model=str(body.get("model", "scripted")),
            created=int(self.reactor.seconds()),
            usage=usage,
        )
        if isinstance(step, Text):
            return evolve(parts, text=step.text, chunks=step.chunks, delay=step.delayMs / 1000.0,
                          thinking=step.thinking, finishReason=step.finishReason)
        return evolve(parts, calls=tuple(
            Call(id=call.id or self._nextId("call_"), name=call.name,
                  arguments=json.dumps(call.arguments))
            for call in ([step] if isinstance(step, ToolCall) else step)
        ))

    def _streamedError(self, request: Request, step: StreamedError) -> Deferred[None]:
        header = (request.getHeader(b"authorization") or b"").decode("latin-1")
        bearer = header[len("Bearer ") :] if header.startswith("Bearer ") else header
        event = b"data: " + json.dumps(
            {"error": {"message": step.message.replace("{key}", bearer),
                       "type": "invalid_request_error", "code": 401}}
        ).encode("utf-8") + b"\n\n"
        size = max(1, step.pieceBytes)
        frames: deque[tuple[float, bytes]] = deque(
            (step.delayMs / 1000.0, event[start : start + size])
            for start in range(0, len(event), size)
        )
        request.setHeader(b"content-type", b"text/event-stream")
        request.setHeader(b"cache-control", b"no-cache")
        return _Stream(request, self.reactor, frames).start()


def _arguments(raw: str | None) -> JSONObject:
    """
    The tool arguments given in a marker (a JSON object), or the default.
    """
    if raw is None:
        return dict(_DEFAULT_ARGUMENTS)
    try:
        parsed = loads(raw)
    except ValueError:
        return dict(_DEFAULT_ARGUMENTS)
    return parsed if isinstance(parsed, dict) else dict(_DEFAULT_ARGUMENTS)
