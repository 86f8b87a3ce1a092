"""
Integration: public mode end to end.  A live host with real pi bodies behind
the gardend stand-in in public mode: visitors (their own key, or none) and a
Sophia account come in through the gateway with no login of this Sophia,
and one visitor rides with the C{vehicle ride} console script.
"""

from __future__ import annotations

import json
from typing import Any

from treq.client import HTTPClient
from twisted.internet import reactor
from twisted.trial.unittest import TestCase
from twisted.web.client import Agent, HTTPConnectionPool

from vehicle_local.standin import Config, StandIn

from tests.support._clients import Client, clientEnvironment
from tests.support.harness import SECRET
from tests.support.live import LiveHost, requirePi, sleep
from tests.support.public import SCRIPTED as PUBLIC
from tests.support.ride import startRider
from tests.support.schemas import assertValidFrame


#: A visitor's own model key (the scripted provider takes any key).
VISITOR_KEY = "sk-or-visitor-live-7c1e0b"
#: The stand-in's Cognito: a Sophia account's ID token.
ACCOUNT_TOKEN = "id-token-live-account-42"
MASTER = "master-live-visitor"


def publicStandIn(testCase: TestCase) -> StandIn:
    """
    The gardend stand-in in public mode on a loopback port: g-public and
    g-pub2 public, g1 private; one verified account; the manifest delegates
    the caller and accepts a model key.  Point it at the host with
    C{setServiceUrl}.
    """
    config = Config.fromJSON(
        {
            "masterKey": MASTER,
            "graphs": ["g1"],
            "tokens": [],
            "public": {
                "enabled": True,
                "graphs": ["g-public", "g-pub2"],
                "accounts": [
                    {
                        "token": ACCOUNT_TOKEN,
                        "sub": "123",
                        "email": "a@example.com",
                        "emailVerified": True,
                    }
                ],
            },
            "service": {
                "url": "http://127.0.0.1:9",
                "secret": SECRET,
                "delegateCaller": True,
                "acceptsModelKey": True,
            },
        }
    )
    stand = StandIn(root=testCase.mktemp(), config=config, reactor=reactor)
    stand.listen(reactor, 0)
    testCase.addCleanup(stand.stopListening)
    return stand


class GatewayClient:
    """
    A client of the stand-in's gateway on one graph, sending the same
    headers every time (as one visitor, account or member would).
    """

    def __init__(self, testCase: TestCase, stand: StandIn, graph: str,
                 **headers: str) -> None:
        self.testCase = testCase
        self.base = f"{stand.url}/services/vehicle/g/{graph}"
        self.headers = {"content-type": "application/json", **headers}
        pool = HTTPConnectionPool(reactor, persistent=False)
        self.http = HTTPClient(Agent(reactor, pool=pool))

    async def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        data = json.dumps(body).encode() if body is not None else None
        response = await self.http.request(
            method, self.base + path, headers=self.headers, data=data
        )
        frame = json.loads(await response.content())
        # Every frame that comes back through the gateway is the protocol's.
        assertValidFrame(self.testCase, frame)
        return response.code, frame

    async def waitSettled(self, sessionId: str, since: int = 0,
                          timeout: float = 30.0) -> list[dict[str, Any]]:
        """
        Long-poll the session's events after C{since} until a run settles.
        """
        seen: list[dict[str, Any]] = []
        cursor = since
        deadline = reactor.seconds() + timeout
        while reactor.seconds() < deadline:
            code, frame = await self.call(
                "GET", f"/sessions/{sessionId}/events?since={cursor}&waitMs=2000"
            )
            self.testCase.assertEqual(code, 200, frame)
            seen.extend(frame["value"]["events"])
            if any(e["type"] == "run.settled" for e in seen):
                return seen
            cursor = frame["value"]["cursor"]
        raise AssertionError(f"no run.settled; saw {[e['type'] for e in seen]}")


async def publicHost(testCase: TestCase) -> tuple[LiveHost, StandIn]:
    stand = publicStandIn(testCase)
    host = await LiveHost(testCase, public=PUBLIC, mcpUrl=stand.mcpUrl).start()
    stand.setServiceUrl(host.url)
    return host, stand


