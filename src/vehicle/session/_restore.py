# -*- test-case-name: tests.unit.test_restore,tests.unit.test_crash -*-
"""
A session read back from its two logs: the events a cut host owed
(L{owedEvents}), then every piece of state derived from the logs by the
rules that wrote them (L{derive}).  Pure: the session applies the result.
"""

from __future__ import annotations

from attrs import define, field

from vehicle.protocol import Command, Event, HeldChime, RequestRecord, fromJSON, objectOf, textOf
from vehicle.session._command import adoptedPreview, commandOfRecord, followed
from vehicle.session._lease import leaseAfter
from vehicle.session._requests import Remembered, remembered
from vehicle.session._room import Room, policyOf
from vehicle.session._values import Lease


@define
class Derived:
    """
    What the logs say a session is.
    """

    requests: dict[str, Remembered] = field(factory=dict)
    commands: dict[str, Command] = field(factory=dict)
    room: Room = field(factory=Room)
    lease: Lease | None = None
    title: str | None = None
    preview: str | None = None
    previewInherited: bool = False
    #: The newest event's seq (the cursor) and time, and the trash name
    #: when it is C{session.deleted}.
    cursor: int = 0
    lastAt: str | None = None
    deletedAs: str | None = None
    #: The highest run number (C{run-<n>}) of the log.
    runs: int = 0
    #: The request that made the session (a create, a branch), when its
    #: log holds it; and the C{requestId}s of the branches it made.
    origin: RequestRecord | None = None
    branches: frozenset[str] = frozenset()


def owedEvents(
    events: list[Event], requests: list[RequestRecord], sessionId: str, now: str
) -> list[tuple[Event, RequestRecord]]:
    """
    The events of requests whose record was written but whose events were
    cut off (the session's commit), numbered on from the log's last, each
    with the request's record that owes it.
    """
    owed: list[tuple[Event, RequestRecord]] = []
    lastSeq = (events[-1].seq or 0) if events else 0
    for record in requests:
        effects, cursor = record.effects, record.cursor
        if effects is None or cursor is None:
            continue
        for eventType, data in effects[max(0, lastSeq - cursor):]:
            lastSeq += 1
            event = Event(
                seq=lastSeq,
                type=eventType,
                timestamp=record.at or now,
                sessionId=sessionId,
                data=data,
            )
            owed.append((event, record))
    return owed


def _pendingChime(record: RequestRecord) -> HeldChime | None:
    """
    The chime a chime's record left waiting for the driver, if it did.
    """
    said = objectOf(objectOf(record.frame.get("value")).get("chime"))
    text = record.body.get("text")
    if said.get("status") != "pending" or not isinstance(text, str):
        return None
    try:
        return fromJSON({**said, "text": text}, HeldChime)
    except ValueError:
        return None


def runNumber(event: Event) -> int:
    """
    The number of the run a C{run.started} event starts (C{run-<n>}), or 0.
    """
    if event.type != "run.started":
        return 0
    runId = textOf(event.data.get("runId"))
    if runId is not None and runId.startswith("run-") and runId[4:].isdigit():
        return int(runId[4:])
    return 0


def deletedAs(event: Event) -> str | None:
    """
    The trash name a C{session.deleted} event reserved, or L{None} for any
    other event.
    """
    return textOf(event.data.get("trashedAs")) if event.type == "session.deleted" else None


def derive(events: list[Event], requests: list[RequestRecord], baseTitle: str | None) -> Derived:
    """
    Every piece of a session's state from its logs (the owed events
    included).
    """
    out = Derived(title=baseTitle)
    branches: set[str] = set()
    for record in requests:
        if record.kind in ("create", "branched") and out.origin is None:
            out.origin = record
        if record.kind == "branch" and record.requestId is not None:
            branches.add(record.requestId)
        command = commandOfRecord(record)
        if command is not None:
            out.commands[command.commandId] = command
            out.preview, out.previewInherited = adoptedPreview(
                out.preview, out.previewInherited, command
            )
        if record.kind == "chime":
            held = _pendingChime(record)
            if held is not None:
                out.room.hold(held)
        # A session's own requests; the one that made it (a create, a
        # branch) is its registry's or its source's to replay.
        if (
            record.requestId is not None
            and record.fingerprint is not None
            and record.kind not in ("create", "branched")
        ):
            out.requests[record.requestId] = remembered(record.fingerprint, record.frame)
    out.branches = frozenset(branches)
    if events:
        newest = events[-1]
        out.cursor, out.lastAt, out.deletedAs = newest.seq or 0, newest.timestamp, deletedAs(newest)
    for event in events:
        out.runs = max(out.runs, runNumber(event))
        out.lease = leaseAfter(out.lease, event)
        followed(out.commands, event)
        kind, data = event.type, event.data
        if kind == "session.renamed":
            out.title = textOf(data.get("title"))
        elif kind == "session.created" and out.preview is None and data.get("preview"):
            out.preview = textOf(data["preview"])
            out.previewInherited = True
        elif kind == "room.policy":
            out.room.policy = policyOf(data.get("policy"), out.room.policy)
        elif kind == "chime.resolved":
            out.room.resolve(textOf(data.get("chimeId")) or "", textOf(data.get("status")))
    return out
