"""
Tests for chat spares made for a new session's id (L{vehicle.body.ChatSpares}
with C{reserve}, L{vehicle.body.SpareHolds}): the folders of that session's
conversation made where it will keep them, pi switched to a new file there
while the spare waits, the spare held for the session made with it, its
folders moved into that session's, and the hand-off without a switch (the
session's facts given by the extension's command).
"""

from __future__ import annotations

import json
import os
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from twisted.internet.defer import Deferred
from twisted.trial.unittest import SynchronousTestCase

from vehicle.body import PRIMING_FOLDER, PRIMING_PROMPT, ChatSpares, SpareHolds
from vehicle.body._conductor import Conductor
from vehicle.body._picommand import sessionFacts
from vehicle.body._sessionfile import newSessionFile
from vehicle.body._spare import HAND_OFF_COMMAND, Spare
from vehicle.body._spares import PREPARE
from vehicle.body._spawner import BodyPaths
from vehicle.box._proxy import _PROXIES
from vehicle.errors import VehicleError
from vehicle.protocol import (
    Answer, ClaimRequest, CommandRequest, RunBudget, SessionCreated, fromRequest, toObject,
)
from vehicle.session import SessionMeta, isoTimestamp

from tests.support.crashdriver import sendCut
from tests.support.fakepi import STATE
from tests.support.harness import MODELS, FakePiTransport, Harness
from tests.support.pirecords import answer, exited, kinds, record
from tests.support.sparepool import ALICE, MODEL, PoolTestCase, RefusingSource


class ReservingTestCase(PoolTestCase):
    """
    A pool whose spares are each made for a new session's id, and the
    holds that keep one for the session made with it.
    """

    def setUp(self) -> None:
        self.ids: list[str] = []
        super().setUp()
        # The hold is the default one (ten minutes).
        self.holds = SpareHolds(pool=self.pool, clock=self.clock)

    def newId(self) -> str:
        sessionId = "s" + f"{len(self.ids) + 1:032x}"
        self.ids.append(sessionId)
        return sessionId

    def kindSettings(self) -> dict[str, Any]:
        return {"reserve": (self.newId, lambda s: self.dataDir.sessionDir(s))}

    def switchRequest(self, transport: FakePiTransport) -> dict[str, Any]:
        return [r for r in transport.written if r["type"] == "switch_session"][-1]

    def prepared(self, index: int = -1) -> tuple[FakePiTransport, Spare]:
        """
        The newest spare primed and switched to its session's new file.
        """
        transport = self.readyOne(index)
        answer(transport, "switch_session", {"cancelled": False})
        [spare] = [s for s in self.pool.ready if s.protocol.transport is transport]
        return transport, spare

    def made(self, sessionId: str, budget: RunBudget | None = None) -> Any:
        """
        A chat session made with id C{sessionId}, as a create makes it with
        the spare held for it (its folders moved in).
        """
        meta = SessionMeta(
            sessionId=sessionId, graphId=ALICE.graphId or "", principal=ALICE.principal,
            role=ALICE.role, model=MODEL, createdAt=isoTimestamp(self.clock.seconds()),
            budget=budget or RunBudget(maxTurns=5, maxCostUsd=0.5),
        )

        def moveIn(made: str, building: Path) -> dict[str, Any]:
            self.holds.moveIn(made, building)
            return {}

        session, _ = self.successResultOf(self.registry.maker.create(
            ALICE, meta, requestId="create-1", raw={"requestId": "create-1"},
            answerFor=lambda made: Answer(type="session.created", value=SessionCreated(
                session=made.summary(), clientId=ALICE.clientId, holdsLease=True,
            )),
            title=None, claim=True, makeFolders=moveIn,
        ))
        return session


