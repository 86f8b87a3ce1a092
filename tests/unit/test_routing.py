"""
The app's router the short way (L{vehicle.web._routing.RouterResource}):
every method and path is answered as Klein's own resource answers it, the
first time and again (the route kept); a route's answer, failure and
cancellation go as Klein's do; nothing of a request is left to the
collector; what is kept is bounded.
"""

from __future__ import annotations

import gc
import json
import weakref
from typing import Any, Callable
from urllib.parse import quote

from hypothesis import given, settings
from hypothesis import strategies as st
from klein import Klein
from klein._resource import KleinResource
from treq.testing import StubTreq
from twisted.internet.defer import Deferred, fail, succeed
from twisted.internet.error import ConnectionDone
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase
from twisted.web.resource import IResource, Resource
from twisted.web.server import Request, Site
from twisted.web.test.requesthelper import DummyChannel

from vehicle.web import VehicleAPI
from vehicle.web import _routing
from vehicle.web._routing import KEPT, LONGEST_KEPT, RouterResource

from tests.support._hints import assertAnnotationsResolve


def ask(resource: IResource, method: str, path: str) -> tuple[Any, ...]:
    """
    What C{resource} answers C{method} on C{path} (already quoted): its
    status, the headers a route or a refusal sets, its body.
    """
    stub = StubTreq(resource)
    d = stub.request(method, "http://host" + path)
    stub.flush()
    response = SynchronousTestCase().successResultOf(d)
    body = SynchronousTestCase().successResultOf(response.content())
    headers = {name: response.headers.getRawHeaders(name)
               for name in (b"content-type", b"allow", b"location", b"x-route")
               if response.headers.hasHeader(name)}
    return response.code, headers, body


def copyOfTheAppsRoutes() -> Klein:
    """
    A Klein app with the host's route table (every pattern, method and
    endpoint), each route answering its endpoint and the values it read.
    """
    app = Klein()
    app.url_map.merge_slashes = VehicleAPI.router.url_map.merge_slashes
    for rule in VehicleAPI.router.url_map.iter_rules():
        def answer(request: Request, endpoint: str = rule.endpoint, **values: Any) -> bytes:
            return json.dumps([endpoint, values, b"/".join(request.prepath).decode(),
                               b"/".join(request.postpath).decode()]).encode()

        app.route(rule.rule, methods=sorted(rule.methods or ()), endpoint=rule.endpoint)(answer)
    return app


SEGMENTS = st.sampled_from(["sessions", "account", "grants", "commands", "events", "claim",
                            "release", "chimes", "capsule", "health", "", "s0123abcd", "%2F",
                            quote("é"), "a.b", "..", "SESSIONS", "metrics"])
METHODS = st.sampled_from(["GET", "HEAD", "POST", "PATCH", "DELETE", "OPTIONS", "PUT", "BREW"])


class TheAppsRoutesTests(SynchronousTestCase):
    """
    The host's route table answers every method and path the short way as
    Klein's own resource does, asked once (found) and again (kept).
    """

    def setUp(self) -> None:
        self.short = RouterResource(copyOfTheAppsRoutes())
        self.klein = KleinResource(copyOfTheAppsRoutes())

    def asKleinAnswers(self, method: str, path: str) -> tuple[Any, ...]:
        expected = ask(self.klein, method, path)
        self.assertEqual(ask(self.short, method, path), expected, (method, path))
        self.assertEqual(ask(self.short, method, path), expected, (method, path))
        return expected

    @settings(max_examples=500, deadline=None, derandomize=True)
    @given(METHODS, st.lists(SEGMENTS, min_size=0, max_size=4), st.booleans())
    def test_asKleinAnswers(self, method: str, segments: list[str], slash: bool) -> None:
        path = "/" + "/".join(segments) + ("/" if slash else "")
        code, _, _ = self.asKleinAnswers(method, path)
        kept = (method.encode(), path.encode()) in self.short.taken
        self.assertEqual(kept, code == 200 and "%" not in path, (method, path, code))

    def test_everyRouteTwice(self) -> None:
        """
        Every route with each of its methods, the short way the second time.
        """
        for rule in VehicleAPI.router.url_map.iter_rules():
            path = rule.rule.replace("<sessionId>", "s0123")
            for method in sorted(rule.methods or ()):
                code, _, body = self.asKleinAnswers(method, path)
                self.assertEqual(code, 200, (method, path))
                self.assertIn((method.encode(), path.encode()), self.short.taken)
                if method != "HEAD":
                    self.assertEqual(json.loads(body)[:2], [rule.endpoint, (
                        {"sessionId": "s0123"} if "<sessionId>" in rule.rule else {})])


class Refused(Exception):
    pass