class VisitorTests(TestCase):
    """
    Visitors and accounts through the gateway in public mode.
    """

    timeout = 60

    async def test_visitorWithItsOwnKey(self) -> None:
        """
        A visitor with C{X-Model-Key} creates a session on a public graph
        (a viewer's, on its own key, recording every public graph), prompts,
        and sees the run settle on its key; it lists only its own sessions,
        and the host saw it only as a minted C{anon:} principal.
        """
        host, stand = await publicHost(self)
        visitor = GatewayClient(self, stand, "g-public",
                       **{"x-visitor-id": "v1", "x-model-key": VISITOR_KEY})
        other = GatewayClient(self, stand, "g-public",
                     **{"x-visitor-id": "v2", "x-model-key": VISITOR_KEY})

        code, frame = await visitor.call("POST", "/sessions", {"requestId": "c1"})
        self.assertEqual(code, 201, frame)
        session = frame["value"]["session"]
        sid = session["sessionId"]
        self.assertEqual(session["funding"], "byok")
        self.assertEqual(session["role"], "viewer")
        self.assertEqual(session["graphId"], "g-public")
        self.assertEqual(session["graphs"], ["g-public", "g-pub2"])
        code, frame = await other.call("POST", "/sessions", {"requestId": "c1"})
        self.assertEqual(code, 201, frame)
        otherSid = frame["value"]["session"]["sessionId"]

        code, frame = await visitor.call(
            "POST", f"/sessions/{sid}/commands",
            {"type": "prompt", "requestId": "p1", "text": "how many cows?"},
        )
        self.assertEqual(code, 202, frame)
        events = await visitor.waitSettled(sid)
        replies = [e["data"]["text"] for e in events
                   if e["type"] == "message.completed" and e["data"]["role"] == "assistant"]
        self.assertIn("how many cows?", replies[-1])
        headers, _ = host.model.requests[-1]
        self.assertEqual(headers["authorization"], "Bearer " + VISITOR_KEY)

        code, frame = await visitor.call("GET", "/sessions")
        self.assertEqual(code, 200, frame)
        self.assertEqual([s["sessionId"] for s in frame["value"]["sessions"]], [sid])
        code, frame = await other.call("GET", "/sessions")
        self.assertEqual([s["sessionId"] for s in frame["value"]["sessions"]], [otherSid])
        code, frame = await other.call("GET", f"/sessions/{sid}")
        self.assertEqual((code, frame["code"]), (404, "not_found"))

        principals = {r["headers"]["x-user-id"] for r in stand.requestsSeen}
        self.assertEqual(len(principals), 2)
        self.assertTrue(all(p.startswith("anon:") for p in principals))
        self.assertTrue(all(
            r["headers"]["x-sophia-caller-kind"] == "anonymous" for r in stand.requestsSeen
        ))
        self.assertNotIn(VISITOR_KEY, json.dumps(host.events(sid)))

    async def test_visitorWithoutKey(self) -> None:
        """
        A visitor with neither a key nor an account is refused at creation,
        402 C{model_key_required}, with both doors described.
        """
        host, stand = await publicHost(self)
        visitor = GatewayClient(self, stand, "g-public", **{"x-visitor-id": "v3"})
        code, frame = await visitor.call("POST", "/sessions", {"requestId": "c1"})
        self.assertEqual((code, frame["code"]), (402, "model_key_required"))
        doors = frame["details"]["doors"]
        self.assertEqual(doors["byok"]["header"], "X-Model-Key")
        self.assertIn("Authorization", doors["account"]["header"])
        self.assertEqual(host.registry().sessions, {})

    async def test_byokRunStopsCleanly(self) -> None:
        """
        A run on the visitor's own key ends with pi's C{stop}, not an error.
        """
        host, stand = await publicHost(self)
        visitor = GatewayClient(self, stand, "g-public",
                       **{"x-visitor-id": "v1", "x-model-key": VISITOR_KEY})
        code, frame = await visitor.call("POST", "/sessions", {"requestId": "c1"})
        sid = frame["value"]["session"]["sessionId"]
        await visitor.call("POST", f"/sessions/{sid}/commands",
                           {"type": "prompt", "requestId": "p1", "text": "hi"})
        events = await visitor.waitSettled(sid)
        [settled] = [e for e in events if e["type"] == "run.settled"]
        self.assertEqual(settled["data"]["stopReason"], "stop", events)

    async def test_account(self) -> None:
        """
        A verified account's first C{GET /account} grants its signup credit;
        its credit conversation's body reads another public graph with the
        delegation the gateway minted (and not a private one), and the
        run is debited.  A member of this Sophia is a member; a visitor on a
        private graph never reaches the host.
        """
        host, stand = await publicHost(self)
        stand.store.createDocument("g-pub2", "Herd", "herd")
        stand.store.createDocument("g1", "Secret", "herd")
        account = GatewayClient(self, stand, "g-public", authorization="Bearer " + ACCOUNT_TOKEN)
        code, frame = await account.call("GET", "/account")
        self.assertEqual(code, 200, frame)
        value = frame["value"]
        self.assertEqual(
            (value["kind"], value["principal"], value["email"], value["emailVerified"]),
            ("account", "cognito:123", "a@example.com", True),
        )
        self.assertEqual(value["credit"]["grantedUsd"], PUBLIC.signupGrantUsd)
        self.assertEqual(value["credit"]["balanceUsd"], PUBLIC.signupGrantUsd)

        code, frame = await account.call("POST", "/sessions", {"requestId": "c1"})
        self.assertEqual(code, 201, frame)
        self.assertEqual(frame["value"]["session"]["funding"], "credit")
        sid = frame["value"]["session"]["sessionId"]
        results = {}
        cursor = 0
        for n, graph in enumerate(("g-pub2", "g1")):
            tool = ('[[TOOL:mcp__graph__read_document '
                    f'{{"graphId": "{graph}", "documentId": "herd"}}]]')
            code, frame = await account.call(
                "POST", f"/sessions/{sid}/commands",
                {"type": "prompt", "requestId": f"p{n}", "text": "read " + tool},
            )
            self.assertEqual(code, 202, frame)
            events = await account.waitSettled(sid, since=cursor)
            cursor = events[-1]["seq"]
            [result] = [e for e in events if e["type"] == "tool.result"]
            results[graph] = result["data"]["isError"]
        self.assertEqual(results, {"g-pub2": False, "g1": True})
        self.assertEqual(stand.audit(), [])
        # The model was told the graphs it reads (a section of its system
        # prompt), and the private one was refused in the body: by the tool's
        # own schema (gardend lists the graphs it reads) or by the
        # extension's fence, whichever comes first.
        system = json.dumps(host.model.requests[-1][1]["messages"][:2])
        self.assertIn("may read these public graphs: g-public, g-pub2", system)
        piFile = next((host.registry().sessions[sid].directory / "pi").glob("*.jsonl"))
        refusals = [
            json.loads(line)["message"] for line in piFile.read_text().splitlines()
            if '"toolResult"' in line and '"isError":true' in line
        ]
        self.assertEqual(len(refusals), 1, refusals)
        text = refusals[0]["content"][0]["text"]
        self.assertTrue("g1" in text and ("expected one of" in text or "not one this" in text), text)
        code, frame = await account.call("GET", "/account")
        self.assertGreater(frame["value"]["credit"]["spentUsd"], 0)
        self.assertEqual(frame["value"]["credit"]["grantedUsd"], PUBLIC.signupGrantUsd)

        member = GatewayClient(self, stand, "g1", authorization="Bearer " + MASTER)
        code, frame = await member.call("GET", "/account")
        self.assertEqual((code, frame["value"]["kind"]), (200, "member"))

        seen = len(stand.requestsSeen)
        response = await account.http.get(f"{stand.url}/services/vehicle/g/g1/account",
                                          headers={b"x-visitor-id": "v1"})
        await response.content()
        self.assertEqual(response.code, 401)
        self.assertEqual(len(stand.requestsSeen), seen)


