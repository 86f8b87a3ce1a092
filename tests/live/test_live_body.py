"""
Integration: real pi bodies behind the commands, against the scripted model.
"""

from __future__ import annotations

import json

from twisted.trial.unittest import TestCase

from tests.support.live import LiveHost, settledEvent


class PromptTests(TestCase):
    """
    A prompt runs in a real pi child and settles.
    """

    timeout = 60

    async def test_promptSettles(self) -> None:
        """
        A prompt materializes a body, the run starts and settles, the
        command completes, and the model saw the key from fd 3.
        """
        host = await LiveHost(self).start()
        sid = await host.create()
        code, frame = await host.command(sid, "prompt", "p1", text="hello there")
        self.assertEqual(code, 202, frame)
        events = await host.waitFor(sid, settledEvent)
        types = [e["type"] for e in events]
        self.assertIn("body.materialized", types)
        self.assertIn("run.started", types)
        self.assertIn("message.completed", types)
        settled = events[-1]
        self.assertFalse(settled["data"]["aborted"])
        await host.waitFor(sid, lambda e: e["type"] == "command.completed")
        headers, body = host.model.requests[-1]
        self.assertEqual(headers["authorization"], "Bearer " + host.key)


class StreamingTests(TestCase):
    """
    Deltas reach an SSE watcher; queued commands arrive in order.
    """

    timeout = 90

    async def test_deltasReachSSE(self) -> None:
        """
        A watcher on SSE sees ephemeral message.delta events (no id) between
        run.started and run.settled, and durable events with ids.
        """
        from tests.support.live import SSEWatcher

        host = await LiveHost(self).start()
        sid = await host.create()
        watcher = await SSEWatcher(host, sid).start()
        await host.command(sid, "prompt", "p1", text="stream please [[SLOW]]")
        await watcher.waitFor(lambda m: m.get("event") == "run.settled")
        kinds = [m["event"] for m in watcher.messages]
        deltas = [m for m in watcher.messages if m["event"] == "message.delta"]
        self.assertGreater(len(deltas), 3)
        self.assertTrue(all("id" not in m for m in deltas))
        self.assertLess(kinds.index("run.started"), kinds.index("message.delta"))
        self.assertLess(kinds.index("message.delta"), kinds.index("run.settled"))
        ids = [int(m["id"]) for m in watcher.messages if "id" in m]
        self.assertEqual(ids, list(range(1, len(ids) + 1)))
        text = "".join(m["frame"]["data"]["text"] for m in deltas)
        self.assertIn("slow-0", text)
        watcher.close()

    async def test_steerAndFollowUpInOrder(self) -> None:
        """
        During a slow run, a steer and a follow-up are queued in pi and then
        delivered in pi's order (steer first) within the same run.
        """
        host = await LiveHost(self).start()
        sid = await host.create()
        await host.command(sid, "prompt", "p1", text="go slowly [[SLOW]]")
        await host.waitFor(sid, lambda e: e["type"] == "run.started")
        await host.command(sid, "follow_up", "f1", text="then this")
        await host.command(sid, "steer", "s1", text="steer now")
        events = await host.waitFor(sid, settledEvent)
        users = [e["data"]["text"] for e in events
                 if e["type"] == "message.completed" and e["data"]["role"] == "user"]
        self.assertEqual(users, ["go slowly [[SLOW]]", "steer now", "then this"])
        self.assertEqual(sum(1 for e in events if e["type"] == "run.started"), 1)
        await host.waitFor(sid, lambda e: e["type"] == "command.completed" and e["data"]["commandId"] == "f1")
        session = host.registry().sessions[sid]
        self.assertEqual(
            {c: session.findCommand(c).status for c in ("p1", "f1", "s1")},
            {"p1": "completed", "f1": "completed", "s1": "completed"},
        )


