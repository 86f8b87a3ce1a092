# -*- test-case-name: tests.unit.test_gardend -*-
"""
C{python -m vehicle_local.standin --config FILE --root DIR --port N}: run the
stand-in on loopback until interrupted.
"""

from __future__ import annotations

import os
import sys
from typing import Sequence

from twisted.internet.defer import Deferred
from twisted.internet.task import react
from twisted.logger import Logger, globalLogBeginner, textFileLogObserver
from twisted.python import usage

from vehicle._reactors import IHostReactor
from vehicle_local._options import Options as TypedOptions
from vehicle_local.standin._config import Config, ConfigError
from vehicle_local.standin._standin import StandIn

_log = Logger()


class Options(TypedOptions):
    """
    The stand-in's command line.
    """

    optParameters = [
        ["config", "c", None, "The JSON configuration file."],
        ["root", "r", None, "The workspace directory (made when missing)."],
        ["port", "p", "0", "The loopback port (0 for any).", int],
        ["service-url", None, None, "Override config.service.url."],
    ]

    def postOptions(self) -> None:
        if not self["config"]:
            raise usage.UsageError("--config is required")
        if not self["root"]:
            raise usage.UsageError("--root is required")
        try:
            self["parsed"] = Config.fromPath(self["config"], os.environ)
        except ConfigError as e:
            raise usage.UsageError(str(e))


def main(reactor: IHostReactor, argv: Sequence[str]) -> "Deferred[None]":
    """
    Parse C{argv}, listen, and run until the reactor stops.
    """
    options = Options()
    try:
        options.parseOptions(argv)
    except usage.UsageError as e:
        sys.stderr.write(f"{e}\n{options}\n")
        raise SystemExit(2)
    globalLogBeginner.beginLoggingTo([textFileLogObserver(sys.stdout)])
    standIn = StandIn(root=options["root"], config=options["parsed"], reactor=reactor)
    if options["service-url"]:
        standIn.setServiceUrl(options["service-url"])
    standIn.listen(reactor, options["port"])
    _log.info(
        "gardend stand-in on {url} (mcp {mcpUrl}), fronting {service}",
        url=standIn.url,
        mcpUrl=standIn.mcpUrl,
        service=standIn.gateway.serviceUrl,
    )
    return Deferred()


if __name__ == "__main__":
    react(main, (sys.argv[1:],))
