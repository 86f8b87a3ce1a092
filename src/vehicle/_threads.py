# -*- test-case-name: tests.unit.test_reactors -*-
"""
L{threadRunner}: blocking work run off the reactor's thread, in the
reactor's thread pool, the one way every package does it.
"""

from __future__ import annotations

from typing import Any, Callable

from twisted.internet.defer import Deferred, maybeDeferred
from twisted.internet.interfaces import IReactorCore, IReactorThreads
from twisted.internet.threads import deferToThreadPool


def threadRunner(reactor: IReactorCore) -> Callable[..., Deferred[Any]]:
    """
    A function that runs C{f(*args, **kwargs)} in C{reactor}'s thread pool
    and returns a L{Deferred} of its result; for a reactor without threads
    (a test's memory reactor), one that runs C{f} at once, here.
    """
    threaded = IReactorThreads(reactor, None)

    def runInThread(f: Callable[..., Any], *args: Any, **kwargs: Any) -> Deferred[Any]:
        if threaded is None:
            return maybeDeferred(f, *args, **kwargs)
        return deferToThreadPool(threaded, threaded.getThreadPool(), f, *args, **kwargs)

    return runInThread
