"""
The ledger's contract (L{vehicle.public.LedgerStore}), one test class run
against both implementations: the file (L{vehicle.public.Ledger}) and
PostgreSQL (L{vehicle.public.PostgresLedger}, on a real server of the
tests' own, run inline on a memory clock) (issue 19, section 1; spec,
"Public sessions").
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from vehicle.public import (
    Figures,
    Hold,
    InlineRunner,
    Ledger,
    LedgerStore,
    LedgerUnavailable,
    PostgresLedger,
    TurnAsk,
    describe,
    hostIdentity,
)
from vehicle.public import _postgres

from vehicle_local.standin import freeLoopbackPort

from tests.support import postgres


#: 2026-12-01T12:00:00Z.
NOON = 1_796_126_400.0
TODAY = "2026-12-01"


class LedgerContract:
    """
    What every ledger does; a subclass says how to make one (L{make}).
    """

    clock: Clock

    def make(self) -> LedgerStore:
        raise NotImplementedError

    def setUp(self) -> None:
        self.clock = Clock()
        self.clock.advance(NOON)

    def ledger(self) -> LedgerStore:
        ledger = self.make()
        self.successResultOf(ledger.start())  # type: ignore[attr-defined]
        self.addCleanup(ledger.close)  # type: ignore[attr-defined]
        return ledger

    def answer(self, d: Any) -> Any:
        return self.successResultOf(d)  # type: ignore[attr-defined]

    def ask(self, **kw: Any) -> TurnAsk:
        values: dict[str, Any] = dict(
            principal="p", session="s1", command="c1", funding="credit", day=TODAY,
            turnsPerDay=100, sessionMaxTurns=40, holdUsd=0.05, dailyCapUsd=5.0,
        )
        values.update(kw)
        return TurnAsk(**values)

    def test_grantOncePerKey(self) -> None:
        """
        A grant credits once per key; the same grant again is a repeat, the
        key of another grant a conflict.
        """
        ledger = self.ledger()
        self.assertEqual(self.answer(ledger.addGrant("p", 2.0, "purchase", "pay-1", "card")),
                         "granted")
        self.assertEqual(self.answer(ledger.addGrant("p", 2.0, "purchase", "pay-1")), "repeated")
        self.assertEqual(self.answer(ledger.addGrant("q", 2.0, "purchase", "pay-1")), "conflict")
        self.assertEqual(self.answer(ledger.addGrant("p", 3.0, "purchase", "pay-1")), "conflict")
        self.assertEqual(self.answer(ledger.figures("p")), Figures(grantedUsd=2.0))
        self.assertEqual(self.answer(ledger.figures("q")), Figures())

    def test_reserveCountsAndHolds(self) -> None:
        """
        A credit turn reserved is counted and holds its budget; an own key's
        is counted only; the same command again is a repeat that writes
        nothing.
        """
        ledger = self.ledger()
        self.answer(ledger.addGrant("p", 1.0, "operator", "op-1"))
        self.assertEqual(self.answer(ledger.reserveTurn(self.ask())), "reserved")
        self.assertEqual(self.answer(ledger.reserveTurn(self.ask())), "repeated")
        self.assertEqual(
            self.answer(ledger.reserveTurn(self.ask(command="c2", funding="byok", holdUsd=0))),
            "reserved",
        )
        self.assertEqual(self.answer(ledger.figures("p")),
                         Figures(grantedUsd=1.0, heldUsd=0.05, turnsToday=2, heldAllUsd=0.05))
        self.assertEqual(self.answer(ledger.openHolds()), [
            Hold(key="hold:s1:c1", principal="p", amountUsd=0.05, session="s1", command="c1"),
        ])
        turns = self.answer(ledger.turnsOf("s1"))
        self.assertEqual((sorted(turns.reserved), turns.count), (["c1", "c2"], 2))
        self.assertEqual(self.answer(ledger.turnsOf("s9")).count, 0)

    def test_limits(self) -> None:
        """
        The day's turns, the conversation's turns, the credit (balance less
        holds) and the day's pool (debits and holds) refuse a turn, and a
        refused turn writes nothing.
        """
        ledger = self.ledger()
        self.answer(ledger.addGrant("p", 0.1, "operator", "op-1"))
        ask = self.ask(turnsPerDay=2, sessionMaxTurns=1, holdUsd=0)
        self.assertEqual(self.answer(ledger.reserveTurn(ask)), "reserved")
        self.assertEqual(self.answer(ledger.reserveTurn(self.ask(
            command="c2", turnsPerDay=2, sessionMaxTurns=1, holdUsd=0))), "session_turn_limit")
        self.assertEqual(self.answer(ledger.reserveTurn(self.ask(
            session="s2", turnsPerDay=2, holdUsd=0))), "reserved")
        self.assertEqual(self.answer(ledger.reserveTurn(self.ask(
            session="s3", turnsPerDay=2, holdUsd=0))), "daily_turn_limit")
        # Tomorrow is another day.
        self.assertEqual(self.answer(ledger.reserveTurn(self.ask(
            session="s3", turnsPerDay=2, day="2026-12-02", holdUsd=0))), "reserved")
        # $0.1 of credit: two runs' budgets held, then none.
        self.assertEqual(self.answer(ledger.reserveTurn(self.ask(session="s4"))), "reserved")
        self.assertEqual(self.answer(ledger.reserveTurn(self.ask(session="s5"))), "reserved")
        self.assertEqual(self.answer(ledger.reserveTurn(self.ask(session="s6"))), "out_of_credit")
        # The pool counts everyone's holds.
        self.answer(ledger.addGrant("q", 5.0, "operator", "op-2"))
        self.assertEqual(self.answer(ledger.reserveTurn(self.ask(
            principal="q", session="s7", dailyCapUsd=0.1))), "credit_pool_exhausted")
        self.assertEqual(self.answer(ledger.reserveTurn(self.ask(
            principal="q", session="s7", dailyCapUsd=0.2))), "reserved")
        figures = self.answer(ledger.figures("p"))
        self.assertEqual((figures.turnsToday, figures.heldUsd), (4, 0.1))

    def test_balanceEndsAtMostOneBudgetBelowZero(self) -> None:
        """
        Turn after turn charged at its whole budget and a little more: the
        balance never ends further below zero than one run's budget.
        """
        ledger = self.ledger()
        self.answer(ledger.addGrant("p", 0.12, "operator", "op-1"))
        n = 0
        while self.answer(ledger.reserveTurn(self.ask(command=f"c{n}"))) == "reserved":
            self.answer(ledger.chargeRun("p", 0.05, f"run:s1:{n}", "s1", [f"hold:s1:c{n}"]))
            n += 1
        self.assertEqual(n, 3)
        balance = self.answer(ledger.figures("p")).balanceUsd
        self.assertAlmostEqual(balance, -0.03)
        self.assertGreaterEqual(balance, -0.05)

    def test_voidUndoesAReservation(self) -> None:
        """
        A voided turn counts for nothing and holds nothing, and its command
        may be reserved again; voiding twice (or what was never reserved)
        does nothing.
        """
        ledger = self.ledger()
        self.answer(ledger.addGrant("p", 1.0, "operator", "op-1"))
        self.answer(ledger.reserveTurn(self.ask()))
        self.assertTrue(self.answer(ledger.voidTurn("s1", "c1")))
        self.assertFalse(self.answer(ledger.voidTurn("s1", "c1")))
        self.assertFalse(self.answer(ledger.voidTurn("s1", "never")))
        self.assertEqual(self.answer(ledger.figures("p")), Figures(grantedUsd=1.0))
        self.assertEqual(self.answer(ledger.turnsOf("s1")).count, 0)
        self.assertEqual(self.answer(ledger.reserveTurn(self.ask())), "reserved")
        self.assertEqual(self.answer(ledger.figures("p")).turnsToday, 1)

    def test_chargeOnceEndingItsHolds(self) -> None:
        """
        A run is charged once per key and ends the holds named with it, in
        one write; the pool counts the charge.
        """
        ledger = self.ledger()
        self.answer(ledger.addGrant("p", 1.0, "operator", "op-1"))
        self.answer(ledger.reserveTurn(self.ask()))
        self.answer(ledger.reserveTurn(self.ask(command="c2")))
        self.assertTrue(self.answer(ledger.chargeRun("p", 0.02, "run:s1:7", "s1", ["hold:s1:c1"])))
        self.assertFalse(self.answer(ledger.chargeRun("p", 0.02, "run:s1:7", "s1", ["hold:s1:c2"])))
        figures = self.answer(ledger.figures("p"))
        self.assertEqual((figures.balanceUsd, figures.spentUsd, figures.heldUsd,
                          figures.poolTodayUsd), (0.98, 0.02, 0.05, 0.02))
        self.assertEqual([h.key for h in self.answer(ledger.openHolds("s1"))], ["hold:s1:c2"])
        # The hold it ended is ended: no second release.
        self.assertFalse(self.answer(ledger.endHold("hold:s1:c1", "completed")))

    def test_endHoldOnce(self) -> None:
        ledger = self.ledger()
        self.answer(ledger.addGrant("p", 1.0, "operator", "op-1"))
        self.answer(ledger.reserveTurn(self.ask()))
        self.answer(ledger.reserveTurn(self.ask(session="s2")))
        self.assertTrue(self.answer(ledger.endHold("hold:s1:c1", "completed")))
        self.assertFalse(self.answer(ledger.endHold("hold:s1:c1", "completed")))
        self.assertFalse(self.answer(ledger.endHold("hold:s9:c9", "completed")))
        self.assertEqual([h.session for h in self.answer(ledger.openHolds())], ["s2"])
        self.assertEqual(self.answer(ledger.openHolds("s1")), [])
        self.assertEqual(self.answer(ledger.figures("p")).heldUsd, 0.05)

    def test_countTurnOnce(self) -> None:
        """
        A turn counted late (at start) counts on its own day, once.
        """
        ledger = self.ledger()
        self.assertTrue(self.answer(ledger.countTurn("p", "s1", "byok", "c1", "2026-11-30")))
        self.assertFalse(self.answer(ledger.countTurn("p", "s1", "byok", "c1", "2026-11-30")))
        self.assertEqual(self.answer(ledger.figures("p")).turnsToday, 0)
        self.assertEqual(list(self.answer(ledger.turnsOf("s1")).reserved), ["c1"])

    def test_missingKeys(self) -> None:
        ledger = self.ledger()
        self.answer(ledger.addGrant("p", 1.0, "operator", "op-1"))
        self.answer(ledger.chargeRun("p", 0.01, "run:s1:3", "s1"))
        self.assertEqual(self.answer(ledger.missingKeys(["run:s1:3", "run:s1:4", "op-1"])),
                         {"run:s1:4"})
        self.assertEqual(self.answer(ledger.missingKeys([])), set())

    def test_survivesARestart(self) -> None:
        """
        A ledger made again over the same store knows everything written.
        """
        ledger = self.ledger()
        self.answer(ledger.addGrant("p", 1.0, "operator", "op-1"))
        self.answer(ledger.reserveTurn(self.ask()))
        self.answer(ledger.chargeRun("p", 0.01, "run:s1:3", "s1"))
        before = self.answer(ledger.figures("p"))
        ledger.close()
        again = self.ledger()
        self.assertEqual(self.answer(again.figures("p")), before)
        self.assertEqual(self.answer(again.reserveTurn(self.ask())), "repeated")
        self.assertEqual(len(self.answer(again.openHolds())), 1)


class FileLedgerContractTests(LedgerContract, SynchronousTestCase):
    """
    The file ledger keeps the contract.
    """

    def setUp(self) -> None:
        LedgerContract.setUp(self)
        self.path = Path(self.mktemp()) / "ledger.jsonl"

    def make(self) -> LedgerStore:
        return Ledger(path=self.path, clock=self.clock)


class PostgresLedgerContractTests(LedgerContract, SynchronousTestCase):
    """
    The PostgreSQL ledger keeps the contract.
    """

    def setUp(self) -> None:
        LedgerContract.setUp(self)
        self.url = postgres.shared().newDatabase()

    def make(self, host: str = "host-a") -> PostgresLedger:
        return PostgresLedger(runner=InlineRunner(url=self.url, timeoutSeconds=5.0),
                              clock=self.clock, host=host, timeoutSeconds=5.0)

    def test_migratedOnce(self) -> None:
        """
        The schema is made at the first start, at version 1, and a second
        ledger (another host) starting over it changes nothing.
        """
        self.ledger()
        self.ledger()
        rows = postgres.shared().query(self.url, "SELECT version FROM ledger_schema")
        self.assertEqual(rows, [(1,)])

    def test_schemaTooNewRefused(self) -> None:
        """
        A database migrated by a newer host is refused, not written to.
        """
        self.ledger()
        postgres.shared().query(self.url, "INSERT INTO ledger_schema (version) VALUES (99)")
        ledger = self.make()
        self.addCleanup(ledger.close)
        self.failureResultOf(ledger.figures("p"), LedgerUnavailable)

    def test_holdsAreEachHostsOwn(self) -> None:
        """
        On a shared ledger each host sees (and releases) only its own holds,
        while credit and the pool are everyone's.
        """
        a = self.ledger()
        b = self.make("host-b")
        self.addCleanup(b.close)
        self.answer(a.addGrant("p", 1.0, "operator", "op-1"))
        self.answer(a.reserveTurn(self.ask()))
        self.answer(b.reserveTurn(self.ask(session="s2")))
        self.assertEqual([h.session for h in self.answer(a.openHolds())], ["s1"])
        self.assertEqual([h.session for h in self.answer(b.openHolds())], ["s2"])
        self.assertEqual(self.answer(b.figures("p")).heldUsd, 0.1)

    def test_outOfReach(self) -> None:
        """
        A database that does not answer is L{LedgerUnavailable} at once,
        and the same ledger works once it answers.
        """
        self.url = postgres.shared().url("postgres").replace(
            str(postgres.shared().port), str(freeLoopbackPort()))
        ledger = self.make()
        self.addCleanup(ledger.close)
        self.successResultOf(ledger.start())
        self.failureResultOf(ledger.figures("p"), LedgerUnavailable)
        ledger.runner = InlineRunner(url=postgres.shared().newDatabase(), timeoutSeconds=5.0)
        self.assertEqual(self.answer(ledger.figures("p")), Figures())

    def test_describeHidesThePassword(self) -> None:
        self.assertEqual(describe("postgresql://u:secret@db.example:5433/ledger"),
                         "postgresql://db.example:5433/ledger")
        self.assertNotIn("secret", describe("postgresql://u:secret@/ledger?host=/run"))

    def test_hostIdentityKept(self) -> None:
        folder = Path(self.mktemp())
        made = hostIdentity(folder)
        self.assertTrue(made.startswith("host-"))
        self.assertEqual(hostIdentity(folder), made)

    def test_migrationsAreNumberedInOrder(self) -> None:
        versions = [v for v, _ in _postgres.MIGRATIONS]
        self.assertEqual(versions, list(range(1, len(versions) + 1)))
