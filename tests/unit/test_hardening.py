"""
Hardening: the clauses whose proof was missing (C{docs/conformance.md}'s
C{partial} rows).  The capsule's bounds, C{shutdown}, branching without the
lease and with the source's token, chimes refused or rejected, the budget's
defaults from the environment (route tests on the in-memory host), and, on a
live host with real pi, bodies disposed when the host stops and a run that
carries on across a takeover.
"""

from __future__ import annotations

import json
from typing import Any

from jsonschema import Draft202012Validator
from twisted.trial.unittest import SynchronousTestCase

from vehicle.body._picommand import bootConfig
from vehicle.protocol import RunBudget, fromJSON, toObject
from vehicle.session._capsule import ASSISTANT_TEXT_BYTES, LAST_COMMANDS, LAST_ITEMS, MILESTONES
from vehicle.settings import Settings, SettingsError

from tests.support.fakepi import STATE, FakePi
from tests.support.harness import MODELS, SECRET, Harness
from tests.support.pifiles import HEADER, assistant, entry, user, writePiFile
from tests.support.routes import TAB1, TAB2, RouteTestCase
from tests.support.schemas import registry, schemas


def capsuleProblems(value: Any) -> list[str]:
    """
    Why C{value} is not a capsule of the closed shape in
    C{frame.schema.json#/$defs/capsule} (empty when it is one).
    """
    ref = schemas()["frame.schema.json"]["$id"] + "#/$defs/capsule"
    validator = Draft202012Validator({"$ref": ref}, registry=registry())
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message[:200]}"
            for e in validator.iter_errors(value)]


def toolResult(id: str, parentId: str, second: float, name: str, isError: bool) -> dict[str, Any]:
    """
    A tool result entry, its content a secret the capsule must not carry.
    """
    return entry("message", id, parentId, second, message={
        "role": "toolResult", "toolCallId": "call_" + id, "toolName": name,
        "content": [{"type": "text", "text": "RESULT-SECRET " + id}], "isError": isError,
        "timestamp": 1796022051300,
    })


def longConversation(turns: int) -> list[dict[str, Any]]:
    """
    C{turns} exchanges of user, assistant (a tool call with secret
    arguments), tool result and assistant; the user's words and the last
    assistant text grow, the text past 4 KiB in bytes.
    """
    records: list[dict[str, Any]] = [HEADER]
    parent = None
    second = 0.0
    for n in range(turns):
        ids = [f"{n:04d}{k:04x}" for k in range(4)]
        second += 1
        records.append(user(ids[0], parent, second, f"USER-SECRET-{n} " + "w" * n))
        records.append(assistant(ids[1], ids[0], second + 0.1, [
            {"type": "text", "text": "let me look"},
            {"type": "toolCall", "id": "call_" + ids[1], "name": f"tool_{n % 3}",
             "arguments": {"q": "ARG-SECRET"}}], stopReason="toolUse"))
        records.append(toolResult(ids[2], ids[1], second + 0.2, f"tool_{n % 3}", n % 2 == 0))
        records.append(assistant(ids[3], ids[2], second + 0.3, [
            {"type": "text", "text": f"answer {n} " + "\u00e9" * 3000}]))
        parent = ids[3]
    return records


