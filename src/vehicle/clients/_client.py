# -*- test-case-name: tests.live.test_clients_errors -*-
"""
What both clients need to reach gardend as people point them at it: a URL
with a scheme, HTTP or HTTPS with certificates verified (the system's
trust, or a private CA from C{--ca-file}), and one line that says why a
connection failed.
"""

from __future__ import annotations

import errno
import ipaddress
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from OpenSSL.SSL import Error as SSLError
from service_identity import VerificationError
from twisted.internet import error as neterror
from twisted.internet.defer import CancelledError
from twisted.internet.ssl import Certificate, trustRootFromCertificates
from twisted.python import usage
from twisted.web.client import BrowserLikePolicyForHTTPS, HTTPConnectionPool
from treq.client import HTTPClient

from vehicle._http import httpClient
from vehicle._reactors import IClientReactor


#: Seconds a client waits for a connection to gardend.
CONNECT_TIMEOUT = 10.0


def isLoopback(url: str) -> bool:
    """
    Is C{url}'s host this computer (C{localhost} or a loopback address)?
    """
    host = urlsplit(url).hostname or ""
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def checkGardendURL(url: str | None) -> str:
    """
    C{--gardend} is an C{http://} or C{https://} URL with a host.

    @raise usage.UsageError: it is not (one line, saying what to write).
    """
    if not url:
        raise usage.UsageError("--gardend is required")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        rest = url.split("://", 1)[-1].lstrip("/")
        # This computer's gardend is plain http; any other, https.
        scheme = "http" if isLoopback("http://" + rest) else "https"
        raise usage.UsageError(
            f"--gardend must be a URL starting with http:// or https:// (got {url!r}; "
            f"try {scheme}://{rest})"
        )
    try:
        parts.port
    except ValueError:
        raise usage.UsageError(f"--gardend has a port that is not a number: {url!r}")
    return url


def tlsPolicy(caFile: str | None) -> BrowserLikePolicyForHTTPS:
    """
    Certificates checked as a browser does (the name, with service-identity),
    against the system's trusted CAs, or only against those in C{caFile}
    (PEM, one or more certificates).

    @raise usage.UsageError: C{caFile} cannot be read or holds no certificate.
    """
    if caFile is None:
        return BrowserLikePolicyForHTTPS()
    try:
        pem = Path(caFile).read_bytes()
    except OSError as e:
        raise usage.UsageError(f"cannot read --ca-file {caFile}: {e.strerror or e}")
    certificates = []
    marker = b"-----END CERTIFICATE-----"
    for block in pem.split(marker)[:-1]:
        try:
            certificates.append(Certificate.loadPEM(block + marker + b"\n"))
        except Exception:
            raise usage.UsageError(f"--ca-file {caFile} holds a certificate that cannot be read")
    if not certificates:
        raise usage.UsageError(f"--ca-file {caFile} holds no PEM certificate")
    return BrowserLikePolicyForHTTPS(trustRoot=trustRootFromCertificates(certificates))


class GardendOptions(usage.Options):
    """
    What every client of the host asks on its command line: where gardend
    is, which graph, who is calling (a token from a file or
    C{$VEHICLE_TOKEN}, or a visitor) and which CAs to trust.  A subclass adds
    its own options and calls this C{postOptions} first.
    """

    optFlags: list[list[str | None]] = [
        ["anonymous", None, "Act as a visitor (no Authorization), even with a token."],
    ]
    optParameters: list[list[Any]] = [
        ["gardend", None, None, "gardend's URL."],
        ["graph", None, None, "The graph the session lives on."],
        ["visitor-id", None, None, "A visitor's X-Visitor-Id (default: the one kept in "
         "~/.local/state/vehicle/visitor-id)."],
        ["key-file", None, None, "A file holding the bearer token (default: $VEHICLE_TOKEN)."],
        ["ca-file", None, None, "Trust only the CA certificates in this PEM file for https."],
    ]

    def __init__(self) -> None:
        # Typed, so that making one is a typed call (Twisted's is not annotated).
        usage.Options.__init__(self)

    def postOptions(self) -> None:
        checkGardendURL(self["gardend"])
        if not self["graph"]:
            raise usage.UsageError("--graph is required")
        tlsPolicy(self["ca-file"])  # a --ca-file that cannot be used is refused here


