# -*- test-case-name: tests.live.test_model -*-
"""
C{python -m vehicle_local.model --port N}: run the scripted model alone on loopback.

Prints the base URL (ending in C{/v1}) on stdout, then serves until killed.
"""

from __future__ import annotations

import sys
from typing import Sequence

from twisted.internet.defer import Deferred
from twisted.internet.task import react
from twisted.python import usage

from vehicle_local._options import Options as TypedOptions
from vehicle_local.model._model import ScriptedModel
from vehicle._reactors import IClientReactor


class Options(TypedOptions):
    """
    Command-line options of the standalone scripted model.
    """

    synopsis = "Usage: python -m vehicle_local.model [--port N]"
    longdesc = "Serve the scripted OpenAI-compatible model on 127.0.0.1 and print its base URL."

    optParameters = [
        ["port", "p", 0, "TCP port on 127.0.0.1 (0: any free port)", int],
        ["slow-deltas", None, 17, "deltas in a [[SLOW]] answer", int],
        ["slow-delay-ms", None, 300, "milliseconds between [[SLOW]] deltas", int],
    ]


async def _serve(reactor: IClientReactor, options: Options) -> None:
    model = ScriptedModel(
        reactor=reactor,
        slowDeltas=options["slow-deltas"],
        slowDelayMs=options["slow-delay-ms"],
    )
    await model.listen(reactor, options["port"])
    print(model.url, flush=True)
    await Deferred()


def main(argv: Sequence[str] | None = None) -> None:
    """
    Parse C{argv} and serve forever.
    """
    options = Options()
    try:
        options.parseOptions(list(sys.argv[1:] if argv is None else argv))
    except usage.UsageError as error:
        print(f"{error}\n{options}", file=sys.stderr)
        raise SystemExit(2)
    react(lambda reactor: Deferred.fromCoroutine(_serve(reactor, options)))


if __name__ == "__main__":
    main()
