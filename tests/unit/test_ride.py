"""
Tests for C{vehicle ride} (L{vehicle.clients}) and the C{vehicle} console script: the line
protocol against the real host in memory (L{tests.support.harness}) behind a fake
gateway, the credentials, the stdio line receiver, and one ride of the
real console script against a live host behind the gardend stand-in.
"""

from __future__ import annotations

import json
import stat
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from treq.testing import StubTreq
from twisted.internet.defer import Deferred
from twisted.internet.testing import StringTransport
from twisted.python import usage
from twisted.trial.unittest import SynchronousTestCase
from twisted.web.resource import Resource

from vehicle import PROTOCOL
from vehicle._cli import Options as CLIOptions
from vehicle.clients import (
    COMMAND_OPS,
    CredentialError,
    HostLink,
    NewSession,
    Ride,
    RideOptions,
    StdioLines,
    isLoopback,
    loadVisitorId,
    resolveCredentials,
)
from vehicle.errors import STATUS

from tests.support._headers import bytesNames
from tests.support.harness import COMMAND_EXAMPLES, Harness, identity
from tests.support.pifiles import HEADER, assistant, user, writePiFile
from tests.support.ride import MODEL_KEY
from tests.support.schemas import assertValidFrame


GARDEND = "http://gardend.test"
TOKEN = "tok-0123456789"


class _GardendRefusal(Resource):
    """
    gardend's own 401, in gardend's shape (not a frame).
    """

    isLeaf = True

    def render(self, request: Any) -> bytes:
        request.setResponseCode(401)
        request.setHeader(b"content-type", b"application/json")
        return json.dumps(
            {"ok": False, "error": {"code": "unauthorized", "message": "a token is required"}}
        ).encode()


class FakeGateway:
    """
    A treq-like client standing for gardend: checks the bearer, strips
    C{/services/vehicle/g/<graph>}, and calls the harness's host with the
    identity headers gardend would mint (the caller's client id passed on).
    Records every request as the ride sent it.
    """

    def __init__(self, harness: Harness, principal: str = "alice", graph: str = "g1") -> None:
        self.harness = harness
        self.principal = principal
        self.graph = graph
        self.refusal = StubTreq(_GardendRefusal())
        self.seen: list[dict[str, Any]] = []

    def request(self, method: str, url: str, headers: Any = None, data: Any = None, **kw: Any) -> Any:
        # Names as the ride sends them (bytes), read here as text.
        headers = {
            (name.decode("latin-1") if isinstance(name, bytes) else name): value
            for name, value in (headers or {}).items()
        }
        split = urlsplit(url)
        self.seen.append(
            {
                "method": method,
                "path": split.path,
                "query": {k: v[-1] for k, v in parse_qs(split.query).items()},
                "headers": headers,
                "body": json.loads(data) if data else None,
            }
        )
        prefix = f"{GARDEND}/services/vehicle/g/{self.graph}"
        assert url.startswith(prefix), url
        if headers.get("Authorization") != f"Bearer {TOKEN}":
            return self.refusal.request(method, "http://gardend.test/refused")
        minted = identity(
            principal=self.principal, graph=self.graph, client=headers.get("X-Vehicle-Client-Id")
        )
        minted["content-type"] = "application/json"
        return self.harness.stub.request(
            method, "http://host" + url[len(prefix):], headers=bytesNames(minted), data=data
        )


