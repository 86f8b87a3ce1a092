"""
Money is state: every accepted credit turn holds its run's budget in the
ledger until its command ends, so turns sent at once cannot spend past one
run's budget below zero; a host that stops with holds open releases (or
charges) each exactly once when it starts again; and the ledger replays
every kind of row it writes (spec, "Public sessions"; issue 10, section 1).
"""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path
from typing import Any

from attrs import evolve
from twisted.internet.testing import MemoryReactorClock
from twisted.trial.unittest import SynchronousTestCase

from vehicle.errors import VehicleError
from vehicle.protocol import CommandRequest, CommandStatus, fromRequest
from vehicle.public import Ledger
from vehicle.public import _accounting
from vehicle.session import Caller, Session
from vehicle.store import OsFiles, useFiles

from tests.support.fakepi import STATE, FakePi
from tests.support.harness import FakeLauncher, FakePiTransport
from tests.support.public import (
    ACCOUNT,
    PUBLIC as ROUTE_PUBLIC,
    account,
    figures,
    ledgerRows,
    withPostgres,
)
from tests.support.routes import RouteTestCase


#: $0.03 of credit, $0.01 a run's budget: three runs' worth.
PUBLIC = evolve(ROUTE_PUBLIC, signupGrantUsd=0.03, runMaxCostUsd=0.01, turnsPerDay=100,
                sessionMaxTurns=40)
WHO = dict(ACCOUNT, headers=account())
PRINCIPAL = ACCOUNT["principal"]
CALLER = Caller(principal=PRINCIPAL, clientId="tab-a", role="viewer", graphId="g1")


class BodyOf(FakePi):
    """
    The pi side of one fake body of many (by spawn order).
    """

    def __init__(self, launcher: FakeLauncher, index: int) -> None:
        super().__init__(launcher)
        self.index = index

    @property
    def transport(self) -> FakePiTransport:
        return self.launcher.spawned[self.index]

    def send(self, record: dict[str, Any]) -> None:
        self.launcher.reply(record, self.index)

    def run(self, text: str, costUsd: float) -> None:
        """
        pi takes the prompt, runs one turn that costs C{costUsd}, settles.
        """
        self.answer("get_state", STATE)
        self.answer("prompt", {"disposition": "started"})
        self.agentStart()
        self.user(text)
        usage = {"input": 10, "output": 5, "cacheRead": 0, "cacheWrite": 0,
                 "totalTokens": 15, "cost": {"total": costUsd}}
        self.send({"type": "message_end",
                   "message": {"role": "assistant", "content": [{"type": "text", "text": "ok"}],
                               "usage": usage, "stopReason": "stop"}})
        self.settle()


