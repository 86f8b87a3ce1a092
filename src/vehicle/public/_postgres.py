# -*- test-case-name: tests.unit.test_ledger_contract,tests.live.test_ledger_postgres -*-
"""
The ledger of public spending in PostgreSQL (C{VEHICLE_LEDGER_URL}), shared
by every host of a fleet: one row per grant, debit, turn, hold and release
(C{ledger_rows}, the idempotency key unique), every figure computed in the
transaction that spends it.

A transaction that spends (a turn reserved, a run charged, a hold ended,
a grant) first locks the account's row (C{ledger_accounts}, C{SELECT ...
FOR UPDATE}); one that holds credit then locks the day's pool row
(C{ledger_days}), always in that order.  Two hosts reserving for one
account, or credit from one day's pool, therefore take turns, and each
sees what the other committed: nobody spends past a check.

The driver is psycopg 3, run the Twisted way: each transaction is one
function run in L{twisted.enterprise.adbapi.ConnectionPool}'s threads
(L{AdbapiRunner}), never on the reactor's thread; a reactor without
threads (a test's memory reactor) runs it inline (L{InlineRunner}).  The
database answers within C{timeoutSeconds} or the ledger is
L{LedgerUnavailable}: a connection is given C{connect_timeout}, every
statement C{statement_timeout} and C{lock_timeout}, and the reactor stops
waiting at the deadline, while a transaction that starts or ends past it
rolls back.

The schema is made and migrated by the host at start (L{MIGRATIONS},
numbered, forward only), under a transaction-scoped advisory lock, so two
hosts starting at once migrate once.
"""

from __future__ import annotations

import time
from decimal import Decimal
from typing import Any, Callable, ClassVar, Iterable, Protocol, Sequence, TypedDict, TypeVar
from urllib.parse import urlsplit

from attrs import define, field
from twisted.internet.defer import CancelledError, Deferred, fail, succeed
from twisted.internet.interfaces import IReactorCore, IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure

from vehicle.metrics import Metrics, unserved
from vehicle.public._contract import (
    GRANT_CONFLICT,
    GRANT_REPEATED,
    GRANTED,
    REPEATED,
    RESERVED,
    Figures,
    Hold,
    LedgerUnavailable,
    SessionTurns,
    TurnAsk,
    holdKey,
    releaseKey,
    turnKey,
)
from vehicle.public._ledger import _seconds, utcDay
from vehicle.public._rows import (
    DebitRow,
    GrantRow,
    HoldRow,
    KnownRow,
    LedgerRow,
    OtherRow,
    ReleaseRow,
    TurnRow,
    VoidRow,
)


T = TypeVar("T")
Interaction = Callable[[Any], T]

#: pg_advisory_xact_lock's key for migrating: "vehicle-ledger" in a bigint.
MIGRATION_LOCK = 0x766568696C6564


#: The schema, by version: each is applied once, in order, never changed
#: once released (a change is a new version).
MIGRATIONS: tuple[tuple[int, str], ...] = (
    (1, """
CREATE TABLE ledger_accounts (
    principal text PRIMARY KEY
);
CREATE TABLE ledger_days (
    day text PRIMARY KEY
);
CREATE TABLE ledger_rows (
    id bigserial PRIMARY KEY,
    kind text NOT NULL CHECK (kind IN ('grant', 'debit', 'turn', 'hold', 'release')),
    key text NOT NULL UNIQUE,
    principal text NOT NULL,
    amount_usd numeric(20, 9) NOT NULL DEFAULT 0,
    day text NOT NULL,
    at timestamptz NOT NULL,
    session text,
    command text,
    funding text,
    source text,
    note text,
    reason text,
    hold_key text,
    host text,
    open boolean
);
CREATE INDEX ledger_rows_by_principal ON ledger_rows (principal, kind, day);
CREATE INDEX ledger_rows_by_session ON ledger_rows (session, kind);
CREATE INDEX ledger_rows_open_holds ON ledger_rows (principal) WHERE kind = 'hold' AND open;
CREATE INDEX ledger_rows_debits_by_day ON ledger_rows (day) WHERE kind = 'debit';
"""),
)


def describe(url: str) -> str:
    """
    C{url} as it may be logged: its host, port and database, never its
    user or password.
    """
    parts = urlsplit(url)
    if parts.scheme.startswith("postgres"):
        where = parts.hostname or "local socket"
        if parts.port:
            where += f":{parts.port}"
        return f"postgresql://{where}{parts.path}"
    return "postgresql (a keyword connection string)"


