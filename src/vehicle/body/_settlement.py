# -*- test-case-name: tests.unit.test_conductor -*-
"""
The way back from pi: its events become the session's (through the
L{Translator}), a queued command is delivered when pi's user message for
it ends, a run's commands are settled when it ends, the extension's
questions are answered, and an exit settles what was under way.  The
session's observers hear of each settled run (L{Session.settled}).
"""

from __future__ import annotations

from typing import Protocol

from attrs import define

from vehicle.body._life import BodyLife
from vehicle.body._live import LiveBody
from vehicle.body._pimessage import PiMessage
from vehicle.body._questions import answerFor
from vehicle.protocol import Command, CommandStatus, JSONObject, numberOf, objectOf
from vehicle.session import RunSettled, Session


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

    def piEvent(self, event: JSONObject) -> None:
        body = self.life.body
        if body is None:
            return
        kind = event.get("type")
        if kind == "agent_start":
            if body.run is None:
                body.startRun()
            elif not body.translator.runOpen:
                body.turnStarted()
            self.life.pump.cancelIdle()
        elif kind == "message_end":
            self._userMessage(body, PiMessage.fromJSON(objectOf(event.get("message"))))
        settled: RunSettled | None = None
        for hostEvent in body.translator.feed(event):
            if hostEvent.type == "ui.request":
                self._answerUI(hostEvent.data)
            elif hostEvent.durable:
                emitted = self.session.emit(hostEvent.type, hostEvent.data)
                if hostEvent.type == "budget.exceeded":
                    self._budgetStop()
                if hostEvent.type == "run.settled":
                    settled = RunSettled(
                        seq=emitted.seq, aborted=bool(hostEvent.data.get("aborted")),
                        costUsd=numberOf(hostEvent.data.get("costUsd")),
                    )
            else:
                self.session.feed.broadcast(hostEvent.type, hostEvent.data)
        if kind == "agent_settled":
            self._settled(bool(event.get("aborted")), settled)

    def _userMessage(self, body: LiveBody, message: PiMessage) -> None:
        if message.role != "user":
            return
        # The text pi was sent comes back as its parts, joined as they are.
        command = body.delivered("".join(message.texts))
        if command is not None:
            self.session.move(command.commandId, CommandStatus.delivered)

    def _budgetStop(self) -> None:
        """
        The budget stopped the run: what pi still queues goes with it.
        """
        body = self.life.body
        if body is not None and body.queued:
            self.delivery.clearLater(body, "budget_exceeded")

    def _settled(self, aborted: bool, settled: RunSettled | None) -> None:
        body = self.life.body
        if body is None:
            return
        finished = body.endRun()
        status = CommandStatus.aborted if aborted else CommandStatus.completed
        for command in finished:
            self.session.move(command.commandId, status)
        body.abortSettled()
        if body.queued and not aborted:
            # Still in pi's queue with no run to take them: start one.
            self.session.emit("queue.stranded", {"commandIds": list(body.queuedIds())})
            self.delivery.redeliver(body, body.takeQueued())
        elif body.queued and aborted:
            self.delivery.clearLater(body, "aborted")
        seq, cost = (settled.seq, settled.costUsd) if settled is not None else (None, None)
        self.session.settled(RunSettled(seq=seq, aborted=aborted, costUsd=cost))
        self.life.armIdle()

    def _answerUI(self, request: JSONObject) -> None:
        body = self.life.body
        if body is None:
            return
        body.protocol.send(answerFor(request, self.session.delegatedToken))

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
            self.session.settled(RunSettled(seq=settled.seq, aborted=True, costUsd=cost))
        waiting = self.delivery.behind()
        for command in self.session.openCommands():
            if command.commandId in waiting:
                continue
            self.session.move(
                command.commandId, CommandStatus.failed, error="the body exited",
                code="body_exited",
            )