class AbortTests(TestCase):
    """
    Abort, cancel and the budget stop runs and leave nothing stale.
    """

    timeout = 90

    async def test_abortCancelsQueued(self) -> None:
        """
        Abort during a slow run settles it aborted, cancels the queued
        follow-up, and the next prompt's run does not see the stale text.
        """
        host = await LiveHost(self).start()
        sid = await host.create()
        await host.command(sid, "prompt", "p1", text="long one [[SLOW]]")
        await host.waitFor(sid, lambda e: e["type"] == "run.started")
        await host.command(sid, "follow_up", "f1", text="STALE follow up")
        await host.waitFor(sid, lambda e: e["type"] == "queue.updated")
        code, frame = await host.command(sid, "abort", "a1")
        self.assertEqual(code, 202, frame)
        events = await host.waitFor(sid, settledEvent)
        self.assertTrue(events[-1]["data"]["aborted"])
        await host.waitFor(sid, lambda e: e["type"] == "command.completed" and e["data"]["commandId"] == "a1")
        session = host.registry().sessions[sid]
        self.assertEqual(session.findCommand("f1").status, "cancelled")
        self.assertEqual(session.findCommand("p1").status, "aborted")
        cursor = session.cursor
        await host.command(sid, "prompt", "p2", text="fresh question")
        events = await host.waitFor(sid, settledEvent, since=cursor)
        users = [e["data"]["text"] for e in events
                 if e["type"] == "message.completed" and e["data"]["role"] == "user"]
        self.assertEqual(users, ["fresh question"])
        _, body = host.model.requests[-1]
        self.assertNotIn("STALE", json.dumps(body))

    async def test_cancelTakesOutOne(self) -> None:
        """
        With two follow-ups queued, cancel takes out exactly the named one;
        the other is still delivered.
        """
        host = await LiveHost(self).start()
        sid = await host.create()
        await host.command(sid, "prompt", "p1", text="long one [[SLOW]]")
        await host.waitFor(sid, lambda e: e["type"] == "run.started")
        await host.command(sid, "follow_up", "f1", text="first follow")
        await host.command(sid, "follow_up", "f2", text="second follow")
        await host.command(sid, "follow_up", "f3", text="third follow")
        code, frame = await host.command(sid, "cancel", "c1", targetCommandId="f2")
        self.assertEqual(code, 202, frame)
        self.assertEqual(frame["type"], "command.cancelled")
        events = await host.waitFor(sid, settledEvent)
        users = [e["data"]["text"] for e in events
                 if e["type"] == "message.completed" and e["data"]["role"] == "user"]
        self.assertEqual(users, ["long one [[SLOW]]", "first follow", "third follow"])
        session = host.registry().sessions[sid]
        self.assertEqual(session.findCommand("f2").status, "cancelled")

    async def test_budgetStopsToolLoop(self) -> None:
        """
        A tool loop stops after exactly maxTurns model requests:
        budget.exceeded, then run.settled aborted.
        """
        host = await LiveHost(self).start()
        sid = await host.create(budget={"maxTurns": 3})
        before = len(host.model.requests)
        await host.command(sid, "prompt", "p1", text="loop [[LOOP:nothing]]")
        events = await host.waitFor(sid, settledEvent)
        types = [e["type"] for e in events]
        self.assertIn("budget.exceeded", types)
        self.assertLess(types.index("budget.exceeded"), types.index("run.settled"))
        self.assertTrue(events[-1]["data"]["aborted"])
        self.assertEqual(len(host.model.requests) - before, 3)


