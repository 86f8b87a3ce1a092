# -*- test-case-name: tests.unit.test_protocol -*-
"""
What the host answers: the session as the list and the answers show it
(L{SessionSummary}), the lease, a chime's record, the snapshot, and the
value of each frame type (spec, "Frames").  An L{Answer} is a frame's type
and its value; the web package makes it the frame, and the journal records it
as it was sent.
"""

from __future__ import annotations

from typing import Literal, Union

from attrs import frozen

from vehicle.protocol._commands import Command, Delivery, Holder, RoomPolicy, omitted
from vehicle.protocol._events import Event
from vehicle.protocol._json import JSONObject


Role = Literal["owner", "editor", "viewer"]
BodyState = Literal["dormant", "starting", "live", "stopping"]
#: A public conversation's door (spec, "Public sessions").
Funding = Literal["byok", "credit"]


@frozen(kw_only=True)
class RunBudget:
    """
    What one run may spend: model turns and dollars.
    """

    maxTurns: int
    maxCostUsd: float


@frozen(kw_only=True)
class Door:
    """
    How a public caller's new conversation is funded (spec, "Public
    sessions": one of two doors): the model, the funding (the caller's own
    key, or account credit) and the host's run budget.
    """

    model: str
    funding: Funding
    budget: RunBudget


@frozen(kw_only=True)
class Parent:
    """
    Where a branch came from: its source, how (C{fork} or C{clone}), and
    for a fork the entry it was cut at.
    """

    sessionId: str
    kind: Literal["fork", "clone"]
    entryId: str | None = None


@frozen(kw_only=True)
class LeaseInfo:
    """
    A lease as the answers show it (spec, "The lease").
    """

    principal: str
    clientId: str
    ttlMs: int
    claimedAt: str
    expiresAt: str


@frozen(kw_only=True)
class SessionSummary:
    """
    A session as the list, the answers and C{inspect} show it.
    """

    sessionId: str
    graphId: str
    principal: str
    role: Role
    profile: Literal["chat", "agent"]
    model: str
    createdAt: str
    budget: RunBudget
    parent: Parent | None
    isolation: str | None = omitted()
    graphs: tuple[str, ...] | None = omitted()
    funding: Funding | None = omitted()
    title: str | None
    preview: str | None
    access: Literal["read", "write"]
    updatedAt: str
    cursor: int
    status: Literal["idle", "running"]
    body: BodyState
    lease: LeaseInfo | None
    roomPolicy: RoomPolicy


@frozen(kw_only=True)
class Chime:
    """
    A collaborator's chime as its answers and events show it (its words
    are kept apart: only the driver's command carries them on).
    """

    chimeId: str
    author: str
    delivery: Delivery
    textBytes: int
    by: Holder
    receivedAt: str
    status: Literal["pending", "accepted", "rejected"] | None = omitted()
    commandId: str | None = omitted()


@frozen(kw_only=True)
class HeldChime(Chime):
    """
    A chime the room holds for its driver, with its words (C{inspect}
    shows the driver what they would accept).
    """

    text: str

    @property
    def pending(self) -> bool:
        return self.status == "pending"

    def record(self) -> Chime:
        """
        The chime without its words, as its answers and events show it.
        """
        return Chime(
            chimeId=self.chimeId, author=self.author, delivery=self.delivery,
            textBytes=self.textBytes, by=self.by, receivedAt=self.receivedAt,
            status=self.status, commandId=self.commandId,
        )


#: Where a session's mirror stands.
MirrorStage = Literal["off", "skipped", "pending", "written", "failed"]
MIRROR_STAGES: dict[str, MirrorStage] = {
    "off": "off", "skipped": "skipped", "pending": "pending", "written": "written",
    "failed": "failed",
}


@frozen(kw_only=True)
class MirrorState:
    """
    Where the session's mirror into the graph stands (C{inspect}).
    """

    state: MirrorStage
    documentId: str | None = None
    folder: str | None = None
    reason: str | None = None
    writtenAt: str | None = None
    error: str | None = None


