# -*- test-case-name: tests.unit.test_ledger_contract -*-
"""
What public mode needs of a ledger, whatever keeps it: L{LedgerStore}, one
asynchronous interface with two implementations, the file
(L{vehicle.public.Ledger}, C{public/ledger.jsonl}, the default) and
PostgreSQL (L{vehicle.public.PostgresLedger}, C{VEHICLE_LEDGER_URL}).

Every answer is a L{Deferred}: the file's are fired already, PostgreSQL's
fire when its transaction has committed.  A ledger that cannot answer
(PostgreSQL down, or slower than its timeout) fails with
L{LedgerUnavailable}, and then has written nothing.
"""

from __future__ import annotations

from typing import Iterable, Protocol

from attrs import frozen
from twisted.internet.defer import Deferred


#: L{LedgerStore.reserveTurn}'s answers that accept the turn.
RESERVED = "reserved"
REPEATED = "repeated"

#: L{LedgerStore.reserveTurn}'s refusals: each is the protocol's error code.
REFUSALS = ("daily_turn_limit", "session_turn_limit", "out_of_credit", "credit_pool_exhausted")

#: L{LedgerStore.addGrant}'s answers.
GRANTED = "granted"
GRANT_REPEATED = "repeated"
GRANT_CONFLICT = "conflict"


class LedgerUnavailable(Exception):
    """
    The ledger cannot answer now (its database is down or too slow); what
    was asked was not done.
    """


def holdKey(session: str, command: str) -> str:
    return f"hold:{session}:{command}"


def turnKey(session: str, command: str) -> str:
    return f"turn:{session}:{command}"


def releaseKey(hold: str) -> str:
    return "release:" + hold.removeprefix("hold:")


@frozen(kw_only=True)
class Figures:
    """
    An account's figures, read together.

    @ivar grantedUsd: every grant to it.
    @ivar spentUsd: every debit of it.
    @ivar heldUsd: what its open holds speak for.
    @ivar turnsToday: its public turns this UTC day.
    @ivar poolTodayUsd: today's credit-funded spend, everyone's debits.
    @ivar heldAllUsd: what everyone's open holds speak for.
    """

    grantedUsd: float = 0.0
    spentUsd: float = 0.0
    heldUsd: float = 0.0
    turnsToday: int = 0
    poolTodayUsd: float = 0.0
    heldAllUsd: float = 0.0

    @property
    def balanceUsd(self) -> float:
        return round(self.grantedUsd - self.spentUsd, 9)


@frozen(kw_only=True)
class TurnAsk:
    """
    One public turn to reserve: L{LedgerStore.reserveTurn}.

    @ivar holdUsd: the run budget a credit turn holds (zero for an own
        key's turn, which is checked for turns only).
    @ivar dailyCapUsd: today's credit pool, everyone together.
    """

    principal: str
    session: str
    command: str
    funding: str
    day: str
    turnsPerDay: int
    sessionMaxTurns: int
    holdUsd: float = 0.0
    dailyCapUsd: float = 0.0

    @property
    def key(self) -> str:
        return turnKey(self.session, self.command)


@frozen(kw_only=True)
class Hold:
    """
    An open hold: C{amountUsd} of C{principal}'s credit spoken for by the
    run of C{session}'s command C{command}.
    """

    key: str
    principal: str
    amountUsd: float
    session: str
    command: str


@frozen(kw_only=True)
class SessionTurns:
    """
    The turns a ledger has counted for one session.

    @ivar reserved: command id -> when its turn was reserved (POSIX seconds).
    @ivar unnamed: turns written before turn rows named their command.
    """

    reserved: dict[str, float]
    unnamed: int = 0

    @property
    def count(self) -> int:
        return len(self.reserved) + self.unnamed


class LedgerStore(Protocol):
    """
    The ledger of public spending: grants in, debits out, turns counted,
    run budgets held while a turn's command is open.  Every write is
    idempotent by its key.
    """

    #: Who this host is to a shared ledger ("" for one host's own file).
    host: str
    #: How often holds of conversations this host no longer has are looked
    #: for (seconds; 0: at every credit check).
    straySweepSeconds: float

    def today(self) -> str:
        """
        This UTC day, as the ledger's C{day} columns write it.
        """

    def start(self) -> Deferred[None]:
        """
        Make the ledger ready (the file read, the database's schema
        migrated).
        """

    def close(self) -> None:
        """
        Let go of the file or the connections.
        """

    def addGrant(
        self, principal: str, amountUsd: float, source: str, key: str, note: str | None = None
    ) -> Deferred[str]:
        """
        Credit C{principal} once per C{key}: L{GRANTED}, L{GRANT_REPEATED}
        (the same grant again) or L{GRANT_CONFLICT} (the key names another
        grant).
        """

    def figures(self, principal: str) -> Deferred[Figures]:
        """
        C{principal}'s figures and today's pool, read together.
        """

    def reserveTurn(self, ask: TurnAsk) -> Deferred[str]:
        """
        In one atomic step: check the day's turns, the session's turns and,
        for a credit turn, the credit (balance less what is held) and the
        day's pool (debits and holds); then count the turn and hold its run
        budget.  L{RESERVED}, L{REPEATED} (this command's turn is already
        counted: nothing more is written), or one of L{REFUSALS} (nothing
        written).
        """

    def voidTurn(self, session: str, command: str) -> Deferred[bool]:
        """
        Undo a reserved turn whose command was not accepted: its count and
        its hold, as if never reserved.  Whether there was one.
        """

    def countTurn(
        self, principal: str, session: str, funding: str, command: str, day: str
    ) -> Deferred[bool]:
        """
        Count a turn the session's log has and the ledger lacks, on the day
        it was accepted, with no check and no hold.  Whether it was new.
        """

    def chargeRun(
        self, principal: str, amountUsd: float, key: str, session: str,
        holds: Iterable[str] = (),
    ) -> Deferred[bool]:
        """
        Debit a settled run once per C{key} and, in the same step, end the
        open holds C{holds}.  Whether the debit was new.
        """

    def endHold(self, key: str, reason: str) -> Deferred[bool]:
        """
        End the open hold C{key} once; whether it was open.
        """

    def openHolds(self, session: str | None = None) -> Deferred[list[Hold]]:
        """
        This host's open holds: of C{session}, or all of them.
        """

    def turnsOf(self, session: str) -> Deferred[SessionTurns]:
        """
        The turns counted for C{session}.
        """

    def missingKeys(self, keys: Iterable[str]) -> Deferred[set[str]]:
        """
        Which of C{keys} the ledger has no row of.
        """