class LifecycleTests(TestCase):
    """
    Bodies are mortal: dormancy, revival, a body that dies, the transcript.
    """

    timeout = 90

    async def test_idleDormancyAndRevival(self) -> None:
        """
        After the idle time the body goes dormant; the next prompt
        materializes it again from pi's file and the conversation goes on
        (the model sees the earlier turn).
        """
        host = await LiveHost(self, bodyIdleMs=300).start()
        sid = await host.create()
        await host.command(sid, "prompt", "p1", text="remember BANANA")
        await host.waitFor(sid, settledEvent)
        events = await host.waitFor(sid, lambda e: e["type"] == "body.dormant")
        self.assertEqual(events[-1]["data"]["reason"], "idle")
        cursor = events[-1]["seq"]
        await host.command(sid, "prompt", "p2", text="what did I say?")
        events = await host.waitFor(sid, settledEvent, since=cursor)
        types = [e["type"] for e in events]
        self.assertIn("body.materialized", types)
        self.assertIn("session.revived", types)
        _, body = host.model.requests[-1]
        self.assertIn("remember BANANA", json.dumps(body))

    async def test_bodyKilledMidRun(self) -> None:
        """
        kill -9 of pi during a run: body.exited with the signal, the run
        settles aborted with stopReason body_exited, the prompt fails, and
        the next prompt works.
        """
        host = await LiveHost(self).start()
        sid = await host.create()
        await host.command(sid, "prompt", "p1", text="slow [[SLOW]]")
        await host.waitFor(sid, lambda e: e["type"] == "run.started")
        conductor = host.registry().sessions[sid].conductor
        conductor.transport.signalProcess("KILL")
        events = await host.waitFor(sid, lambda e: e["type"] == "command.failed")
        byType = {e["type"]: e for e in events}
        self.assertEqual(byType["body.exited"]["data"]["signal"], 9)
        self.assertEqual(byType["run.settled"]["data"]["stopReason"], "body_exited")
        self.assertTrue(byType["run.settled"]["data"]["aborted"])
        cursor = events[-1]["seq"]
        await host.command(sid, "prompt", "p2", text="are you back?")
        events = await host.waitFor(sid, settledEvent, since=cursor)
        self.assertFalse(events[-1]["data"]["aborted"])

    async def test_transcriptTimestampsArePi(self) -> None:
        """
        The snapshot's transcript comes from pi's file: each item carries
        pi's entry id and pi's own timestamp, live and after a restart.
        """
        host = await LiveHost(self).start()
        sid = await host.create()
        await host.command(sid, "prompt", "p1", text="first words")
        await host.waitFor(sid, settledEvent)
        code, frame = await host.call("GET", f"/sessions/{sid}")
        self.assertEqual(code, 200)
        transcript = frame["value"]["transcript"]
        self.assertEqual([t["role"] for t in transcript], ["user", "assistant"])
        self.assertEqual(transcript[0]["text"], "first words")
        session = host.registry().sessions[sid]
        piFile = next((session.directory / "pi").glob("*.jsonl"))
        entries = [json.loads(line) for line in piFile.read_text().splitlines()]
        stamps = {e["id"]: e["timestamp"] for e in entries if "id" in e}
        for item in transcript:
            self.assertEqual(item["timestamp"], stamps[item["entryId"]])
        self.assertIsNotNone(frame["value"]["stats"])
        await host.restart()
        code, frame = await host.call("GET", f"/sessions/{sid}")
        self.assertEqual(frame["value"]["transcript"], transcript)
        self.assertEqual(frame["value"]["session"]["body"], "dormant")