class CapsuleBoundsTests(RouteTestCase):
    """
    The capsule is bounded as the spec says, whatever the session holds.
    """

    def capsule(self, sessionId: str) -> dict[str, Any]:
        frame = self.ok("GET", f"/sessions/{sessionId}/capsule", **TAB1)
        self.assertEqual(frame["type"], "session.capsule")
        value = frame["value"]
        self.assertEqual(capsuleProblems(value), [])
        self.assertEqual(value["authority"], {"mutations": False})
        return value

    def test_lastSixteenCommandsWithoutText(self) -> None:
        """
        With 20 commands, the capsule counts them all and lists the last 16,
        in order, with no text.
        """
        sid = self.create(**TAB1)
        for n in range(20):
            self.prompt(sid, f"p{n:02d}", f"COMMAND-SECRET-{n}", **TAB1)
        capsule = self.capsule(sid)
        self.assertEqual(LAST_COMMANDS, 16)
        self.assertEqual([c["commandId"] for c in capsule["commands"]["last"]],
                         [f"p{n:02d}" for n in range(4, 20)])
        self.assertEqual(capsule["commands"]["counts"], {"accepted": 20})
        for command in capsule["commands"]["last"]:
            self.assertEqual(set(command), {"commandId", "type", "status", "acceptedAt"})
        self.assertNotIn("COMMAND-SECRET", json.dumps(capsule))

    def test_milestonesBounded(self) -> None:
        """
        With more than 128 milestones the capsule keeps the newest 128, as
        ids, statuses and counts: a rename's title is not among them.
        """
        sid = self.create(**TAB1)
        for n in range(140):
            self.ok("PATCH", f"/sessions/{sid}", {"title": f"TITLE-SECRET-{n}"}, **TAB1)
        capsule = self.capsule(sid)
        milestones = capsule["milestones"]
        self.assertEqual(MILESTONES, 128)
        self.assertEqual(len(milestones), 128)
        self.assertEqual(milestones[-1]["seq"], capsule["posture"]["cursor"])
        self.assertEqual([m["seq"] for m in milestones],
                         list(range(milestones[0]["seq"], milestones[0]["seq"] + 128)))
        self.assertEqual({m["type"] for m in milestones}, {"session.renamed"})
        self.assertNotIn("TITLE-SECRET", json.dumps(milestones))

    def test_transcriptBounded(self) -> None:
        """
        From pi's file, the capsule keeps the last 32 items: assistant text
        cut to 4 KiB (UTF-8 bytes) with its tools' names, user turns as
        their length only, tool results as name and error flag; never a
        user's words, tool arguments or results.
        """
        sid = self.create(**TAB1)
        records = longConversation(12)   # 48 items
        writePiFile(self.session(sid).directory, records)
        capsule = self.capsule(sid)
        items = capsule["transcript"]
        self.assertEqual(LAST_ITEMS, 32)
        self.assertEqual(len(items), 32)
        # The last 32 of 48: from the fifth exchange on.
        self.assertEqual([i["role"] for i in items[:4]],
                         ["user", "assistant", "toolResult", "assistant"])
        self.assertEqual(items[0]["length"], len("USER-SECRET-4 " + "w" * 4))
        self.assertEqual(set(items[0]), {"role", "length", "timestamp"})
        self.assertEqual(items[1]["tools"], ["tool_1"])
        self.assertEqual(items[2], {"role": "toolResult", "toolName": "tool_1", "isError": True,
                                    "timestamp": items[2]["timestamp"]})
        self.assertFalse(items[6]["isError"])
        last = items[-1]
        self.assertEqual(last["role"], "assistant")
        self.assertLessEqual(len(last["text"].encode("utf-8")), ASSISTANT_TEXT_BYTES)
        self.assertGreater(len(last["text"].encode("utf-8")), ASSISTANT_TEXT_BYTES - 2)
        self.assertTrue(last["text"].startswith("answer 11 \u00e9"))
        self.assertEqual(last["tools"], [])
        text = json.dumps(capsule)
        for secret in ("USER-SECRET", "ARG-SECRET", "RESULT-SECRET"):
            self.assertNotIn(secret, text)

    def test_capsuleOfAnEmptySession(self) -> None:
        """
        A new session's capsule has the closed shape, with no transcript.
        """
        sid = self.create(**TAB1)
        capsule = self.capsule(sid)
        self.assertEqual(capsule["transcript"], [])
        self.assertEqual(capsule["identity"]["parent"], None)
        self.assertEqual([m["type"] for m in capsule["milestones"]],
                         ["session.created", "lease.claimed"])


