# -*- test-case-name: tests.unit.test_watch -*-
"""
Who watches a session's events: listeners told of every event (durable or
ephemeral, the SSE streams and the body's hooks) and long-polls waiting for
the next durable one.
"""

from __future__ import annotations

from typing import Any, Callable, ClassVar

from attrs import define, field
from twisted.internet.defer import Deferred
from twisted.logger import Logger


Listener = Callable[[dict[str, Any]], None]


@define(eq=False)
class Watchers:
    """
    The listeners and waiters of one session.
    """

    _log: ClassVar[Logger] = Logger()

    sessionId: str
    _listeners: list[Listener] = field(factory=list)
    _waiters: list[Deferred] = field(factory=list)

    def publish(self, event: dict[str, Any]) -> None:
        """
        Tell every listener; a durable event (one with a C{seq}) also wakes
        the waiters.
        """
        for listener in list(self._listeners):
            try:
                listener(event)
            except Exception:
                self._log.failure("A watcher of {sessionId} failed", sessionId=self.sessionId)
        if "seq" in event:
            waiters, self._waiters = self._waiters, []
            for waiter in waiters:
                waiter.callback(None)

    def broadcast(self, eventType: str, data: dict[str, Any], timestamp: str) -> None:
        """
        Tell every listener of an ephemeral event (C{message.delta}): it has
        no C{seq}, is never written, and wakes no waiter.
        """
        self.publish(
            {"type": eventType, "timestamp": timestamp, "sessionId": self.sessionId, "data": data}
        )

    def subscribe(self, listener: Listener) -> Callable[[], None]:
        """
        Call C{listener} with every event from now on (durable and
        ephemeral); returns the function that stops it.
        """
        self._listeners.append(listener)

        def unsubscribe() -> None:
            if listener in self._listeners:
                self._listeners.remove(listener)

        return unsubscribe

    def listening(self) -> int:
        """
        How many listeners are subscribed.
        """
        return len(self._listeners)

    def waiting(self) -> int:
        """
        How many long-polls wait for the next durable event.
        """
        return len(self._waiters)

    def nextEvent(self) -> Deferred:
        """
        A Deferred that fires (with L{None}) at the next durable event.
        Cancelling it just forgets it.
        """

        def cancel(d: Deferred) -> None:
            if d in self._waiters:
                self._waiters.remove(d)

        d: Deferred = Deferred(cancel)
        self._waiters.append(d)
        return d
