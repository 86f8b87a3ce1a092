# -*- test-case-name: tests.unit.test_requests,tests.unit.test_crash -*-
"""
A session's request log (C{commands.jsonl}) and the idempotency rule: the
record that remembers an accepted request, its fingerprint on its route,
the replay-or-conflict decision, a retry waiting for its first while that
is made durable (L{Answering}), and the refusal of a request the disk would
not take.
"""

from __future__ import annotations

import errno
import hashlib
import json
from pathlib import Path
from typing import Callable, Hashable

from attrs import define, field
from twisted.internet.defer import Deferred

from vehicle.errors import VehicleError, encode
from vehicle.protocol import (
    JSON,
    Command,
    Effects,
    Event,
    JSONObject,
    RecordKind,
    RequestRecord,
    fromJSON,
    intOf,
    objectOf,
)
from vehicle.session._values import Caller, isoTimestamp
from vehicle.store import JsonlLog


#: The route a kind of remembered request came by: a requestId reused on
#: another route is a conflict, never the other route's replay.
ROUTE_OF: dict[RecordKind, str] = {
    "create": "create", "claim": "claim", "release": "release", "rename": "rename",
    "command": "commands", "policy": "commands", "branch": "commands", "chime": "chimes",
    "branched": "commands",
}

#: What is remembered of an answered request: its fingerprint and its
#: frame's bytes (L{remembered}).
Remembered = tuple[str, bytes]


#: The canonical form's encoder, made once (C{json.dumps} makes one per call),
#: without the walk for cycles (see L{vehicle.errors._COMPACT}).
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), check_circular=False)


def remembered(digest: str, frame: JSONObject) -> Remembered:
    """
    An answered request as a session remembers it: its fingerprint and its
    frame, kept as the frame's bytes (L{encode}).  Bytes are outside the
    collector's reach, where a frame's dicts (and the pair holding them)
    are not: a session answers tens of thousands of requests, each full
    pass of the collector walked every one of them, and its pause grew with
    them (15-25 ms on the reactor's thread after 30,000 commands).  A
    replay reads the frame back (L{replayed}); a replay is rare.
    """
    return digest, encode(frame)


def fingerprint(request: JSON, route: str | None = None) -> str:
    """
    A stable digest of a request (its route and body, as sent), to tell a
    replay from a conflict.
    """
    subject = request if route is None else {"route": route, "body": request}
    canonical = _CANONICAL.encode(subject)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def replayed(
    known: Remembered | None, requestId: str, request: JSON, route: str
) -> JSONObject | None:
    """
    The idempotency rule, in one place: a known request with the same body
    replays its frame, with another body it is a conflict.

    @param known: the remembered C{(fingerprint, frame)}, or L{None}.
    @raise VehicleError: C{request_id_conflict}.
    """
    if known is None:
        return None
    digest, frame = known
    checkSame(digest, requestId, request, route)
    return objectOf(json.loads(frame))


def checkSame(digest: str, requestId: str, request: JSON, route: str) -> None:
    """
    A request sent again with a known C{requestId} must be the one first
    sent (its fingerprint C{digest}).

    @raise VehicleError: C{request_id_conflict}.
    """
    if digest != fingerprint(request, route):
        raise VehicleError(
            "request_id_conflict",
            f"requestId {requestId!r} was already used with a different body",
            {"requestId": requestId},
        )


def requestRecord(
    kind: RecordKind,
    caller: Caller,
    requestId: str,
    request: JSONObject,
    frame: JSONObject,
    now: float,
    *,
    route: str | None = None,
    cursor: int | None = None,
    effects: Effects | None = None,
    command: Command | None = None,
    source: str | None = None,
) -> RequestRecord:
    """
    The line of C{commands.jsonl} that remembers an accepted request: who
    sent it, its fingerprint (on its route: its kind's, unless named), its
    body and its answer.
    """
    return RequestRecord(
        kind=kind,
        requestId=requestId,
        principal=caller.principal,
        clientId=caller.clientId,
        fingerprint=fingerprint(request, route or ROUTE_OF[kind]),
        at=isoTimestamp(now),
        body=request,
        frame=frame,
        cursor=cursor,
        effects=effects,
        command=command,
        source=source,
    )