def specialRoutes(cancelled: list[bytes] | None = None, waiting: list[Request] | None = None,
                  handled: list[str] | None = None) -> Klein:
    """
    A Klein app whose routes answer in every way a route can, with error
    handlers that answer, fail, and leave a failure to Klein.  A cancelled
    answer's request is added to C{cancelled}, a request whose answer
    waits for its end to C{waiting}, each call of a handler that fails to
    C{handled}.
    """
    app = Klein()
    cancelled = [] if cancelled is None else cancelled
    waiting = [] if waiting is None else waiting
    handled = [] if handled is None else handled

    def answering(path: str, **kw: Any) -> Callable[[Callable[..., Any]], Any]:
        return app.route(path, **kw)

    @answering("/bytes")
    def bytesAnswer(request: Request) -> bytes:
        request.setHeader(b"x-route", b"bytes")
        return b"bytes"

    @answering("/text")
    def text(request: Request) -> str:
        return "text \N{LATIN SMALL LETTER E WITH ACUTE}"

    @answering("/written")
    def written(request: Request) -> None:
        request.write(b"written")
        request.finish()

    @answering("/later")
    def later(request: Request) -> Deferred[bytes]:
        return succeed(b"later")

    @answering("/async")
    async def asynchronous(request: Request) -> bytes:
        return await succeed(b"async")

    @answering("/things/<name>/<int:count>")
    def things(request: Request, name: str, count: int) -> bytes:
        return json.dumps([name, count, b"/".join(request.prepath).decode(),
                           b"/".join(request.postpath).decode()]).encode()

    @answering("/branch/", branch=True)
    def branch(request: Request) -> bytes:
        return b"/".join(request.prepath) + b"|" + b"/".join(request.postpath)

    @answering("/raises")
    def raises(request: Request) -> bytes:
        raise Refused("no")

    @answering("/fails")
    def fails(request: Request) -> Deferred[bytes]:
        return fail(LookupError("gone"))

    @answering("/runtime")
    def runtime(request: Request) -> bytes:
        raise RuntimeError("a runtime error")

    @answering("/unhandled")
    def unhandled(request: Request) -> bytes:
        raise ZeroDivisionError("nobody takes it")

    @answering("/refusedAgain")
    def refusedAgain(request: Request) -> bytes:
        raise Refused("again")

    @answering("/finishedElsewhere")
    def finishedElsewhere(request: Request) -> Deferred[None]:
        # Its request is finished by someone else before this answers (as
        # an event stream's is).
        waiting.append(request)
        return Deferred(lambda d: cancelled.append(request.uri))

    @answering("/finishesFirst")
    def finishesFirst(request: Request) -> Deferred[None]:
        request.write(b"finished first")
        request.finish()
        return Deferred(lambda d: cancelled.append(request.uri))

    # In their order: the first that takes a failure answers it.
    @app.handle_errors(Refused)
    def refused(request: Request, failure: Failure) -> bytes:
        handled.append("refused")
        if str(failure.value) == "again":
            # Only the handlers after this one are asked: none takes it.
            raise Refused("again")
        request.setResponseCode(409)
        return b"refused: " + str(failure.value).encode()

    @app.handle_errors(LookupError)
    def lookupError(request: Request, failure: Failure) -> bytes:
        # Fails with a LookupError again: only the handlers after it are
        # asked (this one again would fail for ever).
        handled.append("lookup")
        raise KeyError("the handler failed too")

    @app.handle_errors(KeyError)
    def keyError(request: Request, failure: Failure) -> Deferred[bytes]:
        request.setResponseCode(410)
        return succeed(b"key error, later: " + str(failure.value).encode())

    @app.handle_errors(RuntimeError)
    def runtimeError(request: Request, failure: Failure) -> bytes:
        request.setResponseCode(503)
        return b"runtime error: " + str(failure.value).encode()

    return app


