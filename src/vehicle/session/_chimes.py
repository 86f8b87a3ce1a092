# -*- test-case-name: tests.unit.test_chimes -*-
"""
The rules of chimes (spec, "Chimes"): a collaborator's attributed message
is refused, held for the driver, or made the driver's command at once, as
the room's policy says; the driver accepts or rejects what is held, and
sets the policy.  A part of its session: it moves the session's room
(L{Room}) and accepts commands through the session's book.  Each verb
moves the room as soon as its step is taken and answers once it is
durable.
"""

from __future__ import annotations

import uuid

from attrs import define, evolve
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorTime

from vehicle.errors import VehicleError
from vehicle.protocol import (
    Answer,
    Chime,
    ChimeAccepted,
    ChimeRejected,
    ChimeRequest,
    Command,
    CommandAccepted,
    CommandRequest,
    CommandType,
    HeldChime,
    Holder,
    JSONObject,
    RoomPolicySet,
    toObject,
)
from vehicle.session._command import CommandBook, Committer, commandOf
from vehicle.session._room import ChimeStatus, Room
from vehicle.session._values import Caller, isoTimestamp


def withStatus(chime: Chime, status: ChimeStatus, commandId: str | None = None) -> Chime:
    """
    A chime's record as its answer shows it: with where it now stands.
    """
    return evolve(chime, status=status, commandId=commandId)


@define(eq=False)
class Chimes:
    """
    One session's chimes, by its room's policy.
    """

    clock: IReactorTime
    room: Room
    book: CommandBook
    commit: Committer

    def chime(
        self, caller: Caller, request: ChimeRequest, driver: Holder | None, immediate: bool
    ) -> Deferred[JSONObject]:
        """
        Refused (C{observe}, C{mute}), held for the driver (C{suggest}), or
        the C{driver}'s command at once (C{co-drive}, while someone holds
        the lease; unless not C{immediate}: then it waits, as under
        suggest).
        """
        held = HeldChime(
            chimeId="chime-" + uuid.uuid4().hex[:12],
            author=request.author,
            delivery=request.delivery,
            textBytes=len(request.text.encode("utf-8")),
            by=caller.holder(),
            receivedAt=isoTimestamp(self.clock.seconds()),
            text=request.text,
        )
        chime = held.record()
        policy = self.room.policy
        if policy in ("observe", "mute"):
            rejected = Answer(type="chime.rejected", value=ChimeRejected(
                chime=withStatus(chime, "rejected"), reason=f"the room's policy is {policy}",
            ))
            return self.commit(
                "chime", caller, request.requestId, request.raw, rejected,
                [("chime.resolved", {"chimeId": chime.chimeId, "status": "rejected",
                                     "reason": policy})],
            )
        if policy == "co-drive" and driver is not None and immediate:
            return self._asCommand(caller, request, chime, driver)
        pending = evolve(held, status="pending")
        sent = self.commit(
            "chime", caller, request.requestId, request.raw,
            Answer(type="chime.accepted", value=ChimeAccepted(chime=pending.record())),
            [("chime.received", toObject(chime))],
        )
        self.room.hold(pending)
        return sent

    def _asCommand(
        self, caller: Caller, request: ChimeRequest, chime: Chime, driver: Holder
    ) -> Deferred[JSONObject]:
        """
        Under co-drive a chime is the driver's command at once; its answer
        is the chimer's, its record the chimer's request.
        """
        now = self.book.now()
        command = Command(
            commandId=chime.chimeId, requestId=chime.chimeId, type=CommandType(request.delivery),
            acceptedAt=now, updatedAt=now, by=driver, text=request.text,
            chimeAuthor=request.author,
        )
        accepted = withStatus(chime, "accepted", command.commandId)
        return self.book.accept(
            command,
            Answer(type="chime.accepted", value=ChimeAccepted(chime=accepted, command=command)),
            caller=caller, kind="chime", requestId=request.requestId, raw=request.raw,
            before=[("chime.received", toObject(chime))],
            after=[("chime.resolved", {"chimeId": chime.chimeId, "status": "accepted",
                                       "commandId": command.commandId})],
        )

    def resolve(self, caller: Caller, request: CommandRequest) -> Deferred[JSONObject]:
        """
        The driver's C{accept_chime} (the chime becomes its command) or
        C{reject_chime}.

        @raise VehicleError: C{chime_not_pending}.
        """
        chimeId = request.chimeId or ""
        held = self.room.pending(chimeId)
        if held is None:
            raise VehicleError(
                "chime_not_pending", f"chime {chimeId!r} is not pending", {"chimeId": chimeId}
            )
        by = toObject(caller.holder())
        if request.type == CommandType.rejectChime:
            answer = Answer(type="chime.rejected", value=ChimeRejected(
                chime=withStatus(held.record(), "rejected"), reason="the driver declined it",
            ))
            sent = self.commit(
                "policy", caller, request.requestId, request.raw, answer,
                [("chime.resolved", {"chimeId": chimeId, "status": "rejected", "by": by})],
            )
            self.room.resolve(chimeId, "rejected")
            return sent
        command = commandOf(
            request, caller.holder(), self.book.now(),
            text=held.text, chimeAuthor=held.author, delivery=held.delivery,
        )
        sent = self.book.accept(
            command, Answer(type="command.accepted", value=CommandAccepted(command=command)),
            caller=caller, requestId=request.requestId, raw=request.raw,
            after=[("chime.resolved", {"chimeId": chimeId, "status": "accepted",
                                       "commandId": command.commandId, "by": by})],
        )
        self.room.resolve(chimeId, "accepted")
        return sent

    def setPolicy(self, caller: Caller, request: CommandRequest) -> Deferred[JSONObject]:
        """
        The driver's C{set_room_policy}.
        """
        policy = request.policy or self.room.policy
        sent = self.commit(
            "policy", caller, request.requestId, request.raw,
            Answer(type="room.policy", value=RoomPolicySet(policy=policy)),
            [("room.policy", {"policy": policy, "by": toObject(caller.holder())})],
        )
        self.room.policy = policy
        return sent