class RideTests(SynchronousTestCase):
    """
    L{Ride} against the real host in memory, through a fake gateway.
    """

    def setUp(self) -> None:
        self.harness = Harness(self)
        self.addCleanup(self.harness.stop)
        self.front = FakeGateway(self.harness)
        self.counter = 0

    def newId(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}-{self.counter}"

    def makeRide(self, clientId: str = "tab-1", **headers: str) -> tuple[Ride, list[dict[str, Any]]]:
        frames: list[dict[str, Any]] = []
        link = HostLink(
            http=self.front,
            gardend=GARDEND + "/",
            graph="g1",
            headers={"Authorization": f"Bearer {TOKEN}", "X-Vehicle-Client-Id": clientId, **headers},
        )
        def write(frame: dict[str, Any]) -> None:
            # The host's frames and the ride's own (ready, closed, refusals
            # in the protocol's codes) are held to the schemas; codes only a
            # client can meet (gardend's, unreachable) are not the host's.
            if frame.get("type") != "error" or frame.get("code") in STATUS:
                assertValidFrame(self, frame)
            frames.append(frame)

        return Ride(link=link, clientId=clientId, write=write, newId=self.newId), frames

    def pump(self) -> None:
        for _ in range(5):
            self.harness.stub.flush()
            self.front.refusal.flush()

    def start(self, ride: Ride, **kw: Any) -> Deferred:
        if not kw:
            kw = {"new": NewSession()}
        d = Deferred.fromCoroutine(ride.run(**kw))
        self.pump()
        return d

    def send(self, ride: Ride, *requests: Any) -> None:
        for request in requests:
            line = request if isinstance(request, bytes) else json.dumps(request).encode()
            ride.lineReceived(line)
            self.pump()

    def byId(self, frames: list[dict[str, Any]], requestId: str) -> dict[str, Any]:
        found = [f for f in frames if f.get("requestId") == requestId and f["type"] != "closed"]
        self.assertEqual(len(found), 1, (requestId, frames))
        return found[0]

    def end(self, ride: Ride, d: Deferred) -> int:
        ride.inputEnded()
        self.pump()
        return self.successResultOf(d)

    # -- ready and closed -------------------------------------------------

    def test_readyFirstWithNew(self) -> None:
        """
        With C{--new} the ride creates the session (its own requestId, the
        profile, model and title asked for), then writes C{ready} first:
        the summary, the cursor, the client id and that it holds the lease.
        """
        ride, frames = self.makeRide()
        self.start(ride, new=NewSession(profile="chat", model="scripted/echo-2", title="Cows"))
        [create] = self.front.seen
        self.assertEqual((create["method"], create["path"]), ("POST", "/services/vehicle/g/g1/sessions"))
        self.assertEqual(
            create["body"],
            {"requestId": "ride-create-1", "profile": "chat", "model": "scripted/echo-2", "title": "Cows"},
        )
        [ready] = frames
        self.assertEqual(ready["protocol"], PROTOCOL)
        self.assertEqual(ready["type"], "ready")
        value = ready["value"]
        self.assertEqual(value["clientId"], "tab-1")
        self.assertTrue(value["holdsLease"])
        self.assertEqual(value["session"]["title"], "Cows")
        self.assertEqual(value["session"]["lease"]["clientId"], "tab-1")
        self.assertEqual(value["cursor"], value["session"]["cursor"])
        self.assertEqual(ride.sessionId, value["session"]["sessionId"])

    def test_readyClaimsAFreeSession(self) -> None:
        """
        With C{--session} the ride inspects the session and, its lease being
        free, claims it: C{ready} says it holds the lease.
        """
        sid = self.harness.create(claim=False)["sessionId"]
        ride, frames = self.makeRide()
        self.start(ride, sessionId=sid)
        self.assertEqual(
            [(r["method"], r["path"]) for r in self.front.seen],
            [
                ("GET", f"/services/vehicle/g/g1/sessions/{sid}"),
                ("POST", f"/services/vehicle/g/g1/sessions/{sid}/claim"),
            ],
        )
        [ready] = frames
        self.assertTrue(ready["value"]["holdsLease"])
        self.assertEqual(ready["value"]["session"]["lease"]["clientId"], "tab-1")

    def test_readyLeavesAHeldLease(self) -> None:
        """
        A session whose lease another client holds is not claimed: C{ready}
        says the ride does not hold it, and the end of the input releases
        nothing.
        """
        sid = self.harness.create(client="tab-0")["sessionId"]
        ride, frames = self.makeRide()
        d = self.start(ride, sessionId=sid)
        self.assertFalse(frames[0]["value"]["holdsLease"])
        self.assertEqual(frames[0]["value"]["session"]["lease"]["clientId"], "tab-0")
        self.assertEqual(self.end(ride, d), 0)
        self.assertEqual([r["method"] for r in self.front.seen], ["GET"])
        self.assertEqual(frames[-1]["value"]["released"], False)

    def test_openRefused(self) -> None:
        """
        A session that cannot be opened (not the caller's, or absent) is the
        host's refusal, then C{closed}; the ride ends with 1.
        """
        ride, frames = self.makeRide()
        d = self.start(ride, sessionId="nope")
        self.assertEqual(self.successResultOf(d), 1)
        self.assertEqual([f["type"] for f in frames], ["error", "closed"])
        self.assertEqual(frames[0]["code"], "not_found")
        self.assertEqual(frames[1]["value"]["reason"], "refused")

    def test_gardendRefusal(self) -> None:
        """
        gardend's own refusal (not a frame) becomes an error frame with its
        code, saying it came from gardend.
        """
        ride, frames = self.makeRide()
        ride.link = HostLink(http=self.front, gardend=GARDEND, graph="g1", headers={})
        d = self.start(ride)
        self.assertEqual(self.successResultOf(d), 1)
        self.assertEqual(frames[0]["code"], "unauthorized")
        self.assertEqual(frames[0]["details"], {"status": 401, "from": "gardend"})
        self.assertEqual(frames[0]["protocol"], PROTOCOL)

    def test_endOfInputReleases(self) -> None:
        """
        At the end of the input the ride releases the lease it holds, then
        writes C{closed} last (C{released: true}).
        """
        ride, frames = self.makeRide()
        d = self.start(ride)
        sid = ride.sessionId
        self.assertEqual(self.end(ride, d), 0)
        release = self.front.seen[-1]
        self.assertEqual((release["method"], release["path"]),
                         ("POST", f"/services/vehicle/g/g1/sessions/{sid}/release"))
        self.assertEqual([f["type"] for f in frames], ["ready", "closed"])
        self.assertEqual(frames[-1]["value"], {"sessionId": sid, "reason": "end_of_input",
                                               "cursor": frames[0]["value"]["cursor"],
                                               "released": True})
        self.assertIsNone(self.harness.call("GET", f"/sessions/{sid}")[1]["value"]["session"]["lease"])
        # Nothing is read after closed.
        self.send(ride, {"op": "inspect", "requestId": "late"})
        self.assertEqual(len(frames), 2)

    def test_linesWaitForReady(self) -> None:
        """
        Lines that arrive before the session is open are answered after
        C{ready}, in order.
        """
        ride, frames = self.makeRide()
        ride.lineReceived(json.dumps({"op": "inspect", "requestId": "i1"}).encode())
        ride.lineReceived(json.dumps({"op": "capsule", "requestId": "c1"}).encode())
        self.start(ride)
        self.assertEqual([f["type"] for f in frames], ["ready", "session.snapshot", "session.capsule"])

    # -- requests -----------------------------------------------------------

    def test_everyCommandOp(self) -> None:
        """
        Each command op is C{POST /sessions/:id/commands} with the line's
        fields and C{type} = op (not C{op}); the host's answer comes back
        with the line's requestId.  C{shutdown} is followed by C{closed}.
        """
        answers = COMMAND_EXAMPLES
        self.assertEqual(set(answers), COMMAND_OPS)
        ride, frames = self.makeRide()
        d = self.start(ride)
        sid = ride.sessionId
        for op, (extra, expected) in answers.items():
            self.send(ride, {"op": op, "requestId": f"r-{op}", **extra})
            sent = self.front.seen[-1]
            self.assertEqual((sent["method"], sent["path"]),
                             ("POST", f"/services/vehicle/g/g1/sessions/{sid}/commands"))
            self.assertEqual(sent["body"], {"type": op, "requestId": f"r-{op}", **extra})
            frame = self.byId(frames, f"r-{op}")
            answer = frame.get("code", frame["type"])
            self.assertNotIn(answer, ("invalid_request", "invalid_json"), (op, frame))
            if expected is not None:
                self.assertEqual(answer, expected, (op, frame))
        self.assertEqual(frames[-1]["type"], "closed")
        self.assertEqual(frames[-1]["requestId"], "r-shutdown")
        self.assertEqual(frames[-1]["value"]["reason"], "shutdown")
        self.assertEqual(self.successResultOf(d), 0)
        self.assertFalse(ride.holdsLease)

    def test_forksAndClonesReleasedAtTheEnd(self) -> None:
        """
        A session the ride cloned (its lease given to the ride's client) is
        released when the ride ends, as its own session is: no lease of
        the ride's is left behind.
        """
        ride, frames = self.makeRide()
        d = self.start(ride)
        writePiFile(self.harness.api.registry.sessions[ride.sessionId].directory, [
            HEADER,
            user("aaaa0001", None, 1, "first question"),
            assistant("aaaa0002", "aaaa0001", 2, [{"type": "text", "text": "first answer"}]),
        ])
        self.send(ride, {"op": "clone", "requestId": "k1"})
        cloned = self.byId(frames, "k1")
        self.assertEqual(cloned["type"], "session.cloned", cloned)
        child = cloned["value"]["session"]["sessionId"]
        self.assertEqual(cloned["value"]["session"]["lease"]["clientId"], "tab-1")
        self.assertEqual(list(ride.children), [child])
        self.assertEqual(self.end(ride, d), 0)
        released = [r["path"] for r in self.front.seen if r["path"].endswith("/release")]
        self.assertEqual(released, [f"/services/vehicle/g/g1/sessions/{ride.sessionId}/release",
                                    f"/services/vehicle/g/g1/sessions/{child}/release"])
        for sid in (ride.sessionId, child):
            summary = self.harness.call("GET", f"/sessions/{sid}")[1]["value"]["session"]
            self.assertIsNone(summary["lease"], sid)
        self.assertEqual([f["type"] for f in frames], ["ready", "session.cloned", "closed"])

    def test_watchOnlyNeverClaims(self) -> None:
        """
        A ride that only watches does not claim a free lease at the start,
        refuses every op but inspect, capsule, watch and list itself
        (nothing is sent), and releases nothing at the end: the session's
        log has no lease event of it.
        """
        sid = self.harness.create(claim=False)["sessionId"]
        ride, frames = self.makeRide()
        ride.watchOnly = True
        d = self.start(ride, sessionId=sid)
        self.assertFalse(frames[0]["value"]["holdsLease"])
        self.assertIsNone(frames[0]["value"]["session"]["lease"])
        for op in ("claim", "prompt", "release", "fork", "clone", "rename", "delete", "chime"):
            self.send(ride, {"op": op, "requestId": f"r-{op}", "text": "x"})
            frame = self.byId(frames, f"r-{op}")
            self.assertEqual((frame["code"], frame["details"]), ("invalid_request", {"field": "op"}))
            self.assertIn("--watch-only", frame["message"])
        for op in ("inspect", "capsule", "list", "watch"):
            self.send(ride, {"op": op, "requestId": f"r-{op}"})
            self.assertNotEqual(self.byId(frames, f"r-{op}")["type"], "error")
        self.assertEqual(self.end(ride, d), 0)
        self.assertEqual({r["method"] for r in self.front.seen}, {"GET"})
        code, frame = self.harness.call("GET", f"/sessions/{sid}/events?since=0")
        types = [e["type"] for e in frame["value"]["events"]]
        self.assertFalse([t for t in types if t.startswith("lease.")], types)
        self.assertEqual(frames[-1]["value"]["released"], False)

    def test_readsCarryTheRequestId(self) -> None:
        """
        inspect, capsule, watch and list are GETs whose frames the host
        sends without a requestId; the ride adds the line's.
        """
        ride, frames = self.makeRide()
        self.start(ride)
        sid = ride.sessionId
        code, raw = self.harness.call("GET", f"/sessions/{sid}", client="tab-1")
        self.assertIsNone(raw["requestId"])
        self.send(
            ride,
            {"op": "inspect", "requestId": "i1"},
            {"op": "capsule", "requestId": "c1"},
            {"op": "watch", "requestId": "w1", "since": 0},
            {"op": "list", "requestId": "l1"},
        )
        self.assertEqual(self.byId(frames, "i1")["type"], "session.snapshot")
        self.assertEqual(self.byId(frames, "c1")["type"], "session.capsule")
        self.assertEqual(self.byId(frames, "w1")["type"], "watch.completed")
        self.assertEqual(self.byId(frames, "l1")["type"], "session.list")
        self.assertEqual(
            [(r["method"], r["path"]) for r in self.front.seen[-4:]],
            [
                ("GET", f"/services/vehicle/g/g1/sessions/{sid}"),
                ("GET", f"/services/vehicle/g/g1/sessions/{sid}/capsule"),
                ("GET", f"/services/vehicle/g/g1/sessions/{sid}/events"),
                ("GET", "/services/vehicle/g/g1/sessions"),
            ],
        )
        self.assertTrue(self.byId(frames, "w1")["value"]["events"])

    def test_claimReleaseChime(self) -> None:
        """
        release, claim and chime reach their routes with the line's body;
        the ride follows whether it holds the lease.
        """
        ride, frames = self.makeRide()
        self.start(ride)
        sid = ride.sessionId
        self.send(ride, {"op": "release", "requestId": "rel"})
        self.assertEqual(self.byId(frames, "rel")["type"], "driver.released")
        self.assertEqual(self.front.seen[-1]["path"], f"/services/vehicle/g/g1/sessions/{sid}/release")
        self.assertFalse(ride.holdsLease)
        self.send(ride, {"op": "claim", "requestId": "cl", "ttlMs": 60000})
        self.assertEqual(self.byId(frames, "cl")["type"], "driver.claimed")
        self.assertEqual(self.front.seen[-1]["body"], {"requestId": "cl", "ttlMs": 60000})
        self.assertTrue(ride.holdsLease)
        self.send(ride, {"op": "chime", "requestId": "ch", "author": "Bea", "delivery": "steer",
                         "text": "try the red one"})
        self.assertEqual(self.byId(frames, "ch")["type"], "chime.accepted")
        self.assertEqual(self.front.seen[-1]["path"], f"/services/vehicle/g/g1/sessions/{sid}/chimes")

    def test_refusalCarriesTheRequestId(self) -> None:
        """
        A refusal is the host's error frame with the line's requestId; a
        C{lease_held} tells the ride it does not hold the lease.
        """
        sid = self.harness.create(client="tab-0")["sessionId"]
        ride, frames = self.makeRide()
        self.start(ride, sessionId=sid)
        self.send(ride, {"op": "prompt", "requestId": "p1", "text": "hi"})
        frame = self.byId(frames, "p1")
        self.assertEqual(frame["type"], "error")
        self.assertEqual(frame["code"], "lease_held")
        self.assertEqual(frame["details"]["holder"]["clientId"], "tab-0")
        self.assertFalse(ride.holdsLease)

    def test_renameThenDelete(self) -> None:
        """
        rename is a PATCH with the title; delete is a DELETE whose frame
        gets the line's requestId and is followed by C{closed}; nothing is
        read after it.
        """
        ride, frames = self.makeRide()
        d = self.start(ride)
        self.send(ride, {"op": "rename", "requestId": "rn", "title": "  Many   cows "})
        renamed = self.byId(frames, "rn")
        self.assertEqual(renamed["type"], "session.renamed")
        self.assertEqual(renamed["value"]["session"]["title"], "Many cows")
        self.assertEqual(self.front.seen[-1]["method"], "PATCH")
        self.assertEqual(self.front.seen[-1]["body"], {"requestId": "rn", "title": "  Many   cows "})
        self.send(ride, {"op": "delete", "requestId": "del"})
        deleted = self.byId(frames, "del")
        self.assertEqual(deleted["type"], "session.deleted")
        self.assertEqual(self.front.seen[-1]["method"], "DELETE")
        self.assertEqual(frames[-1]["type"], "closed")
        self.assertEqual(frames[-1]["value"]["reason"], "delete")
        self.assertEqual(self.successResultOf(d), 0)
        seen = len(self.front.seen)
        self.send(ride, {"op": "inspect", "requestId": "late"})
        ride.inputEnded()
        self.pump()
        self.assertEqual(len(self.front.seen), seen)

    def test_watchFollowsTheCursor(self) -> None:
        """
        A watch without C{since} starts at the ride's cursor (C{ready}'s,
        then each watch's), so repeated watches see each event once.
        """
        ride, frames = self.makeRide()
        self.start(ride)
        cursor = frames[0]["value"]["cursor"]
        self.send(ride, {"op": "watch", "requestId": "w1"})
        self.assertEqual(self.front.seen[-1]["query"], {"since": str(cursor)})
        self.assertEqual(self.byId(frames, "w1")["value"]["events"], [])
        self.send(ride, {"op": "rename", "requestId": "rn", "title": "x"},
                  {"op": "watch", "requestId": "w2"})
        events = self.byId(frames, "w2")["value"]["events"]
        self.assertEqual([e["type"] for e in events], ["session.renamed"])
        self.assertEqual(ride.cursor, events[-1]["seq"])
        self.send(ride, {"op": "watch", "requestId": "w3"})
        self.assertEqual(self.front.seen[-1]["query"], {"since": str(ride.cursor)})
        self.assertEqual(self.byId(frames, "w3")["value"]["events"], [])

    def test_longPollBlocksTheNextLine(self) -> None:
        """
        A watch with C{waitMs} holds the lines after it until it answers:
        requests are handled one at a time, in order.
        """
        ride, frames = self.makeRide()
        self.start(ride)
        self.send(ride, {"op": "watch", "requestId": "w1", "waitMs": 5000},
                  {"op": "inspect", "requestId": "i1"})
        self.assertEqual(self.front.seen[-1]["query"]["waitMs"], "5000")
        self.assertEqual([f["type"] for f in frames], ["ready"])
        self.harness.clock.advance(5)
        self.pump()
        self.assertEqual([f["type"] for f in frames], ["ready", "watch.completed", "session.snapshot"])

    def test_interruptGivesUpALongPoll(self) -> None:
        """
        Asked to stop, the ride gives up a long-poll under way (no answer is
        written for it), drops the lines not yet handled, releases its lease
        and writes C{closed} with C{reason: "interrupted"}.
        """
        ride, frames = self.makeRide()
        d = self.start(ride)
        self.send(ride, {"op": "watch", "requestId": "w1", "waitMs": 30000},
                  {"op": "prompt", "requestId": "p1", "text": "never sent"})
        ride.interrupt()
        self.pump()
        self.assertEqual(self.successResultOf(d), 0)
        self.assertEqual([f["type"] for f in frames], ["ready", "closed"])
        self.assertEqual(frames[-1]["value"]["reason"], "interrupted")
        self.assertTrue(frames[-1]["value"]["released"])
        self.assertEqual([r["path"].rsplit("/", 1)[-1] for r in self.front.seen],
                         ["sessions", "events", "release"])

    def test_invalidLines(self) -> None:
        """
        A line that is not JSON is C{invalid_json}; one without a requestId,
        not an object, with an unknown op or a malformed C{since} is
        C{invalid_request}; these are made by the ride in the host's shape
        and send nothing.  Blank lines are skipped.
        """
        ride, frames = self.makeRide()
        self.start(ride)
        seen = len(self.front.seen)
        self.send(
            ride,
            b"{not json",
            b"   ",
            b"\xff\xfe",
            json.dumps({"op": "inspect"}).encode(),
            b"[1, 2]",
            json.dumps({"op": "dance", "requestId": "d1"}).encode(),
            json.dumps({"op": "watch", "requestId": "w1", "since": -1}).encode(),
            json.dumps({"op": "watch", "requestId": "w2", "waitMs": "soon"}).encode(),
        )
        self.assertEqual(len(self.front.seen), seen)
        errors = frames[1:]
        self.assertEqual(
            [(f["code"], f["requestId"]) for f in errors],
            [
                ("invalid_json", None),
                ("invalid_json", None),
                ("invalid_request", None),
                ("invalid_request", None),
                ("invalid_request", "d1"),
                ("invalid_request", "w1"),
                ("invalid_request", "w2"),
            ],
        )
        for frame in errors:
            self.assertEqual(set(frame), {"protocol", "type", "requestId", "code", "message", "details"})
            self.assertEqual((frame["protocol"], frame["type"]), (PROTOCOL, "error"))
        self.assertEqual(errors[2]["details"], {"field": "requestId"})
        self.assertEqual(errors[4]["details"], {"field": "op"})

    def test_headersOnEveryRequest(self) -> None:
        """
        Every request carries the client id, the credentials and the model
        key; no frame the ride writes carries the key.
        """
        ride, frames = self.makeRide(**{"X-Model-Key": MODEL_KEY})
        d = self.start(ride)
        self.send(ride, {"op": "prompt", "requestId": "p1", "text": "hi"},
                  {"op": "inspect", "requestId": "i1"})
        self.end(ride, d)
        self.assertGreaterEqual(len(self.front.seen), 4)
        for request in self.front.seen:
            self.assertEqual(request["headers"]["X-Vehicle-Client-Id"], "tab-1")
            self.assertEqual(request["headers"]["X-Model-Key"], MODEL_KEY)
            self.assertEqual(request["headers"]["Authorization"], f"Bearer {TOKEN}")
        self.assertNotIn(MODEL_KEY, json.dumps(frames))

    def test_routeOfEveryOp(self) -> None:
        """
        The route table: every op names its method and path.
        """
        ride, _ = self.makeRide()
        ride.sessionId = "s1"
        expected = {
            "claim": ("POST", "/sessions/s1/claim"),
            "release": ("POST", "/sessions/s1/release"),
            "chime": ("POST", "/sessions/s1/chimes"),
            "inspect": ("GET", "/sessions/s1"),
            "capsule": ("GET", "/sessions/s1/capsule"),
            "watch": ("GET", "/sessions/s1/events"),
            "rename": ("PATCH", "/sessions/s1"),
            "delete": ("DELETE", "/sessions/s1"),
            "list": ("GET", "/sessions"),
            **{op: ("POST", "/sessions/s1/commands") for op in COMMAND_OPS},
        }
        for op, route in expected.items():
            call = ride.route(op, {"op": op, "requestId": "r"})
            self.assertEqual((call.method, call.path), route, op)
        self.assertIsNone(ride.route("delete", {"op": "delete", "requestId": "r"}).payload)


