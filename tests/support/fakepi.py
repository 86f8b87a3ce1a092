"""
L{FakePi}: the pi side of the newest fake body the harness's
L{FakeLauncher} spawned (what the host asked it, and pi's answers and
records fed in by hand), with the C{get_state} answer C{STATE} and the
C{USAGE} of one assistant message.  No process is started.
"""

from __future__ import annotations

from typing import Any

from twisted.internet.error import ProcessDone, ProcessTerminated
from twisted.python.failure import Failure

from tests.support.harness import FakeLauncher, FakePiTransport


USAGE = {"input": 10, "output": 5, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 15,
         "cost": {"total": 0.001}}

STATE = {"model": {"id": "echo-1"}, "isStreaming": False, "messageCount": 0,
         "pendingMessageCount": 0}


class FakePi:
    """
    The pi side of the newest fake body: what the host asked, and answers.
    """

    def __init__(self, launcher: FakeLauncher) -> None:
        self.launcher = launcher
        self.answered: set[str] = set()

    @property
    def transport(self) -> FakePiTransport:
        return self.launcher.spawned[-1]

    def requests(self) -> list[dict[str, Any]]:
        """
        Every request the host wrote to this body (not UI answers).
        """
        return [r for r in self.transport.written if r.get("type") != "extension_ui_response"]

    def kinds(self) -> list[str]:
        return [r["type"] for r in self.requests()]

    def uiAnswers(self) -> list[dict[str, Any]]:
        return [r for r in self.transport.written if r.get("type") == "extension_ui_response"]

    def pending(self, kind: str) -> dict[str, Any]:
        """
        The oldest unanswered request of this kind.
        """
        for record in self.requests():
            if record["type"] == kind and record["id"] not in self.answered:
                return record
        raise AssertionError(f"no pending {kind!r} request; the host wrote {self.kinds()}")

    def answer(self, kind: str, data: Any = None, success: bool = True, error: str = "") -> None:
        request = self.pending(kind)
        self.answered.add(request["id"])
        response: dict[str, Any] = {"type": "response", "id": request["id"], "command": kind,
                                    "success": success}
        if success and data is not None:
            response["data"] = data
        if not success:
            response["error"] = error
        self.send(response)

    def send(self, record: dict[str, Any]) -> None:
        self.launcher.reply(record)

    # pi's records for one run, as pi writes them

    def agentStart(self) -> None:
        self.send({"type": "agent_start"})

    def user(self, text: str) -> None:
        self.send({"type": "message_end",
                   "message": {"role": "user", "content": [{"type": "text", "text": text}]}})

    def assistant(self, text: str = "Sure.", stopReason: str = "stop") -> None:
        self.send({"type": "message_update",
                   "assistantMessageEvent": {"type": "text_delta", "delta": text}})
        self.send({"type": "message_end",
                   "message": {"role": "assistant", "content": [{"type": "text", "text": text}],
                               "usage": USAGE, "stopReason": stopReason}})

    def settle(self, aborted: bool = False) -> None:
        self.send({"type": "agent_end", "willRetry": False})
        self.send({"type": "agent_settled", "aborted": aborted})

    def exit(self, exitCode: int | None = 1, signal: int | None = None, stderr: bytes = b"") -> None:
        protocol = self.transport.protocol
        if stderr:
            protocol.errReceived(stderr)
        if exitCode == 0:
            protocol.processEnded(Failure(ProcessDone(None)))
        else:
            protocol.processEnded(Failure(ProcessTerminated(exitCode, signal, None)))