class MakingTests(ReservingTestCase):
    """
    A spare made for a new session's id is switched, once primed, to a new
    file where that session will keep its conversation.
    """

    def test_switchedToItsSessionsFile(self) -> None:
        """
        The session's conversation folders are made (private) in the data
        dir; after the priming pi is switched to a new file there holding
        only a header whose cwd is the session's working folder; the
        extension's question on the way is answered with no facts; the
        spare is ready once pi has switched, not before.
        """
        self.pool.start()
        [sessionId] = self.ids
        folder = self.dataDir.sessionDir(sessionId)
        for made in (folder, folder / "pi", folder / "work"):
            self.assertEqual(os.stat(made).st_mode & 0o777, 0o700)
        transport = self.readyOne()
        self.assertEqual(kinds(transport)[-1], "switch_session")
        path = Path(self.switchRequest(transport)["sessionPath"])
        self.assertEqual(path.parent, folder / "pi")
        [line] = path.read_text().splitlines()
        header = json.loads(line)
        self.assertEqual((header["type"], header["cwd"]), ("session", str(folder / "work")))
        record(transport, {"type": "extension_ui_request", "id": "f1", "method": "input",
                           "title": "sophia.session"})
        record(transport, {"type": "extension_ui_request", "id": "t1", "method": "input",
                           "title": "sophia.delegated-token"})
        record(transport, {"type": "extension_ui_request", "id": "t2", "method": "input",
                           "title": "sophia.token"})
        for method in ("confirm", "select"):
            record(transport, {"type": "extension_ui_request", "id": method, "method": method,
                               "title": "sophia.session"})
        answers = [r for r in transport.written if r["type"] == "extension_ui_response"]
        self.assertEqual(answers, [
            {"type": "extension_ui_response", "id": "f1", "value": PREPARE},
            {"type": "extension_ui_response", "id": "t1", "cancelled": True},
            {"type": "extension_ui_response", "id": "t2", "cancelled": True},
            {"type": "extension_ui_response", "id": "confirm", "cancelled": True},
            {"type": "extension_ui_response", "id": "select", "cancelled": True},
        ])
        self.assertEqual(json.loads(PREPARE), {"prepare": True})
        self.assertEqual(self.pool.ready, [])
        answer(transport, "switch_session", {"cancelled": False})
        [spare] = self.pool.ready
        self.assertEqual((spare.sessionId, spare.prepared), (sessionId, path))
        self.assertEqual(spare.preparedFor(sessionId), path)
        self.assertEqual(spare.preparedFor("".join(list(sessionId))), path)  # equal, not the same
        self.assertIsNone(spare.preparedFor("s" + "f" * 32))
        # Once switched, a question for facts is refused again.
        record(transport, {"type": "extension_ui_request", "id": "f2", "method": "input",
                           "title": "sophia.session"})
        self.assertEqual(transport.written[-1],
                         {"type": "extension_ui_response", "id": "f2", "cancelled": True})

    def test_refusedSwitch(self) -> None:
        """
        A spare whose pi refuses its session's file is not made: it ends,
        and the folder made for its session goes with it.
        """
        self.pool.start()
        [sessionId] = self.ids
        transport = self.readyOne()
        answer(transport, "switch_session", {"cancelled": True})
        self.assertEqual(self.pool.ready, [])
        self.assertIn(0, transport.closed)
        exited(transport, 0)
        self.assertFalse(self.dataDir.sessionDir(sessionId).exists())

    def test_anythingButFalseIsARefusal(self) -> None:
        """
        pi's answer must say the switch was not cancelled, in so many
        words: anything else is a refusal.
        """
        self.pool.start()
        transport = self.readyOne()
        answer(transport, "switch_session", {"cancelled": 0})
        self.assertEqual(self.pool.ready, [])
        self.assertIn(0, transport.closed)

    def test_noProxyNoFolder(self) -> None:
        """
        A spare whose proxy cannot open leaves no folder for its session.
        """
        async def refuse(spareId: str) -> Any:
            raise OSError("no socket")

        kind = ChatSpares(root=lambda: self.root, openProxy=refuse,
                          reserve=(self.newId, lambda s: self.dataDir.sessionDir(s)))
        failure = self.failureResultOf(Deferred.fromCoroutine(kind.setUp("spare-x")), OSError)
        self.assertEqual(str(failure.value), "no socket")
        self.assertEqual(len(self.ids), 1)
        self.assertFalse(self.dataDir.sessionDir(self.ids[0]).exists())

    OWN = "2026-12-02T00-00-00-000Z_spare.jsonl"

    def primed(self, own: Path) -> FakePiTransport:
        """
        The newest spare, whose pi names C{own} its own session's file,
        primed (its switch to its session's file asked, not answered).
        """
        transport = self.launcher.spawned[-1]
        answer(transport, "get_state", {**STATE, "sessionFile": str(own)})
        answer(transport, "prompt", {"disposition": "started"})
        record(transport, {"type": "agent_settled", "aborted": False})
        return transport

    def test_ownFileGoes(self) -> None:
        """
        A spare whose own session's file is in its session's pi folder (an
        agent's, whose box binds its folders there) lets go of it once pi
        is switched to the session's new file.
        """
        self.pool.start()
        own = self.dataDir.sessionDir(self.ids[-1]) / "pi" / self.OWN
        own.write_text("{}\n")
        transport = self.primed(own)
        self.assertTrue(own.exists())
        answer(transport, "switch_session", {"cancelled": False})
        self.assertFalse(own.exists())
        self.assertEqual(len(self.pool.ready), 1)

    def test_ownFileElsewhereStays(self) -> None:
        """
        A chat spare's own session file is in its own folder: the one of the
        same name in its session's pi folder is not touched, whichever
        folder pi named (one sorting after the pi folder, or before).
        """
        for neighbour in ("pi2", "pa"):
            self.pool = self.makePool()
            self.pool.start()
            session = self.dataDir.sessionDir(self.ids[-1])
            (session / "pi" / self.OWN).write_text("{}\n")
            transport = self.primed(session / neighbour / self.OWN)
            answer(transport, "switch_session", {"cancelled": False})
            self.assertEqual(len(self.pool.ready), 1, neighbour)
            self.assertTrue((session / "pi" / self.OWN).exists(), neighbour)

    def test_ownFileNeverWritten(self) -> None:
        """
        An unprimed spare's own session has no file yet (pi writes one only
        once someone speaks): there is nothing to let go of.
        """
        self.prime = False
        self.pool = self.makePool()
        self.pool.start()
        [sessionId] = self.ids
        transport = self.launcher.spawned[-1]
        answer(transport, "get_state", {**STATE, "sessionFile": str(
            self.dataDir.sessionDir(sessionId) / "pi" / self.OWN)})
        answer(transport, "switch_session", {"cancelled": False})
        self.assertEqual(len(self.pool.ready), 1)

    def test_endedUnused(self) -> None:
        """
        A ready spare the host stops with takes its session's folder with
        it; a folder that became a session's (its meta written) stays.
        """
        self.size = 2
        self.pool = self.makePool()
        self.pool.start()
        first, _ = self.prepared(0)
        second, _ = self.prepared(1)
        kept = self.dataDir.sessionDir(self.ids[1])
        (kept / "meta.json").write_text("{}")
        self.pool.stop()
        for transport in (first, second):
            exited(transport, 0)
        self.assertFalse(self.dataDir.sessionDir(self.ids[0]).exists())
        self.assertTrue(kept.is_dir())


