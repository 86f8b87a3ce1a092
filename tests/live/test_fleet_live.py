"""
Two hosts on one PostgreSQL (issue 19, "What must show"): two C{twistd
vehicle} processes, each with its own data dir, in public mode on the same
C{VEHICLE_LEDGER_URL}, driven directly with gardend's headers, with real pi
on the scripted model (a run costs $0.00375).

One account spending from both at once never goes further below zero
than one run's budget; the day's turns and the day's pool hold across
both; a grant retried on the other host applies once; a host killed
(SIGKILL) as its run settles leaves the run charged once and its hold
ended once, after its restart; PostgreSQL stopped and started again under
load refuses public turns at once with C{ledger_unavailable}, leaves
members' sessions alone, and takes turns again within seconds.
"""

from __future__ import annotations

import time
from typing import Any

from twisted.internet.defer import Deferred, gatherResults
from twisted.internet.threads import deferToThread
from twisted.trial.unittest import TestCase

from tests.support import postgres
from tests.support.fleet import RUN_COST, FleetHost
from tests.support.live import sleep
from tests.support.public import ACCOUNT, account


#: A run's budget a little over what a scripted run costs, so that a few
#: credit turns can be under way at once on a few cents.
BUDGET = 0.004


def gather(*coroutines: Any) -> Deferred[list[Any]]:
    return gatherResults([Deferred.fromCoroutine(c) for c in coroutines])


