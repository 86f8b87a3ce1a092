# -*- test-case-name: tests.unit.test_public,tests.unit.test_credit_holds -*-
"""
Public accounting of a conversation's runs: every turn counted, a credit
run debited what it cost when it settles, a hold ended when its command
ends, and what a host that stopped left open settled when the session is
taken up again.  Every row is idempotent by its key, so telling twice
writes once.
"""

from __future__ import annotations

from attrs import define, field

from vehicle.protocol import TEXT_COMMANDS, CommandStatus, Event, numberOf, textOf
from vehicle.public._ledger import Ledger, holdKey
from vehicle.session import RunSettled, Session


#: The statuses a command ends in, by name.
FINAL_STATUSES = frozenset(status.value for status in CommandStatus if status.final)


#: How many of a session's events are read at a time when it is taken up.
RECOVER_PAGE = 1000


@define(eq=False)
class Accounting:
    """
    Follows the public conversations this host holds, on the ledger.
    """

    ledger: Ledger
    #: The credit conversations this host holds: a hold of any other is
    #: left from one that is gone (deleted, or not loaded at start).
    _attached: set[str] = field(factory=set)

    def follow(self, session: Session) -> None:
        """
        Follow a public conversation: end its holds when their commands
        end, and settle what a host that stopped left open (a turn not
        counted, a run not debited, a hold not ended).
        """
        self._countMissingTurns(session)
        if session.meta.funding != "credit":
            return
        self._attached.add(session.sessionId)
        session.feed.subscribe(lambda event: self._noticed(session, event))
        self._recover(session)

    def settled(self, session: Session, run: RunSettled) -> None:
        """
        A credit run is debited what it cost (pi's usage), keyed by the seq
        of its C{run.settled} event.
        """
        if session.meta.funding != "credit":
            return
        cost = float(run.costUsd or 0.0)
        if cost <= 0 or run.seq is None:
            return
        self.ledger.debit(
            session.meta.principal, cost, f"run:{session.sessionId}:{run.seq}",
            session.sessionId,
        )

    def forget(self, session: Session) -> None:
        """
        The conversation is deleted: its holds speak for nothing now.
        """
        self._attached.discard(session.sessionId)
        for key in self.ledger.holdsOf(session.sessionId):
            self.ledger.release(key, "deleted")

    def releaseStrays(self) -> None:
        """
        Holds of conversations this host no longer has (deleted, or not
        loaded at start) speak for nothing: release them.
        """
        for key, (_, _, sessionId) in list(self.ledger.holds.items()):
            if sessionId not in self._attached:
                self.ledger.release(key, "session_gone")

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
            self.ledger.release(holdKey(session.sessionId, commandId), status)

    def _recover(self, session: Session) -> None:
        """
        When a credit session is taken up (at start), no run of it is under
        way: a settled run whose debit was never written is charged now,
        and every hold still open is released.  Both are idempotent by key,
        so a second start does nothing more.
        """
        since = 0
        while True:
            events, more = session.feed.after(since, limit=RECOVER_PAGE)
            for event in events:
                if event.type == "run.settled":
                    self.settled(session, RunSettled(
                        seq=event.seq, aborted=bool(event.data.get("aborted")),
                        costUsd=numberOf(event.data.get("costUsd")),
                    ))
            if not more or not events:
                break
            since = events[-1].seq or since
        for key in self.ledger.holdsOf(session.sessionId):
            command = session.findCommand(key.removeprefix(holdKey(session.sessionId, "")))
            self.ledger.release(
                key, command.status.value if command is not None and command.status.final
                else "host_restarted"
            )

    def _countMissingTurns(self, session: Session) -> None:
        """
        A public conversation's text commands are its turns, each counted by
        a ledger row written right after the command's record: a row missing
        (the host stopped between the two) is written now.  Rows written
        before turns named their command are counted by number.
        """
        turns = [c for c in session.commands() if c.type in TEXT_COMMANDS]
        missing = len(turns) - self.ledger.sessionTurns[session.sessionId]
        for command in reversed(turns):
            if missing <= 0:
                break
            # The ledger writes a turn once per command: one it has is skipped.
            if self.ledger.turn(
                session.meta.principal, session.sessionId, session.meta.funding or "",
                command.commandId, day=command.acceptedAt[:10],
            ):
                missing -= 1
