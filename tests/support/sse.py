"""
The host's events for the tail's tests: L{event}, one event of a session
as the host records it, and L{sse}, that event as the host streams it.
"""

from __future__ import annotations

import json
from typing import Any

from vehicle import PROTOCOL


def sse(event: dict[str, Any]) -> bytes:
    """
    One event as the host streams it.
    """
    head = f"id: {event['seq']}\n" if "seq" in event else ""
    return (head + f"event: {event['type']}\ndata: {json.dumps(event)}\n\n").encode()


def event(seq: int, kind: str = "session.renamed", sessionId: str = "s1") -> dict[str, Any]:
    return {"protocol": PROTOCOL, "seq": seq, "type": kind, "sessionId": sessionId,
            "timestamp": "2026-01-01T00:00:00Z", "data": {}}
