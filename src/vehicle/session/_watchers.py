# -*- test-case-name: tests.unit.test_watch -*-
"""
Who watches a session's events: listeners told of every event (durable or
ephemeral, the SSE streams and the body's hooks) and long-polls waiting for
the next durable one (L{Watchers}); and the session's face for them
(L{Feed}): its log read back and its events as they happen.  Every event
reaches them as one L{Entry}, so that its bytes for a kind of reader are
made once, however many read it.
"""

from __future__ import annotations

from typing import Callable, ClassVar, Protocol

from attrs import define, field
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger

from vehicle.protocol import Event, JSONObject
from vehicle.session._eventlog import Entry
from vehicle.session._values import isoTimestamp


Listener = Callable[[Event], None]
#: One who takes each event as its entry (its bytes made once for all).
Follower = Callable[[Entry], None]


@define(eq=False)
class Watchers:
    """
    The listeners and waiters of one session.
    """

    _log: ClassVar[Logger] = Logger()

    sessionId: str
    _listeners: list[Follower] = field(factory=list)
    _waiters: list[Deferred[None]] = field(factory=list)
    #: Ephemeral events waiting for the durable events taken before them
    #: (each with the seq of the last taken when it came), in order.
    _behind: list[tuple[int, Entry]] = field(factory=list)

    def publish(self, entry: Entry) -> None:
        """
        Tell every listener; a durable event (one with a C{seq}) also wakes
        the waiters, and lets go of the ephemeral events that came after it.
        """
        for listener in list(self._listeners):
            try:
                listener(entry)
            except Exception:
                self._log.failure("A watcher of {sessionId} failed", sessionId=self.sessionId)
        seq = entry.event.seq
        if seq is not None:
            waiters, self._waiters = self._waiters, []
            for waiter in waiters:
                waiter.callback(None)
            self._release(seq)

    def broadcast(
        self, eventType: str, data: JSONObject, timestamp: str, taken: int = 0, told: int = 0,
    ) -> None:
        """
        Tell every listener of an ephemeral event (C{message.delta}): it has
        no C{seq}, is never written, and wakes no waiter.  It is told after
        every durable event taken before it (C{taken}; C{told} of them are
        told already): a durable event is told once written, an ephemeral
        one at once, and no watcher sees them out of the order they came in.
        """
        entry = Entry(Event(
            type=eventType, timestamp=timestamp, sessionId=self.sessionId, data=data,
        ))
        if self._behind and self._behind[-1][0] > taken:
            # The numbering went back (the session was read back after a
            # refused write): what they waited for will never be told.
            self._release(None)
        if taken > told or self._behind:
            self._behind.append((taken, entry))
        else:
            self.publish(entry)

    def _release(self, seq: int | None) -> None:
        """
        Tell the ephemeral events waiting for no more than durable event
        C{seq} (all of them, with L{None}).
        """
        while self._behind and (seq is None or self._behind[0][0] <= seq):
            self.publish(self._behind.pop(0)[1])

    def subscribe(self, listener: Listener) -> Callable[[], None]:
        """
        Call C{listener} with every event from now on (durable and
        ephemeral); returns the function that stops it.
        """
        return self.follow(lambda entry: listener(entry.event))

    def follow(self, follower: Follower) -> Callable[[], None]:
        """
        Call C{follower} with every event from now on, as its entry;
        returns the function that stops it.
        """
        self._listeners.append(follower)

        def unsubscribe() -> None:
            if follower in self._listeners:
                self._listeners.remove(follower)

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

    def nextEvent(self) -> Deferred[None]:
        """
        A Deferred that fires (with L{None}) at the next durable event.
        Cancelling it just forgets it.
        """

        def cancel(d: Deferred[None]) -> None:
            if d in self._waiters:
                self._waiters.remove(d)

        d: Deferred[None] = Deferred(cancel)
        self._waiters.append(d)
        return d


#: How many events one watch answer carries at most (spec, "Watch").
WATCH_LIMIT = 500
#: The longest long-poll wait (spec, "Watch").
MAX_WAIT_MS = 30_000


class EventLog(Protocol):
    """
    A session's durable events as they were written (its journal).
    """

    @property
    def cursor(self) -> int: ...

    @property
    def taken(self) -> int: ...

    def eventsAfter(self, since: int, limit: int) -> tuple[list[Event], bool]: ...

    def entriesAfter(self, since: int, limit: int) -> tuple[list[Entry], bool]: ...

    def runsSoFar(self) -> int: ...

    def streamed(self, streams: bool) -> None: ...


@define(eq=False)
class Feed:
    """
    A session's events as its watchers see them: the durable ones read back
    from its log, and every one (ephemeral ones too) as it happens.  The
    session's one face for readers of its events (the web package's long-polls
    and streams, public accounting, the body's run numbers).
    """

    _log: EventLog
    _watchers: Watchers
    clock: IReactorTime

    @property
    def cursor(self) -> int:
        return self._log.cursor

    def after(self, since: int, limit: int = WATCH_LIMIT) -> tuple[list[Event], bool]:
        """
        The durable events with C{seq > since}, at most C{limit}, and
        whether more may follow (read from the log).
        """
        return self._log.eventsAfter(since, limit)

    def entriesAfter(self, since: int, limit: int = WATCH_LIMIT) -> tuple[list[Entry], bool]:
        """
        The same as L{after}, as entries: what readers share.
        """
        return self._log.entriesAfter(since, limit)

    def runsSoFar(self) -> int:
        return self._log.runsSoFar()

    def streamed(self, streams: bool) -> None:
        """
        SSE streams follow the session (C{True}), or the last has gone: while
        they do, the log keeps more of its newest events for them to share,
        so that streams behind at different places do not each read and
        encode them again (L{vehicle.session._eventlog.STREAMED_PAGES}).
        """
        self._log.streamed(streams)

    def subscribe(self, listener: Listener) -> Callable[[], None]:
        """
        Call C{listener} with every event from now on; returns the function
        that stops it.
        """
        return self._watchers.subscribe(listener)

    def follow(self, follower: Follower) -> Callable[[], None]:
        """
        Call C{follower} with every event from now on, as its entry (its
        bytes made once for every reader); returns the function that stops
        it.
        """
        return self._watchers.follow(follower)

    def next(self) -> Deferred[None]:
        """
        Fires at the next durable event; cancelling it forgets it.
        """
        return self._watchers.nextEvent()

    def broadcast(self, eventType: str, data: JSONObject) -> None:
        """
        Send an ephemeral event (C{message.delta}) to live watchers only.
        """
        self._watchers.broadcast(
            eventType, data, isoTimestamp(self.clock.seconds()),
            taken=self._log.taken, told=self._log.cursor,
        )

    def watching(self) -> int:
        return self._watchers.listening()

    def waiting(self) -> int:
        return self._watchers.waiting()
