# -*- test-case-name: tests.unit.test_routing -*-
"""
The app's router, the short way: L{RouterResource} is Klein's resource for
the app, except that a request whose method and path a route took before
is handed to that route at once, with the values the router read then.

Klein's own way (L{KleinResource.render}) binds werkzeug's map to every
request (a new adapter), runs werkzeug's matcher (a state machine over the
route table), adapts the request to L{IKleinRequest} to give it the
adapter, and makes six closures a request, one of which refers to itself:
every request it answered waited for the collector.  That was about a
sixth of the reactor's time on the cheapest routes.  The short way keeps
the answer as Klein gives it (the route's result written, a failure handed
to the app's error handlers in their order, what is still awaited of the
answer, the route's or a handler's, cancelled when its client goes away)
and leaves nothing of a request once it is answered.

Only what a route took is kept: a request the router refuses (not found, a
method the route does not take, a redirect werkzeug would make), a path
with C{%} or not in ASCII, and a path longer than L{LONGEST_KEPT} go
Klein's way every time.  At most L{KEPT} are kept, then let go together,
and all of them when a rule is added.  The routes of this app never ask
for the adapter (C{IKleinRequest(request).mapper}), which the short way
does not give.
"""

from __future__ import annotations

from typing import Any, ClassVar, cast

from attrs import frozen
from klein import Klein
from klein._app import ErrorMethods
from klein._resource import KleinResource, extractURLparts, route_metadata
from twisted.internet.defer import CancelledError, Deferred, fail, maybeDeferred, succeed
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.web.iweb import IRequest
from twisted.web.server import NOT_DONE_YET, Request


#: The most routes taken that are kept, and the longest path kept (a path
#: of a session id is ~40 characters; a longer one goes Klein's way).
KEPT = 1024
LONGEST_KEPT = 200


@frozen
class Taken:
    """
    What the router found for a method and path: the route's endpoint, how
    many segments of the path it takes, and the values it read from them.
    """

    endpoint: str
    segments: int
    values: dict[str, Any]


class RouterResource(KleinResource):
    """
    Klein's resource for C{app}, with the short way for a request a route
    took before (the module's doc).
    """

    def __init__(self, app: Klein) -> None:
        if app.url_map.host_matching:
            raise ValueError("a router that matches hosts cannot skip binding to each request")
        KleinResource.__init__(self, app)
        self.taken: dict[tuple[bytes, bytes], Taken] = {}
        #: How many rules the table had when L{taken} began.
        self._rules = len(app.url_map._rules)

    def render(self, request: IRequest) -> Any:
        taken = self.find(request)
        if taken is None:
            return KleinResource.render(self, request)
        request.prepath.extend(request.postpath[: taken.segments])
        request.postpath = request.postpath[taken.segments:]
        _Answer(self._app, cast(Request, request)).run(taken)
        return NOT_DONE_YET

    def find(self, request: IRequest) -> Taken | None:
        """
        The route that takes C{request}, found before or now; L{None} for a
        request that goes Klein's way.
        """
        if request.prepath:
            return None  # below a path of the site: its match depends on that path too
        rules = len(self._app.url_map._rules)
        if rules != self._rules:
            self.taken.clear()
            self._rules = rules
        path: bytes = request.path
        method: bytes = request.method
        key = (method, path)
        taken = self.taken.get(key)
        if taken is not None:
            return taken
        if (not path.startswith(b"/") or b"%" in path or len(path) > LONGEST_KEPT
                or not path.isascii() or not method.isascii()):
            return None
        try:
            scheme, server, _, pathInfo, script = extractURLparts(request)
            rule, values = self._app.url_map.bind(
                server, script, path_info=pathInfo, default_method=method.decode("ascii"),
                url_scheme=scheme,
            ).match(return_rule=True)
        except Exception:
            return None  # refused: Klein's way answers it
        taken = Taken(
            rule.endpoint,
            route_metadata(self._app.endpoints[rule.endpoint]).segment_count,
            dict(values),
        )
        if len(self.taken) >= KEPT:
            self.taken.clear()
        self.taken[key] = taken
        return taken


class _Answer:
    """
    One request on a route L{RouterResource} found: the route called, its
    answer written, a failure handed to the app's error handlers.
    """

    __slots__ = ("_app", "_request", "_finished", "_answer")

    _log: ClassVar[Logger] = Logger()

    def __init__(self, app: Klein, request: Request) -> None:
        self._app = app
        self._request = request
        self._finished = False
        #: The route's answer, and what is made of it (cancelled if the
        #: client goes away).
        self._answer: Deferred[object] | None = None

    def run(self, taken: Taken) -> None:
        # Told of the end first (as Klein is), so that a route whose
        # request ended before its answer came finds it ended.
        self._request.notifyFinish().addBoth(self._ended)
        try:
            result = self._app.execute_endpoint(taken.endpoint, self._request, **taken.values)
        except Exception:
            answer: Deferred[object] = fail()
        else:
            answer = result if isinstance(result, Deferred) else succeed(result)
        self._answer = answer
        answer.addCallback(_written).addErrback(self._failed, self._app._error_handlers)
        answer.addCallback(self._write).addErrback(self._unwritten)

    def _ended(self, result: object) -> None:
        self._finished = True
        if isinstance(result, Failure) and self._answer is not None:
            # The client went away: as Klein does, whatever is still awaited
            # of the answer (the route's, or an error handler's) is cancelled;
            # an answer already made is left as it is.
            self._answer.cancel()

    def _failed(self, failure: Failure, handlers: ErrorMethods) -> object:
        """
        The first of C{handlers} that takes C{failure} answers it; if it
        fails, the next that takes its failure does.
        """
        if self._finished:
            if not failure.check(CancelledError):
                self._log.failure("Unhandled error answering a request", failure)
            return None
        for at, (kinds, handler) in enumerate(handlers):
            if failure.check(*kinds):
                answer = maybeDeferred(self._app.execute_error_handler, handler, self._request,
                                       failure)
                return answer.addCallback(_written).addErrback(self._failed, handlers[at + 1:])
        self._request.processingFailed(failure)
        return None

    def _write(self, result: object) -> None:
        if isinstance(result, str):
            result = result.encode("utf-8")
        if isinstance(result, bytes):
            self._request.write(result)
        if not self._finished:
            self._request.finish()

    def _unwritten(self, failure: Failure) -> None:
        self._log.failure("Unhandled error writing an answer", failure)


def _written(result: object) -> bytes | str | None:
    """
    What a route (or an error handler) of this app answers: its bytes or
    text, or L{None} when it wrote its answer itself; anything else (which
    Klein would render) is a failure of the route.
    """
    if result is None or isinstance(result, (bytes, str)):
        return result
    raise TypeError(f"a route of this app answered a {type(result).__name__}")


__all__ = ["KEPT", "LONGEST_KEPT", "RouterResource", "Taken"]