class HoldsTests(ReservingTestCase):
    """
    A spare taken for a session being made: its id the session's, its
    folders moved into the session's folder, held for its first command.
    """

    def test_reserveAndMoveIn(self) -> None:
        """
        The id the session must have is the spare's; making the session
        moves the spare's conversation folders into its own (pi's file
        with them), and the spare is held for it.
        """
        self.pool.start()
        _, spare = self.prepared()
        sessionId = self.holds.reserve(MODEL)
        self.assertEqual(sessionId, spare.sessionId)
        self.assertEqual(self.pool.ready, [])
        assert sessionId is not None and spare.prepared is not None
        session = self.made(sessionId)
        self.assertTrue(spare.claimed)
        self.assertEqual(session.directory, spare.prepared.parent.parent)
        self.assertTrue(spare.prepared.is_file())
        self.assertTrue((session.directory / "meta.json").is_file())
        self.assertIs(self.holds.held[sessionId], spare)
        self.assertIsNone(session.meta.folders)

    def test_movedInBeforePublication(self) -> None:
        """
        The folders move into the folder being built, and the one made for
        the session goes, before the session is published; an id no spare
        is held for moves nothing.
        """
        self.pool.start()
        _, spare = self.prepared()
        sessionId = self.holds.reserve(MODEL)
        assert sessionId is not None and spare.prepared is not None
        building = self.dataDir.buildingDir(sessionId)
        for name in ("pi", "work"):
            (building / name).mkdir(parents=True)
        self.holds.moveIn("s" + "e" * 32, building)
        self.assertFalse(spare.claimed)
        self.holds.moveIn(sessionId, building)
        self.assertTrue((building / "pi" / spare.prepared.name).is_file())
        self.assertTrue((building / "work").is_dir())
        self.assertFalse(self.dataDir.sessionDir(sessionId).exists())

    def test_notPreparedNotHeld(self) -> None:
        """
        A spare that is not on its session's file is not held: it ends.
        """
        self.pool.start()
        transport, spare = self.prepared()
        spare.prepared = None
        self.assertIsNone(self.holds.reserve(MODEL))
        self.assertIn(0, transport.closed)

    def test_noneReady(self) -> None:
        self.pool.start()
        self.assertIsNone(self.holds.reserve(MODEL))
        self.prepared()
        self.assertIsNone(self.holds.reserve("scripted/other-1"))
        self.assertEqual(len(self.pool.ready), 1)

    def test_unreserveUnmade(self) -> None:
        """
        A held spare whose session was not made ends, and its folder goes.
        """
        self.pool.start()
        transport, spare = self.prepared()
        sessionId = self.holds.reserve(MODEL)
        assert sessionId is not None
        self.holds.unreserve(sessionId)
        self.assertIn(0, transport.closed)
        exited(transport, 0)
        self.assertEqual(self.holds.held, {})
        self.assertFalse(self.dataDir.sessionDir(sessionId).exists())

    def test_heldUntilItsTime(self) -> None:
        """
        A held spare waits its hold for the session's first command, then
        ends; the session made with it keeps its folders.
        """
        self.pool.start()
        transport, spare = self.prepared()
        sessionId = self.holds.reserve(MODEL)
        assert sessionId is not None
        session = self.made(sessionId)
        self.clock.advance(599)
        self.assertIn(sessionId, self.holds.held)
        self.clock.advance(1)
        self.assertEqual(self.holds.held, {})
        exited(transport, 0)
        self.assertTrue((session.directory / "pi" / spare.prepared.name).is_file())  # type: ignore[union-attr]

    def test_spareFor(self) -> None:
        """
        A session is given the spare held for it, once; another (revived)
        one any ready spare.
        """
        self.size = 2
        self.pool = self.makePool()
        self.holds = SpareHolds(pool=self.pool, clock=self.clock)
        self.pool.start()
        self.prepared(0)
        self.prepared(1)
        sessionId = self.holds.reserve(MODEL)
        assert sessionId is not None
        session = self.made(sessionId)
        other = self.session()
        held = self.successResultOf(self._spareFor(session))
        self.assertEqual(held.sessionId, sessionId)
        ready = self.successResultOf(self._spareFor(other))
        self.assertNotEqual(ready.sessionId, sessionId)
        self.assertIsNone(self.successResultOf(self._spareFor(session)))

    def _spareFor(self, session: Any) -> Any:
        return Deferred.fromCoroutine(self.holds.spareFor(session))

    def test_stop(self) -> None:
        """
        The host's stop ends the pool's spares and the held ones.
        """
        self.size = 2
        self.pool = self.makePool()
        self.holds = SpareHolds(pool=self.pool, clock=self.clock)
        self.pool.start()
        first, _ = self.prepared(0)
        second, _ = self.prepared(1)
        self.holds.reserve(MODEL)
        self.holds.stop()
        self.assertEqual(self.holds.held, {})
        for transport in (first, second):
            self.assertIn(0, transport.closed)


