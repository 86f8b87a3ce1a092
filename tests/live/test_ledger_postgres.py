"""
The shared ledger on a real PostgreSQL with real connection pools
(L{twisted.enterprise.adbapi} threads, the reactor running), as a fleet
uses it (issue 19, "What must show"): two hosts (two pools) spending one
account at once never go further below zero than one run's budget; the
daily turn limit and the daily pool hold across both; a grant retried on
the other host applies once; PostgreSQL stopped and started mid-load
refuses turns with C{ledger_unavailable} at once while down and takes them
again within seconds after.
"""

from __future__ import annotations

import time
from typing import Any

from twisted.internet import reactor
from twisted.internet.defer import Deferred, gatherResults
from twisted.trial.unittest import TestCase

from vehicle.public import LedgerUnavailable, PostgresLedger, TurnAsk, utcDay
from vehicle.public._open import runnerFor

from tests.support import postgres
from tests.support.live import sleep


BUDGET = 0.05


class FleetTests(TestCase):
    timeout = 120

    def setUp(self) -> None:
        postgres.requirePostgres()
        self.cluster = postgres.shared()
        self.url = self.cluster.newDatabase()

    def host(self, name: str, url: str | None = None, timeout: float = 2.0) -> PostgresLedger:
        """
        One host's ledger: a pool of its own on the shared database.
        """
        ledger = PostgresLedger(
            runner=runnerFor(reactor, url or self.url, timeout), clock=reactor, host=name,
            timeoutSeconds=timeout,
        )
        self.addCleanup(ledger.close)
        return ledger

    def ask(self, session: str, command: str, **kw: Any) -> TurnAsk:
        values: dict[str, Any] = dict(
            principal="p", session=session, command=command, funding="credit",
            day=utcDay(reactor.seconds()), turnsPerDay=1000, sessionMaxTurns=1000,
            holdUsd=BUDGET, dailyCapUsd=100.0,
        )
        values.update(kw)
        return TurnAsk(**values)

    async def spend(self, ledger: PostgresLedger, session: str, n: int, cost: float) -> int:
        """
        Turn after turn on C{ledger}, each charged C{cost} (its holds ended
        with the charge) as soon as it is reserved: how many were taken.
        """
        taken = 0
        for i in range(n):
            outcome = await ledger.reserveTurn(self.ask(session, f"c{i}"))
            if outcome != "reserved":
                continue
            taken += 1
            await ledger.chargeRun("p", cost, f"run:{session}:{i}", session,
                                   [f"hold:{session}:c{i}"])
        return taken

    async def test_twoHostsOneAccount(self) -> None:
        """
        Two hosts, each with four sessions turning at once on $1.02 of
        credit, each run costing its whole budget: the balance ends below
        zero (the last turn was checked with $0.02 left) by no more than one
        run's budget, whatever the interleaving.
        """
        a, b = self.host("host-a"), self.host("host-b")
        await a.start()
        await b.start()
        await a.addGrant("p", 1.02, "operator", "op-1")
        cost = BUDGET
        taken = await gatherResults([
            Deferred.fromCoroutine(self.spend(ledger, f"{ledger.host}-s{i}", 10, cost))
            for ledger in (a, b) for i in range(4)
        ])
        figures = await b.figures("p")
        self.assertGreaterEqual(figures.balanceUsd, -BUDGET, (taken, figures))
        self.assertLess(figures.balanceUsd, 0.0)
        self.assertEqual(figures.heldUsd, 0.0)
        self.assertEqual(sum(taken), 21)
        self.assertAlmostEqual(figures.spentUsd, 21 * cost)

    async def test_limitsAcrossHosts(self) -> None:
        """
        The day's turns of one principal and the day's pool are counted
        across both hosts: asked at once, exactly the limit is taken.
        """
        a, b = self.host("host-a"), self.host("host-b")
        await a.addGrant("p", 10.0, "operator", "op-1")
        asks = [(ledger, self.ask(f"{ledger.host}-s{i}", "c1", holdUsd=0, turnsPerDay=7))
                for i in range(6) for ledger in (a, b)]
        outcomes = await gatherResults([ledger.reserveTurn(ask) for ledger, ask in asks])
        self.assertEqual(outcomes.count("reserved"), 7)
        self.assertEqual(set(outcomes) - {"reserved"}, {"daily_turn_limit"})
        # The pool: $0.30 a day, $0.05 held per credit turn.
        await a.addGrant("q", 10.0, "operator", "op-2")
        asks = [(ledger, self.ask(f"{ledger.host}-q{i}", "c1", principal="q", dailyCapUsd=0.3))
                for i in range(6) for ledger in (a, b)]
        outcomes = await gatherResults([ledger.reserveTurn(ask) for ledger, ask in asks])
        self.assertEqual(outcomes.count("reserved"), 6)
        self.assertEqual(set(outcomes) - {"reserved"}, {"credit_pool_exhausted"})
        self.assertAlmostEqual((await a.figures("q")).heldAllUsd, 0.3)

    async def test_grantRetriedOnTheOtherHost(self) -> None:
        """
        A payment delivered to both hosts at once, and again, credits once.
        """
        a, b = self.host("host-a"), self.host("host-b")
        outcomes = await gatherResults([
            ledger.addGrant("p", 2.0, "purchase", "purchase:pay-1")
            for ledger in (a, b, a, b)
        ])
        self.assertEqual(sorted(outcomes), ["granted", "repeated", "repeated", "repeated"])
        self.assertEqual((await a.figures("p")).grantedUsd, 2.0)

    async def test_postgresStoppedAndStartedMidLoad(self) -> None:
        """
        Turns flowing, PostgreSQL stops: each turn is refused
        L{LedgerUnavailable} within the timeout, never left hanging, and
        nothing half-written; PostgreSQL starts again: turns are taken again
        within seconds, and the figures are the turns that were answered
        C{reserved}.
        """
        cluster = postgres.Cluster()
        self.addCleanup(cluster.destroy)
        ledger = self.host("host-a", cluster.newDatabase(), timeout=1.0)
        await ledger.addGrant("p", 100.0, "operator", "op-1")
        reserved = 0
        for i in range(5):
            self.assertEqual(await ledger.reserveTurn(self.ask("s1", f"a{i}", holdUsd=0)),
                             "reserved")
            reserved += 1
        await _inThread(cluster.stop)
        for i in range(3):
            began = time.monotonic()
            with self.assertRaises(LedgerUnavailable):
                await ledger.reserveTurn(self.ask("s1", f"b{i}", holdUsd=0))
            self.assertLess(time.monotonic() - began, 3.0)
        self.flushLoggedErrors()
        await _inThread(cluster.start)
        began = time.monotonic()
        while True:
            try:
                outcome = await ledger.reserveTurn(self.ask("s1", "c0", holdUsd=0))
                break
            except LedgerUnavailable:
                self.assertLess(time.monotonic() - began, 10.0, "no turn within 10 s of the return")
                await sleep(0.2)
        self.flushLoggedErrors()
        self.assertEqual(outcome, "reserved")
        figures = await ledger.figures("p")
        self.assertEqual(figures.turnsToday, reserved + 1)


def _inThread(f: Any) -> Deferred:
    from twisted.internet.threads import deferToThread

    return deferToThread(f)