class BranchTests(TestCase):
    """
    Fork and clone make new conversations from pi's file.
    """

    timeout = 90

    async def test_forkAndClone(self) -> None:
        """
        A fork before the second message starts with the first exchange and
        hands back the second message's text; a clone copies everything and
        is named "Copy of"; both carry their parent and run real prompts.
        """
        host = await LiveHost(self).start()
        sid = await host.create(title="Trip plans")
        await host.command(sid, "prompt", "p1", text="first question")
        await host.waitFor(sid, lambda e: e["type"] == "command.completed")
        cursor = host.registry().sessions[sid].cursor
        await host.command(sid, "prompt", "p2", text="second question", contextRefs=["doc-1"])
        await host.waitFor(sid, lambda e: e["type"] == "command.completed", since=cursor)
        code, frame = await host.call("GET", f"/sessions/{sid}")
        transcript = frame["value"]["transcript"]
        second = [t for t in transcript if t["role"] == "user"][1]

        code, frame = await host.command(sid, "fork", "f1", entryId=second["entryId"])
        self.assertEqual(code, 201, frame)
        self.assertEqual(frame["type"], "session.forked")
        self.assertEqual(frame["value"]["selectedText"], "second question")
        fork = frame["value"]["session"]
        self.assertEqual(fork["parent"], {"sessionId": sid, "kind": "fork", "entryId": second["entryId"]})
        self.assertIsNone(fork["title"])
        # Listed by the first message of the history it begins with...
        self.assertEqual(fork["preview"], "first question")
        code, frame = await host.call("GET", f"/sessions/{fork['sessionId']}")
        self.assertEqual([t["text"] for t in frame["value"]["transcript"] if t["role"] == "user"],
                         ["first question"])
        await host.command(fork["sessionId"], "prompt", "p3", text="another way")
        events = await host.waitFor(fork["sessionId"], settledEvent)
        self.assertFalse(events[-1]["data"]["aborted"])
        # ...until something is said in it, also after a restart.
        code, frame = await host.call("GET", f"/sessions/{fork['sessionId']}")
        self.assertEqual(frame["value"]["session"]["preview"], "another way")
        _, body = host.model.requests[-1]
        self.assertIn("first question", json.dumps(body))
        self.assertNotIn("second question", json.dumps(body))

        # A fork before the first message has no history: it starts empty,
        # and hands back the message to send again.
        first = [t for t in transcript if t["role"] == "user"][0]
        code, frame = await host.command(sid, "fork", "f0", entryId=first["entryId"])
        self.assertEqual(code, 201, frame)
        self.assertEqual(frame["value"]["selectedText"], "first question")
        empty = frame["value"]["session"]
        self.assertIsNone(empty["preview"])
        code, frame = await host.call("GET", f"/sessions/{empty['sessionId']}")
        self.assertEqual(frame["value"]["transcript"], [])
        await host.command(empty["sessionId"], "prompt", "p4", text="starting over")
        events = await host.waitFor(empty["sessionId"], settledEvent)
        self.assertFalse(events[-1]["data"]["aborted"])
        self.assertNotIn("first question", json.dumps(host.model.requests[-1][1]))

        code, frame = await host.command(sid, "clone", "c1")
        self.assertEqual(code, 201, frame)
        clone = frame["value"]["session"]
        self.assertEqual(clone["title"], "Copy of Trip plans")
        code, frame = await host.call("GET", f"/sessions/{clone['sessionId']}")
        self.assertEqual(len(frame["value"]["transcript"]), 4)
        code, frame = await host.command(sid, "fork", "f2", entryId="nope")
        self.assertEqual(frame["code"], "nothing_to_fork")
        sourceEvents = host.events(sid)
        self.assertIn("session.forked", [e["type"] for e in sourceEvents])
        self.assertIn("session.cloned", [e["type"] for e in sourceEvents])
        await host.restart()
        code, frame = await host.call("GET", "/sessions")
        previews = {s["sessionId"]: s["preview"] for s in frame["value"]["sessions"]}
        self.assertEqual(previews[fork["sessionId"]], "another way")


class ChimeLiveTests(TestCase):
    """
    An accepted chime reaches the model attributed to its author.
    """

    timeout = 60

    async def test_acceptedChimeAttributed(self) -> None:
        """
        The model sees C{[<author> collaborator]} before the chime's text,
        never as the driver's own words.
        """
        host = await LiveHost(self).start()
        sid = await host.create()
        code, frame = await host.call(
            "POST", f"/sessions/{sid}/chimes",
            {"requestId": "ch-1", "author": "Bea", "text": "try the red one"}, principal="bea",
        )
        chimeId = frame["value"]["chime"]["chimeId"]
        code, frame = await host.command(sid, "accept_chime", "acc-1", chimeId=chimeId)
        self.assertEqual(code, 202, frame)
        await host.waitFor(sid, settledEvent)
        _, body = host.model.requests[-1]
        users = [m for m in body["messages"] if m["role"] == "user"]
        self.assertIn("[Bea collaborator]\ntry the red one", json.dumps(users[-1]["content"])
                      .encode().decode("unicode_escape"))