class Runner(Protocol):
    """
    Runs one transaction: C{interaction(cursor)} then commit, or rollback
    if it raised.
    """

    def run(self, interaction: Interaction[T]) -> Deferred[T]: ...

    def close(self) -> None: ...


class _ConnectArgs(TypedDict):
    """
    What every connection is opened with (libpq's keywords).
    """

    connect_timeout: int
    options: str
    application_name: str


def _connectArgs(timeoutSeconds: float) -> _ConnectArgs:
    ms = int(timeoutSeconds * 1000)
    return {
        "connect_timeout": max(1, int(timeoutSeconds + 0.5)),
        "options": f"-c statement_timeout={ms} -c lock_timeout={ms}",
        "application_name": "vehicle",
    }


@define(eq=False)
class InlineRunner:
    """
    One connection, each transaction run where it is called: for a reactor
    without threads (tests on a memory reactor) and for the command line.
    """

    url: str
    timeoutSeconds: float
    _connection: Any = None

    def run(self, interaction: Interaction[T]) -> Deferred[T]:
        import psycopg

        try:
            if self._connection is None or self._connection.closed:
                self._connection = psycopg.connect(self.url, **_connectArgs(self.timeoutSeconds))
            connection = self._connection
            try:
                with connection.cursor() as cursor:
                    result = interaction(cursor)
                connection.commit()
            except BaseException:
                if not connection.closed:
                    try:
                        connection.rollback()
                    except psycopg.Error:
                        connection.close()
                raise
        except BaseException:
            return fail()
        return succeed(result)

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None


@define(eq=False)
class AdbapiRunner:
    """
    psycopg 3 in L{twisted.enterprise.adbapi.ConnectionPool}'s threads: the
    reactor's thread never waits on the database.
    """

    reactor: IReactorCore
    url: str
    timeoutSeconds: float
    poolSize: int = 4
    _pool: Any = field(init=False, default=None)

    def __attrs_post_init__(self) -> None:
        from twisted.enterprise import adbapi

        self._pool = adbapi.ConnectionPool(
            "psycopg", self.url, cp_min=1, cp_max=self.poolSize, cp_reconnect=True,
            cp_noisy=False, cp_reactor=self.reactor, **_connectArgs(self.timeoutSeconds),
        )

    def run(self, interaction: Interaction[T]) -> Deferred[T]:
        # adbapi is untyped: the Deferred is the interaction's.
        answer: Deferred[T] = self._pool.runInteraction(interaction)
        return answer

    def close(self) -> None:
        if self._pool.running or self._pool.threadpool.started:
            self._pool.close()


def _usd(value: Decimal | float | None) -> float:
    return round(float(value or Decimal(0)), 9)


class SchemaTooNew(Exception):
    """
    The database's ledger schema is newer than this host knows.
    """


class _Late(Exception):
    """
    A transaction that would start or commit past its answer's deadline:
    it rolls back, as its caller was told the ledger was unavailable.
    """


def _unavailable(reason: Failure) -> bool:
    """
    Whether a failure means the database is out of reach (down, slow, a
    connection lost), not a mistake of ours.
    """
    import psycopg
    from twisted.enterprise.adbapi import ConnectionLost
    from twisted.internet.defer import TimeoutError as DeferredTimeout

    return bool(reason.check(
        psycopg.OperationalError, psycopg.InterfaceError, ConnectionLost, CancelledError,
        DeferredTimeout, _Late, TimeoutError, OSError, SchemaTooNew,
    ))


