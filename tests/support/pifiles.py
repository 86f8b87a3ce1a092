"""
pi's session files, built by hand as pi 1.6.0 writes them: the C{HEADER}
record, an C{entry} with pi's common fields, C{user} and C{assistant}
message entries, C{encode} (compact JSON lines) and C{writePiFile}, which
puts such a file in a session's C{pi/} folder.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any


USAGE = {
    "input": 1000, "output": 50, "cacheRead": 0, "cacheWrite": 0, "reasoning": 0,
    "totalTokens": 1050,
    "cost": {"input": 0.003, "output": 0.00075, "cacheRead": 0, "cacheWrite": 0,
             "total": 0.00375, "totalFromProvider": False},
}

HEADER = {
    "type": "session", "version": 3, "id": "01a22b41-9d52-70f0-9a8d-de3c7ecd8d5c",
    "timestamp": "2026-11-30T07:00:50.130Z", "cwd": "/scratch/ws",
}


def entry(kind: str, id: str, parentId: str | None, second: float, **fields: Any) -> dict[str, Any]:
    """
    One session entry with pi's common fields.
    """
    stamp = datetime(2026, 11, 30, 7, 0, tzinfo=timezone.utc) + timedelta(seconds=second)
    return {
        "type": kind, "id": id, "parentId": parentId,
        "timestamp": stamp.strftime("%Y-%m-%dT%H:%M:%S.") + f"{stamp.microsecond // 1000:03d}Z",
        **fields,
    }


def user(id: str, parentId: str | None, second: float, text: str) -> dict[str, Any]:
    """
    A user message entry.
    """
    return entry("message", id, parentId, second, message={
        "role": "user", "content": [{"type": "text", "text": text}],
        "timestamp": 1796022050276,
    })


def assistant(id: str, parentId: str | None, second: float, content: list[dict[str, Any]],
              stopReason: str = "stop") -> dict[str, Any]:
    """
    An assistant message entry.
    """
    return entry("message", id, parentId, second, message={
        "role": "assistant", "content": content, "api": "openai-completions",
        "provider": "sophia", "model": "fake-1", "usage": USAGE, "stopReason": stopReason,
        "timestamp": 1796022050414, "responseId": "chatcmpl-1", "rawStopReason": stopReason,
        "durationMs": 136, "thinkingLevel": "off",
    })


def encode(records: list[dict[str, Any]]) -> bytes:
    """
    Records as pi writes them: compact JSON, raw non-ASCII, LF after each.
    """
    return b"".join(
        json.dumps(r, ensure_ascii=False, separators=(",", ":")).encode("utf-8") + b"\n"
        for r in records
    )


def writePiFile(sessionDir: Path, records: list[dict[str, Any]]) -> Path:
    """
    A pi session file, as pi writes it, in the session's C{pi/} folder.
    """
    path = sessionDir / "pi" / "2026-11-30T07-00-50-130Z_01a22b41-9d52-70f0-9a8d-de3c7ecd8d5c.jsonl"
    path.write_bytes(encode(records))
    return path
