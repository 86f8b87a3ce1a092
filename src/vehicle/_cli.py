# -*- test-case-name: tests.unit.test_clients_cli -*-
"""
The C{vehicle} console script: C{vehicle ride} (the stdio JSONL client),
C{vehicle tail} (an operator's tail of a session's events), C{vehicle
acp} (an Agent Client Protocol agent for editors) and C{vehicle ledger
import} (a host's file ledger moved into PostgreSQL).  Only parsing
and the reactor; the work is in L{vehicle.clients}.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Awaitable, Callable, Mapping, Sequence

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

import vehicle
from vehicle._reactors import IClientReactor
from vehicle.clients import AcpOptions, RideOptions, TailOptions, runAcp, runRide, runTail
from vehicle.protocol import JSON, loads, objectOf, textOf
from vehicle.public import LedgerOptions, runImport
from vehicle.settings import defaultPiRoot


#: pi's package, under the pinned runtime's folder.
PI_PACKAGE = ("node_modules", "@earendil-works", "pi-coding-agent")

#: The source tree's pin of pi (C{scripts/setup} installs it into C{.venv/pi}).
RUNTIME_PI = Path(vehicle.__file__).resolve().parents[2] / "runtime" / "pi"


def _readJSON(path: Path) -> JSON:
    try:
        return loads(path.read_text("utf-8"))
    except (OSError, ValueError):
        return None


def pinnedPiVersion(runtime: Path = RUNTIME_PI) -> tuple[str, str] | None:
    """
    The pi version the source tree pins, and the file that says so
    (C{package-lock.json}, else C{package.json}); L{None} outside a source
    tree.
    """
    name = "/".join(PI_PACKAGE[1:])
    packages = objectOf(objectOf(_readJSON(runtime / "package-lock.json")).get("packages"))
    version = textOf(objectOf(packages.get("/".join(PI_PACKAGE))).get("version"))
    if version is not None:
        return version, str(runtime / "package-lock.json")
    dependencies = objectOf(objectOf(_readJSON(runtime / "package.json")).get("dependencies"))
    version = textOf(dependencies.get(name))
    if version is not None:
        return version, str(runtime / "package.json")
    return None


def installedPiVersion(piRoot: Path) -> str | None:
    """
    The version of the pi installed under C{piRoot}, or L{None}.
    """
    return textOf(objectOf(_readJSON(piRoot.joinpath(*PI_PACKAGE, "package.json"))).get("version"))


def versionText(piRoot: Path | None = None, runtime: Path = RUNTIME_PI) -> str:
    """
    C{vehicle --version}: vehicle's version, then pi's, saying where it was
    read (the installed runtime, else the source tree's pin).
    """
    piRoot = piRoot if piRoot is not None else defaultPiRoot()
    lines = [f"vehicle {vehicle.__version__.public()}"]
    installed = installedPiVersion(piRoot)
    pinned = pinnedPiVersion(runtime)
    if installed is not None:
        line = f"pi {installed} (installed in {piRoot})"
        if pinned is not None and pinned[0] != installed:
            line += f"; {pinned[1]} pins {pinned[0]}: run scripts/setup"
        lines.append(line)
    elif pinned is not None:
        lines.append(
            f"pi {pinned[0]} (pinned in {pinned[1]}; not installed in {piRoot}: run scripts/setup)"
        )
    else:
        lines.append(f"pi unknown (not installed in {piRoot}, and no runtime/pi pin found)")
    return "\n".join(lines)


class Options(usage.Options):
    """
    C{vehicle}'s command line: a subcommand, or C{--version}.
    """

    longdesc = ""
    synopsis = "vehicle (ride | tail | acp | ledger import) [options]  |  vehicle --version"
    subCommands = [
        ["ride", None, RideOptions, "Ride a session: JSONL requests on stdin, frames on stdout."],
        ["tail", None, TailOptions, "Follow a session's events over SSE."],
        ["acp", None, AcpOptions, "Be an Agent Client Protocol agent for an editor, over stdio."],
        ["ledger", None, LedgerOptions, "The public ledger: import moves ledger.jsonl into PostgreSQL."],
    ]

    def __init__(self) -> None:
        # Typed, so that making one is a typed call (Twisted's is not annotated).
        usage.Options.__init__(self)

    def opt_version(self) -> None:
        """
        Print vehicle's version and the pinned pi's, then exit.
        """
        print(versionText())
        sys.stdout.flush()
        raise SystemExit(0)

    def postOptions(self) -> None:
        if self.subCommand is None:
            raise usage.UsageError("a subcommand is required: ride, tail, acp or ledger (or --version)")


async def _exitCode(work: Awaitable[int]) -> None:
    code = await work
    if code:
        raise SystemExit(code)


def _usageLine(options: Options, argv: Sequence[str], error: usage.UsageError) -> str:
    sub = next((a for a in argv if a in ("ride", "tail", "acp", "ledger")), None)
    name = f"vehicle {sub}" if sub else "vehicle"
    return f"{name}: {error} (see {name} --help)"


def _ledgerImport(
    reactor: Any, ledger: LedgerOptions, environ: Mapping[str, str] | None
) -> Awaitable[int]:
    import os

    return runImport(reactor, ledger.subOptions, os.environ if environ is None else environ,
                     sys.stdout)


#: Each subcommand's work: the reactor, its options, the environment; the exit code.
_RUNS: Mapping[str, Callable[[IClientReactor, Any, Mapping[str, str] | None], Awaitable[int]]] = {
    "ride": runRide,
    "tail": runTail,
    "acp": runAcp,
    "ledger": _ledgerImport,
}


def main(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> None:
    """
    Parse C{argv} (default: C{sys.argv[1:]}) and run the subcommand on the
    real reactor.  A usage error is one line on standard error (exit 2).
    Warnings and errors go to standard error; standard output carries only
    frames (ride), events (tail) or protocol messages (acp).
    """
    args = list(sys.argv[1:] if argv is None else argv)
    options = Options()
    try:
        # Twisted's parser, named as Twisted's: it is not annotated.
        usage.Options.parseOptions(options, args)
    except usage.UsageError as e:
        sys.stderr.write(_usageLine(options, args, e) + "\n")
        raise SystemExit(2)
    globalLogBeginner.beginLoggingTo(
        [
            FilteringLogObserver(
                textFileLogObserver(sys.stderr),
                [LogLevelFilterPredicate(defaultLogLevel=LogLevel.warn)],
            )
        ],
        redirectStandardIO=False,
    )
    run = _RUNS[str(options.subCommand)]

    def start(reactor: IClientReactor) -> Deferred[None]:
        return Deferred.fromCoroutine(_exitCode(run(reactor, options.subOptions, environ)))

    react(start)


if __name__ == "__main__":
    main()
