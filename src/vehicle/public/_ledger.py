# -*- test-case-name: tests.unit.test_ledger,tests.unit.test_ledger_contract -*-
"""
The ledger of public spending in one host's file: C{public/ledger.jsonl},
append-only, the default L{LedgerStore}.  Rows are
C{grant} (credit in), C{debit} (a credit run's cost), C{turn} (every
public turn; a reserved credit turn's row carries its run's hold,
C{holdUsd}), C{hold} (a credit turn's run budget, spoken for from the
moment the turn is accepted), C{release} (the end of a hold) and C{void}
(a reserved turn whose command was not accepted, undone), each with
its UTC C{day}.  Every row carries an idempotency key (a turn's names its
command), so a payment delivered twice credits once, a turn counts once, a
run is debited once and a hold ends once.  Balances, open holds, today's turns and today's pool spend are
folded from the rows at start and kept current in memory: nothing else
about money is kept.
"""

from __future__ import annotations

import datetime
from collections import defaultdict
from pathlib import Path
from typing import ClassVar, Iterable

from attrs import define, evolve, field
from twisted.internet.defer import Deferred, succeed
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger

from vehicle.public._contract import (
    GRANT_CONFLICT,
    GRANT_REPEATED,
    GRANTED,
    REPEATED,
    RESERVED,
    Figures,
    Hold,
    SessionTurns,
    TurnAsk,
    holdKey,
    releaseKey,
    turnKey,
)
from vehicle.public._rows import (
    DebitRow,
    GrantRow,
    HoldRow,
    KnownRow,
    LedgerRow,
    ReleaseRow,
    TurnRow,
    VoidRow,
    rowOf,
)
from vehicle.protocol import toObject
from vehicle.session import isoTimestamp, storageError
from vehicle.store import JsonlLog


def _seconds(at: str) -> float:
    """
    A row's C{at} (ISO 8601, UTC) as POSIX seconds; 0 when it has none.
    """
    try:
        return datetime.datetime.fromisoformat(at.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0


def utcDay(seconds: float) -> str:
    return datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc).strftime("%Y-%m-%d")


