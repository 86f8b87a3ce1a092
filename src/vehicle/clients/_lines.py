# -*- test-case-name: tests.unit.test_ride -*-
"""
What one request line of a ride asks of the host: the line read (JSON, an
object, a C{requestId}, an op this ride may send) and the host's route for
it (L{Call}).  Pure: the ride (L{vehicle.clients._ride.Ride}) sends the
call and follows the answer.
"""

from __future__ import annotations

from typing import Callable

from attrs import frozen

from vehicle.clients._link import errorFrame
from vehicle.protocol import JSON, JSONObject, intOf, loads


#: Ops that are command types: C{POST /sessions/:id/commands}, C{type} = op.
COMMAND_OPS = frozenset(
    {
        "prompt",
        "follow_up",
        "steer",
        "abort",
        "cancel",
        "shutdown",
        "fork",
        "clone",
        "set_room_policy",
        "accept_chime",
        "reject_chime",
    }
)

#: Every op a line may name.
OPS = COMMAND_OPS | frozenset(
    {"claim", "release", "chime", "inspect", "capsule", "watch", "rename", "delete", "list"}
)

#: The ops a ride that only watches (C{--watch-only}) may send: none of
#: them claims, uses or makes a lease.
WATCH_OPS = frozenset({"inspect", "capsule", "watch", "list"})

class Refused(Exception):
    """
    A line the ride answers itself with an error frame.
    """

    def __init__(self, code: str, message: str, details: JSONObject | None = None) -> None:
        super().__init__(code, message)
        self.code = code
        self.message = message
        self.details = details


@frozen(kw_only=True)
class Call:
    """
    One request to the host: what a line asks for.
    """

    method: str
    path: str
    payload: JSONObject | None = None
    query: dict[str, str] | None = None


@frozen
class Line:
    """
    A request line read: its id, its op and the host's route for it.
    """

    requestId: str
    op: str
    call: Call


def readLine(
    raw: bytes, watchOnly: bool, route: Callable[[str, JSONObject], Call]
) -> Line | JSONObject | None:
    """
    Read one request line: L{None} for a blank one, else the L{Line} or
    the error frame that answers it.

    @param route: the host's route for an op and its request (L{callFor}).
    """
    text = raw.rstrip(b"\r")
    if not text.strip():
        return None
    try:
        request = loads(text.decode("utf-8"))
    except UnicodeDecodeError:
        return errorFrame("invalid_json", "the line is not UTF-8")
    except ValueError as e:
        return errorFrame("invalid_json", f"the line is not JSON: {e}")
    if not isinstance(request, dict):
        return errorFrame("invalid_request", "a request is a JSON object")
    requestId = request.get("requestId")
    if not isinstance(requestId, str) or not requestId:
        return errorFrame("invalid_request", "requestId is required", details={"field": "requestId"})
    try:
        op = knownOp(request.get("op"))
        if watchOnly and op not in WATCH_OPS:
            raise Refused(
                "invalid_request",
                f"this ride only watches (--watch-only): {op} is not sent; "
                f"it takes {', '.join(sorted(WATCH_OPS))}",
                {"field": "op"},
            )
        call = route(op, request)
    except Refused as refused:
        return errorFrame(refused.code, refused.message, requestId, refused.details)
    return Line(requestId, op, call)


def knownOp(op: JSON) -> str:
    """
    C{op}, which names one of L{OPS}.

    @raise Refused: it names none.
    """
    if not isinstance(op, str) or op not in OPS:
        raise Refused(
            "invalid_request",
            f"unknown op {op!r}: one of {', '.join(sorted(OPS))}",
            {"field": "op"},
        )
    return op


def callFor(
    op: str, request: JSONObject, sessionPath: Callable[..., str], sessionId: str, cursor: int
) -> Call:
    """
    The host's route for a request line on session C{sessionId}; a
    C{watch} without C{since} starts at C{cursor}.

    @param op: one of L{OPS} (L{knownOp}).
    @raise Refused: a malformed C{since}/C{waitMs}.
    """
    payload = {k: v for k, v in request.items() if k != "op"}
    session = sessionPath
    sid = sessionId
    if op in COMMAND_OPS:
        return Call(method="POST", path=session(sid, "/commands"), payload={**payload, "type": op})
    if op in ("claim", "release"):
        return Call(method="POST", path=session(sid, "/" + op), payload=payload)
    if op == "chime":
        return Call(method="POST", path=session(sid, "/chimes"), payload=payload)
    if op == "rename":
        return Call(method="PATCH", path=session(sid), payload=payload)
    if op == "delete":
        return Call(method="DELETE", path=session(sid))
    if op == "inspect":
        return Call(method="GET", path=session(sid))
    if op == "capsule":
        return Call(method="GET", path=session(sid, "/capsule"))
    if op == "list":
        return Call(method="GET", path="/sessions")
    # watch
    query = {"since": str(_whole(request, "since", cursor))}
    if "waitMs" in request:
        query["waitMs"] = str(_whole(request, "waitMs", 0))
    return Call(method="GET", path=session(sid, "/events"), query=query)


def _whole(request: JSONObject, name: str, default: int) -> int:
    value = intOf(request.get(name, default))
    if value is None or value < 0:
        raise Refused(
            "invalid_request", f"{name} must be a whole number of at least 0", {"field": name}
        )
    return value
