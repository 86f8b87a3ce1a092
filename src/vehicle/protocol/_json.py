# -*- test-case-name: tests.unit.test_protocol -*-
"""
JSON as the type checker sees it (L{JSON}, L{JSONObject}, defined in
L{vehicle._jsontypes}): the values the wire carries, nothing looser.  Code
that reads a JSON value narrows it (C{isinstance}) before it trusts it; the
protocol's own values are attrs classes (L{vehicle.protocol}) and become
JSON only through the codec.
"""

from __future__ import annotations

import json

from vehicle._jsontypes import JSON as JSON, JSONObject as JSONObject  # the protocol's names for them
from vehicle.errors import encode


def dumps(value: object) -> bytes:
    """
    Compact JSON in UTF-8 (ASCII, in fact: anything else is escaped, so a
    lone surrogate pi sent is carried, never an encoding error): a frame's
    bytes (L{vehicle.errors.encode}).
    """
    return encode(value)


def loads(data: bytes | str) -> JSON:
    """
    JSON text read back (the caller narrows what it expects).
    """
    value: JSON = json.loads(data)
    return value


def objectOf(value: JSON) -> JSONObject:
    """
    C{value} if it is a JSON object, else an empty one: for optional
    sub-objects read back from a log or pi.
    """
    return value if isinstance(value, dict) else {}


def objectsOf(value: JSON) -> list[JSONObject]:
    """
    The objects of C{value} if it is a JSON array (anything else in it is
    left out), else none: for lists of objects read back from a peer.
    """
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []


def textOf(value: JSON) -> str | None:
    """
    C{value} if it is a string, else L{None}.
    """
    return value if isinstance(value, str) else None


def intOf(value: JSON) -> int | None:
    """
    C{value} if it is an integer (not a bool), else L{None}.
    """
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def numberOf(value: JSON) -> float | None:
    """
    C{value} as a float if it is a number (not a bool), else L{None}.
    """
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return None