class ShutdownTests(RouteTestCase):
    """
    C{shutdown} disposes of the body and gives the lease back.
    """

    def setUp(self) -> None:
        super().setUp()
        self.pi = FakePi(self.h.launcher)

    def command(self, sid: str, kind: str, requestId: str, **fields: Any) -> dict[str, Any]:
        return self.ok("POST", f"/sessions/{sid}/commands",
                       {"type": kind, "requestId": requestId, **fields}, **TAB1)

    def status(self, sid: str, commandId: str) -> str:
        return str(self.session(sid).findCommand(commandId).status)

    def test_shutdownReleasesTheLease(self) -> None:
        """
        C{shutdown} after a run: the body ends (C{body.dormant}, reason
        C{shutdown}), the lease is released, C{session.shutdown} names who
        asked; the session stays revivable.
        """
        sid = self.create(**TAB1)
        self.prompt(sid, "p1", "hello", **TAB1)
        self.pi.answer("get_state", STATE)
        self.pi.answer("prompt", {"disposition": "started"})
        self.pi.agentStart()
        self.pi.assistant()
        self.pi.settle()
        cursor = self.session(sid).cursor   # (inspect would ask the live body)
        self.command(sid, "shutdown", "sd1")
        self.assertIn(0, self.pi.transport.closed)
        self.h.clock.advance(3)   # pi ignored its stdin's end: TERM
        events = self.events(sid, cursor, **TAB1)
        types = [e["type"] for e in events]
        self.assertEqual([t for t in types if not t.startswith("command.")],
                         ["body.dormant", "lease.released", "session.shutdown"])
        byType = {e["type"]: e["data"] for e in events}
        self.assertEqual(byType["body.dormant"], {"reason": "shutdown"})
        self.assertEqual(byType["lease.released"],
                         {"principal": "alice", "clientId": "tab-1", "reason": "shutdown"})
        self.assertEqual(byType["session.shutdown"],
                         {"by": {"principal": "alice", "clientId": "tab-1"}})
        self.assertNotIn("body.exited", types)
        self.assertEqual(self.status(sid, "sd1"), "completed")
        summary = self.summary(sid, **TAB1)
        self.assertIsNone(summary["lease"])
        self.assertEqual(summary["body"], "dormant")
        self.refused("lease_required", "POST", f"/sessions/{sid}/commands",
                     {"type": "prompt", "requestId": "p2", "text": "again"}, **TAB1)
        self.ok("POST", f"/sessions/{sid}/claim", {"requestId": "claim-2"}, **TAB1)
        self.prompt(sid, "p2", "again", **TAB1)
        self.assertEqual(len(self.h.launcher.spawned), 2)

    def test_shutdownMidRun(self) -> None:
        """
        C{shutdown} during a run aborts it first: the queued follow-up is
        cancelled (C{shutdown}), pi is told C{clear_queue} then C{abort},
        and only then is the body disposed.
        """
        sid = self.create(**TAB1)
        self.prompt(sid, "p1", "hello", **TAB1)
        self.pi.answer("get_state", STATE)
        self.pi.answer("prompt", {"disposition": "started"})
        self.pi.agentStart()
        self.command(sid, "follow_up", "f1", text="more")
        self.pi.answer("follow_up")
        self.command(sid, "shutdown", "sd1")
        self.pi.answer("clear_queue", {"steering": [], "followUp": ["more"]})
        self.assertEqual(self.status(sid, "f1"), "cancelled")
        self.assertEqual(self.session(sid).findCommand("f1").reason, "shutdown")
        self.assertEqual(self.pi.kinds()[-2:], ["clear_queue", "abort"])
        self.assertNotIn(0, self.pi.transport.closed)
        self.pi.settle(aborted=True)
        self.pi.answer("abort")
        self.assertIn(0, self.pi.transport.closed)
        self.pi.exit(exitCode=0)
        self.assertEqual(self.status(sid, "p1"), "aborted")
        self.assertEqual(self.status(sid, "sd1"), "completed")
        self.assertIn("session.shutdown", self.types(sid, **TAB1))

    def test_shutdownWhileDormant(self) -> None:
        """
        With no body, C{shutdown} only releases the lease and says so; no
        body is started for it.
        """
        sid = self.create(**TAB1)
        self.command(sid, "shutdown", "sd1")
        self.assertEqual(self.h.launcher.spawned, [])
        types = self.types(sid, **TAB1)
        self.assertIn("session.shutdown", types)
        self.assertNotIn("body.dormant", types)
        self.assertIsNone(self.summary(sid, **TAB1)["lease"])


