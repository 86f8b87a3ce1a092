"""
A fake pi child's side of the RPC line, for tests that drive one by hand
(L{tests.support.harness.FakePiTransport}): a record it prints, the answer
to a request the host wrote, the kinds of what the host wrote, its exit.
"""

from __future__ import annotations

import json
from typing import Any

from tests.support.harness import FakePiTransport


def record(transport: FakePiTransport, data: dict[str, Any]) -> None:
    transport.protocol.outReceived(json.dumps(data).encode() + b"\n")


def answer(transport: FakePiTransport, kind: str, data: Any = None, success: bool = True) -> None:
    """
    Answer the oldest request of C{kind} the host wrote to C{transport}.
    """
    answered = getattr(transport, "answered", set())
    transport.answered = answered  # type: ignore[attr-defined]  # a test's note on the fake
    for request in transport.written:
        if request.get("type") == kind and request["id"] not in answered:
            answered.add(request["id"])
            reply: dict[str, Any] = {"type": "response", "id": request["id"], "command": kind,
                                     "success": success}
            if data is not None:
                reply["data"] = data
            if not success:
                reply["error"] = "refused"
            record(transport, reply)
            return
    raise AssertionError(f"no {kind!r} request: {transport.written}")


def kinds(transport: FakePiTransport) -> list[str]:
    return [r["type"] for r in transport.written]


def exited(transport: FakePiTransport, code: int = 1) -> None:
    from twisted.internet.error import ProcessTerminated
    from twisted.python.failure import Failure

    transport.protocol.processEnded(Failure(ProcessTerminated(exitCode=code)))