class HandOffTests(ReservingTestCase):
    """
    The spare held for a new session becomes its body without a switch:
    the session's facts are given by the extension's command.
    """

    def setUp(self) -> None:
        super().setUp()
        self.pool.start()
        self.spareTransport, self.spare = self.prepared()
        sessionId = self.holds.reserve(MODEL)
        assert sessionId is not None
        self.sessionUnderTest = self.made(sessionId, RunBudget(maxTurns=5, maxCostUsd=0.5))
        self.conductor = Conductor(session=self.sessionUnderTest, launcher=self.launcher,
                                   clock=self.clock, spares=self.holds)
        self.sessionUnderTest.conductor = self.conductor
        self.seen: list[dict[str, Any]] = []
        self.sessionUnderTest.feed.subscribe(lambda e: self.seen.append(toObject(e)))

    def prompt(self) -> None:
        self.sessionUnderTest.command(
            ALICE, fromRequest({"type": "prompt", "requestId": "p1", "text": "hello"},
                               CommandRequest)
        )

    def handOff(self) -> dict[str, Any]:
        switches = kinds(self.spareTransport).count("switch_session")
        self.prompt()
        self.assertEqual(kinds(self.spareTransport).count("switch_session"), switches)
        return self.spareTransport.written[-1]

    def test_theFactsCommand(self) -> None:
        """
        The first command hands the spare over with the extension's
        command carrying the session's facts, then asks pi its state; the
        prompt follows once pi is on the session's file.
        """
        sent = self.handOff()
        self.assertEqual(sent["type"], "prompt")
        facts = sessionFacts(budget=RunBudget(maxTurns=5, maxCostUsd=0.5))
        self.assertEqual(sent["message"], f"{HAND_OFF_COMMAND} {facts}")
        self.assertEqual(self.proxies[0].handed, [self.sessionUnderTest])
        answer(self.spareTransport, "prompt", {"disposition": "handled"})
        self.assertEqual(kinds(self.spareTransport)[-1], "get_state")
        answer(self.spareTransport, "get_state",
               {**STATE, "sessionFile": str(self.spare.prepared)})
        self.assertEqual(self.spareTransport.written[-1]["message"], "hello")
        self.assertEqual(self.conductor.state, "live")
        self.assertEqual(len(self.launcher.spawned), 1)
        self.assertEqual([e["type"] for e in self.seen if e["type"] == "session.revived"], [])

    def test_refusedCommand(self) -> None:
        """
        When the extension refuses the facts, the spare is let go and a
        body is started for the session on its file, as with no spare.
        """
        self.handOff()
        record(self.spareTransport, {"type": "extension_error",
                                     "extensionPath": "command:sophia-session",
                                     "event": "command", "error": "no budget"})
        answer(self.spareTransport, "prompt", {"disposition": "handled"})
        self.assertIn(0, self.spareTransport.closed)
        exited(self.spareTransport, 0)
        self.assertEqual(len(self.launcher.spawned), 2)

    def test_anotherCommandsError(self) -> None:
        """
        An error of another extension command on the way is not the hand-off
        refused.
        """
        self.handOff()
        for path in ("command:sophia-sessions", "command:aaa"):
            record(self.spareTransport, {"type": "extension_error", "extensionPath": path,
                                         "event": "command", "error": "not ours"})
        # Nor anything else that names the command.
        for kind in ("extension_ui_request", "agent_end"):
            record(self.spareTransport, {"type": kind, "extensionPath": "command:sophia-session",
                                         "error": "not an error"})
        answer(self.spareTransport, "prompt", {"disposition": "handled"})
        answer(self.spareTransport, "get_state",
               {**STATE, "sessionFile": str(self.spare.prepared)})
        self.assertEqual(self.conductor.state, "live")
        self.assertEqual(len(self.launcher.spawned), 1)

    def test_notOnItsFile(self) -> None:
        """
        pi on another file than the one it was switched to is no body of
        the session's: it is let go.
        """
        self.handOff()
        answer(self.spareTransport, "prompt", {"disposition": "handled"})
        answer(self.spareTransport, "get_state", {**STATE, "sessionFile": "/elsewhere.jsonl"})
        self.assertIn(0, self.spareTransport.closed)
        self.assertEqual(len(self.launcher.spawned), 2)


