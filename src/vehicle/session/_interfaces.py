# -*- test-case-name: tests.unit.test_conductor -*-
"""
What a session asks of the body package, as an interface it is handed (the
conductor, L{IConductor}), and what a settled run tells its followers
(L{RunSettled}).
"""

from __future__ import annotations

from attrs import frozen
from twisted.internet.defer import Deferred
from zope.interface import Interface

from vehicle.protocol import BodyState, BodyView, Command


@frozen(kw_only=True)
class RunSettled:
    """
    A run of a session settled: the seq of its C{run.settled} event (the
    key its cost is debited under), whether it was aborted, what it cost.
    """

    seq: int | None
    aborted: bool
    costUsd: float | None = None


class IConductor(Interface):
    """
    What drives a session's body: the session hands it accepted commands
    and asks it whether anything is under way; the host disposes of it and
    snapshots it; a body's proxy asks it to meter model requests.  Provided
    by the body package (L{vehicle.body.Conductor}).
    """

    def commandAccepted(command: Command) -> None:
        """
        A command was accepted and logged; deliver it.
        """

    def claimed() -> None:
        """
        The session's lease was taken (or renewed): its driver is likely to
        send a command soon.
        """

    def startedAhead() -> bool:
        """
        Was a body made at the claim for the session's next command (a
        spare switched to its file, or its own body started), and is it
        still there (or still being made)?
        """

    def running() -> bool:
        """
        Is a run under way?
        """

    def bodyState() -> BodyState:
        """
        C{dormant}, C{starting}, C{live} or C{stopping}.
        """

    def meterModelRequest() -> str | None:
        """
        May the body's proxy forward one more model request?  L{None} if so,
        else why not.
        """

    def snapshot() -> Deferred[BodyView]:
        """
        Fire with what the body adds to C{inspect}.
        """

    def dispose(reason: str) -> Deferred[None]:
        """
        Dispose of the body (if any); fire when it is gone.
        """

    def close() -> Deferred[None]:
        """
        The host stops: deliver nothing more, dispose of the body, and
        leave open commands open (the next start reports them).
        """
