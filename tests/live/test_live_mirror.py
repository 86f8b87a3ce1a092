"""
Integration: the mirror and delegation tokens, real pi + the gardend
stand-in's MCP endpoint.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from twisted.trial.unittest import TestCase


from tests.support._mcp_variant import useVariant
from tests.support.live import LiveHost, settledEvent, startStandIn, waitUntil


def standIn(testCase: TestCase) -> Any:
    return startStandIn(testCase)


class MirrorTests(TestCase):
    """
    The conversation is mirrored as the person, through MCP.
    """

    timeout = 90

    async def test_mirrorFollowsTheConversation(self) -> None:
        """
        The document appears after the first settled run with the person as
        the audit's actor, is rewritten only when something changed,
        follows a rename, survives an outage, and the delete answer names it.
        """
        stand = standIn(self)
        host = await LiveHost(self, mcpUrl=stand.mcpUrl).start()
        token = stand.mintDelegation("alice", "g1", "owner")
        code, frame = await host.call("POST", "/sessions", {"requestId": "c1", "title": "Cows"}, token=token)
        sid = frame["value"]["session"]["sessionId"]
        await host.call("POST", f"/sessions/{sid}/commands",
                        {"type": "prompt", "requestId": "p1", "text": "how many cows?"}, token=token)
        events = await host.waitFor(sid, lambda e: e["type"] in ("mirror.written", "mirror.failed"))
        self.assertEqual(events[-1]["type"], "mirror.written", events[-1])
        docId = f"sophia-conversation-{sid}"
        document = stand.document("g1", docId)
        self.assertIn("how many cows?", document["content"])
        self.assertEqual(document["title"], "Cows")
        writes = [a for a in stand.audit() if a.get("documentId") == docId]
        self.assertTrue(all(a["actor"] == "alice" and a["via"] == "service:vehicle" for a in writes))
        audited = len(stand.audit())

        code, frame = await host.call("PATCH", f"/sessions/{sid}", {"title": "Many cows"}, token=token)
        await host.waitFor(sid, lambda e: e["type"] == "mirror.written", since=frame["value"]["session"]["cursor"])
        self.assertEqual(stand.document("g1", docId)["title"], "Many cows")
        # A title change alone is a rename, not a rewrite.
        self.assertEqual([a["tool"] for a in stand.audit()[audited:]], ["rename"])

        stand.setOffline(True)
        cursor = host.registry().sessions[sid].cursor
        await host.call("POST", f"/sessions/{sid}/commands",
                        {"type": "prompt", "requestId": "p2", "text": "and sheep?"}, token=token)
        events = await host.waitFor(sid, lambda e: e["type"] == "mirror.failed", since=cursor)
        stand.setOffline(False)
        cursor = events[-1]["seq"]
        await host.call("POST", f"/sessions/{sid}/commands",
                        {"type": "prompt", "requestId": "p3", "text": "and goats?"}, token=token)
        await host.waitFor(sid, lambda e: e["type"] == "mirror.written", since=cursor)
        content = stand.document("g1", docId)["content"]
        self.assertIn("and sheep?", content)
        self.assertIn("and goats?", content)

        code, frame = await host.call("GET", f"/sessions/{sid}", token=token)
        self.assertEqual(frame["value"]["mirror"]["state"], "written")
        # The token lives in memory only: no event, no log line.
        self.assertNotIn(token, json.dumps(host.events(sid)))
        self.assertNotIn(token, "\n".join(host.logLines))
        self.assertTrue(host.logLines, "the host logged nothing: the scan proves nothing")
        await host.waitFor(sid, lambda e: e["type"] == "command.completed" and e["data"]["commandId"] == "p3")
        code, frame = await host.call("DELETE", f"/sessions/{sid}")
        self.assertEqual(code, 200, frame)
        self.assertEqual(frame["value"]["mirror"], {"documentId": docId, "graphId": "g1"})
        for path in Path(host.root).rglob("*"):
            if path.is_file():
                self.assertNotIn(token.encode(), path.read_bytes(), str(path))

    async def test_delegationRequiredAfterRestart(self) -> None:
        """
        After a restart the session has no token until its owner's next
        request: a prompt without one is delegation_required; with one it
        runs.
        """
        stand = standIn(self)
        host = await LiveHost(self, mcpUrl=stand.mcpUrl).start()
        token = stand.mintDelegation("alice", "g1", "owner")
        code, frame = await host.call("POST", "/sessions", {"requestId": "c1"}, token=token)
        sid = frame["value"]["session"]["sessionId"]
        await host.restart()
        code, frame = await host.call("POST", f"/sessions/{sid}/commands",
                                      {"type": "prompt", "requestId": "p1", "text": "hi"})
        self.assertEqual((code, frame["code"]), (409, "delegation_required"))
        code, frame = await host.call("POST", f"/sessions/{sid}/commands",
                                      {"type": "prompt", "requestId": "p1", "text": "hi"}, token=token)
        self.assertEqual(code, 202, frame)
        await host.waitFor(sid, settledEvent)

    async def test_viewerNeverMirrored(self) -> None:
        """
        A viewer's session is never written; its snapshot says why.
        """
        stand = standIn(self)
        host = await LiveHost(self, mcpUrl=stand.mcpUrl).start()
        token = stand.mintDelegation("vera", "g1", "viewer")
        code, frame = await host.call("POST", "/sessions", {"requestId": "c1"},
                                      principal="vera", role="viewer", token=token)
        sid = frame["value"]["session"]["sessionId"]
        await host.call("POST", f"/sessions/{sid}/commands",
                        {"type": "prompt", "requestId": "p1", "text": "hi"},
                        principal="vera", role="viewer", token=token)
        await host.waitFor(sid, lambda e: e["type"] == "command.completed",
                           principal="vera", role="viewer", token=token)
        code, frame = await host.call("GET", f"/sessions/{sid}", principal="vera", role="viewer", token=token)
        self.assertEqual(frame["value"]["mirror"]["state"], "skipped")
        self.assertIsNone(stand.document("g1", f"sophia-conversation-{sid}"))


class VariantMirrorTests(TestCase):
    """
    The mirror against an MCP server that nests its workspace otherwise and
    refuses an existing folder or document in other words.
    """

    timeout = 90

    async def test_twoSessionsInARowAcrossARestart(self) -> None:
        """
        Two sessions mirrored in a row, the second after a restart (the
        host must find the folders by reading the other nesting), then a
        rename: each document is written, nothing fails.
        """
        stand = standIn(self)
        useVariant(stand)
        host = await LiveHost(self, mcpUrl=stand.mcpUrl).start()
        token = stand.mintDelegation("alice", "g1", "owner")
        sids = []
        for n in range(2):
            if n:
                await host.restart()
            code, frame = await host.call("POST", "/sessions", {"requestId": f"c{n}"}, token=token)
            sid = frame["value"]["session"]["sessionId"]
            sids.append(sid)
            await host.call("POST", f"/sessions/{sid}/commands",
                            {"type": "prompt", "requestId": "p1", "text": f"cows {n}?"}, token=token)
            events = await host.waitFor(sid, lambda e: e["type"] in ("mirror.written", "mirror.failed"),
                                        token=token)
            self.assertEqual(events[-1]["type"], "mirror.written", events[-1])
            self.assertIn(f"cows {n}?", stand.document("g1", f"sophia-conversation-{sid}")["content"])
        self.assertEqual([a["tool"] for a in stand.audit()].count("create_folder"), 2)
        code, frame = await host.call("PATCH", f"/sessions/{sids[1]}", {"title": "Goats"}, token=token)
        await host.waitFor(sids[1], lambda e: e["type"] == "mirror.written",
                           since=frame["value"]["session"]["cursor"], token=token)
        self.assertEqual(stand.document("g1", f"sophia-conversation-{sids[1]}")["title"], "Goats")


class GraphToolTests(TestCase):
    """
    The body's graph tools act as the person, through the host's wiring.
    """

    timeout = 90

    async def test_chatToolCallAuditedAsPerson(self) -> None:
        """
        A chat session's model calls a writer tool; the stand-in's audit
        names the person (via service:vehicle), and the token used is the
        newest the owner sent.
        """
        stand = standIn(self)
        host = await LiveHost(self, mcpUrl=stand.mcpUrl).start()
        first = stand.mintDelegation("alice", "g1", "owner")
        code, frame = await host.call("POST", "/sessions", {"requestId": "c1"}, token=first)
        sid = frame["value"]["session"]["sessionId"]
        second = stand.mintDelegation("alice", "g1", "owner")
        self.assertNotEqual(first, second)
        tool = '[[TOOL:mcp__graph__create_document {"title": "Cow notes"}]]'
        await host.call("POST", f"/sessions/{sid}/commands",
                        {"type": "prompt", "requestId": "p1", "text": "note it " + tool}, token=second)
        events = await host.waitFor(sid, lambda e: e["type"] == "tool.result")
        self.assertFalse(events[-1]["data"]["isError"], events[-1])
        created = [a for a in stand.audit() if a["tool"] == "create_document"
                   and not a.get("documentId", "").startswith("sophia-conversation-")]
        self.assertTrue(created, stand.audit())
        self.assertEqual({(a["actor"], a["via"]) for a in created}, {("alice", "service:vehicle")})

    async def test_viewerHasOnlyReaderTools(self) -> None:
        """
        A viewer session's body cannot write: the writer tool is not there,
        and nothing lands in the stand-in.
        """
        stand = standIn(self)
        host = await LiveHost(self, mcpUrl=stand.mcpUrl).start()
        token = stand.mintDelegation("vera", "g1", "viewer")
        who = {"principal": "vera", "role": "viewer", "token": token}
        code, frame = await host.call("POST", "/sessions", {"requestId": "c1"}, **who)
        sid = frame["value"]["session"]["sessionId"]
        tool = '[[TOOL:mcp__graph__create_document {"title": "Nope"}]]'
        await host.call("POST", f"/sessions/{sid}/commands",
                        {"type": "prompt", "requestId": "p1", "text": "write " + tool}, **who)
        events = await host.waitFor(sid, lambda e: e["type"] == "tool.result", **who)
        self.assertTrue(events[-1]["data"]["isError"])
        self.assertEqual([a for a in stand.audit() if a["tool"] == "create_document"], [])

    async def test_viewerReaderToolsWhateverTheListing(self) -> None:
        """
        Against an MCP server that lists the writer tools to everyone, a
        viewer's session (the role fixed at creation) is offered only the
        tools whose scopes are all readers': the model is never told of a
        writer tool, run.started names none, and a call to one is refused
        in the body before it reaches the server.
        """
        stand = standIn(self)
        useVariant(stand, listAll=True)
        host = await LiveHost(self, mcpUrl=stand.mcpUrl).start()
        token = stand.mintDelegation("vera", "g1", "viewer")
        who = {"principal": "vera", "role": "viewer", "token": token}
        code, frame = await host.call("POST", "/sessions", {"requestId": "c1"}, **who)
        sid = frame["value"]["session"]["sessionId"]
        tool = '[[TOOL:mcp__graph__create_document {"title": "Nope"}]]'
        await host.call("POST", f"/sessions/{sid}/commands",
                        {"type": "prompt", "requestId": "p1", "text": "write " + tool}, **who)
        events = await host.waitFor(sid, settledEvent, **who)
        [result] = [e for e in events if e["type"] == "tool.result"]
        self.assertTrue(result["data"]["isError"])
        writers = {"create_folder", "create_document", "write_document", "rename", "create_wires"}
        for _, body in host.model.requests:
            names = {t["function"]["name"] for t in body.get("tools", [])}
            self.assertTrue(names, body)
            self.assertFalse({n.removeprefix("mcp__graph__") for n in names} & writers, names)
        for event in events:
            if event["type"] == "run.started":
                tools = {n.removeprefix("mcp__graph__") for n in event["data"]["tools"]}
                self.assertFalse(tools & writers, event)
        self.assertEqual([a for a in stand.audit() if a["tool"] == "create_document"], [])

    async def test_agentGraphToolThroughTheProxy(self) -> None:
        """
        A boxed agent body has no network: its graph tools reach the stand-in
        through the host's proxy, still as the person.
        """
        stand = standIn(self)
        host = await LiveHost(self, mcpUrl=stand.mcpUrl).start()
        token = stand.mintDelegation("alice", "g1", "owner")
        code, frame = await host.call("POST", "/sessions", {"requestId": "c1", "profile": "agent"},
                                      token=token)
        self.assertEqual(code, 201, frame)
        sid = frame["value"]["session"]["sessionId"]
        tool = '[[TOOL:mcp__graph__create_document {"title": "Boxed notes"}]]'
        await host.call("POST", f"/sessions/{sid}/commands",
                        {"type": "prompt", "requestId": "p1", "text": "note " + tool}, token=token)
        events = await host.waitFor(sid, lambda e: e["type"] == "tool.result")
        self.assertFalse(events[-1]["data"]["isError"], events[-1])
        created = [a for a in stand.audit() if a["tool"] == "create_document"
                   and not a.get("documentId", "").startswith("sophia-conversation-")]
        self.assertEqual({(a["actor"], a["via"]) for a in created}, {("alice", "service:vehicle")})

    async def onASpare(self, profile: str, principal: str, role: str, title: str) -> Any:
        """
        A session of C{profile} made by C{principal} (C{role}) with a spare
        ready, whose model calls a writer tool: the spare was made before
        anyone, so its graph is connected at the hand-off, with the
        session's token and the session's rules.  The tool's result.
        """
        stand = standIn(self)
        spares = {"agentSpareBodies": 1} if profile == "agent" else {"spareBodies": 1}
        host = await LiveHost(self, mcpUrl=stand.mcpUrl, spareRefillMs=60000, **spares).start()
        pool = host.host.bodies.agent.spares if profile == "agent" else host.host.bodies.spares
        await waitUntil(lambda: bool(pool.ready))
        [spare] = pool.ready
        token = stand.mintDelegation(principal, "g1", role)
        who = {"principal": principal, "role": role, "token": token}
        code, frame = await host.call("POST", "/sessions",
                                      {"requestId": "c1", "profile": profile}, **who)
        self.assertEqual(code, 201, frame)
        sid = frame["value"]["session"]["sessionId"]
        self.assertEqual(sid, spare.sessionId)
        tool = '[[TOOL:mcp__graph__create_document {"title": "%s"}]]' % title
        await host.call("POST", f"/sessions/{sid}/commands",
                        {"type": "prompt", "requestId": "p1", "text": "note " + tool}, **who)
        events = await host.waitFor(sid, lambda e: e["type"] == "tool.result", **who)
        materialized = [e for e in events if e["type"] == "body.materialized"]
        self.assertEqual(materialized[0]["data"]["pid"], spare.transport.pid)
        [started] = [e for e in events if e["type"] == "run.started"]
        self.startedTools = started["data"]["tools"]
        self.created = [a for a in stand.audit() if a["tool"] == "create_document"
                        and a.get("title", title) == title
                        and not a.get("documentId", "").startswith("sophia-conversation-")]
        return events[-1]

    async def test_chatOnASpare(self) -> None:
        result = await self.onASpare("chat", "alice", "owner", "Spare notes")
        self.assertFalse(result["data"]["isError"], result)
        self.assertIn("mcp__graph__create_document", self.startedTools)
        self.assertEqual({(a["actor"], a["via"]) for a in self.created},
                         {("alice", "service:vehicle")})

    async def test_viewerOnASpare(self) -> None:
        result = await self.onASpare("chat", "vera", "viewer", "Nope")
        self.assertTrue(result["data"]["isError"], result)
        self.assertIn("mcp__graph__read_document", self.startedTools)
        self.assertNotIn("mcp__graph__create_document", self.startedTools)
        self.assertEqual(self.created, [])

    async def test_agentOnASpare(self) -> None:
        result = await self.onASpare("agent", "alice", "owner", "Boxed spare notes")
        self.assertFalse(result["data"]["isError"], result)
        self.assertIn("mcp__graph__create_document", self.startedTools)
        self.assertEqual({(a["actor"], a["via"]) for a in self.created},
                         {("alice", "service:vehicle")})

    async def test_readerSessionStaysReader(self) -> None:
        """
        A session started by a viewer keeps the reader tools for its life:
        after its owner became an editor, the editor's token is handed on
        but a writer tool is still refused, and nothing lands.
        """
        stand = standIn(self)
        host = await LiveHost(self, mcpUrl=stand.mcpUrl).start()
        viewerToken = stand.mintDelegation("vera", "g1", "viewer")
        code, frame = await host.call("POST", "/sessions", {"requestId": "c1"},
                                      principal="vera", role="viewer", token=viewerToken)
        sid = frame["value"]["session"]["sessionId"]
        editorToken = stand.mintDelegation("vera", "g1", "editor")
        who = {"principal": "vera", "role": "editor", "token": editorToken}
        tool = '[[TOOL:mcp__graph__create_document {"title": "Sneaky"}]]'
        # A viewer's session only reads, so an editor may not drive it
        # either way (access is fixed at creation); it is the body's own
        # guard that is under test, so the prompt comes from the viewer.
        await host.call("POST", f"/sessions/{sid}/commands",
                        {"type": "prompt", "requestId": "p1", "text": "write " + tool},
                        principal="vera", role="viewer", token=editorToken)
        events = await host.waitFor(sid, lambda e: e["type"] == "tool.result", **who)
        self.assertTrue(events[-1]["data"]["isError"])
        self.assertEqual([a for a in stand.audit() if a["tool"] == "create_document"], [])

    async def test_runNamesTheGraphTools(self) -> None:
        """
        C{run.started} and the live snapshot name the body's active tools,
        graph tools included (the extension reports them when they change).
        """
        stand = standIn(self)
        host = await LiveHost(self, mcpUrl=stand.mcpUrl).start()
        token = stand.mintDelegation("alice", "g1", "owner")
        code, frame = await host.call("POST", "/sessions", {"requestId": "c1"}, token=token)
        sid = frame["value"]["session"]["sessionId"]
        await host.call("POST", f"/sessions/{sid}/commands",
                        {"type": "prompt", "requestId": "p1", "text": "hi"}, token=token)
        events = await host.waitFor(sid, settledEvent)
        code, frame = await host.call("GET", f"/sessions/{sid}", token=token)
        tools = frame["value"]["tools"]
        self.assertIn("mcp__graph__create_document", tools)
        self.assertNotIn("bash", tools)
        # The first run names them too: pi waits for the graph's server
        # before a run starts.
        [first] = [e for e in events if e["type"] == "run.started"]
        self.assertEqual(first["data"]["tools"], tools)
        await host.call("POST", f"/sessions/{sid}/commands",
                        {"type": "prompt", "requestId": "p2", "text": "again"}, token=token)
        events = await host.waitFor(sid, settledEvent, since=events[-1]["seq"])
        [started] = [e for e in events if e["type"] == "run.started"]
        self.assertEqual(started["data"]["tools"], tools)