class ShortWayTests(SynchronousTestCase):
    """
    A route's answer and failure, the short way, as Klein's own.
    """

    def setUp(self) -> None:
        self.short = RouterResource(specialRoutes())
        self.klein = KleinResource(specialRoutes())

    def test_asKleinAnswers(self) -> None:
        paths = ["/bytes", "/text", "/written", "/later", "/async", "/things/a/3",
                 "/branch/x/y", "/branch/", "/raises", "/fails", "/runtime", "/unhandled",
                 "/finishesFirst", "/nowhere", "/things/a/b"]
        for path in paths:
            expected = ask(self.klein, "GET", path)
            self.assertEqual(ask(self.short, "GET", path), expected, path)
            self.assertEqual(ask(self.short, "GET", path), expected, path)
        self.flushLoggedErrors(ZeroDivisionError)
        self.assertEqual(ask(self.short, "GET", "/things/a/3")[2], b'["a", 3, "things/a/3", ""]')
        self.assertEqual(ask(self.short, "GET", "/fails")[::2],
                         (410, b"key error, later: 'the handler failed too'"))
        self.assertEqual(ask(self.short, "GET", "/runtime")[::2],
                         (503, b"runtime error: a runtime error"))
        self.assertEqual(ask(self.short, "GET", "/unhandled")[0], 500)
        self.flushLoggedErrors(ZeroDivisionError)
        self.assertEqual(sorted(path.decode() for _, path in self.short.taken),
                         sorted(paths[:-2]))

    def test_eachHandlerOnce(self) -> None:
        """
        A handler that fails is not asked again for that request: the ones
        after it are (Klein's order).
        """
        handled: list[str] = []
        short = RouterResource(specialRoutes(handled=handled))
        klein = KleinResource(specialRoutes())
        for path, code in [("/fails", 410), ("/refusedAgain", 500)]:
            expected = ask(klein, "GET", path)
            self.assertEqual(expected[0], code)
            for _ in range(2):
                handled.clear()
                self.assertEqual(ask(short, "GET", path), expected, path)
                self.assertEqual(len(handled), 1, (path, handled))
        self.flushLoggedErrors(Refused)

    def test_finishedWhileItWaits(self) -> None:
        """
        A request finished by another while its route's answer waits: the
        answer is not cancelled (only a client gone is).
        """
        cancelled: list[bytes] = []
        waiting: list[Request] = []
        resource = RouterResource(specialRoutes(cancelled, waiting))
        for _ in range(2):
            request, transport = requestTo(resource, b"/finishedElsewhere")
            self.assertEqual(waiting, [request])
            request.write(b"elsewhere")
            request.finish()
            waiting.clear()
            self.assertIn(b"elsewhere", transport.written.getvalue())
        self.assertEqual(cancelled, [])

    def test_finishedBeforeItsAnswer(self) -> None:
        """
        A route that finished its request before its answer came is not
        cancelled (it is only when the client goes away).
        """
        cancelled: list[bytes] = []
        resource = RouterResource(specialRoutes(cancelled))
        for _ in range(2):
            request, transport = requestTo(resource, b"/finishesFirst")
            self.assertTrue(request.finished)
            self.assertIn(b"finished first", transport.written.getvalue())
        self.assertEqual(cancelled, [])

    def test_anythingElseIsTheRoutesFailure(self) -> None:
        """
        A route that answers what is neither bytes, text nor L{None} (which
        Klein would render, or drop) fails: its error handler answers.
        """
        app = Klein()

        @app.route("/number")
        def number(request: Request) -> int:
            return 42

        @app.handle_errors(TypeError)
        def typeError(request: Request, failure: Failure) -> bytes:
            request.setResponseCode(500)
            return str(failure.value).encode()

        resource = RouterResource(app)
        for _ in range(2):
            self.assertEqual(ask(resource, "GET", "/number")[::2],
                             (500, b"a route of this app answered a int"))


def requestTo(resource: IResource, path: bytes, method: bytes = b"GET"
              ) -> tuple[Request, DummyChannel.TCP]:
    """
    A request for C{path} made to C{resource} (a site's own request on a
    channel of no connection; HTTP/1.0, so its body is not in chunks), and
    the transport it writes to.
    """
    channel = DummyChannel()
    channel.site = Site(resource)
    request = Request(channel, False)
    request.gotLength(0)
    request.requestReceived(method, path, b"HTTP/1.0")
    return request, channel.transport


class ClientGoneTests(SynchronousTestCase):
    """
    When the client goes away before its answer, the route's L{Deferred}
    is cancelled and nothing is written, as Klein does.
    """

    def awaitForever(self, make: Callable[[Klein], IResource], path: bytes) -> list[str]:
        """
        Ask C{path} of C{make}'s resource twice, the client gone each time
        before the answer: what was cancelled.
        """
        app = Klein()
        cancelled: list[str] = []

        @app.route("/forever")
        def forever(request: Request) -> Deferred[bytes]:
            return Deferred(lambda d: cancelled.append("the route's"))

        @app.route("/handledForever")
        def handledForever(request: Request) -> bytes:
            raise Refused("its handler never answers")

        @app.handle_errors(Refused)
        def refused(request: Request, failure: Failure) -> Deferred[bytes]:
            return Deferred(lambda d: cancelled.append("the handler's"))

        resource = make(app)
        written = []
        for _ in range(2):
            request, transport = requestTo(resource, path)
            request.connectionLost(Failure(ConnectionDone()))
            written.append(transport.written.getvalue())
        self.assertEqual(written, [b"", b""])
        return cancelled

    def test_cancelled(self) -> None:
        for make in (KleinResource, RouterResource):
            self.assertEqual(self.awaitForever(make, b"/forever"), ["the route's"] * 2, make)

    def test_aHandlersAnswerCancelled(self) -> None:
        """
        An error handler's answer still awaited is cancelled too.
        """
        for make in (KleinResource, RouterResource):
            self.assertEqual(self.awaitForever(make, b"/handledForever"),
                             ["the handler's"] * 2, make)