class AheadTests(ReservingTestCase):
    """
    A dormant session claimed takes a ready spare at once, switched to its
    conversation's file while its driver types (L{BodyLife.ahead}): the
    next command hands it over with the session's facts, no switch on its
    way.
    """

    idle = 300.0

    def setUp(self) -> None:
        super().setUp()
        self.pool.start()
        self.spareTransport, self.spare = self.prepared()
        self.sessionUnderTest = self.made(self.newId())
        self.conductor = Conductor(session=self.sessionUnderTest, launcher=self.launcher,
                                   clock=self.clock, spares=self.holds, idleSeconds=self.idle)
        self.sessionUnderTest.conductor = self.conductor
        self.seen: list[dict[str, Any]] = []
        self.sessionUnderTest.feed.subscribe(lambda e: self.seen.append(toObject(e)))
        self.requests = 0

    def conversation(self) -> Path:
        """
        pi's file of an earlier body: its header and one message.
        """
        paths = BodyPaths.forSession(self.sessionUnderTest.directory)
        paths.prepareConversation()
        made = newSessionFile(paths.piDir, sessionId="pi-1",
                              now=datetime.fromtimestamp(self.clock.seconds(), timezone.utc),
                              cwd=paths.workDir)
        with made.open("ab") as f:
            f.write(b'{"type":"message","id":"m1","message":{"role":"user","content":"hi"}}\n')
        return made

    def claim(self) -> dict[str, Any]:
        self.requests += 1
        sent = self.successResultOf(self.sessionUnderTest.claim(
            ALICE, fromRequest({"requestId": f"c{self.requests}"}, ClaimRequest), 3_600_000,
        ))
        return sent

    def prompt(self) -> None:
        self.sessionUnderTest.command(
            ALICE, fromRequest({"type": "prompt", "requestId": "p1", "text": "hello"},
                               CommandRequest)
        )

    def switches(self) -> list[dict[str, Any]]:
        return [r for r in self.spareTransport.written if r["type"] == "switch_session"]

    def test_switchedAheadThenHanded(self) -> None:
        """
        The claim's answer goes out at once; the spare is switched to the
        conversation's file (the extension told no facts yet), and the
        prompt hands it over with the facts command alone; the session is
        revived from that file, on the spare's process.
        """
        conversation = self.conversation()
        before = len(self.switches())
        self.assertEqual(self.claim()["type"], "driver.claimed")
        self.assertEqual(self.pool.ready, [])
        [switch] = self.switches()[before:]
        self.assertEqual(switch["sessionPath"], str(conversation))
        record(self.spareTransport, {"type": "extension_ui_request", "id": "q1",
                                     "method": "input", "title": "sophia.session"})
        self.assertEqual(self.spareTransport.written[-1]["value"], PREPARE)
        answer(self.spareTransport, "switch_session", {"cancelled": False})
        # Nothing told: the body is the command's to materialize.
        self.assertNotIn("body.materialized", [e["type"] for e in self.seen])
        self.assertEqual(self.conductor.state, "dormant")
        self.assertTrue(self.conductor.startedAhead())

        self.prompt()
        self.assertEqual(len(self.switches()), before + 1)
        sent = self.spareTransport.written[-1]
        self.assertEqual(sent["message"].split(" ", 1)[0], HAND_OFF_COMMAND)
        self.assertEqual(self.proxies[0].handed, [self.sessionUnderTest])
        answer(self.spareTransport, "prompt", {"disposition": "handled"})
        answer(self.spareTransport, "get_state",
               {**STATE, "sessionFile": str(conversation), "messageCount": 1})
        self.assertEqual(self.spareTransport.written[-1]["message"], "hello")
        self.assertEqual(self.conductor.state, "live")
        self.assertEqual(len(self.launcher.spawned), 1)
        types = [e["type"] for e in self.seen]
        self.assertEqual(types.count("body.materialized"), 1)
        [revived] = [e for e in self.seen if e["type"] == "session.revived"]
        self.assertEqual(revived["data"], {"messageCount": 1})
        # The folder made for the session the spare was first made for goes.
        self.assertEqual(sorted(p.name for p in self.dataDir.sessionDir(self.ids[0]).parent.iterdir()),
                         [self.sessionUnderTest.sessionId])

    def test_promptWhileSwitching(self) -> None:
        """
        A command that comes before the switch is answered waits for it,
        and switches no more.
        """
        conversation = self.conversation()
        before = len(self.switches())
        self.claim()
        self.prompt()
        self.assertEqual(kinds(self.spareTransport)[-1], "switch_session")
        answer(self.spareTransport, "switch_session", {"cancelled": False})
        self.assertEqual(len(self.switches()), before + 1)
        self.assertEqual(self.spareTransport.written[-1]["message"].split(" ", 1)[0],
                         HAND_OFF_COMMAND)
        answer(self.spareTransport, "prompt", {"disposition": "handled"})
        answer(self.spareTransport, "get_state", {**STATE, "sessionFile": str(conversation)})
        self.assertEqual(self.spareTransport.written[-1]["message"], "hello")
        self.assertEqual(self.conductor.state, "live")

    def test_nothingToRevive(self) -> None:
        """
        A session with no conversation yet takes no spare at its claim
        (its first command does, as before).
        """
        self.claim()
        self.assertEqual(self.pool.ready, [self.spare])
        BodyPaths.forSession(self.sessionUnderTest.directory).prepareConversation()
        newSessionFile(BodyPaths.forSession(self.sessionUnderTest.directory).piDir,
                       sessionId="pi-0", now=datetime.now(timezone.utc),
                       cwd=self.sessionUnderTest.directory)
        self.claim()
        self.assertEqual(self.pool.ready, [self.spare])

    def test_onceAClaim(self) -> None:
        """
        A claim renewed while a spare waits takes no other, nor does one
        while the body is live.
        """
        self.conversation()
        self.claim()
        answer(self.spareTransport, "switch_session", {"cancelled": False})
        self.clock.advance(self.pool.refillSeconds)
        self.prepared()
        self.claim()
        self.assertEqual(len(self.pool.ready), 1)
        self.prompt()
        answer(self.spareTransport, "prompt", {"disposition": "handled"})
        answer(self.spareTransport, "get_state", {**STATE, "sessionFile": str(self.spare.prepared)})
        self.assertEqual(self.conductor.state, "live")
        self.claim()
        self.assertEqual(len(self.pool.ready), 1)

    def test_notTakenInTime(self) -> None:
        """
        A spare no command took within a body's idle time ends (it holds
        the session's conversation: never returned); the next command
        starts its body as if there had been none.
        """
        self.conversation()
        self.claim()
        answer(self.spareTransport, "switch_session", {"cancelled": False})
        self.clock.advance(self.idle - 1)
        self.assertFalse(self.spareTransport.closed)
        self.clock.advance(1)
        self.assertIn(0, self.spareTransport.closed)
        exited(self.spareTransport, 0)
        self.assertFalse(self.spare.paths.piDir.parent.exists())
        written = len(self.spareTransport.written)
        self.prompt()
        # A body started for it (the next spare is not ready yet).
        self.assertEqual(len(self.launcher.spawned), 3)
        self.assertEqual(kinds(self.launcher.spawned[-1]), ["get_state"])
        self.assertEqual(len(self.spareTransport.written), written)

    def test_endedWhileWaiting(self) -> None:
        """
        A spare that ended while it waited is let go at the command, which
        takes another way.
        """
        self.conversation()
        self.claim()
        answer(self.spareTransport, "switch_session", {"cancelled": False})
        exited(self.spareTransport, 1)
        self.prompt()
        self.assertEqual(len(self.launcher.spawned), 2)
        self.assertNotIn(HAND_OFF_COMMAND, json.dumps(self.launcher.spawned[-1].written))

    def test_switchRefused(self) -> None:
        """
        A spare that refuses the file ends; nothing waits for it.
        """
        self.conversation()
        self.claim()
        answer(self.spareTransport, "switch_session", {"cancelled": True})
        self.assertIn(0, self.spareTransport.closed)
        self.assertFalse(self.conductor.startedAhead())
        self.prompt()
        self.assertEqual(len(self.launcher.spawned), 2)

    def test_disposed(self) -> None:
        """
        A shutdown (or a delete) while a spare waits ends it, even one still
        being switched.
        """
        self.conversation()
        self.claim()
        disposed = self.conductor.dispose("shutdown")
        self.assertFalse(self.spareTransport.closed)
        answer(self.spareTransport, "switch_session", {"cancelled": False})
        self.assertIn(0, self.spareTransport.closed)
        # Disposed once the spare is gone (the host's stop waits for it).
        self.assertNoResult(disposed)
        exited(self.spareTransport, 0)
        self.successResultOf(disposed)
        self.clock.advance(self.idle)

    def test_notWhenGoing(self) -> None:
        """
        A session closed (the host stopping), closing or deleted takes no
        spare when told it was claimed.
        """
        self.conversation()
        life = self.conductor.life
        for going in ("closed", "closing", "deleted"):
            if going == "closed":
                self.sessionUnderTest._journal.closed = True
            elif going == "closing":
                life.closing = True
            else:
                self.sessionUnderTest.deleted = True
            self.conductor.claimed()
            self.assertEqual(self.pool.ready, [self.spare], going)
            self.sessionUnderTest._journal.closed = life.closing = False
            self.sessionUnderTest.deleted = False
        self.conductor.claimed()
        self.assertEqual(self.pool.ready, [])

    def test_sourceFails(self) -> None:
        """
        A spare source that fails is logged, and the claim stands.
        """
        self.conductor.life.spares = RefusingSource(RuntimeError("the pool broke"))
        self.conversation()
        self.assertEqual(self.claim()["type"], "driver.claimed")
        self.assertEqual(len(self.flushLoggedErrors(RuntimeError)), 1)

    def test_noneReady(self) -> None:
        """
        A claim when no spare is ready takes none; the command starts the
        body as before, and nothing is logged.
        """
        self.conversation()
        self.assertIsNotNone(self.holds.reserve(MODEL))  # the only spare, taken
        self.claim()
        self.prompt()
        self.assertEqual(len(self.launcher.spawned), 2)
        self.assertEqual(kinds(self.launcher.spawned[-1]), ["get_state"])
        self.assertEqual(self.flushLoggedErrors(), [])

    def test_closingWhileSwitching(self) -> None:
        """
        A spare switched ahead that a command waits for, when the host
        began to stop meanwhile, ends instead of being handed over.
        """
        self.conversation()
        self.claim()
        self.prompt()
        self.conductor.close()
        answer(self.spareTransport, "switch_session", {"cancelled": False})
        self.assertIn(0, self.spareTransport.closed)
        self.assertNotIn(HAND_OFF_COMMAND, json.dumps(self.spareTransport.written))
        self.assertEqual(self.conductor.state, "dormant")

    def test_noKeyNoSpare(self) -> None:
        """
        A spare source that refuses the session now (a visitor's key not
        held) leaves the claim as it was.
        """
        self.conductor.life.spares = RefusingSource(
            VehicleError("model_key_required", "send your key")
        )
        self.conversation()
        self.assertEqual(self.claim()["type"], "driver.claimed")
        self.assertEqual(self.flushLoggedErrors(), [])
        self.assertEqual(self.pool.ready, [self.spare])


