# -*- test-case-name: tests.unit.test_schemas,tests.unit.test_web,tests.unit.test_limits -*-
"""
The protocol's error codes and their HTTP statuses: one table, one exception,
one way to answer with a frame.

Every refusal anywhere in the host is a L{VehicleError}; every answer that
carries one, wherever it is made (a route, the router's own refusals, the
request below the routes, the channel before there is a request), is
L{answerError}: the table's status, JSON, never cached.
"""

from __future__ import annotations

import json
from typing import Mapping, Protocol

from attrs import frozen

from vehicle import PROTOCOL
from vehicle._jsontypes import JSON, JSONObject


#: error code -> HTTP status (spec, "Frames", the error table).
STATUS: Mapping[str, int] = {
    "unauthorized": 401,
    "identity_required": 401,
    "invalid_identity": 400,
    "graph_required": 400,
    "graph_mismatch": 400,
    "access_reduced": 403,
    "forbidden_profile": 403,
    "isolation_unavailable": 503,
    "body_tampered": 409,
    "invalid_request": 400,
    "invalid_json": 400,
    "body_too_large": 413,
    "not_found": 404,
    "not_session_owner": 403,
    "lease_required": 409,
    "lease_held": 409,
    "lease_not_held": 409,
    "request_id_conflict": 409,
    "command_exists": 409,
    "not_cancellable": 409,
    "chime_not_pending": 409,
    "nothing_to_fork": 409,
    "session_running": 409,
    "delegation_required": 409,
    "model_unavailable": 400,
    "model_key_required": 402,
    "out_of_credit": 402,
    "email_unverified": 402,
    "credit_pool_exhausted": 503,
    "daily_turn_limit": 429,
    "session_turn_limit": 429,
    "model_not_allowed": 400,
    "invalid_model_key": 400,
    "chimes_closed": 403,
    "not_public": 403,
    "forbidden": 403,
    # Not in the spec's table: HTTP's own refusals, each still the error
    # frame (a route or method the host does not have, a request too slow,
    # a request line or headers too long).
    "method_not_allowed": 405,
    "request_timeout": 408,
    "uri_too_long": 414,
    "headers_too_large": 431,
    "internal": 500,
    # Not in the spec's table either: the disk refused a request (no space, an I/O error).
    "storage_unavailable": 503,
    # Nor this (issue 19): the shared credit ledger (PostgreSQL) cannot be
    # reached or is too slow; public turns are refused at once.
    "ledger_unavailable": 503,
}


@frozen
class VehicleError(Exception):
    """
    A refusal with a protocol error code.

    @ivar code: one of L{STATUS}'s keys.
    @ivar message: a sentence for a person.
    @ivar details: extra structured facts (C{holder}, C{open}, ...).
    @ivar status: overrides the table's status where the spec allows two
        (C{model_unavailable} is 400 or 503).
    """

    code: str
    message: str
    details: Mapping[str, JSON] | None = None
    status: int | None = None

    def __attrs_post_init__(self) -> None:
        if self.code not in STATUS:
            raise ValueError(f"unknown error code {self.code!r}")

    @property
    def httpStatus(self) -> int:
        return self.status if self.status is not None else STATUS[self.code]

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"


def invalid(message: str, **details: JSON) -> VehicleError:
    """
    Shorthand for an C{invalid_request} naming what was wrong.
    """
    return VehicleError("invalid_request", message, details or None)


def errorFrame(error: VehicleError, requestId: str | None = None) -> JSONObject:
    """
    The protocol's error frame for C{error} (spec, "Frames").
    """
    return {
        "protocol": PROTOCOL,
        "type": "error",
        "requestId": requestId,
        "code": error.code,
        "message": error.message,
        "details": dict(error.details) if error.details is not None else None,
    }


#: Made once: C{json.dumps} with separators makes a new one every call.
#: No walk for cycles: what is encoded is a tree (parsed JSON, or values the
#: host builds), and the walk's bookkeeping is a fifth of an encoding; a
#: cycle, a fault of the host's, would end in C{RecursionError}.
_COMPACT = json.JSONEncoder(separators=(",", ":"), check_circular=False)


def encode(value: object) -> bytes:
    """
    A frame's bytes: compact JSON in UTF-8 (what C{json.dumps(value,
    separators=(",", ":"))} gives).
    """
    return _COMPACT.encode(value).encode("utf-8")


class Answering(Protocol):
    """
    What L{answerFrame} needs of a response being made: a request
    (L{twisted.web.iweb.IRequest}), or anything else that takes a status
    and headers.
    """

    def setResponseCode(self, code: int) -> None: ...

    def setHeader(self, name: bytes, value: bytes) -> None: ...


def answerFrame(response: Answering, status: int, value: JSONObject | bytes) -> bytes:
    """
    Make C{response} answer C{value} as a frame: C{status}, JSON, never
    cached.

    @param value: the frame, or its bytes already L{encode}d.
    @return: the body to write (L{encode}d C{value}).
    """
    response.setResponseCode(status)
    response.setHeader(b"content-type", b"application/json")
    response.setHeader(b"cache-control", b"no-store")
    return value if isinstance(value, bytes) else encode(value)


def answerError(response: Answering, error: VehicleError, requestId: str | None = None) -> bytes:
    """
    Make C{response} answer C{error} as the error frame, with its status
    (L{answerFrame} of L{errorFrame}).

    @return: the body to write.
    """
    return answerFrame(response, error.httpStatus, errorFrame(error, requestId))
