# -*- test-case-name: tests.unit.test_reactors -*-
"""
L{cancelIfActive}: the one way the host lets go of a timer it may or may
not still hold.
"""

from __future__ import annotations

from twisted.internet.interfaces import IDelayedCall


def cancelIfActive(call: IDelayedCall | None) -> None:
    """
    Cancel C{call} unless it is L{None}, has already run or was already
    cancelled (cancelling those raises).
    """
    if call is not None and call.active():
        call.cancel()