def readyChatSpare(host: Harness) -> Spare:
    """
    The host's newest chat spare, primed and switched to its session's file.
    """
    transport = host.launcher.spawned[-1]
    answer(transport, "get_state", STATE)
    answer(transport, "prompt", {"disposition": "started"})
    record(transport, {"type": "agent_settled", "aborted": False})
    answer(transport, "switch_session", {"cancelled": False})
    pool = host.host.bodies.spares
    assert pool is not None
    [spare] = pool.ready
    return spare


class ChatAheadTests(SynchronousTestCase):
    """
    A dormant chat conversation claimed when no spare is ready has its own
    body started at the claim, primed in a session of its own through a
    proxy of its own (the key never in its boot config), and switched to
    the conversation (L{vehicle.host.ChatAhead}).
    """

    def test_primedThroughItsProxy(self) -> None:
        root = Path(self.mktemp()).absolute()
        h = Harness(self, root, spareBodies=1, spareRefillMs=60000)
        self.addCleanup(h.stop)
        # The spare is still being made: the session is made without it.
        code, frame = h.call("POST", "/sessions", {"requestId": "c1"})
        self.assertEqual(code, 201, frame)
        sid = frame["value"]["session"]["sessionId"]
        session = h.api.registry.sessions[sid]
        paths = BodyPaths.forSession(session.directory)
        paths.prepareConversation()
        conversation = newSessionFile(paths.piDir, sessionId="pi-1",
                                      now=datetime.now(timezone.utc), cwd=paths.workDir)
        with conversation.open("ab") as f:
            f.write(b'{"type":"message","id":"m1","message":{"role":"user","content":"hi"}}\n')
        # As many may wait at once as the host keeps chat spares, whichever
        # session's.
        places = session.conductor.life.places
        self.assertEqual(places.limit, 1)
        code, frame = h.call("POST", "/sessions", {"requestId": "c3"})
        other = h.api.registry.sessions[frame["value"]["session"]["sessionId"]]
        self.assertIs(other.conductor.life.places, places)
        spawned = len(h.launcher.spawned)
        code, frame = h.call("POST", f"/sessions/{sid}/claim", {"requestId": "c2"})
        self.assertEqual(code, 200, frame)
        self.assertEqual(len(h.launcher.spawned), spawned + 1)
        asked = h.launcher.kwargs[-1]
        self.assertEqual(asked["freshIn"], paths.piDir / PRIMING_FOLDER)
        [provider] = asked["providers"].values()
        self.assertNotEqual(provider["apiKey"], MODELS["providers"]["scripted"]["apiKey"])
        self.assertEqual(asked["bootExtra"]["bridge"]["port"], 0)
        [proxy] = [p for p in _PROXIES if p.token == provider["apiKey"]]
        self.assertIsNone(proxy.model)
        transport = h.launcher.spawned[-1]
        answer(transport, "get_state", STATE)
        self.assertEqual(transport.written[-1]["message"], PRIMING_PROMPT)
        answer(transport, "prompt", {"disposition": "started"})
        record(transport, {"type": "agent_settled", "aborted": False})
        self.assertEqual(transport.written[-1]["sessionPath"], str(conversation))
        answer(transport, "switch_session", {"cancelled": False})
        answer(transport, "get_state", {**STATE, "sessionFile": str(conversation)})
        self.assertFalse((paths.piDir / PRIMING_FOLDER).exists())
        self.assertIsNone(proxy.model)
        self.assertEqual(h.host.sample().ahead, 1)
        code, frame = h.call("POST", f"/sessions/{sid}/commands",
                             {"type": "prompt", "requestId": "p1", "text": "hello"})
        self.assertEqual(code, 202, frame)
        self.assertEqual(transport.written[-1]["message"], "hello")
        assert proxy.model is not None
        self.assertEqual(proxy.model.key, MODELS["providers"]["scripted"]["apiKey"])
        sample = h.host.sample()
        self.assertEqual((sample.ahead, sample.bodies), (0, {"chat": 1}))

    def test_aHeldSpareIsCountedAhead(self) -> None:
        """
        A chat spare held for the new session made with it is counted among
        the bodies made ahead of a command, no longer among the ready spares.
        """
        h = Harness(self, Path(self.mktemp()).absolute(), spareBodies=1, spareRefillMs=60000)
        self.addCleanup(h.stop)
        readyChatSpare(h)
        sample = h.host.sample()
        self.assertEqual((sample.spares, sample.ahead), (1, 0))
        code, frame = h.call("POST", "/sessions", {"requestId": "c1"})
        self.assertEqual(code, 201, frame)
        sample = h.host.sample()
        self.assertEqual((sample.spares, sample.ahead, sample.bodies), (0, 1, {}))


