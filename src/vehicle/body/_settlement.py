# -*- test-case-name: tests.unit.test_conductor -*-
"""
The way back from pi: its events become the session's (through the
L{Translator}), a queued command is delivered when pi's user message for
it ends, a run's commands are settled when it ends, the extension's
questions are answered, and an exit settles what was under way.  The
session's observers hear of each settled run (L{Session.settled}).
"""

from __future__ import annotations

from typing import Any, Protocol

from attrs import define

from vehicle.body._life import BodyLife
from vehicle.body._live import LiveBody
from vehicle.session import Command, Session


class Redelivery(Protocol):
    """
    What settling needs of the way out (L{vehicle.body._delivery.Delivery}).
    """

    def clearLater(self, body: LiveBody, reason: str) -> None:
        """
        Clear pi's queue; what it held is cancelled with C{reason}.
        """

    def redeliver(self, body: LiveBody, leftovers: list[Command]) -> None:
        """
        Deliver C{leftovers} (stranded in pi's queue) again.
        """

    def behind(self) -> set[str]:
        """
        The ids of the commands waiting behind the one being delivered.
        """


@define(eq=False)
class Settlement:
    """
    Hears one session's body (L{vehicle.body.IBodySink}, through the
    conductor) and settles its runs.
    """

    session: Session
    life: BodyLife
    delivery: Redelivery

    def piEvent(self, event: dict[str, Any]) -> None:
        body = self.life.body
        if body is None:
            return
        kind = event.get("type")
        if kind == "agent_start":
            if body.run is None:
                body.startRun()
            elif not body.translator.runOpen:
                body.run.modelRequests = 0
            self.life.pump.cancelIdle()
        elif kind == "message_end":
            self._userMessage(body, event.get("message") or {})
        settled: dict[str, Any] = {}
        for hostEvent in body.translator.feed(event):
            if hostEvent.type == "ui.request":
                self._answerUI(hostEvent.data)
            elif hostEvent.durable:
                emitted = self.session.emit(hostEvent.type, hostEvent.data)
                if hostEvent.type == "budget.exceeded":
                    self._budgetStop()
                if hostEvent.type == "run.settled":
                    settled = {**hostEvent.data, "seq": emitted.get("seq")}
            else:
                self.session.broadcast(hostEvent.type, hostEvent.data)
        if kind == "agent_settled":
            self._settled(bool(event.get("aborted")), settled)

    def _userMessage(self, body: LiveBody, message: dict[str, Any]) -> None:
        if message.get("role") != "user":
            return
        parts = message.get("content")
        if isinstance(parts, str):
            text = parts
        else:
            text = "".join(
                p.get("text", "") for p in parts or [] if isinstance(p, dict) and p.get("type") == "text"
            )
        command = body.delivered(text)
        if command is not None:
            self.session.setStatus(command.commandId, "delivered")

    def _budgetStop(self) -> None:
        """
        The budget stopped the run: what pi still queues goes with it.
        """
        body = self.life.body
        if body is not None and body.queued:
            self.delivery.clearLater(body, "budget_exceeded")

    def _settled(self, aborted: bool, info: dict[str, Any]) -> None:
        body = self.life.body
        if body is None:
            return
        finished = body.endRun()
        status = "aborted" if aborted else "completed"
        for command in finished:
            self.session.setStatus(command.commandId, status)
        body.abortRequested = False
        leftovers = list(body.queued)
        if leftovers and not aborted:
            # Still in pi's queue with no run to take them: start one.
            self.session.emit(
                "queue.stranded", {"commandIds": [c.commandId for c in leftovers]}
            )
            body.queued = []
            self.delivery.redeliver(body, leftovers)
        elif leftovers and aborted:
            self.delivery.clearLater(body, "aborted")
        self.session.settled({**info, "aborted": aborted})
        self.life.armIdle()

    def _answerUI(self, request: dict[str, Any]) -> None:
        body = self.life.body
        if body is None:
            return
        answer: dict[str, Any] = {"type": "extension_ui_response", "id": request.get("id")}
        if request.get("method") == "input" and request.get("title") == "sophia.delegated-token":
            token = self.session.delegatedToken
            if token:
                answer["value"] = token
            else:
                answer["cancelled"] = True
        elif request.get("method") == "confirm":
            answer["confirmed"] = False
        else:
            answer["cancelled"] = True
        body.protocol.send(answer)

    def bodyExited(self, exitCode: int | None, signal: int | None, stderrTail: str) -> None:
        body = self.life.body
        expected = body is None or body.expectExit
        wasRunning = body is not None and body.run is not None
        runId = body.translator.currentRunId if body is not None else None
        cost = body.translator.runCostUsd if body is not None else None
        tail = self.life.scrub(stderrTail)[-4096:]  # while the body's own token is known
        self.life.gone()
        if expected or self.session.deleted or self.life.closing:
            return
        self.session.emit(
            "body.exited",
            {"exitCode": exitCode, "signal": signal, "stderrTail": tail},
        )
        if wasRunning:
            settled = self.session.emit(
                "run.settled",
                {"runId": runId, "aborted": True, "stopReason": "body_exited",
                 "costUsd": cost},
            )
            # A run that ended with its body is still a settled run: its
            # cost is debited and the mirror catches up.
            self.session.settled({"aborted": True, "seq": settled.get("seq"), "costUsd": cost})
        waiting = self.delivery.behind()
        for record in self.session.openCommands():
            if record["commandId"] in waiting:
                continue
            self.session.setStatus(
                record["commandId"], "failed", error="the body exited", code="body_exited"
            )