@define(eq=False)
class PostgresLedger:
    """
    The ledger in PostgreSQL: L{vehicle.public.LedgerStore}.

    @ivar host: this host's name in the rows it writes: its holds are its
        own to release.
    """

    _log: ClassVar[Logger] = Logger()

    runner: Runner
    clock: IReactorTime
    host: str
    where: str = "postgresql"
    timeoutSeconds: float = 2.0
    straySweepSeconds: float = 30.0
    #: Where each transaction's latency is told.
    metrics: Metrics = field(factory=unserved)
    _migrated: bool = False
    _migrating: "Deferred[Exception | None] | None" = None

    # -- how a transaction is run --------------------------------------------

    def _run(self, operation: str, interaction: Interaction[T]) -> Deferred[T]:
        """
        Run C{interaction} once the schema is there, answering within the
        timeout: a database out of reach is L{LedgerUnavailable}.
        """
        return Deferred.fromCoroutine(self._runWhenReady(operation, interaction))

    async def _runWhenReady(self, operation: str, interaction: Interaction[T]) -> T:
        if not self._migrated:
            await self._migrate()
        return await self._answer(operation, interaction)

    async def _answer(self, operation: str, interaction: Interaction[T]) -> T:
        """
        One transaction, timed: the ledger's latency is told to
        L{metrics} by C{operation} and outcome (C{ok}, C{unavailable},
        C{error}).
        """
        began = self.clock.seconds()
        outcome = "error"
        try:
            result = await self._bounded(interaction)
            outcome = "ok"
            return result
        except LedgerUnavailable:
            outcome = "unavailable"
            raise
        finally:
            self.metrics.ledgerAnswered(operation, self.clock.seconds() - began, outcome)

    async def _bounded(self, interaction: Interaction[T]) -> T:
        deadline = time.monotonic() + self.timeoutSeconds

        def bounded(cursor: Any) -> T:
            if time.monotonic() > deadline:
                raise _Late("started past its deadline")
            result = interaction(cursor)
            if time.monotonic() > deadline:
                raise _Late("done past its deadline")
            return result

        d = self.runner.run(bounded)
        d.addTimeout(self.timeoutSeconds, self.clock)
        try:
            return await d
        except Exception as e:
            if _unavailable(Failure(e)):
                raise LedgerUnavailable(f"the ledger ({self.where}) did not answer: {e}") from e
            raise

    async def _migrate(self) -> None:
        """
        Bring the schema up to L{MIGRATIONS}' last version, once even when
        asked by many requests at once.
        """
        migrating = self._migrating
        if migrating is None:
            migrating = Deferred.fromCoroutine(self._migrateOnce())
            if not migrating.called:
                self._migrating = migrating
        waiting: Deferred[Exception | None] = Deferred()

        def relay(outcome: Exception | None) -> Exception | None:
            waiting.callback(outcome)
            return outcome

        migrating.addCallback(relay)
        outcome = await waiting
        if outcome is not None:
            raise outcome

    async def _migrateOnce(self) -> Exception | None:
        try:
            version = await self._answer("migrate", _applyMigrations)
        except Exception as e:
            return e
        finally:
            self._migrating = None
        self._migrated = True
        self._log.info("The ledger is in {where}, schema version {version}",
                       where=self.where, version=version)
        return None

    def today(self) -> str:
        return utcDay(self.clock.seconds())

    def _now(self) -> float:
        return self.clock.seconds()

    # -- the interface -----------------------------------------------------

    def start(self) -> Deferred[None]:
        """
        Migrate now; a database out of reach is tried again at the first
        request that needs it.
        """
        d = Deferred.fromCoroutine(self._migrate())

        def later(reason: Failure) -> None:
            reason.trap(LedgerUnavailable)
            self._log.warn("The ledger ({where}) is out of reach at start; public turns are "
                           "refused until it answers: {error}",
                           where=self.where, error=reason.getErrorMessage())

        return d.addErrback(later)

    def close(self) -> None:
        self.runner.close()

    def addGrant(
        self, principal: str, amountUsd: float, source: str, key: str, note: str | None = None
    ) -> Deferred[str]:
        day, at = self.today(), self._now()

        def grant(c: Any) -> str:
            _lockAccount(c, principal)
            c.execute(
                "INSERT INTO ledger_rows (kind, key, principal, amount_usd, day, at, source, note)"
                " VALUES ('grant', %s, %s, %s, %s, to_timestamp(%s), %s, %s)"
                " ON CONFLICT (key) DO NOTHING RETURNING id",
                (key, principal, Decimal(str(amountUsd)), day, at, source, note),
            )
            if c.fetchone() is not None:
                return GRANTED
            c.execute("SELECT kind, principal, amount_usd FROM ledger_rows WHERE key = %s", (key,))
            kind, who, amount = c.fetchone()
            same = kind == "grant" and who == principal and _usd(amount) == round(amountUsd, 9)
            return GRANT_REPEATED if same else GRANT_CONFLICT

        return self._run("addGrant", grant)

    def figures(self, principal: str) -> Deferred[Figures]:
        day = self.today()

        def read(c: Any) -> Figures:
            c.execute(_FIGURES, {"principal": principal, "day": day})
            granted, spent, held, turns, pool, heldAll = c.fetchone()
            return Figures(grantedUsd=_usd(granted), spentUsd=_usd(spent), heldUsd=_usd(held),
                           turnsToday=int(turns), poolTodayUsd=_usd(pool),
                           heldAllUsd=_usd(heldAll))

        return self._run("figures", read)

    def reserveTurn(self, ask: TurnAsk) -> Deferred[str]:
        at = self._now()

        def reserve(c: Any) -> str:
            _lockAccount(c, ask.principal)
            c.execute("SELECT 1 FROM ledger_rows WHERE key = %s", (ask.key,))
            if c.fetchone() is not None:
                return REPEATED
            if ask.holdUsd > 0:
                # The day's pool row, after the account's: always this order.
                c.execute("INSERT INTO ledger_days (day) VALUES (%s) ON CONFLICT DO NOTHING",
                          (ask.day,))
                c.execute("SELECT day FROM ledger_days WHERE day = %s FOR UPDATE", (ask.day,))
            # One statement, one snapshot: every figure as of the locks.
            c.execute(_RESERVE_FIGURES,
                      {"principal": ask.principal, "day": ask.day, "session": ask.session})
            turns, sessionTurns, granted, spent, held, pool, heldAll = c.fetchone()
            if turns >= ask.turnsPerDay:
                return "daily_turn_limit"
            if sessionTurns >= ask.sessionMaxTurns:
                return "session_turn_limit"
            if ask.holdUsd > 0:
                if _usd(granted) - _usd(spent) - _usd(held) <= 0:
                    return "out_of_credit"
                if _usd(pool) + _usd(heldAll) >= ask.dailyCapUsd:
                    return "credit_pool_exhausted"
            c.execute(
                "INSERT INTO ledger_rows (kind, key, principal, day, at, session, command,"
                " funding, host) VALUES ('turn', %s, %s, %s, to_timestamp(%s), %s, %s, %s, %s)",
                (ask.key, ask.principal, ask.day, at, ask.session, ask.command, ask.funding,
                 self.host),
            )
            if ask.holdUsd > 0:
                c.execute(
                    "INSERT INTO ledger_rows (kind, key, principal, amount_usd, day, at, session,"
                    " command, host, open) VALUES ('hold', %s, %s, %s, %s, to_timestamp(%s),"
                    " %s, %s, %s, true)",
                    (holdKey(ask.session, ask.command), ask.principal,
                     Decimal(str(ask.holdUsd)), ask.day, at, ask.session, ask.command, self.host),
                )
            return RESERVED

        return self._run("reserveTurn", reserve)

    def voidTurn(self, session: str, command: str) -> Deferred[bool]:
        key, hold = turnKey(session, command), holdKey(session, command)

        def void(c: Any) -> bool:
            c.execute("SELECT principal FROM ledger_rows WHERE key = %s", (key,))
            row = c.fetchone()
            if row is None:
                return False
            _lockAccount(c, row[0])
            # A turn never accepted never was: its rows go.
            c.execute("DELETE FROM ledger_rows WHERE key = ANY(%s)",
                      ([key, hold, releaseKey(hold)],))
            return bool(c.rowcount)

        return self._run("voidTurn", void)

    def countTurn(
        self, principal: str, session: str, funding: str, command: str, day: str
    ) -> Deferred[bool]:
        at = self._now()

        def count(c: Any) -> bool:
            _lockAccount(c, principal)
            c.execute(
                "INSERT INTO ledger_rows (kind, key, principal, day, at, session, command,"
                " funding, host) VALUES ('turn', %s, %s, %s, to_timestamp(%s), %s, %s, %s, %s)"
                " ON CONFLICT (key) DO NOTHING RETURNING id",
                (turnKey(session, command), principal, day, at, session, command, funding,
                 self.host),
            )
            return c.fetchone() is not None

        return self._run("countTurn", count)

    def chargeRun(
        self, principal: str, amountUsd: float, key: str, session: str,
        holds: Iterable[str] = (),
    ) -> Deferred[bool]:
        day, at, ending = self.today(), self._now(), list(holds)

        def charge(c: Any) -> bool:
            _lockAccount(c, principal)
            c.execute(
                "INSERT INTO ledger_rows (kind, key, principal, amount_usd, day, at, session,"
                " host) VALUES ('debit', %s, %s, %s, %s, to_timestamp(%s), %s, %s)"
                " ON CONFLICT (key) DO NOTHING RETURNING id",
                (key, principal, Decimal(str(amountUsd)), day, at, session, self.host),
            )
            if c.fetchone() is None:
                return False
            for hold in ending:
                _endHold(c, hold, "charged", day, at)
            return True

        return self._run("chargeRun", charge)

    def endHold(self, key: str, reason: str) -> Deferred[bool]:
        day, at = self.today(), self._now()

        def end(c: Any) -> bool:
            c.execute("SELECT principal FROM ledger_rows WHERE key = %s AND open", (key,))
            row = c.fetchone()
            if row is None:
                return False
            _lockAccount(c, row[0])
            return _endHold(c, key, reason, day, at)

        return self._run("endHold", end)

    def openHolds(self, session: str | None = None) -> Deferred[list[Hold]]:
        def read(c: Any) -> list[Hold]:
            c.execute(
                "SELECT key, principal, amount_usd, session, command FROM ledger_rows"
                " WHERE kind = 'hold' AND open AND host = %s"
                " AND (%s::text IS NULL OR session = %s) ORDER BY id",
                (self.host, session, session),
            )
            return [Hold(key=k, principal=p, amountUsd=_usd(a), session=s, command=cmd)
                    for k, p, a, s, cmd in c.fetchall()]

        return self._run("openHolds", read)

    def turnsOf(self, session: str) -> Deferred[SessionTurns]:
        def read(c: Any) -> SessionTurns:
            c.execute(
                "SELECT command, extract(epoch FROM at) FROM ledger_rows"
                " WHERE kind = 'turn' AND session = %s",
                (session,),
            )
            reserved, unnamed = {}, 0
            for command, at in c.fetchall():
                if command is None:
                    unnamed += 1
                else:
                    reserved[command] = float(at)
            return SessionTurns(reserved=reserved, unnamed=unnamed)

        return self._run("turnsOf", read)

    def missingKeys(self, keys: Iterable[str]) -> Deferred[set[str]]:
        wanted = list(keys)
        if not wanted:
            return succeed(set())

        def read(c: Any) -> set[str]:
            c.execute("SELECT key FROM ledger_rows WHERE key = ANY(%s)", (wanted,))
            return set(wanted) - {row[0] for row in c.fetchall()}

        return self._run("missingKeys", read)

    def importRows(self, rows: Sequence[tuple[str, LedgerRow]]) -> Deferred[tuple[int, int]]:
        """
        Move a file ledger's rows in, each once by the key it comes with
        (a row with no key of its own gets one from its line): (new rows,
        rows already here).
        """
        def move(c: Any) -> tuple[int, int]:
            return _importRows(c, rows)

        return self._run("importRows", move)