class TwoHostsTests(TestCase):
    """
    Two hosts on one ledger.
    """

    timeout = 240

    def setUp(self) -> None:
        postgres.requirePostgres()
        self.cluster = postgres.shared()
        self.url = self.cluster.newDatabase()

    async def pair(self, cluster: Any = None, **env: str) -> tuple[FleetHost, FleetHost]:
        url = self.url if cluster is None else cluster.newDatabase()
        self.url = url
        hosts = (FleetHost(self, url, metrics=True, **env),
                 FleetHost(self, url, metrics=True, **env))
        await gather(*(host.start() for host in hosts))
        return hosts

    def rows(self, sql: str, *args: Any, cluster: Any = None) -> list[tuple[Any, ...]]:
        return (cluster or self.cluster).query(self.url, sql, *args)

    async def settledInLedger(self, debits: int, cluster: Any = None) -> None:
        """
        Wait (at most 20 s) until the ledger has C{debits} debits and no
        open hold.
        """
        for _ in range(200):
            [(charged, open_)] = self.rows(
                "SELECT count(*) FILTER (WHERE kind = 'debit'),"
                " count(*) FILTER (WHERE kind = 'hold' AND open) FROM ledger_rows",
                cluster=cluster)
            if charged == debits and open_ == 0:
                return
            await sleep(0.1)
        self.fail(f"the ledger has {charged} debits and {open_} open holds, "
                  f"not {debits} and none")

    async def test_oneAccountFromBothHosts(self) -> None:
        """
        $0.02 of credit, a $0.004 run budget, three conversations of one
        account on each host, every one prompted at once, round after
        round until none is taken: the balance ends below zero by less
        than one run's budget, both hosts say the same, every run is
        charged once and no hold is left open.
        """
        a, b = await self.pair(VEHICLE_SIGNUP_GRANT_USD="0.02",
                               VEHICLE_PUBLIC_RUN_MAX_COST_USD=str(BUDGET))
        who = "cognito:spender"
        sessions = [(host, await host.conversation(who)) for host in (a, b) for _ in range(3)]
        accepted = 0
        for round in range(10):
            answers = await gather(*(host.prompt(sid, who, f"r{round}") for host, sid in sessions))
            taken = [(host, sid) for (host, sid), (code, _) in zip(sessions, answers)
                     if code == 202]
            self.assertEqual({frame["code"] for code, frame in answers if code != 202}
                             - {"out_of_credit"}, set(), answers)
            if not taken:
                break
            accepted += len(taken)
            await gather(*(host.completed(sid, f"r{round}", who) for host, sid in taken))
            # Each run charged, each hold ended, before the next round asks.
            await self.settledInLedger(accepted)
        else:
            self.fail("credit never ran out")
        await self.settledInLedger(accepted)
        balances = []
        for host in (a, b):
            code, frame = await host.asAccount(who, "GET", "/account")
            balances.append(frame["value"]["credit"]["balanceUsd"])
        self.assertEqual(balances[0], balances[1])
        self.assertLess(balances[0], 0)
        self.assertGreater(balances[0], -BUDGET)
        self.assertAlmostEqual(balances[0], 0.02 - accepted * RUN_COST, places=9)
        # Both hosts took turns of the account.
        hosts = {host for (host,) in self.rows(
            "SELECT DISTINCT host FROM ledger_rows WHERE kind = 'turn'")}
        self.assertEqual(len(hosts), 2)

    async def test_dailyLimitsAcrossHosts(self) -> None:
        """
        The day's turns of one visitor, and the day's credit pool of every
        account together, are counted across both hosts: six turns asked
        at once on six conversations (three a host) take exactly the
        limit.
        """
        a, b = await self.pair(VEHICLE_PUBLIC_TURNS_PER_DAY="3",
                               VEHICLE_CREDIT_DAILY_CAP_USD="0.01",
                               VEHICLE_PUBLIC_RUN_MAX_COST_USD=str(BUDGET))
        visits = [(host, await host.conversation()) for host in (a, b) for _ in range(3)]
        answers = await gather(*(host.prompt(sid) for host, sid in visits))
        codes = sorted((code, frame.get("code")) for code, frame in answers)
        self.assertEqual(codes, [(202, None)] * 3 + [(429, "daily_turn_limit")] * 3)
        # The pool: $0.01 a day, each credit turn holding $0.004 while it runs
        # (a scripted run takes about two seconds: all six are asked before
        # any settles).
        credit = [(host, f"cognito:pool-{host.portNumber}-{i}") for host in (a, b)
                  for i in range(3)]
        conversations = [(host, who, await host.conversation(who)) for host, who in credit]
        answers = await gather(*(host.prompt(sid, who) for host, who, sid in conversations))
        codes = sorted((code, frame.get("code")) for code, frame in answers)
        self.assertEqual(codes, [(202, None)] * 3 + [(503, "credit_pool_exhausted")] * 3)
        refused = [await host.scrape() for host in (a, b)]
        self.assertEqual(sum(s.get(("vehicle_public_turns_refused_total",
                                    (("reason", "credit_pool_exhausted"),)), 0)
                             for s in refused), 3)

    async def test_grantRetriedOnTheOtherHost(self) -> None:
        """
        A purchase's grant delivered to both hosts at once, and again,
        credits once.
        """
        a, b = await self.pair(VEHICLE_SIGNUP_GRANT_USD="0.5")
        grant = {"principal": "cognito:buyer", "amountUsd": 2.0, "source": "purchase",
                 "idempotencyKey": "pay-1"}
        answers = await gather(*(
            host.call("POST", "/account/grants", dict(grant, requestId=f"g{i}"),
                      principal="owner", role="owner")
            for i, host in enumerate((a, b, a, b))
        ))
        self.assertEqual([code for code, _ in answers], [200] * 4)
        self.assertEqual(sorted(frame["value"]["granted"] for _, frame in answers),
                         [False, False, False, True])
        for host in (a, b):
            code, frame = await host.asAccount("cognito:buyer", "GET", "/account")
            self.assertEqual(frame["value"]["credit"]["grantedUsd"], 2.5)
        self.assertEqual(self.rows(
            "SELECT count(*) FROM ledger_rows WHERE key = 'purchase:pay-1'"), [(1,)])

    async def test_hostKilledAsItCharges(self) -> None:
        """
        A host killed with SIGKILL the moment its run settles (its charge
        and the end of its hold in flight, or not yet sent): restarted, it
        settles the run, charged once, its hold ended once, never held and
        charged both; the other host serves on meanwhile.
        """
        a, b = await self.pair(VEHICLE_SIGNUP_GRANT_USD="1")
        who = "cognito:killed"
        for n in range(2):
            sid = await a.conversation(who)
            code, frame = await a.prompt(sid, who, "p1")
            self.assertEqual(code, 202, frame)
            await a.waitFor(sid, lambda e: e["type"] == "run.settled",
                            **dict(ACCOUNT, principal=who, headers=account()))
            await a.kill()
            self.assertEqual((await b.asAccount(who, "GET", "/account"))[0], 200)
            await a._startHost()
            await self.settledInLedger(n + 1)
        holds = self.rows("SELECT key FROM ledger_rows WHERE kind = 'hold'")
        releases = self.rows("SELECT hold_key, count(*) FROM ledger_rows"
                             " WHERE kind = 'release' GROUP BY hold_key")
        self.assertEqual(sorted(k for (k,) in holds), sorted(k for k, _ in releases))
        self.assertEqual({count for _, count in releases}, {1})
        code, frame = await b.asAccount(who, "GET", "/account")
        self.assertAlmostEqual(frame["value"]["credit"]["spentUsd"], 2 * RUN_COST, places=9)

    async def test_postgresStoppedAndStartedUnderLoad(self) -> None:
        """
        Visitors' turns flowing on both hosts and a member's session on one;
        PostgreSQL stops: each public turn is refused C{ledger_unavailable}
        at once, the member's prompt runs; PostgreSQL starts again: public
        turns are taken within seconds, and the ledger counts exactly the
        turns that were answered 202.
        """
        cluster = postgres.Cluster()
        self.addCleanup(cluster.destroy)
        a, b = await self.pair(cluster, VEHICLE_LEDGER_TIMEOUT_SECONDS="1",
                               VEHICLE_PUBLIC_TURNS_PER_DAY="1000")
        member = await a.create()
        visits = [(host, await host.conversation()) for host in (a, b) for _ in range(2)]
        taken = 0

        async def turns(round: str) -> list[int]:
            answers = await gather(*(host.prompt(sid, requestId=round) for host, sid in visits))
            codes = [code for code, _ in answers]
            done = [(host, sid) for (host, sid), code in zip(visits, codes) if code == 202]
            await gather(*(host.completed(sid, round) for host, sid in done))
            return codes

        taken += (await turns("before")).count(202)
        self.assertEqual(taken, 4)
        await deferToThread(cluster.stop)
        began = time.monotonic()
        answers = await gather(*(host.prompt(sid, requestId="down") for host, sid in visits))
        self.assertLess(time.monotonic() - began, 4.0)
        self.assertEqual({(code, frame["code"]) for code, frame in answers},
                         {(503, "ledger_unavailable")})
        code, frame = await a.command(member, "prompt", "m1", text="hello")
        self.assertEqual(code, 202, frame)
        await a.waitFor(member, lambda e: e["type"] == "command.completed")
        samples = await a.scrape()
        self.assertEqual(samples[("vehicle_public_turns_refused_total",
                                  (("reason", "ledger_unavailable"),))], 2)
        self.assertGreater(samples[("vehicle_ledger_duration_seconds_count",
                                    (("operation", "reserveTurn"),
                                     ("outcome", "unavailable")))], 0)
        await deferToThread(cluster.start)
        began = time.monotonic()
        for attempt in range(100):
            codes = await turns(f"after-{attempt}")
            taken += codes.count(202)
            if codes == [202] * 4:
                break
            self.assertLess(time.monotonic() - began, 15.0, codes)
            await sleep(0.2)
        self.assertEqual(self.rows("SELECT count(*) FROM ledger_rows WHERE kind = 'turn'",
                                   cluster=cluster), [(taken,)])
