# -*- test-case-name: tests.unit.test_public,tests.unit.test_credit_holds -*-
"""
Public accounting of a conversation's runs: a credit run debited what it
cost when it settles, a hold ended when its command ends, and what a host
that stopped left open settled when the session is taken up again (a turn
reserved for a command the session's log never got voided, a turn the log
has and the ledger lacks counted, a settled run not debited charged, an
open hold of a finished command ended).  Every write is idempotent by its
key, so telling twice writes once; a write the ledger could not take now
(its database out of reach) is owed, and tried again until it is taken.
"""

from __future__ import annotations

from typing import Any, Callable, ClassVar

from attrs import define, field
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure

from vehicle.protocol import TEXT_COMMANDS, CommandStatus, Event, numberOf, textOf
from vehicle.public._contract import Hold, LedgerStore, LedgerUnavailable, holdKey
from vehicle.session import RunSettled, Session


#: The statuses a command ends in, by name.
FINAL_STATUSES = frozenset(status.value for status in CommandStatus if status.final)


#: How many of a session's events are read at a time when it is taken up.
RECOVER_PAGE = 1000

#: Seconds between tries of the writes a ledger out of reach could not take.
RETRY_SECONDS = 2.0


@define(eq=False)
class Accounting:
    """
    Follows the public conversations this host holds, on the ledger.
    """

    _log: ClassVar[Logger] = Logger()

    ledger: LedgerStore
    clock: IReactorTime
    #: The credit conversations this host holds: a hold of any other is
    #: left from one that is gone (deleted, or not loaded at start).
    _attached: set[str] = field(factory=set)
    #: When this accounting began: a turn reserved before it, whose
    #: command the session's log does not have, was never accepted.
    _began: float = field(init=False, default=0.0)
    #: name -> a write owed to a ledger that could not take it.
    owed: dict[str, Callable[[], Deferred[Any]]] = field(factory=dict)
    _retry: IDelayedCall | None = None
    _lastSweep: float | None = None
    #: The recoveries under way (a test waits for them).
    recovering: list[Deferred[None]] = field(factory=list)

    def __attrs_post_init__(self) -> None:
        self._began = self.clock.seconds()

    # -- writes the ledger may not take now --------------------------------

    def _write(self, name: str, write: Callable[[], Deferred[Any]]) -> Deferred[None]:
        """
        Make C{write} now; a ledger out of reach owes it (tried every
        L{RETRY_SECONDS} until taken).  Never fails.
        """
        self.owed.pop(name, None)

        def unreached(reason: Failure) -> None:
            if reason.check(LedgerUnavailable):
                self._owe(name, write)
            else:
                self._log.failure("The ledger refused {name}", reason, name=name)

        d = write()
        d.addCallback(lambda _: None)
        return d.addErrback(unreached)

    def _owe(self, name: str, write: Callable[[], Deferred[Any]]) -> None:
        self.owed[name] = write
        if self._retry is None or not self._retry.active():
            self._retry = self.clock.callLater(RETRY_SECONDS, self._payOwed)

    def _payOwed(self) -> None:
        self._retry = None
        for name, write in list(self.owed.items()):
            self._write(name, write)

    def stop(self) -> None:
        if self._retry is not None and self._retry.active():
            self._retry.cancel()
        self._retry = None

    # -- a conversation's life ----------------------------------------------

    def follow(self, session: Session) -> None:
        """
        Follow a public conversation: end its holds when their commands
        end, and settle what a host that stopped left open.
        """
        if session.meta.funding == "credit":
            self._attached.add(session.sessionId)
            session.feed.subscribe(lambda event: self._noticed(session, event))
        d = Deferred.fromCoroutine(self._recover(session))
        if not d.called:
            self.recovering.append(d)

            def done(_: None) -> None:
                self.recovering.remove(d)

            d.addCallback(done)

    def settled(self, session: Session, run: RunSettled) -> Deferred[None]:
        """
        A credit run is debited what it cost (pi's usage), keyed by the seq
        of its C{run.settled} event; the holds of the session's commands
        already ended end with it (in the same write).
        """
        if session.meta.funding != "credit":
            return Deferred.fromCoroutine(_nothing())
        cost = float(run.costUsd or 0.0)
        if cost <= 0 or run.seq is None:
            return Deferred.fromCoroutine(_nothing())
        key = f"run:{session.sessionId}:{run.seq}"
        ended = [
            holdKey(session.sessionId, c.commandId) for c in session.commands()
            if c.status.final and c.type in TEXT_COMMANDS
        ]
        return self._write(key, lambda: self.ledger.chargeRun(
            session.meta.principal, cost, key, session.sessionId, ended,
        ))

    def forget(self, session: Session) -> None:
        """
        The conversation is deleted: its holds speak for nothing now.
        """
        self._attached.discard(session.sessionId)
        self._endHolds(session.sessionId, lambda hold: "deleted")

    def _endHolds(
        self, sessionId: str | None, reasonFor: Callable[[Hold], str | None]
    ) -> Deferred[None]:
        async def end() -> None:
            try:
                holds = await self.ledger.openHolds(sessionId)
            except LedgerUnavailable:
                self._owe(f"holds:{sessionId}", lambda: self._endHolds(sessionId, reasonFor))
                return
            for hold in holds:
                reason = reasonFor(hold)
                if reason is not None:
                    await self._write(hold.key, _ending(self.ledger, hold.key, reason))

        return Deferred.fromCoroutine(end())

    def releaseStrays(self) -> Deferred[None]:
        """
        Holds of conversations this host no longer has (deleted, or not
        loaded at start) speak for nothing: release them.  A shared ledger
        is looked at once in a while, not at every check.
        """
        now = self.clock.seconds()
        if self._lastSweep is not None and now - self._lastSweep < self.ledger.straySweepSeconds:
            return Deferred.fromCoroutine(_nothing())
        self._lastSweep = now
        return self._endHolds(
            None, lambda hold: "session_gone" if hold.session not in self._attached else None
        )

    def void(self, session: Session, command: str) -> Deferred[None]:
        """
        A reserved turn whose command was not accepted is undone (unless the
        command made it into the log after all).
        """
        def write() -> Deferred[Any]:
            if session.findCommand(command) is not None:
                return Deferred.fromCoroutine(_nothing())
            return self.ledger.voidTurn(session.sessionId, command)

        return self._write(f"void:{session.sessionId}:{command}", write)

    def _noticed(self, session: Session, event: Event) -> None:
        """
        A command that ended (completed, aborted, failed, cancelled or
        interrupted) ends its hold: its run, if it had one, is debited by
        its own cost at settle.
        """
        status, commandId = textOf(event.data.get("status")), textOf(event.data.get("commandId"))
        if (
            event.durable
            and event.type.startswith("command.")
            and status in FINAL_STATUSES
            and commandId
        ):
            key = holdKey(session.sessionId, commandId)
            self._write(key, lambda: self.ledger.endHold(key, status or ""))

    # -- taking a session up -------------------------------------------------

    async def _recover(self, session: Session) -> None:
        """
        When a public session is taken up (at start): a turn reserved for a
        command its log never got is voided, a turn its log has and the
        ledger lacks is counted; and for credit, no run being under way, a
        settled run whose debit was never written is charged and every
        hold still open is ended.  All idempotent by key, so a second start
        does nothing more.
        """
        try:
            await self._recoverTurns(session)
            if session.meta.funding == "credit":
                await self._recoverRuns(session)
                await self._endHolds(session.sessionId, lambda hold: _finalStatus(session, hold))
        except LedgerUnavailable:
            self._log.warn("Session {sessionId}: the ledger is out of reach; its accounts are "
                           "settled when it answers", sessionId=session.sessionId)
            self._owe(f"recover:{session.sessionId}",
                      lambda: Deferred.fromCoroutine(self._recover(session)))

    async def _recoverTurns(self, session: Session) -> None:
        counted = await self.ledger.turnsOf(session.sessionId)
        for commandId, at in counted.reserved.items():
            if session.findCommand(commandId) is None and at <= self._began:
                await self.ledger.voidTurn(session.sessionId, commandId)
        turns = [c for c in session.commands() if c.type in TEXT_COMMANDS]
        # Turn rows written before they named their command count by number.
        missing = len(turns) - counted.count
        for command in reversed(turns):
            if missing <= 0:
                break
            if command.commandId in counted.reserved:
                continue
            if await self.ledger.countTurn(
                session.meta.principal, session.sessionId, session.meta.funding or "",
                command.commandId, command.acceptedAt[:10] or self.ledger.today(),
            ):
                missing -= 1

    async def _recoverRuns(self, session: Session) -> None:
        runs: dict[str, RunSettled] = {}
        since = 0
        while True:
            events, more = session.feed.after(since, limit=RECOVER_PAGE)
            for event in events:
                if event.type == "run.settled":
                    runs[f"run:{session.sessionId}:{event.seq}"] = RunSettled(
                        seq=event.seq, aborted=bool(event.data.get("aborted")),
                        costUsd=numberOf(event.data.get("costUsd")),
                    )
            if not more or not events:
                break
            since = events[-1].seq or since
        for key in sorted(await self.ledger.missingKeys(runs), key=lambda k: runs[k].seq or 0):
            await self.settled(session, runs[key])


def _ending(ledger: LedgerStore, key: str, reason: str) -> Callable[[], Deferred[bool]]:
    return lambda: ledger.endHold(key, reason)


def _finalStatus(session: Session, hold: Hold) -> str:
    command = session.findCommand(hold.command)
    return command.status.value if command is not None and command.status.final else "host_restarted"


async def _nothing() -> None:
    return None