def _lockAccount(c: Any, principal: str) -> None:
    c.execute("INSERT INTO ledger_accounts (principal) VALUES (%s) ON CONFLICT DO NOTHING",
              (principal,))
    c.execute("SELECT principal FROM ledger_accounts WHERE principal = %s FOR UPDATE",
              (principal,))


def _endHold(c: Any, hold: str, reason: str, day: str, at: float) -> bool:
    c.execute(
        "UPDATE ledger_rows SET open = false WHERE key = %s AND kind = 'hold' AND open"
        " RETURNING principal, session, host",
        (hold,),
    )
    row = c.fetchone()
    if row is None:
        return False
    principal, session, host = row
    c.execute(
        "INSERT INTO ledger_rows (kind, key, principal, day, at, session, reason, hold_key,"
        " host) VALUES ('release', %s, %s, %s, to_timestamp(%s), %s, %s, %s, %s)"
        " ON CONFLICT (key) DO NOTHING",
        (releaseKey(hold), principal, day, at, session, reason, hold, host),
    )
    return True


_SUMS = """
    (SELECT coalesce(sum(amount_usd), 0) FROM ledger_rows
      WHERE kind = 'grant' AND principal = %(principal)s),
    (SELECT coalesce(sum(amount_usd), 0) FROM ledger_rows
      WHERE kind = 'debit' AND principal = %(principal)s),
    (SELECT coalesce(sum(amount_usd), 0) FROM ledger_rows
      WHERE kind = 'hold' AND open AND principal = %(principal)s),
"""
_POOL = """
    (SELECT coalesce(sum(amount_usd), 0) FROM ledger_rows WHERE kind = 'debit' AND day = %(day)s),
    (SELECT coalesce(sum(amount_usd), 0) FROM ledger_rows WHERE kind = 'hold' AND open)
"""
_TURNS_TODAY = """
    (SELECT count(*) FROM ledger_rows
      WHERE kind = 'turn' AND principal = %(principal)s AND day = %(day)s),
"""
_FIGURES = "SELECT" + _SUMS + _TURNS_TODAY + _POOL
_RESERVE_FIGURES = ("SELECT" + _TURNS_TODAY + """
    (SELECT count(*) FROM ledger_rows WHERE kind = 'turn' AND session = %(session)s),
""" + _SUMS + _POOL)