class HoldContract:
    """
    Many credit conversations of one account, turns sent at once: the same
    with either ledger (a subclass says which).
    """

    harnessSettings = {"public": PUBLIC}

    def rows(self, kind: str | None = None) -> list[dict[str, Any]]:
        return ledgerRows(self.h, kind)

    def held(self, principal: str | None = PRINCIPAL) -> float:
        found = figures(self, self.h, principal or PRINCIPAL)
        return found.heldUsd if principal else found.heldAllUsd

    def balance(self) -> float:
        return self.ok("GET", "/account", **WHO)["value"]["credit"]["balanceUsd"]

    def sessions(self, n: int) -> list[str]:
        return [
            self.ok("POST", "/sessions", {"requestId": f"c{i}"}, **WHO)["value"]["session"]["sessionId"]
            for i in range(n)
        ]

    def sendAtOnce(self, sids: list[str]) -> list[tuple[int, dict[str, Any]]]:
        """
        One prompt to each session, all sent before any answer is read.
        """
        pending = [
            self.h.request("POST", f"/sessions/{sid}/commands",
                           {"type": "prompt", "requestId": "p1", "text": f"hi {sid}"}, **WHO)
            for sid in sids
        ]
        self.h.stub.flush()
        out = []
        for d in pending:
            response = self.successResultOf(d)
            out.append((response.code, json.loads(self.successResultOf(response.content()))))
        return out

    def test_concurrentTurnsHoldTheBudget(self) -> None:
        """
        Twelve turns at once on $0.03 of credit with a $0.01 run budget:
        three are accepted (each holding $0.01), the rest are
        out_of_credit; when the three runs settle at their whole budget the
        balance is zero, never past one run's budget below it, and every
        hold has ended once.
        """
        sids = self.sessions(12)
        answers = self.sendAtOnce(sids)
        accepted = [sid for sid, (code, _) in zip(sids, answers) if code == 202]
        refused = {frame.get("code") for code, frame in answers if code != 202}
        self.assertEqual(len(accepted), 3, answers)
        self.assertEqual(refused, {"out_of_credit"})
        self.assertEqual(len(self.rows("hold")), 3)
        self.assertAlmostEqual(self.held(), 0.03)
        for index, sid in enumerate(accepted):
            BodyOf(self.h.launcher, index).run(f"hi {sid}", costUsd=PUBLIC.runMaxCostUsd)
            self.assertGreaterEqual(self.balance(), -PUBLIC.runMaxCostUsd)
        self.assertAlmostEqual(self.balance(), 0.0)
        self.assertEqual(len(self.rows("debit")), 3)
        releases = self.rows("release")
        self.assertEqual(sorted(r["hold"] for r in releases),
                         sorted(r["key"] for r in self.rows("hold")))
        self.assertEqual({r["reason"] for r in releases}, {"completed"})
        self.assertEqual(self.held(), 0.0)
        # And no turn is taken now: the credit is spent.
        self.refused("out_of_credit", "POST", f"/sessions/{accepted[0]}/commands",
                     {"type": "prompt", "requestId": "p2", "text": "more"}, **WHO)

    def test_cancelledTurnReleasesItsHold(self) -> None:
        """
        A turn that ends without a run (aborted before it started) gives
        its hold back.
        """
        sid = self.sessions(1)[0]
        self.prompt(sid, "p1", **WHO)
        self.assertEqual(len(self.rows("hold")), 1)
        self.h.api.registry.sessions[sid].move("p1", CommandStatus.cancelled, reason="aborted")
        [release] = self.rows("release")
        self.assertEqual((release["hold"], release["reason"]), (f"hold:{sid}:p1", "cancelled"))
        self.assertEqual(self.held(), 0.0)

    def test_bodyDiesMidRun(self) -> None:
        """
        A body that dies during a run: the run is settled as aborted and
        debited what it cost so far, the command fails and its hold ends,
        each once.
        """
        sid = self.sessions(1)[0]
        self.prompt(sid, "p1", **WHO)
        body = BodyOf(self.h.launcher, 0)
        body.answer("get_state", STATE)
        body.answer("prompt", {"disposition": "started"})
        body.agentStart()
        body.user("hi " + sid)
        usage = {"input": 10, "output": 5, "cacheRead": 0, "cacheWrite": 0,
                 "totalTokens": 15, "cost": {"total": 0.006}}
        body.send({"type": "message_end",
                   "message": {"role": "assistant", "content": [{"type": "text", "text": "half"}],
                               "usage": usage, "stopReason": "toolUse"}})
        body.exit(exitCode=1)
        [debit] = self.rows("debit")
        self.assertEqual(debit["amountUsd"], 0.006)
        [release] = self.rows("release")
        self.assertEqual((release["hold"], release["reason"]), (f"hold:{sid}:p1", "failed"))
        self.assertAlmostEqual(self.balance(), 0.03 - 0.006)
        self.h.restart()
        self.assertEqual(len(self.rows("debit")), 1)
        self.assertEqual(len(self.rows("release")), 1)

    def test_restartReleasesOpenHoldsOnce(self) -> None:
        """
        Holds of turns whose runs never settled (the host stopped under
        them) are released at start, once: a second restart writes no row.
        """
        sids = self.sessions(2)
        self.sendAtOnce(sids)
        self.assertEqual(len(self.rows("hold")), 2)
        before = self.balance()
        self.h.restart()
        releases = self.rows("release")
        self.assertEqual(len(releases), 2)
        self.assertEqual({r["reason"] for r in releases}, {"host_restarted"})
        self.assertEqual(self.held(None), 0.0)
        self.assertEqual(self.balance(), before)
        count = len(self.rows())
        self.h.restart()
        self.assertEqual(len(self.rows()), count)
        self.assertEqual(self.balance(), before)

    def test_restartKeepsEveryRow(self) -> None:
        """
        Through the routes, a restart after each kind of row (grant, turn
        with its hold, debit and release) shows the same account.
        """
        def account() -> dict[str, Any]:
            value = self.ok("GET", "/account", **WHO)["value"]
            return {"turnsToday": value["turnsToday"], **value["credit"]}

        self.ok("POST", "/account/grants",
                {"principal": PRINCIPAL, "amountUsd": 1.0, "source": "operator",
                 "idempotencyKey": "op-1"}, principal="owner")
        before = account()
        self.h.restart()
        self.assertEqual(account(), before)
        sid = self.sessions(1)[0]
        self.prompt(sid, "p1", **WHO)
        before = account()
        held = self.held()
        self.assertEqual(held, PUBLIC.runMaxCostUsd)
        self.h.stop()
        self.h._start()
        self.assertEqual(account(), before)
        self.assertEqual(before["turnsToday"], 1)
        # The restart released the hold of the turn whose run never ran.
        self.assertEqual(self.held(), 0.0)
        self.prompt(sid, "p2", **WHO)
        BodyOf(self.h.launcher, 0).run("hello", costUsd=0.002)
        before = account()
        self.assertAlmostEqual(before["spentUsd"], 0.002)
        self.h.restart()
        self.assertEqual(account(), before)
        self.assertEqual(self.held(), 0.0)

    def test_twoTurnsTwoHolds(self) -> None:
        """
        Each turn of a conversation holds for its own command; a run that
        cost nothing is debited nothing.
        """
        sid = self.sessions(1)[0]
        self.prompt(sid, "p1", **WHO)
        BodyOf(self.h.launcher, 0).run("hi " + sid, costUsd=0.0)
        self.prompt(sid, "p2", **WHO)
        self.assertEqual([r["key"] for r in self.rows("hold")],
                         [f"hold:{sid}:p1", f"hold:{sid}:p2"])
        self.assertEqual(self.rows("debit"), [])
        self.assertEqual(self.held(), PUBLIC.runMaxCostUsd)

    def test_poolCountsHolds(self) -> None:
        """
        Today's pool counts the budgets held: turns sent at once cannot pass
        the day's cap either.
        """
        self.h.stop()
        self.h.overrides["public"] = evolve(self.h.overrides["public"], creditDailyCapUsd=0.02,
                                            signupGrantUsd=1.0)
        self.h._start()
        sids = self.sessions(3)
        answers = self.sendAtOnce(sids)
        self.assertEqual([code for code, _ in answers], [202, 202, 503])
        self.assertEqual(answers[2][1]["code"], "credit_pool_exhausted")

    def test_holdIsTheSessionsOwnBudget(self) -> None:
        """
        A conversation keeps the run budget it was made with: after the host's
        budget changed, its turns hold its own.
        """
        sid = self.sessions(1)[0]
        self.h.stop()
        self.h.overrides["public"] = evolve(self.h.overrides["public"], runMaxCostUsd=0.02)
        self.h._start()
        self.prompt(sid, "p1", **WHO)
        [hold] = self.rows("hold")
        self.assertEqual(hold["amountUsd"], PUBLIC.runMaxCostUsd)

    def test_voidedWhenTheAcceptFails(self) -> None:
        """
        A turn reserved whose command is then not accepted is voided: it
        counts for nothing, holds nothing, and the same request may be sent
        again.
        """
        sid = self.sessions(1)[0]
        real = Session.command

        def refuse(*args: Any) -> Any:
            raise VehicleError("storage_unavailable", "the disk said no")

        self.patch(Session, "command", refuse)
        self.refused("storage_unavailable", "POST", f"/sessions/{sid}/commands",
                     {"type": "prompt", "requestId": "p1", "text": "hi"}, **WHO)
        self.assertEqual((self.turnsToday(), self.held()), (0, 0.0))
        self.assertEqual(self.rows("turn"), [])
        self.patch(Session, "command", real)
        self.assertEqual(self.prompt(sid, "p1", **WHO)[0], 202)
        self.assertEqual((self.turnsToday(), self.held()), (1, PUBLIC.runMaxCostUsd))

    def test_killedBetweenReservationAndCommand(self) -> None:
        """
        A host stopped after a turn was reserved but before its command was
        recorded voids that turn when it starts again: nothing half-charged.
        """
        sid = self.sessions(1)[0]
        session = self.h.api.registry.sessions[sid]
        caller = Caller(principal=PRINCIPAL, clientId="tab-a", role="viewer", graphId="g1",
                        kind="account", emailVerified=True)
        lost = fromRequest({"type": "prompt", "requestId": "lost", "text": "hi"}, CommandRequest)
        self.successResultOf(self.h.api.public.reserveTurn(session, caller, lost))
        self.assertEqual((self.turnsToday(), self.held()), (1, PUBLIC.runMaxCostUsd))
        self.h.clock.advance(1)
        self.h.restart()
        self.assertEqual((self.turnsToday(), self.held()), (0, 0.0))
        self.assertEqual(self.successResultOf(self.h.api.public.ledger.openHolds()), [])