@define(eq=False)
class Answering:
    """
    The requests whose step is being made durable, and who waits for each:
    a retry that comes meanwhile waits, then replays it (or, refused, is
    taken afresh).  A request is known by its C{requestId} within a
    session, by its principal's and its C{requestId} among the creates
    (L{vehicle.session.Registry.creationUnderWay}).
    """

    #: request -> who waits for it.
    _waiting: dict[Hashable, list[Deferred[None]]] = field(factory=dict)

    def __bool__(self) -> bool:
        """
        Is any request being made durable?
        """
        return bool(self._waiting)

    def begin(self, requestId: Hashable) -> None:
        """
        The step of C{requestId} is on its way to disk (who waits already,
        for a branch being published, waits on).
        """
        self._waiting.setdefault(requestId, [])

    def waiter(self, requestId: Hashable) -> Deferred[None] | None:
        """
        While C{requestId} is being made durable, what fires once it is (or
        was refused); else L{None}.
        """
        waiting = self._waiting.get(requestId)
        if waiting is None:
            return None
        waiter: Deferred[None] = Deferred()
        waiting.append(waiter)
        return waiter

    def settled(self, requestId: Hashable) -> None:
        """
        The request C{requestId} is settled: who waited for it goes on.
        """
        for waiter in self._waiting.pop(requestId, []):
            waiter.callback(None)


def storageError(error: OSError) -> VehicleError:
    """
    The refusal of a request the disk would not take (no space, an I/O
    error): nothing of it was kept.
    """
    return VehicleError(
        "storage_unavailable",
        f"the host could not write this request to its disk ({error.strerror or error}); "
        "try again later: a retry with the same requestId answers what was kept, if anything",
        {"errno": errno.errorcode.get(error.errno or 0)},
    )


def eventOf(line: JSONObject) -> Event:
    """
    An event read back from C{events.jsonl} (its C{data} an object, if
    anything).

    @raise ValueError: the line is not an event.
    """
    return fromJSON({**line, "data": objectOf(line.get("data"))}, Event)


#: The parts of a record whose shape is checked before it is read: a part
#: that does not fit is left out.
_RECORD_PARTS: tuple[tuple[str, Callable[[JSON], bool]], ...] = (
    ("cursor", lambda v: intOf(v) is not None),
    ("effects", lambda v: isinstance(v, list)),
    ("fingerprint", lambda v: isinstance(v, str)),
    ("requestId", lambda v: isinstance(v, str)),
)


def recordOf(line: JSONObject) -> RequestRecord:
    """
    A request's record read back from C{commands.jsonl}.  A part an older
    or odder record holds in a shape the host no longer writes is left out
    (its body and answer as objects, if anything): what it says of the
    rest still counts.

    @raise ValueError: the line is not a record.
    """
    fitted: JSONObject = {**line, "body": objectOf(line.get("body")),
                          "frame": objectOf(line.get("frame"))}
    for name, fits in _RECORD_PARTS:
        if name in fitted and not fits(fitted[name]):
            del fitted[name]
    fitted.setdefault("requestId", None)
    try:
        return fromJSON(fitted, RequestRecord)
    except ValueError:
        # The command it made, in a shape this host cannot read: its body
        # makes it again (L{commandOfRecord}).
        fitted.pop("command", None)
        fitted.pop("effects", None)
        return fromJSON(fitted, RequestRecord)


def openLogs(
    directory: Path, syncFolder: bool = True
) -> tuple[JsonlLog, list[Event], JsonlLog, list[RequestRecord]]:
    """
    Open a session's two logs (made when missing) and read them back.

    @param syncFolder: see L{JsonlLog.open} (C{False}: a folder built aside).
    @raise ValueError: a line of either is not what the host writes there.
    """
    events, eventLines = JsonlLog.open(directory / "events.jsonl", seqField="seq",
                                       syncFolder=syncFolder)
    try:
        commands, recordLines = JsonlLog.open(directory / "commands.jsonl",
                                              syncFolder=syncFolder)
        try:
            return (
                events, [eventOf(line) for line in eventLines],
                commands, [recordOf(line) for line in recordLines],
            )
        except BaseException:
            commands.close()
            raise
    except BaseException:
        events.close()
        raise
