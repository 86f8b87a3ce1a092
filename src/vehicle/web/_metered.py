# -*- test-case-name: tests.unit.test_metrics -*-
"""
Every request the app answers, told to the host's L{Metrics}: the route
pattern that took it (never the raw path, so no session id becomes a
label), its method, its status and how long it took, counted when the
answer ends or the client goes away.
"""

from __future__ import annotations

from typing import Any, Callable

from twisted.internet.interfaces import IReactorTime
from twisted.web.resource import Resource
from twisted.web.server import Request

from vehicle.metrics import Metrics


#: The methods named in a label as they are; any other is C{other}, so a
#: client cannot make labels up.
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


class MeteredResource(Resource):
    """
    The app's front, metered: it hands every request to C{inner} and tells
    C{metrics} of it once it is answered.

    @ivar routeOf: the pattern of the route that takes a method and a path.
    """

    isLeaf = True

    def __init__(
        self,
        inner: Resource,
        metrics: Metrics,
        routeOf: Callable[[str, bytes], str],
        clock: IReactorTime,
    ) -> None:
        Resource.__init__(self)
        self._inner = inner
        self._metrics = metrics
        self._routeOf = routeOf
        self._clock = clock

    def render(self, request: Request) -> Any:
        began = self._clock.seconds()
        method = request.method.decode("latin-1").upper()
        method = method if method in METHODS else "other"
        route = self._routeOf(method, request.path)

        def answered(_: object) -> None:
            self._metrics.requestAnswered(
                route, method, int(request.code), self._clock.seconds() - began)

        request.notifyFinish().addBoth(answered)
        return self._inner.render(request)