@define(eq=False)
class Ledger:
    """
    Credit and turns of public callers.
    """

    _logger: ClassVar[Logger] = Logger()

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
    #: key -> (principal, amount, session) of each hold not yet released.
    holds: dict[str, tuple[str, float, str]] = field(factory=dict)
    #: turn key -> (principal, day, session, reserved at) of each named turn.
    turnRows: dict[str, tuple[str, str, str, float]] = field(factory=dict)
    #: The file is one host's own: every hold in it is this host's.
    host: str = ""
    straySweepSeconds: float = 0.0

    def open(self) -> None:
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        self._log, lines = JsonlLog.open(self.path)
        for line in lines:
            self._fold(rowOf(line))

    def _reopenLog(self) -> None:
        """
        Open the log afresh after the disk refused a row.  Its rows are not
        folded again: memory already holds every row written (a torn one is
        cut as the log opens), and the rows refused after the fact too.
        """
        assert self._log is not None
        try:
            self._log.close()
        except OSError:
            pass
        self._log, _ = JsonlLog.open(self.path)

    def close(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None

    def today(self) -> str:
        return utcDay(self.clock.seconds())

    def _fold(self, row: LedgerRow) -> None:
        if row.key:
            self.keys.add(row.key)
        if isinstance(row, GrantRow):
            self.granted[row.principal] += row.amountUsd
            if row.key:
                self.grants[row.key] = (row.principal, float(row.amountUsd))
        elif isinstance(row, DebitRow):
            self.spent[row.principal] += row.amountUsd
            self.pool[row.day] += row.amountUsd
            # A debit may end its run's holds in the same row.
            for hold in row.holds or ():
                if self.holds.pop(hold, None) is not None:
                    self.keys.add(releaseKey(hold))
        elif isinstance(row, TurnRow):
            self._foldTurn(row)
        elif isinstance(row, VoidRow):
            self._void(row.turn)
        elif isinstance(row, HoldRow):
            self.holds[row.key] = (row.principal, float(row.amountUsd), row.session)
        elif isinstance(row, ReleaseRow):
            self.holds.pop(row.hold, None)

    def _foldTurn(self, row: TurnRow) -> None:
        self.turns[(row.principal, row.day)] += 1
        if row.session:
            self.sessionTurns[row.session] += 1
        if row.key:
            self.turnRows[row.key] = (row.principal, row.day, row.session, _seconds(row.at))
        if row.holdUsd and row.command is not None:
            # A reserved credit turn holds its run's budget in the same row.
            hold = holdKey(row.session, row.command)
            self.keys.add(hold)
            self.holds[hold] = (row.principal, float(row.holdUsd), row.session)

    def _void(self, key: str) -> None:
        """
        Undo the turn C{key} and its hold, as if never reserved: its keys
        may be reserved again.
        """
        counted = self.turnRows.pop(key, None)
        if counted is None:
            return
        principal, day, session, _ = counted
        self.turns[(principal, day)] -= 1
        if session:
            self.sessionTurns[session] -= 1
        self.keys.discard(key)
        hold = "hold:" + key.removeprefix("turn:")
        self.holds.pop(hold, None)
        self.keys.discard(hold)

    def _append(
        self, row: KnownRow, day: str | None = None, afterTheFact: bool = False
    ) -> None:
        """
        Write C{row} and count it.

        @param afterTheFact: the row follows an effect already durable
            elsewhere (a command accepted, a run settled): a disk that
            refuses it must not undo that effect's answer, so the row
            counts in memory all the same, and start rebuilds it from the
            sessions' logs (turns counted, settled runs charged, open holds
            released).  Otherwise (a grant) a refused row counts for
            nothing and the request is answered C{storage_unavailable}.
        """
        assert self._log is not None, "the ledger is not open"
        row = evolve(row, day=day or self.today(), at=isoTimestamp(self.clock.seconds()))
        try:
            if self._log.failed:
                self._reopenLog()
            self._log.append(toObject(row))
        except OSError as e:
            # The log refuses rows from now on: it is opened afresh before
            # the next one.
            if not afterTheFact:
                raise storageError(e) from e
            self._logger.warn(
                "the ledger could not write a {kind} row ({error}); it counts until "
                "the host restarts, which rebuilds it from the sessions' logs",
                kind=row.type, error=e.strerror or e,
            )
        self._fold(row)

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
        self._append(GrantRow(
            principal=principal, amountUsd=amountUsd, source=source, key=key, note=note or None,
        ))
        return True

    def debit(self, principal: str, amountUsd: float, key: str, session: str) -> bool:
        if key in self.keys:
            return False
        self._append(
            DebitRow(principal=principal, amountUsd=amountUsd, key=key, session=session),
            afterTheFact=True,
        )
        return True

    def turn(
        self, principal: str, session: str, funding: str, command: str | None = None,
        day: str | None = None,
    ) -> bool:
        """
        Count one public turn, once per command (when named); C{day} for a
        turn counted late (at start), the day it was accepted.
        """
        key = turnKey(session, command) if command is not None else None
        if key is not None and key in self.keys:
            return False
        self._append(
            TurnRow(principal=principal, session=session, funding=funding, key=key),
            day, afterTheFact=True,
        )
        return True

    def hold(self, principal: str, amountUsd: float, session: str, command: str) -> bool:
        """
        Speak for C{amountUsd} of C{principal}'s credit for the run of
        C{command}, once per command; returns whether it was new.
        """
        key = holdKey(session, command)
        if key in self.keys:
            return False
        self._append(
            HoldRow(principal=principal, amountUsd=amountUsd, key=key, session=session,
                    command=command),
            afterTheFact=True,
        )
        return True

    def release(self, key: str, reason: str) -> bool:
        """
        End the open hold C{key}; returns whether it was open.  A hold ends
        once: a second release (or one of a hold never made) writes nothing.
        """
        held = self.holds.get(key)
        if held is None:
            return False
        principal, _, session = held
        self._append(
            ReleaseRow(principal=principal, hold=key, key=releaseKey(key), session=session,
                       reason=reason),
            afterTheFact=True,
        )
        return True

    def held(self, principal: str | None = None) -> float:
        """
        What open holds speak for: C{principal}'s, or everyone's.
        """
        return round(
            0.0 + sum(amount for who, amount, _ in self.holds.values()
                if principal is None or who == principal),
            9,
        )

    def holdsOf(self, session: str) -> list[str]:
        return [key for key, (_, _, s) in self.holds.items() if s == session]

    def turnsToday(self, principal: str) -> int:
        return self.turns[(principal, self.today())]

    def poolToday(self) -> float:
        return self.pool[self.today()]

    # -- the ledger's interface (L{vehicle.public.LedgerStore}) --------------
    #
    # The file answers at once: each answer is a fired Deferred.

    def start(self) -> Deferred[None]:
        if self._log is None:
            self.open()
        return succeed(None)

    def addGrant(
        self, principal: str, amountUsd: float, source: str, key: str, note: str | None = None
    ) -> Deferred[str]:
        known = self.grants.get(key)
        if known is not None:
            return succeed(GRANT_REPEATED if known == (principal, amountUsd) else GRANT_CONFLICT)
        if key in self.keys:
            return succeed(GRANT_CONFLICT)
        self.grant(principal, amountUsd, source, key, note)
        return succeed(GRANTED)

    def figures(self, principal: str) -> Deferred[Figures]:
        return succeed(Figures(
            grantedUsd=round(self.granted[principal], 9),
            spentUsd=round(self.spent[principal], 9),
            heldUsd=self.held(principal),
            turnsToday=self.turnsToday(principal),
            poolTodayUsd=round(self.poolToday(), 9),
            heldAllUsd=self.held(),
        ))

    def refusal(self, ask: TurnAsk) -> str | None:
        """
        Why C{ask} may not be reserved now, or L{None}.
        """
        if self.turns[(ask.principal, ask.day)] >= ask.turnsPerDay:
            return "daily_turn_limit"
        if self.sessionTurns[ask.session] >= ask.sessionMaxTurns:
            return "session_turn_limit"
        if ask.holdUsd > 0:
            if self.balance(ask.principal) - self.held(ask.principal) <= 0:
                return "out_of_credit"
            if self.pool[ask.day] + self.held() >= ask.dailyCapUsd:
                return "credit_pool_exhausted"
        return None

    def reserveTurn(self, ask: TurnAsk) -> Deferred[str]:
        """
        One row counts the turn and holds its budget: a disk that refuses it
        refuses the turn (C{storage_unavailable}), and nothing counts.
        """
        if ask.key in self.keys:
            return succeed(REPEATED)
        refused = self.refusal(ask)
        if refused is not None:
            return succeed(refused)
        self._append(TurnRow(
            principal=ask.principal, session=ask.session, funding=ask.funding, key=ask.key,
            command=ask.command, holdUsd=ask.holdUsd if ask.holdUsd > 0 else None,
        ), ask.day)
        return succeed(RESERVED)

    def voidTurn(self, session: str, command: str) -> Deferred[bool]:
        key = turnKey(session, command)
        counted = self.turnRows.get(key)
        if counted is None:
            return succeed(False)
        self._append(
            VoidRow(principal=counted[0], session=session, turn=key, command=command),
            afterTheFact=True,
        )
        return succeed(True)

    def countTurn(
        self, principal: str, session: str, funding: str, command: str, day: str
    ) -> Deferred[bool]:
        return succeed(self.turn(principal, session, funding, command, day))

    def chargeRun(
        self, principal: str, amountUsd: float, key: str, session: str,
        holds: Iterable[str] = (),
    ) -> Deferred[bool]:
        if key in self.keys:
            return succeed(False)
        ending = tuple(h for h in holds if h in self.holds)
        self._append(
            DebitRow(principal=principal, amountUsd=amountUsd, key=key, session=session,
                     holds=ending or None),
            afterTheFact=True,
        )
        return succeed(True)

    def endHold(self, key: str, reason: str) -> Deferred[bool]:
        return succeed(self.release(key, reason))

    def openHolds(self, session: str | None = None) -> Deferred[list[Hold]]:
        return succeed([
            Hold(key=key, principal=principal, amountUsd=amount, session=s,
                 command=key.removeprefix(holdKey(s, "")))
            for key, (principal, amount, s) in self.holds.items()
            if session is None or s == session
        ])

    def turnsOf(self, session: str) -> Deferred[SessionTurns]:
        reserved = {
            key.removeprefix(turnKey(session, "")): at
            for key, (_, _, s, at) in self.turnRows.items() if s == session
        }
        return succeed(SessionTurns(
            reserved=reserved, unnamed=max(0, self.sessionTurns[session] - len(reserved)),
        ))

    def missingKeys(self, keys: Iterable[str]) -> Deferred[set[str]]:
        return succeed({key for key in keys if key not in self.keys})
