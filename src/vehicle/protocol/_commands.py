# -*- test-case-name: tests.unit.test_protocol -*-
"""
A command: its kinds, its statuses and the moves between them (spec,
"Commands"), and the record the session keeps of each (the snapshot's
C{commands}, the request log's C{command}).  One value from the moment it
is accepted: the session's book holds it, the body is handed the same
value, and a move makes the next one.
"""

from __future__ import annotations

import enum
from typing import Any, Literal

from attrs import evolve, field, frozen


class CommandType(enum.StrEnum):
    """
    The verbs of C{POST /sessions/:id/commands}.
    """

    prompt = "prompt"
    followUp = "follow_up"
    steer = "steer"
    abort = "abort"
    cancel = "cancel"
    shutdown = "shutdown"
    fork = "fork"
    clone = "clone"
    setRoomPolicy = "set_room_policy"
    acceptChime = "accept_chime"
    rejectChime = "reject_chime"

    @property
    def carriesText(self) -> bool:
        """
        A prompt, follow-up or steer: words for the model.
        """
        return self in TEXT_COMMANDS

    @property
    def leased(self) -> bool:
        """
        Needs the exact lease (spec, "The lease"): all but the branches.
        """
        return self not in (CommandType.fork, CommandType.clone)

    @property
    def branches(self) -> bool:
        return self in (CommandType.fork, CommandType.clone)


#: The commands that carry words for the model.
TEXT_COMMANDS = frozenset({CommandType.prompt, CommandType.followUp, CommandType.steer})


class CommandStatus(enum.StrEnum):
    """
    Where a command is (spec, "Commands": accepted → queued → delivered →
    completed | aborted | failed, or cancelled or interrupted).
    """

    accepted = "accepted"
    queued = "queued"
    delivered = "delivered"
    completed = "completed"
    aborted = "aborted"
    failed = "failed"
    cancelled = "cancelled"
    interrupted = "interrupted"

    @property
    def open(self) -> bool:
        """
        Not yet settled.
        """
        return self in OPEN_STATUSES

    @property
    def final(self) -> bool:
        return not self.open

    @property
    def announced(self) -> bool:
        """
        A move here is an event of its own (C{command.<status>}); being
        queued (or taken back to wait again) is not.
        """
        return self not in (CommandStatus.accepted, CommandStatus.queued)

    def mayMoveTo(self, status: CommandStatus) -> bool:
        """
        The moves a command may make, in one place (L{MOVES}).
        """
        return status in MOVES[self]


OPEN_STATUSES = frozenset({CommandStatus.accepted, CommandStatus.queued, CommandStatus.delivered})

_ENDINGS = frozenset(
    {
        CommandStatus.completed,
        CommandStatus.aborted,
        CommandStatus.failed,
        CommandStatus.cancelled,
        CommandStatus.interrupted,
    }
)

#: status -> the statuses a command may move to from there.  A settled
#: command stays as it is; an open one may wait again (C{accepted}: taken
#: back from pi's queue to be sent anew), be queued by pi, be delivered,
#: or end.
MOVES: dict[CommandStatus, frozenset[CommandStatus]] = {
    CommandStatus.accepted: frozenset({CommandStatus.queued, CommandStatus.delivered}) | _ENDINGS,
    CommandStatus.queued: frozenset(
        {CommandStatus.accepted, CommandStatus.delivered}
    ) | _ENDINGS,
    CommandStatus.delivered: frozenset(
        {CommandStatus.accepted, CommandStatus.delivered}
    ) | _ENDINGS,
    **{ending: frozenset() for ending in _ENDINGS},
}

#: How pi took a command it was handed.
Disposition = Literal["started", "queued", "handled"]

#: pi's dispositions, by their names.
DISPOSITIONS: dict[str, Disposition] = {"started": "started", "queued": "queued", "handled": "handled"}

RoomPolicy = Literal["observe", "mute", "suggest", "co-drive"]

#: How a chime's words reach pi while a run goes on.
Delivery = Literal["steer", "follow_up"]


@frozen(kw_only=True)
class Holder:
    """
    A client of a person: who holds a lease, who sent a command (spec,
    the identity headers: C{x-user-id} and C{x-vehicle-client-id}).
    """

    principal: str
    clientId: str


#: Marks a field the codec leaves out of the JSON while it is L{None}.
OMIT = "vehicle.omit"


def omitted() -> Any:
    """
    An optional field (its default L{None}) that is absent from the JSON
    while it is L{None}.
    """
    return field(default=None, metadata={OMIT: True})


@frozen(kw_only=True)
class Command:
    """
    One accepted command, as the session keeps it and the body reads it.

    @ivar by: the holder that sent it.
    @ivar delivery: how a chime's words go to pi while a run goes on.
    @ivar chimeAuthor: the collaborator whose chime this command carries.
    @ivar error: why it failed (its body's words, scrubbed of secrets).
    @ivar code: the error code of a failure, if it has one.
    @ivar reason: why it was cancelled or interrupted.
    """

    commandId: str
    requestId: str
    type: CommandType
    status: CommandStatus = CommandStatus.accepted
    disposition: Disposition | None = None
    acceptedAt: str
    updatedAt: str
    by: Holder
    text: str | None = omitted()
    contextRefs: tuple[str, ...] | None = omitted()
    targetCommandId: str | None = omitted()
    entryId: str | None = omitted()
    policy: RoomPolicy | None = omitted()
    chimeId: str | None = omitted()
    chimeAuthor: str | None = omitted()
    delivery: Delivery | None = omitted()
    error: str | None = omitted()
    code: str | None = omitted()
    reason: str | None = omitted()

    @property
    def hasText(self) -> bool:
        return self.text is not None

    @property
    def open(self) -> bool:
        return self.status.open

    def moved(
        self,
        status: CommandStatus,
        at: str,
        *,
        disposition: Disposition | None = None,
        error: str | None = None,
        code: str | None = None,
        reason: str | None = None,
    ) -> Command | None:
        """
        This command moved to C{status} at C{at}, with the facts the move
        adds; L{None} when the move is not one it may make (L{MOVES}).
        """
        if not self.status.mayMoveTo(status):
            return None
        return evolve(
            self,
            status=status,
            updatedAt=at,
            disposition=self.disposition if disposition is None else disposition,
            error=self.error if error is None else error,
            code=self.code if code is None else code,
            reason=self.reason if reason is None else reason,
        )
