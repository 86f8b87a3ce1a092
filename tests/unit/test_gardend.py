"""
Tests for L{vehicle_local.standin}: the stand-in's configuration, delegation tokens,
C{/mcp} (raw JSON-RPC and the official MCP SDK client), the folder store and
the gateway (header stripping and minting, graph paths, streaming, public
mode's visitors and accounts).
"""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any, Callable

from treq.testing import StubTreq
from twisted.internet.task import Clock
from twisted.internet.testing import MemoryReactorClock
from twisted.trial.unittest import SynchronousTestCase

from vehicle_local.standin import (
    Config,
    ConfigError,
    DelegationRefused,
    Delegations,
    StandIn,
    freeLoopbackPort,
)
from vehicle_local.standin.__main__ import Options

from tests.support.gardend import (
    ACCOUNT_TOKEN,
    MASTER,
    SECRET,
    configData,
    makeConfig,
    makePublicConfig,
    publicConfigData,
)


class ConfigTests(SynchronousTestCase):
    """
    L{Config.fromJSON}.
    """

    def test_parses(self) -> None:
        """
        Tokens, grants, graphs and the service's flags are read, with the
        documented defaults.
        """
        config = makeConfig()
        self.assertEqual(config.masterKey, MASTER)
        self.assertEqual([t.id for t in config.tokens], ["t-view", "t-edit"])
        self.assertEqual(config.tokens[1].highestRole(), "editor")
        self.assertTrue(config.service.delegateCaller)
        self.assertFalse(config.service.acceptsModelKey)
        self.assertEqual(config.knownGraphs(), {"g1", "g2"})

    def test_secretsNotInRepr(self) -> None:
        """
        Neither the master key, a token's secret nor the service secret shows
        in the configuration's C{repr}.
        """
        text = repr(makeConfig())
        for secret in (MASTER, "view-secret", SECRET):
            self.assertNotIn(secret, text)

    def test_secretsFromEnvironment(self) -> None:
        """
        A missing master key or service secret is read from the environment.
        """
        data = configData()
        del data["masterKey"]
        del data["service"]["secret"]
        config = Config.fromJSON(
            data,
            {"GARDEND_MASTER_KEY": "mk", "MNEMOSYNE_INTERNAL_SERVICE_SECRET": "ss"},
        )
        self.assertEqual((config.masterKey, config.service.secret), ("mk", "ss"))

    def test_badRole(self) -> None:
        """
        A grant with an unknown role is refused.
        """
        data = configData()
        data["tokens"][0]["grants"] = {"g1": "admin"}
        self.assertRaises(ConfigError, Config.fromJSON, data)

    def test_missingService(self) -> None:
        """
        A configuration without C{service} is refused.
        """
        data = configData()
        del data["service"]
        self.assertRaises(ConfigError, Config.fromJSON, data)

    def test_public(self) -> None:
        """
        C{public} is read: its graphs (known graphs too) and accounts, whose
        principal is C{cognito:<sub>} and whose ID token is in no C{repr};
        without it public mode is off.
        """
        config = makePublicConfig()
        self.assertTrue(config.public.enabled)
        self.assertEqual(config.public.graphs, ("g-public", "g-pub2"))
        self.assertEqual(config.knownGraphs(), {"g1", "g2", "g-public", "g-pub2"})
        verified, unverified = config.public.accounts
        self.assertEqual(
            (verified.principal, verified.email, verified.emailVerified),
            ("cognito:123", "a@example.com", True),
        )
        self.assertFalse(unverified.emailVerified)
        self.assertTrue(config.public.serves("g-public"))
        self.assertFalse(config.public.serves("g1"))
        self.assertNotIn(ACCOUNT_TOKEN, repr(config))
        self.assertFalse(makeConfig().public.enabled)
        self.assertFalse(makeConfig().public.serves("g1"))

    def test_publicMalformed(self) -> None:
        """
        Public mode with no graph, a non-boolean C{emailVerified}, an account
        without C{sub}, two accounts with one token, or an account token that
        is also a member's credential, is refused.
        """
        def broken(change: Any) -> dict[str, Any]:
            data = publicConfigData()
            change(data["public"])
            return data

        cases = [
            lambda p: p.update(graphs=[]),
            lambda p: p["accounts"][0].update(emailVerified="yes"),
            lambda p: p["accounts"][0].pop("sub"),
            lambda p: p["accounts"][1].update(token=ACCOUNT_TOKEN),
            lambda p: p["accounts"][0].update(token=MASTER),
            lambda p: p["accounts"][0].update(token="view-secret"),
            lambda p: p.update(enabled="on"),
        ]
        for change in cases:
            self.assertRaises(ConfigError, Config.fromJSON, broken(change))

    def test_commandLine(self) -> None:
        """
        C{python -m vehicle_local.standin} requires C{--config} and C{--root} and
        parses the file.
        """
        path = Path(self.mktemp())
        path.write_text(json.dumps(configData()))
        options = Options()
        options.parseOptions(["--config", str(path), "--root", "r", "--port", "5"])
        self.assertEqual(options["port"], 5)
        self.assertEqual(options["parsed"].masterKey, MASTER)
        self.assertRaises(Exception, Options().parseOptions, ["--root", "r"])


