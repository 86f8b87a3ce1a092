"""
Tests for L{vehicle.mirror}: the mirror state machine and its MCP client,
against a real L{vehicle_local.standin.StandIn} on loopback (the real reactor), with
a small stand-in session over a real directory and a hand-written pi file.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from attrs import define, field
from twisted.internet import reactor as globalReactor
from twisted.internet.defer import gatherResults
from twisted.trial.unittest import TestCase

from vehicle.metrics import Metrics
from vehicle_local.standin import Config, StandIn
from vehicle.mirror import MIRROR_FILE, MCPClient, Mirror, MirrorError
from vehicle.protocol import Parent, RunBudget, fromJSON
from vehicle.session import SessionMeta, isoTimestamp


GRAPH = "g1"
PERSON = "alice@example.com"
#: 2026-11-30T07:00:00Z
START = 1796022000.0


def iso(offset: float) -> str:
    from vehicle.session import isoTimestamp

    return isoTimestamp(START + offset)


@define(eq=False)
class FakeSession:
    """
    What the mirror touches of a L{vehicle.session.Session}.
    """

    meta: SessionMeta
    directory: Path
    title: str | None = None
    delegatedToken: str | None = field(default=None, repr=False)
    deleted: bool = False
    events: list[tuple[str, dict[str, Any]]] = field(factory=list)

    def emit(self, eventType: str, data: dict[str, Any] | None = None) -> dict[str, Any]:
        self.events.append((eventType, data or {}))
        return {"type": eventType, "data": data or {}}

    def eventsOf(self, eventType: str) -> list[dict[str, Any]]:
        return [data for kind, data in self.events if kind == eventType]


class PiFile:
    """
    A pi session file (v3) written by hand, one entry per call.
    """

    def __init__(self, directory: Path, sessionId: str) -> None:
        piDir = directory / "pi"
        piDir.mkdir(parents=True, exist_ok=True)
        self.path = piDir / f"2026-11-30T07-00-00-000Z_{sessionId}.jsonl"
        self.last: str | None = None
        self.count = 0
        self._line(
            {"type": "session", "version": 3, "id": sessionId,
             "timestamp": iso(0), "cwd": "/ws"}
        )
        self._entry({"type": "model_change", "provider": "sophia", "modelId": "fake-1"}, 0)
        self._entry(
            {"type": "message", "message": {"role": "system", "content": "SYSTEM-PROMPT"}}, 0
        )

    def _line(self, record: dict[str, Any]) -> None:
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps(record, ensure_ascii=False) + "\n")

    def _entry(self, record: dict[str, Any], offset: float) -> str:
        self.count += 1
        entryId = f"{self.count:08x}"
        self._line({**record, "id": entryId, "parentId": self.last, "timestamp": iso(offset)})
        self.last = entryId
        return entryId

    def user(self, text: str, offset: float) -> str:
        return self._entry(
            {"type": "message",
             "message": {"role": "user", "content": [{"type": "text", "text": text}]}},
            offset,
        )

    def assistant(self, text: str, offset: float, tools: tuple[str, ...] = ()) -> str:
        content: list[dict[str, Any]] = [{"type": "text", "text": text}]
        content += [
            {"type": "toolCall", "id": f"call_{n}", "name": n, "arguments": {}} for n in tools
        ]
        return self._entry(
            {"type": "message",
             "message": {"role": "assistant", "content": content,
                         "usage": {"totalTokens": 4242, "cost": {"total": 0.0123}}}},
            offset,
        )

    def toolResult(self, name: str, offset: float) -> str:
        return self._entry(
            {"type": "message",
             "message": {"role": "toolResult", "toolCallId": f"call_{name}",
                         "toolName": name, "content": [{"type": "text", "text": "R"}],
                         "isError": False}},
            offset,
        )


def makeConfig() -> Config:
    return Config.fromJSON(
        {
            "masterKey": "master-key-for-tests",
            "tokens": [],
            "graphs": [GRAPH, "g2"],
            "service": {"url": "http://127.0.0.1:9", "secret": "service-secret"},
        }
    )


class MirrorTests(TestCase):
    """
    L{Mirror} against the stand-in's C{/mcp}.
    """

    timeout = 30

    def setUp(self) -> None:
        self.standIn = StandIn(root=self.mktemp(), config=makeConfig(), reactor=globalReactor)
        self.standIn.listen(globalReactor, 0)
        self.addCleanup(self.standIn.stopListening)
        self.mirror = self.makeMirror()
        self.sessionsDir = Path(self.mktemp())
        self.sessionsDir.mkdir()
        self.tokens: list[str] = []

    def makeMirror(self, **overrides: Any) -> Mirror:
        arguments: dict[str, Any] = {
            "reactor": globalReactor,
            "mcpUrl": self.standIn.mcpUrl,
            "enabled": True,
        }
        arguments.update(overrides)
        return Mirror(**arguments)

    def makeSession(
        self,
        sessionId: str = "s-1",
        role: str = "owner",
        parent: dict[str, Any] | None = None,
        createdAt: float = START,
        token: bool = True,
    ) -> tuple[FakeSession, PiFile]:
        directory = self.sessionsDir / sessionId
        directory.mkdir()
        meta = SessionMeta(
            sessionId=sessionId, graphId=GRAPH, principal=PERSON, role=role,
            profile="chat", model="fake-1", createdAt=isoTimestamp(createdAt),
            budget=RunBudget(maxTurns=12, maxCostUsd=0.25),
            parent=fromJSON(parent, Parent) if parent is not None else None,
        )
        session = FakeSession(meta=meta, directory=directory)
        if token:
            session.delegatedToken = self.mint(role)
        self.mirror.attach(session)
        return session, PiFile(directory, sessionId)

    def mint(self, role: str = "owner") -> str:
        token = self.standIn.mintDelegation(PERSON, GRAPH, role)
        self.tokens.append(token)
        return token

    def firstTurn(self, pi: PiFile) -> None:
        pi.user("How do roses grow?\n\n[open in Garden: doc-7]", 10)
        pi.assistant("Let me check.", 11, ("search_documents",))
        pi.toolResult("search_documents", 12)
        pi.assistant("In **sun**, with water.", 13)

    def writes(self) -> list[dict[str, Any]]:
        return self.standIn.audit()

    def document(self, sessionId: str = "s-1") -> dict[str, Any]:
        document = self.standIn.document(GRAPH, "sophia-conversation-" + sessionId)
        assert document is not None
        return document

    # -- the first write --------------------------------------------------

    async def test_firstSettle(self) -> None:
        """
        The first settle makes C{_sophia}, C{Conversations} in it and the
        document, written as the person via the service; the state says
        where, and C{mirror.written} says it was created.
        """
        session, pi = self.makeSession()
        self.firstTurn(pi)
        state = await self.mirror.afterSettle(session)

        self.assertEqual(state.state, "written")
        self.assertEqual(state.documentId, "sophia-conversation-s-1")
        self.assertEqual(state.folder, "sophia-conversations")
        self.assertIsNone(state.error)
        self.assertIsNotNone(state.writtenAt)
        self.assertEqual(self.mirror.state(session), state)

        agent = self.standIn.folder(GRAPH, "agent-scratchpad")
        conversations = self.standIn.folder(GRAPH, "sophia-conversations")
        assert agent is not None and conversations is not None
        self.assertEqual((agent["name"], agent["parentId"]), ("_sophia", None))
        self.assertEqual(
            (conversations["name"], conversations["parentId"]),
            ("Conversations", "agent-scratchpad"),
        )
        document = self.document()
        self.assertEqual(document["title"], "How do roses grow?")
        self.assertEqual(document["parentId"], "sophia-conversations")
        self.assertEqual(document["format"], "markdown")
        self.assertIn("In **sun**, with water.", document["content"])
        self.assertIn("`\u2699 search_documents`", document["content"])
        self.assertNotIn("open in Garden", document["content"])
        self.assertNotIn("4242", document["content"])

        audit = self.writes()
        self.assertEqual(
            [a["tool"] for a in audit],
            ["create_folder", "create_folder", "create_document", "write_document"],
        )
        for record in audit:
            self.assertEqual(record["actor"], PERSON)
            self.assertEqual(record["via"], "service:vehicle")
            self.assertEqual(record["graphId"], GRAPH)
        self.assertEqual(
            session.events,
            [("mirror.written", {"documentId": "sophia-conversation-s-1", "created": True})],
        )
        saved = json.loads((session.directory / MIRROR_FILE).read_text("utf-8"))
        self.assertEqual(saved["state"], "written")
        self.assertTrue(saved["created"])

    async def test_foldersMadeOnce(self) -> None:
        """
        A second session on the same graph finds the folders and makes only
        its document.
        """
        one, piOne = self.makeSession("s-1")
        two, piTwo = self.makeSession("s-2")
        self.firstTurn(piOne)
        self.firstTurn(piTwo)
        await self.mirror.afterSettle(one)
        before = len(self.writes())
        reads = self.countReads("get_workspace")
        await self.mirror.afterSettle(two)
        self.assertEqual(
            [a["tool"] for a in self.writes()[before:]],
            ["create_document", "write_document"],
        )
        # The folders it made are known by id: not looked for again.
        self.assertEqual(reads, [])

    def countReads(self, tool: str) -> list[str]:
        """
        From now on, every call of reader tool C{tool} the endpoint answers.
        """
        endpoint = type(self.standIn.mcp)
        real = getattr(endpoint, "_tool_" + tool)
        calls: list[str] = []

        def counted(this: Any, graphId: str, args: Any) -> Any:
            calls.append(graphId)
            return real(this, graphId, args)

        self.patch(endpoint, "_tool_" + tool, counted)
        return calls

    async def test_folderRefusedForGood(self) -> None:
        """
        A C{create_folder} refused for another reason than the folder being
        there (a new reading does not show it) fails the pass there, and no
        document is made.
        """
        from vehicle_local.standin._store import ToolError

        def refuse(this: Any, graphId: str, args: Any) -> Any:
            raise ToolError("quota", "No more folders today")

        self.patch(type(self.standIn.mcp), "_tool_create_folder", refuse)
        session, pi = self.makeSession()
        self.firstTurn(pi)
        state = await self.mirror.afterSettle(session)
        self.flushLoggedErrors()
        self.assertEqual(state.state, "failed")
        self.assertIn("create_folder", state.error)
        self.assertIsNone(self.standIn.store.document(GRAPH, "sophia-conversation-s-1"))

    async def test_adoptedDocumentGetsItsTitle(self) -> None:
        """
        A document found made already (its creation refused, a reading shows
        it) is written whole, its title too, whatever the mirror thought the
        title was.
        """
        session, pi = self.makeSession()
        self.firstTurn(pi)
        await self.mirror.afterSettle(session)
        path = session.directory / MIRROR_FILE
        saved = json.loads(path.read_text("utf-8"))
        path.write_text(json.dumps({**saved, "created": False, "contentHash": None}))
        self.standIn.store.rename(GRAPH, "document", "sophia-conversation-s-1", "Changed elsewhere")
        self.mirror = self.makeMirror()
        state = await self.mirror.afterSettle(session)
        self.assertEqual(state.state, "written", state)
        self.assertEqual(self.document()["title"], "How do roses grow?")

    async def test_documentGoneIsMadeAgain(self) -> None:
        """
        A document gone for good (not in the Trash: a reading finds nothing)
        fails the write, and the next settle makes it again.
        """
        session, pi = self.makeSession()
        self.firstTurn(pi)
        await self.mirror.afterSettle(session)
        (Path(self.standIn.root) / "graphs" / GRAPH / "documents"
         / "sophia-conversation-s-1.json").unlink()
        pi.user("Still there?", 100)
        state = await self.mirror.afterSettle(session)
        self.flushLoggedErrors()
        self.assertEqual(state.state, "failed")
        pi.user("And now?", 200)
        state = await self.mirror.afterSettle(session)
        self.assertEqual(state.state, "written", state)
        self.assertEqual(session.eventsOf("mirror.written")[-1]["created"], True)
        self.assertIn("And now?", self.document()["content"])

    async def test_foldersFoundByReading(self) -> None:
        """
        A mirror that did not make the folders (a restarted host) finds
        them by reading the workspace, however it nests them, and makes
        only the document: two sessions mirrored in a row, by two mirrors.
        """
        one, piOne = self.makeSession("s-1")
        self.firstTurn(piOne)
        await self.mirror.afterSettle(one)
        self.mirror = self.makeMirror()
        two, piTwo = self.makeSession("s-2")
        self.firstTurn(piTwo)
        before = len(self.writes())
        state = await self.mirror.afterSettle(two)
        self.assertEqual(state.state, "written", state)
        self.assertEqual(
            [a["tool"] for a in self.writes()[before:]],
            ["create_document", "write_document"],
        )

    async def test_folderRefusalConfirmedByReading(self) -> None:
        """
        When the workspace read shows no folders but they are there (made
        meanwhile by someone else), C{create_folder}'s refusal, in
        whatever words, is taken as done only once a new reading shows the
        folder.
        """
        seed, piSeed = self.makeSession("s-0")
        self.firstTurn(piSeed)
        await self.mirror.afterSettle(seed)
        self.mirror = self.makeMirror()
        endpoint = type(self.standIn.mcp)
        real = endpoint._tool_get_workspace
        reads: list[int] = []

        def stale(this: Any, graphId: str, args: Any) -> Any:
            reads.append(1)
            if len(reads) == 1:
                return {"ok": True, "graphId": graphId, "folders": [], "documents": []}, {}
            return real(this, graphId, args)

        self.patch(endpoint, "_tool_get_workspace", stale)
        session, pi = self.makeSession("s-1")
        self.firstTurn(pi)
        state = await self.mirror.afterSettle(session)
        self.assertEqual(state.state, "written", state)
        self.assertEqual(len(reads), 2)
        self.assertIn("How do roses grow?", self.document("s-1")["content"])

    async def test_folderGoneIsMadeAgain(self) -> None:
        """
        A folder the mirror knew that is gone makes C{create_document}
        fail; reading shows no document, so the known folders are
        forgotten, and the next settle reads the workspace and makes them
        again.
        """
        one, piOne = self.makeSession("s-1")
        self.firstTurn(piOne)
        await self.mirror.afterSettle(one)
        for folderId in ("sophia-conversations", "agent-scratchpad"):
            (Path(self.standIn.root) / "graphs" / GRAPH / "folders" / f"{folderId}.json").unlink()
        two, piTwo = self.makeSession("s-2")
        self.firstTurn(piTwo)
        state = await self.mirror.afterSettle(two)
        self.assertEqual(state.state, "failed")
        self.flushLoggedErrors()
        state = await self.mirror.afterSettle(two)
        self.assertEqual(state.state, "written", state)
        self.assertIsNotNone(self.standIn.folder(GRAPH, "sophia-conversations"))
        self.assertIn("How do roses grow?", self.document("s-2")["content"])

    async def test_renameInPlace(self) -> None:
        """
        A new title alone is one C{rename} of the document.
        """
        session, pi = self.makeSession()
        self.firstTurn(pi)
        await self.mirror.afterSettle(session)
        before = len(self.writes())
        session.title = "Roses, by hand"
        state = await self.mirror.afterRename(session)
        self.assertEqual(state.state, "written", state)
        self.assertEqual([a["tool"] for a in self.writes()[before:]], ["rename"])
        self.assertEqual(self.document()["title"], "Roses, by hand")

    async def test_longMessageWhole(self) -> None:
        """
        A reply longer than the host's 16 KiB transcript cap is mirrored
        whole.
        """
        session, pi = self.makeSession()
        pi.user("Tell me everything", 10)
        long = "\u00e9" * 20000 + " END"
        pi.assistant(long, 11)
        await self.mirror.afterSettle(session)
        self.assertIn(long, self.document()["content"])

    async def test_nothingSaidYet(self) -> None:
        """
        Before pi has written a message there is nothing to mirror: no call,
        the state is pending.
        """
        session, pi = self.makeSession()
        state = await self.mirror.afterSettle(session)
        self.assertEqual(state.state, "pending")
        self.assertEqual(self.writes(), [])
        self.assertIsNone(self.mirror.deleteInfo(session))

    # -- later writes ---------------------------------------------------------

    async def test_unchangedWritesNothing(self) -> None:
        """
        A settle that changed nothing calls no tool and emits nothing.
        """
        session, pi = self.makeSession()
        self.firstTurn(pi)
        await self.mirror.afterSettle(session)
        audit, events = len(self.writes()), len(session.events)
        revision = self.document()["revision"]
        state = await self.mirror.afterSettle(session)
        self.assertEqual(state.state, "written")
        self.assertEqual(len(self.writes()), audit)
        self.assertEqual(len(session.events), events)
        self.assertEqual(self.document()["revision"], revision)

    async def test_newTurnRewrites(self) -> None:
        """
        A new turn rewrites the same document in place.
        """
        session, pi = self.makeSession()
        self.firstTurn(pi)
        await self.mirror.afterSettle(session)
        before = len(self.writes())
        pi.user("And tulips?", 100)
        pi.assistant("Tulips want cold winters.", 101)
        await self.mirror.afterSettle(session)
        self.assertEqual([a["tool"] for a in self.writes()[before:]], ["write_document"])
        content = self.document()["content"]
        self.assertIn("In **sun**, with water.", content)
        self.assertIn("Tulips want cold winters.", content)
        self.assertEqual(
            session.eventsOf("mirror.written")[-1],
            {"documentId": "sophia-conversation-s-1", "created": False},
        )

    async def test_renameOnlyRenames(self) -> None:
        """
        A title change alone is C{rename}, not a write of the content.
        """
        session, pi = self.makeSession()
        self.firstTurn(pi)
        await self.mirror.afterSettle(session)
        before = len(self.writes())
        content = self.document()["content"]
        session.title = "Roses \u2014 and how they grow"
        state = await self.mirror.afterRename(session)
        self.assertEqual(state.state, "written")
        new = self.writes()[before:]
        self.assertEqual([a["tool"] for a in new], ["rename"])
        self.assertEqual(new[0]["actor"], PERSON)
        document = self.document()
        self.assertEqual(document["title"], "Roses \u2014 and how they grow")
        self.assertEqual(document["content"], content)

    async def test_renameAndTurn(self) -> None:
        """
        A new title and new content go in one C{write_document}.
        """
        session, pi = self.makeSession()
        self.firstTurn(pi)
        await self.mirror.afterSettle(session)
        before = len(self.writes())
        session.title = "Roses"
        pi.user("More?", 100)
        await self.mirror.afterSettle(session)
        self.assertEqual([a["tool"] for a in self.writes()[before:]], ["write_document"])
        self.assertEqual(self.document()["title"], "Roses")

    async def test_outage(self) -> None:
        """
        With gardend down the write fails (C{mirror.failed}, state
        C{failed}), and the next settle writes it; the metrics count both
        writes and the failure.
        """
        metrics = Metrics()
        self.mirror = self.makeMirror(metrics=metrics)
        session, pi = self.makeSession()
        self.firstTurn(pi)
        await self.mirror.afterSettle(session)
        pi.user("And tulips?", 100)
        self.standIn.setOffline(True)
        state = await self.mirror.afterSettle(session)
        self.assertEqual(state.state, "failed")
        self.assertIn("offline", state.error)
        failed = session.eventsOf("mirror.failed")
        self.assertEqual(len(failed), 1)
        self.assertEqual(failed[0]["documentId"], "sophia-conversation-s-1")
        self.assertIn("offline", failed[0]["message"])
        self.assertNotIn("tulips", self.document()["content"])
        self.flushLoggedErrors()

        self.standIn.setOffline(False)
        state = await self.mirror.afterSettle(session)
        self.assertEqual(state.state, "written")
        self.assertIsNone(state.error)
        self.assertIn("And tulips?", self.document()["content"])
        # Each write and the failure between them, counted for an operator.
        samples = metrics.registry.get_sample_value
        self.assertEqual(samples("vehicle_mirror_writes_total", {"outcome": "written"}), 2)
        self.assertEqual(samples("vehicle_mirror_writes_total", {"outcome": "failed"}), 1)

    async def test_outageBeforeFirstWrite(self) -> None:
        """
        An outage before the document exists fails too, and the next settle
        makes it.
        """
        session, pi = self.makeSession()
        self.firstTurn(pi)
        self.standIn.setOffline(True)
        state = await self.mirror.afterSettle(session)
        self.assertEqual(state.state, "failed")
        self.assertIsNone(self.mirror.deleteInfo(session))
        self.standIn.setOffline(False)
        state = await self.mirror.afterSettle(session)
        self.assertEqual(state.state, "written")
        self.assertEqual(session.eventsOf("mirror.written")[-1]["created"], True)

    async def test_unreachable(self) -> None:
        """
        Nothing listening at the endpoint is a failure, never an exception
        for the caller.
        """
        await self.standIn.stopListening()
        session, pi = self.makeSession()
        self.firstTurn(pi)
        state = await self.mirror.afterSettle(session)
        self.assertEqual(state.state, "failed")
        self.assertIn("unreachable", state.error)

    async def test_trashedKeptCurrent(self) -> None:
        """
        A document the person put in the Trash stays there and is kept
        current.
        """
        session, pi = self.makeSession()
        self.firstTurn(pi)
        await self.mirror.afterSettle(session)
        self.standIn.trash(GRAPH, "sophia-conversation-s-1")
        pi.user("Still there?", 100)
        state = await self.mirror.afterSettle(session)
        self.assertEqual(state.state, "written")
        document = self.document()
        self.assertTrue(document["trashed"])
        self.assertIn("Still there?", document["content"])

    async def test_restartRemembers(self) -> None:
        """
        A new mirror (a restarted host) loads C{mirror.json}: nothing
        changed means nothing is written, and the document is not made
        again.
        """
        session, pi = self.makeSession()
        self.firstTurn(pi)
        await self.mirror.afterSettle(session)
        before = len(self.writes())
        self.mirror = self.makeMirror()
        self.mirror.attach(session)
        self.assertEqual(self.mirror.state(session).state, "written")
        await self.mirror.afterSettle(session)
        self.assertEqual(len(self.writes()), before)
        pi.user("Again", 100)
        await self.mirror.afterSettle(session)
        self.assertEqual([a["tool"] for a in self.writes()[before:]], ["write_document"])

    async def test_lostStateAdoptsDocument(self) -> None:
        """
        Without C{mirror.json}, an existing document is adopted
        (C{already_exists}) and written whole.
        """
        session, pi = self.makeSession()
        self.firstTurn(pi)
        await self.mirror.afterSettle(session)
        (session.directory / MIRROR_FILE).unlink()
        self.mirror = self.makeMirror()
        session.title = "Renamed meanwhile"
        pi.user("Again", 100)
        state = await self.mirror.afterSettle(session)
        self.assertEqual(state.state, "written")
        document = self.document()
        self.assertEqual(document["title"], "Renamed meanwhile")
        self.assertIn("Again", document["content"])
        self.assertEqual(session.eventsOf("mirror.written")[-1]["created"], False)

    async def test_serialized(self) -> None:
        """
        Settles during a write wait for it and share one more pass: the
        document is made once, and every caller hears the outcome.
        """
        session, pi = self.makeSession()
        self.firstTurn(pi)
        first = self.mirror.afterSettle(session)
        second = self.mirror.afterSettle(session)
        third = self.mirror.afterRename(session)
        states = await gatherResults([first, second, third])
        self.assertEqual([s.state for s in states], ["written"] * 3)
        tools = [a["tool"] for a in self.writes()]
        self.assertEqual(tools.count("create_document"), 1)
        self.assertEqual(tools.count("write_document"), 1)

    # -- who may write ---------------------------------------------------------

    async def test_viewerSkipped(self) -> None:
        """
        A viewer's session never writes, and its state says why.
        """
        session, pi = self.makeSession(role="viewer")
        self.firstTurn(pi)
        state = await self.mirror.afterSettle(session)
        self.assertEqual(state.state, "skipped")
        self.assertIn("viewer", state.reason)
        self.assertIsNone(state.documentId)
        self.assertEqual(self.writes(), [])
        self.assertEqual(session.events, [])
        self.assertIsNone(self.mirror.deleteInfo(session))

    async def test_off(self) -> None:
        """
        C{VEHICLE_MIRROR=off}, or no MCP endpoint: state C{off} with a
        reason, and nothing is called.
        """
        for mirror, words in (
            (self.makeMirror(enabled=False), "VEHICLE_MIRROR"),
            (self.makeMirror(mcpUrl=None), "MNEMOSYNE_MCP_URL"),
        ):
            self.mirror = mirror
            session, pi = self.makeSession(sessionId=f"off-{words}")
            self.firstTurn(pi)
            state = await mirror.afterSettle(session)
            await mirror.afterRename(session)
            self.assertEqual(state.state, "off")
            self.assertIn(words, state.reason)
            self.assertEqual(mirror.state(session).state, "off")
        self.assertEqual(self.writes(), [])

    async def test_noToken(self) -> None:
        """
        Without a delegation token (a revived session) nothing is written
        and the state says the owner's next request brings one; then it is
        written.
        """
        session, pi = self.makeSession(token=False)
        self.firstTurn(pi)
        state = await self.mirror.afterSettle(session)
        self.assertEqual(state.state, "pending")
        self.assertIn("next request", state.reason)
        self.assertEqual(self.writes(), [])
        self.assertEqual(session.events, [])

        session.delegatedToken = self.mint()
        state = await self.mirror.afterSettle(session)
        self.assertEqual(state.state, "written")

    async def test_newestToken(self) -> None:
        """
        Each pass uses the session's newest token: a forged one
        is refused, the next one works.
        """
        session, pi = self.makeSession()
        self.firstTurn(pi)
        session.delegatedToken = "gdt1.forged.token"
        state = await self.mirror.afterSettle(session)
        self.assertEqual(state.state, "failed")
        self.flushLoggedErrors()
        session.delegatedToken = self.mint()
        state = await self.mirror.afterSettle(session)
        self.assertEqual(state.state, "written")

    async def test_viewerTokenRefused(self) -> None:
        """
        Were an owner's session to hold only a viewer's token, the stand-in
        refuses the writes and the mirror reports it.
        """
        session, pi = self.makeSession()
        session.delegatedToken = self.mint("viewer")
        self.firstTurn(pi)
        state = await self.mirror.afterSettle(session)
        self.assertEqual(state.state, "failed")
        self.assertIn("viewer", state.error)
        self.flushLoggedErrors()

    # -- branches ------------------------------------------------------------

    async def test_fork(self) -> None:
        """
        A fork's document links its parent's before the message it was
        forked at, and carries one C{divergesFrom} wire to it.
        """
        parent, parentPi = self.makeSession("p-1")
        self.firstTurn(parentPi)
        parentPi.user("And tulips?", 100)
        await self.mirror.afterSettle(parent)

        fork, forkPi = self.makeSession(
            "f-1",
            parent={"sessionId": "p-1", "kind": "fork", "entryId": "00000007"},
            createdAt=START + 200,
        )
        self.firstTurn(forkPi)  # the inherited history keeps its times
        forkPi.user("And lilies?", 300)
        await self.mirror.afterSettle(fork)

        document = self.document("f-1")
        content = document["content"]
        link = "Branched from [[sophia-conversation-p-1]]"
        self.assertIn(link, content)
        self.assertLess(content.index("with water."), content.index(link))
        self.assertLess(content.index(link), content.index("And lilies?"))
        self.assertEqual(document["title"], "And lilies?")
        wires = self.standIn.wires(GRAPH)
        self.assertEqual(
            [(w["sourceDocumentId"], w["targetDocumentId"], w["predicate"]) for w in wires],
            [("sophia-conversation-f-1", "sophia-conversation-p-1", "divergesFrom")],
        )
        forkPi.assistant("Lilies like shade.", 301)
        await self.mirror.afterSettle(fork)
        self.assertEqual(len(self.standIn.wires(GRAPH)), 1)

    async def test_cloneOfUnmirroredParent(self) -> None:
        """
        A clone says what it duplicates; when its parent has no document
        yet the wire waits for a later settle, and the write still counts.
        """
        clone, pi = self.makeSession(
            "c-1", parent={"sessionId": "p-9", "kind": "clone", "entryId": None}
        )
        self.firstTurn(pi)
        state = await self.mirror.afterSettle(clone)
        self.assertEqual(state.state, "written")
        self.assertIn("Duplicated from [[sophia-conversation-p-9]]", self.document("c-1")["content"])
        self.assertEqual(self.standIn.wires(GRAPH), [])

        parent, parentPi = self.makeSession("p-9")
        self.firstTurn(parentPi)
        await self.mirror.afterSettle(parent)
        await self.mirror.afterSettle(clone)
        self.assertEqual(len(self.standIn.wires(GRAPH)), 1)

    # -- delete and secrets ----------------------------------------------------

    async def test_deleteInfo(self) -> None:
        """
        C{deleteInfo} names the document and graph once it was made, also
        from C{mirror.json} after a restart.
        """
        session, pi = self.makeSession()
        self.assertIsNone(self.mirror.deleteInfo(session))
        self.firstTurn(pi)
        await self.mirror.afterSettle(session)
        expected = {"documentId": "sophia-conversation-s-1", "graphId": GRAPH}
        self.assertEqual(self.mirror.deleteInfo(session), expected)
        self.assertEqual(self.makeMirror().deleteInfo(session), expected)

    async def test_deletedSessionLeftAlone(self) -> None:
        """
        A session deleted before its pass is not written, and nothing is
        emitted into it.
        """
        session, pi = self.makeSession()
        self.firstTurn(pi)
        session.deleted = True
        await self.mirror.afterSettle(session)
        self.assertEqual(self.writes(), [])
        self.assertEqual(session.events, [])

    async def test_tokenNeverStored(self) -> None:
        """
        After writes, a failure and a rename, no file under the sessions'
        directories or the stand-in's root holds a delegation token, nor
        does any event.
        """
        session, pi = self.makeSession()
        self.firstTurn(pi)
        await self.mirror.afterSettle(session)
        self.standIn.setOffline(True)
        pi.user("x", 100)
        await self.mirror.afterSettle(session)
        self.flushLoggedErrors()
        self.standIn.setOffline(False)
        session.title = "T"
        await self.mirror.afterSettle(session)
        self.assertTrue(self.tokens)
        for root in (self.sessionsDir, self.standIn.root):
            for directory, _, files in os.walk(root):
                for name in files:
                    data = (Path(directory) / name).read_bytes()
                    for token in self.tokens:
                        self.assertNotIn(token.encode("ascii"), data, name)
                        self.assertNotIn(token.split(".")[2].encode("ascii"), data, name)
        self.assertNotIn(self.tokens[0], json.dumps(session.events))
        self.assertNotIn(self.tokens[0], repr(self.mirror))


class MCPClientTests(TestCase):
    """
    L{MCPClient} against the stand-in.
    """

    timeout = 30

    def setUp(self) -> None:
        self.standIn = StandIn(root=self.mktemp(), config=makeConfig(), reactor=globalReactor)
        self.standIn.listen(globalReactor, 0)
        self.addCleanup(self.standIn.stopListening)
        self.client = MCPClient(url=self.standIn.mcpUrl, reactor=globalReactor)
        self.token = self.standIn.mintDelegation(PERSON, GRAPH, "owner")

    async def test_envelope(self) -> None:
        """
        A tool's envelope comes back parsed, after one C{initialize}.
        """
        self.assertFalse(self.client.initialized)
        envelope = await self.client.callTool(
            self.token, "create_folder", {"name": "x", "folderId": "f-x"}
        )
        self.assertTrue(self.client.initialized)
        self.assertEqual(envelope["folder"]["id"], "f-x")
        envelope = await self.client.callTool(self.token, "get_workspace", {})
        self.assertEqual([f["id"] for f in envelope["folders"]], ["f-x"])

    async def refusal(self, token: str, tool: str, arguments: dict[str, Any]) -> MirrorError:
        """
        The L{MirrorError} a call ends with.
        """
        try:
            await self.client.callTool(token, tool, arguments)
        except MirrorError as e:
            return e
        self.fail(f"{tool} succeeded")

    async def test_toolRefusal(self) -> None:
        """
        A tool's refusal is a L{MirrorError} with the envelope's code.
        """
        await self.client.callTool(self.token, "create_folder", {"name": "x", "folderId": "f-x"})
        error = await self.refusal(self.token, "create_folder", {"name": "x", "folderId": "f-x"})
        self.assertEqual(error.code, "already_exists")
        self.assertIn("create_folder", error.message)

    async def test_graphMismatch(self) -> None:
        """
        Naming another graph than the token's is refused.
        """
        error = await self.refusal(self.token, "list_documents", {"graphId": "g2"})
        self.assertEqual(error.code, "graph_mismatch")

    async def test_unauthorized(self) -> None:
        """
        A bad token is an HTTP refusal whose message never holds the token.
        """
        error = await self.refusal("not-a-token", "list_documents", {})
        self.assertEqual(error.code, "http_401")
        self.assertNotIn("not-a-token", str(error))

    async def test_unknownTool(self) -> None:
        """
        A JSON-RPC error is a L{MirrorError} too.
        """
        error = await self.refusal(self.token, "no_such_tool", {})
        self.assertEqual(error.code, "rpc_-32602")
