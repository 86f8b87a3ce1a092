# -*- test-case-name: tests.unit.test_tap -*-
"""
The reactors the packages are handed, named by what they use.

Twisted gives one interface per capability (L{IReactorTime},
L{IReactorTCP}, ...); a package that needs one takes it.  A package that needs
several takes one of the intersections below, each an interface extending
the ones it joins, so what is handed on to a narrower package type-checks
(mypy-zope reads interface inheritance).

They are for the type checker: zope has no intersection of interfaces, so
no reactor declares these.  A reactor providing every part is what they
mean; the entry points (C{react}'s main, twistd's C{makeService}) are
where the global reactor is taken as one.  A capability a package can do
without (the thread pool) is asked for at run time instead
(C{IReactorThreads(reactor, None)}).
"""

from __future__ import annotations

from typing import cast

from twisted.internet.interfaces import (
    IReactorCore,
    IReactorPluggableNameResolver,
    IReactorProcess,
    IReactorTCP,
    IReactorTime,
    IReactorUNIX,
)


class IClientReactor(IReactorCore, IReactorTime, IReactorTCP, IReactorPluggableNameResolver):
    """
    An HTTP client's reactor (time for timeouts, TCP and name resolution
    for treq and L{twisted.web.client.Agent}), and the system event
    triggers a command line client hooks its shutdown into.
    """


class IHostReactor(IClientReactor, IReactorProcess, IReactorUNIX):
    """
    A server's reactor (the host, the gardend stand-in): a client's, plus
    spawning children (pi bodies, the probe, a started service) and Unix
    sockets (a boxed body's proxy).
    """


def globalReactor() -> IHostReactor:
    """
    The global reactor, for an entry point that was not handed one.
    """
    from twisted.internet import reactor

    return cast(IHostReactor, reactor)