def _applyMigrations(c: Any) -> int:
    """
    One transaction, under the advisory lock: the versions not yet applied,
    in order.  A schema newer than this host knows is refused.
    """
    c.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
    c.execute(
        "CREATE TABLE IF NOT EXISTS ledger_schema ("
        " version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"
    )
    c.execute("SELECT coalesce(max(version), 0) FROM ledger_schema")
    current = int(c.fetchone()[0])
    newest = MIGRATIONS[-1][0]
    if current > newest:
        raise SchemaTooNew(
            f"the ledger's schema is version {current}; this host knows up to {newest}: "
            "run a newer host"
        )
    for version, sql in MIGRATIONS:
        if version > current:
            c.execute(sql)
            c.execute("INSERT INTO ledger_schema (version) VALUES (%s)", (version,))
    return newest


def _insertRow(c: Any, kind: str, key: str, row: KnownRow, **columns: object) -> bool:
    """
    One row of the file as a row of C{ledger_rows} (C{columns} beyond the
    ones every row has), unless its key is there: whether it was added.
    """
    values: dict[str, object] = {
        "kind": kind, "key": key, "principal": row.principal, "amount_usd": Decimal(0),
        "day": row.day or "1970-01-01", "session": None, "command": None, "funding": None,
        "source": None, "note": None, "reason": None, "hold_key": None, "host": "",
        **columns,
    }
    names = ", ".join(values) + ", at"
    marks = ", ".join(f"%({n})s" for n in values)
    c.execute(
        f"INSERT INTO ledger_rows ({names}) VALUES ({marks},"
        " coalesce(%(at)s::timestamptz, (%(day)s || 'T00:00:00Z')::timestamptz))"
        " ON CONFLICT (key) DO NOTHING RETURNING id",
        {**values, "at": row.at or None},
    )
    return c.fetchone() is not None