class BranchTests(RouteTestCase):
    """
    Fork and clone need the session's owner, not its lease.
    """

    def source(self) -> str:
        sid = self.create(**TAB1)
        writePiFile(self.session(sid).directory, [
            HEADER,
            user("aaaa0001", None, 1, "first question"),
            assistant("aaaa0002", "aaaa0001", 2, [{"type": "text", "text": "first answer"}]),
            user("aaaa0003", "aaaa0002", 3, "second question"),
            assistant("aaaa0004", "aaaa0003", 4, [{"type": "text", "text": "second answer"}]),
        ])
        return sid

    def test_forkWithoutTheLease(self) -> None:
        """
        Another client of the same person, holding no lease, forks: the
        branch is its own session, leased to that client, with the message
        it was forked before handed back; the source keeps its holder and
        hears of the branch.
        """
        sid = self.source()
        code, frame = self.call("POST", f"/sessions/{sid}/commands",
                                {"type": "fork", "requestId": "fork-1", "entryId": "aaaa0003"},
                                **TAB2)
        self.assertEqual(code, 201, frame)
        self.assertEqual(frame["type"], "session.forked")
        value = frame["value"]
        self.assertEqual(value["selectedText"], "second question")
        self.assertEqual(value["parent"], {"sessionId": sid, "kind": "fork", "entryId": "aaaa0003"})
        branch = value["session"]
        self.assertNotEqual(branch["sessionId"], sid)
        self.assertEqual(branch["lease"]["clientId"], "tab-2")
        self.assertEqual(self.summary(sid, **TAB1)["lease"]["clientId"], "tab-1")
        forked = [e["data"] for e in self.events(sid, **TAB1) if e["type"] == "session.forked"]
        self.assertEqual(forked, [{"branchId": branch["sessionId"], "entryId": "aaaa0003",
                                   "by": {"principal": "alice", "clientId": "tab-2"}}])
        snapshot = self.ok("GET", f"/sessions/{branch['sessionId']}", **TAB2)["value"]
        self.assertEqual([i["text"] for i in snapshot["transcript"]],
                         ["first question", "first answer"])

    def test_cloneWithoutTheLease(self) -> None:
        """
        A clone by a client without the lease carries the whole active
        branch; its answer has no C{selectedText}.
        """
        sid = self.source()
        code, frame = self.call("POST", f"/sessions/{sid}/commands",
                                {"type": "clone", "requestId": "clone-1"}, **TAB2)
        self.assertEqual(code, 201, frame)
        self.assertEqual(frame["type"], "session.cloned")
        self.assertNotIn("selectedText", frame["value"])
        self.assertEqual(frame["value"]["parent"], {"sessionId": sid, "kind": "clone", "entryId": None})
        snapshot = self.ok("GET", f"/sessions/{frame['value']['session']['sessionId']}", **TAB2)
        self.assertEqual(len(snapshot["value"]["transcript"]), 4)

    def test_anotherPersonCannotFork(self) -> None:
        """
        Someone else cannot branch the session: it does not exist for them.
        """
        sid = self.source()
        self.refused("not_found", "POST", f"/sessions/{sid}/commands",
                     {"type": "fork", "requestId": "fork-1", "entryId": "aaaa0003"},
                     principal="bob")


class BranchTokenTests(RouteTestCase):
    """
    A branch starts with its source's delegation token.
    """

    harnessSettings = {"mcpUrl": "http://127.0.0.1:9/mcp"}

    def test_branchInheritsTheToken(self) -> None:
        """
        A fork asked for without a token can be prompted at once, without
        one: its source's token came with it; a session that never had one
        is refused C{delegation_required}, and so is the branch once a
        restart has forgotten its token.
        """
        frame = self.ok("POST", "/sessions", {"requestId": "create-1"}, token="tok-source-1", **TAB1)
        sid = frame["value"]["session"]["sessionId"]
        writePiFile(self.session(sid).directory, [
            HEADER, user("aaaa0001", None, 1, "first question"),
            assistant("aaaa0002", "aaaa0001", 2, [{"type": "text", "text": "first answer"}]),
        ])
        code, frame = self.call("POST", f"/sessions/{sid}/commands",
                                {"type": "clone", "requestId": "clone-1"}, **TAB2)
        self.assertEqual(code, 201, frame)
        branch = frame["value"]["session"]["sessionId"]
        code, frame = self.prompt(branch, "p1", "go on", **TAB2)
        self.assertEqual(code, 202, frame)
        self.assertEqual(frame["type"], "command.accepted")

        other = self.create("create-2", **TAB1)
        self.refused("delegation_required", "POST", f"/sessions/{other}/commands",
                     {"type": "prompt", "requestId": "p1", "text": "hi"}, **TAB1)
        self.h.restart()
        self.refused("delegation_required", "POST", f"/sessions/{branch}/commands",
                     {"type": "prompt", "requestId": "p2", "text": "hi"}, **TAB2)