class HoldTests(HoldContract, RouteTestCase):
    """
    Holds on the file ledger, and what only a file can suffer (a torn tail,
    a full disk, rows of an older host).
    """

    def turnsToday(self) -> int:
        return int(self.h.api.public.ledger.turnsToday(PRINCIPAL))

    def test_restartChargesASettledRunOnce(self) -> None:
        """
        A host that stopped after a run's settle record but before its
        debit and release (the ledger's tail lost) charges the run and
        releases its hold at start, each once.
        """
        sid = self.sessions(1)[0]
        self.prompt(sid, "p1", **WHO)
        BodyOf(self.h.launcher, 0).run("hello", costUsd=0.004)
        self.assertEqual([r["type"] for r in self.rows()][-2:], ["release", "debit"])
        self.h.stop()
        path = self.h.root / "public" / "ledger.jsonl"
        lines = path.read_text().splitlines(keepends=True)
        path.write_text("".join(lines[:-2]))
        self.h._start()
        self.assertEqual(len(self.rows("debit")), 1)
        [debit] = self.rows("debit")
        self.assertEqual(debit["amountUsd"], 0.004)
        # The charge ends the hold in the same row.
        [release] = self.rows("release")
        self.assertEqual(release["reason"], "charged")
        self.assertAlmostEqual(self.balance(), 0.03 - 0.004)
        count = len(self.rows())
        self.h.restart()
        self.assertEqual(len(self.rows()), count)

    def test_ledgerRefusedAfterTheTurn(self) -> None:
        """
        A ledger whose disk refuses rows: the turn, whose row is written
        before its command, is refused C{storage_unavailable} and counts
        for nothing; the rows that follow a settled run (its debit and
        release) do not undo it: they count in memory, and the restart after
        the disk is back writes each missing one once.
        """
        class LedgerFull(OsFiles):
            def write(self, fd: int, data: Any) -> int:
                if full and os.readlink(f"/proc/self/fd/{fd}").endswith("ledger.jsonl"):
                    raise OSError(errno.ENOSPC, "No space left on device")
                return super().write(fd, data)

        sid, other = self.sessions(2)
        ledger = self.h.api.public.ledger
        full = True
        previous = useFiles(LedgerFull())
        try:
            self.refused("storage_unavailable", "POST", f"/sessions/{sid}/commands",
                         {"type": "prompt", "requestId": "p1", "text": "hello"}, **WHO)
            self.assertEqual((ledger.turnsToday(PRINCIPAL), self.held()), (0, 0.0))
            full = False
            self.assertEqual(self.prompt(sid, "p1", **WHO)[0], 202)
            rowsBefore = len(self.rows())
            full = True
            BodyOf(self.h.launcher, 0).run("hello", costUsd=0.004)
            self.assertAlmostEqual(self.held(), 0.0)
            self.assertAlmostEqual(self.balance(), 0.03 - 0.004)
            self.assertEqual(len(self.rows()), rowsBefore)
        finally:
            useFiles(previous)
        self.h.restart()
        self.assertAlmostEqual(self.balance(), 0.03 - 0.004)
        self.assertEqual(len(self.rows("debit")), 1)
        self.assertEqual(len(self.rows("turn")), 1)
        self.assertEqual(self.h.api.public.ledger.holds, {})
        count = len(self.rows())
        self.h.restart()
        self.assertEqual(len(self.rows()), count)

    def test_deleteReleasesWhatIsLeft(self) -> None:
        """
        A deleted conversation holds nothing: a hold left open is released
        with it, and any made for it later is released at the next check.
        """
        sid = self.sessions(1)[0]
        ledger = self.h.api.public.ledger
        ledger.hold(PRINCIPAL, 0.01, sid, "ghost")
        self.ok("DELETE", f"/sessions/{sid}", **WHO)
        [release] = self.rows("release")
        self.assertEqual((release["hold"], release["reason"]), (f"hold:{sid}:ghost", "deleted"))
        ledger.hold(PRINCIPAL, 0.01, sid, "ghost-2")
        self.ok("POST", "/sessions", {"requestId": "c-new"}, **WHO)
        self.assertEqual(self.rows("release")[-1]["reason"], "session_gone")
        self.assertEqual(ledger.held(), 0.0)

    def test_restartReadsEveryPageOfEvents(self) -> None:
        """
        The settled runs are found however many events a session has.
        """
        self.patch(_accounting, "RECOVER_PAGE", 2)
        self.test_restartChargesASettledRunOnce()

    def test_turnNotCountedIsCountedAtStart(self) -> None:
        """
        A host that stopped after a turn's command was recorded but before
        its ledger row counts the turn at start, on the day it was accepted,
        once.
        """
        sid = self.sessions(1)[0]
        self.prompt(sid, "p1", **WHO)
        self.assertEqual([r["type"] for r in self.rows()][-2:], ["turn", "hold"])
        self.h.stop()
        path = self.h.root / "public" / "ledger.jsonl"
        lines = path.read_text().splitlines(keepends=True)
        path.write_text("".join(lines[:-1]))
        self.h.clock.advance(86400)
        self.h._start()
        [turn] = self.rows("turn")
        self.assertEqual(turn["key"], f"turn:{sid}:p1")
        self.assertEqual(turn["day"], "2026-11-30")
        self.assertEqual(self.ok("GET", "/account", **WHO)["value"]["turnsToday"], 0)
        self.assertEqual(self.h.api.public.ledger.sessionTurns[sid], 1)
        self.h.restart()
        self.assertEqual(len(self.rows("turn")), 1)

    def test_turnRowsWithoutKeysAreCountedByNumber(self) -> None:
        """
        Turn rows written before they named their command are not counted
        twice at start.
        """
        sid = self.sessions(1)[0]
        self.prompt(sid, "p1", **WHO)
        self.h.stop()
        path = self.h.root / "public" / "ledger.jsonl"
        rows = [json.loads(line) for line in path.read_text().splitlines()]
        for row in rows:
            if row["type"] == "turn":
                del row["key"]
        path.write_text("".join(json.dumps(row) + "\n" for row in rows))
        self.h._start()
        self.assertEqual(len(self.rows("turn")), 1)

    def test_holdOfAGoneSessionIsReleased(self) -> None:
        """
        A hold whose conversation the host no longer has (its directory
        could not be loaded) speaks for nothing: it is released at the next
        credit check, once.
        """
        sid = self.sessions(1)[0]
        self.prompt(sid, "p1", **WHO)
        self.h.stop()
        (self.h.root / "sessions" / sid / "meta.json").write_text("not json")
        self.h._start()
        self.assertEqual(self.held(None), PUBLIC.runMaxCostUsd)
        self.ok("POST", "/sessions", {"requestId": "c-new"}, **WHO)
        [release] = self.rows("release")
        self.assertEqual(release["reason"], "session_gone")
        self.assertEqual(self.held(None), 0.0)



