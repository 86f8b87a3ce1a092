"""
Tests for L{vehicle.gardend}: the stand-in's configuration, delegation tokens,
C{/mcp} (raw JSON-RPC and the official MCP SDK client), the folder store and
the front door (header stripping and minting, graph paths, streaming, public
mode's visitors and accounts).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any, ClassVar

from attrs import define, field
from klein import Klein
from treq.client import HTTPClient
from treq.testing import StubTreq
from twisted.internet import reactor as globalReactor
from twisted.internet import threads
from twisted.internet.defer import Deferred
from twisted.internet.protocol import Protocol
from twisted.internet.task import Clock
from twisted.internet.testing import MemoryReactorClock
from twisted.trial.unittest import SynchronousTestCase, TestCase
from twisted.web.client import Agent, HTTPConnectionPool
from twisted.web.server import Site

from vehicle.gardend import Config, ConfigError, DelegationRefused, Delegations, StandIn
from vehicle.gardend.__main__ import Options

MASTER = "master-key-0123"
SECRET = "internal-secret-4567"


def configData(**service: Any) -> dict[str, Any]:
    """
    A configuration document: g1 and g2; t-view views g1, t-edit edits g1
    and views g2.
    """
    return {
        "masterKey": MASTER,
        "tokens": [
            {"id": "t-view", "secret": "view-secret", "grants": {"g1": "viewer"}},
            {
                "id": "t-edit",
                "secret": "edit-secret",
                "grants": {"g1": "editor", "g2": "viewer"},
            },
        ],
        "graphs": ["g1", "g2"],
        "service": {"url": "http://127.0.0.1:9", "secret": SECRET, **service},
    }


def makeConfig(**service: Any) -> Config:
    return Config.fromJSON(configData(**service))


#: Sophia accounts' ID tokens (the stand-in's Cognito).
ACCOUNT_TOKEN = "id-token-verified-0001"
UNVERIFIED_TOKEN = "id-token-unverified-0002"


def publicConfigData(**service: Any) -> dict[str, Any]:
    """
    L{configData} in public mode: g-public and g-pub2 are public (g1 and g2
    are not); two accounts, one with a verified email; the manifest accepts
    a model key unless C{service} says otherwise.
    """
    data = configData(**{"acceptsModelKey": True, **service})
    data["public"] = {
        "enabled": True,
        "graphs": ["g-public", "g-pub2"],
        "accounts": [
            {
                "token": ACCOUNT_TOKEN,
                "sub": "123",
                "email": "a@example.com",
                "emailVerified": True,
            },
            {"token": UNVERIFIED_TOKEN, "sub": "456", "email": "b@example.com"},
        ],
    }
    return data


def makePublicConfig(**service: Any) -> Config:
    return Config.fromJSON(publicConfigData(**service))


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
        C{python -m vehicle.gardend} requires C{--config} and C{--root} and
        parses the file.
        """
        path = Path(self.mktemp())
        path.write_text(json.dumps(configData()))
        options = Options()
        options.parseOptions(["--config", str(path), "--root", "r", "--port", "5"])
        self.assertEqual(options["port"], 5)
        self.assertEqual(options["parsed"].masterKey, MASTER)
        self.assertRaises(Exception, Options().parseOptions, ["--root", "r"])


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
        self.assertEqual(response.headers.getRawHeaders("allow"), ["POST"])

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


class FrontDoorTests(TestCase):
    """
    The front door on loopback, forwarding to a L{FakeHost} on loopback.
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
            headers=headers,
            data=b'{"a": 1}' if method == "POST" else None,
        )
        return response, await response.content()

    async def test_health(self) -> None:
        """
        The front door's own C{/health} answers without credentials.
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
        self.assertEqual(response.headers.getRawHeaders("x-host"), ["yes"])
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
        hostUrl = self.standIn.frontDoor.serviceUrl
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
            headers={"authorization": "Bearer " + MASTER},
            unbuffered=True,
        )
        self.assertEqual(response.code, 200)
        self.assertEqual(
            response.headers.getRawHeaders("content-type"), ["text/event-stream"]
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
        When the caller goes away mid-stream, the front door drops its
        request to the host.
        """
        response = await self.client.get(
            self.standIn.url + "/services/vehicle/stream",
            headers={"authorization": "Bearer " + MASTER},
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
        The token the front door hands the host works on C{/mcp} of the same
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
                "authorization": "Bearer " + token,
                "content-type": "application/json",
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


class PublicFrontDoorTests(TestCase):
    """
    The front door in public mode, forwarding to a L{FakeHost}: visitors and
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
            (standIn or self.standIn).url + path, headers=headers
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
        with no graph is a 401; an account there a 403; a bearer the front
        door does not know is a 401 even on a public graph; with public mode
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
                    "authorization": "Bearer " + token,
                    "content-type": "application/json",
                },
            )
            result = (await response.json())["result"]
            return result["isError"], json.loads(result["content"][0]["text"])

        isError, envelope = await call("list_documents", {"graphId": "g-pub2"})
        self.assertFalse(isError, envelope)
        self.assertIn("cows", json.dumps(envelope))
        isError, envelope = await call("create_document", {"title": "x"})
        self.assertEqual((isError, envelope["error"]["code"]), (True, "forbidden"))
