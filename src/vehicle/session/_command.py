# -*- test-case-name: tests.unit.test_conductor -*-
"""
A command as the session hands it to its body: a frozen value.  The session
owns the command's record (its status, its answer); whoever delivers it
keeps its own facts about it in its own fields.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Protocol

from attrs import define, field, frozen
from twisted.internet.interfaces import IReactorTime

from vehicle.errors import VehicleError
from vehicle.session._values import FINAL_STATUSES, OPEN_STATUSES, Caller, Effects, isoTimestamp


#: The fields of a command's request that its record keeps.
COMMAND_FIELDS = (
    "text", "contextRefs", "targetCommandId", "entryId", "policy", "chimeId",
    "chimeAuthor", "delivery",
)


def commandRecord(
    commandId: str | None, request: Mapping[str, Any], by: Mapping[str, Any], at: str | None
) -> dict[str, Any]:
    """
    The session's record of a new command (L{CommandBook.records}): built
    once, here, from its request; the public snapshot shows it as it is.
    """
    record: dict[str, Any] = {
        "commandId": commandId,
        "requestId": request.get("requestId"),
        "type": request.get("type"),
        "status": "accepted",
        "disposition": None,
        "acceptedAt": at,
        "updatedAt": at,
        "by": dict(by),
    }
    for key in COMMAND_FIELDS:
        if key in request:
            record[key] = request[key]
    return record


def acceptedData(record: Mapping[str, Any], caller: Caller) -> dict[str, Any]:
    """
    The data of a command's C{command.accepted} event.
    """
    return {
        "commandId": record["commandId"],
        "type": record["type"],
        "requestId": record["requestId"],
        "status": "accepted",
        "by": caller.holder(),
        **(
            {"textBytes": len(record["text"].encode("utf-8"))}
            if "text" in record
            else {}
        ),
    }


def followed(records: dict[str, dict[str, Any]], event: Mapping[str, Any]) -> None:
    """
    Rebuilding from the log: a C{command.<status>} event moves its command
    in C{records} as L{CommandBook.setStatus} did when it was written.
    """
    kind, data = event["type"], event.get("data") or {}
    if not kind.startswith("command.") or data.get("commandId") not in records:
        return
    command = records[data["commandId"]]
    command["status"] = data.get("status", kind.split(".", 1)[1])
    command["updatedAt"] = event["timestamp"]
    for key in ("disposition", "error", "reason"):
        if key in data:
            command[key] = data[key]


def adoptedPreview(
    current: str | None, inherited: bool, record: Mapping[str, Any]
) -> tuple[str | None, bool]:
    """
    The session's preview after a command is taken in: the first words
    said (a branch's inherited preview gives way to them; a chime's words
    are not the session's).

    @return: the preview and whether it is still the inherited one.
    """
    if (current is None or inherited) and "text" in record and not record.get("chimeAuthor"):
        return preview(record["text"]), False
    return current, inherited


def preview(text: str, limit: int = 160) -> str:
    """
    A session's preview: the first words of the first thing said.
    """
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


@frozen(kw_only=True)
class Command:
    """
    One accepted command, as its deliverer reads it.

    @ivar by: the holder that sent it (C{principal}, C{clientId}).
    @ivar delivery: how a text command goes to pi while a run goes on
        (C{steer} or C{follow_up}), if the request named it.
    """

    commandId: str
    type: str
    by: Mapping[str, Any] = field(factory=dict)
    text: str | None = None
    contextRefs: tuple[str, ...] = ()
    chimeAuthor: str | None = None
    targetCommandId: str | None = None
    delivery: str | None = None

    @classmethod
    def fromRecord(cls, record: Mapping[str, Any]) -> "Command":
        """
        The value of a command's record (L{CommandBook.records}).
        """
        return cls(
            commandId=record["commandId"],
            type=record["type"],
            by=dict(record.get("by") or {}),
            text=record.get("text"),
            contextRefs=tuple(record.get("contextRefs") or ()),
            chimeAuthor=record.get("chimeAuthor"),
            targetCommandId=record.get("targetCommandId"),
            delivery=record.get("delivery"),
        )

    @property
    def hasText(self) -> bool:
        return self.text is not None


class Committer(Protocol):
    """
    The session's one durable step of a request (L{Journal.commit}).
    """

    def __call__(
        self, kind: str, caller: Caller, requestId: str | None, request: Any,
        frame: dict[str, Any], effects: Effects, command: dict[str, Any] | None = None,
    ) -> None: ...


@define(eq=False)
class CommandBook:
    """
    The command state machine of one session: the records of its commands
    (what the snapshot shows), built once (L{accept}) and moved on only
    here.

    @ivar emit: writes one of the session's durable events.
    @ivar commit: the session's durable step of a request.
    @ivar accepted: told of each command accepted, once it is durable
        (the session: its preview, its body).
    """

    clock: IReactorTime
    emit: Callable[[str, dict[str, Any]], Any]
    commit: Committer
    accepted: Callable[[dict[str, Any], "Command"], None]
    records: dict[str, dict[str, Any]] = field(factory=dict)

    def accept(
        self,
        caller: Caller,
        request: dict[str, Any],
        frameFor: Callable[[dict[str, Any]], dict[str, Any]],
        extra: dict[str, Any] | None = None,
        *,
        kind: str = "command",
        requester: Caller | None = None,
        requestBody: dict[str, Any] | None = None,
        before: Effects = (),  # type: ignore[assignment]
        after: Effects = (),  # type: ignore[assignment]
        frameOf: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
    ) -> dict[str, Any]:
        """
        Accept a new command in one durable step (L{commit}): the request's
        record, holding the command whole, then C{command.accepted} (and
        whatever events C{before} and C{after} add: a chime's).  Returns
        the answer's frame, built by C{frameFor} from the command.

        A chime that becomes a command is remembered as the chimer's
        request (C{kind}, C{requester}, C{requestBody}), the command being
        the driver's; C{frameOf} then makes the chimer's answer.
        """
        commandId = request.get("commandId") or request["requestId"]
        self.refuseKnown(commandId)
        command = commandRecord(
            commandId, request, caller.holder(), isoTimestamp(self.clock.seconds())
        )
        command.update(extra or {})
        frame = frameFor(command)
        answerFrame = frameOf(command) if frameOf is not None else frame
        self.commit(
            kind,
            requester or caller,
            (requestBody or request)["requestId"],
            requestBody or request,
            answerFrame,
            [*before, ("command.accepted", acceptedData(command, caller)), *after],
            command=dict(command),
        )
        self.records[commandId] = command
        self.accepted(command, Command.fromRecord(command))
        return answerFrame

    def open(self) -> list[dict[str, Any]]:
        """
        The commands not yet settled, in the order they were accepted.
        """
        return [c for c in self.records.values() if c["status"] in OPEN_STATUSES]

    def refuseKnown(self, commandId: str) -> None:
        """
        @raise VehicleError: C{command_exists} for an id already taken.
        """
        if commandId in self.records:
            raise VehicleError(
                "command_exists",
                f"a command with id {commandId!r} already exists in this session",
                {"commandId": commandId},
            )

    def setStatus(self, commandId: str, status: str, **extra: Any) -> None:
        """
        Move a command on and announce it (C{command.<status>}); the
        C{queued} step has no event of its own.  A settled command stays
        as it is.
        """
        command = self.records[commandId]
        if command["status"] in FINAL_STATUSES:
            return
        said = {k: v for k, v in extra.items() if v is not None}
        command["status"] = status
        command.update(said)
        command["updatedAt"] = isoTimestamp(self.clock.seconds())
        if status != "queued":
            self.emit(f"command.{status}", {"commandId": commandId, "status": status, **said})

    def requeue(self, commandId: str) -> None:
        """
        A command taken back from pi's queue waits to be sent again: it is
        C{accepted} once more (a step with no event of its own, as
        C{queued} is).
        """
        command = self.records[commandId]
        if command["status"] not in FINAL_STATUSES:
            command["status"] = "accepted"
            command["updatedAt"] = isoTimestamp(self.clock.seconds())

    @staticmethod
    def ofRequest(record: Mapping[str, Any]) -> dict[str, Any] | None:
        """
        The command a request's record made (its record in
        C{commands.jsonl} keeps it whole; an older record has its body
        only), as it was accepted, or L{None}.
        """
        if isinstance(record.get("command"), dict):
            return {**record["command"], "status": "accepted"}
        if record.get("kind") != "command":
            return None
        request = record.get("body") or {}
        commandId = request.get("commandId") or request.get("requestId")
        by = {"principal": record.get("principal"), "clientId": record.get("clientId")}
        return commandRecord(commandId, request, by, record.get("at"))
