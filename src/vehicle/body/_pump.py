# -*- test-case-name: tests.unit.test_conductor -*-
"""
The conductor's one line of delivery: the commands waiting for the body
(the backlog), the one being delivered now, the loop that delivers them in
order, and the idle timer that lets a quiet body go.
"""

from __future__ import annotations

from typing import Any, Callable, ClassVar, Coroutine

from attrs import define, field
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure

from vehicle._timers import cancelIfActive
from vehicle.protocol import Command


@define(eq=False)
class Pump:
    """
    One command at a time, in order: pi drops a prompt sent while another
    is starting.  Its state is moved only by its own methods.
    """

    _log: ClassVar[Logger] = Logger()

    clock: IReactorTime
    idleSeconds: float
    backlog: list[Command] = field(factory=list)
    #: The command being delivered: pi's already, so never taken back.
    delivering: Command | None = None
    _pumping: bool = False
    _idle: IDelayedCall | None = None

    def next(self) -> Command | None:
        """
        The command to deliver now, which is then being delivered (and can
        no longer be taken back); L{None} when nothing waits.
        """
        self.delivering = self.backlog[0] if self.backlog else None
        return self.delivering

    def deliveredOne(self, command: Command) -> None:
        """
        C{command} was delivered (or failed to be): out of the line.
        """
        self.delivering = None
        self.take([command])

    def waiting(self) -> list[Command]:
        """
        The commands that can still be taken back without asking pi.
        """
        return self.backlog[1:] if self.delivering is not None else list(self.backlog)

    def take(self, commands: list[Command]) -> None:
        for command in commands:
            if command in self.backlog:
                self.backlog.remove(command)

    def add(self, command: Command, first: bool = False) -> None:
        """
        Queue C{command}; C{first}: ahead of everything still waiting.
        """
        if first:
            self.backlog.insert(1 if self.delivering is not None else 0, command)
        else:
            self.backlog.append(command)

    def run(self, drain: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """
        Start the delivery loop C{drain} unless it already runs.
        """
        if self._pumping:
            return
        self._pumping = True

        def done(result: object) -> None:
            self._pumping = False
            if isinstance(result, Failure):
                self._log.failure("The pump failed", result)

        Deferred.fromCoroutine(drain()).addBoth(done)

    def armIdle(self, fired: Callable[[], None]) -> None:
        self.cancelIdle()
        self._idle = self.clock.callLater(self.idleSeconds, self._fire, fired)

    def _fire(self, fired: Callable[[], None]) -> None:
        self._idle = None
        fired()

    def cancelIdle(self) -> None:
        cancelIfActive(self._idle)
        self._idle = None