class CollectedTests(SynchronousTestCase):
    """
    A request answered the short way is let go at once; Klein's way leaves
    it to the collector (a closure of its own that refers to itself).
    """

    def setUp(self) -> None:
        gc.collect()
        gc.disable()
        self.addCleanup(gc.enable)

    def leftBehind(self, resource: IResource) -> bool:
        request, transport = requestTo(resource, b"/bytes")
        self.assertTrue(request.finished)
        self.assertIn(b"bytes", transport.written.getvalue())
        gone = weakref.ref(request)
        del request
        return gone() is not None

    def test_letGo(self) -> None:
        self.assertTrue(self.leftBehind(KleinResource(specialRoutes())))
        short = RouterResource(specialRoutes())
        self.assertFalse(self.leftBehind(short))
        self.assertFalse(self.leftBehind(short))


class KeptTests(SynchronousTestCase):
    """
    What the short way keeps, and when it lets it go.
    """

    def setUp(self) -> None:
        self.app = Klein()

        @self.app.route("/sessions/<sessionId>", methods=["GET"])
        def inspect(request: Request, sessionId: str) -> str:
            return sessionId

        self.resource = RouterResource(self.app)

    def test_onlyWhatARouteTook(self) -> None:
        """
        A refusal is not kept, nor a path with C{%}, nor one longer than
        L{LONGEST_KEPT}; a path a route took is.
        """
        ask(self.resource, "POST", "/sessions/s1")
        ask(self.resource, "GET", "/nowhere")
        self.assertEqual(ask(self.resource, "GET", "/sessions/s%31")[2], b"s1")
        longest = "/sessions/" + "s" * (LONGEST_KEPT - len("/sessions/"))
        self.assertEqual(ask(self.resource, "GET", longest + "s")[0], 200)
        written = requestTo(self.resource, "/sessions/é".encode())[1].written.getvalue()
        self.assertEqual(written.partition(b"\r\n\r\n")[2], "é".encode())
        self.assertEqual(requestTo(self.resource, b"/sessions/s2", "GÉT".encode())[0].code, 405)
        self.assertEqual(self.resource.taken, {})
        self.assertEqual(ask(self.resource, "GET", "/sessions/s1")[2], b"s1")
        self.assertEqual(ask(self.resource, "GET", longest)[0], 200)
        self.assertEqual(list(self.resource.taken),
                         [(b"GET", b"/sessions/s1"), (b"GET", longest.encode())])

    def test_belowAPath(self) -> None:
        """
        Served below a path of the site (the request's C{prepath} not
        empty), every request goes Klein's way.
        """
        root = Resource()
        root.putChild(b"app", self.resource)
        for _ in range(2):
            request, transport = requestTo(root, b"/app/sessions/s1")
            self.assertEqual(transport.written.getvalue().partition(b"\r\n\r\n")[2], b"s1")
        self.assertEqual(self.resource.taken, {})

    def test_theBoundsAsDocumented(self) -> None:
        """
        The bounds docs/performance.md names.
        """
        self.assertEqual((KEPT, LONGEST_KEPT), (1024, 200))

    def test_boundedAndLetGo(self) -> None:
        """
        At most L{KEPT}, then all let go together; a rule added lets every
        one go.
        """
        for n in range(KEPT):
            ask(self.resource, "GET", f"/sessions/s{n}")
        self.assertEqual(len(self.resource.taken), KEPT)
        ask(self.resource, "GET", "/sessions/more")
        self.assertEqual(list(self.resource.taken), [(b"GET", b"/sessions/more")])

        @self.app.route("/sessions/<sessionId>", methods=["DELETE"])
        def delete(request: Request, sessionId: str) -> str:
            return "deleted " + sessionId

        self.assertEqual(ask(self.resource, "DELETE", "/sessions/more")[2], b"deleted more")
        self.assertEqual(list(self.resource.taken), [(b"DELETE", b"/sessions/more")])

    def test_hostsMatched(self) -> None:
        """
        A router that matches hosts (whose match depends on each request's
        Host) is refused.
        """
        app = Klein()
        app.url_map.host_matching = True
        self.assertRaises(ValueError, RouterResource, app)


class AnnotationTests(SynchronousTestCase):
    def test_annotationsResolve(self) -> None:
        """
        Every annotation of the module is a type (mutation testing reads
        them so).
        """
        assertAnnotationsResolve(self, _routing)
