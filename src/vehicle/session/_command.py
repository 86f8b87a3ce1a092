# -*- test-case-name: tests.unit.test_conductor,tests.unit.test_restore -*-
"""
The command state machine of one session (L{CommandBook}): a command is
built once from its request (L{commandOf}), accepted in one durable step,
and moved on only here, by the moves L{vehicle.protocol.MOVES} allows.  The
same L{Command} value goes to the body; a move makes the next value.
"""

from __future__ import annotations

from typing import Callable, ClassVar, Iterable, Protocol

from attrs import define, field
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger

from vehicle.errors import VehicleError
from vehicle.protocol import (
    DISPOSITIONS,
    Answer,
    Command,
    CommandCancelled,
    CommandRequest,
    CommandStatus,
    Delivery,
    Disposition,
    Effects,
    Event,
    Holder,
    JSONObject,
    RecordKind,
    RequestRecord,
    fromJSON,
    textOf,
    toObject,
)
from vehicle.session._values import Caller, isoTimestamp


def commandOf(
    request: CommandRequest,
    by: Holder,
    at: str,
    *,
    text: str | None = None,
    chimeAuthor: str | None = None,
    delivery: Delivery | None = None,
) -> Command:
    """
    A new command, built once, from its request (and, for one a chime
    made, the chime's words, author and delivery).
    """
    return Command(
        commandId=request.id,
        requestId=request.requestId,
        type=request.type,
        acceptedAt=at,
        updatedAt=at,
        by=by,
        text=request.text if text is None else text,
        contextRefs=request.contextRefs,
        targetCommandId=request.targetCommandId,
        entryId=request.entryId,
        policy=request.policy,
        chimeId=request.chimeId,
        chimeAuthor=chimeAuthor,
        delivery=delivery,
    )


def acceptedData(command: Command) -> JSONObject:
    """
    The data of a command's C{command.accepted} event.
    """
    data: JSONObject = {
        "commandId": command.commandId,
        "type": command.type.value,
        "requestId": command.requestId,
        "status": "accepted",
        "by": toObject(command.by),
    }
    if command.text is not None:
        data["textBytes"] = len(command.text.encode("utf-8"))
    return data


def followed(commands: dict[str, Command], event: Event) -> None:
    """
    Rebuilding from the log: a C{command.<status>} event moves its command
    in C{commands} as L{CommandBook.move} did when it was written.
    """
    if not event.type.startswith("command."):
        return
    data = event.data
    command = commands.get(textOf(data.get("commandId")) or "")
    if command is None:
        return
    said = textOf(data.get("status")) or event.type.split(".", 1)[1]
    try:
        status = CommandStatus(said)
    except ValueError:
        return
    moved = command.moved(
        status,
        event.timestamp,
        disposition=DISPOSITIONS.get(textOf(data.get("disposition")) or ""),
        error=textOf(data.get("error")),
        code=textOf(data.get("code")),
        reason=textOf(data.get("reason")),
    )
    if moved is not None:
        commands[command.commandId] = moved


def adoptedPreview(
    current: str | None, inherited: bool, command: Command
) -> tuple[str | None, bool]:
    """
    The session's preview after a command is taken in: the first words
    said (a branch's inherited preview gives way to them; a chime's words
    are not the session's).

    @return: the preview and whether it is still the inherited one.
    """
    if (current is None or inherited) and command.text is not None and not command.chimeAuthor:
        return preview(command.text), False
    return current, inherited


def preview(text: str, limit: int = 160) -> str:
    """
    A session's preview: the first words of the first thing said.
    """
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def commandOfRecord(record: RequestRecord) -> Command | None:
    """
    The command a request's record made, as it was accepted (its record
    keeps it whole; an older record has only its body), or L{None}.
    """
    if record.command is not None:
        return record.command
    if record.kind != "command":
        return None
    try:
        request = fromJSON(record.body, CommandRequest)
    except ValueError:
        return None
    return commandOf(request, Holder(principal=record.principal, clientId=record.clientId),
                     record.at or "")


class Committer(Protocol):
    """
    The session's one durable step of a request (L{Journal.commit}): the
    answer as sent, once durable.
    """

    def __call__(
        self, kind: RecordKind, caller: Caller, requestId: str | None, raw: JSONObject,
        answer: Answer, effects: Effects, command: Command | None = None,
    ) -> Deferred[JSONObject]: ...


