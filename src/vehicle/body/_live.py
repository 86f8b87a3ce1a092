# -*- test-case-name: tests.test_conductor -*-
"""
One live pi process and everything that lives and dies with it: its
protocol and transport, the plan it was made from, its translator, pi's
queue as the host knows it, and the run under way.  A L{LiveBody} is made
whole when a body is spawned and dropped whole when it is gone, so going
dormant forgets everything at once.
"""

from __future__ import annotations

from typing import Any

from attrs import define, field
from twisted.internet.interfaces import IProcessTransport

from vehicle.body._launcher import BodyPaths, BodyPlan
from vehicle.body._rpc import PiProtocol
from vehicle.body._translate import Translator
from vehicle.session import Command


@define(eq=False)
class Run:
    """
    The run under way on a body: the commands it answers, and how many
    model requests its door let through (L{LiveBody.meter}).
    """

    commands: list[Command] = field(factory=list)
    modelRequests: int = 0


@define(eq=False)
class LiveBody:
    """
    One pi process, from spawn to exit.

    @ivar queued: the commands handed to pi's queue (steer, follow-up) and
        not yet seen delivered, in pi's order.
    @ivar rendered: the text pi was sent for each command (the model's,
        never the session's record): how pi's user messages are matched to
        commands.
    @ivar run: the run under way, if any.
    """

    protocol: PiProtocol
    plan: BodyPlan
    paths: BodyPaths
    translator: Translator
    transport: IProcessTransport | None = None
    queued: list[Command] = field(factory=list)
    rendered: dict[str, str] = field(factory=dict)
    run: Run | None = None
    #: The host asked it to end: its exit is no news.
    expectExit: bool = False
    #: An abort was asked for: what pi still queues is taken out, not
    #: delivered after it.
    abortRequested: bool = False

    def startRun(self, command: Command | None = None) -> Run:
        """
        A run begins (with the command that started it, if the host sent
        one): the door's meter starts again.
        """
        self.run = Run(commands=[command] if command is not None else [])
        return self.run

    def endRun(self) -> list[Command]:
        """
        The run is over: the commands it answered.
        """
        run, self.run = self.run, None
        finished = run.commands if run is not None else []
        for command in finished:
            self.rendered.pop(command.commandId, None)
        return finished

    def delivered(self, text: str) -> Command | None:
        """
        pi's user message with C{text} ended: the queued command it was,
        now part of the run (or L{None}: not one of ours).
        """
        for command in self.queued:
            if self.rendered.get(command.commandId) == text:
                self.queued.remove(command)
                if self.run is not None:
                    self.run.commands.append(command)
                return command
        return None

    def meter(self, maxTurns: int) -> str | None:
        """
        May the door forward one more model request?  Only during a run,
        and no more than the run's turn budget.
        """
        if self.run is None:
            return "no run is under way"
        if self.run.modelRequests >= maxTurns:
            return "this run's turn budget is spent"
        self.run.modelRequests += 1
        return None

    def secrets(self) -> list[str]:
        """
        The keys this body's plan holds (a door's token, a caller's key).
        """
        providers = self.plan.providers or {}
        return [str(p["apiKey"]) for p in providers.values() if p.get("apiKey")]

    def snapshotQueue(self) -> dict[str, Any]:
        return {
            "steering": list(self.translator.queue.get("steering", [])),
            "followUp": list(self.translator.queue.get("followUp", [])),
        }
