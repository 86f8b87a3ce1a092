# -*- test-case-name: tests.unit.test_crash -*-
"""
A session read back from its two logs: the events a cut host owed
(L{owedEvents}), then every piece of state derived from the logs by the
rules that wrote them (L{derive}).  Pure: the session applies the result.
"""

from __future__ import annotations

from typing import Any

from attrs import define, field

from vehicle.session._command import CommandBook, adoptedPreview, followed
from vehicle.session._lease import leaseAfter
from vehicle.session._values import Lease


@define
class Derived:
    """
    What the logs say a session is.
    """

    requests: dict[str, tuple[str, dict[str, Any]]] = field(factory=dict)
    commands: dict[str, dict[str, Any]] = field(factory=dict)
    chimes: dict[str, dict[str, Any]] = field(factory=dict)
    lease: Lease | None = None
    title: str | None = None
    preview: str | None = None
    previewInherited: bool = False
    roomPolicy: str = "suggest"


def owedEvents(
    events: list[dict[str, Any]], requests: list[dict[str, Any]], sessionId: str, now: str
) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """
    The events of requests whose record was written but whose events were
    cut off (the session's commit), numbered on from the log's last, each
    with the request's record that owes it.
    """
    owed: list[tuple[dict[str, Any], dict[str, Any]]] = []
    lastSeq = events[-1]["seq"] if events else 0
    for record in requests:
        effects, cursor = record.get("effects"), record.get("cursor")
        if not isinstance(effects, list) or not isinstance(cursor, int):
            continue
        for eventType, data in effects[max(0, lastSeq - cursor):]:
            lastSeq += 1
            event = {
                "seq": lastSeq,
                "type": eventType,
                "timestamp": record.get("at") or now,
                "sessionId": sessionId,
                "data": data,
            }
            owed.append((event, record))
    return owed


def derive(
    events: list[dict[str, Any]], requests: list[dict[str, Any]], baseTitle: str | None
) -> Derived:
    """
    Every piece of a session's state from its logs (the owed events
    included).
    """
    out = Derived(title=baseTitle)
    for record in requests:
        command = CommandBook.ofRequest(record)
        if command is not None:
            out.commands[command["commandId"]] = command
            out.preview, out.previewInherited = adoptedPreview(
                out.preview, out.previewInherited, command
            )
        if record.get("kind") == "chime":
            chime = ((record.get("frame") or {}).get("value") or {}).get("chime") or {}
            if chime.get("status") == "pending":
                out.chimes[chime["chimeId"]] = {**chime, "text": record["body"]["text"]}
        # A session's own requests; the one that made it (a create, a
        # branch) is its registry's or its source's to replay.
        if (
            isinstance(record.get("requestId"), str)
            and "fingerprint" in record
            and record.get("kind") not in ("create", "branched")
        ):
            out.requests[record["requestId"]] = (record["fingerprint"], record["frame"])
    for event in events:
        out.lease = leaseAfter(out.lease, event)
        followed(out.commands, event)
        kind, data = event["type"], event.get("data") or {}
        if kind == "session.renamed":
            out.title = data.get("title")
        elif kind == "session.created" and out.preview is None and data.get("preview"):
            out.preview = data["preview"]
            out.previewInherited = True
        elif kind == "room.policy":
            out.roomPolicy = data.get("policy", out.roomPolicy)
        elif kind == "chime.resolved" and data.get("chimeId") in out.chimes:
            out.chimes[data["chimeId"]]["status"] = data.get("status")
    return out