class CredentialTests(SynchronousTestCase):
    """
    L{resolveCredentials}: the token, the visitor and the model key.
    """

    def resolve(self, gardend: str = "https://cows.example", environ: Any = None, **kw: Any):
        stateDir = Path(self.mktemp())
        return resolveCredentials(gardend=gardend, environ=environ or {}, stateDir=stateDir, **kw), stateDir

    def test_tokenFromEnvironment(self) -> None:
        """
        C{$VEHICLE_TOKEN} is the bearer; with it there is no visitor.
        """
        creds, _ = self.resolve(environ={"VEHICLE_TOKEN": "tok"})
        self.assertEqual(creds.headers(), {"Authorization": "Bearer tok"})

    def test_keyFileWins(self) -> None:
        """
        C{--key-file}'s content (trimmed) is the bearer, over the variable;
        an unreadable file is a L{CredentialError}.
        """
        path = Path(self.mktemp())
        path.write_text("file-token\n")
        creds, _ = self.resolve(environ={"VEHICLE_TOKEN": "env"}, keyFile=str(path))
        self.assertEqual(creds.token, "file-token")
        self.assertRaises(CredentialError, self.resolve, keyFile=str(path) + ".missing")

    def test_visitorOnARemoteGardend(self) -> None:
        """
        With no token and a gardend not on this computer, the ride is a
        visitor: no Authorization, an X-Visitor-Id kept (only for this user)
        and the same on the next ride.
        """
        creds, stateDir = self.resolve()
        headers = creds.headers()
        self.assertNotIn("Authorization", headers)
        self.assertTrue(creds.anonymous)
        path = stateDir / "vehicle" / "visitor-id"
        self.assertEqual(path.read_text().strip(), headers["X-Visitor-Id"])
        self.assertEqual(stat.S_IMODE(path.stat().st_mode), 0o600)
        self.assertEqual(loadVisitorId(stateDir), headers["X-Visitor-Id"])

    def test_loopbackIsNoVisitor(self) -> None:
        """
        On loopback with no token the ride is no visitor (nothing is made).
        """
        creds, stateDir = self.resolve(gardend="http://127.0.0.1:8700")
        self.assertEqual(creds.headers(), {})
        self.assertFalse((stateDir / "vehicle").exists())

    def test_anonymousForcesAVisitor(self) -> None:
        """
        C{--anonymous} drops the token; C{--visitor-id} names the visitor.
        """
        creds, _ = self.resolve(
            gardend="http://localhost:1", environ={"VEHICLE_TOKEN": "tok"},
            anonymous=True, visitorId="v-mine",
        )
        self.assertEqual(creds.headers(), {"X-Visitor-Id": "v-mine"})

    def test_modelKeyFromTheEnvironment(self) -> None:
        """
        The model key is C{$VEHICLE_MODEL_KEY}, or the variable
        C{--model-key-env} names (which must be set); it is sent as
        X-Model-Key and shows in no C{repr}.
        """
        creds, _ = self.resolve(environ={"VEHICLE_TOKEN": "t", "VEHICLE_MODEL_KEY": MODEL_KEY})
        self.assertEqual(creds.headers()["X-Model-Key"], MODEL_KEY)
        creds, _ = self.resolve(environ={"VEHICLE_TOKEN": "t", "MY_KEY": "sk-other-key"},
                                modelKeyEnv="MY_KEY")
        self.assertEqual(creds.modelKey, "sk-other-key")
        self.assertNotIn("sk-other-key", repr(creds))
        self.assertRaises(CredentialError, self.resolve, environ={"VEHICLE_TOKEN": "t"},
                          modelKeyEnv="MY_KEY")

    def test_isLoopback(self) -> None:
        """
        Loopback hosts are localhost and the loopback addresses.
        """
        for url in ("http://localhost:1", "http://127.0.0.1", "http://[::1]:8", "http://a.localhost"):
            self.assertTrue(isLoopback(url), url)
        for url in ("https://cow-tools.sophia-labs.com", "http://10.0.0.1", "http://192.168.1.2:80"):
            self.assertFalse(isLoopback(url), url)