class BranchTests(SynchronousTestCase):
    """
    A new session made with a spare has pi's file before anyone spoke: it
    is still a session with nothing said (nothing to fork or clone), as
    one made with no spare is.
    """

    def test_nothingToClone(self) -> None:
        root = Path(self.mktemp()).absolute()
        h = Harness(self, root, spareBodies=1, spareRefillMs=60000)
        self.addCleanup(h.stop)
        spare = readyChatSpare(h)
        code, frame = h.call("POST", "/sessions", {"requestId": "c1"})
        self.assertEqual(code, 201, frame)
        sid = frame["value"]["session"]["sessionId"]
        self.assertEqual(sid, spare.sessionId)
        for kind, more in (("clone", {}), ("fork", {"entryId": "e1"})):
            code, frame = h.call("POST", f"/sessions/{sid}/commands",
                                 {"type": kind, "requestId": kind, **more})
            self.assertEqual((code, frame["code"]), (409, "nothing_to_fork"), frame)


class CrashTests(SynchronousTestCase):
    """
    A host killed at any durable write of a chat create that took a held
    spare (its folders moved into the session's folder being built, the
    session not yet published, or published) leaves the session whole or
    nothing of it: never a session without its conversation's folders.
    """

    def run_(self, cut: int | None) -> tuple[int, bool]:
        """
        Create a chat session on a held spare, killed after sync C{cut}
        (never, with L{None}); start a new host; check what it serves.

        @return: the syncs the create made, and whether the session exists.
        """
        root = Path(self.mktemp()).absolute()
        root.mkdir(parents=True)
        h = Harness(self, root, spareBodies=1, spareRefillMs=60000)
        spare = readyChatSpare(h)
        syncs = sendCut(self, h, ("POST", "/sessions", {"requestId": "c1"}, {}), cut)
        after = Harness(self, root, spareBodies=1, spareRefillMs=60000)
        self.addCleanup(after.stop)
        sessionId = str(spare.sessionId)
        served = list(after.api.registry.sessions)
        self.assertIn(served, ([], [sessionId]))
        made = served == [sessionId]
        if made:
            directory = after.api.registry.sessions[sessionId].directory
            self.assertTrue((directory / "work").is_dir())
            assert spare.prepared is not None
            self.assertTrue((directory / "pi" / spare.prepared.name).is_file())
            code, frame = after.call("POST", f"/sessions/{sessionId}/commands",
                                     {"type": "prompt", "requestId": "p1", "text": "hi"})
            self.assertEqual(code, 202, frame)
        else:
            # Nothing of it is left: the spare's folder for it is no session.
            self.assertFalse((root / "sessions" / sessionId).exists())
            self.assertFalse((root / "trash").exists() and os.listdir(root / "trash"))
        return syncs, made

    def test_everyCut(self) -> None:
        syncs, made = self.run_(None)
        self.assertTrue(made)
        outcomes = [self.run_(k)[1] for k in range(1, syncs + 1)]
        self.assertIn(False, outcomes)
        self.assertTrue(outcomes[-1])
