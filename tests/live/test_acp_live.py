"""
The live half of L{tests.unit.test_acp}: C{vehicle acp} in a child process,
driven by the official ACP client library (L{tests.support.acp.Editor}) and
by raw lines, against a live host with real pi behind the gardend stand-in,
on the scripted model.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from acp import RequestError, text_block
from twisted.trial.unittest import TestCase

from tests.support._clients import Client, clientEnvironment, startClient
from tests.support.acp import AsyncioThread, Editor, vehicleEditor
from tests.support.live import LiveHost, requirePi, startStandIn


MASTER = "master-acp-test"
TOOL = '[[TOOL:mcp__graph__create_document {"title": "Cow notes"}]]'


class _Live(TestCase):
    """
    A stand-in, a live host behind it, and editors on an asyncio thread.
    """

    timeout = 120

    async def startHost(self) -> None:
        requirePi()
        self.stand = startStandIn(self, masterKey=MASTER)
        self.host = await LiveHost(self, mcpUrl=self.stand.mcpUrl).start()
        self.stand.setServiceUrl(self.host.url)
        self.loop = AsyncioThread()
        self.addCleanup(self.loop.stop)
        self.editors: list[Editor] = []
        self.addCleanup(self._closeEditors)

    async def _closeEditors(self) -> None:
        for editor in self.editors:
            if editor.exitCode is None and hasattr(editor, "process"):
                await editor.close()

    async def editor(self, *args: str) -> Editor:
        editor = vehicleEditor(self.loop, self.stand.url, MASTER, *args,
                               home=str(Path(self.mktemp()).absolute()))
        self.editors.append(editor)
        self.initialized = await editor.start()
        return editor

    async def newSession(self, editor: Editor) -> str:
        answer = await editor.do(lambda c: c.new_session(cwd="/home/person/project", mcp_servers=[]))
        return str(answer.session_id)

    def prompt(self, editor: Editor, sessionId: str, text: str, **meta: Any) -> Any:
        return editor.do(lambda c: c.prompt(session_id=sessionId, prompt=[text_block(text)], **meta))

    def lease(self, sessionId: str) -> Any:
        return self.host.registry().sessions[sessionId].currentLease()


class TurnTests(_Live):
    """
    A whole turn, streamed, with its tool calls; cancelling one mid-run.
    """

    async def test_wholeTurnWithToolCalls(self) -> None:
        """
        C{initialize} negotiates version 1 and says what is offered; a new
        session is a vehicle session whose lease the agent holds; a prompt
        that makes a graph tool call streams the call (pending, in progress,
        completed, with the tool's output) and the reply's text, and
        answers C{end_turn}.  The editor's own words are not echoed back.
        The session is listed with its first words as its title; when the
        editor quits, the lease is let go and the agent exits 0.
        """
        await self.startHost()
        editor = await self.editor()
        init = self.initialized
        self.assertEqual(init.protocol_version, 1)
        caps = init.agent_capabilities
        self.assertTrue(caps.load_session)
        self.assertFalse(caps.prompt_capabilities.image)
        self.assertIsNotNone(caps.session_capabilities.list)
        self.assertIsNotNone(caps.session_capabilities.resume)
        self.assertIsNotNone(caps.session_capabilities.close)
        self.assertEqual(init.agent_info.name, "vehicle")

        sid = await self.newSession(editor)
        self.assertTrue(self.lease(sid).clientId.startswith("acp-"))
        answer = await self.prompt(editor, sid, "note the cows " + TOOL)
        self.assertEqual(answer.stop_reason, "end_turn")

        [call] = editor.of(sid, "tool_call")
        self.assertEqual(call["title"], "mcp__graph__create_document")
        self.assertEqual(call["kind"], "edit")
        self.assertEqual(call["status"], "pending")
        progress = [u for u in editor.of(sid, "tool_call_update") if u["toolCallId"] == call["toolCallId"]]
        self.assertEqual([u.get("status") for u in progress if u.get("status")],
                         ["in_progress", "completed"])
        [output] = [u["content"] for u in progress if u.get("content")]
        self.assertTrue(output[0]["content"]["text"], progress)
        self.assertEqual(editor.texts(sid), "The tool mcp__graph__create_document answered.")
        self.assertEqual(editor.of(sid, "user_message_chunk"), [])
        kinds = [u["sessionUpdate"] for s, u in editor.updates if s == sid]
        self.assertLess(kinds.index("tool_call"), kinds.index("agent_message_chunk"))

        listed = await editor.do(lambda c: c.list_sessions(cwd="/home/person/project"))
        [info] = [s for s in listed.sessions if s.session_id == sid]
        self.assertEqual(info.cwd, "/home/person/project")
        self.assertEqual(info.title, "note the cows " + TOOL)

        self.assertEqual(await editor.close(), 0)
        self.assertIsNone(self.lease(sid))
        forwarded = {r["headers"].get("x-vehicle-client-id") for r in self.stand.requestsSeen}
        self.assertEqual(len(forwarded), 1, forwarded)

    async def test_cancelMidRun(self) -> None:
        """
        C{session/cancel} while the reply streams aborts the run in the
        host; the pending prompt answers C{cancelled}, and the next prompt
        goes on in the same session.
        """
        await self.startHost()
        editor = await self.editor()
        sid = await self.newSession(editor)
        answer = self.prompt(editor, sid, "[[SLOW]] count the cows")
        await editor.waitFor(lambda: "slow-1" in editor.texts(sid), "the reply streaming")
        await editor.do(lambda c: c.cancel(session_id=sid))
        self.assertEqual((await answer).stop_reason, "cancelled")
        events = self.host.events(sid)
        self.assertIn("command.aborted", [e["type"] for e in events])
        [settled] = [e for e in events if e["type"] == "run.settled"]
        self.assertTrue(settled["data"]["aborted"])
        self.assertNotIn("slow-11", editor.texts(sid))
        again = await self.prompt(editor, sid, "and now?")
        self.assertEqual(again.stop_reason, "end_turn")
        self.assertTrue(editor.texts(sid).endswith("(you said: 'and now?')"))


class ThoughtTests(_Live):
    """
    What the model thought before it answered, as thought chunks.
    """

    async def test_thoughtsStreamAndReplay(self) -> None:
        """
        A model that reasons first (the scripted model's C{reasoning_content},
        which pi keeps as thinking): its reasoning streams to the editor as
        C{agent_thought_chunk}s, piece by piece and before the reply's
        words, and the host keeps it on the message; a second editor's
        C{session/load} tells it again before the reply.
        """
        await self.startHost()
        editor = await self.editor()
        sid = await self.newSession(editor)
        said = "think it over [[THINK]]"
        answer = await self.prompt(editor, sid, said)
        self.assertEqual(answer.stop_reason, "end_turn")
        thought = f"The person said '{said}'; I should greet them."
        self.assertEqual(editor.texts(sid, "agent_thought_chunk"), thought)
        self.assertGreater(len(editor.of(sid, "agent_thought_chunk")), 1)
        kinds = [u["sessionUpdate"] for s, u in editor.updates if s == sid]
        self.assertLess(kinds.index("agent_thought_chunk"), kinds.index("agent_message_chunk"))
        self.assertEqual(kinds[-1], "agent_message_chunk")
        self.assertNotIn("greet them", editor.texts(sid))
        [reply] = [e["data"] for e in self.host.events(sid)
                   if e["type"] == "message.completed" and e["data"]["role"] == "assistant"]
        self.assertEqual(reply["thinking"], thought)
        await editor.close()

        second = await self.editor()
        await second.do(
            lambda c: c.load_session(session_id=sid, cwd="/home/person/project", mcp_servers=[])
        )
        self.assertEqual([u["sessionUpdate"] for s, u in second.updates],
                         ["user_message_chunk", "agent_thought_chunk", "agent_message_chunk"])
        self.assertEqual(second.texts(sid, "agent_thought_chunk"), thought)
        await second.close()


class StopReasonTests(_Live):
    """
    The stop reasons a run's end gives besides C{end_turn} and
    C{cancelled}, from real pi.
    """

    async def test_budgetStopsTheTurn(self) -> None:
        """
        A model that never stops calling tools runs into the run's turn
        budget (the spec's "Budget", 12 turns by default): the host aborts
        the run, and the prompt answers C{max_turn_requests}.
        """
        await self.startHost()
        editor = await self.editor()
        sid = await self.newSession(editor)
        answer = await self.prompt(editor, sid, "go round [[LOOP:mcp__graph__list_documents]]")
        self.assertEqual(answer.stop_reason, "max_turn_requests")
        [exceeded] = [e["data"] for e in self.host.events(sid) if e["type"] == "budget.exceeded"]
        self.assertEqual(exceeded["reason"], "max_turns")
        again = await self.prompt(editor, sid, "and now?")
        self.assertEqual(again.stop_reason, "end_turn")

    async def test_refusal(self) -> None:
        """
        A provider that refuses (C{finish_reason: content_filter}, which pi
        reports as an error naming it) ends the prompt with C{refusal}, not
        an error; the refusal's words are shown.
        """
        await self.startHost()
        editor = await self.editor()
        sid = await self.newSession(editor)
        answer = await self.prompt(editor, sid, "do the bad thing [[REFUSE]]")
        self.assertEqual(answer.stop_reason, "refusal")
        self.assertEqual(editor.texts(sid), "I can't help with that.")

    async def test_outOfTokens(self) -> None:
        """
        An answer the model cut for its token limit (C{finish_reason:
        length}, pi's C{length}) ends the prompt with C{max_tokens}.
        """
        await self.startHost()
        editor = await self.editor()
        sid = await self.newSession(editor)
        answer = await self.prompt(editor, sid, "go on and on [[CUT]]")
        self.assertEqual(answer.stop_reason, "max_tokens")
        self.assertEqual(editor.texts(sid), "This answer runs out of tok")


class SessionTests(_Live):
    """
    Loading a session with its history, two editors on one session, and a
    dropped connection to the host.
    """

    async def test_loadReplaysTheHistory(self) -> None:
        """
        A second editor's C{session/load} replays the whole conversation
        (the person's words, the replies, the tool call with its output)
        before it answers, takes the lease the first let go, and goes on
        with the next prompt.
        """
        await self.startHost()
        first = await self.editor()
        sid = await self.newSession(first)
        await self.prompt(first, sid, "how many cows?")
        await self.prompt(first, sid, "note them " + TOOL)
        await first.close()

        second = await self.editor()
        loaded = await second.do(
            lambda c: c.load_session(session_id=sid, cwd="/home/person/project", mcp_servers=[])
        )
        self.assertTrue(loaded.field_meta["vehicle"]["holdsLease"])
        kinds = [u["sessionUpdate"] for s, u in second.updates]
        self.assertEqual(
            kinds,
            ["user_message_chunk", "agent_message_chunk", "user_message_chunk", "tool_call",
             "tool_call_update", "agent_message_chunk"],
        )
        self.assertEqual(second.texts(sid, "user_message_chunk"),
                         "how many cows?" + "note them " + TOOL)
        self.assertIn("(you said: 'how many cows?')", second.texts(sid))
        [done] = second.of(sid, "tool_call_update")
        self.assertEqual(done["status"], "completed")
        self.assertTrue(done["content"][0]["content"]["text"])
        answer = await self.prompt(second, sid, "and now?")
        self.assertEqual(answer.stop_reason, "end_turn")
        self.assertTrue(self.lease(sid).clientId.startswith("acp-"))

    async def test_twoEditorsOnOneSession(self) -> None:
        """
        The second editor on a session the first drives loads it and sees
        what the first does (its words and the replies) as they come, but
        its own prompt is refused with the holder named; with
        C{_meta.vehicle.takeover} it takes the lease over (the same person),
        and then the first is refused, naming the second.  C{session/close}
        lets the lease go; C{session/resume} takes it back without a replay.
        """
        await self.startHost()
        first = await self.editor("--client-id", "acp-first")
        second = await self.editor("--client-id", "acp-second")
        sid = await self.newSession(first)
        loaded = await second.do(
            lambda c: c.load_session(session_id=sid, cwd="/home/person/project", mcp_servers=[])
        )
        self.assertFalse(loaded.field_meta["vehicle"]["holdsLease"])
        self.assertEqual(loaded.field_meta["vehicle"]["holder"]["clientId"], "acp-first")

        await self.prompt(first, sid, "how many cows?")
        await second.waitFor(lambda: "(you said: 'how many cows?')" in second.texts(sid),
                             "the second editor seeing the reply")
        self.assertEqual(second.texts(sid, "user_message_chunk"), "how many cows?")
        self.assertEqual(second.texts(sid), first.texts(sid))

        with self.assertRaises(RequestError) as refused:
            await self.prompt(second, sid, "mine now?")
        self.assertIn("acp-first", str(refused.exception.data or refused.exception))
        self.assertEqual(self.lease(sid).clientId, "acp-first")

        answer = await self.prompt(second, sid, "taking over", vehicle={"takeover": True})
        self.assertEqual(answer.stop_reason, "end_turn")
        self.assertEqual(self.lease(sid).clientId, "acp-second")
        with self.assertRaises(RequestError) as refused:
            await self.prompt(first, sid, "still mine?")
        self.assertIn("acp-second", refused.exception.args[0])

        await second.do(lambda c: c.close_session(session_id=sid))
        self.assertIsNone(self.lease(sid))
        count = len(first.updates)
        await first.do(lambda c: c.resume_session(session_id=sid, cwd="/home/person/project"))
        self.assertEqual(len(first.updates), count)  # no replay
        self.assertEqual(self.lease(sid).clientId, "acp-first")
        self.assertEqual((await self.prompt(first, sid, "back")).stop_reason, "end_turn")

    async def test_droppedConnectionResumes(self) -> None:
        """
        The event stream is cut at the host mid-reply: the agent reconnects
        from its last seq (C{Last-Event-ID}) and the editor gets the whole
        reply once, no piece missing or repeated, and C{end_turn}.
        """
        await self.startHost()
        editor = await self.editor()
        sid = await self.newSession(editor)
        answer = self.prompt(editor, sid, "[[SLOW]] count the cows")
        await editor.waitFor(lambda: "slow-2" in editor.texts(sid), "the reply streaming")
        self.assertEqual(len(self.host.api.streams), 1)
        for stream in list(self.host.api.streams):
            stream.request.transport.loseConnection()
        self.assertEqual((await answer).stop_reason, "end_turn")
        self.assertEqual(editor.texts(sid), "".join(f"slow-{n} " for n in range(12)))
        self.assertIn(b"connection lost after seq", editor.stderr)
        resumed = [r for r in self.stand.requestsSeen if "last-event-id" in r["headers"]]
        self.assertEqual(len(resumed), 1)
        self.assertTrue(resumed[0]["path"].endswith(f"since={resumed[0]['headers']['last-event-id']}"))
        self.assertEqual((await self.prompt(editor, sid, "again")).stop_reason, "end_turn")


#: Malformed messages and the error each gets: (line, id, code).
MALFORMED: list[tuple[bytes, Any, int]] = [
    (b"{not json", None, -32700),
    (b"\xff\xfe", None, -32700),
    (b'[{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1}}]', None, -32600),
    (b"[]", None, -32600),
    (b"42", None, -32600),
    (b'{"jsonrpc":"1.0","id":2,"method":"initialize","params":{"protocolVersion":1}}', 2, -32600),
    (b'{"id":3,"method":"initialize","params":{"protocolVersion":1}}', 3, -32600),
    (b'{"jsonrpc":"2.0","id":{"x":1},"method":"initialize"}', None, -32600),
    (b'{"jsonrpc":"2.0","method":"session/new","params":{"cwd":"/","mcpServers":[]}}', None, -32600),
    (b'{"jsonrpc":"2.0","id":4,"method":"session/new","params":{"cwd":"/","mcpServers":[]}}', 4, -32600),
    (b'{"jsonrpc":"2.0","id":5,"method":"initialize","params":{"protocolVersion":"1"}}', 5, -32602),
    (b'{"jsonrpc":"2.0","id":6,"method":"initialize","params":[1]}', 6, -32602),
    (b'{"jsonrpc":"2.0","id":7,"method":"no/such","params":{}}', 7, -32601),
    (b'{"jsonrpc":"2.0","id":8}', 8, -32600),
]

#: After C{initialize}: malformed calls of the methods themselves.
MALFORMED_AFTER: list[tuple[bytes, Any, int]] = [
    (b'{"jsonrpc":"2.0","id":"n1","method":"session/new","params":{"cwd":"relative","mcpServers":[]}}',
     "n1", -32602),
    (b'{"jsonrpc":"2.0","id":"n2","method":"session/new","params":{"cwd":"/x"}}', "n2", -32602),
    (b'{"jsonrpc":"2.0","id":"p1","method":"session/prompt","params":{"sessionId":"s1"}}', "p1", -32602),
    (b'{"jsonrpc":"2.0","id":"p2","method":"session/prompt",'
     b'"params":{"sessionId":"s-unknown","prompt":[{"type":"text","text":"hi"}]}}', "p2", -32002),
    (b'{"jsonrpc":"2.0","id":"l1","method":"session/load",'
     b'"params":{"sessionId":"snope","cwd":"/x","mcpServers":[]}}', "l1", -32002),
    (b'{"jsonrpc":"2.0","id":"c1","method":"session/cancel","params":{"sessionId":"s1"}}', "c1", -32600),
    (b'{"jsonrpc":"2.0","id":"m1","method":"session/set_mode","params":{}}', "m1", -32601),
    (b'{"jsonrpc":"2.0","id":"a1","method":"authenticate","params":{"methodId":"x"}}', "a1", -32602),
    (b'{"jsonrpc":"2.0","id":"k1","method":"session/list","params":{"cursor":"abc"}}', "k1", -32602),
]


class MalformedTests(_Live):
    """
    Raw lines to the agent's standard input: each malformed message gets
    the JSON-RPC error it should, in order, and the stream stays in step.
    """

    async def test_malformedMessages(self) -> None:
        """
        Bad JSON, batches, a wrong or missing C{jsonrpc}, a bad or missing
        id, an unknown method, a call before C{initialize}, params of the
        wrong shape: each is answered with the error of the table, with the
        message's id when it could be read; notifications (a cancel, an
        unknown method without id) get nothing; every line of stdout is a
        JSON-RPC 2.0 message; a well-formed call after them all is
        answered as usual.
        """
        await self.startHost()
        lines = [raw for raw, _, _ in MALFORMED]
        lines += [b"", b'{"jsonrpc":"2.0","method":"no/such/notification"}',
                  b'{"jsonrpc":"2.0","id":"i1","method":"initialize","params":{"protocolVersion":7}}',
                  b'{"jsonrpc":"2.0","method":"session/cancel","params":{"sessionId":"s1"}}']
        lines += [raw for raw, _, _ in MALFORMED_AFTER]
        lines += [b'{"jsonrpc":"2.0","id":"last","method":"session/list","params":{}}']
        client: Client = startClient(
            self, "acp", "--gardend", self.stand.url, "--graph", "g1",
            env=clientEnvironment(self, VEHICLE_TOKEN=MASTER), stdin=None,
        )
        client.transport.write(b"\n".join(lines) + b"\n")
        await client.waitForLine(lambda line: '"id":"last"' in line)
        client.transport.closeStdin()
        self.assertEqual(await client.ended, 0)
        messages = [json.loads(line) for line in client.lines]
        self.assertTrue(all(m.get("jsonrpc") == "2.0" for m in messages), client.lines)
        errors = [(m["id"], m["error"]["code"]) for m in messages if "error" in m]
        expected = [(i, code) for _, i, code in MALFORMED + MALFORMED_AFTER]
        # In order, but for those that ask the host (answered in their time).
        self.assertEqual(sorted(errors, key=repr), sorted(expected, key=repr), client.lines)
        local = [e for e in errors if e[0] != "l1"]
        self.assertEqual(local, [e for e in expected if e[0] != "l1"])
        [init] = [m for m in messages if m.get("id") == "i1"]
        self.assertEqual(init["result"]["protocolVersion"], 1)
        self.assertEqual(messages[-1]["id"], "last")
        self.assertEqual(messages[-1]["result"], {"sessions": []})
        self.assertEqual(len(messages), len(expected) + 2)
        self.assertIn("no/such/notification", client.errorText)
