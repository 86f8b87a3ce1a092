"""
The live half of L{tests.unit.test_gardend}: L{GatewayTests}, L{OfficialSDKTests}, L{PublicGatewayTests}
(real processes, sockets or the real reactor; see that module for the rest).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any, ClassVar

from attrs import define, field
from klein import Klein
from treq.client import HTTPClient
from twisted.internet import reactor as globalReactor
from twisted.internet import threads
from twisted.internet.defer import Deferred
from twisted.internet.protocol import Protocol
from twisted.trial.unittest import TestCase
from twisted.web.client import Agent, HTTPConnectionPool
from twisted.web.server import Site

from vehicle_local.standin import Config, StandIn

from tests.support._headers import bytesNames
from tests.support.gardend import (
    ACCOUNT_TOKEN,
    MASTER,
    SECRET,
    UNVERIFIED_TOKEN,
    makeConfig,
    makePublicConfig,
    publicConfigData,
)


@define
class FakeHost:
    """
    A stand-in for the host: records what reaches it; C{/stream} writes one
    SSE event and waits for the test to release the second.
    """

    seen: list[dict[str, Any]] = field(factory=list)
    streams: list[tuple[Deferred, Deferred]] = field(factory=list)
    streamOpened: Deferred = field(factory=Deferred)

    router: ClassVar[Klein] = Klein()

    @router.route("/", branch=True)
    def anything(self, request: Any) -> Any:
        self.seen.append(
            {
                "method": request.method.decode(),
                "uri": request.uri.decode(),
                "headers": {
                    k.decode().lower(): [v.decode() for v in vs]
                    for k, vs in request.requestHeaders.getAllRawHeaders()
                },
                "body": request.content.read(),
            }
        )
        if request.uri.startswith(b"/stream"):
            request.setHeader(b"content-type", b"text/event-stream")
            request.write(b"data: one\n\n")
            release: Deferred = Deferred()
            finished = request.notifyFinish()
            self.streams.append((release, finished))
            self.streamOpened.callback(None)

            def second(_: Any) -> bytes:
                request.write(b"data: two\n\n")
                return b""

            return release.addCallback(second)
        request.setResponseCode(201)
        request.setHeader(b"content-type", b"application/json")
        request.setHeader(b"x-host", b"yes")
        return b'{"ok": true}'


class _Chunks(Protocol):
    """
    Collects a body's pieces; C{first} fires on the first, C{done} at the end.
    """

    def __init__(self) -> None:
        self.chunks: list[bytes] = []
        self.first: Deferred = Deferred()
        self.done: Deferred = Deferred()

    def dataReceived(self, data: bytes) -> None:
        self.chunks.append(data)
        if not self.first.called:
            self.first.callback(data)

    def connectionLost(self, reason: Any = None) -> None:
        self.done.callback(None)


class GatewayTests(TestCase):
    """
    The gateway on loopback, forwarding to a L{FakeHost} on loopback.
    """

    timeout = 20

    def setUp(self) -> None:
        self.host = FakeHost()
        hostPort = globalReactor.listenTCP(
            0, Site(self.host.router.resource()), interface="127.0.0.1"
        )
        self.addCleanup(hostPort.stopListening)
        self.standIn = self.makeStandIn(f"http://127.0.0.1:{hostPort.getHost().port}")
        pool = HTTPConnectionPool(globalReactor, persistent=False)
        self.client = HTTPClient(Agent(globalReactor, pool=pool))

    def makeStandIn(self, hostUrl: str, **service: Any) -> StandIn:
        standIn = StandIn(
            root=self.mktemp(), config=makeConfig(**service), reactor=globalReactor
        )
        standIn.setServiceUrl(hostUrl)
        standIn.listen(globalReactor, 0)
        self.addCleanup(standIn.stopListening)
        return standIn

    async def request(
        self,
        method: str,
        path: str,
        token: str | None,
        standIn: StandIn | None = None,
        **headers: str,
    ) -> tuple[Any, bytes]:
        standIn = standIn or self.standIn
        if token is not None:
            headers["authorization"] = "Bearer " + token
        response = await self.client.request(
            method,
            standIn.url + path,
            headers=bytesNames(headers),
            data=b'{"a": 1}' if method == "POST" else None,
        )
        return response, await response.content()

    async def test_health(self) -> None:
        """
        The gateway's own C{/health} answers without credentials.
        """
        response, body = await self.request("GET", "/health", None)
        self.assertEqual((response.code, json.loads(body)), (200, {"ok": True}))

    async def test_unauthenticated(self) -> None:
        """
        No credential or an unknown one is a 401 that never reaches the host.
        """
        for token in (None, "wrong"):
            response, body = await self.request(
                "GET", "/services/vehicle/sessions", token
            )
            self.assertEqual(response.code, 401)
            self.assertEqual(json.loads(body)["error"]["code"], "unauthorized")
        self.assertEqual(self.host.seen, [])

    async def test_spoofedHeadersDropped(self) -> None:
        """
        Identity headers the caller sends are dropped and gardend's are
        minted: the secret, C{owner} for the master key; the caller's own
        passthrough headers, method, query and body arrive; the host's status
        and headers come back.
        """
        spoofed = {
            "x-user-id": "mallory",
            "x-graph-id": "g2",
            "x-internal-service": "guess",
            "x-sophia-graph-role": "owner",
            "x-sophia-delegated-token": "forged",
            "x-sophia-caller-kind": "account",
            "x-model-key": "sk-or-caller",
            "cookie": "session=1",
            "x-vehicle-client-id": "tab-7",
            "last-event-id": "42",
            "content-type": "application/json",
        }
        response, body = await self.request(
            "POST", "/services/vehicle/sessions?limit=2", MASTER, **spoofed
        )
        self.assertEqual((response.code, body), (201, b'{"ok": true}'))
        self.assertEqual(response.headers.getRawHeaders(b"x-host"), [b"yes"])
        (seen,) = self.host.seen
        self.assertEqual(
            (seen["method"], seen["uri"], seen["body"]),
            ("POST", "/sessions?limit=2", b'{"a": 1}'),
        )
        headers = seen["headers"]
        self.assertEqual(headers["x-internal-service"], [SECRET])
        self.assertEqual(headers["x-user-id"], ["owner"])
        self.assertEqual(headers["x-sophia-caller-role"], ["owner"])
        self.assertEqual(headers["x-vehicle-client-id"], ["tab-7"])
        self.assertEqual(headers["last-event-id"], ["42"])
        for dropped in (
            "x-graph-id",
            "x-sophia-graph-role",
            "x-sophia-delegated-token",
            "x-sophia-caller-kind",
            "x-model-key",
            "cookie",
            "authorization",
        ):
            self.assertNotIn(dropped, headers)
        self.assertEqual(self.standIn.requestsSeen[0]["headers"]["x-user-id"], "owner")

    async def test_graphPath(self) -> None:
        """
        C{/services/vehicle/g/<graph>/...} is stripped to C{/...} and carries
        the graph, the caller's role on it and a delegation token for C{/mcp}
        bound to caller, graph and role.
        """
        response, _ = await self.request(
            "GET",
            "/services/vehicle/g/g2/sessions/s1/events?after=3",
            "edit-secret",
            **{"x-graph-id": "g1"},
        )
        self.assertEqual(response.code, 201)
        (seen,) = self.host.seen
        self.assertEqual(seen["uri"], "/sessions/s1/events?after=3")
        headers = seen["headers"]
        self.assertEqual(headers["x-graph-id"], ["g2"])
        self.assertEqual(headers["x-user-id"], ["token:t-edit"])
        self.assertEqual(headers["x-sophia-caller-role"], ["editor"])
        self.assertEqual(headers["x-sophia-graph-role"], ["viewer"])
        delegation = self.standIn.delegations.verify(
            headers["x-sophia-delegated-token"][0]
        )
        self.assertEqual(
            (delegation.principal, delegation.graphId, delegation.role),
            ("token:t-edit", "g2", "viewer"),
        )

    async def test_graphRoot(self) -> None:
        """
        The graph path itself forwards as C{/}.
        """
        await self.request("GET", "/services/vehicle/g/g1", MASTER)
        self.assertEqual(self.host.seen[0]["uri"], "/")

    async def test_noGrant(self) -> None:
        """
        A token without a grant on the path's graph is a 403; an unknown
        graph a 404; neither reaches the host.
        """
        response, body = await self.request(
            "GET", "/services/vehicle/g/g2/sessions", "view-secret"
        )
        self.assertEqual(
            (response.code, json.loads(body)["error"]["code"]), (403, "forbidden")
        )
        response, _ = await self.request(
            "GET", "/services/vehicle/g/g9/sessions", MASTER
        )
        self.assertEqual(response.code, 404)
        self.assertEqual(self.host.seen, [])

    async def test_noDelegationUnlessManifestSays(self) -> None:
        """
        Without C{delegateCaller} no delegation token is minted; with
        C{acceptsModelKey} the caller's model key passes.
        """
        hostUrl = self.standIn.gateway.serviceUrl
        standIn = self.makeStandIn(hostUrl, delegateCaller=False, acceptsModelKey=True)
        await self.request(
            "GET",
            "/services/vehicle/g/g1/x",
            MASTER,
            standIn=standIn,
            **{"x-model-key": "sk-or-1"},
        )
        headers = self.host.seen[0]["headers"]
        self.assertNotIn("x-sophia-delegated-token", headers)
        self.assertEqual(headers["x-model-key"], ["sk-or-1"])

    async def test_serviceDown(self) -> None:
        """
        When the host does not answer, the caller gets a 502.
        """
        self.standIn.setServiceUrl("http://127.0.0.1:1")
        response, body = await self.request("GET", "/services/vehicle/sessions", MASTER)
        self.assertEqual(response.code, 502)

    async def test_sseIncremental(self) -> None:
        """
        An SSE answer flows through as the host writes it: the first event
        arrives while the host still holds the stream open.
        """
        response = await self.client.get(
            self.standIn.url + "/services/vehicle/stream",
            headers={b"authorization": "Bearer " + MASTER},
            unbuffered=True,
        )
        self.assertEqual(response.code, 200)
        self.assertEqual(
            response.headers.getRawHeaders(b"content-type"), [b"text/event-stream"]
        )
        chunks = _Chunks()
        response.deliverBody(chunks)
        first = await chunks.first
        self.assertEqual(first, b"data: one\n\n")
        release, finished = self.host.streams[0]
        self.assertFalse(finished.called)
        release.callback(None)
        await chunks.done
        self.assertEqual(b"".join(chunks.chunks), b"data: one\n\ndata: two\n\n")

    async def test_disconnectCancelsUpstream(self) -> None:
        """
        When the caller goes away mid-stream, the gateway drops its
        request to the host.
        """
        response = await self.client.get(
            self.standIn.url + "/services/vehicle/stream",
            headers={b"authorization": "Bearer " + MASTER},
            unbuffered=True,
        )
        chunks = _Chunks()
        response.deliverBody(chunks)
        await chunks.first
        release, finished = self.host.streams[0]
        chunks.transport.stopProducing()
        lost: list[Any] = []
        await finished.addErrback(lost.append)
        self.assertEqual(len(lost), 1)

    async def test_delegatedTokenOnMcp(self) -> None:
        """
        The token the gateway hands the host works on C{/mcp} of the same
        port: the write lands in the path's graph with the caller as actor.
        """
        await self.request("GET", "/services/vehicle/g/g1/sessions", "edit-secret")
        token = self.host.seen[0]["headers"]["x-sophia-delegated-token"][0]
        message = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {
                "name": "create_document",
                "arguments": {"title": "t", "documentId": "d9"},
            },
        }
        response = await self.client.post(
            self.standIn.mcpUrl,
            data=json.dumps(message).encode(),
            headers={
                b"authorization": "Bearer " + token,
                b"content-type": "application/json",
            },
        )
        body = await response.json()
        self.assertFalse(body["result"]["isError"])
        self.assertIsNotNone(self.standIn.document("g1", "d9"))
        self.assertEqual(self.standIn.audit()[0]["actor"], "token:t-edit")


async def _driveWithSDK(url: str, token: str) -> dict[str, Any]:
    """
    Speak to C{url} with the official MCP client: initialize, list the
    tools, create a document, and try another graph.
    """
    import httpx2
    from mcp.client.session import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    async with httpx2.AsyncClient(
        headers={"authorization": "Bearer " + token}, timeout=10
    ) as http:
        async with streamable_http_client(url, http_client=http) as (read, write):
            async with ClientSession(read, write) as session:
                initialized = await session.initialize()
                tools = await session.list_tools()
                created = await session.call_tool(
                    "create_document",
                    {"title": "From the SDK", "documentId": "sdk-doc"},
                )
                refused = await session.call_tool(
                    "create_document", {"graphId": "g2", "title": "x"}
                )
                return {
                    "version": initialized.protocol_version,
                    "server": initialized.server_info.name,
                    "tools": {t.name: t.meta for t in tools.tools},
                    "created": (created.is_error, json.loads(created.content[0].text)),
                    "refused": (refused.is_error, json.loads(refused.content[0].text)),
                }


class OfficialSDKTests(TestCase):
    """
    The official C{mcp} client (in a worker thread, on its own asyncio loop)
    against C{/mcp} on the trial reactor.
    """

    timeout = 30

    async def test_sdkSpeaksToStandIn(self) -> None:
        """
        The SDK initializes, lists the editor's tools with their scopes,
        calls C{create_document} (landing in the token's graph) and sees a
        call naming another graph come back as a tool error.
        """
        standIn = StandIn(
            root=self.mktemp(), config=makeConfig(), reactor=globalReactor
        )
        standIn.listen(globalReactor, 0)
        self.addCleanup(standIn.stopListening)
        token = standIn.mintDelegation("token:t-edit", "g1", "editor")
        out = await threads.deferToThread(
            asyncio.run, _driveWithSDK(standIn.mcpUrl, token)
        )
        self.assertIn(out["version"], ("2025-11-25", "2025-06-18"))
        self.assertEqual(out["server"], "gardend-stand-in")
        self.assertEqual(len(out["tools"]), 9)
        self.assertEqual(
            out["tools"]["create_document"]["sophia"]["local"]["requiredScopes"],
            ["documents.write"],
        )
        self.assertEqual(out["created"][0], False)
        self.assertEqual(out["created"][1]["document"]["id"], "sdk-doc")
        self.assertEqual(
            out["refused"],
            (
                True,
                {
                    "ok": False,
                    "error": {
                        "code": "graph_mismatch",
                        "message": "this token is bound to another graph",
                    },
                },
            ),
        )
        self.assertEqual(standIn.document("g1", "sdk-doc")["title"], "From the SDK")
        self.assertEqual(standIn.audit()[0]["via"], "service:vehicle")


class PublicGatewayTests(TestCase):
    """
    The gateway in public mode, forwarding to a L{FakeHost}: visitors and
    Sophia accounts reach the public graphs as viewers.
    """

    timeout = 20

    def setUp(self) -> None:
        self.host = FakeHost()
        hostPort = globalReactor.listenTCP(
            0, Site(self.host.router.resource()), interface="127.0.0.1"
        )
        self.addCleanup(hostPort.stopListening)
        self.hostUrl = f"http://127.0.0.1:{hostPort.getHost().port}"
        self.standIn = self.makeStandIn()
        pool = HTTPConnectionPool(globalReactor, persistent=False)
        self.client = HTTPClient(Agent(globalReactor, pool=pool))

    def makeStandIn(self, **service: Any) -> StandIn:
        standIn = StandIn(
            root=self.mktemp(),
            config=makePublicConfig(**service),
            reactor=globalReactor,
        )
        standIn.setServiceUrl(self.hostUrl)
        standIn.listen(globalReactor, 0)
        self.addCleanup(standIn.stopListening)
        return standIn

    async def send(
        self, path: str, standIn: StandIn | None = None, **headers: str
    ) -> tuple[int, Any]:
        """
        C{GET} C{path} with C{headers}; the status and the headers the host
        was sent (L{None} when the request did not reach it).
        """
        before = len(self.host.seen)
        response = await self.client.get(
            (standIn or self.standIn).url + path, headers=bytesNames(headers)
        )
        body = await response.content()
        if len(self.host.seen) == before:
            return response.code, json.loads(body)
        return response.code, self.host.seen[-1]["headers"]

    async def visitor(self, **headers: str) -> dict[str, list[str]]:
        code, seen = await self.send("/services/vehicle/g/g-public/sessions", **headers)
        self.assertEqual(code, 201, seen)
        return seen  # type: ignore[no-any-return]

    def assertPublicViewer(self, headers: dict[str, list[str]], kind: str) -> None:
        """
        The headers minted for any public caller on g-public.
        """
        self.assertEqual(headers["x-sophia-caller-kind"], [kind])
        self.assertEqual(headers["x-internal-service"], [SECRET])
        self.assertEqual(headers["x-graph-id"], ["g-public"])
        self.assertEqual(headers["x-sophia-graph-role"], ["viewer"])
        self.assertEqual(headers["x-sophia-caller-role"], ["viewer"])
        self.assertEqual(headers["x-sophia-public-graphs"], ["g-public,g-pub2"])
        for gone in ("authorization", "x-visitor-id", "cookie"):
            self.assertNotIn(gone, headers)
        delegation = self.standIn.delegations.verify(
            headers["x-sophia-delegated-token"][0]
        )
        self.assertEqual(
            (delegation.principal, delegation.graphId, delegation.role, delegation.reads),
            (headers["x-user-id"][0], "g-public", "viewer", ("g-pub2",)),
        )

    async def test_visitor(self) -> None:
        """
        With no credential on a public graph the caller is a visitor: an
        C{anon:} principal that is the same for the same C{X-Visitor-Id} and
        different for another, minted viewer of the path's graph with the
        public graphs and a viewer's delegation; no account headers, and the
        visitor id does not reach the host.
        """
        first = await self.visitor(**{"x-visitor-id": "v-one"})
        self.assertPublicViewer(first, "anonymous")
        principal = first["x-user-id"][0]
        self.assertRegex(principal, r"^anon:[0-9a-f]{32}$")
        self.assertNotIn("v-one", principal)
        self.assertNotIn("x-sophia-account-email", first)
        self.assertNotIn("x-sophia-account-email-verified", first)
        again = await self.visitor(**{"x-visitor-id": "v-one", "user-agent": "other"})
        self.assertEqual(again["x-user-id"], [principal])
        other = await self.visitor(**{"x-visitor-id": "v-two"})
        self.assertNotEqual(other["x-user-id"], [principal])
        self.assertTrue(other["x-user-id"][0].startswith("anon:"))

    async def test_visitorStableAcrossStandIns(self) -> None:
        """
        The same visitor id is the same principal on another stand-in with
        the same configuration (a restarted gardend), so the visitor finds
        its sessions again.
        """
        first = await self.visitor(**{"x-visitor-id": "v-one"})
        restarted = self.makeStandIn()
        code, again = await self.send(
            "/services/vehicle/g/g-public/sessions", restarted, **{"x-visitor-id": "v-one"}
        )
        self.assertEqual(again["x-user-id"], first["x-user-id"])

    async def test_visitorWithoutId(self) -> None:
        """
        Without C{X-Visitor-Id} the principal comes from the address and the
        user agent: the same for the same pair, another for another agent,
        and never the principal of a visitor id.
        """
        one = await self.visitor(**{"user-agent": "agent/1"})
        same = await self.visitor(**{"user-agent": "agent/1"})
        other = await self.visitor(**{"user-agent": "agent/2"})
        self.assertPublicViewer(one, "anonymous")
        self.assertEqual(one["x-user-id"], same["x-user-id"])
        self.assertNotEqual(one["x-user-id"], other["x-user-id"])
        self.assertTrue(one["x-user-id"][0].startswith("anon:"))

    async def test_invalidVisitorId(self) -> None:
        """
        An C{X-Visitor-Id} that is not one printable token is refused (400)
        before the host.
        """
        code, body = await self.send(
            "/services/vehicle/g/g-public/sessions", **{"x-visitor-id": "a b"}
        )
        self.assertEqual((code, body["error"]["code"]), (400, "invalid_visitor_id"))
        self.assertEqual(self.host.seen, [])

    async def test_account(self) -> None:
        """
        A bearer that is an account's ID token is that account: kind
        C{account}, C{cognito:<sub>}, its email and whether it is verified,
        minted viewer like a visitor.
        """
        headers = await self.visitor(authorization="Bearer " + ACCOUNT_TOKEN)
        self.assertPublicViewer(headers, "account")
        self.assertEqual(headers["x-user-id"], ["cognito:123"])
        self.assertEqual(headers["x-sophia-account-email"], ["a@example.com"])
        self.assertEqual(headers["x-sophia-account-email-verified"], ["true"])
        headers = await self.visitor(
            authorization="Bearer " + UNVERIFIED_TOKEN, **{"x-visitor-id": "v-one"}
        )
        self.assertPublicViewer(headers, "account")
        self.assertEqual(headers["x-user-id"], ["cognito:456"])
        self.assertEqual(headers["x-sophia-account-email"], ["b@example.com"])
        self.assertEqual(headers["x-sophia-account-email-verified"], ["false"])

    async def test_spoofedKindDropped(self) -> None:
        """
        Identity headers a public caller sends are dropped: a visitor who
        claims to be an account, an owner, another principal or other public
        graphs is still an anonymous viewer; a member who claims to be a
        visitor is still a member (no kind, no public graphs) in public mode.
        """
        spoofed = {
            "x-sophia-caller-kind": "account",
            "x-user-id": "cognito:123",
            "x-sophia-account-email": "a@example.com",
            "x-sophia-account-email-verified": "true",
            "x-sophia-public-graphs": "g1",
            "x-sophia-graph-role": "owner",
            "x-sophia-caller-role": "owner",
            "x-graph-id": "g1",
            "x-sophia-delegated-token": "forged",
            "x-visitor-id": "v-one",
        }
        headers = await self.visitor(**spoofed)
        self.assertPublicViewer(headers, "anonymous")
        self.assertTrue(headers["x-user-id"][0].startswith("anon:"))
        self.assertNotIn("x-sophia-account-email", headers)
        self.assertNotIn("x-sophia-account-email-verified", headers)
        headers = await self.visitor(
            authorization="Bearer " + UNVERIFIED_TOKEN,
            **{**spoofed, "x-sophia-caller-kind": "anonymous"},
        )
        self.assertPublicViewer(headers, "account")
        self.assertEqual(headers["x-sophia-account-email-verified"], ["false"])
        code, headers = await self.send(
            "/services/vehicle/g/g-public/sessions",
            authorization="Bearer " + MASTER,
            **{"x-sophia-caller-kind": "anonymous", "x-sophia-public-graphs": "g-public"},
        )
        self.assertEqual(code, 201)
        self.assertEqual(headers["x-user-id"], ["owner"])
        self.assertEqual(headers["x-sophia-graph-role"], ["owner"])
        self.assertNotIn("x-sophia-caller-kind", headers)
        self.assertNotIn("x-sophia-public-graphs", headers)

    async def test_membersUnchanged(self) -> None:
        """
        In public mode a client token keeps its grants on private graphs and
        is not a public caller.
        """
        code, headers = await self.send(
            "/services/vehicle/g/g1/sessions", authorization="Bearer edit-secret"
        )
        self.assertEqual(code, 201)
        self.assertEqual(headers["x-user-id"], ["token:t-edit"])
        self.assertEqual(headers["x-sophia-graph-role"], ["editor"])
        self.assertNotIn("x-sophia-caller-kind", headers)
        delegation = self.standIn.delegations.verify(
            headers["x-sophia-delegated-token"][0]
        )
        self.assertEqual((delegation.role, delegation.reads), ("editor", ()))

    async def test_nonPublicGraphRefused(self) -> None:
        """
        A visitor on a graph that is not public, an unknown graph or a path
        with no graph is a 401; an account there a 403; a bearer the
        gateway does not know is a 401 even on a public graph; with public mode
        off a visitor is a 401 everywhere.  None reaches the host.
        """
        cases = [
            ("/services/vehicle/g/g1/sessions", {}, 401),
            ("/services/vehicle/g/nope/sessions", {}, 401),
            ("/services/vehicle/sessions", {"x-visitor-id": "v-one"}, 401),
            ("/services/vehicle/account", {}, 401),
            ("/services/vehicle/g/g1/sessions", {"authorization": "Bearer " + ACCOUNT_TOKEN}, 403),
            ("/services/vehicle/account", {"authorization": "Bearer " + ACCOUNT_TOKEN}, 403),
            ("/services/vehicle/g/g-public/sessions", {"authorization": "Bearer expired"}, 401),
            ("/services/vehicle/g/g-public/sessions", {"authorization": "Basic eDp5"}, 401),
        ]
        for path, headers, status in cases:
            code, body = await self.send(path, **headers)
            self.assertEqual(code, status, (path, headers, body))
            self.assertIn(body["error"]["code"], ("unauthorized", "forbidden"))
        data = publicConfigData()
        data["public"]["enabled"] = False
        off = StandIn(root=self.mktemp(), config=Config.fromJSON(data), reactor=globalReactor)
        off.setServiceUrl(self.hostUrl)
        off.listen(globalReactor, 0)
        self.addCleanup(off.stopListening)
        for headers in ({}, {"authorization": "Bearer " + ACCOUNT_TOKEN}):
            code, _ = await self.send("/services/vehicle/g/g-public/sessions", off, **headers)
            self.assertEqual(code, 401)
        self.assertEqual(self.host.seen, [])

    async def test_modelKeyOnlyWithAcceptsModelKey(self) -> None:
        """
        A public caller's C{X-Model-Key} reaches the host when the manifest
        says C{acceptsModelKey}, and is dropped when it does not.
        """
        headers = await self.visitor(**{"x-model-key": "sk-or-visitor-1"})
        self.assertEqual(headers["x-model-key"], ["sk-or-visitor-1"])
        closed = self.makeStandIn(acceptsModelKey=False)
        code, headers = await self.send(
            "/services/vehicle/g/g-public/sessions", closed, **{"x-model-key": "sk-or-visitor-1"}
        )
        self.assertEqual(code, 201)
        self.assertEqual(headers["x-sophia-caller-kind"], ["anonymous"])
        self.assertNotIn("x-model-key", headers)

    async def test_noDelegationUnlessManifestSays(self) -> None:
        """
        Without C{delegateCaller} a public caller gets no delegation token.
        """
        standIn = self.makeStandIn(delegateCaller=False)
        code, headers = await self.send("/services/vehicle/g/g-public/x", standIn)
        self.assertEqual(code, 201)
        self.assertNotIn("x-sophia-delegated-token", headers)

    async def test_visitorDelegationOnMcp(self) -> None:
        """
        The token minted for a visitor reads another public graph on C{/mcp}
        and cannot write.
        """
        self.standIn.store.createDocument("g-pub2", "Cows", "cows")
        headers = await self.visitor(**{"x-visitor-id": "v-one"})
        token = headers["x-sophia-delegated-token"][0]

        async def call(name: str, arguments: dict[str, Any]) -> Any:
            message = {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "tools/call",
                "params": {"name": name, "arguments": arguments},
            }
            response = await self.client.post(
                self.standIn.mcpUrl,
                data=json.dumps(message).encode(),
                headers={
                    b"authorization": "Bearer " + token,
                    b"content-type": "application/json",
                },
            )
            result = (await response.json())["result"]
            return result["isError"], json.loads(result["content"][0]["text"])

        isError, envelope = await call("list_documents", {"graphId": "g-pub2"})
        self.assertFalse(isError, envelope)
        self.assertIn("cows", json.dumps(envelope))
        isError, envelope = await call("create_document", {"title": "x"})
        self.assertEqual((isError, envelope["error"]["code"]), (True, "forbidden"))
