"""
A spy for unit tests: a module's function patched, for one test, with one
that notes each call's first argument and then calls the real function.
"""

from __future__ import annotations

from typing import Any

from twisted.trial.unittest import SynchronousTestCase


def spyOn(testCase: SynchronousTestCase, owner: object, name: str) -> list[Any]:
    """
    Patch C{owner.name} for C{testCase} with a spy.

    @return: the first argument of each call, in order (the list grows as
        calls are made).
    """
    calls: list[Any] = []
    real = getattr(owner, name)

    def spy(first: Any, *args: Any, **kw: Any) -> Any:
        calls.append(first)
        return real(first, *args, **kw)

    testCase.patch(owner, name, spy)
    return calls
