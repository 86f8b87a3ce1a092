"""
The sync helper on the test's own thread (L{Loopback}): every message to
it and every answer from it goes through the wire's encoding
(L{vehicle._syncd.frame}), its writes and syncs through the store's file
layer, so the crash and power-cut layer (L{tests.support._crashfs}) sees
them as it sees the writer's.  A simulated kill inside it goes up to the
test, as from a writer that runs at once.
"""

from __future__ import annotations

import os
from collections import deque
from typing import Any, Sequence

from twisted.internet.defer import Deferred, succeed
from twisted.internet.error import ConnectionDone
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase

from tests.support.batches import HeldBatches
from vehicle._syncd import Helper, frame, takeFrames
from vehicle.store import GroupWriter, files, runAtOnce
from vehicle.store._syncer import Link, SyncHelper


def _across(message: tuple[Any, ...]) -> tuple[Any, ...]:
    """
    C{message} as the other end reads it.
    """
    (back,) = takeFrames(bytearray(frame(message)))
    return back


class Loopback:
    """
    A L{Link} to a helper on this thread, the descriptors passed as the
    kernel passes them (a copy of each, under a number of its own).
    """

    def __init__(self, owner: SyncHelper) -> None:
        self.owner = owner
        self.helper = Helper(files())
        self.passed: deque[int] = deque()
        self.sent: list[tuple[Any, ...]] = []

    def send(self, fds: Sequence[int], messages: Sequence[tuple[Any, ...]]) -> None:
        self.passed.extend(os.dup(fd) for fd in fds)
        for message in messages:
            self.sent.append(message)
            answer = self.helper.handle(_across(message), self.passed)
            if answer is not None:
                self.owner.answered(self, _across(answer))

    def close(self) -> Deferred[None]:
        self.closeAll()
        self.owner.lost(self, Failure(ConnectionDone()))
        return succeed(None)

    def closeAll(self) -> None:
        """
        Close the helper's copies (its process ended).
        """
        for fd in self.helper.fds.values():
            os.close(fd)
        self.helper.fds.clear()
        while self.passed:
            os.close(self.passed.popleft())


def loopbackWriter(case: SynchronousTestCase) -> GroupWriter:
    """
    A writer whose batches go through a L{Loopback} helper (the work after
    a step done at once), its copies closed when C{case} ends; each link
    made is noted in C{case.loopbacks}.
    """

    def start(owner: SyncHelper) -> Link:
        link = Loopback(owner)
        case.addCleanup(link.closeAll)
        loopbacks: list[Loopback] = case.__dict__.setdefault("loopbacks", [])
        loopbacks.append(link)
        return link

    helper = SyncHelper(start, runAtOnce)
    return GroupWriter(runner=helper, release=helper.stop)


class HeldThroughHelper(HeldBatches):
    """
    A runner that keeps every batch until L{release}, as L{HeldBatches}
    does, and then runs it through a L{Loopback} helper instead of in place.
    """

    def __init__(self, case: SynchronousTestCase) -> None:
        super().__init__()
        self.helper = loopbackWriter(case).runner

    def release(self) -> None:
        work, ran = self.waiting.pop(0)
        self.helper(work).chainDeferred(ran)