def picks(*ports: int) -> tuple[Callable[[int, int], int], list[tuple[int, int]]]:
    """
    A chooser for L{freeLoopbackPort} that answers C{ports} in turn, and
    the ranges it was asked for.
    """
    asked: list[tuple[int, int]] = []
    left = list(ports)

    def choose(low: int, high: int) -> int:
        asked.append((low, high))
        return left.pop(0)

    return choose, asked


def unclaimed() -> int:
    """
    A port free now that L{freeLoopbackPort} has not handed out (one the
    kernel picks).
    """
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class FreeLoopbackPortTests(SynchronousTestCase):
    """
    L{freeLoopbackPort} picks a child's port where no other process's
    listener on port 0 can land on it.
    """

    def rangeFile(self, text: str) -> Path:
        path = Path(self.mktemp())
        path.write_text(text)
        return path

    def test_belowTheEphemeralRange(self) -> None:
        """
        The port is drawn from below the first port the kernel hands out
        itself, as the kernel's range file names it.
        """
        for _ in range(20):
            port = freeLoopbackPort(rangeFile=self.rangeFile("20000\t60999\n"))
            self.assertTrue(10000 <= port < 20000, port)
        choose, asked = picks(unclaimed())
        freeLoopbackPort(choose, self.rangeFile("20000\t60999\n"))
        self.assertEqual(asked, [(10000, 20000)])

    def test_unreadableRange(self) -> None:
        """
        Without the kernel's range file, the range most systems use is
        kept clear.
        """
        choose, asked = picks(unclaimed(), unclaimed())
        freeLoopbackPort(choose, Path(self.mktemp()))
        freeLoopbackPort(choose, self.rangeFile("nonsense"))
        self.assertEqual(asked, [(10000, 49152)] * 2)

    def test_aTakenPortIsPassedOver(self) -> None:
        """
        A port something listens on is not handed out; the next pick is.
        """
        free = unclaimed()
        with socket.socket() as listener:
            listener.bind(("127.0.0.1", 0))
            listener.listen(1)
            taken = listener.getsockname()[1]
            choose, asked = picks(taken, free)
            self.assertEqual(freeLoopbackPort(choose), free)
        self.assertEqual(len(asked), 2)

    def test_neverTwice(self) -> None:
        """
        A port handed out once is not handed out again by this process,
        though nothing listens on it yet.
        """
        first, second = unclaimed(), unclaimed()
        self.assertEqual(freeLoopbackPort(picks(first)[0]), first)
        choose, asked = picks(first, second)
        self.assertEqual(freeLoopbackPort(choose), second)
        self.assertEqual(len(asked), 2)

    def test_aNarrowRange(self) -> None:
        """
        When the kernel's range leaves too few ports below it, the kernel
        picks (port 0).
        """
        choose, asked = picks()
        port = freeLoopbackPort(choose, self.rangeFile("1024 60999"))
        self.assertNotEqual(port, 0)
        self.assertEqual(asked, [])