def _usdOf(amount: float) -> Decimal:
    return Decimal(str(amount or 0))


def _importRows(c: Any, rows: Sequence[tuple[str, LedgerRow]]) -> tuple[int, int]:
    """
    The file's rows as PostgreSQL's, in the file's order, each by its key:
    a turn row that holds becomes a turn and a hold, a release or a debit
    that ends holds ends them, a void removes its turn.
    """
    inserted: list[bool] = []
    # A turn voided later in the file was never accepted: it is not moved.
    lastVoid = {row.turn: i for i, (_, row) in enumerate(rows) if isinstance(row, VoidRow)}
    for index, (key, row) in enumerate(rows):
        if isinstance(row, OtherRow):
            continue
        if isinstance(row, TurnRow) and lastVoid.get(row.key or "", -1) > index:
            continue
        if row.principal:
            _lockAccount(c, row.principal)
        if isinstance(row, GrantRow):
            inserted.append(_insertRow(c, "grant", key, row, amount_usd=_usdOf(row.amountUsd),
                                       source=row.source, note=row.note))
        elif isinstance(row, DebitRow):
            inserted.append(_insertRow(c, "debit", key, row, amount_usd=_usdOf(row.amountUsd),
                                       session=row.session))
            for hold in row.holds or ():
                _endHold(c, hold, "charged", row.day, _seconds(row.at))
        elif isinstance(row, TurnRow):
            turn = {"session": row.session, "command": row.command, "funding": row.funding}
            inserted.append(_insertRow(c, "turn", key, row, **turn))
            if row.holdUsd and row.command is not None:
                inserted.append(_insertRow(
                    c, "hold", holdKey(row.session, row.command), row,
                    amount_usd=_usdOf(row.holdUsd), open=True, **turn,
                ))
        elif isinstance(row, HoldRow):
            inserted.append(_insertRow(c, "hold", key, row, amount_usd=_usdOf(row.amountUsd),
                                       session=row.session, command=row.command, open=True))
        elif isinstance(row, ReleaseRow):
            c.execute("UPDATE ledger_rows SET open = false WHERE key = %s AND kind = 'hold'",
                      (row.hold,))
            inserted.append(_insertRow(c, "release", key, row, session=row.session,
                                       reason=row.reason, hold_key=row.hold))
        else:
            c.execute("DELETE FROM ledger_rows WHERE key = ANY(%s)",
                      ([row.turn, "hold:" + row.turn.removeprefix("turn:")],))
    added = inserted.count(True)
    return added, len(inserted) - added
