"""
The router's remembered matches (L{vehicle.web._routing}): the app's
routes answer every method and path as werkzeug's own matcher does, asked
once or again; what is kept is bounded and let go when a rule is added.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from twisted.trial.unittest import SynchronousTestCase
from werkzeug.exceptions import HTTPException, MethodNotAllowed
from werkzeug.routing import Map, Rule
from werkzeug.routing.exceptions import RequestRedirect

from vehicle.web import VehicleAPI
from vehicle.web._routing import KEPT, LONGEST_KEPT, RememberingMatcher, remembering


def answer(routes: Map, method: str, path: str) -> tuple[Any, ...]:
    """
    What C{routes} answers C{method} on C{path}: the rule's pattern and
    values, or the refusal (its kind, the methods it allows, where it
    redirects).
    """
    try:
        rule, values = routes.bind("host").match(path, method=method, return_rule=True)
    except RequestRedirect as e:
        return ("redirect", e.new_url)
    except MethodNotAllowed as e:
        return ("not allowed", sorted(e.valid_methods or ()))
    except HTTPException as e:
        return (type(e).__name__,)
    return (rule.rule, dict(values))


def plainCopy(routes: Map) -> Map:
    """
    The same routes in a map of werkzeug's own matcher.
    """
    return Map([rule.empty() for rule in routes.iter_rules()],
               merge_slashes=routes.merge_slashes)


SEGMENTS = st.sampled_from(["sessions", "account", "grants", "commands", "events", "claim",
                            "release", "chimes", "capsule", "health", "", "s0123abcd", "%2F",
                            "é", "sessions ", "a.b", "..", "SESSIONS"])
METHODS = st.sampled_from(["GET", "HEAD", "POST", "PATCH", "DELETE", "OPTIONS", "PUT", "BREW"])


class RememberedTests(SynchronousTestCase):
    """
    The app's router with its matches remembered answers as werkzeug's.
    """

    def setUp(self) -> None:
        self.routes = VehicleAPI.router.url_map
        self.plain = plainCopy(self.routes)

    def test_theAppsRouterRemembers(self) -> None:
        self.assertIsInstance(self.routes._matcher, RememberingMatcher)
        self.assertFalse(self.routes.merge_slashes)

    @settings(max_examples=500, deadline=None, derandomize=True)
    @given(METHODS, st.lists(SEGMENTS, min_size=0, max_size=4), st.booleans())
    def test_asWerkzeugAnswers(self, method: str, segments: list[str], slash: bool) -> None:
        """
        Every method and path, asked once and then again (remembered), is
        answered as werkzeug's own matcher answers it.
        """
        path = "/" + "/".join(segments) + ("/" if slash else "")
        expected = answer(self.plain, method, path)
        self.assertEqual(answer(self.routes, method, path), expected, (method, path))
        self.assertEqual(answer(self.routes, method, path), expected, (method, path))

    def test_everyRouteTwice(self) -> None:
        """
        Every route with each of its methods, asked twice.
        """
        for rule in self.plain.iter_rules():
            path = rule.rule.replace("<sessionId>", "s0123")
            for method in sorted(rule.methods or ()):
                for _ in range(2):
                    self.assertEqual(answer(self.routes, method, path), (rule.rule, (
                        {"sessionId": "s0123"} if "<sessionId>" in rule.rule else {})))


class KeptTests(SynchronousTestCase):
    """
    What a remembering matcher keeps.
    """

    def setUp(self) -> None:
        self.routes = remembering(Map())
        self.routes.add(Rule("/sessions/<sessionId>", methods=["GET"], endpoint="inspect"))
        self.matcher = self.routes._matcher
        assert isinstance(self.matcher, RememberingMatcher)

    def test_ownValues(self) -> None:
        """
        Each match hands values of its own: changing them changes no later
        match.
        """
        adapter = self.routes.bind("host")
        _, values = adapter.match("/sessions/s1", method="GET")
        values["sessionId"] = "changed"
        self.assertEqual(adapter.match("/sessions/s1", method="GET")[1], {"sessionId": "s1"})

    def test_onlyMatchesKept(self) -> None:
        """
        A refusal is not kept, nor a path longer than L{LONGEST_KEPT}.
        """
        adapter = self.routes.bind("host")
        self.assertEqual(answer(self.routes, "POST", "/sessions/s1")[0], "not allowed")
        self.assertEqual(answer(self.routes, "GET", "/nowhere")[0], "NotFound")
        adapter.match("/sessions/" + "s" * LONGEST_KEPT, method="GET")
        self.assertEqual(self.matcher.matched, {})
        adapter.match("/sessions/s1", method="GET")
        self.assertEqual(len(self.matcher.matched), 1)

    def test_bounded(self) -> None:
        """
        Past L{KEPT} matches, those kept are let go together.
        """
        adapter = self.routes.bind("host")
        for n in range(KEPT):
            adapter.match(f"/sessions/s{n}", method="GET")
        self.assertEqual(len(self.matcher.matched), KEPT)
        adapter.match("/sessions/one-more", method="GET")
        self.assertEqual(len(self.matcher.matched), 1)

    def test_ruleAddedLetsGo(self) -> None:
        """
        A rule added after matches were kept lets them go: the new rule
        takes what it should.
        """
        self.assertEqual(answer(self.routes, "GET", "/sessions/events"),
                         ("/sessions/<sessionId>", {"sessionId": "events"}))
        self.routes.add(Rule("/sessions/events", methods=["GET"], endpoint="all"))
        self.assertEqual(answer(self.routes, "GET", "/sessions/events"),
                         ("/sessions/events", {}))
