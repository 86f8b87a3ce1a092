# -*- test-case-name: tests.test_ride -*-
"""
The C{vehicle} console script: C{vehicle ride} (the stdio JSONL client) and
C{vehicle tail} (an operator's tail of a session's events).  Only parsing
and the reactor; the work is in L{vehicle.ride} and L{vehicle.tail}.
"""

from __future__ import annotations

import sys
from typing import Any, Awaitable, Sequence

from twisted.internet.defer import Deferred
from twisted.internet.task import react
from twisted.logger import (
    FilteringLogObserver,
    LogLevel,
    LogLevelFilterPredicate,
    globalLogBeginner,
    textFileLogObserver,
)
from twisted.python import usage

from vehicle.ride import RideOptions, runRide
from vehicle.tail import TailOptions, runTail


class Options(usage.Options):
    longdesc = ""
    synopsis = "vehicle (ride | tail) [options]"
    subCommands = [
        ["ride", None, RideOptions, "Ride a session: JSONL requests on stdin, frames on stdout."],
        ["tail", None, TailOptions, "Follow a session's events over SSE."],
    ]

    def postOptions(self) -> None:
        if self.subCommand is None:
            raise usage.UsageError("a subcommand is required: ride or tail")


async def _exitCode(work: Awaitable[int]) -> None:
    code = await work
    if code:
        raise SystemExit(code)


def main(argv: Sequence[str] | None = None) -> None:
    """
    Parse C{argv} (default: C{sys.argv[1:]}) and run the subcommand on the
    real reactor.  Warnings and errors go to standard error; standard
    output carries only frames (ride) or events (tail).
    """
    options = Options()
    try:
        options.parseOptions(list(sys.argv[1:] if argv is None else argv))
    except usage.UsageError as e:
        raise SystemExit(f"vehicle: {e}\n{options}")
    globalLogBeginner.beginLoggingTo(
        [
            FilteringLogObserver(
                textFileLogObserver(sys.stderr),
                [LogLevelFilterPredicate(defaultLogLevel=LogLevel.warn)],
            )
        ],
        redirectStandardIO=False,
    )
    run: Any = runRide if options.subCommand == "ride" else runTail

    def start(reactor: Any) -> Deferred[None]:
        return Deferred.fromCoroutine(_exitCode(run(reactor, options.subOptions)))

    react(start)


if __name__ == "__main__":
    main()
