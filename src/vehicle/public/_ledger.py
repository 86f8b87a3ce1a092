# -*- test-case-name: tests.test_public -*-
"""
The ledger of public spending: C{public/ledger.jsonl}, append-only.  Rows are
C{grant} (credit in), C{debit} (a credit run's cost) and C{turn} (every
public turn), each with its UTC C{day}; grants and debits carry an
idempotency key, so a payment delivered twice credits once.  Balances,
today's turns and today's pool spend are folded from the rows at start and
kept current in memory.
"""

from __future__ import annotations

import datetime
from collections import defaultdict
from pathlib import Path
from typing import Any

from attrs import define, field
from twisted.internet.interfaces import IReactorTime

from vehicle.session._values import isoTimestamp
from vehicle.store import JsonlLog


def utcDay(seconds: float) -> str:
    return datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc).strftime("%Y-%m-%d")


@define(eq=False)
class Ledger:
    """
    Credit and turns of public callers.
    """

    path: Path
    clock: IReactorTime
    _log: JsonlLog | None = None
    granted: dict[str, float] = field(factory=lambda: defaultdict(float))
    spent: dict[str, float] = field(factory=lambda: defaultdict(float))
    turns: dict[tuple[str, str], int] = field(factory=lambda: defaultdict(int))
    sessionTurns: dict[str, int] = field(factory=lambda: defaultdict(int))
    pool: dict[str, float] = field(factory=lambda: defaultdict(float))
    keys: set[str] = field(factory=set)
    #: key -> (principal, amount) of each grant, to tell a repeat from a clash.
    grants: dict[str, tuple[str, float]] = field(factory=dict)
    seen: set[str] = field(factory=set)

    def open(self) -> None:
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        self._log, rows = JsonlLog.open(self.path)
        for row in rows:
            self._fold(row)

    def close(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None

    def today(self) -> str:
        return utcDay(self.clock.seconds())

    def _fold(self, row: dict[str, Any]) -> None:
        principal = row.get("principal", "")
        self.seen.add(principal)
        if row.get("key"):
            self.keys.add(row["key"])
        kind = row.get("type")
        if kind == "grant":
            self.granted[principal] += float(row["amountUsd"])
            if row.get("key"):
                self.grants[row["key"]] = (principal, float(row["amountUsd"]))
        elif kind == "debit":
            self.spent[principal] += float(row["amountUsd"])
            self.pool[row["day"]] += float(row["amountUsd"])
        elif kind == "turn":
            self.turns[(principal, row["day"])] += 1
            if row.get("session"):
                self.sessionTurns[row["session"]] += 1

    def _append(self, row: dict[str, Any]) -> dict[str, Any]:
        assert self._log is not None, "the ledger is not open"
        row = {**row, "day": self.today(), "at": isoTimestamp(self.clock.seconds())}
        self._log.append(row)
        self._fold(row)
        return row

    def balance(self, principal: str) -> float:
        return round(self.granted[principal] - self.spent[principal], 9)

    def grant(
        self, principal: str, amountUsd: float, source: str, key: str, note: str | None = None
    ) -> bool:
        """
        Credit C{principal} once per C{key}; returns whether it was new.
        """
        if key in self.keys:
            return False
        row: dict[str, Any] = {
            "type": "grant", "principal": principal, "amountUsd": amountUsd,
            "source": source, "key": key,
        }
        if note:
            row["note"] = note
        self._append(row)
        return True

    def debit(self, principal: str, amountUsd: float, key: str, session: str) -> bool:
        if key in self.keys:
            return False
        self._append(
            {"type": "debit", "principal": principal, "amountUsd": amountUsd,
             "key": key, "session": session}
        )
        return True

    def turn(self, principal: str, session: str, funding: str) -> None:
        self._append({"type": "turn", "principal": principal, "session": session,
                      "funding": funding})

    def turnsToday(self, principal: str) -> int:
        return self.turns[(principal, self.today())]

    def poolToday(self) -> float:
        return self.pool[self.today()]
