# -*- test-case-name: tests.unit.test_ledger_contract -*-
"""
Which ledger a host keeps: PostgreSQL when C{VEHICLE_LEDGER_URL} says so
(shared by a fleet), else C{public/ledger.jsonl} (this host's own).
"""

from __future__ import annotations

import uuid
from pathlib import Path

from twisted.internet.interfaces import IReactorCore, IReactorThreads, IReactorTime

from vehicle.metrics import Metrics, unserved
from vehicle.public._contract import LedgerStore
from vehicle.public._ledger import Ledger
from vehicle.public._postgres import AdbapiRunner, InlineRunner, PostgresLedger, Runner, describe
from vehicle.settings import PublicSettings
from vehicle.store import writeAtomic


def hostIdentity(folder: Path) -> str:
    """
    This host's name to a shared ledger: made once (C{host-id} in its
    C{public/} folder, written atomically) and kept, so a restarted host
    knows its holds.
    """
    path = folder / "host-id"
    try:
        known = path.read_text(encoding="ascii").strip()
    except FileNotFoundError:
        known = ""
    if known:
        return known
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    made = "host-" + uuid.uuid4().hex[:16]
    writeAtomic(path, made.encode("ascii") + b"\n")
    return made


def runnerFor(reactor: IReactorTime, url: str, timeoutSeconds: float) -> Runner:
    """
    psycopg in the reactor's connection pool threads; inline on a reactor
    without threads (a test's memory reactor).
    """
    if IReactorThreads.providedBy(reactor) and IReactorCore.providedBy(reactor):
        return AdbapiRunner(reactor=reactor, url=url, timeoutSeconds=timeoutSeconds)
    return InlineRunner(url=url, timeoutSeconds=timeoutSeconds)


def openLedger(
    settings: PublicSettings, folder: Path, reactor: IReactorTime, metrics: Metrics | None = None
) -> LedgerStore:
    """
    The host's ledger, started: the file read, or PostgreSQL's schema
    migrated (or, when it is out of reach, migrated at the first request
    that finds it back).

    @param folder: the data dir's C{public/}.
    @param metrics: where PostgreSQL's latency is told (the file's is its
        log's fsync, which the store tells).
    """
    ledger: LedgerStore
    if settings.ledgerUrl:
        ledger = PostgresLedger(
            runner=runnerFor(reactor, settings.ledgerUrl, settings.ledgerTimeoutSeconds),
            clock=reactor,
            host=hostIdentity(folder),
            where=describe(settings.ledgerUrl),
            timeoutSeconds=settings.ledgerTimeoutSeconds,
            metrics=metrics or unserved(),
        )
    else:
        ledger = Ledger(path=folder / "ledger.jsonl", clock=reactor)
    ledger.start()
    return ledger