class OptionsTests(SynchronousTestCase):
    """
    The command line of C{vehicle ride}.
    """

    def parse(self, *argv: str) -> RideOptions:
        options = CLIOptions()
        options.parseOptions(["ride", *argv])
        return options.subOptions

    def test_newOrSession(self) -> None:
        """
        Exactly one of C{--new} and C{--session}; C{--gardend} and
        C{--graph} are required; the new session's fields go with C{--new}.
        """
        options = self.parse("--gardend", "http://g", "--graph", "g1", "--new", "--title", "T")
        self.assertEqual(options.newSession(), NewSession(title="T"))
        for argv in (
            ["--gardend", "http://g", "--graph", "g1"],
            ["--gardend", "http://g", "--graph", "g1", "--new", "--session", "s"],
            ["--graph", "g1", "--new"],
            ["--gardend", "http://g", "--graph", "g1", "--session", "s", "--model", "a/b"],
            ["--gardend", "http://g", "--graph", "g1", "--new", "--profile", "boss"],
        ):
            self.assertRaises(usage.UsageError, self.parse, *argv)

    def test_noSecretOnTheCommandLine(self) -> None:
        """
        No option takes a model key or a token: they come from the
        environment (or a file) only.  A key typed on the command line
        (C{--model-key <key>} abbreviates C{--model-key-env}) is refused,
        and the refusal does not echo it.
        """
        names = {o[0] for o in RideOptions.optParameters}
        self.assertIn("model-key-env", names)
        self.assertFalse({"model-key", "token", "key"} & names)
        for flag in ("--model-key", "--model-key-env", "--token"):
            error = self.assertRaises(
                usage.UsageError, self.parse, "--gardend", "http://g", "--graph", "g1", "--new",
                flag, MODEL_KEY,
            )
            self.assertNotIn(MODEL_KEY, str(error))
        options = self.parse("--gardend", "http://g", "--graph", "g1", "--new",
                             "--model-key-env", "MY_KEY")
        self.assertEqual(options["model-key-env"], "MY_KEY")

    def test_keyFileRefusalDoesNotEcho(self) -> None:
        """
        A token typed where the key file's path belongs (C{--key <token>}
        abbreviates C{--key-file}) is not echoed by the refusal.
        """
        options = self.parse("--gardend", "http://g", "--graph", "g1", "--new", "--key", TOKEN)
        error = self.assertRaises(
            CredentialError, resolveCredentials, gardend="http://g", environ={},
            keyFile=options["key-file"],
        )
        self.assertNotIn(TOKEN, str(error))


