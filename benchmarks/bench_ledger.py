"""
Benchmark of the public ledger (run on demand, not in the suite): public
turns reserved per second (the step every public turn takes before it is
accepted: the limits checked, the turn counted, the run's budget held),
with the file ledger and with PostgreSQL, one host and two, side by side
in one run.

Each "host" is one ledger (a file of its own; or a connection pool of its
own on one shared PostgreSQL database, four threads), driven by eight
conversations at once, each sending its turns one after another; every
turn is a credit turn of one of 32 accounts.  Two file hosts are two
unrelated files (each would let an account spend its balance twice: the
reason for PostgreSQL); two PostgreSQL hosts share every account.

Usage: .venv/bin/python benchmarks/bench_ledger.py [--turns N]
(PostgreSQL is started from Debian's package, as the tests do.)
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from twisted.internet import defer, task

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from vehicle.public import Ledger, LedgerStore, PostgresLedger, TurnAsk, utcDay  # noqa: E402
from vehicle.public._open import runnerFor  # noqa: E402

from tests.support import postgres  # noqa: E402


CONVERSATIONS = 8
ACCOUNTS = 32


async def drive(reactor: Any, ledgers: list[LedgerStore], turns: int) -> float:
    """
    C{turns} turns over C{ledgers}, C{CONVERSATIONS} at once on each:
    turns reserved per second.
    """
    day = utcDay(reactor.seconds())
    for ledger in ledgers:
        await ledger.start()
    for n in range(ACCOUNTS):
        await ledgers[0].addGrant(f"p{n}", 1e6, "operator", f"operator:bench-{n}")
    each = turns // (len(ledgers) * CONVERSATIONS)

    async def conversation(ledger: LedgerStore, name: str) -> int:
        taken = 0
        for i in range(each):
            outcome = await ledger.reserveTurn(TurnAsk(
                principal=f"p{hash(name) % ACCOUNTS}", session=name, command=f"c{i}",
                funding="credit", day=day, turnsPerDay=10**9, sessionMaxTurns=10**9,
                holdUsd=0.05, dailyCapUsd=1e9,
            ))
            taken += outcome == "reserved"
        return taken

    began = time.perf_counter()
    taken = await defer.gatherResults([
        defer.Deferred.fromCoroutine(conversation(ledger, f"h{h}-s{c}"))
        for h, ledger in enumerate(ledgers) for c in range(CONVERSATIONS)
    ])
    elapsed = time.perf_counter() - began
    return sum(taken) / elapsed


async def main(reactor: Any, turns: int) -> None:
    root = Path(tempfile.mkdtemp(prefix="vehicle-bench-ledger-"))
    cluster = postgres.Cluster()
    results = []
    try:
        for hosts in (1, 2):
            files: list[LedgerStore] = [
                Ledger(path=root / f"{hosts}-{h}" / "ledger.jsonl", clock=reactor)
                for h in range(hosts)
            ]
            results.append(("file", hosts, await drive(reactor, files, turns)))
            for ledger in files:
                ledger.close()
            url = cluster.newDatabase()
            pools: list[LedgerStore] = [
                PostgresLedger(runner=runnerFor(reactor, url, 5.0), clock=reactor,
                               host=f"host-{h}", timeoutSeconds=5.0)
                for h in range(hosts)
            ]
            results.append(("postgresql", hosts, await drive(reactor, pools, turns)))
            for ledger in pools:
                ledger.close()
    finally:
        cluster.destroy()
    print(f"public turns reserved per second ({turns} turns a run, {CONVERSATIONS} "
          f"conversations at once per host, {ACCOUNTS} accounts):")
    print(f"{'ledger':<12}{'hosts':>6}{'turns/s':>12}")
    for kind, hosts, rate in results:
        print(f"{kind:<12}{hosts:>6}{rate:>12.0f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=4000)
    args = parser.parse_args()
    task.react(lambda reactor: defer.Deferred.fromCoroutine(main(reactor, args.turns)))
