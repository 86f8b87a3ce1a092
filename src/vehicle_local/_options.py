# -*- test-case-name: tests.unit.test_localrun,tests.live.test_model,tests.unit.test_gardend -*-
"""
The command lines of the local run, the stand-in and the scripted model:
L{usage.Options} as the type checker can follow it.
"""

from __future__ import annotations

from typing import Sequence

from twisted.python import usage


class Options(usage.Options):
    """
    L{usage.Options}, made and parsed through typed methods: Twisted's own
    are untyped, and a subclass that only inherits them would have each
    call of them checked as a call of its own untyped function.
    """

    def __init__(self) -> None:
        usage.Options.__init__(self)

    def parseOptions(self, options: Sequence[str] | None = None) -> None:
        usage.Options.parseOptions(self, None if options is None else list(options))