class RideAsVisitorTests(TestCase):
    """
    C{vehicle ride --anonymous} through the stand-in in public mode.
    """

    timeout = 60

    async def test_rideAsVisitor(self) -> None:
        """
        C{vehicle ride --new --anonymous --visitor-id v1} with
        C{$VEHICLE_MODEL_KEY}: ready, a prompt, watches until the run
        settles, closed; every request reached the host as the same
        anonymous viewer with the key, and the key is on no command line
        and in no frame.
        """
        requirePi()
        host, stand = await publicHost(self)

        def onFrame(rider: Client, frame: dict[str, Any]) -> None:
            if frame["type"] == "ready":
                rider.send({"op": "prompt", "requestId": "p1", "text": "moo?"})
            elif frame["type"] in ("command.accepted", "watch.completed"):
                events = (frame["value"].get("events", [])
                          if frame["type"] == "watch.completed" else [])
                if any(e["type"] == "run.settled" for e in events):
                    rider.transport.closeStdin()
                else:
                    rider.send({"op": "watch", "requestId": f"w{len(rider.lines)}",
                                "waitMs": 5000})
            elif frame["type"] == "error":
                rider.transport.closeStdin()

        argv = ["--gardend", stand.url,
                "--graph", "g-public", "--new", "--anonymous", "--visitor-id", "v1"]
        env = clientEnvironment(self, VEHICLE_MODEL_KEY=VISITOR_KEY)
        rider = startRider(self, onFrame, *argv, env=env)
        code = await rider.ended
        self.assertEqual(code, 0, rider.errorText)

        types = [f["type"] for f in rider.frames()]
        self.assertEqual(types[0], "ready", rider.frames())
        self.assertEqual(types[-1], "closed", rider.frames())
        self.assertNotIn("error", types, rider.frames())
        session = rider.frames()[0]["value"]["session"]
        self.assertEqual((session["funding"], session["role"]), ("byok", "viewer"))
        seen = [e for f in rider.frames() if f["type"] == "watch.completed"
                for e in f["value"]["events"]]
        self.assertIn("run.settled", [e["type"] for e in seen])
        self.assertEqual(host.model.requests[-1][0]["authorization"], "Bearer " + VISITOR_KEY)

        forwarded = stand.requestsSeen
        self.assertEqual({r["headers"]["x-user-id"] for r in forwarded},
                         {forwarded[0]["headers"]["x-user-id"]})
        self.assertTrue(forwarded[0]["headers"]["x-user-id"].startswith("anon:"))
        self.assertTrue(all(r["headers"]["x-sophia-caller-kind"] == "anonymous"
                            and r["headers"].get("x-model-key") == VISITOR_KEY
                            for r in forwarded))
        for arg in argv:
            self.assertNotIn(VISITOR_KEY, arg)
        self.assertNotIn(VISITOR_KEY, json.dumps(rider.frames()))
        # Let the body's end reach the model before the test tears down.
        await sleep(0.1)
