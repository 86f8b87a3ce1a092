# -*- test-case-name: tests.unit.test_metrics -*-
"""
Every request the app answers, told to the host's L{Metrics}: the route
pattern that took it (never the raw path, so no session id becomes a
label), its method, its status and how long it took, counted when the
answer ends or the client goes away.

The route is named by the route itself as it takes the request
(L{routeTaken}), not found by matching the path against the route table a
second time: the router has matched it already, and a match (with Klein's
binding of the router to the app, a new werkzeug map each time) was a sixth
of the reactor's time per request.  A request no route took (not found, a
method the path does not take, a refusal before routing) is L{UNMATCHED}.
"""

from __future__ import annotations

from typing import Any

from twisted.internet.interfaces import IReactorTime
from twisted.web.iweb import IRequest
from twisted.web.resource import Resource
from twisted.web.server import Request

from vehicle.metrics import UNMATCHED, Metrics


#: The methods named in a label as they are; any other is C{other}, so a
#: client cannot make labels up.
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})

#: The attribute of a request that holds the pattern of the route that took it.
_ROUTE = "_vehicleRoute"


def routeTaken(request: IRequest, pattern: str) -> None:
    """
    The route of C{pattern} (C{/sessions/<sessionId>/commands}) took
    C{request}: it is counted under that pattern.
    """
    setattr(request, _ROUTE, pattern)


def routeOf(request: IRequest) -> str:
    """
    The pattern of the route that took C{request}, or L{UNMATCHED}.
    """
    return str(getattr(request, _ROUTE, UNMATCHED))


class MeteredResource(Resource):
    """
    The app's front, metered: it hands every request to C{inner} and tells
    C{metrics} of it once it is answered, under the route that took it
    (L{routeTaken}).
    """

    isLeaf = True

    def __init__(
        self,
        inner: Resource,
        metrics: Metrics,
        clock: IReactorTime,
    ) -> None:
        Resource.__init__(self)
        self._inner = inner
        self._metrics = metrics
        self._clock = clock

    def render(self, request: Request) -> Any:
        began = self._clock.seconds()
        method = request.method.decode("latin-1").upper()
        method = method if method in METHODS else "other"

        def answered(_: object) -> None:
            self._metrics.requestAnswered(
                routeOf(request), method, int(request.code), self._clock.seconds() - began)

        request.notifyFinish().addBoth(answered)
        return self._inner.render(request)