class PostgresHoldTests(HoldContract, RouteTestCase):
    """
    Holds on the PostgreSQL ledger: the same behaviour, and a host stopped
    mid-charge.
    """

    def setUp(self) -> None:
        self.harnessSettings = {"public": withPostgres(PUBLIC)}
        RouteTestCase.setUp(self)

    def turnsToday(self) -> int:
        return int(figures(self, self.h, PRINCIPAL).turnsToday)

    def test_restartChargesASettledRunOnce(self) -> None:
        """
        A host that stopped after a run's settle record but before its
        charge (the transaction never committed: the debit missing, the hold
        open) charges it and ends the hold at start, each once.
        """
        from tests.support import postgres

        sid = self.sessions(1)[0]
        self.prompt(sid, "p1", **WHO)
        BodyOf(self.h.launcher, 0).run("hello", costUsd=0.004)
        self.h.stop()
        url = self.h.overrides["public"].ledgerUrl
        postgres.shared().query(url, "DELETE FROM ledger_rows WHERE kind IN ('debit', 'release')")
        postgres.shared().query(url, "UPDATE ledger_rows SET open = true WHERE kind = 'hold'")
        self.h._start()
        [debit] = self.rows("debit")
        self.assertEqual(debit["amountUsd"], 0.004)
        [release] = self.rows("release")
        self.assertEqual(release["reason"], "charged")
        self.assertAlmostEqual(self.balance(), 0.03 - 0.004)
        count = len(self.rows())
        self.h.restart()
        self.assertEqual(len(self.rows()), count)


