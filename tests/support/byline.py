"""
The same tests with the host's channel reading every request line by line:
the whole-request shortcut (L{vehicle.web._limits.wholeRequest}) off, so
that the limits and refusals made on Twisted's line-by-line parse are
proven on requests the shortcut would otherwise read at once.
"""

from __future__ import annotations

from typing import TypeVar

from vehicle.web._limits import GuardedChannel


_Case = TypeVar("_Case", bound=type)


class ByLine:
    """
    Mix in first: the test case's own C{setUp} runs with the shortcut off.
    """

    def setUp(self) -> None:
        self.patch(GuardedChannel, "readsWhole", False)  # type: ignore[attr-defined]
        super().setUp()  # type: ignore[misc]


def byLine(case: _Case) -> _Case:
    """
    C{case}'s tests again, every request read line by line: a test case
    named as C{case} with C{ByLine} for C{Tests} (C{LongLineTests} gives
    C{LongLineByLineTests}), for its module to hold under that name.
    """
    name = case.__name__.removesuffix("Tests") + "ByLineTests"
    made = type(name, (ByLine, case), {
        "__doc__": f"L{{{case.__name__}}} with every request read line by line.",
        "__module__": case.__module__,
        "__qualname__": name,
    })
    return made  # type: ignore[return-value]
