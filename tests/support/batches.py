"""
Runners for the group writer in tests (L{vehicle.store.GroupWriter}): one
that holds each batch until the test runs it (L{HeldBatches}), one that
runs it on a real thread of its own whose results the test hands back to
the test's thread, as the reactor's C{callFromThread} would
(L{ThreadBatches}).
"""

from __future__ import annotations

import queue
import threading
from typing import Callable

from twisted.internet.defer import Deferred
from twisted.python.failure import Failure


class HeldBatches:
    """
    A runner that keeps every batch until L{release}: what a slow writer
    looks like from the reactor's thread.
    """

    def __init__(self) -> None:
        self.waiting: list[tuple[Callable[[], None], Deferred[None]]] = []

    def __call__(self, work: Callable[[], None]) -> Deferred[None]:
        ran: Deferred[None] = Deferred()
        self.waiting.append((work, ran))
        return ran

    def release(self) -> None:
        """
        Run the oldest batch held, then answer its steps (a batch started
        meanwhile is held in its turn).  Work that fails fails its
        L{Deferred}, as a thread pool's would; a simulated kill inside it
        goes up to the test, the steps unanswered.
        """
        work, ran = self.waiting.pop(0)
        try:
            work()
        except Exception:
            ran.errback()
            return
        ran.callback(None)

    def releaseAll(self) -> None:
        while self.waiting:
            self.release()


class ThreadBatches:
    """
    A runner that runs each batch on a thread of its own; the test takes
    its end back with L{deliver} (the reactor's C{callFromThread}).
    """

    def __init__(self) -> None:
        self.done: queue.Queue[tuple[Deferred[None], Failure | None]] = queue.Queue()
        self.threads: list[threading.Thread] = []

    def __call__(self, work: Callable[[], None]) -> Deferred[None]:
        ran: Deferred[None] = Deferred()

        def run() -> None:
            try:
                work()
            except BaseException:
                self.done.put((ran, Failure()))
            else:
                self.done.put((ran, None))

        thread = threading.Thread(target=run, name="test-writer", daemon=True)
        self.threads.append(thread)
        thread.start()
        return ran

    def deliver(self) -> None:
        """
        Wait for the batch under way to end (its thread joined, never a
        sleep), then answer its steps here.
        """
        ran, failure = self.done.get(timeout=30)
        if failure is None:
            ran.callback(None)
        else:
            ran.errback(failure)