@define(eq=False)
class CommandBook:
    """
    The commands of one session (what the snapshot shows), each accepted
    once (L{accept}) and moved on only here (L{move}).

    @ivar emit: writes one of the session's durable events.
    @ivar commit: the session's durable step of a request.
    @ivar accepted: told of each command accepted, once it is durable
        (the session: its preview, its body).  The book holds it from the
        moment it is taken (the next request sees it).
    """

    _log: ClassVar[Logger] = Logger()

    clock: IReactorTime
    emit: Callable[[str, JSONObject], object]
    commit: Committer
    accepted: Callable[[Command], None]
    commands: dict[str, Command] = field(factory=dict)

    def now(self) -> str:
        return isoTimestamp(self.clock.seconds())

    def accept(
        self,
        command: Command,
        answer: Answer,
        *,
        caller: Caller,
        kind: RecordKind = "command",
        requestId: str,
        raw: JSONObject,
        before: Iterable[tuple[str, JSONObject]] = (),
        after: Iterable[tuple[str, JSONObject]] = (),
    ) -> Deferred[JSONObject]:
        """
        Accept C{command} in one durable step (L{commit}): the request's
        record (C{kind}, sent by C{caller} as C{requestId} with body
        C{raw}, answered C{answer}), holding the command whole; then
        C{command.accepted} between the events C{before} and C{after}
        (a chime's).  Returns the answer's frame value as sent, once
        durable.

        @raise VehicleError: C{command_exists}.
        """
        self.refuseKnown(command.commandId)
        sent = self.commit(
            kind, caller, requestId, raw, answer,
            [*before, ("command.accepted", acceptedData(command)), *after],
            command=command,
        )
        self.commands[command.commandId] = command

        def durable(frame: JSONObject) -> JSONObject:
            self.accepted(command)
            return frame

        return sent.addCallback(durable)

    def cancel(
        self, caller: Caller, request: CommandRequest, delivered: bool
    ) -> Deferred[JSONObject]:
        """
        Accept a cancel (a command of its own) of a command still waiting in
        the queue.  When nothing was C{delivered} anywhere (the session has
        no body), taking it out is bookkeeping, done at once.

        @raise VehicleError: C{not_cancellable}, C{command_exists}.
        """
        targetId = request.targetCommandId or ""
        target = self.get(targetId)
        if (
            target is None
            or target.status not in (CommandStatus.accepted, CommandStatus.queued)
            or target.text is None
        ):
            raise VehicleError(
                "not_cancellable",
                f"command {targetId!r} is not waiting in the queue",
                {"targetCommandId": targetId,
                 "status": target.status.value if target else None},
            )
        command = commandOf(request, caller.holder(), self.now())
        sent = self.accept(
            command,
            Answer(type="command.cancelled",
                   value=CommandCancelled(command=command, cancelled=targetId)),
            caller=caller, requestId=request.requestId, raw=request.raw,
        )
        if not delivered:
            self.move(targetId, CommandStatus.cancelled, reason="cancelled")
            self.move(command.commandId, CommandStatus.completed)
        return sent

    def get(self, commandId: str) -> Command | None:
        return self.commands.get(commandId)

    def open(self) -> list[Command]:
        """
        The commands not yet settled, in the order they were accepted.
        """
        return [c for c in self.commands.values() if c.open]

    def refuseKnown(self, commandId: str) -> None:
        """
        @raise VehicleError: C{command_exists} for an id already taken.
        """
        if commandId in self.commands:
            raise VehicleError(
                "command_exists",
                f"a command with id {commandId!r} already exists in this session",
                {"commandId": commandId},
            )

    def move(
        self,
        commandId: str,
        status: CommandStatus,
        *,
        disposition: Disposition | None = None,
        error: str | None = None,
        code: str | None = None,
        reason: str | None = None,
    ) -> None:
        """
        Move a command on and announce it (C{command.<status>}; being
        queued has no event of its own).  A move the command may not make
        (a settled command stays as it is) changes nothing.
        """
        command = self.commands[commandId]
        moved = command.moved(
            status, self.now(), disposition=disposition, error=error, code=code, reason=reason
        )
        if moved is None:
            if command.open:
                self._log.warn(
                    "Command {commandId} may not move from {was} to {status}",
                    commandId=commandId, was=command.status.value, status=status.value,
                )
            return
        self.commands[commandId] = moved
        if status.announced:
            said: JSONObject = {"commandId": commandId, "status": status.value}
            for key, value in (
                ("disposition", disposition), ("error", error), ("code", code), ("reason", reason)
            ):
                if value is not None:
                    said[key] = value
            self.emit(f"command.{status.value}", said)

    def requeue(self, commandId: str) -> None:
        """
        A command taken back from pi's queue waits to be sent again: it is
        C{accepted} once more (a step with no event of its own).
        """
        self.move(commandId, CommandStatus.accepted)
