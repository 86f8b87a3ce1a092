"""
Tests for spare bodies: the pool (L{vehicle.body._spares.SparePool}: made,
primed, handed out once, refilled, stopped), the hand-off of a spare to a
session (L{vehicle.body._life.BodyLife}: pi switched to the session's file,
the session's facts answered, a refusal let go), a spare's proxy before and
after the hand-off (L{vehicle.box.ModelProxy}, L{vehicle.host.ChatSpareProxy}),
with a fake pi on a L{MemoryReactorClock}.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from twisted.internet.defer import Deferred
from twisted.internet.testing import MemoryReactorClock
from twisted.trial.unittest import SynchronousTestCase
from twisted.web.test.requesthelper import DummyRequest

from vehicle.body import (
    PRIMING_PROMPT, SPARE_BUDGET, ChatSpares, SparePool, bootConfig, sessionFacts,
)
from vehicle.body._conductor import Conductor
from vehicle.body._rpc import PiProtocol
from vehicle.body._sessionfile import hasConversation, newSessionFile
from vehicle.body._spare import Spare
from vehicle.body._spares import MAX_RETRY_SECONDS
from vehicle.body._spawner import BodyPaths
from vehicle.box import ModelProxy, Upstream
from vehicle.box._apis import PRIMING_ANSWER
from vehicle.errors import VehicleError
from vehicle.host import ChatSpareProxy, chatSpares
from vehicle.host._bodies import OwnKeySpares
from vehicle.models import ModelCatalog
from vehicle.protocol import CommandRequest, RunBudget, fromRequest
from vehicle.public import OwnKeyBodies

from tests.support._hints import assertAnnotationsResolve
from tests.support.fakepi import STATE
from tests.support.harness import FakeLauncher, FakePiTransport
from tests.support.pirecords import answer, exited, kinds, record
from tests.support.schemas import validEvents
from tests.support.sparepool import (
    ALICE, KEY, MCP_URL, MODEL, PROVIDER, FakeProxy, PoolTestCase,
)


class Deaf:
    """
    Hears nothing (a spare's protocol in a test that does not run it).
    """

    def piEvent(self, event: Any) -> None:
        pass

    def bodyExited(self, *args: Any) -> None:
        pass


def quietSink() -> Deaf:
    return Deaf()


class MakingTests(PoolTestCase):
    """
    A spare is started for no one, holds no key, and is ready once primed.
    """

    size = 2

    def test_startFillsThePool(self) -> None:
        """
        Starting the pool starts C{size} spares, each in its own folder
        under the pool's root, on the spares' model, with the spare's own
        budget, its proxy's providers (a token, never the key), the spare
        flag and the chat bodies' MCP endpoint.
        """
        self.pool.start()
        self.assertEqual(len(self.launcher.spawned), 2)
        folders = set()
        for asked, proxy in zip(self.launcher.kwargs, self.proxies):
            self.assertEqual(asked["model"], MODEL)
            self.assertEqual(asked["profile"], "chat")
            self.assertEqual(asked["budget"], SPARE_BUDGET)
            # A boot config the extension can read (one turn, a cost above 0).
            self.assertEqual(json.loads(bootConfig(providers=asked["providers"],
                                                   budget=asked["budget"]))["budget"],
                             {"maxTurns": 1, "maxCostUsd": 0.01})
            self.assertEqual(asked["providers"], proxy.providers)
            self.assertNotIn(KEY, json.dumps(asked["providers"]))
            self.assertEqual(asked["bootExtra"], {**proxy.bootExtra, "spare": True})
            self.assertEqual(asked["mcpUrl"], "http://127.0.0.1:7/mcp")
            paths: BodyPaths = asked["paths"]
            self.assertEqual(paths.piDir.parent.parent, self.root / "spares")
            self.assertEqual(paths.piDir.parent.name, proxy.spareId)
            folders.add(paths.piDir)
        self.assertEqual(len(folders), 2)
        self.assertEqual(len(self.pool.making), 2)
        self.assertEqual(self.pool.ready, [])

    def test_readyOncePrimed(self) -> None:
        """
        A spare asks pi its state, then sends the priming prompt, and is
        ready only when that run has settled.
        """
        self.pool.start()
        transport = self.launcher.spawned[0]
        self.assertEqual(kinds(transport), ["get_state"])
        answer(transport, "get_state", STATE)
        self.assertEqual(kinds(transport), ["get_state", "prompt"])
        self.assertEqual(transport.written[1]["message"], PRIMING_PROMPT)
        answer(transport, "prompt", {"disposition": "started"})
        self.assertEqual(self.pool.ready, [])
        record(transport, {"type": "agent_settled", "aborted": False})
        self.assertEqual([s.protocol.transport for s in self.pool.ready], [transport])
        self.assertEqual(len(self.pool.making), 1)

    def test_primedByDefault(self) -> None:
        """
        A pool made without saying primes its spares (the host's own pool
        does not say); a record before C{agent_settled} (the run's
        C{agent_end}) does not make the spare ready.
        """
        settings: dict[str, Any] = dict(
            launcher=self.launcher, clock=self.clock, size=1, model=MODEL,
            kind=self.pool.kind, refillSeconds=2.0,
        )
        pool = SparePool(**settings)
        pool.start()
        transport = self.launcher.spawned[-1]
        answer(transport, "get_state", STATE)
        self.assertEqual(kinds(transport)[-1], "prompt")
        answer(transport, "prompt", {"disposition": "started"})
        record(transport, {"type": "agent_end"})
        self.assertEqual(pool.ready, [])
        record(transport, {"type": "agent_settled", "aborted": False})
        self.assertEqual(len(pool.ready), 1)

    def test_questionsAreAnsweredNo(self) -> None:
        """
        The extension's questions to a spare (a token, a session's facts)
        are answered cancelled: a spare has nothing to give.
        """
        self.pool.start()
        transport = self.launcher.spawned[0]
        for title in ("sophia.delegated-token", "sophia.session"):
            record(transport, {"type": "extension_ui_request", "id": title, "method": "input",
                               "title": title})
        answers = [r for r in transport.written if r["type"] == "extension_ui_response"]
        self.assertEqual(answers, [
            {"type": "extension_ui_response", "id": "sophia.delegated-token", "cancelled": True},
            {"type": "extension_ui_response", "id": "sophia.session", "cancelled": True},
        ])

    def test_onlyQuestionsAreAnswered(self) -> None:
        """
        A record that is not the extension's question is not answered,
        whatever fields it has.
        """
        self.pool.start()
        transport = self.launcher.spawned[0]
        record(transport, {"type": "tool_execution_start", "id": "t", "method": "input"})
        record(transport, {"type": "agent_end", "id": "e", "method": "input"})
        self.assertEqual(kinds(transport), ["get_state"])

    def test_otherRecordsAreNoNews(self) -> None:
        """
        What a spare says besides (its priming's events, a notice) moves
        nothing: it is ready only at its run's end.
        """
        self.pool.start()
        transport = self.launcher.spawned[0]
        answer(transport, "get_state", STATE)
        answer(transport, "prompt", {"disposition": "started"})
        record(transport, {"type": "extension_ui_request", "id": "n", "method": "notify",
                           "message": "sophia.tools []"})
        record(transport, {"type": "agent_start"})
        self.assertEqual(self.pool.ready, [])
        self.assertEqual(kinds(transport), ["get_state", "prompt"])


class UnprimedTests(PoolTestCase):
    """
    Without priming, a spare is ready when pi answers its state.
    """

    prime = False

    def test_readyAtItsState(self) -> None:
        self.pool.start()
        transport = self.launcher.spawned[0]
        answer(transport, "get_state", STATE)
        self.assertEqual(kinds(transport), ["get_state"])
        self.assertEqual(len(self.pool.ready), 1)
        self.assertEqual(self.pool.making, [])


class TakingTests(PoolTestCase):
    """
    A spare is handed out once, only for the spares' model, and the pool
    refills after its pause.
    """

    def test_takeGivesTheReadySpareOnce(self) -> None:
        """
        A ready spare is taken once; the pool is then empty until its
        pause has passed, and only then starts the next.
        """
        self.pool.start()
        transport = self.readyOne()
        session = self.session()
        spare = self.pool.take(session.meta.model)
        assert spare is not None
        self.assertIs(spare.protocol.transport, transport)
        self.assertIsNone(self.pool.take(session.meta.model))
        self.assertEqual(len(self.launcher.spawned), 1)
        self.clock.advance(1.9)
        self.assertEqual(len(self.launcher.spawned), 1)
        self.clock.advance(0.1)
        self.assertEqual(len(self.launcher.spawned), 2)
        self.assertIsNone(self.pool.take(session.meta.model))

    def test_nothingReadyNothingTaken(self) -> None:
        """
        A spare still starting is not handed out.
        """
        self.pool.start()
        self.assertIsNone(self.pool.take(MODEL))

    def test_onlyTheSparesModel(self) -> None:
        """
        A session on another model gets no spare, and the spare stays.
        """
        self.pool.start()
        self.readyOne()
        self.assertIsNone(self.pool.take("scripted/other-2"))
        self.assertIsNone(self.pool.take("scripted/a-0"))
        self.assertEqual(len(self.pool.ready), 1)
        # The same model, spelled by another string object (a session's meta
        # read from JSON), takes it.
        same = "".join(["scripted/", MODEL.split("/", 1)[1]])
        self.assertIsNot(same, MODEL)
        self.assertIsNotNone(self.pool.take(same))

    def test_theModelsItServes(self) -> None:
        """
        A pool that serves other models than its spares' own hands a spare
        to a session on any of them, and to none on a model it does not
        serve.
        """
        pool = self.makePool(serves=frozenset([MODEL, "other/o-1"]))
        pool.start()
        self.readyOne()
        self.assertIsNone(pool.take("scripted/a-0"))
        self.assertIsNone(pool.take("other/o-2"))
        self.assertEqual(pool.take("".join(["other/", "o-1"])).model, MODEL)  # type: ignore[union-attr]
        self.assertEqual(pool.ready, [])

    def test_oldestFirst(self) -> None:
        """
        Of two ready spares, the one ready first is handed out first.
        """
        pool = self.makePool(size=2)
        pool.start()
        second = self.readyOne(1)
        first = self.readyOne(0)
        taken = pool.take(MODEL)
        assert taken is not None
        self.assertIs(taken.protocol.transport, second)
        self.assertIsNot(first, second)

    def test_refillMakesUpTheDifference(self) -> None:
        """
        With one of two spares taken, the refill starts one, not more.
        """
        pool = self.makePool(size=2)
        pool.start()
        self.readyOne(0)
        self.readyOne(1)
        pool.take(MODEL)
        self.clock.advance(2)
        self.assertEqual(len(self.launcher.spawned), 3)
        self.assertEqual((len(pool.ready), len(pool.making)), (1, 1))

    def test_refillCountsThoseBeingMade(self) -> None:
        """
        The refill starts only what is missing beside the spares still
        being made: of four, one ready and taken and three being made, it
        starts one.
        """
        pool = self.makePool(size=4)
        pool.start()
        self.readyOne(0)
        pool.take(MODEL)
        self.clock.advance(2)
        self.assertEqual(len(self.launcher.spawned), 5)
        self.assertEqual((len(pool.ready), len(pool.making)), (0, 4))

    def test_noFillOnceStopped(self) -> None:
        """
        A pool started again after its stop starts nothing.
        """
        pool = self.makePool(size=2)
        pool.stop()
        pool.start()
        self.assertEqual(self.launcher.spawned, [])

    def test_oneRefillForSeveralTakes(self) -> None:
        """
        Spares taken during one pause are made up after it, together.
        """
        pool = self.makePool(size=2)
        pool.start()
        self.readyOne(0)
        self.readyOne(1)
        pool.take(MODEL)
        self.clock.advance(1)
        pool.take(MODEL)
        self.assertEqual(
            len([c for c in self.clock.getDelayedCalls() if c.func == pool._fill]), 1
        )
        self.clock.advance(1)
        self.assertEqual(len(self.launcher.spawned), 4)
        self.clock.advance(10)
        self.assertEqual(len(self.launcher.spawned), 4)


class LossTests(PoolTestCase):
    """
    A spare that ends before it is handed over is let go and replaced;
    one that cannot be made is tried again, ever more slowly.
    """

    def test_aReadySpareEnds(self) -> None:
        """
        A ready spare that exits is no longer ready, its proxy is closed
        and its folder removed, and another starts after the pause.
        """
        self.pool.start()
        transport = self.readyOne()
        folder = self.launcher.kwargs[0]["paths"].piDir.parent
        folder.mkdir(parents=True)
        exited(transport)
        self.assertEqual(self.pool.ready, [])
        self.assertEqual(self.proxies[0].closed, 1)
        self.assertFalse(folder.exists())
        self.clock.advance(2)
        self.assertEqual(len(self.launcher.spawned), 2)

    def test_aSpareEndsWhilePriming(self) -> None:
        """
        A spare that exits while it is primed never becomes ready; the
        next try comes after twice the pause, the one after that after
        twice that, and a success starts the count again.
        """
        self.pool.start()
        transport = self.launcher.spawned[0]
        answer(transport, "get_state", STATE)
        answer(transport, "prompt", {"disposition": "started"})
        exited(transport)
        self.assertEqual(self.pool.ready, [])
        self.assertEqual(self.pool.making, [])
        self.assertEqual(self.proxies[0].closed, 1)
        self.assertEqual(self.pool.failures, 1)
        self.clock.advance(3.9)
        self.assertEqual(len(self.launcher.spawned), 1)
        self.clock.advance(0.1)
        self.assertEqual(len(self.launcher.spawned), 2)
        exited(self.launcher.spawned[1])
        self.assertEqual(self.pool.failures, 2)
        self.clock.advance(7.9)
        self.assertEqual(len(self.launcher.spawned), 2)
        self.clock.advance(0.1)
        self.assertEqual(len(self.launcher.spawned), 3)
        self.readyOne()
        self.assertEqual(self.pool.failures, 0)
        self.assertEqual(len(self.pool.ready), 1)

    def test_theLongestPause(self) -> None:
        """
        However often a spare fails, the next try comes within a minute.
        """
        self.pool.start()
        for _ in range(12):
            exited(self.launcher.spawned[-1])
            spawned = len(self.launcher.spawned)
            self.clock.advance(MAX_RETRY_SECONDS)
            self.assertEqual(len(self.launcher.spawned), spawned + 1)

    def test_spawnRefused(self) -> None:
        """
        A spare whose process could not be started (the launcher raised) is
        let go at once, its proxy closed and its folders removed: there is
        no process to wait for.
        """
        calls: list[int] = []

        def refuse(protocol: Any, **kw: Any) -> Any:
            calls.append(1)
            if len(calls) >= 20:
                pool.stopped = True  # a pool that tried again at once would never end
            raise OSError("no more processes")

        self.patch(self.launcher, "spawn", refuse)
        pool = self.makePool()
        pool.start()
        self.assertEqual(len(calls), 1, "tried again at once instead of after its pause")
        self.assertEqual(pool.making, [])
        self.assertEqual([proxy.closed for proxy in self.proxies[-1:]], [1])
        self.assertEqual(pool.failures, 1)
        self.clock.advance(4)
        self.assertEqual(len(calls), 2)
        self.flushLoggedErrors()

    def test_pausesDouble(self) -> None:
        """
        After each failure in a row the pause doubles from the refill
        pause (2 s): 4, 8, 16, 32 s, then a minute, no more.
        """
        self.pool.start()
        pauses = []
        for _ in range(6):
            exited(self.launcher.spawned[-1])
            spawned = len(self.launcher.spawned)
            waited = 0.0
            while len(self.launcher.spawned) == spawned:
                self.clock.advance(1)
                waited += 1
            pauses.append(waited)
        self.assertEqual(pauses, [4, 8, 16, 32, 60, 60])

    def test_failingForDays(self) -> None:
        """
        A pool that has failed thousands of times still waits a minute at
        most (the pause's doubling stops short of a float's range).
        """
        self.pool.start()
        self.pool.failures = 5000
        exited(self.launcher.spawned[-1])
        spawned = len(self.launcher.spawned)
        self.clock.advance(MAX_RETRY_SECONDS)
        self.assertEqual(len(self.launcher.spawned), spawned + 1)

    def test_aRefusedStateIsAFailure(self) -> None:
        """
        A spare whose state pi refuses is ended and tried again later.
        """
        self.pool.start()
        transport = self.launcher.spawned[0]
        answer(transport, "get_state", success=False)
        self.assertIn(0, transport.closed)
        self.assertEqual(self.pool.making, [])
        exited(transport)
        self.assertEqual(self.pool.failures, 1)
        self.assertEqual(self.proxies[0].closed, 1)

    def test_aHandedSpareIsNotThePoolsAnyMore(self) -> None:
        """
        The pool does not hear a spare it handed out: its end is not a
        loss of the pool's.
        """
        self.pool.start()
        transport = self.readyOne()
        spare = self.pool.take(MODEL)
        assert spare is not None
        spare.protocol.sink = quietSink()
        exited(transport)
        self.assertEqual(self.proxies[0].closed, 0)


class StopTests(PoolTestCase):
    """
    The pool stops with the host, and every spare not handed over ends.
    """

    size = 2

    def test_stopEndsEverySpare(self) -> None:
        """
        Ready and starting spares alike are told to end (stdin closed,
        then signals), and their proxies close once they have; no spare is
        started again.
        """
        self.pool.start()
        ready = self.readyOne(0)
        starting = self.launcher.spawned[1]
        stopped = self.pool.stop()
        self.assertIn(0, ready.closed)
        self.assertIn(0, starting.closed)
        self.assertNoResult(stopped)
        exited(ready, 0)
        exited(starting, 0)
        self.successResultOf(stopped)
        self.assertEqual([d.closed for d in self.proxies], [1, 1])
        self.assertEqual(self.pool.ready, [])
        self.assertEqual(self.pool.making, [])
        self.clock.advance(MAX_RETRY_SECONDS * 2)
        self.assertEqual(len(self.launcher.spawned), 2)
        self.assertIsNone(self.pool.take(MODEL))

    def test_stopAfterATake(self) -> None:
        """
        A pause to refill is cancelled by the stop.
        """
        self.pool.start()
        self.readyOne(0)
        self.pool.take(MODEL)
        self.pool.stop()
        self.clock.advance(MAX_RETRY_SECONDS)
        self.assertEqual(len(self.launcher.spawned), 2)

    def test_endsAfterTheGrace(self) -> None:
        """
        A spare that does not end on its stdin's close is signalled.
        """
        self.pool.start()
        ready = self.readyOne(0)
        self.pool.stop()
        self.clock.advance(2.9)
        self.assertEqual(ready.signals, [])
        self.clock.advance(0.1)
        self.assertEqual(ready.signals, ["TERM"])
        self.assertEqual(self.proxies[0].closed, 1)


class DiscardTests(SynchronousTestCase):
    """
    A spare is discarded once: its folder removed, its proxy closed.
    """

    def test_once(self) -> None:
        folder = Path(self.mktemp())
        (folder / "pi").mkdir(parents=True)
        proxy = FakeProxy("s1")
        spare = Spare(spareId="s1", paths=BodyPaths.forSession(folder), proxy=proxy,
                      protocol=PiProtocol(quietSink()))
        first, second = spare.discard(), spare.discard()
        self.successResultOf(first)
        self.successResultOf(second)
        self.assertEqual(proxy.closed, 1)
        self.assertFalse(folder.exists())

    def test_waitsForTheProxy(self) -> None:
        """
        Discarding is done when the proxy has closed.
        """
        closing: Deferred[None] = Deferred()
        proxy = FakeProxy("s1")
        proxy.close = lambda: closing  # type: ignore[method-assign]  # a proxy slow to close
        spare = Spare(spareId="s1", paths=BodyPaths.forSession(Path(self.mktemp())), proxy=proxy,
                      protocol=PiProtocol(quietSink()))
        done = spare.discard()
        self.assertNoResult(done)
        closing.callback(None)
        self.successResultOf(done)

    def test_thePlan(self) -> None:
        """
        The body a spare becomes has its proxy's providers and bridge (out
        of its repr), and discards the spare when it is gone.
        """
        folder = Path(self.mktemp())
        folder.mkdir()
        proxy = FakeProxy("s1")
        spare = Spare(spareId="s1", paths=BodyPaths.forSession(folder), proxy=proxy,
                      protocol=PiProtocol(quietSink()))
        proxy.bootExtra["bridge"]["token"] = "vbt-secret-token"
        plan = spare.plan()
        self.assertEqual(plan.providers, proxy.providers)
        self.assertEqual(plan.bootExtra, proxy.bootExtra)
        # The plan's repr (a log line's) holds neither the token nor the
        # providers'.
        self.assertNotIn("vbt-", repr(plan))
        assert plan.cleanup is not None
        plan.cleanup()
        self.assertEqual(proxy.closed, 1)
        self.assertFalse(folder.exists())


class OwnFileTests(SynchronousTestCase):
    """
    L{Spare.ownFileInSession}: only a spare whose folders become its
    session's (an agent's, seen inside at the session's paths) that knows
    its own file has one there.
    """

    def spare(self, inside: BodyPaths | None, ownFile: str | None) -> Spare:
        folder = Path(self.mktemp())
        spare = Spare(spareId="s1", paths=BodyPaths.forSession(folder), proxy=FakeProxy("s1"),
                      protocol=PiProtocol(quietSink()), inside=inside)
        spare.ownFile = ownFile
        return spare

    def test_whereItIs(self) -> None:
        inside = BodyPaths.forSession(Path("/data/sessions/s1"))
        self.assertEqual(self.spare(inside, "/data/sessions/s1/pi/own.jsonl").ownFileInSession(),
                         inside.piDir / "own.jsonl")

    def test_none(self) -> None:
        """
        A chat spare (seen where it is) and a spare that named no file of
        its own have none in a session.
        """
        inside = BodyPaths.forSession(Path("/data/sessions/s1"))
        self.assertIsNone(self.spare(None, "/run/spare/pi/own.jsonl").ownFileInSession())
        self.assertIsNone(self.spare(inside, None).ownFileInSession())
        self.spare(None, "/run/spare/pi/own.jsonl").forgetOwnFile()


class HandOffTests(PoolTestCase):
    """
    A session's body made of a spare: pi switched to the session's file,
    the session's facts given, the proxy opened to the session.
    """

    def setUp(self) -> None:
        super().setUp()
        self.pool.start()
        self.spareTransport = self.readyOne()
        self.conduct(self.session(budget=RunBudget(maxTurns=5, maxCostUsd=0.5)))

    def conduct(self, session: Any) -> None:
        """
        C{session} is the one under test, its bodies taken from the pool.
        """
        self.sessionUnderTest = session
        self.conductor = Conductor(session=session, launcher=self.launcher,
                                   clock=self.clock, spares=self.pool)
        session.conductor = self.conductor
        self.seen = validEvents(self, session)

    def prompt(self, text: str = "hello") -> None:
        self.sessionUnderTest.command(
            ALICE, fromRequest({"type": "prompt", "requestId": "p1", "text": text}, CommandRequest)
        )

    def events(self, kind: str) -> list[dict[str, Any]]:
        return [e for e in self.seen if e["type"] == kind]

    def switched(self) -> Path:
        """
        The file pi was switched to; pi switches and answers its state.
        """
        request = [r for r in self.spareTransport.written if r["type"] == "switch_session"][-1]
        path = Path(request["sessionPath"])
        answer(self.spareTransport, "switch_session", {"cancelled": False})
        answer(self.spareTransport, "get_state", {**STATE, "sessionFile": str(path)})
        return path

    def test_aNewConversation(self) -> None:
        """
        A new session's first prompt goes to the spare: pi is switched to
        a new file in the session's own pi folder holding only a header
        (the session's working folder its cwd), the proxy is handed to the
        session, and the prompt follows; no process is started.
        """
        self.prompt()
        self.assertEqual(len(self.launcher.spawned), 1)
        self.assertEqual(self.proxies[0].handed, [self.sessionUnderTest])
        path = self.switched()
        directory = self.sessionUnderTest.directory
        self.assertEqual(path.parent, directory / "pi")
        lines = path.read_text().splitlines()
        self.assertEqual(len(lines), 1)
        header = json.loads(lines[0])
        self.assertEqual(header["type"], "session")
        self.assertEqual(header["version"], 3)
        self.assertEqual(header["cwd"], str(directory / "work"))
        self.assertTrue(path.name.endswith(f"_{header['id']}.jsonl"))
        self.assertTrue((directory / "work").is_dir())
        self.assertEqual(kinds(self.spareTransport)[-1], "prompt")
        self.assertEqual(self.spareTransport.written[-1]["message"], "hello")
        materialized = self.events("body.materialized")
        self.assertEqual(materialized[0]["data"], {"kind": "rpc", "pid": 4242})
        self.assertEqual(self.events("session.revived"), [])
        self.assertEqual(self.conductor.life.paths, BodyPaths.forSession(directory))
        self.assertEqual(self.conductor.state, "live")

    def test_theSessionsFacts(self) -> None:
        """
        When the extension asks for the session's facts on the way, it is
        answered with the session's budget (not the spare's).
        """
        self.prompt()
        record(self.spareTransport, {"type": "extension_ui_request", "id": "f1",
                                     "method": "input", "title": "sophia.session"})
        answers = [r for r in self.spareTransport.written if r["type"] == "extension_ui_response"]
        self.assertEqual(answers, [{
            "type": "extension_ui_response", "id": "f1",
            "value": sessionFacts(budget=RunBudget(maxTurns=5, maxCostUsd=0.5)),
        }])
        self.assertEqual(json.loads(answers[0]["value"]),
                         {"budget": {"maxTurns": 5, "maxCostUsd": 0.5}})

    def test_otherQuestionsOnTheWay(self) -> None:
        """
        Any other question during the hand-off (pi's MCP client, connecting
        for the session's file, asks for the delegated token before the
        switch is answered) waits for the session, which answers it once
        the switch is done: the facts go only to the facts' question, the
        token is the session's.
        """
        ALICE_TOKEN = "delegated-alice-token"
        self.sessionUnderTest.delegatedToken = ALICE_TOKEN
        self.prompt()
        record(self.spareTransport, {"type": "extension_ui_request", "id": "t1",
                                     "method": "input", "title": "sophia.delegated-token"})
        record(self.spareTransport, {"type": "extension_ui_request", "id": "c1",
                                     "method": "confirm", "title": "sophia.session"})

        def answers() -> list[dict[str, Any]]:
            return [r for r in self.spareTransport.written if r["type"] == "extension_ui_response"]

        self.assertEqual(answers(), [])
        self.switched()
        self.assertEqual(answers(), [
            {"type": "extension_ui_response", "id": "t1", "value": ALICE_TOKEN},
            {"type": "extension_ui_response", "id": "c1", "confirmed": False},
        ])

    def test_onlyTheFactsQuestionGetsTheFacts(self) -> None:
        """
        Only an C{input} titled exactly C{sophia.session} is the facts'
        question: another title, or another kind of question with that
        title, waits for the session like any other.
        """
        self.prompt()
        for n, (method, title) in enumerate([("input", "sophia.zzz"), ("select", "sophia.session"),
                                             ("editor", "sophia.session")]):
            record(self.spareTransport, {"type": "extension_ui_request", "id": f"q{n}",
                                         "method": method, "title": title})
        self.assertEqual(
            [r for r in self.spareTransport.written if r["type"] == "extension_ui_response"], []
        )
        sink = self.spareTransport.protocol.sink
        self.assertNotIn("budget", repr(sink))

    def test_questionsOnAFailedWay(self) -> None:
        """
        A hand-off that fails ends the spare with the questions held on
        the way unanswered: nothing of the session's reaches a spare it
        does not keep.
        """
        self.sessionUnderTest.delegatedToken = "delegated-alice-token"
        self.prompt()
        record(self.spareTransport, {"type": "extension_ui_request", "id": "t1",
                                     "method": "input", "title": "sophia.delegated-token"})
        answer(self.spareTransport, "switch_session", {"cancelled": True})
        self.assertEqual(
            [r for r in self.spareTransport.written if r["type"] == "extension_ui_response"], []
        )

    def test_aRevivedConversation(self) -> None:
        """
        A session with a conversation in its pi folder is switched to
        that file, and is revived.
        """
        piDir = self.sessionUnderTest.directory / "pi"
        piDir.mkdir(parents=True, exist_ok=True)
        existing = piDir / "2026-01-01T00-00-00-000Z_abc.jsonl"
        existing.write_text('{"type":"session","version":3,"id":"abc","cwd":"/"}\n'
                            '{"type":"message","id":"m1"}\n')
        self.prompt()
        path = self.switched()
        self.assertEqual(path, existing)
        self.assertEqual(len(list(piDir.glob("*.jsonl"))), 1)
        self.assertEqual(len(self.events("session.revived")), 1)

    def test_aHeaderAloneIsNoConversation(self) -> None:
        """
        A file holding only a header (a hand-off's, whose body ended
        before a word) is switched to, and is no revival.
        """
        piDir = self.sessionUnderTest.directory / "pi"
        piDir.mkdir(parents=True, exist_ok=True)
        existing = piDir / "2026-01-01T00-00-00-000Z_abc.jsonl"
        existing.write_text('{"type":"session","version":3,"id":"abc","cwd":"/"}\n')
        self.prompt()
        self.assertEqual(self.switched(), existing)
        self.assertEqual(self.events("session.revived"), [])

    def refused(self, **how: Any) -> None:
        self.prompt()
        if how.get("cancelled"):
            answer(self.spareTransport, "switch_session", {"cancelled": True})
        elif how.get("failed"):
            answer(self.spareTransport, "switch_session", success=False)
        elif how.get("otherFile"):
            answer(self.spareTransport, "switch_session", {"cancelled": False})
            answer(self.spareTransport, "get_state", {**STATE, "sessionFile": "/elsewhere.jsonl"})
        else:
            exited(self.spareTransport)

    def assertStartedAfresh(self) -> None:
        """
        The spare is let go unheard (its end is no news) and a body is
        started for the session, which then serves the prompt.
        """
        self.assertEqual(len(self.launcher.spawned), 2)
        fresh = self.launcher.spawned[1]
        self.assertIn(0, self.spareTransport.closed)
        exited(self.spareTransport)
        self.assertEqual(self.events("body.exited"), [])
        self.assertEqual(self.proxies[0].closed, 1)
        answer(fresh, "get_state", STATE)
        self.assertEqual(kinds(fresh), ["get_state", "prompt"])
        self.assertIs(self.conductor.body.protocol.transport, fresh)  # type: ignore[union-attr]

    def onAnotherModel(self, model: str = "scripted/echo-2") -> FakePiTransport:
        """
        A pool that serves C{model} too, a session on it, and its spare
        switched to the session's file; the spare's transport.
        """
        self.pool = self.makePool(serves=frozenset([MODEL, model]))
        self.pool.start()
        transport = self.spareTransport = self.readyOne()
        self.conduct(self.session(model=model))
        self.prompt()
        self.switched()
        return transport

    def test_anotherModelIsSetAtTheHandOff(self) -> None:
        """
        A session on another model than the spare was started on is
        handed the spare, and pi is set to the session's model (provider
        and id) on its file before the prompt goes.
        """
        transport = self.onAnotherModel()
        self.assertEqual(kinds(transport)[-1], "set_model")
        self.assertEqual(
            {k: v for k, v in transport.written[-1].items() if k != "id"},
            {"type": "set_model", "provider": "scripted", "modelId": "echo-2"},
        )
        self.assertNotIn("prompt", kinds(transport)[kinds(transport).index("switch_session"):])
        answer(transport, "set_model", {"provider": "scripted", "id": "echo-2"})
        self.assertEqual(kinds(transport)[-1], "prompt")
        # No body started for it (the first pool's spare, then this one's).
        self.assertEqual(self.launcher.spawned[-1], transport)
        self.assertEqual(len(self.launcher.spawned), 2)
        self.assertEqual(self.proxies[-1].handed, [self.sessionUnderTest])
        self.assertIs(self.conductor.body.protocol.transport, transport)  # type: ignore[union-attr]

    def test_aModelOfAnotherProvider(self) -> None:
        """
        A session on another provider's model (whose name sorts before the
        spare's) is set to it the same way.
        """
        transport = self.onAnotherModel("other/o-1")
        self.assertEqual(kinds(transport)[-1], "set_model")
        self.assertEqual((transport.written[-1]["provider"], transport.written[-1]["modelId"]),
                         ("other", "o-1"))

    def test_theSparesOwnModelIsNotSet(self) -> None:
        """
        A session on the model the spare was started on (the same name,
        another string: a session's meta is read from JSON) is not set to
        it.
        """
        transport = self.onAnotherModel("".join(["scripted/", MODEL.split("/", 1)[1]]))
        self.assertNotIn("set_model", kinds(transport))
        self.assertEqual(kinds(transport)[-1], "prompt")

    def test_aRefusedModel(self) -> None:
        """
        A spare that has no such model (pi refuses the C{set_model}) is
        let go, and a body is started on the session's model.
        """
        transport = self.onAnotherModel()
        answer(transport, "set_model", success=False)
        self.assertIn(0, transport.closed)
        fresh = self.launcher.spawned[-1]
        self.assertIsNot(fresh, transport)
        self.assertEqual(self.launcher.kwargs[-1]["model"], "scripted/echo-2")
        answer(fresh, "get_state", STATE)
        self.assertEqual(kinds(fresh), ["get_state", "prompt"])
        self.assertIs(self.conductor.body.protocol.transport, fresh)  # type: ignore[union-attr]

    def test_aRefusingSpare(self) -> None:
        """
        A spare that refuses the switch is let go; a body is started.
        """
        self.refused(cancelled=True)
        self.assertStartedAfresh()

    def test_aFailingSwitch(self) -> None:
        self.refused(failed=True)
        self.assertStartedAfresh()

    def test_theWrongFile(self) -> None:
        """
        A spare that says it is on another file than the session's is let
        go.
        """
        self.refused(otherFile=True)
        self.assertStartedAfresh()

    def test_aSpareEndingOnTheWay(self) -> None:
        """
        A spare that ends during the hand-off is replaced by a body
        started for the session, and its end is no news.
        """
        self.refused(exited=True)
        self.assertEqual(len(self.launcher.spawned), 2)
        self.assertEqual(self.events("body.exited"), [])
        answer(self.launcher.spawned[1], "get_state", STATE)
        self.assertEqual(kinds(self.launcher.spawned[1]), ["get_state", "prompt"])

    def test_deletedOnTheWay(self) -> None:
        """
        A body let go during the hand-off (the host stops) starts nothing
        more.
        """
        self.prompt()
        self.conductor.close()
        exited(self.spareTransport, 0)
        self.assertEqual(len(self.launcher.spawned), 1)
        self.assertEqual(self.conductor.state, "dormant")

    def test_aFileAfterTheSessions(self) -> None:
        """
        pi on any other file than the session's is let go, whichever way
        the names sort.
        """
        self.prompt()
        request = [r for r in self.spareTransport.written if r["type"] == "switch_session"][-1]
        answer(self.spareTransport, "switch_session", {"cancelled": False})
        answer(self.spareTransport, "get_state",
               {**STATE, "sessionFile": request["sessionPath"] + "x"})
        self.assertStartedAfresh()

    def test_aRefusedSpareIsGivenASecond(self) -> None:
        """
        A spare let go at its hand-off is sent C{TERM} a second after its
        stdin closed, not before.
        """
        self.prompt()
        answer(self.spareTransport, "switch_session", {"cancelled": True})
        self.assertIn(0, self.spareTransport.closed)
        self.clock.advance(0.9)
        self.assertEqual(self.spareTransport.signals, [])
        self.clock.advance(0.1)
        self.assertEqual(self.spareTransport.signals, ["TERM"])

    def test_disposedOnTheWayThenRefused(self) -> None:
        """
        A spare that refuses its switch after its body began to be let go
        (a shutdown on the way) starts nothing in its place.
        """
        self.prompt()
        self.conductor.dispose("shutdown")
        answer(self.spareTransport, "switch_session", {"cancelled": True})
        self.assertEqual(len(self.launcher.spawned), 1)

    def test_onlyFalseIsASwitch(self) -> None:
        """
        A switch answered with anything but C{cancelled: false} (here a 0)
        is a refusal: the spare is let go.
        """
        self.prompt()
        answer(self.spareTransport, "switch_session", {"cancelled": 0})
        self.assertStartedAfresh()

    def test_theBodyEndsTheSpare(self) -> None:
        """
        When the body a spare became is gone, the spare is discarded.
        """
        self.prompt()
        self.switched()
        self.conductor.dispose("shutdown")
        exited(self.spareTransport, 0)
        self.assertEqual(self.proxies[0].closed, 1)
        self.assertEqual(self.pool.ready, [])


class FactsTests(SynchronousTestCase):
    """
    The facts a spare is given are a boot config's session part.
    """

    def test_budgetAndExtra(self) -> None:
        facts = sessionFacts(budget=RunBudget(maxTurns=2, maxCostUsd=1),
                             extra={"graphs": {"own": "g1", "public": ["p"]}})
        self.assertEqual(json.loads(facts), {"budget": {"maxTurns": 2, "maxCostUsd": 1.0},
                                             "graphs": {"own": "g1", "public": ["p"]}})

    def test_aBadBudget(self) -> None:
        self.assertRaises(ValueError, sessionFacts, budget=RunBudget(maxTurns=0, maxCostUsd=1))


class SessionFileTests(SynchronousTestCase):
    """
    The header-only file a new conversation's spare is switched to.
    """

    def test_newFile(self) -> None:
        from datetime import datetime, timezone

        folder = Path(self.mktemp())
        now = datetime(2026, 12, 1, 10, 20, 30, 123000, tzinfo=timezone.utc)
        path = newSessionFile(folder, sessionId="u1", now=now, cwd=Path("/w"))
        self.assertEqual(path.name, "2026-12-01T10-20-30-123Z_u1.jsonl")
        self.assertEqual(json.loads(path.read_text()), {
            "type": "session", "version": 3, "id": "u1",
            "timestamp": "2026-12-01T10:20:30.123Z", "cwd": "/w",
        })
        self.assertFalse(hasConversation(path))
        self.assertRaises(FileExistsError, newSessionFile, folder, sessionId="u1", now=now,
                          cwd=Path("/w"))
        path.write_text(path.read_text() + '{"type":"message"}\n')
        self.assertTrue(hasConversation(path))


class SpareProxyTests(SynchronousTestCase):
    """
    A spare's proxy answers its priming and nothing else until it is
    handed over; then it is the session's.
    """

    def proxy(self) -> ModelProxy:
        return ModelProxy(reactor=MemoryReactorClock(), socketPath=Path("/nowhere/s.sock"),
                         model=None, token="vbt-t")

    def request(self, proxy: ModelProxy, path: bytes = b"/v1/chat/completions",
                token: str = "vbt-t", method: bytes = b"POST") -> DummyRequest:
        request = DummyRequest([])
        request.method = method
        request.uri = path
        request.requestHeaders.setRawHeaders(b"authorization", [f"Bearer {token}".encode()])
        self.successResultOf(Deferred.fromCoroutine(proxy.forward(request)))
        return request

    def test_priming(self) -> None:
        """
        The first chat completion with the body's token is answered by the
        proxy: an event stream of one word and no tokens.
        """
        proxy = self.proxy()
        request = self.request(proxy)
        self.assertEqual(request.responseCode or 200, 200)
        self.assertEqual(b"".join(request.written), PRIMING_ANSWER)
        self.assertEqual(request.responseHeaders.getRawHeaders(b"content-type"),
                         [b"text/event-stream"])
        self.assertEqual(request.finished, 1)
        frames = [f for f in PRIMING_ANSWER.split(b"\n\n") if f]
        self.assertEqual(frames[-1], b"data: [DONE]")
        usage = json.loads(frames[-2][len(b"data: "):])["usage"]
        self.assertEqual(usage["total_tokens"], 0)

    def test_onlyOnce(self) -> None:
        """
        A second model request of a spare is refused: it serves no one.
        """
        proxy = self.proxy()
        self.request(proxy)
        second = self.request(proxy)
        self.assertEqual(second.responseCode, 503)
        self.assertIn(b"serves no session", b"".join(second.written))

    def test_notWithoutTheToken(self) -> None:
        proxy = self.proxy()
        request = self.request(proxy, token="vbt-other")
        self.assertEqual(request.responseCode, 503)
        self.assertFalse(proxy.primed)

    def test_notAnotherPath(self) -> None:
        """
        Only pi's chat completions are primed; another model path is
        refused, and another path is no upstream at all.
        """
        proxy = self.proxy()
        self.assertEqual(self.request(proxy, b"/v1/messages").responseCode, 503)
        self.assertEqual(self.request(proxy, b"/elsewhere").responseCode, 404)
        self.assertFalse(proxy.primed)

    def test_notAGet(self) -> None:
        proxy = self.proxy()
        self.request(proxy, method=b"GET")
        self.assertFalse(proxy.primed)

    def test_handedOver(self) -> None:
        """
        Once handed over, the proxy's model and gate are the session's, and
        it primes nothing any more.
        """
        proxy = self.proxy()
        gate = lambda: "spent"  # noqa: E731
        proxy.handTo(Upstream(baseUrl="http://127.0.0.1:9/v1", key=KEY), gate)
        assert proxy.model is not None
        self.assertEqual((proxy.model.baseUrl, proxy.model.key), ("http://127.0.0.1:9/v1", KEY))
        self.assertIs(proxy.gate, gate)
        request = self.request(proxy)
        self.assertEqual(request.responseCode, 429)
        self.assertFalse(proxy.primed)


class ChatSpareProxyTests(SynchronousTestCase):
    """
    The host's proxy for a chat spare: a token in the boot config, the key
    at the hand-off.
    """

    def test_openAndHandOver(self) -> None:
        reactor = MemoryReactorClock()
        other = {"baseUrl": "http://127.0.0.1:8/v1", "api": "openai-completions",
                 "apiKey": "sk-other-key", "headers": {"x-secret": "hs-other"},
                 "models": [{"id": "o-1", "headers": {"x-model": "o"}}], "_keyVariable": "OTHER"}
        models = ModelCatalog({"scripted": dict(PROVIDER), "other": other}, MODEL)
        folder = Path(self.mktemp())
        chat = self.successResultOf(Deferred.fromCoroutine(
            ChatSpareProxy.open(reactor, models, folder / "s1" / "model.sock")
        ))
        token = chat.proxy.token
        # Every provider of the host, through the proxy: a spare may be set
        # to any model; no key, no header, no provider's address, nothing
        # of the host's own notes.
        self.assertEqual(chat.providers, {
            "scripted": {**PROVIDER, "baseUrl": "http://127.0.0.1:0/v1", "apiKey": token},
            "other": {"api": "openai-completions", "models": [{"id": "o-1"}],
                      "baseUrl": "http://127.0.0.1:0/v1", "apiKey": token},
        })
        self.assertEqual(chat.bootExtra, {"bridge": {"socket": str(folder / "s1" / "model.sock"),
                                                     "port": 0}})
        self.assertIsNone(chat.proxy.model)

        class Session:
            class meta:
                model = MODEL
                funding = None

            class conductor:
                @staticmethod
                def meterModelRequest() -> str:
                    return "metered"

        chat.handTo(Session)  # type: ignore[arg-type]  # the parts handTo reads
        model = chat.proxy.model
        assert model is not None
        self.assertEqual((model.baseUrl, model.key, model.scrub), (PROVIDER["baseUrl"], KEY, False))
        assert chat.proxy.gate is not None
        self.assertEqual(chat.proxy.gate(), "metered")
        Session.conductor = None  # type: ignore[assignment]  # the session let go of its body
        self.assertEqual(chat.proxy.gate(), "no run is under way")
        Session.meta.model = "other/o-1"
        chat.handTo(Session)  # type: ignore[arg-type]  # the parts handTo reads
        model = chat.proxy.model
        self.assertEqual((model.baseUrl, model.key), (other["baseUrl"], "sk-other-key"))
        self.assertEqual(model.headers, {"x-secret": "hs-other", "x-model": "o"})

    def test_ownKeyHandOver(self) -> None:
        """
        Handed to a conversation on the caller's own key, the spare's proxy
        reaches the provider with that key (the newest, asked at each
        request) and scrubs it out of answers; never with the house's key,
        not even with no public side to hold the caller's (then with none).
        """
        reactor = MemoryReactorClock()
        models = ModelCatalog({"scripted": dict(PROVIDER)}, MODEL)
        keys: dict[str, str] = {}

        class Public:
            @staticmethod
            def keyFor(session: Any) -> str | None:
                return keys.get(session.sessionId)

        class Session:
            sessionId = "s1"

            class meta:
                model = MODEL
                funding = "byok"

            conductor = None

        ownKey = OwnKeyBodies(reactor=reactor, public=Public, models=models,  # type: ignore[arg-type]
                              runDir=lambda: Path(self.mktemp()))
        for given, expected in ((ownKey, ("sk-own-1", "sk-own-2")), (None, (None, None))):
            chat = self.successResultOf(Deferred.fromCoroutine(ChatSpareProxy.open(
                reactor, models, Path(self.mktemp()) / "model.sock", ownKey=given)))
            chat.handTo(Session)  # type: ignore[arg-type]  # the parts handTo reads
            model = chat.proxy.model
            assert model is not None
            seen = []
            for key in ("sk-own-1", "sk-own-2"):
                keys["s1"] = key
                seen.append(model.currentKey())
            self.assertEqual((model.baseUrl, model.key, model.scrub, tuple(seen)),
                             (PROVIDER["baseUrl"], None, True, expected))
            self.assertTrue(model.swapsKey)
            del keys["s1"]

    def test_ownKeySpareOnlyWithTheKey(self) -> None:
        """
        A conversation on the caller's own key takes a spare only while the
        host holds the key: without it, C{model_key_required} and the
        source is not asked (its spare stays where it is).
        """
        keys: dict[str, str] = {}
        asked: list[str] = []

        class Public:
            @staticmethod
            def keyFor(session: Any) -> str | None:
                return keys.get(session.sessionId)

        class Source:
            async def spareFor(self, session: Any) -> Any:
                asked.append(session.sessionId)
                return "a spare"

        class Session:
            sessionId = "s1"

        models = ModelCatalog({"scripted": dict(PROVIDER)}, MODEL)
        ownKey = OwnKeyBodies(reactor=MemoryReactorClock(), public=Public,  # type: ignore[arg-type]
                              models=models, runDir=lambda: Path("/run"))
        spares = OwnKeySpares(ownKey, Source())
        failure = self.failureResultOf(Deferred.fromCoroutine(
            spares.spareFor(Session)), VehicleError)  # type: ignore[arg-type]
        self.assertEqual(failure.value.code, "model_key_required")
        self.assertEqual(asked, [])
        keys["s1"] = "sk-own-1"
        self.assertEqual(self.successResultOf(Deferred.fromCoroutine(
            spares.spareFor(Session))), "a spare")  # type: ignore[arg-type]
        self.assertEqual(asked, ["s1"])

    def test_noPool(self) -> None:
        """
        No spares when there are to be none, or no model to start them on.
        """
        launcher = FakeLauncher(mcpUrl=MCP_URL)
        reactor = MemoryReactorClock()
        models = ModelCatalog({"scripted": dict(PROVIDER)}, MODEL)
        runDir = lambda: Path("/run")  # noqa: E731
        self.assertIsNone(chatSpares(launcher=launcher, reactor=reactor, models=models, size=0,
                                     runDir=runDir, refillSeconds=1))
        self.assertIsNone(chatSpares(launcher=launcher, reactor=reactor,
                                     models=ModelCatalog({}, None), size=1, runDir=runDir,
                                     refillSeconds=1))
        pool = chatSpares(launcher=launcher, reactor=reactor, models=models, size=2,
                          runDir=runDir, refillSeconds=1.5)
        assert pool is not None
        assert isinstance(pool.kind, ChatSpares)
        self.assertEqual((pool.size, pool.model, pool.refillSeconds, pool.kind.mcpUrl),
                         (2, MODEL, 1.5, launcher.mcpUrl))


    def test_onlyModelsAProxyReaches(self) -> None:
        """
        The pool serves the catalogue's models whose API a proxy speaks (by
        the model's own C{api}, else its provider's): a session on another
        starts its own body, with the key, as if there were no spare.
        """
        launcher = FakeLauncher(mcpUrl=MCP_URL)
        models = ModelCatalog({
            "scripted": dict(PROVIDER),
            "anth": {**PROVIDER, "api": "anthropic-messages", "models": [{"id": "c-1"}]},
            "bed": {**PROVIDER, "api": "bedrock-converse-stream",
                    "models": [{"id": "b-1"}, {"id": "b-2", "api": "openai-responses"}]},
        }, MODEL)
        pool = chatSpares(launcher=launcher, reactor=MemoryReactorClock(), models=models,
                          size=1, runDir=lambda: Path("/run"), refillSeconds=1)
        assert pool is not None
        self.assertEqual(pool.serves, {MODEL, "anth/c-1", "bed/b-2"})


class AnnotationTests(SynchronousTestCase):
    def test_annotationsResolve(self) -> None:
        """
        Every annotation of the spares' modules (the pool's and one
        spare's) and of the body's life (where a spare is handed over) is
        a type.
        """
        from vehicle.body import _life, _spare, _spares

        assertAnnotationsResolve(self, _spares)
        assertAnnotationsResolve(self, _spare)
        assertAnnotationsResolve(self, _life)