class ChimeRefusalTests(RouteTestCase):
    """
    Chimes refused by the room's policy, or rejected by the driver.
    """

    def chime(self, sid: str, requestId: str, text: str = "CHIME-SECRET try red") -> dict[str, Any]:
        code, frame = self.call("POST", f"/sessions/{sid}/chimes",
                                {"requestId": requestId, "author": "Bea", "text": text},
                                principal="bea")
        self.assertEqual(code, 202, frame)
        return frame

    def policy(self, sid: str, policy: str) -> None:
        self.ok("POST", f"/sessions/{sid}/commands",
                {"type": "set_room_policy", "requestId": "pol-" + policy, "policy": policy}, **TAB1)

    def assertRefusedBy(self, policy: str) -> None:
        sid = self.create(**TAB1)
        self.policy(sid, policy)
        frame = self.chime(sid, "ch-1")
        self.assertEqual(frame["type"], "chime.rejected")
        self.assertEqual(frame["value"]["chime"]["status"], "rejected")
        self.assertIn(policy, frame["value"]["reason"])
        snapshot = self.ok("GET", f"/sessions/{sid}", **TAB1)["value"]
        self.assertEqual(snapshot["chimes"], [])
        self.assertEqual(snapshot["commands"], [])
        resolved = [e["data"] for e in self.events(sid, **TAB1) if e["type"].startswith("chime.")]
        self.assertEqual(resolved, [{"chimeId": frame["value"]["chime"]["chimeId"],
                                     "status": "rejected", "reason": policy}])
        self.assertNotIn("CHIME-SECRET", json.dumps(self.events(sid, **TAB1)))
        # A retry replays the refusal; it does not pass now.
        code, again = self.call("POST", f"/sessions/{sid}/chimes",
                                {"requestId": "ch-1", "author": "Bea",
                                 "text": "CHIME-SECRET try red"}, principal="bea")
        self.assertEqual(again["type"], "chime.rejected")
        self.assertTrue(again.get("replayed"))

    def test_muteRejects(self) -> None:
        """
        Under C{mute} a chime is refused (C{chime.rejected}), held nowhere.
        """
        self.assertRefusedBy("mute")

    def test_observeRejects(self) -> None:
        """
        Under C{observe} a chime is refused (C{chime.rejected}), held nowhere.
        """
        self.assertRefusedBy("observe")

    def test_rejectPending(self) -> None:
        """
        The driver's C{reject_chime} turns a pending chime down: no
        command, C{chime.resolved} names who declined it, it is no longer
        pending (not even after a restart), and it cannot be accepted.
        """
        sid = self.create(**TAB1)
        chimeId = self.chime(sid, "ch-1")["value"]["chime"]["chimeId"]
        frame = self.ok("POST", f"/sessions/{sid}/commands",
                        {"type": "reject_chime", "requestId": "rej-1", "chimeId": chimeId}, **TAB1)
        self.assertEqual(frame["type"], "chime.rejected")
        self.assertEqual(frame["value"]["chime"]["status"], "rejected")
        self.assertNotIn("text", frame["value"]["chime"])
        resolved = [e["data"] for e in self.events(sid, **TAB1) if e["type"] == "chime.resolved"]
        self.assertEqual(resolved, [{"chimeId": chimeId, "status": "rejected",
                                     "by": {"principal": "alice", "clientId": "tab-1"}}])
        snapshot = self.ok("GET", f"/sessions/{sid}", **TAB1)["value"]
        self.assertEqual(snapshot["chimes"], [])
        self.assertEqual(snapshot["commands"], [])
        self.refused("chime_not_pending", "POST", f"/sessions/{sid}/commands",
                     {"type": "accept_chime", "requestId": "acc-1", "chimeId": chimeId}, **TAB1)
        self.h.restart()
        self.assertEqual(self.ok("GET", f"/sessions/{sid}", **TAB1)["value"]["chimes"], [])
        self.refused("chime_not_pending", "POST", f"/sessions/{sid}/commands",
                     {"type": "accept_chime", "requestId": "acc-2", "chimeId": chimeId}, **TAB1)


