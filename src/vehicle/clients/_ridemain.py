# -*- test-case-name: tests.unit.test_ride -*-
"""
C{vehicle ride}: its options, and the wiring of a ride to standard input
and output and to gardend over HTTP, on the real reactor.
"""

from __future__ import annotations

import os
import re
import sys
from typing import Any, Callable, Mapping

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorTime
from twisted.internet.stdio import StandardIO
from twisted.python import usage
from twisted.web.client import HTTPConnectionPool

from vehicle._reactors import IClientReactor
from vehicle._timers import cancelIfActive
from vehicle.clients._client import GardendOptions, clientHTTP
from vehicle.clients._link import (
    TOKEN_ENV,
    CredentialError,
    Credentials,
    HostLink,
    credentialsFor,
    errorFrame,
)
from vehicle.clients._ride import NewSession, Ride, randomId
from vehicle.clients._stdio import StdioLines
from vehicle.protocol import JSONObject


#: How long a ride asked to stop may take to release its lease.
STOP_GRACE_SECONDS = 10.0

_VARIABLE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")


def checkVariableName(name: str | None) -> None:
    """
    C{--model-key-env} names a variable; a value that is no variable's name
    (a key typed where its name belongs, or C{--model-key <key>}, which
    abbreviates it) is refused without being echoed.

    @raise usage.UsageError: not a variable's name.
    """
    if name is not None and not _VARIABLE.match(name):
        raise usage.UsageError(
            "--model-key-env takes the name of an environment variable, never the key itself"
        )


#: The options of each client that drives a session (the ride, the ACP
#: agent), beside L{GardendOptions}'.
DRIVER_PARAMETERS: list[list[Any]] = [
    ["client-id", None, None, "This client's x-vehicle-client-id (default: a fresh one)."],
    ["model-key-env", None, None, "The variable holding your model key "
     "(default: VEHICLE_MODEL_KEY)."],
]


def checkDriver(options: usage.Options) -> None:
    """
    The driving options' checks: C{--profile}, C{--model-key-env}.

    @raise usage.UsageError: one fails.
    """
    if options["profile"] not in (None, "chat", "agent"):
        raise usage.UsageError("--profile is chat or agent")
    checkVariableName(options["model-key-env"])


def readCredentials(
    options: GardendOptions,
    environ: Mapping[str, str] | None,
    say: Callable[[str], None] | None,
    command: str,
) -> tuple[Credentials | None, Callable[[str], None]]:
    """
    A client's credentials (L{credentialsFor}, from C{environ}, by default
    the process's), and how it speaks to the person (C{say}, by default
    L{sayOnStderr}); L{None} for the credentials when they cannot be had,
    which was said in one line starting C{vehicle <command>:}.
    """
    environ = os.environ if environ is None else environ
    say = say if say is not None else sayOnStderr
    try:
        return credentialsFor(options, environ), say
    except CredentialError as e:
        say(f"vehicle {command}: {e}")
        return None, say


def driverLink(
    reactor: IClientReactor, options: GardendOptions, credentials: Credentials, clientId: str
) -> tuple[HostLink, HTTPConnectionPool]:
    """
    The host's routes for a client that drives as C{clientId} (sent on
    every request with the credentials), and its connection pool.
    """
    http, pool = clientHTTP(reactor, options["ca-file"], persistent=True)
    link = HostLink(
        http=http,
        gardend=options["gardend"],
        graph=options["graph"],
        headers={**credentials.headers(), "X-Vehicle-Client-Id": clientId},
    )
    return link, pool


class RideOptions(GardendOptions):
    """
    C{vehicle ride --gardend URL --graph G (--new | --session ID) ...}.

    No option takes a secret: the token comes from C{$VEHICLE_TOKEN} or a
    file, the model key from the environment.
    """

    longdesc = ""
    synopsis = (
        "--gardend URL --graph G (--new [--profile P] [--model M] [--title T] | --session ID)"
        " [--watch-only] [--ca-file PEM]"
    )

    optFlags = [
        ["new", None, "Create a session and ride it."],
        ["watch-only", None, "With --session: only read and watch; never claim the lease."],
    ]
    optParameters = [
        ["session", None, None, "Ride this session (claims its lease when free)."],
        ["profile", None, None, "With --new: chat (default) or agent."],
        ["model", None, None, "With --new: provider/model."],
        ["title", None, None, "With --new: the session's title."],
        *DRIVER_PARAMETERS,
    ]

    def postOptions(self) -> None:
        super().postOptions()
        if bool(self["new"]) == bool(self["session"]):
            raise usage.UsageError("give exactly one of --new and --session")
        if not self["new"]:
            for name in ("profile", "model", "title"):
                if self[name] is not None:
                    raise usage.UsageError(f"--{name} goes with --new")
        if self["watch-only"] and self["new"]:
            raise usage.UsageError("--watch-only goes with --session (a new session is claimed)")
        checkDriver(self)

    def newSession(self) -> NewSession | None:
        if not self["new"]:
            return None
        return NewSession(profile=self["profile"], model=self["model"], title=self["title"])