class StdioLinesTests(SynchronousTestCase):
    """
    L{StdioLines}: lines in, the end of the input, frames out.
    """

    def connect(self) -> tuple[StdioLines, list[Any], StringTransport]:
        events: list[Any] = []
        protocol = StdioLines(
            onLine=events.append,
            onEnd=lambda: events.append("end"),
            onTooLong=lambda: events.append("too long"),
        )
        transport = StringTransport()
        protocol.makeConnection(transport)
        return protocol, events, transport

    def test_linesAndTheLastOne(self) -> None:
        """
        Each LF-terminated line is passed on (a CR before it kept for the
        ride to drop); a last line without LF is passed on at the end of
        the input.
        """
        protocol, events, _ = self.connect()
        protocol.dataReceived(b'{"a":1}\n{"b"')
        protocol.dataReceived(b':2}\r\n{"c":3}')
        protocol.readConnectionLost()
        self.assertEqual(events, [b'{"a":1}', b'{"b":2}\r', b'{"c":3}', "end"])

    def test_tooLong(self) -> None:
        """
        A line longer than the limit is refused (C{onTooLong}) as soon as
        it passes the limit, before its end; the rest of it is skipped up
        to its line break, and the lines after it are read as usual.
        """
        protocol, events, _ = self.connect()
        protocol.MAX_LENGTH = 10
        protocol.dataReceived(b'{"a":')
        protocol.dataReceived(b"x" * 6)
        self.assertEqual(events, ["too long"])
        protocol.dataReceived(b"x" * 20)
        protocol.dataReceived(b"xx\n{}\n" + b"y" * 11 + b"\n")
        protocol.dataReceived(b"0123456789\n")
        protocol.dataReceived(b"z" * 30)
        protocol.readConnectionLost()
        self.assertEqual(events, ["too long", b"{}", "too long", b"0123456789", "too long", "end"])

    def test_longLineIsQuick(self) -> None:
        """
        A 17 MiB line, in the 64 KiB chunks a pipe gives, is refused at the
        limit in well under a second (each byte is looked at once), and the
        line after it is read.
        """
        import time

        protocol, events, _ = self.connect()
        chunk = b"x" * 65536
        started = time.monotonic()
        for _ in range(17 * 16):
            protocol.dataReceived(chunk)
        protocol.dataReceived(b'\n{"op":"list"}\n')
        elapsed = time.monotonic() - started
        self.assertEqual(events, ["too long", b'{"op":"list"}'])
        self.assertLess(elapsed, 1.0)

    def test_framesOut(self) -> None:
        """
        A frame is one line of JSON; after the output is gone nothing is
        written, and the ride is told the input ends.
        """
        protocol, events, transport = self.connect()
        protocol.sendFrame({"type": "ready", "value": "é"})
        self.assertEqual(transport.value(), '{"type":"ready","value":"é"}\n'.encode())
        protocol.writeConnectionLost()
        protocol.sendFrame({"type": "closed"})
        self.assertEqual(transport.value().count(b"\n"), 1)
        self.assertEqual(events, ["end"])
        self.assertIs(self.successResultOf(protocol.close()), None)

    def test_lineTooLongIsRefusedInItsTurn(self) -> None:
        """
        The ride answers a too-long line with C{body_too_large} (the limit
        in its details), in its turn, and goes on with the next line.
        """
        harness = Harness(self)
        self.addCleanup(harness.stop)
        frames: list[dict[str, Any]] = []
        link = HostLink(http=FakeGateway(harness), gardend=GARDEND, graph="g1",
                    headers={"Authorization": f"Bearer {TOKEN}"})
        ride = Ride(link=link, clientId="alice", write=frames.append)
        d = Deferred.fromCoroutine(ride.run(new=NewSession()))
        harness.stub.flush()
        ride.lineTooLong()
        ride.lineReceived(b'{"op":"inspect","requestId":"i1"}')
        for _ in range(3):
            harness.stub.flush()
        ride.inputEnded()
        for _ in range(3):
            harness.stub.flush()
        self.assertEqual(self.successResultOf(d), 0)
        self.assertEqual([f.get("code", f["type"]) for f in frames],
                         ["ready", "body_too_large", "session.snapshot", "closed"])
        self.assertEqual(frames[1]["details"], {"limit": 16 * 1024 * 1024})
        self.assertIsNone(frames[1]["requestId"])
