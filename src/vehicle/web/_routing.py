# -*- test-case-name: tests.unit.test_routing -*-
"""
The router's match, remembered: werkzeug's matcher (a state machine over
the route table) is asked once for each method and path it takes, and the
route and values it found are kept for the next request on that path (a
client asks the same few paths of its session again and again).

Only a match is kept; a path no route takes (not found, a method the route
does not take, a redirect werkzeug would make) goes to werkzeug's matcher
every time, and so does a path longer than L{LONGEST_KEPT}.  At most
L{KEPT} matches are kept; past that they are let go together.  Every
other step of the router (Klein's binding, werkzeug's redirects and
defaults) is as it was: this stands in for the matcher alone.
"""

from __future__ import annotations

from typing import Any, MutableMapping

from werkzeug.routing import Map, Rule
from werkzeug.routing.matcher import StateMachineMatcher


#: The most matches kept, and the longest path kept (a path of a session id
#: is ~40 characters; a long one is matched again rather than kept).
KEPT = 1024
LONGEST_KEPT = 200


class RememberingMatcher(StateMachineMatcher):
    """
    werkzeug's matcher, with the matches it made kept by domain, path,
    method and websocket (everything its answer depends on; a rule added
    lets all of them go).
    """

    def __init__(self, merge_slashes: bool) -> None:
        StateMachineMatcher.__init__(self, merge_slashes)
        # The values are werkzeug's (its converters' outputs), typed as its
        # own signature types them: the one Any the house keeps.
        self.matched: dict[tuple[str, str, str, bool], tuple[Rule, dict[str, Any]]] = {}

    def add(self, rule: Rule) -> None:
        self.matched.clear()
        StateMachineMatcher.add(self, rule)

    def update(self) -> None:
        self.matched.clear()
        StateMachineMatcher.update(self)

    def match(
        self, domain: str, path: str, method: str, websocket: bool
    ) -> tuple[Rule, MutableMapping[str, Any]]:
        key = (domain, path, method, websocket)
        found = self.matched.get(key)
        if found is None:
            # Raises when no route takes it: nothing is kept.
            rule, values = StateMachineMatcher.match(self, domain, path, method, websocket)
            found = (rule, dict(values))
            if len(path) <= LONGEST_KEPT:
                if len(self.matched) >= KEPT:
                    self.matched.clear()
                self.matched[key] = found
        rule, values = found
        # Each request its own values (Klein hands them to the route).
        return rule, dict(values)


def remembering(routes: Map) -> Map:
    """
    Make C{routes} remember its matches (before any rule is added to it).
    """
    matcher = RememberingMatcher(routes.merge_slashes)
    routes._matcher = matcher
    return routes


__all__ = ["KEPT", "LONGEST_KEPT", "RememberingMatcher", "remembering"]