class DelegationTests(SynchronousTestCase):
    """
    L{Delegations}: minting and stateless verification.
    """

    def setUp(self) -> None:
        self.clock = Clock()
        self.clock.advance(1_000_000)
        self.delegations = Delegations(clock=self.clock)

    def test_roundTrip(self) -> None:
        """
        A minted token verifies to its principal, graph, role and service.
        """
        token = self.delegations.mint("token:t1", "g1", "editor", "vehicle")
        delegation = self.delegations.verify(token)
        self.assertEqual(
            (delegation.principal, delegation.graphId, delegation.role, delegation.via),
            ("token:t1", "g1", "editor", "service:vehicle"),
        )

    def test_readsOtherGraphs(self) -> None:
        """
        A viewer's token may also read other graphs (a public caller's, every
        public graph); they round-trip without its own graph; a member's
        token reads none; only a viewer's may read others.
        """
        token = self.delegations.mint(
            "anon:x", "g-public", "viewer", "vehicle", reads=("g-public", "g-pub2")
        )
        delegation = self.delegations.verify(token)
        self.assertEqual(
            (delegation.graphId, delegation.role, delegation.reads),
            ("g-public", "viewer", ("g-pub2",)),
        )
        plain = self.delegations.mint("token:t1", "g1", "editor", "vehicle")
        self.assertEqual(self.delegations.verify(plain).reads, ())
        self.assertRaises(
            ValueError,
            self.delegations.mint,
            "owner",
            "g1",
            "owner",
            "vehicle",
            reads=("g2",),
        )

    def test_expiresAfterAnHour(self) -> None:
        """
        A token is good for an hour and refused after.
        """
        token = self.delegations.mint("owner", "g1", "owner", "vehicle")
        self.clock.advance(3599)
        self.delegations.verify(token)
        self.clock.advance(1)
        e = self.assertRaises(DelegationRefused, self.delegations.verify, token)
        self.assertEqual(e.args[0], "token_expired")

    def test_otherKey(self) -> None:
        """
        A token signed with another key (another gardend) is refused.
        """
        token = Delegations(clock=self.clock).mint("owner", "g1", "owner", "vehicle")
        e = self.assertRaises(DelegationRefused, self.delegations.verify, token)
        self.assertEqual(e.args[0], "invalid_token")

    def test_tampered(self) -> None:
        """
        Changing the payload (here: viewer to owner) breaks the signature.
        """
        import base64

        token = self.delegations.mint("owner", "g1", "viewer", "vehicle")
        prefix, body, signature = token.split(".")
        payload = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
        payload["role"] = "owner"
        forged = (
            base64.urlsafe_b64encode(json.dumps(payload).encode()).rstrip(b"=").decode()
        )
        self.assertRaises(
            DelegationRefused, self.delegations.verify, f"{prefix}.{forged}.{signature}"
        )
        self.assertRaises(DelegationRefused, self.delegations.verify, "garbage")


