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

And one shortcut through Twisted's parser (L{atRest}, L{takeWhole}): a
request that arrives whole in one read, every part of it plain, is handed
to the channel at once instead of line by line (each header line costs
Twisted's parser a handful of calls, a tenth of a request's time on the
reactor).  It reads and sets the parser's own state, listed in
L{PRIVATE_STATE}, and calls C{twisted.web.http._parseRequestLine(line)}
(in L{PRIVATE_NAMES}) so that a request line is judged exactly as Twisted
judges it.  L{tests.unit.test_whole} feeds the same requests, whole and cut
into pieces, to a channel with the shortcut and one without, and checks
that the two answer and leave themselves alike.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any, cast

from twisted.protocols.basic import LineReceiver
from twisted.web import http
from twisted.web.http import HTTPChannel
from twisted.web.http_headers import Headers
from twisted.web.server import Request


#: Each private function used here: (its class or module, the name, its
#: parameters).
PRIVATE_NAMES: tuple[tuple[type | ModuleType, str, tuple[str, ...]], ...] = (
    (HTTPChannel, "_respondToBadRequestAndDisconnect", ("self",)),
    (Request, "_handleStar", ("self",)),
    (http, "_parseRequestLine", ("line",)),
)

#: Each private attribute read or set here: (the class, the name, its value
#: on an instance just made).
PRIVATE_STATE: tuple[tuple[type, str, object], ...] = (
    (HTTPChannel, "_HTTPChannel__first_line", 1),
    (LineReceiver, "_buffer", b""),
    (LineReceiver, "_busyReceiving", False),
    (Headers, "_rawHeaders", {}),
)
#: Set here, as Twisted's parser sets them between a request's first line
#: and its end (absent before).
PRIVATE_SET = ("_command", "_path", "_version")

#: Twisted's own judge of a request line: C{(method, target, version)}, or
#: C{ValueError}.
parseRequestLine = http._parseRequestLine


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


def atRest(channel: HTTPChannel) -> bool:
    """
    Is C{channel}'s parser waiting for the first line of a request, holding
    nothing: no part of a line, no request under way or being answered (and
    so no bytes put aside until it is), no blank line already skipped before
    a request, not inside its own loop over lines; on a connection that
    takes more requests?  Only then may a whole request be handed over with
    L{takeWhole}.
    """
    c = cast(Any, channel)
    return bool(
        not c.requests
        and c.persistent
        and not c._buffer
        and not c._busyReceiving
        and c._HTTPChannel__first_line == 1
    )


def takeWhole(
    channel: HTTPChannel,
    line: tuple[bytes, bytes, bytes],
    headers: dict[bytes, list[bytes]],
    length: int,
    body: bytes,
) -> None:
    """
    Hand C{channel} (L{atRest}) a whole request, as its parser would have
    had it by the end of the body: the request made and queued, its line
    and its headers (each name as Twisted spells it, values as sent,
    stripped of spaces and tabs) where the parser keeps them, then
    Twisted's own end of the headers (cookies, the connection's
    persistence, the length given to the request), then the body.  The
    caller then calls the channel's C{allContentReceived}, which ends the
    parse as Twisted's does.

    The parser's idle timeout is not reset: C{allContentReceived} turns it
    off straight away.
    """
    c = cast(Any, channel)
    # Twisted passes a queue position too (deprecated; always 0 here).
    request = c.requestFactory(c)
    c.requests.append(request)
    request.requestHeaders._rawHeaders = headers
    c._command, c._path, c._version = line
    c.length = length
    # Twisted's, not the channel's own override (the host's guard reads
    # its length checks from the line-by-line parse).
    HTTPChannel.allHeadersReceived(c)
    if length:
        request.handleContentChunk(body)