class BudgetDefaultTests(SynchronousTestCase):
    """
    The run budget's defaults come from the environment.
    """

    def settings(self, **env: str) -> Settings:
        return Settings.fromEnvironment(
            {"MNEMOSYNE_INTERNAL_SERVICE_SECRET": SECRET, **env},
            listen="tcp:0:interface=127.0.0.1", dataDir=self.mktemp(),
        )

    def test_defaults(self) -> None:
        """
        Unset (or empty), the budget is 12 turns and $0.25.
        """
        for env in ({}, {"VEHICLE_MAX_TURNS": "", "VEHICLE_MAX_COST_USD": ""}):
            settings = self.settings(**env)
            self.assertEqual((settings.maxTurns, settings.maxCostUsd), (12, 0.25))

    def test_fromTheEnvironmentToTheBody(self) -> None:
        """
        C{VEHICLE_MAX_TURNS} and C{VEHICLE_MAX_COST_USD} become every new
        session's budget (in its summary and its body's boot config); a
        session's own C{budget} overrides either.
        """
        settings = self.settings(VEHICLE_MAX_TURNS="5", VEHICLE_MAX_COST_USD="0.5")
        self.assertEqual((settings.maxTurns, settings.maxCostUsd), (5, 0.5))
        h = Harness(self, maxTurns=settings.maxTurns, maxCostUsd=settings.maxCostUsd)
        self.addCleanup(h.stop)
        budgets: list[dict[str, Any]] = []
        spawn = h.launcher.spawn

        def recording(protocol: Any, **kw: Any) -> Any:
            budgets.append(toObject(kw["budget"]))
            return spawn(protocol, **kw)

        h.launcher.spawn = recording  # type: ignore[method-assign]
        plain = h.create("create-1", client="tab-1")
        self.assertEqual(plain["budget"], {"maxTurns": 5, "maxCostUsd": 0.5})
        own = h.create("create-2", client="tab-1", budget={"maxTurns": 3})
        self.assertEqual(own["budget"], {"maxTurns": 3, "maxCostUsd": 0.5})
        code, frame = h.call("POST", f"/sessions/{plain['sessionId']}/commands",
                             {"type": "prompt", "requestId": "p1", "text": "hi"}, client="tab-1")
        self.assertEqual(code, 202, frame)
        self.assertEqual(budgets, [{"maxTurns": 5, "maxCostUsd": 0.5}])
        # What the body is booted with passes the launcher's own check.
        bootConfig(providers=MODELS["providers"], budget=fromJSON(budgets[0], RunBudget))

    def test_badValuesRefused(self) -> None:
        """
        A budget variable that is not a number, or out of range, stops the
        host from starting.
        """
        for name, raw in [("VEHICLE_MAX_TURNS", "0"), ("VEHICLE_MAX_TURNS", "-3"),
                          ("VEHICLE_MAX_TURNS", "1.5"), ("VEHICLE_MAX_TURNS", "many"),
                          ("VEHICLE_MAX_COST_USD", "-0.01"), ("VEHICLE_MAX_COST_USD", "cheap")]:
            self.assertRaises(SettingsError, self.settings, **{name: raw})

    def test_acceptedCostBootsABody(self) -> None:
        """
        Every C{VEHICLE_MAX_COST_USD} the host accepts is one a body can be
        booted with.
        """
        for raw in ("nan", "inf", "0"):
            try:
                settings = self.settings(VEHICLE_MAX_COST_USD=raw)
            except SettingsError:
                continue
            bootConfig(providers=MODELS["providers"],
                       budget=RunBudget(maxTurns=12, maxCostUsd=settings.maxCostUsd))


    def test_acceptedSessionBudgetBootsABody(self) -> None:
        """
        A per-session C{budget} the create route accepts is one a body can
        be booted with.
        """
        h = Harness(self)
        self.addCleanup(h.stop)
        code, frame = h.call("POST", "/sessions",
                             {"requestId": "c1", "budget": {"maxCostUsd": 0}}, client="tab-1")
        if code != 201:
            # Refused as a request: the rule holds (and says so).
            self.assertEqual(frame["code"], "invalid_request", frame)
            return
        budget = frame["value"]["session"]["budget"]
        bootConfig(providers=MODELS["providers"], budget=fromJSON(budget, RunBudget))
