"""
Tests for C{vehicle acp} (L{vehicle.clients}'s ACP agent), with no process
and no socket: the JSON-RPC envelope (L{readMessage}, the params' checks),
the mapping of prompts, refusals, events and transcripts
(L{promptCommand}, L{stopReason}, L{EventMapper}, L{replay}), and the agent
itself against a fake gateway whose event streams the tests write.  The
live half, the console script driven by the official ACP client library, is
L{tests.live.test_acp_live}.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlsplit

from twisted.internet.defer import Deferred, succeed
from twisted.internet.task import Clock
from twisted.python import usage
from twisted.trial.unittest import SynchronousTestCase

from vehicle import PROTOCOL
from vehicle.clients import (
    AcpAgent,
    AcpOptions,
    EventMapper,
    HostLink,
    RPCError,
    promptCommand,
    readMessage,
    replay,
    stopReason,
)
from vehicle.clients._acpmap import RunOutcome, rpcErrorFor, sessionInfo, toolKind
from vehicle.clients._acprpc import (
    Ignored,
    InitializeParams,
    ListParams,
    Notification,
    Reply,
    Request,
    SessionParams,
    checkParams,
)

from tests.support.sse import FakeStream


def line(message: Any) -> bytes:
    return json.dumps(message).encode()


class ReadMessageTests(SynchronousTestCase):
    """
    L{readMessage}: one line as a JSON-RPC 2.0 message, or the error the
    specification names for it.
    """

    def reply(self, raw: bytes, initialized: bool = True) -> tuple[Any, int]:
        message = readMessage(raw, initialized)
        assert isinstance(message, Reply), message
        return message.id, message.error.code

    def test_malformed(self) -> None:
        """
        Each malformed line gets its error, with the id when it can be read.
        """
        table: list[tuple[bytes, Any, int]] = [
            (b"{", None, -32700),
            (b"\xff", None, -32700),
            (b"[]", None, -32600),
            (line([{"jsonrpc": "2.0", "id": 1, "method": "initialize"}]), None, -32600),
            (b'"text"', None, -32600),
            (line({"jsonrpc": "2.0", "id": 1.5, "method": "initialize"}), None, -32600),
            (line({"jsonrpc": "2.0", "id": True, "method": "initialize"}), None, -32600),
            (line({"jsonrpc": "2.1", "id": 3, "method": "initialize"}), 3, -32600),
            (line({"id": "x", "method": "initialize"}), "x", -32600),
            (line({"jsonrpc": "2.0", "id": 4}), 4, -32600),
            (line({"jsonrpc": "2.0", "id": 5, "method": 7}), 5, -32600),
            (line({"jsonrpc": "2.0", "id": 6, "method": "session/new", "params": [1]}), 6, -32602),
            (line({"jsonrpc": "2.0", "id": 7, "method": "session/new", "params": 3}), 7, -32600),
            (line({"jsonrpc": "2.0", "method": "session/prompt", "params": {}}), None, -32600),
            (line({"jsonrpc": "2.0", "id": 8, "method": "session/cancel", "params": {}}), 8, -32600),
            (line({"jsonrpc": "2.0", "id": 9, "method": "nope"}), 9, -32601),
            (line({"jsonrpc": "2.0", "id": 10, "method": "session/set_mode"}), 10, -32601),
        ]
        for raw, requestId, code in table:
            self.assertEqual(self.reply(raw), (requestId, code), raw)

    def test_beforeInitialize(self) -> None:
        """
        Before C{initialize}, every other request is refused (C{-32600}) and
        notifications are ignored; C{initialize} itself is read.
        """
        self.assertEqual(
            self.reply(line({"jsonrpc": "2.0", "id": 1, "method": "session/list"}), False),
            (1, -32600),
        )
        self.assertIsInstance(
            readMessage(line({"jsonrpc": "2.0", "method": "session/cancel", "params": {}}), False),
            Ignored,
        )
        self.assertEqual(
            readMessage(line({"jsonrpc": "2.0", "id": 0, "method": "initialize",
                              "params": {"protocolVersion": 1}}), False),
            Request(0, "initialize", InitializeParams(protocolVersion=1)),
        )

    def test_wellFormed(self) -> None:
        """
        Requests, notifications, responses and blank lines; C{params: null}
        is no params.
        """
        self.assertIsNone(readMessage(b"  \r", True))
        self.assertEqual(
            readMessage(line({"jsonrpc": "2.0", "id": None, "method": "session/list",
                              "params": None}), True),
            Request(None, "session/list", ListParams(cwd=None, cursor=None)),
        )
        self.assertEqual(
            readMessage(line({"jsonrpc": "2.0", "method": "session/cancel",
                              "params": {"sessionId": "s1"}}), True),
            Notification("session/cancel", SessionParams(sessionId="s1")),
        )
        for ignored in (
            {"jsonrpc": "2.0", "id": 3, "result": {}},
            {"jsonrpc": "2.0", "method": "_zed/unknown"},
        ):
            self.assertIsInstance(readMessage(line(ignored), True), Ignored)


class CheckParamsTests(SynchronousTestCase):
    """
    L{checkParams}: the shape of each method's params, C{-32602} naming
    the field.
    """

    def field(self, method: str, params: dict[str, Any]) -> str:
        with self.assertRaises(RPCError) as raised:
            checkParams(method, params)
        self.assertEqual(raised.exception.code, -32602)
        return str(raised.exception.data["field"])

    def test_refused(self) -> None:
        """
        Missing or mistyped fields, relative paths, additional roots.
        """
        table = [
            ("initialize", {}, "protocolVersion"),
            ("initialize", {"protocolVersion": True}, "protocolVersion"),
            ("initialize", {"protocolVersion": 70000}, "protocolVersion"),
            ("initialize", {"protocolVersion": 1, "clientInfo": "x"}, "clientInfo"),
            ("session/new", {"mcpServers": []}, "cwd"),
            ("session/new", {"cwd": "here", "mcpServers": []}, "cwd"),
            ("session/new", {"cwd": "/x", "mcpServers": {}}, "mcpServers"),
            ("session/new", {"cwd": "/x", "mcpServers": [], "additionalDirectories": ["/y"]},
             "additionalDirectories"),
            ("session/load", {"cwd": "/x", "mcpServers": []}, "sessionId"),
            ("session/resume", {"sessionId": "s", "cwd": "x"}, "cwd"),
            ("session/list", {"cwd": "rel"}, "cwd"),
            ("session/list", {"cursor": 3}, "cursor"),
            ("session/prompt", {"sessionId": "s", "prompt": "hi"}, "prompt"),
            ("session/prompt", {"sessionId": "s", "prompt": [{"text": "hi"}]}, "prompt[0].type"),
            ("session/cancel", {}, "sessionId"),
            ("$/cancel_request", {"requestId": 1.5}, "requestId"),
            ("authenticate", {}, "methodId"),
        ]
        for method, params, field in table:
            self.assertEqual(self.field(method, params), field, (method, params))

    def test_accepted(self) -> None:
        """
        The protocol's own examples pass.
        """
        checkParams("initialize", {"protocolVersion": 1, "clientCapabilities": {}})
        checkParams("session/new", {"cwd": "/x", "mcpServers": [{"name": "fs"}]})
        checkParams("session/resume", {"sessionId": "s", "cwd": "/x"})
        checkParams("session/list", {"cwd": None, "cursor": None})
        checkParams("session/prompt", {"sessionId": "s", "prompt": [{"type": "text", "text": ""}]})
        checkParams("$/cancel_request", {"requestId": None})


class PromptCommandTests(SynchronousTestCase):
    """
    L{promptCommand}: an editor's prompt as a command's text and
    C{contextRefs}.
    """

    def test_textAndLinks(self) -> None:
        """
        Text blocks in order; a link's name in its place and its URI among
        the references, once.
        """
        text, refs = promptCommand([
            {"type": "text", "text": "compare "},
            {"type": "resource_link", "name": "a.py", "uri": "file:///p/a.py"},
            {"type": "text", "text": " with "},
            {"type": "resource_link", "name": "a.py", "uri": "file:///p/a.py"},
        ])
        self.assertEqual(text, "compare a.py with a.py")
        self.assertEqual(refs, ["file:///p/a.py"])

    def test_refused(self) -> None:
        """
        What is not advertised, no text, too many or too long references.
        """
        link = {"type": "resource_link", "name": "n"}
        for blocks in (
            [{"type": "image", "data": "", "mimeType": "image/png"}],
            [{"type": "resource", "resource": {"uri": "file:///a", "text": "x"}}],
            [{"type": "text", "text": "  "}],
            [{"type": "text", "text": 3}],
            [{"type": "resource_link", "uri": "file:///a"}],
            [{**link, "uri": "file:///" + "a" * 300}],
            [{**link, "uri": f"file:///{n}"} for n in range(65)],
        ):
            with self.assertRaises(RPCError) as raised:
                promptCommand(blocks)
            self.assertEqual(raised.exception.code, -32602, blocks)


class RefusalTests(SynchronousTestCase):
    """
    L{rpcErrorFor}: the host's and gardend's refusals as JSON-RPC errors.
    """

    def test_codes(self) -> None:
        """
        Credentials, an unknown session, a malformed request, the rest.
        """
        for code, expected in (
            ("unauthorized", -32000),
            ("not_found", -32002),
            ("invalid_request", -32602),
            ("lease_held", -32603),
            ("unreachable", -32603),
        ):
            error = rpcErrorFor({"type": "error", "code": code, "message": "m",
                                 "details": {"d": 1}}, lambda frame: "explained")
            self.assertEqual(error.code, expected, code)
            self.assertEqual(error.data, {"code": code, "details": {"d": 1}})
        self.assertEqual(
            rpcErrorFor({"code": "unauthorized"}, lambda frame: "explained").message, "explained"
        )


class StopReasonTests(SynchronousTestCase):
    """
    L{stopReason}: how a command ended, as a prompt's stop reason or error.
    """

    def test_table(self) -> None:
        """
        Each ending and its reason.
        """
        ok = RunOutcome(aborted=False, stopReason="stop")
        table: list[tuple[str, dict[str, Any], RunOutcome | None, bool, str]] = [
            ("completed", {}, ok, False, "end_turn"),
            ("completed", {}, None, False, "end_turn"),
            ("completed", {}, ok, True, "cancelled"),
            ("aborted", {}, RunOutcome(aborted=True, stopReason="aborted"), False, "cancelled"),
            ("cancelled", {"reason": "abort"}, None, False, "cancelled"),
            ("cancelled", {"reason": "budget_exceeded"}, None, False, "max_turn_requests"),
            ("aborted", {}, RunOutcome(aborted=True, budget="max_turns"), False, "max_turn_requests"),
            ("completed", {}, RunOutcome(aborted=True, budget="max_cost"), False, "max_turn_requests"),
            ("completed", {}, RunOutcome(aborted=False, stopReason="length"), False, "max_tokens"),
            ("completed", {}, RunOutcome(aborted=False, stopReason="error",
                                         errorMessage="Provider finish_reason: content_filter"),
             False, "refusal"),
            ("completed", {}, RunOutcome(aborted=True, stopReason="aborted"), False, "cancelled"),
        ]
        for terminal, data, run, cancelled, expected in table:
            self.assertEqual(stopReason(terminal, data, run, cancelled), expected,
                             (terminal, data, run))

    def test_errors(self) -> None:
        """
        A failed or interrupted command, a model that failed, a body that
        died: the prompt is answered with an error saying so.
        """
        for terminal, data, run, words in (
            ("failed", {"error": "no body", "code": "body_failed"}, None, "no body"),
            ("interrupted", {"reason": "host stopped"}, None, "host stopped"),
            ("completed", {}, RunOutcome(aborted=False, stopReason="error",
                                         errorMessage="503 upstream"), "503 upstream"),
            ("completed", {}, RunOutcome(aborted=True, stopReason="body_exited"), "died"),
        ):
            with self.assertRaises(RPCError) as raised:
                stopReason(terminal, data, run, False)
            self.assertEqual(raised.exception.code, -32603)
            self.assertIn(words, raised.exception.message)


def event(kind: str, seq: int | None = None, **data: Any) -> dict[str, Any]:
    e: dict[str, Any] = {"type": kind, "timestamp": "2026-12-01T00:00:00Z",
                         "sessionId": "s1", "data": data}
    if seq is not None:
        e["seq"] = seq
    return e


class EventMapperTests(SynchronousTestCase):
    """
    L{EventMapper}: a session's events as C{session/update}s.
    """

    def feed(self, mapper: EventMapper, *events: dict[str, Any]) -> list[dict[str, Any]]:
        """
        The updates C{events} make, as the editor reads them.
        """
        return [update.toJSON() for e in events for update in mapper.feed(e)]

    def test_deltasThenTheRest(self) -> None:
        """
        Deltas are message chunks of one message id; the message's
        completion adds only what the deltas had not said.
        """
        mapper = EventMapper()
        updates = self.feed(
            mapper,
            event("run.started", 1, runId="run-3", tools=[]),
            event("message.delta", runId="run-3", text="Hel"),
            event("message.delta", runId="run-3", text="lo "),
            event("message.completed", 2, runId="run-3", role="assistant", text="Hello cows",
                  toolCalls=[], stopReason="stop", usage={}),
        )
        self.assertEqual([u["content"]["text"] for u in updates], ["Hel", "lo ", "cows"])
        self.assertEqual({u["messageId"] for u in updates}, {"run-3-m0"})
        self.assertEqual({u["sessionUpdate"] for u in updates}, {"agent_message_chunk"})

    def test_thoughtsBeforeWords(self) -> None:
        """
        Thinking deltas are thought chunks, a message of their own beside
        the words'; the message's completion adds only the thinking and the
        text the deltas had not said, thought first.  Joined mid-message,
        both are held back and told whole at the completion.
        """
        mapper = EventMapper()
        updates = self.feed(
            mapper,
            event("run.started", 1, runId="run-3", tools=[]),
            event("thinking.delta", runId="run-3", text="hmm "),
            event("message.delta", runId="run-3", text="Hel"),
            event("message.completed", 2, runId="run-3", role="assistant", text="Hello",
                  thinking="hmm greet", toolCalls=[], stopReason="stop", usage={}),
        )
        self.assertEqual(
            [(u["sessionUpdate"], u["content"]["text"], u["messageId"]) for u in updates],
            [("agent_thought_chunk", "hmm ", "run-3-m0-thought"),
             ("agent_message_chunk", "Hel", "run-3-m0"),
             ("agent_thought_chunk", "greet", "run-3-m0-thought"),
             ("agent_message_chunk", "lo", "run-3-m0")],
        )
        mapper.gap = True
        late = self.feed(
            mapper,
            event("thinking.delta", runId="run-3", text="later"),
            event("message.completed", 3, runId="run-3", role="assistant", text="Bye",
                  thinking="so, later", toolCalls=[], stopReason="stop", usage={}),
        )
        self.assertEqual(
            [(u["sessionUpdate"], u["content"]["text"], u["messageId"]) for u in late],
            [("agent_thought_chunk", "so, later", "run-3-m1-thought"),
             ("agent_message_chunk", "Bye", "run-3-m1")],
        )

    def test_gap(self) -> None:
        """
        After a reconnection, deltas are held back until the message
        completes, which says the rest: the chunks add up to the text.
        """
        mapper = EventMapper()
        first = self.feed(mapper, event("message.delta", text="slow-0 "))
        mapper.gap = True
        later = self.feed(
            mapper,
            event("message.delta", text="slow-2 "),
            event("message.completed", 4, role="assistant", text="slow-0 slow-1 slow-2 ",
                  toolCalls=[], stopReason="stop", usage={}),
            event("message.delta", text="next"),
        )
        texts = [u["content"]["text"] for u in first + later]
        self.assertEqual(texts, ["slow-0 ", "slow-1 slow-2 ", "next"])
        self.assertFalse(mapper.gap)

    def test_userMessages(self) -> None:
        """
        The editor's own words are not shown again (its note of what was
        open either); another client's are, without the note.
        """
        mapper = EventMapper()
        mapper.expectUser("mine")
        updates = self.feed(
            mapper,
            event("message.completed", 1, role="user", text="mine\n\n[open in Garden: d1]"),
            event("message.completed", 2, role="user", text="theirs\n\n[open in Garden: d2]"),
            event("message.completed", 3, role="user", text="mine"),
        )
        self.assertEqual([(u["sessionUpdate"], u["content"]["text"]) for u in updates],
                         [("user_message_chunk", "theirs"), ("user_message_chunk", "mine")])

    def test_toolCalls(self) -> None:
        """
        A call is announced with its message (pending), in progress when
        it starts, completed or failed when it ends, and its output is
        read from the transcript once it is there.
        """
        mapper = EventMapper()
        updates = self.feed(
            mapper,
            event("message.completed", 1, role="assistant", text="",
                  toolCalls=[{"id": "c1", "name": "bash"}, {"id": "c2", "name": "read"}],
                  stopReason="toolUse", usage={}),
            event("tool.started", 2, toolCallId="c1", toolName="bash", argsBytes=2),
            event("tool.result", 3, toolCallId="c1", toolName="bash", isError=False),
            event("tool.started", 4, toolCallId="c2", toolName="read", argsBytes=2),
            event("tool.result", 5, toolCallId="c2", toolName="read", isError=True),
            event("tool.started", 6, toolCallId="c3", toolName="grep", argsBytes=2),
        )
        self.assertEqual(
            [(u["sessionUpdate"], u["toolCallId"], u.get("status")) for u in updates],
            [("tool_call", "c1", "pending"), ("tool_call", "c2", "pending"),
             ("tool_call_update", "c1", "in_progress"), ("tool_call_update", "c1", "completed"),
             ("tool_call_update", "c2", "in_progress"), ("tool_call_update", "c2", "failed"),
             ("tool_call", "c3", "in_progress")],
        )
        self.assertEqual([u["kind"] for u in updates if u["sessionUpdate"] == "tool_call"],
                         ["execute", "read", "search"])
        self.assertEqual(mapper.awaiting, ["c1", "c2"])
        transcript = [
            {"role": "assistant", "toolCalls": [{"id": "c1", "name": "bash"},
                                                {"id": "c2", "name": "read"}]},
            {"role": "toolResult", "toolName": "bash", "text": "moo", "isError": False},
        ]
        [output] = [update.toJSON() for update in mapper.outputs(transcript)]
        self.assertEqual(output["toolCallId"], "c1")
        self.assertEqual(output["content"], [{"type": "content",
                                              "content": {"type": "text", "text": "moo"}}])
        self.assertEqual(mapper.awaiting, ["c2"])
        self.assertEqual(mapper.outputs(transcript), [])

    def test_runOutcome(self) -> None:
        """
        The last run's end: aborted or not, pi's stop reason, the model's
        error, the budget that stopped it.
        """
        mapper = EventMapper()
        self.feed(
            mapper,
            event("run.started", 1, runId="run-1", tools=[]),
            event("message.completed", 2, role="assistant", text="", toolCalls=[],
                  stopReason="error", errorMessage="boom", usage={}),
            event("budget.exceeded", 3, reason="max_turns", turns=1, costUsd=0, maxTurns=1,
                  maxCostUsd=None),
            event("run.settled", 4, runId="run-1", aborted=True),
        )
        self.assertEqual(mapper.lastRun, RunOutcome(aborted=True, stopReason="error",
                                                    errorMessage="boom", budget="max_turns"))
        self.feed(mapper, event("run.started", 5, runId="run-2", tools=[]),
                  event("run.settled", 6, runId="run-2", aborted=False, stopReason="stop"))
        self.assertEqual(mapper.lastRun, RunOutcome(aborted=False, stopReason="stop"))

    def test_renamed(self) -> None:
        """
        A rename is the session's new title.
        """
        self.assertEqual(self.feed(EventMapper(), event("session.renamed", 1, title="Cows")),
                         [{"sessionUpdate": "session_info_update", "title": "Cows"}])


class ReplayTests(SynchronousTestCase):
    """
    L{replay}, L{sessionInfo}, L{toolKind}.
    """

    def test_replay(self) -> None:
        """
        The transcript in order: words, replies (what was thought first),
        each call with its result.
        """
        transcript = [
            {"entryId": "e1", "role": "user", "text": "hi\n\n[open in Garden: d]"},
            {"entryId": "e2", "role": "assistant", "text": "",
             "toolCalls": [{"id": "c1", "name": "mcp__graph__read_document"}]},
            {"entryId": "e3", "role": "toolResult", "toolName": "mcp__graph__read_document",
             "text": "the doc", "isError": False},
            {"entryId": "e4", "role": "assistant", "text": "done", "toolCalls": [],
             "thinking": "all read"},
        ]
        self.assertEqual([update.toJSON() for update in replay(transcript)], [
            {"sessionUpdate": "user_message_chunk", "content": {"type": "text", "text": "hi"},
             "messageId": "e1"},
            {"sessionUpdate": "tool_call", "toolCallId": "c1", "title": "mcp__graph__read_document",
             "kind": "read", "status": "pending", "rawInput": {}},
            {"sessionUpdate": "tool_call_update", "toolCallId": "c1", "status": "completed",
             "content": [{"type": "content", "content": {"type": "text", "text": "the doc"}}]},
            {"sessionUpdate": "agent_thought_chunk",
             "content": {"type": "text", "text": "all read"}, "messageId": "e4-thought"},
            {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "done"},
             "messageId": "e4"},
        ])

    def test_sessionInfo(self) -> None:
        """
        The title, else the preview; the folder asked for.
        """
        self.assertEqual(
            sessionInfo({"sessionId": "s1", "title": None, "preview": "cows?",
                         "updatedAt": "2026-12-01T00:00:00Z"}, "/p"),
            {"sessionId": "s1", "cwd": "/p", "title": "cows?", "updatedAt": "2026-12-01T00:00:00Z"},
        )
        self.assertEqual(toolKind("mcp__graph__write_document"), "edit")
        self.assertEqual(toolKind(None), "other")


# -- the agent against a fake gateway -------------------------------------------


def frame(kind: str, value: Any) -> dict[str, Any]:
    return {"protocol": PROTOCOL, "type": kind, "requestId": None, "value": value}


def refusal(code: str, message: str, details: Any = None) -> dict[str, Any]:
    return {"protocol": PROTOCOL, "type": "error", "requestId": None, "code": code,
            "message": message, "details": details}


class _Answer:
    def __init__(self, body: dict[str, Any]) -> None:
        self.code = 200 if body.get("type") != "error" else 409
        self.body = json.dumps(body).encode()

    def content(self) -> Deferred[bytes]:
        return succeed(self.body)


class FakeGateway:
    """
    gardend and the host, as far as the agent asks: canned frames by
    route, event streams the test writes to, every request kept.
    """

    def __init__(self) -> None:
        self.seen: list[tuple[str, str, Any]] = []
        self.streams: dict[str, FakeStream] = {}
        self.answers: dict[tuple[str, str], Any] = {}
        summary = {"sessionId": "s1", "cursor": 2, "status": "idle",
                   "lease": {"clientId": "acp-me", "principal": "owner"}}
        self.summary = summary
        self.answers[("POST", "/sessions")] = frame("session.created", {"session": summary})
        self.answers[("POST", "/sessions/s1/commands")] = frame("command.accepted", {})
        self.answers[("POST", "/sessions/s1/claim")] = frame("driver.claimed", {"session": summary})
        self.answers[("POST", "/sessions/s1/release")] = frame("driver.released", {})
        self.answers[("GET", "/sessions/s1")] = frame(
            "session.snapshot", {"session": summary, "transcript": []})
        self.answers[("GET", "/sessions")] = frame("session.list", {"sessions": [summary]})

    def request(self, method: str, url: str, headers: Any = None, data: Any = None,
                **kw: Any) -> Deferred[Any]:
        path = urlsplit(url).path.split("/g/g1", 1)[1]
        body = json.loads(data) if data else None
        self.seen.append((method, path, body))
        if (headers or {}).get(b"Accept") == "text/event-stream":
            stream = self.streams[path.split("/")[2]] = FakeStream()
            return succeed(stream)
        answer = self.answers[(method, path)]
        return succeed(_Answer(answer(body) if callable(answer) else answer))

    def posted(self, path: str) -> list[Any]:
        return [body for method, p, body in self.seen if method == "POST" and p == path]


class AgentTests(SynchronousTestCase):
    """
    L{AcpAgent}: each method against a fake gateway, the session's
    events written into its stream by the test.
    """

    def setUp(self) -> None:
        self.front = FakeGateway()
        self.clock = Clock()
        self.sent: list[dict[str, Any]] = []
        self.warnings: list[str] = []
        self.counter = 0
        self.agent = AcpAgent(
            link=HostLink(http=self.front, gardend="http://gardend.test", graph="g1"),
            clientId="acp-me", send=self.sent.append, clock=self.clock,
            warn=self.warnings.append, newId=self.newId, cwd="/here",
        )

    def newId(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}-{self.counter}"

    def call(self, requestId: Any, method: str, **params: Any) -> None:
        self.agent.lineReceived(line({"jsonrpc": "2.0", "id": requestId, "method": method,
                                      "params": params}))

    def answer(self, requestId: Any) -> dict[str, Any]:
        [found] = [m for m in self.sent if "method" not in m and m["id"] == requestId]
        return found

    def updates(self) -> list[dict[str, Any]]:
        return [m["params"]["update"] for m in self.sent if m.get("method") == "session/update"]

    def opened(self) -> FakeStream:
        self.call(0, "initialize", protocolVersion=1)
        self.call(1, "session/new", cwd="/p", mcpServers=[{"name": "fs", "command": "/fs"}])
        return self.front.streams["s1"]

    def test_initialize(self) -> None:
        """
        Version 1 whatever the client asks; what is offered, honestly.
        """
        self.call(0, "initialize", protocolVersion=3)
        result = self.answer(0)["result"]
        self.assertEqual(result["protocolVersion"], 1)
        caps = result["agentCapabilities"]
        self.assertTrue(caps["loadSession"])
        self.assertEqual(caps["sessionCapabilities"], {"list": {}, "resume": {}, "close": {}})
        self.assertEqual(caps["promptCapabilities"],
                         {"image": False, "audio": False, "embeddedContext": False})
        self.assertEqual(result["authMethods"], [])

    def test_newSessionFollowsItsEvents(self) -> None:
        """
        C{session/new} creates a vehicle session, follows its events from
        its cursor, answers with its id, and says the editor's MCP servers
        are not connected.
        """
        self.opened()
        self.assertEqual(self.front.posted("/sessions"), [{"requestId": "acp-create-1"}])
        self.assertEqual(self.front.seen[1][:2], ("GET", "/sessions/s1/events"))
        result = self.answer(1)["result"]
        self.assertEqual(result["sessionId"], "s1")
        self.assertEqual(result["_meta"]["vehicle"]["mcpServersIgnored"], ["fs"])
        self.assertTrue(result["_meta"]["vehicle"]["holdsLease"])
        self.assertIn("fs", self.warnings[0])

    def test_promptStreamsAndEnds(self) -> None:
        """
        A prompt is a command; the session's events become updates; the
        command's end answers the prompt with its stop reason.
        """
        stream = self.opened()
        self.call(2, "session/prompt", sessionId="s1",
                  prompt=[{"type": "text", "text": "cows? "},
                          {"type": "resource_link", "name": "doc", "uri": "garden:d1"}])
        [command] = self.front.posted("/sessions/s1/commands")
        self.assertEqual(command, {"type": "prompt", "requestId": "acp-prompt-2",
                                   "text": "cows? doc", "contextRefs": ["garden:d1"]})
        for e in (
            event("command.accepted", 3, commandId="acp-prompt-2"),
            event("run.started", 4, runId="run-1", tools=[]),
            event("message.completed", 5, role="user", text="cows? doc\n\n[open in Garden: garden:d1]"),
            event("message.delta", runId="run-1", text="Moo"),
            event("message.completed", 6, role="assistant", text="Moo.", toolCalls=[],
                  stopReason="stop", usage={}),
            event("run.settled", 7, runId="run-1", aborted=False, stopReason="stop"),
        ):
            stream.send(e)
        self.assertEqual([m for m in self.sent if m.get("id") == 2], [])
        stream.send(event("command.completed", 8, commandId="acp-prompt-2"))
        self.assertEqual(self.answer(2)["result"], {"stopReason": "end_turn"})
        self.assertEqual([u["content"]["text"] for u in self.updates()], ["Moo", "."])

    def test_followUpWhileRunning(self) -> None:
        """
        A prompt while a run is under way is a follow-up.
        """
        stream = self.opened()
        stream.send(event("run.started", 3, runId="run-1", tools=[]))
        self.call(2, "session/prompt", sessionId="s1", prompt=[{"type": "text", "text": "and?"}])
        self.assertEqual(self.front.posted("/sessions/s1/commands")[0]["type"], "follow_up")

    def test_cancel(self) -> None:
        """
        C{session/cancel} aborts in the host; the prompt answers
        C{cancelled}, whatever the command's end.
        """
        stream = self.opened()
        self.call(2, "session/prompt", sessionId="s1", prompt=[{"type": "text", "text": "go"}])
        self.agent.lineReceived(line({"jsonrpc": "2.0", "method": "session/cancel",
                                      "params": {"sessionId": "s1"}}))
        commands = self.front.posted("/sessions/s1/commands")
        self.assertEqual([c["type"] for c in commands], ["prompt", "abort"])
        stream.send(event("command.completed", 3, commandId="acp-prompt-2"))
        self.assertEqual(self.answer(2)["result"], {"stopReason": "cancelled"})

    def test_leaseHeld(self) -> None:
        """
        A prompt on a session another client drives is refused naming the
        holder; with the flag, the lease is taken over and the prompt sent.
        """
        self.opened()
        holder = {"principal": "owner", "clientId": "ride-other"}
        self.front.answers[("POST", "/sessions/s1/commands")] = refusal(
            "lease_held", "held", {"holder": holder, "canTakeOver": True})
        self.front.answers[("POST", "/sessions/s1/claim")] = lambda body: (
            frame("driver.claimed", {"session": self.front.summary}) if body.get("takeover")
            else refusal("lease_held", "held", {"holder": holder, "canTakeOver": True}))
        self.call(2, "session/prompt", sessionId="s1", prompt=[{"type": "text", "text": "go"}])
        error = self.answer(2)["error"]
        self.assertEqual(error["code"], -32603)
        self.assertIn("ride-other", error["message"])
        self.assertIn("--takeover", error["message"])
        self.assertEqual(error["data"]["code"], "lease_held")

        self.front.answers[("POST", "/sessions/s1/commands")] = frame("command.accepted", {})
        self.agent.lineReceived(line({
            "jsonrpc": "2.0", "id": 3, "method": "session/prompt",
            "params": {"sessionId": "s1", "prompt": [{"type": "text", "text": "go"}],
                       "_meta": {"vehicle": {"takeover": True}}}}))
        self.assertEqual(self.front.posted("/sessions/s1/claim"),
                         [{"requestId": "acp-claim-3"}, {"requestId": "acp-claim-5", "takeover": True}])
        self.assertEqual(self.front.posted("/sessions/s1/commands")[-1]["requestId"], "acp-prompt-4")

    def test_loadReplaysFirst(self) -> None:
        """
        C{session/load} replays the transcript before it answers, then
        claims a free lease.
        """
        self.front.answers[("GET", "/sessions/s1")] = frame("session.snapshot", {
            "session": {**self.front.summary, "lease": None},
            "transcript": [{"entryId": "e1", "role": "user", "text": "hi"},
                           {"entryId": "e2", "role": "assistant", "text": "ho", "toolCalls": []}],
        })
        self.call(0, "initialize", protocolVersion=1)
        self.call(1, "session/load", sessionId="s1", cwd="/p", mcpServers=[])
        kinds = [m.get("method") or "answer" for m in self.sent[1:]]
        self.assertEqual(kinds, ["session/update", "session/update", "answer"])
        self.assertTrue(self.answer(1)["result"]["_meta"]["vehicle"]["holdsLease"])
        self.assertEqual(len(self.front.posted("/sessions/s1/claim")), 1)

    def test_listAndClose(self) -> None:
        """
        C{session/list} lists every session with the folder asked for (or
        the agent's); C{session/close} cancels, releases and forgets.
        """
        self.opened()
        self.call(2, "session/list")
        self.assertEqual(self.answer(2)["result"], {"sessions": [{"sessionId": "s1", "cwd": "/here"}]})
        self.call(3, "session/prompt", sessionId="s1", prompt=[{"type": "text", "text": "go"}])
        self.call(4, "session/close", sessionId="s1")
        self.assertEqual(self.answer(3)["result"], {"stopReason": "cancelled"})
        self.assertEqual(self.answer(4)["result"], {})
        self.assertEqual(len(self.front.posted("/sessions/s1/release")), 1)
        self.call(5, "session/prompt", sessionId="s1", prompt=[{"type": "text", "text": "go"}])
        self.assertEqual(self.answer(5)["error"]["code"], -32002)

    def test_endOfInput(self) -> None:
        """
        The end of the input lets every lease go; nothing more is written.
        """
        self.opened()
        self.agent.inputEnded()
        self.assertEqual(len(self.front.posted("/sessions/s1/release")), 1)
        self.assertTrue(self.agent.finished.called)
        count = len(self.sent)
        self.call(9, "session/list")
        self.assertEqual(len(self.sent), count)

    def test_streamRefused(self) -> None:
        """
        A session that is deleted fails the prompts under way.
        """
        stream = self.opened()
        self.call(2, "session/prompt", sessionId="s1", prompt=[{"type": "text", "text": "go"}])
        stream.send(event("session.deleted", 3, trashedAs="s1", by={}))
        stream.end()
        self.assertEqual(self.answer(2)["error"]["code"], -32002)


class OptionsTests(SynchronousTestCase):
    """
    L{AcpOptions}.
    """

    def test_options(self) -> None:
        """
        The gardend options, a profile, the takeover flag; no secret.
        """
        options = AcpOptions()
        options.parseOptions(["--gardend", "http://127.0.0.1:8700", "--graph", "demo",
                              "--profile", "agent", "--takeover"])
        self.assertTrue(options["takeover"])
        base = ["--gardend", "http://x", "--graph", "g"]
        for argv in (base + ["--profile", "cow"], base + ["--model-key-env", "sk-or-v1-abc"],
                     base[:2]):
            with self.assertRaises(usage.UsageError):
                AcpOptions().parseOptions(argv)
