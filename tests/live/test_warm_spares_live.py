"""
Spare bodies with real pi: a new or revived chat conversation is handed a
warm, primed pi that held nothing of anyone: a new one on the file it was
switched to while it waited, made where that session keeps its
conversation; a revived one is switched to the session's own file
(L{vehicle.body._spares}, L{vehicle.body._life}).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from twisted.trial.unittest import TestCase

from vehicle.body import PRIMING_FOLDER, PRIMING_PROMPT
from vehicle.body._spawner import latestSessionFile

from tests.support.live import (
    LiveHost, pool, readySpare, settledEvent, startedAtTheClaim, waitUntil,
)


def filesUnder(folder: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def openFiles(pid: int) -> list[str]:
    """
    Where the process's open file descriptors lead.
    """
    found = []
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            found.append(os.readlink(fd))
        except OSError:
            continue
    return found


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    status = Path(f"/proc/{pid}/status")
    return status.exists() and "zombie" not in status.read_text()


class HandOffTests(TestCase):
    """
    A new and a revived conversation each get a spare, which becomes the
    session's body on the session's own file.
    """

    timeout = 120

    async def test_newSessionTakesTheSpare(self) -> None:
        """
        The first prompt of a new conversation runs on the ready spare:
        pi is on a file in the session's own pi folder (one header, whose
        cwd is the session's work folder), the model is reached with the
        host's key through the spare's proxy, and the model sees only the
        session's system and user messages, never the priming.
        """
        host = await LiveHost(self, spareBodies=1, spareRefillMs=60000).start()
        spare = await readySpare(host)
        pid = spare.transport.pid
        primed = len(host.model.requests)
        # Made for a new session: pi is on a new file where that session
        # will keep its conversation, before anyone asked for it.
        prepared = spare.prepared
        self.assertEqual(prepared.parent, host.root / "sessions" / spare.sessionId / "pi")
        self.assertTrue(prepared.is_file())
        sid = await host.create()
        self.assertEqual(sid, spare.sessionId)
        await host.command(sid, "prompt", "p1", text="hello spare")
        events = await host.waitFor(sid, settledEvent)
        materialized = [e for e in events if e["type"] == "body.materialized"]
        self.assertEqual(materialized[0]["data"]["pid"], pid)
        self.assertNotIn("session.revived", [e["type"] for e in events])
        self.assertEqual(pool(host).ready, [])
        # The priming never reached the model: the proxy answered it.
        self.assertEqual(primed, 0)
        self.assertEqual(len(host.model.requests), 1)
        headers, body = host.model.requests[0]
        self.assertEqual(headers["authorization"], "Bearer " + host.key)
        self.assertEqual([m["role"] for m in body["messages"]], ["system", "user"])
        self.assertNotIn(PRIMING_PROMPT, json.dumps(body))
        session = host.registry().sessions[sid]
        piFile = latestSessionFile(session.directory / "pi")
        assert piFile is not None
        records = [json.loads(line) for line in piFile.read_text().splitlines()]
        self.assertEqual([r["type"] for r in records].count("session"), 1)
        self.assertEqual(records[0]["cwd"], str(session.directory / "work"))
        self.assertIn(str(session.directory / "work"), json.dumps(body["messages"][0]))
        self.assertNotIn(PRIMING_PROMPT, piFile.read_text())
        self.assertIn("hello spare", piFile.read_text())
        # The hand-off's command (the session's facts) is nobody's words.
        self.assertNotIn("sophia-session", piFile.read_text())
        self.assertNotIn("sophia-session", json.dumps(host.events(sid)))
        # Handed over on that file, with no switch: the file pi was put on
        # while it waited is the one the session's conversation is in.
        self.assertEqual(piFile, session.directory / "pi" / prepared.name)
        self.assertEqual(sorted(p.name for p in (session.directory / "pi").glob("*.jsonl")),
                         [prepared.name])

    async def test_aSessionOnAnotherModelTakesTheSpare(self) -> None:
        """
        A new conversation on another model of the host (another provider,
        reached with its own key) is handed the spare, started on the
        default: pi is set to the session's model, which the model request
        names, through the spare's proxy with that provider's key; the
        conversation's file says so.
        """
        host = await LiveHost(self, spareBodies=1, spareRefillMs=60000, otherProvider=True).start()
        spare = await readySpare(host)
        sid = await host.create(model="other/other-1")
        self.assertEqual(sid, spare.sessionId)
        await host.command(sid, "prompt", "p1", text="hello other")
        events = await host.waitFor(sid, settledEvent)
        materialized = [e for e in events if e["type"] == "body.materialized"]
        self.assertEqual(materialized[0]["data"]["pid"], spare.transport.pid)
        self.assertEqual(len(host.model.requests), 1)
        headers, body = host.model.requests[0]
        self.assertEqual(body["model"], "other-1")
        self.assertEqual(headers["authorization"], "Bearer " + host.otherKey)
        # The provider's and its model's headers, added by the proxy (the
        # spare was given none), as written.
        self.assertEqual(headers["x-other-secret"], host.otherHeader)
        self.assertEqual(headers["x-other-model"], "other-1")
        self.assertEqual([m["role"] for m in body["messages"]], ["system", "user"])
        completed = [e for e in events if e["type"] == "message.completed"]
        self.assertIn("hello other", json.dumps(completed[-1]))
        piFile = latestSessionFile(host.registry().sessions[sid].directory / "pi")
        assert piFile is not None
        changes = [(r["provider"], r["modelId"])
                   for r in map(json.loads, piFile.read_text().splitlines())
                   if r["type"] == "model_change"]
        self.assertEqual(changes[-1], ("other", "other-1"))
        # Its next turn stays on it.
        await host.command(sid, "prompt", "p2", text="and again")
        await host.waitFor(sid, settledEvent, since=events[-1]["seq"])
        self.assertEqual(host.model.requests[-1][1]["model"], "other-1")

    async def test_aColdBodySendsTheHeadersAsWritten(self) -> None:
        """
        With no spare, a conversation on the other provider has a body
        started with its key and its headers, which pi sends as they are
        written (pi reads C{$NAME} and C{!command} in a header's value as
        a template: the host resolved its own references already).
        """
        host = await LiveHost(self, spareBodies=0, otherProvider=True).start()
        sid = await host.create(model="other/other-1")
        await host.command(sid, "prompt", "p1", text="hello cold")
        await host.waitFor(sid, settledEvent)
        [(headers, body)] = host.model.requests
        self.assertEqual(body["model"], "other-1")
        self.assertEqual(headers["authorization"], "Bearer " + host.otherKey)
        self.assertEqual(headers["x-other-secret"], host.otherHeader)
        self.assertEqual(headers["x-other-model"], "other-1")

    async def test_aSpareMadeForASessionIsNoSessionYet(self) -> None:
        """
        While a spare waits, the folder made for its session is nobody's:
        no listing shows it, and when the host stops with the spare unused
        the folder goes with it.
        """
        host = await LiveHost(self, spareBodies=1, spareRefillMs=60000).start()
        spare = await readySpare(host)
        folder = host.root / "sessions" / spare.sessionId
        self.assertTrue(folder.is_dir())
        code, listed = await host.call("GET", "/sessions")
        self.assertEqual(code, 200, listed)
        self.assertEqual(listed["value"]["sessions"], [])
        await host.stop()
        self.assertFalse(folder.exists())

    async def test_aSessionMadeWithASpareRevivesCold(self) -> None:
        """
        After a restart the session made with a spare is resumed by a body
        started cold on its file (whose working folder is the session's).
        """
        host = await LiveHost(self, spareBodies=1, spareRefillMs=60000).start()
        await readySpare(host)
        sid = await host.create()
        await host.command(sid, "prompt", "p1", text="before the restart")
        await host.waitFor(sid, settledEvent)
        host.overrides["spareBodies"] = 0  # the next body starts cold
        await host.restart()
        since = len(host.events(sid))
        code, frame = await host.command(sid, "prompt", "p2", text="after the restart")
        self.assertEqual(code, 202, frame)
        events = await host.waitFor(sid, settledEvent, since=since)
        self.assertIn("session.revived", [e["type"] for e in events])
        self.assertIsNone(host.host.bodies.spares)
        _, body = host.model.requests[-1]
        texts = json.dumps(body["messages"])
        self.assertIn("before the restart", texts)
        self.assertIn("after the restart", texts)

    async def test_revivedSessionTakesASpare(self) -> None:
        """
        A conversation whose body went dormant is revived on a spare: pi
        resumes the session's file, and the model sees the conversation.
        """
        host = await LiveHost(self, spareBodies=1, spareRefillMs=0, bodyIdleMs=500).start()
        await readySpare(host)
        sid = await host.create()
        await host.command(sid, "prompt", "p1", text="first words")
        await host.waitFor(sid, settledEvent)
        await host.waitFor(sid, lambda e: e["type"] == "body.dormant")
        spare = await readySpare(host)
        since = len(host.events(sid))
        code, frame = await host.command(sid, "prompt", "p2", text="second words")
        self.assertEqual(code, 202, frame)
        events = await host.waitFor(sid, settledEvent, since=since)
        kinds = [e["type"] for e in events]
        self.assertIn("session.revived", kinds)
        revived = [e for e in events if e["type"] == "session.revived"][0]
        piFile = latestSessionFile(host.registry().sessions[sid].directory / "pi")
        assert piFile is not None
        records = [json.loads(line) for line in piFile.read_text().splitlines()]
        # What pi resumed: the first run's messages (its system message
        # too), all but the second run's two.
        self.assertEqual(
            revived["data"]["messageCount"],
            len([r for r in records if r["type"] == "message"]) - 2,
        )
        materialized = [e for e in events if e["type"] == "body.materialized"][0]
        self.assertEqual(materialized["data"]["pid"], spare.transport.pid)
        # The spare was made for another new session: that folder is gone.
        self.assertNotEqual(spare.sessionId, sid)
        self.assertFalse((host.root / "sessions" / spare.sessionId).exists())
        _, body = host.model.requests[-1]
        texts = json.dumps(body["messages"])
        self.assertIn("first words", texts)
        self.assertIn("second words", texts)
        self.assertNotIn(PRIMING_PROMPT, texts)

    async def test_claimedSessionIsSwitchedAhead(self) -> None:
        """
        A dormant conversation claimed takes the ready spare at once, and
        pi is switched to the conversation's file before any command: the
        prompt then hands the spare over with the session's facts, no switch
        on its way, and pi resumes the conversation with the graph's tools
        as a body of its own would have them.
        """
        host = await LiveHost(self, spareBodies=1, spareRefillMs=0, bodyIdleMs=500).start()
        await readySpare(host)
        sid = await host.create()
        await host.command(sid, "prompt", "p1", text="first words")
        first = await host.waitFor(sid, settledEvent)
        await host.waitFor(sid, lambda e: e["type"] == "body.dormant")
        spare = await readySpare(host)
        session = host.registry().sessions[sid]
        piFile = latestSessionFile(session.directory / "pi")
        assert piFile is not None
        since = len(host.events(sid))
        code, frame = await host.call("POST", f"/sessions/{sid}/claim", {"requestId": "c2"})
        self.assertEqual(code, 200, frame)
        self.assertEqual(frame["value"]["session"]["body"], "dormant")
        await waitUntil(lambda: spare.prepared == piFile and spare.sessionId == sid)
        self.assertEqual(pool(host).ready, [])
        # Switched, and still nobody's body: nothing told but the claim,
        # nothing asked of the model.
        self.assertEqual([e["type"] for e in host.events(sid)[since:]], ["lease.renewed"])
        asked = len(host.model.requests)
        self.assertEqual(session.conductor.bodyState(), "dormant")
        sent: list[str] = []
        request = spare.protocol.request

        def recorded(command: dict[str, object], *args: object, **kwargs: object) -> object:
            sent.append(str(command["type"]))
            return request(command, *args, **kwargs)

        spare.protocol.request = recorded  # type: ignore[method-assign]
        code, frame = await host.command(sid, "prompt", "p2", text="second words")
        self.assertEqual(code, 202, frame)
        events = await host.waitFor(sid, settledEvent, since=since)
        self.assertEqual(sent[:3], ["prompt", "get_state", "prompt"])
        self.assertNotIn("switch_session", sent)
        materialized = [e for e in events if e["type"] == "body.materialized"]
        self.assertEqual(materialized[0]["data"]["pid"], spare.transport.pid)
        revived = [e for e in events if e["type"] == "session.revived"]
        self.assertEqual(len(revived), 1)
        self.assertGreater(revived[0]["data"]["messageCount"], 0)
        tools = [e["data"]["tools"] for e in first + events if e["type"] == "run.started"]
        self.assertEqual(tools[1], tools[0])
        self.assertEqual(len(host.model.requests), asked + 1)
        _, body = host.model.requests[-1]
        texts = json.dumps(body["messages"])
        self.assertIn("first words", texts)
        self.assertIn("second words", texts)
        self.assertNotIn(PRIMING_PROMPT, texts)
        self.assertEqual(latestSessionFile(session.directory / "pi"), piFile)
        self.assertFalse((host.root / "sessions" / spare.sessionId).exists()
                         and spare.sessionId != sid)

    async def test_noSpareReadyTheBodyStartsAtTheClaim(self) -> None:
        """
        A dormant conversation claimed when no spare is ready has its own
        body started at the claim, heard by no one, primed in a session of
        its own (its proxy answering: the model never sees it, nor does the
        conversation); the prompt then runs on that very process, which
        resumes the conversation with the same tools (the graph's,
        connected with the token the host answered while it waited).
        """
        host = await LiveHost(self, spareBodies=1, spareRefillMs=600000).start()
        await readySpare(host)
        sid = await host.create()
        await host.command(sid, "prompt", "p1", text="first words")
        first = await host.waitFor(sid, settledEvent)
        session = host.registry().sessions[sid]
        await session.conductor.dispose("shutdown")
        await host.waitFor(sid, lambda e: e["type"] == "body.dormant")
        self.assertEqual(pool(host).ready, [])
        since = len(host.events(sid))
        asked = len(host.model.requests)
        code, frame = await host.call("POST", f"/sessions/{sid}/claim", {"requestId": "c2"})
        self.assertEqual(code, 200, frame)
        piFile = latestSessionFile(session.directory / "pi")
        assert piFile is not None
        pid = await startedAtTheClaim(session)
        self.assertTrue(alive(pid))
        self.assertFalse((session.directory / "pi" / PRIMING_FOLDER).exists())
        self.assertEqual(list((session.directory / "pi").glob("*.jsonl")), [piFile])
        self.assertEqual([e["type"] for e in host.events(sid)[since:]], ["lease.renewed"])
        self.assertEqual(session.conductor.bodyState(), "dormant")
        code, frame = await host.command(sid, "prompt", "p2", text="second words")
        self.assertEqual(code, 202, frame)
        events = await host.waitFor(sid, settledEvent, since=since)
        [materialized] = [e for e in events if e["type"] == "body.materialized"]
        self.assertEqual(materialized["data"]["pid"], pid)
        self.assertEqual(len([e for e in events if e["type"] == "session.revived"]), 1)
        tools = [e["data"]["tools"] for e in first + events if e["type"] == "run.started"]
        self.assertEqual(tools[1], tools[0])
        self.assertEqual(len(host.model.requests), asked + 1)
        texts = json.dumps(host.model.requests[-1][1]["messages"])
        self.assertIn("first words", texts)
        self.assertIn("second words", texts)
        self.assertNotIn(PRIMING_PROMPT, texts)
        self.assertNotIn(PRIMING_PROMPT, piFile.read_text())

    async def test_theSessionsBudgetRules(self) -> None:
        """
        The spare's own budget (one turn, for its priming) is not the
        session's: the extension is given the session's at the hand-off,
        so a run of endless tool calls makes exactly the session's turns.
        """
        host = await LiveHost(self, spareBodies=1, spareRefillMs=60000).start()
        await readySpare(host)
        sid = await host.create(budget={"maxTurns": 3})
        await host.command(sid, "prompt", "p1", text="loop [[LOOP:nothing]]")
        events = await host.waitFor(sid, settledEvent)
        kinds = [e["type"] for e in events]
        self.assertIn("budget.exceeded", kinds)
        self.assertEqual(len(host.model.requests), 3)


class NothingOfAnyoneTests(TestCase):
    """
    A spare holds no key, no session's file, no other person's words, and
    is never used twice.
    """

    timeout = 120

    async def test_aSpareHoldsNoKey(self) -> None:
        """
        The host's key is in none of a ready spare's environment, argv, or
        files, and the spare's proxy token (all its boot config holds) is
        not the key.
        """
        host = await LiveHost(self, spareBodies=1).start()
        spare = await readySpare(host)
        pid = spare.transport.pid
        key = host.key.encode()
        self.assertNotIn(key, Path(f"/proc/{pid}/environ").read_bytes())
        self.assertNotIn(key, Path(f"/proc/{pid}/cmdline").read_bytes())
        folder = spare.paths.piDir.parent
        files = filesUnder(folder)
        self.assertTrue(files)
        for path, data in files.items():
            self.assertNotIn(key, data, path)
        tokens = [p["apiKey"] for p in spare.proxy.providers.values()]
        self.assertNotIn(host.key, tokens)
        self.assertTrue(all(t.startswith("vbt-") for t in tokens))

    async def test_aSpareHoldsNoSessionsFile(self) -> None:
        """
        A ready spare is on its own session, in its own folder: it has no
        file of the data dir open, its own folder holds only its own
        session, and after one person's conversation ran on a spare, the
        next spare holds none of their words.
        """
        host = await LiveHost(self, spareBodies=1, spareRefillMs=0).start()
        first = await readySpare(host)
        sid = await host.create()
        await host.command(sid, "prompt", "p1", text="a secret of alice")
        await host.waitFor(sid, settledEvent)
        await waitUntil(lambda: bool(pool(host).ready) and pool(host).ready[0] is not first)
        second = pool(host).ready[0]
        pid = second.transport.pid
        self.assertNotEqual(pid, first.transport.pid)
        dataDir = str(host.root)
        self.assertEqual([f for f in openFiles(pid) if f.startswith(dataDir)], [])
        folder = second.paths.piDir.parent
        sessions = list((folder / "pi").glob("*.jsonl"))
        self.assertEqual(len(sessions), 1)
        for path, data in filesUnder(folder).items():
            self.assertNotIn(b"alice", data, path)
        self.assertEqual(list(second.paths.workDir.iterdir()), [])

    async def test_aSpareIsNeverReused(self) -> None:
        """
        The body a spare became ends with the session's body; the pool
        never hands it out again, and its folders and proxy are gone.
        """
        host = await LiveHost(self, spareBodies=1, spareRefillMs=0).start()
        spare = await readySpare(host)
        pid = spare.transport.pid
        sid = await host.create()
        await host.command(sid, "prompt", "p1", text="once")
        await host.waitFor(sid, settledEvent)
        await host.command(sid, "shutdown", "s1")
        await host.waitFor(sid, lambda e: e["type"] == "body.dormant")
        await waitUntil(lambda: not alive(pid))
        self.assertFalse(spare.paths.piDir.parent.exists())
        self.assertFalse(spare.proxy.proxy.socketPath.exists())
        await waitUntil(lambda: bool(pool(host).ready))
        self.assertNotIn(pid, [s.transport.pid for s in pool(host).ready])

    async def test_theSparesStopWithTheHost(self) -> None:
        """
        No spare outlives the host: its process ends, its folders go.
        """
        host = await LiveHost(self, spareBodies=2).start()
        await waitUntil(lambda: len(pool(host).ready) == 2)
        spares = [(s.transport.pid, s.paths.piDir.parent) for s in pool(host).ready]
        await host.stop()
        for pid, folder in spares:
            self.assertFalse(alive(pid))
            self.assertFalse(folder.exists())

    async def test_aSpareSwitchedAheadStopsWithTheHost(self) -> None:
        """
        A spare switched to a dormant conversation's file at its claim, and
        never handed over, ends with the host: its process by the time the
        host has stopped, its folders with it; the conversation's file is
        as pi left it.
        """
        host = await LiveHost(self, spareBodies=1, spareRefillMs=0).start()
        await readySpare(host)
        sid = await host.create()
        await host.command(sid, "prompt", "p1", text="words to keep")
        await host.waitFor(sid, settledEvent)
        await host.command(sid, "shutdown", "s1")
        await host.waitFor(sid, lambda e: e["type"] == "body.dormant")
        spare = await readySpare(host)
        piFile = latestSessionFile(host.registry().sessions[sid].directory / "pi")
        assert piFile is not None
        before = piFile.read_bytes()
        code, frame = await host.call("POST", f"/sessions/{sid}/claim", {"requestId": "c2"})
        self.assertEqual(code, 200, frame)
        await waitUntil(lambda: spare.prepared == piFile)
        pid, folder = spare.transport.pid, spare.paths.piDir.parent
        await host.stop()
        self.assertFalse(alive(pid))
        self.assertFalse(folder.exists())
        self.assertEqual(piFile.read_bytes(), before)
