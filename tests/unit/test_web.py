"""
Route tests of the host's core through L{StubTreq} (L{tests.support.harness}): trust,
frames and request validation, the lease, idempotency, rename and delete,
listing, and the long-poll watch.  Every answer is held to the protocol's
schemas (L{tests.support.schemas}).
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from twisted.trial.unittest import SynchronousTestCase

from vehicle.protocol import ClaimRequest, fromRequest
from vehicle.errors import STATUS, VehicleError
from vehicle.session import Caller
from vehicle.web._frames import MAX_TEXT_BYTES, validate

from tests.support.harness import COMMAND_EXAMPLES, SECRET, Harness
from tests.support.routes import TAB1, TAB2, RouteTestCase
from tests.support.schemas import assertValidEvent, assertValidFrame


def routesFor(sessionId: str) -> list[tuple[str, str, Any, dict[str, str]]]:
    """
    Every route that names a session, with a body it would accept.
    """
    base = f"/sessions/{sessionId}"
    sse = {"accept": "text/event-stream"}
    return [
        ("GET", base, None, {}),
        ("PATCH", base, {"title": "stolen"}, {}),
        ("DELETE", base, None, {}),
        ("POST", base + "/claim", {"requestId": "x-claim", "takeover": True}, {}),
        ("POST", base + "/release", {"requestId": "x-release"}, {}),
        ("POST", base + "/commands", {"requestId": "x-cmd", "type": "prompt", "text": "hi"}, {}),
        ("POST", base + "/commands", {"requestId": "x-abort", "type": "abort"}, {}),
        ("GET", base + "/events", None, {}),
        ("GET", base + "/events?since=0&waitMs=30000", None, {}),
        ("GET", base + "/events", None, sse),
    ]


class TrustTests(RouteTestCase):
    """
    The secret, the identity headers, and who may see a session.
    """

    def test_healthNeedsNoSecret(self) -> None:
        """
        C{GET /health} answers without the secret.
        """
        frame = self.ok("GET", "/health", secret=None)
        self.assertEqual(frame["type"], "health")
        self.assertTrue(frame["value"]["ok"])

    def test_everyRouteNeedsTheSecret(self) -> None:
        """
        Every other route, and an unknown one, is C{unauthorized} without the
        secret or with a wrong one, and changes nothing.
        """
        sid = self.create(**TAB1)
        before = self.events(sid)
        routes = routesFor(sid) + [
            ("POST", "/sessions", {"requestId": "r"}, {}),
            ("GET", "/sessions", None, {}),
            ("GET", "/nowhere", None, {}),
        ]
        for secret in (None, "wrong", SECRET + "x", ""):
            for method, path, body, headers in routes:
                frame = self.refused("unauthorized", method, path, body, secret=secret,
                                     headers=headers)
                self.assertIsNone(frame["details"])
        self.assertEqual(self.events(sid), before)
        self.assertEqual(len(self.ok("GET", "/sessions")["value"]["sessions"]), 1)

    def test_secretBeforeIdentity(self) -> None:
        """
        Identity headers are read only once the secret matched: with a wrong
        secret and no identity, the answer is C{unauthorized}.
        """
        self.refused("unauthorized", "GET", "/sessions", secret="wrong",
                     headers={"x-user-id": ""})

    def test_identityRequired(self) -> None:
        """
        No C{x-user-id}, or no role header for the binding, is
        C{identity_required} (401).
        """
        code, frame = self.h.call("GET", "/sessions", headers={"x-user-id": ""})
        assertValidFrame(self, frame)
        self.assertEqual((code, frame["code"]), (401, "identity_required"))
        self.refused("identity_required", "GET", "/sessions",
                     headers={"x-sophia-graph-role": ""})
        self.refused("identity_required", "GET", "/sessions", graph=None,
                     headers={"x-sophia-caller-role": ""})
        # With a graph, the caller role does not stand in for the graph role.
        self.refused("identity_required", "GET", "/sessions",
                     headers={"x-sophia-graph-role": "", "x-sophia-caller-role": "owner"})

    def test_invalidIdentity(self) -> None:
        """
        A role that is not owner, editor or viewer, a malformed graph id or
        client id is C{invalid_identity} (400), naming the header.
        """
        frame = self.refused("invalid_identity", "GET", "/sessions", role="admin")
        self.assertEqual(frame["details"]["header"], "x-sophia-graph-role")
        frame = self.refused("invalid_identity", "GET", "/sessions", graph=None, role="root")
        self.assertEqual(frame["details"]["header"], "x-sophia-caller-role")
        frame = self.refused("invalid_identity", "GET", "/sessions", graph="bad graph")
        self.assertEqual(frame["details"]["header"], "x-graph-id")
        frame = self.refused("invalid_identity", "GET", "/sessions", client="has space")
        self.assertEqual(frame["details"]["header"], "x-vehicle-client-id")
        frame = self.refused("invalid_identity", "GET", "/sessions", client="x" * 201)

    def test_graphRequired(self) -> None:
        """
        C{POST /sessions} on a path that names no graph is C{graph_required},
        even when the body names one.
        """
        self.refused("graph_required", "POST", "/sessions", {"requestId": "r"}, graph=None)
        self.refused("graph_required", "POST", "/sessions",
                     {"requestId": "r", "graphId": "g1"}, graph=None)

    def test_graphMismatch(self) -> None:
        """
        A body naming another graph than the path is C{graph_mismatch}; one
        repeating the bound graph is fine, and the session lives there.
        """
        self.refused("graph_mismatch", "POST", "/sessions", {"requestId": "r", "graphId": "g2"})
        frame = self.ok("POST", "/sessions", {"requestId": "r", "graphId": "g1"})
        self.assertEqual(frame["value"]["session"]["graphId"], "g1")

    def test_roleFromTheGraph(self) -> None:
        """
        With a graph the role is C{x-sophia-graph-role}, not the caller role;
        it fixes the session's access.
        """
        frame = self.ok("POST", "/sessions", {"requestId": "r"}, role="viewer",
                        headers={"x-sophia-caller-role": "owner"})
        self.assertEqual(frame["value"]["session"]["role"], "viewer")
        self.assertEqual(frame["value"]["session"]["access"], "read")

    def test_accessReduced(self) -> None:
        """
        A writer's session, once its owner's role has dropped to viewer, may
        be read, renamed and released but not driven (C{access_reduced}).
        """
        sid = self.create(role="editor", **TAB1)
        frame = self.refused("access_reduced", "POST", f"/sessions/{sid}/commands",
                             {"requestId": "p", "type": "prompt", "text": "x"}, role="viewer", **TAB1)
        self.assertEqual(frame["details"]["role"], "viewer")
        self.refused("access_reduced", "POST", f"/sessions/{sid}/claim", {"requestId": "k"},
                     role="viewer", **TAB1)
        self.ok("GET", f"/sessions/{sid}", role="viewer")
        self.ok("PATCH", f"/sessions/{sid}", {"title": "still mine"}, role="viewer")
        self.ok("DELETE", f"/sessions/{sid}", role="viewer")

    def test_clientIdDefaultsToPrincipal(self) -> None:
        """
        Without C{x-vehicle-client-id} the client is the principal.
        """
        frame = self.ok("POST", "/sessions", {"requestId": "r"})
        self.assertEqual(frame["value"]["clientId"], "alice")
        self.assertEqual(frame["value"]["session"]["lease"]["clientId"], "alice")

    def _assertInvisible(self, sid: str, **who: Any) -> None:
        before = self.events(sid)
        title = self.summary(sid)["title"]
        for method, path, body, headers in routesFor(sid):
            _, missing = self.call(method, path.replace(sid, "snosuchsession"), body,
                                   headers=headers, **who)
            code, hidden = self.call(method, path, body, headers=headers, **who)
            self.assertEqual(hidden["code"], "not_found", (method, path, hidden))
            self.assertEqual(code, 404)
            self.assertEqual(hidden, missing, (method, path))
        self.assertEqual(self.events(sid), before)
        self.assertEqual(self.summary(sid)["title"], title)
        self.assertTrue((self.h.root / "sessions" / sid).is_dir())

    def test_otherPrincipalSeesNothing(self) -> None:
        """
        To another principal, on every route, a session is C{not_found} with
        the very body of a missing one, and nothing changes.
        """
        sid = self.create(title="mine")
        self._assertInvisible(sid, principal="bob")
        self._assertInvisible(sid, principal="bob", graph=None)
        self.assertEqual(self.ok("GET", "/sessions", principal="bob")["value"]["sessions"], [])

    def test_otherGraphSeesNothing(self) -> None:
        """
        Through another graph, even its owner finds the session
        C{not_found} on every route, and it is not listed there.
        """
        sid = self.create(title="mine")
        self._assertInvisible(sid, graph="g2")
        self.assertEqual(self.ok("GET", "/sessions", graph="g2")["value"]["sessions"], [])

    def test_unboundSeesEveryGraph(self) -> None:
        """
        Unbound (no graph), the owner lists and reads sessions of every graph.
        """
        one = self.create("a", graph="g1")
        two = self.create("b", graph="g2")
        listed = {s["sessionId"] for s in self.ok("GET", "/sessions", graph=None)["value"]["sessions"]}
        self.assertEqual(listed, {one, two})
        self.summary(two, graph=None)


class FrameTests(RouteTestCase):
    """
    Request validation: every refusal is one error frame naming the field.
    """

    def setUp(self) -> None:
        super().setUp()
        self.sid = self.create(**TAB1)
        self.cmd = f"/sessions/{self.sid}/commands"

    def test_invalidJSON(self) -> None:
        """
        A body that is not JSON, not UTF-8, or empty is C{invalid_json}.
        """
        for raw in (b"{", b"\xff\xfe", b"", b"   ", b"{'a': 1}", b"[1,"):
            self.refused("invalid_json", "POST", self.cmd, raw=raw, **TAB1)
            self.refused("invalid_json", "POST", "/sessions", raw=raw)

    def test_notAnObject(self) -> None:
        """
        A JSON body that is not an object is C{invalid_request}.
        """
        for body in ([], "text", 3, None):
            self.refused("invalid_request", "POST", self.cmd, raw=json.dumps(body).encode(), **TAB1)

    def test_missingRequestId(self) -> None:
        """
        A body without C{requestId} is C{invalid_request} naming it, with no
        C{requestId} in the frame.
        """
        for path, body in [
            ("/sessions", {}),
            (self.cmd, {"type": "prompt", "text": "hi"}),
            (f"/sessions/{self.sid}/claim", {}),
            (f"/sessions/{self.sid}/release", {}),
        ]:
            frame = self.refused("invalid_request", "POST", path, body, **TAB1)
            self.assertEqual(frame["details"]["field"], "requestId")
            self.assertIsNone(frame["requestId"])

    def test_wrongTypes(self) -> None:
        """
        A field of the wrong type is refused, naming the field, and the
        frame carries the request's id.
        """
        cases = [
            (f"/sessions/{self.sid}/claim", {"requestId": "r", "ttlMs": "soon"}, "ttlMs"),
            (f"/sessions/{self.sid}/claim", {"requestId": "r", "takeover": "yes"}, "takeover"),
            (f"/sessions/{self.sid}/claim", {"requestId": "r", "ttlMs": 0}, "ttlMs"),
            ("/sessions", {"requestId": "r", "claim": "true"}, "claim"),
            ("/sessions", {"requestId": "r", "budget": {"maxTurns": "many"}}, "budget.maxTurns"),
            ("/sessions", {"requestId": "r", "profile": "robot"}, "profile"),
            ("/sessions", {"requestId": "r", "model": "nomodel"}, "model"),
            (self.cmd, {"requestId": "r", "type": "prompt", "text": 5}, "text"),
            (self.cmd, {"requestId": "r", "type": "prompt", "text": ""}, "text"),
            (self.cmd, {"requestId": "r", "type": "prompt", "text": "x", "contextRefs": "a"},
             "contextRefs"),
            (self.cmd, {"requestId": "r", "type": "set_room_policy", "policy": "anarchy"}, "policy"),
        ]
        for path, body, field in cases:
            frame = self.refused("invalid_request", "POST", path, body, **TAB1)
            self.assertEqual(frame["details"]["field"], field, (body, frame))
            self.assertEqual(frame["requestId"], "r")
        frame = self.refused("invalid_request", "PATCH", f"/sessions/{self.sid}", {"title": 5})
        self.assertEqual(frame["details"]["field"], "title")
        frame = self.refused("invalid_request", "POST", self.cmd,
                             {"requestId": 7, "type": "abort"}, **TAB1)
        self.assertEqual(frame["details"]["field"], "requestId")

    def test_unknownFields(self) -> None:
        """
        An unknown field, top-level or nested, is refused by name.
        """
        cases = [
            (f"/sessions/{self.sid}/claim", {"requestId": "r", "bogus": 1}, "bogus"),
            (f"/sessions/{self.sid}/release", {"requestId": "r", "force": True}, "force"),
            ("/sessions", {"requestId": "r", "budget": {"maxTokens": 1}}, "budget.maxTokens"),
            ("/sessions", {"requestId": "r", "owner": "bob"}, "owner"),
            (self.cmd, {"requestId": "r", "type": "prompt", "text": "x", "sudo": True}, "sudo"),
            (self.cmd, {"requestId": "r", "type": "abort", "text": "x"}, "text"),
        ]
        for path, body, field in cases:
            frame = self.refused("invalid_request", "POST", path, body, **TAB1)
            self.assertEqual(frame["details"]["field"], field, (body, frame))
        frame = self.refused("invalid_request", "PATCH", f"/sessions/{self.sid}",
                             {"title": "t", "color": "red"})
        self.assertEqual(frame["details"]["field"], "color")

    def test_unknownCommandType(self) -> None:
        """
        A command type the protocol does not have is refused naming C{type};
        so is a command without one.
        """
        frame = self.refused("invalid_request", "POST", self.cmd,
                             {"requestId": "r", "type": "reboot"}, **TAB1)
        self.assertEqual(frame["details"]["field"], "type")
        frame = self.refused("invalid_request", "POST", self.cmd, {"requestId": "r"}, **TAB1)
        self.assertEqual(frame["details"]["field"], "type")

    def test_eachCommandTypeRequiresItsFields(self) -> None:
        """
        Each command type without its own required field is refused naming
        it.
        """
        required = {
            "prompt": "text", "follow_up": "text", "steer": "text",
            "cancel": "targetCommandId", "fork": "entryId", "set_room_policy": "policy",
            "accept_chime": "chimeId", "reject_chime": "chimeId",
        }
        for kind, field in required.items():
            frame = self.refused("invalid_request", "POST", self.cmd,
                                 {"requestId": f"r-{kind}", "type": kind}, **TAB1)
            self.assertEqual(frame["details"]["field"], field, kind)
        self.assertEqual(self.types(self.sid), ["session.created", "lease.claimed"])

    def test_eachCommandTypeValidBodyPasses(self) -> None:
        """
        A valid body of each type gets past validation to the session's own
        answer (accepted, or a state refusal), never C{invalid_request}.
        """
        answers = COMMAND_EXAMPLES
        for kind, (extra, expected) in answers.items():
            _, frame = self.call("POST", self.cmd, {"requestId": f"r-{kind}", "type": kind, **extra},
                                 **TAB1)
            answer = frame.get("code", frame["type"])
            self.assertNotIn(answer, ("invalid_request", "invalid_json"), (kind, frame))
            if expected is not None:
                self.assertEqual(answer, expected, (kind, frame))
            self.assertEqual(frame["requestId"], f"r-{kind}")

    def test_commandAccepted(self) -> None:
        """
        An accepted command is 202 with the command's record, and
        C{command.accepted} is logged; C{commandId} defaults to the
        request's id.
        """
        code, frame = self.prompt(self.sid, "p-1", "hello there", **TAB1)
        self.assertEqual(code, 202)
        command = frame["value"]["command"]
        self.assertEqual((command["commandId"], command["status"], command["text"]),
                         ("p-1", "accepted", "hello there"))
        self.assertEqual(command["by"], {"principal": "alice", "clientId": "tab-1"})
        last = self.events(self.sid)[-1]
        self.assertEqual((last["type"], last["data"]["commandId"], last["data"]["textBytes"]),
                         ("command.accepted", "p-1", 11))
        _, frame = self.call("POST", self.cmd, {"requestId": "p-2", "commandId": "c-2",
                                                "type": "steer", "text": "x"}, **TAB1)
        self.assertEqual(frame["value"]["command"]["commandId"], "c-2")
        self.refused("command_exists", "POST", self.cmd,
                     {"requestId": "p-3", "commandId": "c-2", "type": "steer", "text": "x"}, **TAB1)

    def test_textAtTheLimit(self) -> None:
        """
        A C{text} of exactly 64 KiB is accepted.
        """
        code, frame = self.prompt(self.sid, "big", "a" * MAX_TEXT_BYTES, **TAB1)
        self.assertEqual((code, frame["type"]), (202, "command.accepted"))

    def test_textOverTheLimitInBytes(self) -> None:
        """
        A C{text} over 64 KiB of UTF-8 (fewer characters than that) is
        C{body_too_large} 413, and nothing is accepted.
        """
        frame = self.refused("body_too_large", "POST", self.cmd,
                             {"requestId": "big", "type": "prompt", "text": "é" * 40000}, **TAB1)
        self.assertEqual(frame["details"]["field"], "text")
        self.assertEqual(self.types(self.sid), ["session.created", "lease.claimed"])

    def test_textOverTheLimitInCharacters(self) -> None:
        """
        A C{text} of 64 KiB + 1 ASCII characters is C{body_too_large} 413,
        like any text over the limit.
        """
        frame = self.refused("body_too_large", "POST", self.cmd,
                             {"requestId": "big", "type": "prompt", "text": "a" * (MAX_TEXT_BYTES + 1)},
                             **TAB1)
        self.assertEqual(frame["details"]["field"], "text")


    def test_deeplyNestedJSON(self) -> None:
        """
        JSON nested deeper than the body's bound (16) is C{invalid_request},
        closed or not, before any parser or schema recurses: never a 500.
        """
        frame = self.refused("invalid_request", "POST", "/sessions", raw=b"[" * 100_000)
        self.assertEqual(frame["details"], {"limit": 16})
        self.refused("invalid_request", "POST", self.cmd,
                     raw=b'{"requestId":"r","type":"abort","x":' + b"[" * 100_000 + b"]" * 100_000 + b"}",
                     **TAB1)


    def test_nonFiniteNumbers(self) -> None:
        """
        C{NaN} and C{Infinity} are not JSON: C{invalid_json}, and nothing is
        left on disk.
        """
        for literal in (b"NaN", b"Infinity", b"-Infinity"):
            self.refused("invalid_json", "POST", "/sessions",
                         raw=b'{"requestId":"r","budget":{"maxCostUsd":' + literal + b"}}")
        self.assertEqual(len(list((self.h.root / "sessions").iterdir())), 1)


    def test_loneSurrogate(self) -> None:
        """
        A C{text} holding a lone surrogate (valid JSON escape, not Unicode)
        is refused with a 400, not a 500.
        """
        code, frame = self.call("POST", self.cmd, raw=b'{"requestId":"r","type":"prompt","text":"\\ud800"}',
                                **TAB1)
        self.assertEqual(code, 400)
        self.assertIn(frame["code"], ("invalid_json", "invalid_request"))


    def test_refusalsChangeNothing(self) -> None:
        """
        A refused request writes no event and no command.
        """
        before = self.events(self.sid)
        self.refused("invalid_request", "POST", self.cmd, {"requestId": "r", "type": "nope"}, **TAB1)
        self.refused("invalid_json", "POST", self.cmd, raw=b"{", **TAB1)
        self.refused("lease_held", "POST", self.cmd,
                     {"requestId": "r", "type": "prompt", "text": "x"}, **TAB2)
        self.assertEqual(self.events(self.sid), before)
        self.assertEqual(self.ok("GET", f"/sessions/{self.sid}")["value"]["commands"], [])

    def test_unknownRouteAndMethod(self) -> None:
        """
        An unknown route is C{not_found}, a known route with another method
        C{method_not_allowed}, both as error frames.
        """
        self.refused("not_found", "GET", "/sessions/x/y/z")
        self.refused("method_not_allowed", "PUT", "/sessions")


class LeaseTests(RouteTestCase):
    """
    The lease: one driver at a time, the same person's takeover, expiry and
    renewal on the clock, release.
    """

    harnessSettings = {"leaseTtlMs": 60_000}

    def test_creatorHoldsIt(self) -> None:
        """
        The creating client holds the lease; C{lease.claimed} follows
        C{session.created}.
        """
        frame = self.ok("POST", "/sessions", {"requestId": "c"}, **TAB1)
        self.assertTrue(frame["value"]["holdsLease"])
        lease = frame["value"]["session"]["lease"]
        self.assertEqual((lease["principal"], lease["clientId"], lease["ttlMs"]),
                         ("alice", "tab-1", 60_000))
        sid = frame["value"]["session"]["sessionId"]
        self.assertEqual(self.types(sid), ["session.created", "lease.claimed"])
        self.assertEqual(self.prompt(sid, "p", **TAB1)[0], 202)

    def test_claimFalse(self) -> None:
        """
        With C{claim: false} nobody holds it: a mutation is
        C{lease_required} until a client claims.
        """
        frame = self.ok("POST", "/sessions", {"requestId": "c", "claim": False}, **TAB1)
        self.assertFalse(frame["value"]["holdsLease"])
        self.assertIsNone(frame["value"]["session"]["lease"])
        sid = frame["value"]["session"]["sessionId"]
        self.assertEqual(self.types(sid), ["session.created"])
        self.refused("lease_required", "POST", f"/sessions/{sid}/commands",
                     {"requestId": "p", "type": "prompt", "text": "x"}, **TAB1)
        frame = self.ok("POST", f"/sessions/{sid}/claim", {"requestId": "k"}, **TAB2)
        self.assertEqual(frame["type"], "driver.claimed")
        self.assertIsNone(frame["value"]["tookOverFrom"])
        self.assertEqual(self.prompt(sid, "p", **TAB2)[0], 202)

    def test_everyLeasedCommandNeedsTheExactLease(self) -> None:
        """
        Every leased command from another client of the same principal is
        C{lease_held} with the holder and C{canTakeOver: true}.
        """
        sid = self.create(**TAB1)
        bodies = [
            {"type": "prompt", "text": "x"}, {"type": "follow_up", "text": "x"},
            {"type": "steer", "text": "x"}, {"type": "abort"}, {"type": "shutdown"},
            {"type": "cancel", "targetCommandId": "t"},
            {"type": "set_room_policy", "policy": "mute"},
            {"type": "accept_chime", "chimeId": "c"}, {"type": "reject_chime", "chimeId": "c"},
        ]
        for n, body in enumerate(bodies):
            frame = self.refused("lease_held", "POST", f"/sessions/{sid}/commands",
                                 {"requestId": f"r{n}", **body}, **TAB2)
            holder = frame["details"]["holder"]
            self.assertEqual((holder["principal"], holder["clientId"]), ("alice", "tab-1"))
            self.assertTrue(frame["details"]["canTakeOver"])
            self.assertEqual(frame["requestId"], f"r{n}")

    def test_claimHeld(self) -> None:
        """
        Another client's plain claim (or C{takeover: false}) is
        C{lease_held}, C{canTakeOver: true}.
        """
        sid = self.create(**TAB1)
        for body in ({"requestId": "k"}, {"requestId": "k", "takeover": False}):
            frame = self.refused("lease_held", "POST", f"/sessions/{sid}/claim", body, **TAB2)
            self.assertTrue(frame["details"]["canTakeOver"])
            self.assertEqual(frame["details"]["holder"]["clientId"], "tab-1")
        self.assertEqual(self.summary(sid)["lease"]["clientId"], "tab-1")

    def test_takeover(self) -> None:
        """
        C{takeover: true} from the same principal revokes the holder
        (C{lease.revoked} then C{lease.claimed}); the frame names whom it
        took over from; the old holder's next mutation is C{lease_held}, and
        it may take the lease back the same way.
        """
        sid = self.create(**TAB1)
        cursor = self.summary(sid)["cursor"]
        frame = self.ok("POST", f"/sessions/{sid}/claim", {"requestId": "k", "takeover": True}, **TAB2)
        self.assertEqual(frame["value"]["tookOverFrom"], {"principal": "alice", "clientId": "tab-1"})
        self.assertEqual(frame["value"]["lease"]["clientId"], "tab-2")
        revoked, claimed = self.events(sid, cursor)
        self.assertEqual(revoked["type"], "lease.revoked")
        self.assertEqual(revoked["data"], {"principal": "alice", "clientId": "tab-1",
                                           "by": {"principal": "alice", "clientId": "tab-2"},
                                           "reason": "takeover"})
        self.assertEqual(claimed["type"], "lease.claimed")
        self.assertEqual(claimed["data"]["clientId"], "tab-2")
        frame = self.refused("lease_held", "POST", f"/sessions/{sid}/commands",
                             {"requestId": "p", "type": "prompt", "text": "x"}, **TAB1)
        self.assertEqual(frame["details"]["holder"]["clientId"], "tab-2")
        self.assertEqual(self.prompt(sid, "p2", **TAB2)[0], 202)
        frame = self.ok("POST", f"/sessions/{sid}/claim", {"requestId": "k1", "takeover": True}, **TAB1)
        self.assertEqual(frame["value"]["tookOverFrom"]["clientId"], "tab-2")

    def test_anotherPrincipalNeverTakesOver(self) -> None:
        """
        Another principal cannot even see the session; and should it reach
        the lease, C{takeover} is refused with C{canTakeOver: false}.
        """
        sid = self.create(**TAB1)
        self.refused("not_found", "POST", f"/sessions/{sid}/claim",
                     {"requestId": "k", "takeover": True}, principal="bob")
        session = self.session(sid)
        bob = Caller(principal="bob", clientId="tab-1", role="owner", graphId="g1")
        takeover = fromRequest({"requestId": "k2", "takeover": True}, ClaimRequest)
        error = self.assertRaises(VehicleError, session.claim, bob, takeover, 1000)
        self.assertEqual(error.code, "lease_held")
        self.assertFalse(error.details["canTakeOver"])
        self.assertEqual(self.summary(sid)["lease"]["clientId"], "tab-1")
        self.assertEqual(self.types(sid), ["session.created", "lease.claimed"])

    def test_reclaimRenews(self) -> None:
        """
        The holder's own claim renews it (C{lease.renewed}, new ttl).
        """
        sid = self.create(**TAB1)
        frame = self.ok("POST", f"/sessions/{sid}/claim", {"requestId": "k", "ttlMs": 5000}, **TAB1)
        self.assertIsNone(frame["value"]["tookOverFrom"])
        self.assertEqual(frame["value"]["lease"]["ttlMs"], 5000)
        last = self.events(sid)[-1]
        self.assertEqual((last["type"], last["data"]["ttlMs"]), ("lease.renewed", 5000))

    def test_expiry(self) -> None:
        """
        The lease lapses after C{ttlMs} unused, on the clock:
        C{lease.expired}, and then nobody holds it.
        """
        sid = self.create(**TAB1)
        self.ok("POST", f"/sessions/{sid}/claim", {"requestId": "k", "ttlMs": 10_000}, **TAB1)
        self.h.clock.advance(9.999)
        self.assertNotIn("lease.expired", self.types(sid))
        self.h.clock.advance(0.001)
        last = self.events(sid)[-1]
        self.assertEqual(last["type"], "lease.expired")
        self.assertEqual(last["data"], {"principal": "alice", "clientId": "tab-1", "reason": "ttl"})
        self.assertIsNone(self.summary(sid)["lease"])
        self.refused("lease_required", "POST", f"/sessions/{sid}/commands",
                     {"requestId": "p", "type": "prompt", "text": "x"}, **TAB1)
        # Anyone of the same principal may claim it now, without takeover.
        self.ok("POST", f"/sessions/{sid}/claim", {"requestId": "k2"}, **TAB2)

    def test_defaultTtl(self) -> None:
        """
        The default ttl is the host's setting; it expires on time.
        """
        sid = self.create(**TAB1)
        self.h.clock.advance(59.9)
        self.assertIsNotNone(self.summary(sid)["lease"])
        self.h.clock.advance(0.1)
        self.assertEqual(self.types(sid)[-1], "lease.expired")

    def test_renewedByUse(self) -> None:
        """
        Each accepted mutation renews the lease: it expires C{ttlMs} after
        the last use, not after the claim.
        """
        sid = self.create(**TAB1)
        self.h.clock.advance(40)
        self.assertEqual(self.prompt(sid, "p1", **TAB1)[0], 202)
        self.h.clock.advance(40)
        self.assertNotIn("lease.expired", self.types(sid))
        self.ok("POST", f"/sessions/{sid}/commands",
                {"requestId": "p2", "type": "set_room_policy", "policy": "mute"}, **TAB1)
        self.h.clock.advance(59)
        self.assertNotIn("lease.expired", self.types(sid))
        self.h.clock.advance(1)
        self.assertEqual(self.types(sid)[-1], "lease.expired")

    def test_release(self) -> None:
        """
        Release by another client is C{lease_not_held}; by the holder it
        frees the lease (C{lease.released}); again, C{lease_not_held}.
        """
        sid = self.create(**TAB1)
        frame = self.refused("lease_not_held", "POST", f"/sessions/{sid}/release",
                             {"requestId": "r"}, **TAB2)
        self.assertEqual(frame["details"]["holder"]["clientId"], "tab-1")
        frame = self.ok("POST", f"/sessions/{sid}/release", {"requestId": "r"}, **TAB1)
        self.assertEqual(frame["type"], "driver.released")
        self.assertIsNone(frame["value"]["session"]["lease"])
        last = self.events(sid)[-1]
        self.assertEqual(last["type"], "lease.released")
        self.assertEqual(last["data"]["clientId"], "tab-1")
        self.refused("lease_not_held", "POST", f"/sessions/{sid}/release", {"requestId": "r2"}, **TAB1)

    def test_survivesRestart(self) -> None:
        """
        The lease is rebuilt from the event log at restart: the taker holds
        it, the old holder is refused.
        """
        sid = self.create(**TAB1)
        self.ok("POST", f"/sessions/{sid}/claim", {"requestId": "k", "takeover": True}, **TAB2)
        self.h.restart()
        self.assertEqual(self.summary(sid)["lease"]["clientId"], "tab-2")
        self.refused("lease_held", "POST", f"/sessions/{sid}/commands",
                     {"requestId": "p", "type": "prompt", "text": "x"}, **TAB1)
        self.assertEqual(self.prompt(sid, "p2", **TAB2)[0], 202)

    def test_releasedStaysReleasedAfterRestart(self) -> None:
        """
        A released lease is not revived by a restart.
        """
        sid = self.create(**TAB1)
        self.ok("POST", f"/sessions/{sid}/release", {"requestId": "r"}, **TAB1)
        self.h.restart()
        self.assertIsNone(self.summary(sid)["lease"])

    def test_expiresAfterRestart(self) -> None:
        """
        A rebuilt lease still expires on time (and one that lapsed while the
        host was down is retired at once).
        """
        sid = self.create(**TAB1)
        self.h.clock.advance(30)
        self.h.restart()
        self.h.clock.advance(29.9)
        self.assertIsNotNone(self.summary(sid)["lease"])
        self.h.clock.advance(0.1)
        self.assertEqual(self.types(sid)[-1], "lease.expired")
        other = self.create("c2", **TAB1)
        self.h.stop()
        self.h.clock.advance(120)
        self.h.restart()
        self.h.clock.advance(0)
        self.assertIsNone(self.summary(other)["lease"])
        self.assertEqual(self.types(other)[-1], "lease.expired")

    def test_renewalByCommandSurvivesRestart(self) -> None:
        """
        A renewal by an accepted command counts after a restart too.
        """
        sid = self.create(**TAB1)
        self.h.clock.advance(50)
        self.prompt(sid, "p", **TAB1)
        self.h.restart()
        self.h.clock.advance(30)
        self.assertIsNotNone(self.summary(sid)["lease"])

    def test_renewalByRoomPolicySurvivesRestart(self) -> None:
        """
        A renewal by C{set_room_policy} (a leased mutation) counts after a
        restart too.
        """
        sid = self.create(**TAB1)
        self.h.clock.advance(50)
        self.ok("POST", f"/sessions/{sid}/commands",
                {"requestId": "p", "type": "set_room_policy", "policy": "mute"}, **TAB1)
        self.h.restart()
        self.h.clock.advance(30)
        self.assertIsNotNone(self.summary(sid)["lease"])



class IdempotencyTests(RouteTestCase):
    """
    C{requestId}: a repeat replays, a different body conflicts, refusals are
    forgotten, and the record survives restarts.
    """

    def test_createReplays(self) -> None:
        """
        C{POST /sessions} again with the same id and body returns the first
        frame with C{replayed: true} and makes nothing.
        """
        _, first = self.call("POST", "/sessions", {"requestId": "c", "title": "T"}, **TAB1)
        code, again = self.call("POST", "/sessions", {"requestId": "c", "title": "T"}, **TAB1)
        self.assertTrue(again.pop("replayed"))
        self.assertEqual(again, first)
        self.assertEqual(code, 200)
        self.assertEqual(len(self.ok("GET", "/sessions")["value"]["sessions"]), 1)
        frame = self.refused("request_id_conflict", "POST", "/sessions",
                             {"requestId": "c", "title": "Other"}, **TAB1)
        self.assertEqual(frame["requestId"], "c")

    def test_createIsPerPrincipal(self) -> None:
        """
        Another principal's same C{requestId} is a new session of its own.
        """
        one = self.create("c")
        two = self.create("c", principal="bob")
        self.assertNotEqual(one, two)

    def test_createValidationNotRemembered(self) -> None:
        """
        A refused creation leaves its id free for a corrected body.
        """
        self.refused("graph_mismatch", "POST", "/sessions", {"requestId": "c", "graphId": "g9"})
        self.refused("invalid_request", "POST", "/sessions", {"requestId": "c", "x": 1})
        self.refused("model_unavailable", "POST", "/sessions", {"requestId": "c", "model": "no/such"})
        self.create("c")

    def test_commandReplays(self) -> None:
        """
        A command again returns its first frame with C{replayed: true} and
        accepts nothing new; another body under its id conflicts.
        """
        sid = self.create(**TAB1)
        code, first = self.prompt(sid, "p", "hello", **TAB1)
        cursor = self.summary(sid)["cursor"]
        code2, again = self.prompt(sid, "p", "hello", **TAB1)
        self.assertTrue(again.pop("replayed"))
        self.assertEqual(again, first)
        self.assertEqual(code2, 200)
        self.assertEqual(self.summary(sid)["cursor"], cursor)
        self.refused("request_id_conflict", "POST", f"/sessions/{sid}/commands",
                     {"requestId": "p", "type": "prompt", "text": "bye"}, **TAB1)
        self.assertEqual(len(self.ok("GET", f"/sessions/{sid}")["value"]["commands"]), 1)

    def test_claimReleaseRenameReplay(self) -> None:
        """
        Claim, release and rename (with an id) replay too, writing nothing.
        """
        sid = self.create(claim=False, **TAB1)
        for method, path, body in [
            ("POST", f"/sessions/{sid}/claim", {"requestId": "k"}),
            ("POST", f"/sessions/{sid}/release", {"requestId": "r"}),
            ("PATCH", f"/sessions/{sid}", {"requestId": "n", "title": "A"}),
        ]:
            first = self.ok(method, path, body, **TAB1)
            cursor = self.summary(sid)["cursor"]
            again = self.ok(method, path, body, **TAB1)
            self.assertTrue(again.pop("replayed"))
            self.assertEqual(again, first)
            self.assertEqual(self.summary(sid)["cursor"], cursor, path)

    def test_refusedNotRemembered(self) -> None:
        """
        A request refused for the lease is not remembered: the same request
        after claiming is accepted, not replayed.
        """
        sid = self.create(**TAB1)
        self.refused("lease_held", "POST", f"/sessions/{sid}/commands",
                     {"requestId": "p", "type": "prompt", "text": "x"}, **TAB2)
        self.refused("lease_held", "POST", f"/sessions/{sid}/claim", {"requestId": "k"}, **TAB2)
        self.ok("POST", f"/sessions/{sid}/claim", {"requestId": "k", "takeover": True}, **TAB2)
        code, frame = self.prompt(sid, "p", "x", **TAB2)
        self.assertEqual(code, 202)
        self.assertNotIn("replayed", frame)

    def test_survivesRestart(self) -> None:
        """
        After a restart, accepted requests replay (create and command) and
        conflicts are still caught.
        """
        _, created = self.call("POST", "/sessions", {"requestId": "c"}, **TAB1)
        sid = created["value"]["session"]["sessionId"]
        _, first = self.prompt(sid, "p", "hello", **TAB1)
        self.h.restart()
        _, again = self.call("POST", "/sessions", {"requestId": "c"}, **TAB1)
        self.assertTrue(again.pop("replayed"))
        self.assertEqual(again, created)
        _, again = self.prompt(sid, "p", "hello", **TAB1)
        self.assertTrue(again.pop("replayed"))
        self.assertEqual(again, first)
        self.refused("request_id_conflict", "POST", f"/sessions/{sid}/commands",
                     {"requestId": "p", "type": "steer", "text": "hello"}, **TAB1)
        self.assertEqual(len(self.ok("GET", "/sessions")["value"]["sessions"]), 1)

    def test_openCommandsInterruptedAtRestart(self) -> None:
        """
        A command still open when the host stopped is reported
        C{interrupted} after the restart; its record still replays.
        """
        sid = self.create(**TAB1)
        _, first = self.prompt(sid, "p", "hello", **TAB1)
        self.h.restart()
        commands = self.ok("GET", f"/sessions/{sid}")["value"]["commands"]
        self.assertEqual([(c["commandId"], c["status"]) for c in commands], [("p", "interrupted")])
        last = self.events(sid)[-1]
        self.assertEqual((last["type"], last["data"]["commandId"]), ("command.interrupted", "p"))
        _, again = self.prompt(sid, "p", "hello", **TAB1)
        self.assertTrue(again.pop("replayed"))
        self.assertEqual(again, first)

    def test_keptInCommandsLog(self) -> None:
        """
        Accepted requests are lines of C{commands.jsonl}; refused ones are not.
        """
        sid = self.create(**TAB1)
        self.prompt(sid, "p", **TAB1)
        self.prompt(sid, "q", **TAB2)
        lines = (self.h.root / "sessions" / sid / "commands.jsonl").read_text().splitlines()
        self.assertEqual([json.loads(line)["requestId"] for line in lines], ["create-1", "p"])


class RenameTests(RouteTestCase):
    """
    C{PATCH /sessions/:id}: the title, normalized, announced and kept.
    """

    def rename(self, sid: str, title: Any, **who: Any) -> dict[str, Any]:
        frame = self.ok("PATCH", f"/sessions/{sid}", {"title": title}, **who)
        self.assertEqual(frame["type"], "session.renamed")
        return frame["value"]["session"]

    def test_normalized(self) -> None:
        """
        Whitespace runs become one space, trimmed, at most 200 characters;
        C{null}, C{""} and blanks clear the name.
        """
        sid = self.create()
        cases = [
            ("  Hello \t\n  world  ", "Hello world"),
            ("x" * 300, "x" * 200),
            ("y" * 199 + " z", "y" * 199),
            ("\u00e9t\u00e9   ici", "\u00e9t\u00e9 ici"),
            (None, None),
            ("", None),
            (" \t\n ", None),
        ]
        for title, expected in cases:
            self.assertEqual(self.rename(sid, title)["title"], expected, title)

    def test_announcedAndKept(self) -> None:
        """
        A rename is C{session.renamed} with the title, is rewritten in
        C{meta.json}, shows in the list and the snapshot, and survives a
        restart.
        """
        sid = self.create()
        self.rename(sid, "  My   chat ")
        last = self.events(sid)[-1]
        self.assertEqual((last["type"], last["data"]), ("session.renamed", {"title": "My chat"}))
        meta = json.loads((self.h.root / "sessions" / sid / "meta.json").read_text())
        self.assertEqual(meta["title"], "My chat")
        self.assertEqual(self.ok("GET", "/sessions")["value"]["sessions"][0]["title"], "My chat")
        self.h.restart()
        self.assertEqual(self.summary(sid)["title"], "My chat")
        self.rename(sid, None)
        self.h.restart()
        self.assertIsNone(self.summary(sid)["title"])

    def test_needsNoLease(self) -> None:
        """
        Renaming is the owner's, not the driver's: another client renames
        without the lease.
        """
        sid = self.create(**TAB1)
        self.assertEqual(self.rename(sid, "mine", **TAB2)["title"], "mine")

    def test_titleAtCreation(self) -> None:
        """
        A title given at creation is normalized the same way.
        """
        sid = self.create(title="  a   b ")
        self.assertEqual(self.summary(sid)["title"], "a b")

    def test_titleRequired(self) -> None:
        """
        A rename without C{title} is refused naming it.
        """
        sid = self.create()
        frame = self.refused("invalid_request", "PATCH", f"/sessions/{sid}", {"requestId": "r"})
        self.assertEqual(frame["details"]["field"], "title")


class DeleteTests(RouteTestCase):
    """
    C{DELETE /sessions/:id}: moved to the trash, never unlinked, and gone.
    """

    def test_movedToTrash(self) -> None:
        """
        The directory moves to C{trash/<id>/} with C{deleted.json};
        C{session.deleted} is the last event of the moved log.
        """
        sid = self.create(**TAB1)
        frame = self.ok("DELETE", f"/sessions/{sid}", **TAB1)
        self.assertEqual(frame["value"], {"sessionId": sid, "trashedAs": sid})
        self.assertFalse((self.h.root / "sessions" / sid).exists())
        trash = self.h.root / "trash" / sid
        deleted = json.loads((trash / "deleted.json").read_text())
        self.assertEqual((deleted["sessionId"], deleted["trashedAs"], deleted["graphId"]),
                         (sid, sid, "g1"))
        self.assertEqual(deleted["by"], {"principal": "alice", "clientId": "tab-1"})
        self.assertIn("deletedAt", deleted)
        lines = [json.loads(x) for x in (trash / "events.jsonl").read_text().splitlines()]
        self.assertEqual([e["seq"] for e in lines], list(range(1, len(lines) + 1)))
        self.assertEqual(lines[-1]["type"], "session.deleted")
        self.assertEqual(lines[-1]["data"]["trashedAs"], sid)
        assertValidEvent(self, lines[-1])
        for name in ("meta.json", "commands.jsonl", "pi", "work"):
            self.assertTrue((trash / name).exists(), name)

    def test_suffixWhenTaken(self) -> None:
        """
        When C{trash/<id>} is taken, the session goes beside it with a
        suffix, and the other is untouched.
        """
        sid = self.create()
        taken = self.h.root / "trash" / sid
        taken.mkdir()
        (taken / "keep").write_text("older")
        frame = self.ok("DELETE", f"/sessions/{sid}")
        trashedAs = frame["value"]["trashedAs"]
        self.assertNotEqual(trashedAs, sid)
        self.assertTrue(trashedAs.startswith(sid))
        self.assertEqual((taken / "keep").read_text(), "older")
        self.assertTrue((self.h.root / "trash" / trashedAs / "deleted.json").exists())

    def test_thenEveryRouteNotFound(self) -> None:
        """
        Afterwards every route answers exactly as for a missing session, a
        repeated C{DELETE} too, and the list is empty.
        """
        sid = self.create()
        self.ok("DELETE", f"/sessions/{sid}")
        for method, path, body, headers in routesFor(sid):
            _, missing = self.call(method, path.replace(sid, "snosuchsession"), body, headers=headers)
            _, gone = self.call(method, path, body, headers=headers)
            self.assertEqual(gone, missing, (method, path))
            self.assertEqual(gone["code"], "not_found")
        self.assertEqual(self.ok("GET", "/sessions")["value"]["sessions"], [])

    def test_restartDoesNotRevive(self) -> None:
        """
        A restart does not bring a deleted session back.
        """
        sid = self.create()
        keep = self.create("c2")
        self.ok("DELETE", f"/sessions/{sid}")
        self.h.restart()
        self.refused("not_found", "GET", f"/sessions/{sid}")
        listed = [s["sessionId"] for s in self.ok("GET", "/sessions")["value"]["sessions"]]
        self.assertEqual(listed, [keep])

    def test_restoreByMovingBack(self) -> None:
        """
        C{deleted.json} says how to restore; moving the directory back while
        the host is stopped brings the session back at the next start.
        """
        sid = self.create(title="kept")
        self.ok("DELETE", f"/sessions/{sid}")
        trash = self.h.root / "trash" / sid
        self.assertIn(f"sessions/{sid}/", json.loads((trash / "deleted.json").read_text())["restore"])
        self.h.stop()
        trash.rename(self.h.root / "sessions" / sid)
        self.h.restart()
        self.assertEqual(self.summary(sid)["title"], "kept")

    def test_needsNoLease(self) -> None:
        """
        Another client of the owner deletes without the lease.
        """
        sid = self.create(**TAB1)
        self.ok("DELETE", f"/sessions/{sid}", **TAB2)

    def test_refusedWhileCommandOpen(self) -> None:
        """
        With a command still open, C{DELETE} is C{session_running}, listing
        it, and nothing moves.
        """
        sid = self.create(**TAB1)
        self.prompt(sid, "p", **TAB1)
        frame = self.refused("session_running", "DELETE", f"/sessions/{sid}")
        self.assertEqual(frame["details"]["open"],
                         [{"commandId": "p", "type": "prompt", "status": "accepted"}])
        self.assertTrue((self.h.root / "sessions" / sid).is_dir())

    def test_wakesLongPoll(self) -> None:
        """
        A long-poll waiting on the session is answered by
        C{session.deleted}.
        """
        sid = self.create()
        cursor = self.summary(sid)["cursor"]
        d = self.h.request("GET", f"/sessions/{sid}/events?since={cursor}&waitMs=30000")
        self.h.stub.flush()
        self.assertNoResult(d)
        self.ok("DELETE", f"/sessions/{sid}")
        self.h.stub.flush()
        response = self.successResultOf(d)
        frame = json.loads(self.successResultOf(response.content()))
        assertValidFrame(self, frame)
        self.assertEqual([e["type"] for e in frame["value"]["events"]], ["session.deleted"])


class ListingTests(RouteTestCase):
    """
    C{GET /sessions}: the caller's sessions, most recently active first, with
    their preview.
    """

    def test_orderAndPreview(self) -> None:
        """
        The most recently active session comes first; C{preview} is the first
        thing said, flattened; C{updatedAt} is the last event's time.
        """
        a = self.create("a", **TAB1)
        self.h.clock.advance(1)
        b = self.create("b", **TAB1)
        self.h.clock.advance(1)
        listed = [s["sessionId"] for s in self.ok("GET", "/sessions")["value"]["sessions"]]
        self.assertEqual(listed, [b, a])
        self.prompt(a, "p1", "  first\n\nthing  said ", **TAB1)
        self.h.clock.advance(1)
        self.prompt(a, "p2", "second", **TAB1)
        sessions = self.ok("GET", "/sessions")["value"]["sessions"]
        self.assertEqual([s["sessionId"] for s in sessions], [a, b])
        self.assertEqual(sessions[0]["preview"], "first thing said")
        self.assertIsNone(sessions[1]["preview"])
        self.assertEqual(sessions[0]["updatedAt"], self.events(a)[-1]["timestamp"])
        self.h.restart()
        sessions = self.ok("GET", "/sessions")["value"]["sessions"]
        self.assertEqual([s["sessionId"] for s in sessions], [a, b])
        self.assertEqual(sessions[0]["preview"], "first thing said")

    def test_theFrameByteForByte(self) -> None:
        """
        The list's bytes are the frame the summaries make (each summary
        encoded again only when it changed): after a change, and from
        dormant sessions after a restart.
        """
        from vehicle.errors import encode
        from vehicle.protocol import SessionList, toJSON
        from vehicle.session import Caller
        from vehicle.web import frame

        alice = Caller(principal="alice", clientId="tab-1", role="owner", graphId="g1")
        a = self.create("a", title="Ünï\u2028", **TAB1)
        self.create("b", **TAB1)

        def check() -> None:
            d = self.h.request("GET", "/sessions", **TAB1)
            self.h.stub.flush()
            raw = self.successResultOf(self.successResultOf(d).content())
            summaries = tuple(s.summary() for s in self.h.api.registry.listFor(alice))
            self.assertEqual(raw, encode(frame("session.list", None,
                                               toJSON(SessionList(sessions=summaries)))))

        check()
        self.ok("PATCH", f"/sessions/{a}", {"title": "renamed"}, **TAB1)
        self.h.clock.advance(1)
        check()
        self.h.restart()
        check()

    def test_onlyTheCallers(self) -> None:
        """
        Each principal lists only its own sessions on the bound graph.
        """
        mine = self.create("a")
        theirs = self.create("a", principal="bob")
        self.create("b", graph="g2")
        self.assertEqual([s["sessionId"] for s in self.ok("GET", "/sessions")["value"]["sessions"]],
                         [mine])
        self.assertEqual(
            [s["sessionId"] for s in self.ok("GET", "/sessions", principal="bob")["value"]["sessions"]],
            [theirs])


class WatchTests(RouteTestCase):
    """
    C{GET /sessions/:id/events}: the long-poll.
    """

    def test_since(self) -> None:
        """
        Events have C{seq} from 1 without gaps and a timestamp; C{since}
        returns those after it, and the cursor is the last one's.
        """
        sid = self.create(**TAB1)
        self.prompt(sid, "p", **TAB1)
        frame = self.ok("GET", f"/sessions/{sid}/events?since=0")
        events = frame["value"]["events"]
        self.assertEqual([e["seq"] for e in events], [1, 2, 3])
        self.assertEqual((frame["value"]["cursor"], frame["value"]["more"]), (3, False))
        frame = self.ok("GET", f"/sessions/{sid}/events?since=2")
        self.assertEqual([e["seq"] for e in frame["value"]["events"]], [3])
        frame = self.ok("GET", f"/sessions/{sid}/events?since=3")
        self.assertEqual(frame["value"], {"events": [], "cursor": 3, "more": False})

    def test_limit(self) -> None:
        """
        At most 500 events come back, with C{more: true} while there may be
        more.
        """
        sid = self.create(**TAB1)
        session = self.session(sid)
        caller = Caller(principal="alice", clientId="tab-1", role="owner", graphId="g1")
        for _ in range(600):
            session.takeLease(caller, 60_000)
        frame = self.ok("GET", f"/sessions/{sid}/events?since=0")
        self.assertEqual(len(frame["value"]["events"]), 500)
        self.assertEqual((frame["value"]["cursor"], frame["value"]["more"]), (500, True))
        frame = self.ok("GET", f"/sessions/{sid}/events?since=500")
        self.assertEqual([e["seq"] for e in frame["value"]["events"]], list(range(501, 603)))
        self.assertFalse(frame["value"]["more"])

    def test_waitWakesOnEvent(self) -> None:
        """
        With C{waitMs} and nothing new, the answer waits for the next event.
        """
        sid = self.create(**TAB1)
        d = self.h.request("GET", f"/sessions/{sid}/events?since=2&waitMs=30000")
        self.h.stub.flush()
        self.assertNoResult(d)
        self.h.clock.advance(10)
        self.assertNoResult(d)
        self.prompt(sid, "p", **TAB1)
        self.h.stub.flush()
        frame = json.loads(self.successResultOf(self.successResultOf(d).content()))
        assertValidFrame(self, frame)
        self.assertEqual([e["type"] for e in frame["value"]["events"]], ["command.accepted"])
        self.assertEqual(frame["value"]["cursor"], 3)

    def test_waitTimesOut(self) -> None:
        """
        With nothing new before C{waitMs}, the answer is empty at the cursor.
        """
        sid = self.create(**TAB1)
        d = self.h.request("GET", f"/sessions/{sid}/events?since=2&waitMs=2500")
        self.h.stub.flush()
        self.h.clock.advance(2.499)
        self.h.stub.flush()  # an answer written would reach the client
        self.assertNoResult(d)
        self.h.clock.advance(0.001)
        self.h.stub.flush()
        frame = json.loads(self.successResultOf(self.successResultOf(d).content()))
        assertValidFrame(self, frame)
        self.assertEqual(frame["value"], {"events": [], "cursor": 2, "more": False})
        self.assertEqual(self.session(sid).feed.waiting(), 0)

    def test_waitsAMillisecond(self) -> None:
        """
        A C{waitMs} of 1 waits that long.
        """
        sid = self.create(**TAB1)
        d = self.h.request("GET", f"/sessions/{sid}/events?since=2&waitMs=1")
        self.h.stub.flush()
        self.assertNoResult(d)
        self.h.clock.advance(0.001)
        self.h.stub.flush()
        frame = json.loads(self.successResultOf(self.successResultOf(d).content()))
        self.assertEqual(frame["value"], {"events": [], "cursor": 2, "more": False})

    def test_noWaitWhenBehind(self) -> None:
        """
        With events after C{since}, C{waitMs} does not wait.
        """
        sid = self.create(**TAB1)
        frame = self.ok("GET", f"/sessions/{sid}/events?since=1&waitMs=30000")
        self.assertEqual([e["seq"] for e in frame["value"]["events"]], [2])

    def test_badArguments(self) -> None:
        """
        A C{since} that is not a whole number or is beyond the cursor, and a
        C{waitMs} that is not one from 0 to 30 000, are refused by name.
        """
        sid = self.create(**TAB1)
        for query, field in [
            ("since=-1", "since"), ("since=abc", "since"), ("since=1.5", "since"),
            ("since=99", "since"), ("waitMs=30001", "waitMs"), ("waitMs=-5", "waitMs"),
            ("waitMs=soon", "waitMs"),
        ]:
            frame = self.refused("invalid_request", "GET", f"/sessions/{sid}/events?{query}")
            self.assertEqual(frame["details"]["field"], field, query)
        self.ok("GET", f"/sessions/{sid}/events?since=2&waitMs=0")

    def test_nonAsciiDigits(self) -> None:
        """
        A C{since} or C{waitMs} of Unicode digits that are not 0-9 is
        refused, not a 500.
        """
        sid = self.create(**TAB1)
        for query, field in (("since=%C2%B2", "since"), ("waitMs=%C2%B2", "waitMs")):
            frame = self.refused("invalid_request", "GET", f"/sessions/{sid}/events?{query}")
            self.assertEqual(frame["details"]["field"], field)


    def test_eventShapes(self) -> None:
        """
        Every event of the lease story and the rest of the core has its
        schema's shape.
        """
        sid = self.create(**TAB1)
        self.ok("POST", f"/sessions/{sid}/claim", {"requestId": "k", "takeover": True}, **TAB2)
        self.ok("POST", f"/sessions/{sid}/claim", {"requestId": "k2", "ttlMs": 1000}, **TAB2)
        self.prompt(sid, "p0", **TAB2)  # on its way to the body
        self.prompt(sid, "p", **TAB2)   # waiting behind it: cancellable at once
        self.ok("POST", f"/sessions/{sid}/commands",
                {"requestId": "c", "type": "cancel", "targetCommandId": "p"}, **TAB2)
        self.ok("POST", f"/sessions/{sid}/commands",
                {"requestId": "rp", "type": "set_room_policy", "policy": "observe"}, **TAB2)
        self.ok("PATCH", f"/sessions/{sid}", {"title": "t"})
        self.ok("POST", f"/sessions/{sid}/release", {"requestId": "r"}, **TAB2)
        self.ok("POST", f"/sessions/{sid}/claim", {"requestId": "k3", "ttlMs": 1000}, **TAB1)
        self.h.clock.advance(1)
        events = self.events(sid)
        kinds = {e["type"] for e in events}
        self.assertTrue({"session.created", "lease.claimed", "lease.revoked", "lease.renewed",
                         "command.accepted", "command.cancelled", "command.completed",
                         "room.policy", "session.renamed", "lease.released",
                         "lease.expired"} <= kinds, kinds)
        for event in events:
            assertValidEvent(self, event)


class ValidationPropertyTests(SynchronousTestCase):
    """
    Request validation over random JSON: only frames come back.
    """

    json = st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False)
        | st.text(max_size=20),
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=5),
        max_leaves=12,
    )
    keys = st.sampled_from(["requestId", "type", "text", "title", "ttlMs", "takeover", "claim",
                            "budget", "profile", "model", "graphId", "policy", "commandId",
                            "targetCommandId", "entryId", "chimeId", "contextRefs", "other"])
    bodies = json | st.dictionaries(keys, json, max_size=6) | st.fixed_dictionaries(
        {"requestId": st.text(min_size=1, max_size=8), "type": st.sampled_from(
            ["prompt", "abort", "cancel", "fork", "set_room_policy", "accept_chime", "bogus"])},
        optional={"text": json, "targetCommandId": json, "policy": json, "extra": json},
    )

    @given(payload=bodies, schema=st.sampled_from(
        ["create.request", "claim.request", "release.request", "rename.request", "command.request"]))
    @settings(max_examples=300, deadline=None)
    def test_validateOnlyRefusesByTheTable(self, payload: Any, schema: str) -> None:
        """
        L{validate} either returns the payload or raises a 4xx
        C{invalid_request}/C{body_too_large}; nothing else escapes.
        """
        try:
            self.assertIs(validate(schema, payload), payload)
        except VehicleError as e:
            self.assertIn(e.code, ("invalid_request", "body_too_large"))

    def test_randomBodiesThroughTheRoutes(self) -> None:
        """
        Random JSON bodies on every route that takes one are answered with a
        valid frame: a 2xx or an error with a 4xx, never a 500.
        """
        h = Harness(self)
        self.addCleanup(h.stop)
        sid = h.create()["sessionId"]
        routes = [("POST", "/sessions"), ("POST", f"/sessions/{sid}/claim"),
                  ("POST", f"/sessions/{sid}/release"), ("PATCH", f"/sessions/{sid}"),
                  ("POST", f"/sessions/{sid}/commands")]

        @given(body=self.bodies, route=st.sampled_from(routes), garble=st.booleans())
        @settings(max_examples=250, deadline=None,
                  suppress_health_check=[HealthCheck.function_scoped_fixture])
        def check(body: Any, route: tuple[str, str], garble: bool) -> None:
            raw = json.dumps(body).encode()
            if garble:
                raw = raw[:-1]
            code, frame = h.call(route[0], route[1], raw=raw or b"{")
            assertValidFrame(self, frame)
            if frame["type"] == "error":
                self.assertTrue(400 <= code < 500, frame)
                self.assertEqual(code, STATUS[frame["code"]])
            else:
                self.assertIn(code, (200, 201, 202))

        check()