async def runRide(
    reactor: IClientReactor,
    options: RideOptions,
    environ: Mapping[str, str] | None = None,
    say: Callable[[str], None] | None = None,
) -> int:
    """
    Ride on standard input and output until C{closed}.

    @param say: writes one line for the person (standard error by default).
    @return: the exit code: 0; 1 when the session could not be opened
        (refused by gardend or the host); 2 when the credentials could not
        be had; 3 when gardend could not be reached (no connection, TLS).
    """
    environ = os.environ if environ is None else environ
    say = say if say is not None else sayOnStderr
    output = StdioLines()
    try:
        credentials = credentialsFor(options, environ)
    except CredentialError as e:
        say(f"vehicle ride: {e}")
        StandardIO(output, reactor=reactor)
        output.sendFrame(errorFrame("invalid_request", str(e)))
        await output.close()
        return 2
    clientId = options["client-id"] or randomId("ride")
    link, pool = driverLink(reactor, options, credentials, clientId)
    ride = Ride(
        link=link, clientId=clientId, write=output.sendFrame, watchOnly=bool(options["watch-only"])
    )
    output.onLine = ride.lineReceived
    output.onEnd = ride.inputEnded
    output.onTooLong = ride.lineTooLong
    StandardIO(output, reactor=reactor)
    finished: Deferred[None] = Deferred()

    def stopping() -> Deferred[None]:
        # Asked to stop (a signal): end as at the end of the input.
        ride.interrupt()
        return boundedWait(reactor, finished, STOP_GRACE_SECONDS)

    reactor.addSystemEventTrigger("before", "shutdown", stopping)
    try:
        code = await ride.run(new=options.newSession(), sessionId=options["session"])
        if code and ride.refusal is not None:
            text, code = explainRefusal(ride.refusal, credentials, "the session")
            say(f"vehicle ride: {text}")
    finally:
        await output.close()
        await pool.closeCachedConnections()
        finished.callback(None)
    return code


def sayOnStderr(text: str) -> None:
    """
    One line for the person, on standard error.
    """
    sys.stderr.write(text + "\n")
    sys.stderr.flush()


def explainRefusal(frame: JSONObject, credentials: Credentials, what: str) -> tuple[str, int]:
    """
    One line saying why gardend or the host refused a client, and the exit
    code for it (3 when gardend was not reached, else 1).  A 401 says
    whether a token was sent, and where one comes from.
    """
    code = frame.get("code")
    message = frame.get("message") or ""
    if code == "unreachable":
        return str(message), 3
    if code == "unauthorized":
        if credentials.token is not None:
            return (
                f"gardend refused the token (unauthorized): check {TOKEN_ENV} or --key-file",
                1,
            )
        if credentials.visitorId is not None:
            return f"gardend does not take visitors here (unauthorized): {message}", 1
        return (
            f"no token: set {TOKEN_ENV} or give --key-file (gardend answered unauthorized)",
            1,
        )
    return f"cannot open {what}: {code}: {message}", 1


def boundedWait(reactor: IReactorTime, d: Deferred[None], seconds: float) -> Deferred[None]:
    """
    A L{Deferred} that fires when C{d} does, or after C{seconds}, whichever
    comes first (C{d} itself is left alone).
    """
    waiter: Deferred[None] = Deferred()

    def fire(_: Any = None) -> None:
        if not waiter.called:
            waiter.callback(None)

    def fireThen(result: Any) -> Any:
        fire()
        return result

    d.addBoth(fireThen)
    timer = reactor.callLater(seconds, fire)

    def stopTimer(result: Any) -> Any:
        cancelIfActive(timer)
        return result

    waiter.addBoth(stopTimer)
    return waiter
