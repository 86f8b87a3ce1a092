"""
Spare agent bodies with real pi in a real bwrap box: a new agent session
takes a warm box made for its id, whose folders become the session's by a
rename while the box runs (L{vehicle.agent.AgentSpares},
L{vehicle.agent.AgentProfile.makeFolders}), and a spare shows nothing of
anyone, before its hand-off or after.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from twisted.trial.unittest import TestCase

from vehicle.body import PRIMING_FOLDER
from vehicle.body import PRIMING_PROMPT
from vehicle.body._spawner import latestSessionFile

from tests.support.live import LiveHost, settledEvent, startedAtTheClaim, waitUntil
from tests.support.scripted import bashMarker, writeMarker


def agentPool(host: LiveHost) -> Any:
    spares = host.host.bodies.agent.spares
    assert spares is not None
    return spares


async def readyAgentSpare(host: LiveHost, not_: Any = None) -> Any:
    """
    The first ready agent spare (other than C{not_}), waiting for it.
    """
    await waitUntil(lambda: any(s is not not_ for s in agentPool(host).ready))
    return next(s for s in agentPool(host).ready if s is not not_)


def descendants(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            children = (task / "children").read_text().split()
        except OSError:
            continue
        for child in map(int, children):
            found.append(child)
            found += descendants(child)
    return found


def piInBox(pid: int) -> int:
    """
    The pi (Node) process inside the box bwrap C{pid} started.
    """
    for child in descendants(pid):
        try:
            cmdline = Path(f"/proc/{child}/cmdline").read_bytes()
        except OSError:
            continue
        if b"--mode\0rpc" in cmdline:
            return child
    raise AssertionError(f"no pi under {pid}")


def boxView(pid: int, path: Path) -> Path:
    """
    C{path} as the box of pi process C{pid} sees it (its mount namespace's
    root, read from outside).
    """
    return Path(f"/proc/{pid}/root") / path.relative_to("/")


def filesUnder(folder: Path) -> dict[Path, bytes]:
    found = {}
    for path in folder.rglob("*"):
        if path.is_file() and not path.is_symlink():
            try:
                found[path] = path.read_bytes()
            except OSError:
                continue
    return found


class HandOffTests(TestCase):
    """
    A new agent session runs on the spare made for its id.
    """

    timeout = 180

    async def test_newAgentSessionTakesTheSpare(self) -> None:
        """
        The session gets the spare's reserved id and its folders; its first
        prompt runs on the spare (the same pid, boxed by bwrap); a file the
        model's tool writes is in the session's workspace as the host sees
        it; pi's file is the session's alone (the spare's own session gone)
        and holds the conversation; after a restart the session is revived
        cold, in the same folders, and its tools still see the file.
        """
        host = await LiveHost(self, agentSpareBodies=1, spareRefillMs=60000).start()
        spare = await readyAgentSpare(host)
        pid = spare.transport.pid
        reserved = spare.sessionId
        # pi named its own session's file where the session's pi folder will
        # be; once pi is switched to a new file there (while the spare
        # waits), its own (its priming) is gone from the spare's folder.
        own = Path(spare.ownFile)
        self.assertEqual(own.parent, host.root / "sessions" / reserved / "pi")
        self.assertFalse((spare.paths.piDir / own.name).exists())
        prepared = spare.prepared
        self.assertEqual(prepared.parent, own.parent)
        self.assertEqual(list(spare.paths.piDir.glob("*.jsonl")), [spare.paths.piDir / prepared.name])
        sparePi = os.stat(spare.paths.piDir).st_ino
        spareWork = os.stat(spare.paths.workDir).st_ino
        sid = await host.create(profile="agent")
        self.assertEqual(sid, reserved)
        session = host.registry().sessions[sid]
        workspace = host.root / "workspaces" / sid
        self.assertEqual(os.stat(session.directory / "pi").st_ino, sparePi)
        self.assertEqual(os.stat(workspace).st_ino, spareWork)
        self.assertFalse(spare.paths.piDir.exists())
        await host.command(sid, "prompt", "p1",
                           text="make it " + writeMarker("made.txt", "made in the box"))
        events = await host.waitFor(sid, settledEvent)
        self.assertFalse(events[-1]["data"]["aborted"], events[-1])
        materialized = [e for e in events if e["type"] == "body.materialized"]
        self.assertEqual(materialized[0]["data"]["pid"], pid)
        self.assertEqual(materialized[0]["data"]["box"], "bwrap")
        self.assertNotIn("session.revived", [e["type"] for e in events])
        self.assertEqual((workspace / "made.txt").read_text(), "made in the box")
        # The model was reached through the spare's proxy, with the key.
        for headers, _ in host.model.requests:
            self.assertEqual(headers["authorization"], "Bearer " + host.key)
        _, body = host.model.requests[0]
        self.assertEqual([m["role"] for m in body["messages"]], ["system", "user"])
        self.assertIn(str(workspace), json.dumps(body["messages"][0]))
        piFiles = list((session.directory / "pi").glob("*.jsonl"))
        self.assertEqual(piFiles, [prepared], piFiles)
        text = piFiles[0].read_text()
        records = [json.loads(line) for line in text.splitlines()]
        self.assertEqual(records[0]["cwd"], str(workspace))
        self.assertNotIn(PRIMING_PROMPT, text)
        self.assertIn("make it", text)
        code, frame = await host.call("GET", f"/sessions/{sid}")
        self.assertEqual(code, 200, frame)
        transcript = json.dumps(frame["value"]["transcript"])
        self.assertIn("make it", transcript)
        self.assertNotIn(PRIMING_PROMPT, transcript)
        # The spare's own folder is gone; the session's folders stay.
        cursor = events[-1]["seq"]
        await host.restart()
        self.assertFalse((host.root / "spares" / spare.spareId).exists())
        await host.command(sid, "prompt", "p2", text="again " + bashMarker("cat made.txt > seen.txt"))
        events = await host.waitFor(sid, settledEvent, since=cursor)
        kinds = [e["type"] for e in events]
        self.assertIn("session.revived", kinds)
        cold = [e for e in events if e["type"] == "body.materialized"][-1]
        self.assertNotEqual(cold["data"]["pid"], pid)
        self.assertEqual((workspace / "seen.txt").read_text(), "made in the box")
        self.assertEqual(os.stat(workspace).st_ino, spareWork)
        self.assertIn("make it", json.dumps(host.model.requests[-1][1]["messages"]))


    async def test_anotherModelTakesTheSpare(self) -> None:
        """
        A new agent session on another model of the host (another provider,
        its own key) takes the spare started on the default: its box's pi is
        set to the session's model, whose requests go through the spare's
        proxy with that provider's key, and its tools work in the session's
        workspace.
        """
        host = await LiveHost(self, agentSpareBodies=1, spareRefillMs=60000,
                              otherProvider=True).start()
        spare = await readyAgentSpare(host)
        sid = await host.create(profile="agent", model="other/other-1")
        self.assertEqual(sid, spare.sessionId)
        await host.command(sid, "prompt", "p1",
                           text="make it " + writeMarker("made.txt", "made on the other"))
        events = await host.waitFor(sid, settledEvent)
        self.assertFalse(events[-1]["data"]["aborted"], events[-1])
        materialized = [e for e in events if e["type"] == "body.materialized"]
        self.assertEqual(materialized[0]["data"]["pid"], spare.transport.pid)
        self.assertEqual((host.root / "workspaces" / sid / "made.txt").read_text(),
                         "made on the other")
        self.assertTrue(host.model.requests)
        for headers, body in host.model.requests:
            self.assertEqual(body["model"], "other-1")
            self.assertEqual(headers["authorization"], "Bearer " + host.otherKey)
            # The provider's headers, added by the proxy: pi never had them.
            self.assertEqual(headers["x-other-secret"], host.otherHeader)
            self.assertEqual(headers["x-other-model"], "other-1")

    async def test_revivedAgentStartsAtTheClaim(self) -> None:
        """
        A dormant agent conversation claimed has its own body started at
        the claim, in a box on its own folders, heard by no one, primed in
        a session of its own (its proxy answering; the folder gone once pi
        is switched to the conversation): the command then runs on that
        very process (no other started), pi resumes the conversation with
        the same tools, its tools see the workspace of the first run, and
        neither the model nor the conversation sees the priming.
        """
        host = await LiveHost(self, agentSpareBodies=1, spareRefillMs=60000).start()
        await readyAgentSpare(host)
        sid = await host.create(profile="agent")
        await host.command(sid, "prompt", "p1",
                           text="make it " + writeMarker("made.txt", "made in the box"))
        first = await host.waitFor(sid, settledEvent)
        self.assertFalse(first[-1]["data"]["aborted"], first[-1])
        session = host.registry().sessions[sid]
        piFile = latestSessionFile(session.directory / "pi")
        await session.conductor.dispose("shutdown")
        await host.waitFor(sid, lambda e: e["type"] == "body.dormant")
        since = len(host.events(sid))
        spawned = len(host.model.requests)
        code, frame = await host.call("POST", f"/sessions/{sid}/claim", {"requestId": "c2"})
        self.assertEqual(code, 200, frame)
        self.assertEqual(frame["value"]["session"]["body"], "dormant")
        pid = await startedAtTheClaim(session)
        self.assertTrue(piInBox(pid))
        self.assertFalse((session.directory / "pi" / PRIMING_FOLDER).exists())
        self.assertEqual(latestSessionFile(session.directory / "pi"), piFile)
        self.assertEqual(list((session.directory / "pi").glob("*.jsonl")), [piFile])
        # Started, and still nobody's: nothing told but the claim, nothing
        # asked of the model.
        self.assertEqual([e["type"] for e in host.events(sid)[since:]], ["lease.renewed"])
        self.assertEqual(session.conductor.bodyState(), "dormant")
        self.assertEqual(len(host.model.requests), spawned)
        await host.command(sid, "prompt", "p2",
                           text="again " + bashMarker("cat made.txt > seen.txt"))
        events = await host.waitFor(sid, settledEvent, since=since)
        self.assertFalse(events[-1]["data"]["aborted"], events[-1])
        [materialized] = [e for e in events if e["type"] == "body.materialized"]
        self.assertEqual(materialized["data"]["pid"], pid)
        self.assertEqual(materialized["data"]["box"], "bwrap")
        self.assertEqual(len([e for e in events if e["type"] == "session.revived"]), 1)
        tools = [e["data"]["tools"] for e in first + events if e["type"] == "run.started"]
        self.assertEqual(tools[1], tools[0])
        self.assertEqual((host.root / "workspaces" / sid / "seen.txt").read_text(),
                         "made in the box")
        _, body = host.model.requests[spawned]
        texts = json.dumps(body["messages"])
        self.assertIn("make it", texts)
        self.assertIn("again", texts)
        self.assertNotIn(PRIMING_PROMPT, texts)
        self.assertNotIn(PRIMING_PROMPT, piFile.read_text())


class NothingOfAnyoneTests(TestCase):
    """
    An agent spare shows nothing of anyone: before its hand-off its box
    holds only its own empty folders and no key; after one person's session
    ran, the next spare, and the next person's session on it, see none of
    theirs.
    """

    timeout = 240

    def assertBareBox(self, host: LiveHost, spare: Any, secrets: list[bytes]) -> None:
        pi = piInBox(spare.transport.pid)
        root = host.root
        sid = spare.sessionId
        # The data dir shows only the folders bound for the session it will be.
        self.assertEqual(os.listdir(boxView(pi, root / "workspaces")), [sid])
        self.assertEqual(os.listdir(boxView(pi, root / "workspaces" / sid)), [])
        self.assertEqual(os.listdir(boxView(pi, root / "sessions")), [sid])
        self.assertEqual(sorted(os.listdir(boxView(pi, root))), ["sessions", "workspaces"])
        environ = Path(f"/proc/{pi}/environ").read_bytes()
        cmdline = Path(f"/proc/{pi}/cmdline").read_bytes()
        seen = filesUnder(boxView(pi, root))
        self.assertTrue(seen)
        for secret in secrets:
            self.assertNotIn(secret, environ)
            self.assertNotIn(secret, cmdline)
            for path, data in seen.items():
                self.assertNotIn(secret, data, path)
        # Its boot config held the proxy's token, never the key; the proxy
        # reaches no provider.
        tokens = [p["apiKey"] for p in spare.proxy.providers.values()]
        self.assertTrue(all(t.startswith("vbt-") for t in tokens))
        self.assertIsNone(spare.proxy.proxy.model)

    async def test_nothingOfAnyone(self) -> None:
        host = await LiveHost(self, agentSpareBodies=1, spareRefillMs=0).start()
        key = host.key.encode()
        first = await readyAgentSpare(host)
        self.assertBareBox(host, first, [key])
        alice = await host.create(profile="agent")
        self.assertEqual(alice, first.sessionId)
        await host.command(alice, "prompt", "a1",
                           text="a secret of alice " + writeMarker("alice.txt", "alice-words-1234"))
        await host.waitFor(alice, settledEvent)
        self.assertTrue((host.root / "workspaces" / alice / "alice.txt").exists())
        second = await readyAgentSpare(host, not_=first)
        self.assertNotEqual(second.sessionId, alice)
        self.assertNotEqual(second.transport.pid, first.transport.pid)
        self.assertBareBox(host, second, [key, b"alice-words-1234", b"a secret of alice"])
        code, frame = await host.call(
            "POST", "/sessions", {"requestId": "bob-1", "profile": "agent"}, principal="bob"
        )
        self.assertEqual(code, 201, frame)
        bob = frame["value"]["session"]["sessionId"]
        self.assertEqual(bob, second.sessionId)
        since = len(host.model.requests)
        listing = f"ls -a {host.root}/workspaces {host.root}/sessions > seen.txt; ls -a >> seen.txt"
        code, frame = await host.call(
            "POST", f"/sessions/{bob}/commands",
            {"type": "prompt", "requestId": "b1", "text": "look " + bashMarker(listing)},
            principal="bob",
        )
        self.assertEqual(code, 202, frame)
        events = await host.waitFor(bob, settledEvent, principal="bob")
        self.assertFalse(events[-1]["data"]["aborted"], events[-1])
        seen = (host.root / "workspaces" / bob / "seen.txt").read_text().split()
        self.assertNotIn(alice, seen)
        self.assertIn(bob, seen)
        self.assertNotIn("alice.txt", seen)
        for _, body in host.model.requests[since:]:
            self.assertNotIn("alice", json.dumps(body))
        piFile = latestSessionFile(host.registry().sessions[bob].directory / "pi")
        assert piFile is not None
        self.assertNotIn("alice", piFile.read_text())
