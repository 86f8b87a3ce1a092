# -*- test-case-name: tests.unit.test_twistedparts -*-
"""
Every place where vehicle leans on a private part of Twisted, and no other.

Twisted's compatibility policy covers its public names only: a name that
starts with an underscore may change in any release without a deprecation.
Everything else in vehicle uses public API.  The two hooks below are what
public API cannot do, and L{tests.unit.test_twistedparts} fails on a Twisted
that changes any of them: it checks that each private name still exists
with the signature relied on, and drives each override through Twisted's
own code, so that a release that stops calling a hook fails a test instead
of silently answering with Twisted's bare pages.

What is relied on, name by name (L{PRIVATE_NAMES} lists them for the test):

  - C{HTTPChannel._respondToBadRequestAndDisconnect(self)}: Twisted's
    parser calls it for everything it finds malformed (a request line that
    does not parse, a header without a colon or with a bad name or a NUL, a
    C{Content-Length} that is not a number, two lengths, an unknown
    C{Transfer-Encoding}, malformed chunks) and answers a bare
    C{400 Bad Request} with no body.  L{MalformedRequestHook} routes it to
    L{MalformedRequestHook.requestMalformed}, so the host answers the error
    frame instead.  Public API could only do this by parsing every request
    a second time, ahead of Twisted.

  - C{Request._handleStar(self)}: L{twisted.web.server.Request.process}
    answers a request for C{*} (C{OPTIONS *}) itself, with an empty page,
    before any resource sees it.  L{StarRequestHook} routes it to
    L{StarRequestHook.starRequested}, so the app answers it (the secret
    first, then C{not_found}) like any other path.  Public API could only do
    this by copying C{process} whole.
"""

from __future__ import annotations

from twisted.web.http import HTTPChannel
from twisted.web.server import Request


#: Each private name used here: (the class, the name, its parameters).
PRIVATE_NAMES: tuple[tuple[type, str, tuple[str, ...]], ...] = (
    (HTTPChannel, "_respondToBadRequestAndDisconnect", ("self",)),
    (Request, "_handleStar", ("self",)),
)


class MalformedRequestHook(HTTPChannel):
    """
    An HTTP channel that answers what Twisted's parser finds malformed with
    L{requestMalformed} rather than Twisted's bare C{400}.
    """

    def requestMalformed(self) -> None:
        """
        Twisted's parser found the request malformed: answer it, and close.
        By default, Twisted's own answer (a bare C{400 Bad Request}).
        """
        HTTPChannel._respondToBadRequestAndDisconnect(self)

    def _respondToBadRequestAndDisconnect(self) -> None:
        self.requestMalformed()


class StarRequestHook(Request):
    """
    A request that answers C{*} (C{OPTIONS *}) with L{starRequested} rather
    than Twisted's empty page.
    """

    def starRequested(self) -> None:
        """
        The request's target is C{*}: answer it.  By default, Twisted's own
        answer (C{200} for C{OPTIONS}, else C{405}, with no body).
        """
        Request._handleStar(self)

    def _handleStar(self) -> None:
        self.starRequested()
