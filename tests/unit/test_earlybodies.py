"""
Tests for a session's own body started at its driver's claim when no spare
can serve it (L{vehicle.body._early.Early}, L{vehicle.body._life.BodyLife.ahead}
with C{places}): pi boots while the person types, heard by no one until
the command adopts it, and ends if none comes.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from twisted.internet.defer import Deferred
from twisted.internet.testing import MemoryReactorClock
from twisted.logger import globalLogPublisher
from twisted.trial.unittest import SynchronousTestCase
from zope.interface.verify import verifyObject

from vehicle.body._conductor import Conductor
from vehicle.body._early import HELD_RECORDS, Early, Places, primingFolder
from vehicle.body._rpc import IBodySink
from vehicle.body._spares import PRIMING_PROMPT
from vehicle.body._life import HostClosing
from vehicle.body._spawner import BodyPlan
from vehicle.errors import VehicleError
from vehicle.protocol import ClaimRequest, fromRequest
from vehicle.session import Registry
from vehicle.store import DataDir

from tests.support._hints import assertAnnotationsResolve
from tests.support.conductor import ALICE, ConductorTestCase
from tests.support.fakepi import STATE
from tests.support.harness import newSession
from tests.support.pifiles import HEADER, user, writePiFile
from tests.support.pirecords import exited
from tests.support.sparepool import RefusingSource


class EmptySource:
    """
    A spare source with no spare for anyone (none ready, another model).
    """

    def __init__(self) -> None:
        self.asked = 0

    async def spareFor(self, session: Any) -> None:
        self.asked += 1
        return None


class EarlyTestCase(ConductorTestCase):
    """
    A session with a conversation pi kept, whose conductor starts its body
    at a claim; its plan's clean-ups counted.
    """

    idleSeconds = 300.0

    def setUp(self) -> None:
        super().setUp()
        self.life = self.conductor.life
        self.life.places = Places(limit=10)
        self.cleaned: list[BodyPlan] = []
        self.plans: list[BodyPlan] = []
        self.life.planner = self.plan
        (self.session.directory / "pi").mkdir(exist_ok=True)
        writePiFile(self.session.directory, [HEADER, user("u1", None, 1, "hi")])
        self.claims = 0

    async def plan(self, session: Any) -> BodyPlan:
        plan = BodyPlan(box="test", cleanup=lambda: self.cleaned.append(plan))
        self.plans.append(plan)
        return plan

    def claim(self) -> dict[str, Any]:
        self.claims += 1
        sent = self.successResultOf(self.session.claim(
            ALICE, fromRequest({"requestId": f"c{self.claims}"}, ClaimRequest), 3_600_000,
        ))
        self.assertEqual(sent["type"], "driver.claimed")
        return sent

    def types(self) -> list[str]:
        return [e["type"] for e in self.seen]

    def started(self) -> None:
        """
        Claimed, and the body started for it has told its state.
        """
        self.claim()
        self.pi.answer("get_state", {**STATE, "messageCount": 1})


class StartedTests(EarlyTestCase):
    """
    A claim of a dormant conversation starts its body; the command adopts
    it.
    """

    def test_startedAtTheClaim(self) -> None:
        """
        The claim starts the session's body from its plan, and nothing is
        told: the session is dormant until its command, which adopts the
        body (no other is spawned) and is sent to it at once;
        C{body.materialized} and C{session.revived} then, with pi's state
        from the start.
        """
        self.started()
        self.assertEqual(len(self.launcher.spawned), 1)
        self.assertEqual(self.pi.kinds(), ["get_state"])
        self.assertEqual(self.conductor.state, "dormant")
        self.assertNotIn("body.materialized", self.types())
        self.submit("prompt", "p1", text="hello")
        self.assertEqual(len(self.launcher.spawned), 1)
        self.assertEqual(self.pi.kinds(), ["get_state", "prompt"])
        self.assertEqual(self.conductor.state, "live")
        [materialized] = self.data("body.materialized")
        self.assertEqual(materialized["pid"], self.pi.transport.pid)
        self.assertEqual(materialized["box"], "test")
        self.assertEqual(self.data("session.revived"), [{"messageCount": 1}])
        self.assertLess(self.types().index("body.materialized"),
                        self.types().index("session.revived"))
        self.assertEqual(self.cleaned, [])
        self.assertIs(self.life.sessionPaths(), self.life.body.paths)

    def test_commandWhileStarting(self) -> None:
        """
        A command that comes before the body told its state waits for it,
        and starts no other.
        """
        self.claim()
        self.submit("prompt", "p1", text="hello")
        self.assertEqual(self.pi.kinds(), ["get_state"])
        self.pi.answer("get_state", STATE)
        self.assertEqual(self.pi.kinds(), ["get_state", "prompt"])
        self.assertEqual(len(self.launcher.spawned), 1)

    def test_onceAClaim(self) -> None:
        """
        A claim renewed while the body waits starts no other, nor does one
        while the body is live.
        """
        self.started()
        self.claim()
        self.assertEqual(len(self.launcher.spawned), 1)
        self.submit("prompt", "p1", text="hello")
        self.claim()
        self.assertEqual(len(self.launcher.spawned), 1)

    def test_afterTheSpares(self) -> None:
        """
        The spares are asked first; only when they have none is the body
        started.
        """
        source = EmptySource()
        self.life.spares = source
        self.claim()
        self.assertEqual(source.asked, 1)
        self.assertEqual(len(self.launcher.spawned), 1)

    def test_notWithoutTheSetting(self) -> None:
        """
        Without places a claim starts nothing (with no spares, nor
        when they have none).
        """
        self.life.places = None
        self.claim()
        self.life.spares = EmptySource()
        self.claim()
        self.assertEqual(self.launcher.spawned, [])
        self.assertEqual(self.plans, [])

    def test_nothingToRevive(self) -> None:
        """
        A session with no conversation yet starts nothing at its claim.
        """
        for path in (self.session.directory / "pi").iterdir():
            path.unlink()
        self.claim()
        self.assertEqual(self.launcher.spawned, [])

    def test_notWhenGoing(self) -> None:
        """
        A session closed, closing or deleted starts nothing when claimed.
        """
        for going in ("closed", "closing", "deleted"):
            if going == "closed":
                self.session._journal.closed = True
            elif going == "closing":
                self.life.closing = True
            else:
                self.session.deleted = True
            self.conductor.claimed()
            self.assertEqual(self.launcher.spawned, [], going)
            self.session._journal.closed = self.life.closing = False
            self.session.deleted = False
        self.conductor.claimed()
        self.assertEqual(len(self.launcher.spawned), 1)


class MadeAheadTests(EarlyTestCase):
    """
    Whether a body made at the claim waits for the next command
    (L{Conductor.startedAhead}: a route need not probe a box for it).
    """

    def test_whileStartingAndStarted(self) -> None:
        self.assertFalse(self.conductor.startedAhead())
        self.claim()
        self.assertTrue(self.conductor.startedAhead())
        self.pi.answer("get_state", STATE)
        self.assertTrue(self.conductor.startedAhead())

    def test_notOnceEnded(self) -> None:
        self.started()
        exited(self.pi.transport, 1)
        self.assertFalse(self.conductor.startedAhead())

    def test_notWhenNoneStarted(self) -> None:
        async def refuse(session: Any) -> BodyPlan:
            raise VehicleError("body_tampered", "not the folder the host made")

        self.life.planner = refuse
        self.claim()
        self.assertFalse(self.conductor.startedAhead())

    def test_notOnceAdopted(self) -> None:
        self.started()
        self.submit("prompt", "p1", text="hello")
        self.assertFalse(self.conductor.startedAhead())


class PlacesTests(EarlyTestCase):
    """
    Bodies started at claims hold places shared by one kind's sessions:
    no more wait at once than there are places.
    """

    def setUp(self) -> None:
        super().setUp()
        self.places = Places(limit=1)
        self.life.places = self.places
        self.other = newSession(self.registry, ALICE)
        (self.other.directory / "pi").mkdir(exist_ok=True)
        writePiFile(self.other.directory, [HEADER, user("u1", None, 1, "hi")])
        self.otherConductor = Conductor(session=self.other, launcher=self.launcher,
                                        clock=self.clock, idleSeconds=self.idleSeconds,
                                        places=self.places)
        self.other.conductor = self.otherConductor

    def claimOther(self) -> None:
        self.successResultOf(self.other.claim(
            ALICE, fromRequest({"requestId": "o1"}, ClaimRequest), 3_600_000,
        ))

    def test_noMoreThanThePlaces(self) -> None:
        """
        A claim when every place is held starts nothing; the command
        starts its body as before.
        """
        self.started()
        self.claimOther()
        self.assertEqual(len(self.launcher.spawned), 1)
        self.assertEqual(self.places.taken, 1)
        self.assertFalse(self.otherConductor.startedAhead())

    def test_freeOnceAdopted(self) -> None:
        self.started()
        self.submit("prompt", "p1", text="hello")
        self.assertEqual(self.places.taken, 0)
        self.claimOther()
        self.assertEqual(len(self.launcher.spawned), 2)

    def test_freeOnceEnded(self) -> None:
        self.started()
        self.clock.advance(self.idleSeconds)
        self.assertEqual(self.places.taken, 0)
        self.claimOther()
        self.assertEqual(len(self.launcher.spawned), 2)

    def test_freeWhenNoneStarted(self) -> None:
        """
        A plan refused, or one that failed, holds no place.
        """
        async def refuse(session: Any) -> BodyPlan:
            raise VehicleError("body_tampered", "not the folder the host made")

        self.life.planner = refuse
        self.claim()
        self.assertEqual(self.places.taken, 0)

        async def fail(session: Any) -> BodyPlan:
            raise RuntimeError("the box broke")

        self.life.planner = fail
        self.life.claim.take()
        self.claim()
        self.assertEqual(self.places.taken, 0)
        self.assertEqual(len(self.flushLoggedErrors(RuntimeError)), 1)

    def test_takeAndGive(self) -> None:
        places = Places(limit=2)
        self.assertEqual((places.take(), places.take(), places.take()), (True, True, False))
        places.give()
        self.assertEqual((places.taken, places.take(), places.take()), (1, True, False))

    def test_manyPlaces(self) -> None:
        """
        A limit is a number, however large (not an object compared by
        identity).
        """
        places = Places(limit=300)
        self.assertEqual([places.take() for _ in range(301)], [True] * 300 + [False])


class WaitingTests(EarlyTestCase):
    """
    What an early body says before its command.
    """

    def test_questionsAnswered(self) -> None:
        """
        The extension's question for the delegation token (its MCP client
        connects at start) is answered with the session's at once, as the
        session's body answers it; any other question is answered no.
        """
        self.session.delegatedToken = "dt-0123456789"
        self.claim()
        self.pi.send({"type": "extension_ui_request", "id": "q1", "method": "input",
                      "title": "sophia.delegated-token"})
        self.pi.send({"type": "extension_ui_request", "id": "q2", "method": "confirm",
                      "title": "sure?"})
        self.assertEqual(self.pi.uiAnswers(), [
            {"type": "extension_ui_response", "id": "q1", "value": "dt-0123456789"},
            {"type": "extension_ui_response", "id": "q2", "confirmed": False},
        ])
        self.assertNotIn("ui.request", self.types())

    def test_heldForTheSession(self) -> None:
        """
        Anything else pi says while the body waits is told once it is
        adopted, as it would have been had the command started the body.
        """
        self.started()
        self.pi.send({"type": "extension_ui_request", "id": "n1", "method": "notify",
                      "message": "loaded", "notifyType": "info"})
        self.assertNotIn("body.notice", self.types())
        self.submit("prompt", "p1", text="hello")
        [notice] = self.data("body.notice")
        self.assertEqual(notice["message"], "loaded")

    def test_heldAreCapped(self) -> None:
        """
        A body that says more than it should while it waits (more than 200
        records) has the rest dropped.
        """
        self.started()
        for i in range(205):
            self.pi.send({"type": "extension_ui_request", "id": f"n{i}", "method": "notify",
                          "message": f"note {i}", "notifyType": "info"})
        self.submit("prompt", "p1", text="hello")
        notices = self.data("body.notice")
        self.assertEqual((len(notices), HELD_RECORDS), (200, 200))
        self.assertEqual(notices[-1]["message"], "note 199")


class PrimedTests(EarlyTestCase):
    """
    A plan with a priming folder: pi starts a session of its own there, is
    primed, and is switched to the conversation before any command.
    """

    def setUp(self) -> None:
        super().setUp()
        self.priming = self.session.directory / "pi" / ".priming"
        self.adopted: list[bool] = []
        [self.conversation] = (self.session.directory / "pi").glob("*.jsonl")

    async def plan(self, session: Any) -> BodyPlan:
        self.priming.mkdir(exist_ok=True)
        plan = BodyPlan(box="test", cleanup=lambda: self.cleaned.append(plan),
                        primingDir=self.priming, onAdopt=lambda: self.adopted.append(True))
        self.plans.append(plan)
        return plan

    def primed(self) -> None:
        """
        Claimed; the body told its state and settled its priming run.
        """
        self.claim()
        self.pi.answer("get_state", STATE)
        self.assertEqual(self.pi.pending("prompt")["message"], PRIMING_PROMPT)
        self.pi.answer("prompt", {"disposition": "started"})
        self.pi.agentStart()
        self.pi.send({"type": "extension_ui_request", "id": "n1", "method": "notify",
                      "message": "primed", "notifyType": "info"})
        self.pi.assistant("Ready.")
        self.pi.send({"type": "agent_end", "messages": []})
        # Switched once the priming run settled, not before.
        self.assertNotIn("switch_session", self.pi.kinds())
        self.pi.send({"type": "agent_settled", "aborted": False})

    def test_primedThenSwitched(self) -> None:
        """
        pi is started fresh in the priming folder, primed, and switched to
        the conversation; the folder goes once pi is on it; nothing of the
        priming is told, at the claim or when the command adopts the body,
        and the plan's adoption is run then, once.
        """
        self.primed()
        self.assertEqual(self.launcher.kwargs[-1]["freshIn"], self.priming)
        self.assertEqual(self.pi.pending("switch_session")["sessionPath"],
                         str(self.conversation))
        self.pi.answer("switch_session", {"cancelled": False})
        self.pi.answer("get_state", {**STATE, "sessionFile": str(self.conversation),
                                     "messageCount": 1})
        self.assertFalse(self.priming.exists())
        self.assertEqual(self.adopted, [])
        self.assertEqual(self.types(), ["lease.renewed"])
        self.submit("prompt", "p1", text="hello")
        self.assertEqual(self.adopted, [True])
        self.assertEqual(self.pi.kinds()[-1], "prompt")
        self.assertEqual(self.pi.requests()[-1]["message"], "hello")
        self.assertEqual(self.data("session.revived"), [{"messageCount": 1}])
        self.assertNotIn("body.notice", self.types())
        self.assertNotIn("message.completed", self.types())

    def test_questionsWhilePriming(self) -> None:
        """
        The extension's questions are answered while pi is primed too.
        """
        self.session.delegatedToken = "dt-0123456789"
        self.claim()
        self.pi.answer("get_state", STATE)
        self.pi.send({"type": "extension_ui_request", "id": "q1", "method": "input",
                      "title": "sophia.delegated-token"})
        self.assertEqual(self.pi.uiAnswers()[-1]["value"], "dt-0123456789")

    def test_commandWhilePriming(self) -> None:
        """
        A command that comes while pi is primed waits for the switch.
        """
        self.claim()
        self.pi.answer("get_state", STATE)
        self.submit("prompt", "p1", text="hello")
        self.assertEqual(self.pi.kinds(), ["get_state", "prompt"])
        self.pi.answer("prompt", {"disposition": "started"})
        self.pi.send({"type": "agent_settled", "aborted": False})
        self.pi.answer("switch_session", {"cancelled": False})
        self.pi.answer("get_state", {**STATE, "sessionFile": str(self.conversation)})
        self.assertEqual(self.pi.requests()[-1]["message"], "hello")
        self.assertEqual(len(self.launcher.spawned), 1)

    def assertLetGo(self) -> None:
        """
        The body was ended, its plan undone and its priming folder gone; a
        command starts another.
        """
        self.assertIn(0, self.pi.transport.closed)
        exited(self.pi.transport, 0)
        self.assertEqual(self.cleaned, self.plans)
        self.assertFalse(self.priming.exists())
        self.assertFalse(self.conductor.startedAhead())
        self.submit("prompt", "p1", text="hello")
        self.assertEqual(len(self.launcher.spawned), 2)

    def test_switchRefused(self) -> None:
        self.primed()
        self.pi.answer("switch_session", {"cancelled": True})
        self.assertLetGo()

    def test_anythingButFalseIsARefusal(self) -> None:
        """
        A switch's answer is taken only when it says C{cancelled} is false
        (not 0, not missing).
        """
        self.primed()
        self.pi.answer("switch_session", {"cancelled": 0})
        self.assertLetGo()

    def test_primingFolderGoneMeanwhile(self) -> None:
        """
        A priming folder already gone when pi is switched (or when the body
        ends) is nothing to fail for.
        """
        self.primed()
        self.priming.rmdir()
        self.pi.answer("switch_session", {"cancelled": False})
        self.pi.answer("get_state", {**STATE, "sessionFile": str(self.conversation)})
        self.assertTrue(self.conductor.startedAhead())
        self.conductor.dispose("shutdown")
        exited(self.pi.transport, 0)
        self.assertEqual(self.cleaned, self.plans)

    def test_notOnItsConversation(self) -> None:
        """
        A body that says it is on another file after the switch is let go.
        """
        self.primed()
        self.pi.answer("switch_session", {"cancelled": False})
        self.pi.answer("get_state", {**STATE, "sessionFile": str(self.priming / "x.jsonl")})
        self.assertLetGo()

    def test_onAnotherFileAfterIt(self) -> None:
        """
        Whatever other file it names (one named after the conversation's).
        """
        self.primed()
        self.pi.answer("switch_session", {"cancelled": False})
        self.pi.answer("get_state", {**STATE, "sessionFile": str(self.conversation) + "x"})
        self.assertLetGo()

    def test_primingRefused(self) -> None:
        self.claim()
        self.pi.answer("get_state", STATE)
        self.pi.answer("prompt", success=False, error="no model")
        self.assertLetGo()

    def test_exitWhilePriming(self) -> None:
        """
        A body that exits while it is primed is let go (its folder too),
        and nothing waits for its priming any more.
        """
        self.claim()
        self.pi.answer("get_state", STATE)
        self.pi.answer("prompt", {"disposition": "started"})
        exited(self.pi.transport, 1)
        self.assertEqual(self.cleaned, self.plans)
        self.assertFalse(self.priming.exists())
        self.assertEqual(self.flushLoggedErrors(), [])


class LettingGoTests(EarlyTestCase):
    """
    An early body no command adopts ends, and its plan is undone.
    """

    def test_notAdoptedInTime(self) -> None:
        """
        A body no command took within the idle time is ended (its stdin
        closed), its plan undone once it exited; nothing is told; the next
        command starts another.
        """
        self.started()
        self.clock.advance(self.idleSeconds - 1)
        self.assertFalse(self.pi.transport.closed)
        self.clock.advance(1)
        self.assertIn(0, self.pi.transport.closed)
        self.assertEqual(self.cleaned, [])
        # TERM a second after its stdin closed, not before.
        self.clock.advance(0.9)
        self.assertEqual(self.pi.transport.signals, [])
        self.clock.advance(0.1)
        self.assertEqual(self.pi.transport.signals, ["TERM"])
        exited(self.pi.transport, 0)
        self.assertEqual(self.cleaned, self.plans)
        self.assertEqual(self.types(), ["lease.renewed"])
        self.submit("prompt", "p1", text="hello")
        self.assertEqual(len(self.launcher.spawned), 2)
        self.assertEqual(self.pi.kinds(), ["get_state"])

    def test_aFailedEndIsLogged(self) -> None:
        """
        An end that fails (here its plan's undoing) is logged, not lost.
        """
        async def breaking(session: Any) -> BodyPlan:
            def cleanup() -> None:
                raise RuntimeError("the proxy would not close")
            return BodyPlan(box="test", cleanup=cleanup)

        self.life.planner = breaking
        self.started()
        self.clock.advance(self.idleSeconds + 1)
        exited(self.pi.transport, 0)
        self.assertEqual(len(self.flushLoggedErrors(RuntimeError)), 1)

    def test_adoptedTakesTheTimer(self) -> None:
        """
        A body adopted is not ended by the timer that would have let it go.
        """
        self.started()
        self.submit("prompt", "p1", text="hello")
        first = self.pi.transport
        self.clock.advance(self.idleSeconds)
        self.assertFalse(first.closed)

    def test_endedWhileWaiting(self) -> None:
        """
        A body that exited while it waited is no news: the command finds it
        ended, undoes its plan and starts another.
        """
        self.started()
        exited(self.pi.transport, 1)
        self.assertNotIn("body.exited", self.types())
        self.submit("prompt", "p1", text="hello")
        self.assertEqual(self.cleaned, self.plans[:1])
        self.assertEqual(len(self.launcher.spawned), 2)
        self.assertEqual(self.conductor.state, "starting")

    def test_disposedWhileStarting(self) -> None:
        """
        A shutdown (or a delete) while the body starts ends it once it
        started, and is done when it exited (the host's stop waits for it).
        """
        self.claim()
        disposed = self.conductor.dispose("shutdown")
        self.assertFalse(self.pi.transport.closed)
        self.pi.answer("get_state", STATE)
        self.assertIn(0, self.pi.transport.closed)
        self.assertNoResult(disposed)
        exited(self.pi.transport, 0)
        self.successResultOf(disposed)
        self.assertEqual(self.cleaned, self.plans)
        self.assertNotIn("body.dormant", self.types())

    def test_closingWhileACommandWaits(self) -> None:
        """
        A body a command waits for, when the host began to stop meanwhile,
        is ended instead of adopted.
        """
        self.claim()
        self.submit("prompt", "p1", text="hello")
        self.conductor.close()
        self.pi.answer("get_state", STATE)
        self.assertIn(0, self.pi.transport.closed)
        self.assertEqual(self.pi.kinds(), ["get_state"])
        self.assertEqual(self.conductor.state, "dormant")
        self.assertNotIn("body.materialized", self.types())

    def test_closingWhilePlanned(self) -> None:
        """
        A host that began to stop while the body's plan was made starts no
        body, and undoes the plan.
        """
        planned: Deferred[BodyPlan] = Deferred()

        async def plan(session: Any) -> BodyPlan:
            return await planned

        self.life.planner = plan
        self.claim()
        self.life.closing = True
        priming = self.session.directory / "pi" / ".priming"
        priming.mkdir()
        made = BodyPlan(cleanup=lambda: self.cleaned.append(made), primingDir=priming)
        planned.callback(made)
        self.assertEqual(self.launcher.spawned, [])
        self.assertEqual(self.cleaned, [made])
        self.assertFalse(priming.exists())


class RefusedTests(EarlyTestCase):
    """
    A body that may not, or could not, start at the claim leaves the claim
    as it was; its command takes its own way.
    """

    def test_planRefused(self) -> None:
        """
        A plan refused for a reason the command will give (a tampered
        folder, a visitor's key not held) starts nothing, quietly.
        """
        async def refuse(session: Any) -> BodyPlan:
            raise VehicleError("body_tampered", "not the folder the host made")

        self.life.planner = refuse
        self.claim()
        self.assertEqual(self.launcher.spawned, [])
        self.assertEqual(self.flushLoggedErrors(), [])

    def test_planFails(self) -> None:
        """
        A plan that fails otherwise is logged, and the claim stands.
        """
        async def fail(session: Any) -> BodyPlan:
            raise RuntimeError("the box broke")

        self.life.planner = fail
        self.claim()
        self.assertEqual(len(self.flushLoggedErrors(RuntimeError)), 1)
        self.assertEqual(self.launcher.spawned, [])

    def test_spareSourceFails(self) -> None:
        """
        A spare source that fails is logged, and the body is started.
        """
        self.life.spares = RefusingSource(RuntimeError("the pool broke"))
        self.claim()
        self.assertEqual(len(self.flushLoggedErrors(RuntimeError)), 1)
        self.assertEqual(len(self.launcher.spawned), 1)

    def test_spawnFails(self) -> None:
        """
        A process that could not be started is warned of (no secret in the
        words) and its plan undone.
        """
        events: list[dict[str, Any]] = []
        globalLogPublisher.addObserver(events.append)
        self.addCleanup(globalLogPublisher.removeObserver, events.append)
        self.session.delegatedToken = "dt-secret-0123456789"

        def refuse(protocol: Any, **kw: Any) -> Any:
            raise OSError("no such file near dt-secret-0123456789")

        self.launcher.spawn = refuse  # type: ignore[method-assign]
        self.claim()
        self.assertEqual(self.cleaned, self.plans)
        [warned] = [e for e in events if "did not start" in e.get("log_format", "")]
        self.assertEqual(warned["error"], "no such file near [redacted]")

    def test_stateRefused(self) -> None:
        """
        A body that will not tell its state is ended and its plan undone;
        the command starts another.
        """
        self.claim()
        self.pi.answer("get_state", success=False, error="no state")
        self.assertIn(0, self.pi.transport.closed)
        exited(self.pi.transport, 0)
        self.assertEqual(self.cleaned, self.plans)
        self.submit("prompt", "p1", text="hello")
        self.assertEqual(len(self.launcher.spawned), 2)

    def test_hostStops(self) -> None:
        """
        The host's stop ends a body waiting for its command, and is done
        once it exited.
        """
        self.started()
        closed = self.conductor.close()
        self.assertIn(0, self.pi.transport.closed)
        self.assertNoResult(closed)
        exited(self.pi.transport, 0)
        self.successResultOf(closed)
        self.assertEqual(self.cleaned, self.plans)
        self.failureResultOf(Deferred.fromCoroutine(self.life.ensure()), HostClosing)
        self.assertEqual(len(self.launcher.spawned), 1)


class PrimingFolderTests(SynchronousTestCase):
    """
    L{primingFolder}: a new, empty, private folder, whatever was there.
    """

    def setUp(self) -> None:
        self.piDir = Path(self.mktemp()) / "pi"

    def assertFresh(self, folder: Path) -> None:
        self.assertEqual(folder, self.piDir / ".priming")
        self.assertTrue(folder.is_dir() and not folder.is_symlink())
        self.assertEqual(list(folder.iterdir()), [])
        self.assertEqual(os.stat(folder).st_mode & 0o777, 0o700)

    def test_made(self) -> None:
        """
        Made with its pi folder, if that is not there yet.
        """
        self.assertFresh(primingFolder(self.piDir))

    def test_leftoversGo(self) -> None:
        folder = primingFolder(self.piDir)
        (folder / "left.jsonl").write_text("{}\n")
        self.assertFresh(primingFolder(self.piDir))

    def test_aLinkIsRemovedNotFollowed(self) -> None:
        elsewhere = Path(self.mktemp())
        elsewhere.mkdir()
        (elsewhere / "keep").write_text("kept")
        self.piDir.mkdir(parents=True)
        (self.piDir / ".priming").symlink_to(elsewhere)
        self.assertFresh(primingFolder(self.piDir))
        self.assertEqual((elsewhere / "keep").read_text(), "kept")

    def test_aFileIsRemoved(self) -> None:
        self.piDir.mkdir(parents=True)
        (self.piDir / ".priming").write_text("not a folder")
        self.assertFresh(primingFolder(self.piDir))


class AnnotationTests(SynchronousTestCase):
    def test_annotationsResolve(self) -> None:
        """
        Every annotation of an early body's module, of what a claim makes
        and of the questions' is a type (mutation testing reads them so).
        """
        from vehicle.body import _ahead, _early, _questions

        assertAnnotationsResolve(self, _early)
        assertAnnotationsResolve(self, _ahead)
        assertAnnotationsResolve(self, _questions)

    def test_heardAsABody(self) -> None:
        """
        What hears an early body before its command is a body's sink.
        """
        early = Early.prepare(newSession(self.registry(), ALICE), BodyPlan(), revived=False)
        verifyObject(IBodySink, early.protocol.sink)

    def registry(self) -> Registry:
        dataDir = DataDir(Path(self.mktemp()))
        dataDir.ensure()
        registry = Registry(dataDir=dataDir, clock=MemoryReactorClock())
        self.addCleanup(registry.close)
        return registry