def clientHTTP(reactor: IClientReactor, caFile: str | None = None, persistent: bool = False) -> tuple[HTTPClient, HTTPConnectionPool]:
    """
    The clients' treq client and its pool: IP literals straight to TCP,
    L{CONNECT_TIMEOUT} to connect, TLS per L{tlsPolicy}.
    """
    pool = HTTPConnectionPool(reactor, persistent=persistent)
    http = httpClient(reactor, tls=tlsPolicy(caFile), timeout=CONNECT_TIMEOUT, pool=pool)
    return http, pool


def _causes(error: BaseException) -> list[BaseException]:
    """
    C{error} and what it wraps (the reasons of the agent's C{ResponseFailed}
    and its kin), depth first.
    """
    found = [error]
    for reason in getattr(error, "reasons", None) or ():
        value = getattr(reason, "value", reason)
        if isinstance(value, BaseException):
            found.extend(_causes(value))
    return found


def wasCancelled(error: BaseException) -> bool:
    """
    Whether C{error} is a cancellation, plain or as the agent reports one
    made while connecting or before the answer came (a
    C{ConnectingCancelledError}, a C{ResponseNeverReceived} wrapping a
    L{CancelledError}): the caller stopped, so nothing is to be retried or
    answered.
    """
    return any(
        isinstance(cause, (CancelledError, neterror.ConnectingCancelledError))
        for cause in _causes(error)
    )


def _sslText(error: BaseException) -> str:
    texts: list[str] = []
    for arg in error.args:
        if isinstance(arg, list):
            for item in arg:
                if isinstance(item, tuple) and item:
                    texts.append(str(item[-1]))
    return ", ".join(t for t in texts if t) or error.__class__.__name__


def describeFailure(error: BaseException, url: str) -> tuple[str, str]:
    """
    Why a request to C{url} got no answer, for a person: C{(reason, text)}
    with C{reason} one of C{refused}, C{tls}, C{dns}, C{timeout},
    C{closed}, C{network}.
    """
    parts = urlsplit(url)
    where = parts.netloc or url
    causes = _causes(error)
    for cause in causes:
        if isinstance(cause, VerificationError):
            return "tls", (
                f"TLS failure with {where}: its certificate is not for {parts.hostname}"
            )
        if isinstance(cause, SSLError):
            return "tls", f"TLS failure with {where}: {_sslText(cause)}"
    for cause in causes:
        if isinstance(cause, neterror.ConnectionRefusedError):
            return "refused", f"cannot connect to {where}: connection refused (is gardend running?)"
        if isinstance(cause, neterror.DNSLookupError):
            return "dns", f"cannot find the host {parts.hostname}: no such name"
        if isinstance(cause, (neterror.TimeoutError, neterror.TCPTimedOutError)):
            return "timeout", f"cannot connect to {where}: timed out"
        if isinstance(cause, neterror.NoRouteError) or (
            isinstance(cause, OSError) and cause.errno in (errno.ENETUNREACH, errno.EHOSTUNREACH)
        ):
            return "network", f"cannot connect to {where}: no route to the host"
    for cause in causes:
        if isinstance(cause, (neterror.ConnectionDone, neterror.ConnectionLost)):
            return "closed", f"{where} closed the connection without an answer"
        if isinstance(cause, neterror.ConnectError):
            return "network", f"cannot connect to {where}: {cause.__class__.__name__}"
    return "network", f"no answer from {where}: {error.__class__.__name__}"