class LedgerReplayTests(SynchronousTestCase):
    """
    L{Ledger.open} folds every kind of row back: what a restart knows is
    what was written.
    """

    def setUp(self) -> None:
        self.clock = MemoryReactorClock()
        self.clock.advance(1_796_000_000)
        self.path = Path(self.mktemp()) / "ledger.jsonl"

    def ledger(self) -> Ledger:
        ledger = Ledger(path=self.path, clock=self.clock)
        ledger.open()
        self.addCleanup(ledger.close)
        return ledger

    def state(self, ledger: Ledger) -> dict[str, Any]:
        def nonzero(folded: dict[Any, Any]) -> dict[Any, Any]:
            return {k: v for k, v in folded.items() if v}

        return {
            "granted": nonzero(ledger.granted), "spent": nonzero(ledger.spent),
            "turns": nonzero(ledger.turns), "sessionTurns": nonzero(ledger.sessionTurns),
            "pool": nonzero(ledger.pool), "keys": set(ledger.keys), "grants": dict(ledger.grants),
            "holds": dict(ledger.holds), "balance": ledger.balance("p"),
            "held": ledger.held("p"), "turnsToday": ledger.turnsToday("p"),
            "poolToday": ledger.poolToday(),
        }

    def assertReplayed(self, ledger: Ledger) -> Ledger:
        before = self.state(ledger)
        ledger.close()
        again = self.ledger()
        self.assertEqual(self.state(again), before)
        return again

    def test_grant(self) -> None:
        ledger = self.ledger()
        ledger.grant("p", 1.5, "operator", "operator:k1")
        again = self.assertReplayed(ledger)
        self.assertEqual(again.balance("p"), 1.5)
        self.assertFalse(again.grant("p", 1.5, "operator", "operator:k1"))

    def test_debit(self) -> None:
        ledger = self.ledger()
        ledger.grant("p", 1.0, "operator", "operator:k1")
        ledger.debit("p", 0.25, "run:s1:7", "s1")
        again = self.assertReplayed(ledger)
        self.assertEqual((again.balance("p"), again.poolToday()), (0.75, 0.25))
        self.assertFalse(again.debit("p", 0.25, "run:s1:7", "s1"))

    def test_turn(self) -> None:
        ledger = self.ledger()
        ledger.turn("p", "s1", "credit")
        ledger.turn("p", "s1", "credit")
        again = self.assertReplayed(ledger)
        self.assertEqual((again.turnsToday("p"), again.sessionTurns["s1"]), (2, 2))

    def test_hold(self) -> None:
        ledger = self.ledger()
        ledger.grant("p", 1.0, "operator", "operator:k1")
        ledger.hold("p", 0.05, "s1", "c1")
        ledger.hold("q", 0.25, "s2", "c1")
        again = self.assertReplayed(ledger)
        self.assertEqual((again.held("p"), again.held("q"), again.held()), (0.05, 0.25, 0.3))
        self.assertFalse(again.hold("p", 0.05, "s1", "c1"))
        self.assertEqual(again.held("p"), 0.05)

    def test_release(self) -> None:
        ledger = self.ledger()
        ledger.hold("p", 0.05, "s1", "c1")
        ledger.hold("p", 0.05, "s1", "c2")
        ledger.hold("q", 0.25, "s2", "c1")
        self.assertTrue(ledger.release("hold:s1:c1", "completed"))
        self.assertIn("release:s1:c1", ledger.keys)
        again = self.assertReplayed(ledger)
        self.assertEqual((again.held("p"), again.held("q")), (0.05, 0.25))
        self.assertEqual(again.holdsOf("s1"), ["hold:s1:c2"])
        self.assertFalse(again.release("hold:s1:c1", "completed"))
        self.assertTrue(again.release("hold:s1:c2", "interrupted"))
        again = self.assertReplayed(again)
        self.assertEqual((again.held("p"), again.holdsOf("s2")), (0.0, ["hold:s2:c1"]))