MIRROR_OFF = MirrorState(state="off", reason="the mirror is not configured")


@frozen(kw_only=True)
class PiQueue:
    """
    What pi itself holds in its queue (texts as pi has them).
    """

    steering: tuple[str, ...] = ()
    followUp: tuple[str, ...] = ()


@frozen(kw_only=True)
class BodyView:
    """
    What the body package adds to a snapshot: the transcript (pi's own file,
    JSON as it reads it), pi's queue, tools and stats of a live body, and
    the mirror.
    """

    transcript: tuple[JSONObject, ...] = ()
    queue: PiQueue = PiQueue()
    tools: tuple[str, ...] | None = None
    stats: JSONObject | None = None
    mirror: MirrorState = MIRROR_OFF

    def withMirror(self, mirror: MirrorState) -> BodyView:
        """
        This view with C{mirror}: C{attrs.evolve}'s answer, made directly
        (evolve reads the class's fields on every call; inspect makes one
        per request).
        """
        return BodyView(transcript=self.transcript, queue=self.queue, tools=self.tools,
                        stats=self.stats, mirror=mirror)


@frozen(kw_only=True)
class Snapshot:
    """
    C{session.snapshot}: C{GET /sessions/:id}.
    """

    session: SessionSummary
    commands: tuple[Command, ...]
    queue: PiQueue
    chimes: tuple[HeldChime, ...]
    transcript: tuple[JSONObject, ...]
    tools: tuple[str, ...] | None
    stats: JSONObject | None
    mirror: MirrorState


# -- the values of the frames --------------------------------------------------


@frozen(kw_only=True)
class SessionCreated:
    session: SessionSummary
    clientId: str
    holdsLease: bool


@frozen(kw_only=True)
class SessionList:
    sessions: tuple[SessionSummary, ...]


@frozen(kw_only=True)
class SessionRenamed:
    session: SessionSummary


@frozen(kw_only=True)
class SessionDeleted:
    """
    @ivar mirror: the mirrored document the client may delete itself
        (spec, "Rename and delete"), when there is one.
    """

    sessionId: str
    trashedAs: str
    mirror: JSONObject | None = omitted()


@frozen(kw_only=True)
class DriverClaimed:
    lease: LeaseInfo
    tookOverFrom: Holder | None
    session: SessionSummary


@frozen(kw_only=True)
class DriverReleased:
    session: SessionSummary
    lease: None = None


@frozen(kw_only=True)
class CommandAccepted:
    command: Command


@frozen(kw_only=True)
class CommandCancelled:
    command: Command
    cancelled: str


@frozen(kw_only=True)
class SessionCloned:
    session: SessionSummary
    parent: Parent


@frozen(kw_only=True)
class SessionForked:
    """
    A fork says the text of the entry it was cut at (L{None} when cut at
    none).
    """

    session: SessionSummary
    parent: Parent
    selectedText: str | None


@frozen(kw_only=True)
class RoomPolicySet:
    policy: RoomPolicy


@frozen(kw_only=True)
class ChimeAccepted:
    chime: Chime
    command: Command | None = omitted()


@frozen(kw_only=True)
class ChimeRejected:
    chime: Chime
    reason: str


@frozen(kw_only=True)
class WatchCompleted:
    events: tuple[Event, ...]
    cursor: int
    more: bool


AnswerValue = Union[
    SessionCreated,
    SessionList,
    SessionRenamed,
    SessionDeleted,
    DriverClaimed,
    DriverReleased,
    CommandAccepted,
    CommandCancelled,
    SessionCloned,
    SessionForked,
    RoomPolicySet,
    ChimeAccepted,
    ChimeRejected,
    WatchCompleted,
    Snapshot,
]


@frozen(kw_only=True)
class Answer:
    """
    A verb's answer: the frame's type and its value (the web package makes it
    the frame; the journal records it as sent).
    """

    type: str
    value: AnswerValue
