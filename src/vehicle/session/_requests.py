# -*- test-case-name: tests.unit.test_crash -*-
"""
A session's request log (C{commands.jsonl}) and the idempotency rule: the
record that remembers an accepted request, its fingerprint on its route,
the replay-or-conflict decision, and the refusal of a request the disk
would not take.
"""

from __future__ import annotations

import errno
import hashlib
import json
from pathlib import Path
from typing import Any

from vehicle.errors import VehicleError
from vehicle.session._values import Caller, isoTimestamp
from vehicle.store import JsonlLog


#: The route a kind of remembered request came by: a requestId reused on
#: another route is a conflict, never the other route's replay.
ROUTE_OF = {
    "create": "create", "claim": "claim", "release": "release", "rename": "rename",
    "command": "commands", "policy": "commands", "branch": "commands", "chime": "chimes",
    "branched": "commands",
}


def fingerprint(request: Any, route: str | None = None) -> str:
    """
    A stable digest of a request (its route and body), to tell a replay
    from a conflict.
    """
    subject = request if route is None else {"route": route, "body": request}
    canonical = json.dumps(subject, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def replayed(
    known: tuple[str, dict[str, Any]] | None, requestId: str, request: Any, route: str
) -> dict[str, Any] | None:
    """
    The idempotency rule, in one place: a known request with the same body
    replays its frame, with another body it is a conflict.

    @param known: the remembered C{(fingerprint, frame)}, or L{None}.
    @raise VehicleError: C{request_id_conflict}.
    """
    if known is None:
        return None
    digest, frame = known
    if digest != fingerprint(request, route):
        raise VehicleError(
            "request_id_conflict",
            f"requestId {requestId!r} was already used with a different body",
            {"requestId": requestId},
        )
    return frame


def requestRecord(
    kind: str, caller: Caller, requestId: str, request: Any, frame: dict[str, Any],
    route: str, now: float, **extra: Any,
) -> dict[str, Any]:
    """
    The line of C{commands.jsonl} that remembers an accepted request: who
    sent it, its fingerprint (on its route), its body and its answer.
    """
    return {
        "kind": kind,
        "requestId": requestId,
        "principal": caller.principal,
        "clientId": caller.clientId,
        "fingerprint": fingerprint(request, route),
        "at": isoTimestamp(now),
        "body": request,
        "frame": frame,
        **extra,
    }


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


def openLogs(
    directory: Path,
) -> tuple[JsonlLog, list[dict[str, Any]], JsonlLog, list[dict[str, Any]]]:
    """
    Open a session's two logs (made when missing) and read them back.
    """
    events, eventRecords = JsonlLog.open(directory / "events.jsonl", seqField="seq")
    try:
        commands, requestRecords = JsonlLog.open(directory / "commands.jsonl")
    except BaseException:
        events.close()
        raise
    return events, eventRecords, commands, requestRecords