class MCPTests(SynchronousTestCase):
    """
    C{/mcp} spoken in raw JSON-RPC through L{StubTreq}, on a fake clock.
    """

    def setUp(self) -> None:
        self.reactor = MemoryReactorClock()
        self.reactor.advance(1_800_000_000)
        self.root = Path(self.mktemp())
        self.standIn = StandIn(
            root=self.root, config=makeConfig(), reactor=self.reactor
        )
        self.stub = StubTreq(self.standIn.resource())
        self.ids = 0

    def post(
        self, token: str | None, body: Any, headers: dict[str, str] | None = None
    ) -> tuple[int, Any]:
        allHeaders = {
            "content-type": "application/json",
            "accept": "application/json, text/event-stream",
        }
        if token is not None:
            allHeaders["authorization"] = "Bearer " + token
        allHeaders.update(headers or {})
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        response = self.successResultOf(
            # Header names in bytes, as Twisted keeps them (python -b).
            self.stub.post("http://gardend/mcp", data=data,
                           headers={k.encode("ascii"): v for k, v in allHeaders.items()})
        )
        content = self.successResultOf(self.stub.content(response))
        return response.code, (json.loads(content) if content else None)

    def rpc(self, token: str, method: str, params: Any = None) -> dict[str, Any]:
        self.ids += 1
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": self.ids, "method": method}
        if params is not None:
            message["params"] = params
        code, body = self.post(token, message)
        self.assertEqual(code, 200)
        self.assertEqual(body["id"], self.ids)
        return body  # type: ignore[no-any-return]

    def call(
        self, token: str, tool: str, /, **arguments: Any
    ) -> tuple[bool, dict[str, Any]]:
        """
        Call a tool; (isError, the parsed envelope).
        """
        result = self.rpc(token, "tools/call", {"name": tool, "arguments": arguments})[
            "result"
        ]
        self.assertEqual(result["content"][0]["type"], "text")
        return result["isError"], json.loads(result["content"][0]["text"])

    def test_initialize(self) -> None:
        """
        C{initialize} echoes a supported protocol version, offers tools and
        names the server; an unknown version gets the newest.
        """
        token = self.standIn.mintDelegation("owner", "g1", "owner")
        result = self.rpc(
            token,
            "initialize",
            {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "t", "version": "0"},
            },
        )["result"]
        self.assertEqual(result["protocolVersion"], "2025-06-18")
        self.assertIn("tools", result["capabilities"])
        self.assertIn("name", result["serverInfo"])
        result = self.rpc(token, "initialize", {"protocolVersion": "1999-01-01"})[
            "result"
        ]
        self.assertEqual(result["protocolVersion"], "2025-11-25")

    def test_notificationAccepted(self) -> None:
        """
        A notification is answered 202 with no body.
        """
        token = self.standIn.mintDelegation("owner", "g1", "owner")
        code, body = self.post(
            token, {"jsonrpc": "2.0", "method": "notifications/initialized"}
        )
        self.assertEqual((code, body), (202, None))

    def test_pingAndUnknownMethod(self) -> None:
        """
        C{ping} answers an empty result; an unknown method a JSON-RPC error.
        """
        token = self.standIn.mintDelegation("owner", "g1", "owner")
        self.assertEqual(self.rpc(token, "ping")["result"], {})
        self.assertEqual(self.rpc(token, "resources/list")["error"]["code"], -32601)

    def test_malformed(self) -> None:
        """
        A body that is not JSON, or not JSON-RPC 2.0, is a 400.
        """
        token = self.standIn.mintDelegation("owner", "g1", "owner")
        code, body = self.post(token, b"{nope")
        self.assertEqual((code, body["error"]["code"]), (400, -32700))
        code, body = self.post(token, [{"jsonrpc": "2.0", "id": 1, "method": "ping"}])
        self.assertEqual(code, 400)

    def test_unauthorized(self) -> None:
        """
        No token, an unknown token, or a client token (not a delegation) is a
        401; the master key is accepted as the operator's.
        """
        ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
        for token in (None, "nonsense", "edit-secret"):
            code, body = self.post(token, ping)
            self.assertEqual(code, 401, token)
            self.assertEqual(body["error"]["code"], -32001)
        self.assertEqual(self.post(MASTER, ping)[0], 200)

    def test_getNotAllowed(self) -> None:
        """
        C{GET /mcp} (a server-to-client stream) is not offered: 405.
        """
        response = self.successResultOf(self.stub.get("http://gardend/mcp"))
        self.assertEqual(response.code, 405)
        self.assertEqual(response.headers.getRawHeaders(b"allow"), [b"POST"])

    def test_offline(self) -> None:
        """
        While offline every POST is a 503; back online it answers again.
        """
        token = self.standIn.mintDelegation("owner", "g1", "owner")
        self.standIn.setOffline(True)
        self.assertEqual(
            self.post(token, {"jsonrpc": "2.0", "id": 1, "method": "ping"})[0], 503
        )
        self.standIn.setOffline(False)
        self.assertEqual(
            self.post(token, {"jsonrpc": "2.0", "id": 1, "method": "ping"})[0], 200
        )

    def test_tokenExpiry(self) -> None:
        """
        A delegation token works for an hour of the injected clock, then is
        refused with C{token_expired}.
        """
        token = self.standIn.mintDelegation("owner", "g1", "owner")
        ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
        self.reactor.advance(3599)
        self.assertEqual(self.post(token, ping)[0], 200)
        self.reactor.advance(2)
        code, body = self.post(token, ping)
        self.assertEqual(code, 401)
        self.assertEqual(body["error"]["data"], {"code": "token_expired"})

    def test_toolsListWriter(self) -> None:
        """
        An editor sees every tool, each with its required scope, and a bound
        token's schemas offer no graph argument.
        """
        token = self.standIn.mintDelegation("token:t-edit", "g1", "editor")
        tools = {t["name"]: t for t in self.rpc(token, "tools/list")["result"]["tools"]}
        self.assertEqual(
            set(tools),
            {
                "read_document",
                "list_documents",
                "get_workspace",
                "search_documents",
                "create_folder",
                "create_document",
                "write_document",
                "rename",
                "create_wires",
            },
        )
        self.assertEqual(
            tools["read_document"]["_meta"]["sophia"]["local"]["requiredScopes"],
            ["documents.read"],
        )
        self.assertEqual(
            tools["write_document"]["_meta"]["sophia"]["local"]["requiredScopes"],
            ["documents.write"],
        )
        for tool in tools.values():
            schema = tool["inputSchema"]
            self.assertNotIn("graphId", schema["properties"])
            self.assertNotIn("graph_id", schema.get("required", []))
        operator = {
            t["name"]: t for t in self.rpc(MASTER, "tools/list")["result"]["tools"]
        }
        self.assertIn("graph_id", operator["rename"]["inputSchema"]["required"])

    def usePublic(self) -> None:
        """
        Rebuild the stand-in in public mode, with a document in each public
        graph (written by the operator) and one in the private g1.
        """
        self.standIn = StandIn(
            root=self.root, config=makePublicConfig(), reactor=self.reactor
        )
        self.stub = StubTreq(self.standIn.resource())
        for graph in ("g-public", "g-pub2", "g1"):
            isError, _ = self.call(
                MASTER, "create_document", graphId=graph, title=graph, documentId="d"
            )
            self.assertFalse(isError)
            isError, _ = self.call(
                MASTER, "write_document", graphId=graph, documentId="d",
                content="in " + graph,
            )
            self.assertFalse(isError)

    def test_publicTokenReadsEveryPublicGraph(self) -> None:
        """
        A public caller's token reads its own graph by default and any
        public graph it names; a graph that is not public, and every write
        (even on its own graph), are refused.
        """
        self.usePublic()
        audited = len(self.standIn.audit())
        token = self.standIn.mintDelegation(
            "anon:v", "g-public", "viewer", reads=("g-public", "g-pub2")
        )
        isError, envelope = self.call(token, "read_document", documentId="d")
        self.assertFalse(isError)
        self.assertIn("in g-public", json.dumps(envelope))
        isError, envelope = self.call(
            token, "read_document", graphId="g-pub2", documentId="d"
        )
        self.assertFalse(isError)
        self.assertIn("in g-pub2", json.dumps(envelope))
        isError, envelope = self.call(
            token, "read_document", graphId="g1", documentId="d"
        )
        self.assertEqual((isError, envelope["error"]["code"]), (True, "graph_mismatch"))
        for graph in ("g-public", "g-pub2"):
            isError, envelope = self.call(
                token, "create_document", graphId=graph, title="x", documentId="w"
            )
            self.assertEqual((isError, envelope["error"]["code"]), (True, "forbidden"))
            self.assertIsNone(self.standIn.document(graph, "w"))
        self.assertEqual(len(self.standIn.audit()), audited)

    def test_publicTokenListing(self) -> None:
        """
        A public caller's token lists the reader tools, each offering its
        graph argument as optional and one of the public graphs (its own
        first); a member's bound token offers none.
        """
        self.usePublic()
        token = self.standIn.mintDelegation(
            "anon:v", "g-pub2", "viewer", reads=("g-public", "g-pub2")
        )
        tools = self.rpc(token, "tools/list")["result"]["tools"]
        self.assertEqual(len(tools), 4)
        for tool in tools:
            schema = tool["inputSchema"]
            self.assertEqual(schema["properties"]["graphId"]["enum"], ["g-pub2", "g-public"])
            self.assertNotIn("graphId", schema.get("required", []))
        member = self.standIn.mintDelegation("token:t-view", "g1", "viewer")
        for tool in self.rpc(member, "tools/list")["result"]["tools"]:
            self.assertNotIn("graphId", tool["inputSchema"]["properties"])

    def test_toolsListViewer(self) -> None:
        """
        A viewer's token lists only the reader tools.
        """
        token = self.standIn.mintDelegation("token:t-view", "g1", "viewer")
        names = {t["name"] for t in self.rpc(token, "tools/list")["result"]["tools"]}
        self.assertEqual(
            names,
            {"read_document", "list_documents", "get_workspace", "search_documents"},
        )

    def test_viewerCannotWrite(self) -> None:
        """
        A viewer's write is refused and leaves no document and no audit.
        """
        token = self.standIn.mintDelegation("token:t-view", "g1", "viewer")
        isError, envelope = self.call(
            token, "create_document", title="x", documentId="d"
        )
        self.assertTrue(isError)
        self.assertEqual(
            envelope,
            {
                "ok": False,
                "error": {"code": "forbidden", "message": envelope["error"]["message"]},
            },
        )
        self.assertIsNone(self.standIn.document("g1", "d"))
        self.assertEqual(self.standIn.audit(), [])

    def test_graphBinding(self) -> None:
        """
        A call naming another graph (either casing) is refused; naming the
        token's graph or none at all reaches the token's graph.
        """
        token = self.standIn.mintDelegation("owner", "g1", "owner")
        for key in ("graphId", "graph_id"):
            isError, envelope = self.call(
                token, "create_document", title="x", documentId="d", **{key: "g2"}
            )
            self.assertTrue(isError)
            self.assertEqual(envelope["error"]["code"], "graph_mismatch")
        self.assertIsNone(self.standIn.document("g2", "d"))
        isError, _ = self.call(token, "create_document", title="x", documentId="d")
        self.assertFalse(isError)
        isError, _ = self.call(
            token, "write_document", graph_id="g1", document_id="d", content="hi"
        )
        self.assertFalse(isError)
        self.assertEqual(self.standIn.document("g1", "d")["content"], "hi")

    def test_graphArgumentNotText(self) -> None:
        """
        A graph argument that is not a string (an array, a number) is
        refused as an invalid argument, the token's graph untouched.
        """
        token = self.standIn.mintDelegation("owner", "g1", "owner")
        for value in (["g1"], 7):
            isError, envelope = self.call(
                token, "create_document", title="x", documentId="d", graphId=value
            )
            self.assertEqual((isError, envelope["error"]["code"]), (True, "invalid_argument"))
        self.assertIsNone(self.standIn.document("g1", "d"))

    def test_operatorNamesGraph(self) -> None:
        """
        The master key acts on any known graph it names, and must name one.
        """
        isError, envelope = self.call(MASTER, "create_document", title="x")
        self.assertEqual((isError, envelope["error"]["code"]), (True, "graph_required"))
        isError, envelope = self.call(
            MASTER, "create_document", graphId="nope", title="x"
        )
        self.assertEqual((isError, envelope["error"]["code"]), (True, "not_found"))
        isError, envelope = self.call(
            MASTER, "create_document", graphId="g2", title="x", documentId="d"
        )
        self.assertFalse(isError)
        self.assertEqual(self.standIn.audit()[0]["actor"], "owner")
        self.assertNotIn("via", self.standIn.audit()[0])

    def test_auditActorAndVia(self) -> None:
        """
        Every write is audited with the delegated caller as actor, C{via}
        C{service:vehicle}, the tool, graph and document; the token appears in
        no file under the root.
        """
        token = self.standIn.mintDelegation("token:t-edit", "g1", "editor")
        self.call(token, "create_folder", name="_sophia", folderId="agent-scratchpad")
        self.call(
            token,
            "create_document",
            title="T",
            documentId="doc-1",
            parentId="agent-scratchpad",
        )
        self.call(token, "write_document", documentId="doc-1", content="# hello")
        self.call(token, "read_document", documentId="doc-1")
        audit = self.standIn.audit()
        self.assertEqual(
            [a["tool"] for a in audit],
            ["create_folder", "create_document", "write_document"],
        )
        for record in audit:
            self.assertEqual(record["actor"], "token:t-edit")
            self.assertEqual(record["via"], "service:vehicle")
            self.assertEqual(record["graphId"], "g1")
            self.assertIn("at", record)
        self.assertEqual(audit[2]["documentId"], "doc-1")
        for path in self.root.rglob("*"):
            if path.is_file():
                text = path.read_text()
                self.assertNotIn(token, text)
                self.assertNotIn(token.split(".")[2], text)

    def test_documentLifecycle(self) -> None:
        """
        Create, refuse a second create, write (revision bumps), read back the
        markdown, rename; the file on disk says the same.
        """
        token = self.standIn.mintDelegation("owner", "g1", "owner")
        isError, envelope = self.call(
            token, "create_document", title="One", documentId="d1"
        )
        self.assertEqual(envelope["document"]["revision"], 1)
        isError, envelope = self.call(
            token, "create_document", title="One", documentId="d1"
        )
        self.assertEqual((isError, envelope["error"]["code"]), (True, "already_exists"))
        isError, envelope = self.call(
            token,
            "write_document",
            documentId="d1",
            content="# Hi\nthere",
            format="markdown",
        )
        self.assertEqual((isError, envelope["document"]["revision"]), (False, 2))
        isError, envelope = self.call(
            token, "write_document", documentId="d1", content="x", expectedRevision=1
        )
        self.assertEqual(envelope["error"]["code"], "revision_conflict")
        isError, envelope = self.call(
            token, "read_document", documentId="d1", format="markdown"
        )
        self.assertEqual(envelope["document"]["content"], "# Hi\nthere")
        isError, envelope = self.call(
            token, "rename", entity_type="document", entity_id="d1", new_name="Two"
        )
        self.assertFalse(isError)
        stored = json.loads(
            (self.root / "graphs" / "g1" / "documents" / "d1.json").read_text()
        )
        self.assertEqual(
            (stored["title"], stored["content"], stored["trashed"]),
            ("Two", "# Hi\nthere", False),
        )
        isError, envelope = self.call(
            token, "write_document", documentId="missing", content="x"
        )
        self.assertEqual(envelope["error"]["code"], "not_found")
        isError, envelope = self.call(token, "write_document", documentId="d1")
        self.assertEqual(envelope["error"]["code"], "invalid_argument")

    def test_recordBytes(self) -> None:
        """
        The workspace's files keep the bytes every stand-in has written:
        a folder and a document as indented JSON of sorted keys, a wire and
        an audit line as compact JSON of sorted keys; a tool's answer lists
        a stored record's keys in that order.
        """
        token = self.standIn.mintDelegation("u", "g1", "editor")
        self.call(token, "create_folder", name="F", folderId="f1", order=2)
        self.call(token, "create_document", title="T", documentId="d1", parentId="f1")
        self.call(token, "write_document", documentId="d1", content="hi")
        self.call(token, "create_wires", sourceDocumentId="d1", targetDocumentId="d1",
                  predicate="supports")
        graph = self.root / "graphs" / "g1"
        at = "2027-01-15T08:00:00.000Z"
        self.assertEqual(
            (graph / "folders" / "f1.json").read_text(),
            '{\n  "id": "f1",\n  "name": "F",\n  "order": 2,\n  "parentId": null,\n'
            '  "section": "documents"\n}',
        )
        self.assertEqual(
            (graph / "documents" / "d1.json").read_text(),
            '{\n  "content": "hi",\n  "format": "markdown",\n  "id": "d1",\n'
            '  "parentId": "f1",\n  "revision": 2,\n  "title": "T",\n  "trashed": false,\n'
            f'  "updatedAt": "{at}"\n}}',
        )
        [wire] = (graph / "wires.jsonl").read_text().splitlines()
        self.assertRegex(
            wire,
            rf'^{{"createdAt":"{at}","id":"wire-[0-9a-f]{{12}}","predicate":"supports",'
            r'"sourceDocumentId":"d1","targetDocumentId":"d1"}$',
        )
        self.assertEqual(
            (self.root / "audit.jsonl").read_text().splitlines()[-1],
            f'{{"actor":"u","at":"{at}","documentId":"d1","graphId":"g1",'
            '"tool":"create_wires","via":"service:vehicle"}',
        )
        result = self.rpc(token, "tools/call", {"name": "read_document",
                                                "arguments": {"documentId": "d1"}})
        self.assertEqual(
            result["result"]["content"][0]["text"],
            '{"ok": true, "document": {"format": "markdown", "id": "d1", "parentId": "f1", '
            f'"revision": 2, "title": "T", "trashed": false, "updatedAt": "{at}", '
            '"content": "hi", "totalChars": 2}}',
        )

    def test_folders(self) -> None:
        """
        C{create_folder} refuses a taken id and an unknown parent; the
        workspace shows the tree with its documents; a folder renames.
        """
        token = self.standIn.mintDelegation("owner", "g1", "owner")
        self.assertFalse(
            self.call(
                token, "create_folder", name="_sophia", folderId="agent-scratchpad"
            )[0]
        )
        isError, envelope = self.call(
            token, "create_folder", name="_sophia", folderId="agent-scratchpad"
        )
        self.assertEqual(envelope["error"]["code"], "already_exists")
        isError, envelope = self.call(
            token, "create_folder", name="x", parentId="nowhere"
        )
        self.assertEqual(envelope["error"]["code"], "not_found")
        self.call(
            token,
            "create_folder",
            name="Conversations",
            folderId="sophia-conversations",
            parentId="agent-scratchpad",
        )
        self.call(
            token,
            "create_document",
            title="c",
            documentId="c1",
            parentId="sophia-conversations",
        )
        self.call(
            token,
            "rename",
            entity_type="folder",
            entity_id="sophia-conversations",
            new_name="Chats",
        )
        _, workspace = self.call(token, "get_workspace")
        (top,) = workspace["folders"]
        self.assertEqual(top["id"], "agent-scratchpad")
        (inner,) = top["folders"]
        self.assertEqual(
            (inner["name"], [d["id"] for d in inner["documents"]]), ("Chats", ["c1"])
        )
        self.assertEqual(
            self.standIn.folder("g1", "sophia-conversations")["parentId"],
            "agent-scratchpad",
        )

    def test_trashedStillWritable(self) -> None:
        """
        A trashed document is left out of listings and search but still takes
        writes, and stays trashed.
        """
        token = self.standIn.mintDelegation("owner", "g1", "owner")
        self.call(token, "create_document", title="Findable", documentId="d1")
        self.call(token, "write_document", documentId="d1", content="needle here")
        self.assertEqual(
            len(self.call(token, "search_documents", query="NEEDLE")[1]["results"]), 1
        )
        self.standIn.trash("g1", "d1")
        self.assertEqual(self.call(token, "list_documents")[1]["documents"], [])
        self.assertEqual(
            self.call(token, "search_documents", query="needle")[1]["results"], []
        )
        isError, envelope = self.call(
            token, "write_document", documentId="d1", content="again"
        )
        self.assertFalse(isError)
        document = self.standIn.document("g1", "d1")
        self.assertEqual(
            (document["content"], document["trashed"], document["revision"]),
            ("again", True, 3),
        )

    def test_wires(self) -> None:
        """
        C{create_wires} links existing documents with a known predicate, and
        refuses unknown documents or predicates.
        """
        token = self.standIn.mintDelegation("owner", "g1", "owner")
        self.call(token, "create_document", title="a", documentId="a")
        self.call(token, "create_document", title="b", documentId="b")
        isError, _ = self.call(
            token,
            "create_wires",
            sourceDocumentId="b",
            targetDocumentId="a",
            predicate="divergesFrom",
        )
        self.assertFalse(isError)
        self.assertEqual(
            [
                (w["sourceDocumentId"], w["targetDocumentId"], w["predicate"])
                for w in self.standIn.wires("g1")
            ],
            [("b", "a", "divergesFrom")],
        )
        isError, envelope = self.call(
            token,
            "create_wires",
            sourceDocumentId="b",
            targetDocumentId="zz",
            predicate="divergesFrom",
        )
        self.assertEqual(envelope["error"]["code"], "not_found")
        isError, envelope = self.call(
            token,
            "create_wires",
            sourceDocumentId="b",
            targetDocumentId="a",
            predicate="likes",
        )
        self.assertEqual(envelope["error"]["code"], "invalid_argument")
        self.assertEqual(len(self.standIn.wires("g1")), 1)

    def test_badIds(self) -> None:
        """
        An id that could escape the graph's directory is refused.
        """
        token = self.standIn.mintDelegation("owner", "g1", "owner")
        isError, envelope = self.call(
            token, "create_document", title="x", documentId="../../escape"
        )
        self.assertEqual(
            (isError, envelope["error"]["code"]), (True, "invalid_argument")
        )
        self.assertFalse((self.root / "escape.json").exists())

    def test_unknownTool(self) -> None:
        """
        An unknown tool is a JSON-RPC invalid-params error.
        """
        token = self.standIn.mintDelegation("owner", "g1", "owner")
        body = self.rpc(
            token, "tools/call", {"name": "delete_everything", "arguments": {}}
        )
        self.assertEqual(body["error"]["code"], -32602)
