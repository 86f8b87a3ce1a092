"""
The host's events for the tail's tests: L{event}, one event of a session
as the host records it.  The host's own encoder
(L{vehicle.web.sseEncode}) streams it.
"""

from __future__ import annotations

from typing import Any

from vehicle import PROTOCOL


def event(seq: int, kind: str = "session.renamed", sessionId: str = "s1") -> dict[str, Any]:
    return {"protocol": PROTOCOL, "seq": seq, "type": kind, "sessionId": sessionId,
            "timestamp": "2026-01-01T00:00:00Z", "data": {}}
