"""
Tests for the graph tools in the body: the project's pi extension with an MCP
endpoint in its boot config.

Real, pinned pi (C{.venv/pi}) launched with L{vehicle.body._picommand}, the real
gardend stand-in (L{vehicle_local.standin.StandIn}) on loopback, and the scripted
model. The test plays the host: it answers pi's C{sophia.delegated-token} UI
requests with tokens from L{StandIn.mintDelegation} (or cancels them), and a
recording front on the stand-in's port sees every MCP HTTP request with its
bearer. Skipped when the pi runtime is not installed.
"""

from __future__ import annotations

import json
import secrets
import shutil
import tempfile
from pathlib import Path
from typing import Any, Sequence

from twisted.internet import reactor
from twisted.trial.unittest import SkipTest, TestCase
from twisted.web.iweb import IRequest
from twisted.web.resource import IResource, Resource
from twisted.web.server import Site

from vehicle.body._picommand import (
    AGENT_TOOLS,
    GRAPH_TOOL_PREFIX,
    PiNotInstalled,
    agentSettings,
    bootConfig,
    findPi,
)
from vehicle.box._proxy import ModelProxy, Upstream
from vehicle.protocol import RunBudget
from vehicle_local.standin import Config, StandIn, freeLoopbackPort
from vehicle_local.model import ScriptedModel

from tests.support._mcp_variant import useVariant
from tests.support.piconfig import providerConfig
from tests.support.realpi import PI_ROOT, PiProcess, Record, spawnPi


GRAPH = "g1"
PERSON = "alice@example.org"
TITLE = "sophia.delegated-token"
READERS = {"read_document", "list_documents", "get_workspace", "search_documents"}
WRITERS = {"create_folder", "create_document", "write_document", "rename", "create_wires"}
RESOURCE_TOOLS = {"list_mcp_resources", "list_mcp_resource_templates", "read_mcp_resource"}


def _config() -> Config:
    return Config.fromJSON(
        {
            "masterKey": "master-" + secrets.token_hex(8),
            "tokens": [],
            "graphs": [GRAPH, "g2"],
            "service": {"url": "http://127.0.0.1:9", "secret": "s-" + secrets.token_hex(8)},
        }
    )


def _tool(name: str) -> str:
    return GRAPH_TOOL_PREFIX + name


class _Recording(Resource):
    """
    The stand-in's resource behind a front that logs every C{/mcp} request
    (HTTP method, JSON-RPC method, bearer) into the shared C{log}.
    """

    isLeaf = True

    def __init__(self, inner: IResource, log: list[tuple[str, Any]]) -> None:
        super().__init__()
        self.inner = inner
        self.log = log

    def render(self, request: IRequest) -> Any:
        if request.path == b"/mcp":
            raw = request.content.read() if request.content is not None else b""
            request.content.seek(0)
            try:
                rpc = json.loads(raw).get("method") if raw else None
            except ValueError:
                rpc = None
            header = (request.getHeader(b"authorization") or b"").decode("latin-1")
            bearer = header[len("Bearer ") :] if header.startswith("Bearer ") else None
            self.log.append(("http", {"method": request.method.decode(), "rpc": rpc, "bearer": bearer}))
        return self.inner.render(request)


class _Body(PiProcess):
    """
    A pi child whose delegation-token requests the test answers, as the host
    does: with C{self.token} (a string) or, when it is L{None}, cancelled.
    """

    def __init__(self, boot: bytes, log: list[tuple[str, Any]]) -> None:
        super().__init__(boot)
        self.token: str | None = None
        self.log = log

    def _received(self, record: Record) -> None:
        if (
            record.get("type") == "extension_ui_request"
            and record.get("method") == "input"
            and record.get("title") == TITLE
        ):
            placeholder = json.loads(record.get("placeholder") or "{}")
            self.log.append(("ask", {"token": self.token, "detail": placeholder}))
            answer: Record = {"type": "extension_ui_response", "id": record["id"]}
            if self.token is None:
                answer["cancelled"] = True
            else:
                answer["value"] = self.token
            self.send(answer)
        super()._received(record)


class GraphToolsTests(TestCase):
    """
    Real pi with C{mcp: {url}} in its boot config against the stand-in.
    """

    timeout = 60

    async def setUp(self) -> None:
        try:
            self.pi = findPi(PI_ROOT)
        except PiNotInstalled as error:
            raise SkipTest(f"pi is not installed in {PI_ROOT} ({error}); run scripts/setup")
        self.log: list[tuple[str, Any]] = []
        self.prompts = 0
        self.key = "sk-graph-" + secrets.token_hex(8)
        root = Path(self.mktemp()).absolute()
        self.dirs = {name: root / name for name in ("agent", "home", "sessions", "work", "garden")}
        for directory in self.dirs.values():
            directory.mkdir(parents=True)
        (self.dirs["agent"] / "settings.json").write_text(json.dumps(agentSettings()))
        self.model = ScriptedModel(reactor=reactor)
        modelPort = await self.model.listen(reactor)
        self.addCleanup(modelPort.stopListening)
        self.standIn = StandIn(root=self.dirs["garden"], config=_config(), reactor=reactor)
        site = Site(_Recording(self.standIn.resource(), self.log))
        site.noisy = False
        port = reactor.listenTCP(0, site, interface="127.0.0.1")
        self.addCleanup(port.stopListening)
        self.mcpUrl = f"http://127.0.0.1:{port.getHost().port}/mcp"

    def mint(self, role: str) -> str:
        return self.standIn.mintDelegation(PERSON, GRAPH, role)

    def spawn(
        self, token: str | None, boot: bytes | None = None, tools: Sequence[str] | None = None
    ) -> _Body:
        """
        Start pi with the graph tools on; its token requests are answered
        with C{token} until the test changes C{body.token}.
        """
        assert self.model.url is not None
        if boot is None:
            boot = bootConfig(
                providers={"sophia": providerConfig(self.model.url, self.key)},
                budget=RunBudget(maxTurns=10, maxCostUsd=5.0),
                mcpUrl=self.mcpUrl,
            )
        body = _Body(boot, self.log)
        body.token = token
        spawnPi(self, self.pi, self.dirs, body, tools=tools, mcp=True)
        return body

    async def prompt(self, body: _Body, message: str) -> Record:
        """
        Send a prompt and wait for pi to settle.
        """
        self.prompts += 1
        commandId = f"p{self.prompts}"
        settled = body.waitFor(lambda record: record.get("type") == "agent_settled")
        response = body.waitFor(lambda record: record.get("id") == commandId)
        body.send({"id": commandId, "type": "prompt", "message": message})
        answer = await response
        self.assertTrue(answer["success"], answer)
        return await settled

    def callTool(self, name: str, arguments: dict[str, Any]) -> str:
        """
        A prompt whose answer is the model calling graph tool C{name}.
        """
        return f"please [[TOOL:{_tool(name)} {json.dumps(arguments)}]]"

    def declared(self, request: int = 0) -> dict[str, Any]:
        """
        The graph tools declared to the model in its C{request}th request:
        short name -> JSON-schema parameters.
        """
        _, body = self.model.requests[request]
        tools = {}
        for tool in body.get("tools", []):
            name = tool["function"]["name"]
            if name.startswith(GRAPH_TOOL_PREFIX):
                tools[name[len(GRAPH_TOOL_PREFIX) :]] = tool["function"].get("parameters", {})
        return tools

    def toolEnds(self, body: _Body) -> list[Record]:
        return body.ofType("tool_execution_end")

    def resultText(self, end: Record) -> str:
        return "".join(part.get("text", "") for part in end["result"]["content"])

    def https(self, rpc: str | None = None) -> list[dict[str, Any]]:
        return [entry for kind, entry in self.log if kind == "http" and (rpc is None or entry["rpc"] == rpc)]

    def asks(self) -> list[dict[str, Any]]:
        return [entry for kind, entry in self.log if kind == "ask"]

    def assertEveryRequestAskedFirst(self) -> None:
        """
        As many token requests as MCP HTTP requests, and each HTTP request
        carried the token the host gave most recently before it.
        """
        self.assertEqual(len(self.asks()), len(self.https()), self.log)
        given: str | None = None
        for kind, entry in self.log:
            if kind == "ask":
                given = entry["token"]
            else:
                self.assertIsNotNone(given, self.log)
                self.assertEqual(entry["bearer"], given, self.log)

    async def test_writerToolLandsAsThePerson(self) -> None:
        """
        With an editor's token the model sees the reader and writer tools,
        with no graph argument, and its C{create_document} call lands in the
        stand-in, audited as the person via the service.
        """
        body = self.spawn(self.mint("editor"))
        settled = await self.prompt(
            body, self.callTool("create_document", {"title": "Notes", "documentId": "doc-notes"})
        )
        self.assertEqual(settled.get("aborted"), False)
        declared = self.declared()
        self.assertEqual(set(declared), READERS | WRITERS)
        for name, parameters in declared.items():
            # Each tool's own graph argument (rename's is graph_id).
            graphArgument = "graph_id" if name == "rename" else "graphId"
            self.assertNotIn(graphArgument, parameters.get("properties", {}), name)
            self.assertNotIn(graphArgument, parameters.get("required", []), name)
        [end] = self.toolEnds(body)
        self.assertFalse(end["isError"], end)
        document = self.standIn.document(GRAPH, "doc-notes")
        assert document is not None
        self.assertEqual(document["title"], "Notes")
        [audit] = self.standIn.audit()
        self.assertEqual(
            (audit["tool"], audit["graphId"], audit["actor"], audit["via"]),
            ("create_document", GRAPH, PERSON, "service:vehicle"),
        )
        self.assertEveryRequestAskedFirst()

    async def test_viewerHasOnlyReaderTools(self) -> None:
        """
        With a viewer's token only the reader tools are declared; the model's
        attempt to call C{create_document} finds no such tool and never
        reaches the stand-in, while a reader tool works.
        """
        self.standIn.store.createDocument(GRAPH, title="Plan", documentId="doc-plan")
        body = self.spawn(self.mint("viewer"))
        await self.prompt(body, self.callTool("create_document", {"title": "Nope"}))
        self.assertEqual(set(self.declared()), READERS)
        [end] = self.toolEnds(body)
        self.assertTrue(end["isError"], end)
        self.assertEqual(self.https("tools/call"), [])
        await self.prompt(body, self.callTool("read_document", {"documentId": "doc-plan"}))
        read = self.toolEnds(body)[-1]
        self.assertFalse(read["isError"], read)
        self.assertIn('"title": "Plan"', self.resultText(read))
        self.assertEqual(self.standIn.audit(), [])
        self.assertEqual(self.standIn.document(GRAPH, "doc-nope"), None)
        self.assertEveryRequestAskedFirst()

    def readerBoot(self, **extra: Any) -> bytes:
        """
        The boot config of a session created by a reader, as the host writes
        it (C{mcpReaders}), with C{extra} fields.
        """
        assert self.model.url is not None
        boot = json.loads(bootConfig(
            providers={"sophia": providerConfig(self.model.url, self.key)},
            budget=RunBudget(maxTurns=10, maxCostUsd=5.0),
            mcpUrl=self.mcpUrl,
        ))
        boot["mcpReaders"] = sorted(READERS)
        boot.update(extra)
        return json.dumps(boot).encode()

    async def test_readerToolsByScopeWhateverTheListing(self) -> None:
        """
        Against an MCP server that lists the writer tools to everyone, a
        reader's session is offered only the tools whose requiredScopes are
        all readers': the model never sees a writer tool, its call to one
        is refused in the body, and nothing reaches the server's tools.
        """
        variant = useVariant(self.standIn, listAll=True)
        self.assertTrue(variant.listAll)
        self.standIn.store.createDocument(GRAPH, title="Plan", documentId="doc-plan")
        body = self.spawn(self.mint("viewer"), boot=self.readerBoot())
        await self.prompt(body, self.callTool("create_document", {"title": "Nope"}))
        self.assertEqual(set(self.declared()), READERS)
        [end] = self.toolEnds(body)
        self.assertTrue(end["isError"], end)
        self.assertEqual(self.https("tools/call"), [])
        await self.prompt(body, self.callTool("read_document", {"documentId": "doc-plan"}))
        read = self.toolEnds(body)[-1]
        self.assertFalse(read["isError"], read)
        for request in range(len(self.model.requests)):
            self.assertEqual(set(self.declared(request)), READERS, request)
        self.assertEqual(self.standIn.audit(), [])
        self.assertEveryRequestAskedFirst()

    async def test_readerToolWithoutScopesIsShut(self) -> None:
        """
        A listing whose tools name no scopes gives a reader's session no
        graph tool: a tool is a reader's only if it says so.
        """
        useVariant(self.standIn, listAll=True, dropMeta=True)
        self.standIn.store.createDocument(GRAPH, title="Plan", documentId="doc-plan")
        body = self.spawn(self.mint("viewer"), boot=self.readerBoot())
        await self.prompt(body, self.callTool("read_document", {"documentId": "doc-plan"}))
        self.assertEqual(self.declared(), {})
        [end] = self.toolEnds(body)
        self.assertTrue(end["isError"], end)
        self.assertEqual(self.https("tools/call"), [])

    async def test_viewerTokenWriteRefusedByStandIn(self) -> None:
        """
        The tools were listed with an editor's token, but the host now gives
        a viewer's (the owner's role dropped): the write goes out with the
        viewer's token and the stand-in refuses it; nothing is written.
        """
        body = self.spawn(self.mint("editor"))
        await self.prompt(body, "hello")
        self.assertIn("create_document", self.declared())
        body.token = self.mint("viewer")
        await self.prompt(body, self.callTool("create_document", {"title": "Nope", "documentId": "doc-nope"}))
        [end] = self.toolEnds(body)
        self.assertTrue(end["isError"], end)
        self.assertIn("forbidden", self.resultText(end))
        [call] = self.https("tools/call")
        self.assertEqual(call["bearer"], body.token)
        self.assertEqual(self.standIn.audit(), [])
        self.assertIsNone(self.standIn.document(GRAPH, "doc-nope"))

    async def test_tokenAskedForEveryRequestAndNewestUsed(self) -> None:
        """
        Every MCP HTTP request, at startup and per tool call, is preceded by
        a token request, and carries its answer: after the host's token
        changes, the next call uses the new one.
        """
        first = self.mint("editor")
        body = self.spawn(first)
        await self.prompt(body, self.callTool("create_document", {"title": "A", "documentId": "doc-a"}))
        startup = [entry["rpc"] for entry in self.https()][:-1]
        self.assertIn("initialize", startup)
        self.assertIn("tools/list", startup)
        second = self.mint("editor")
        self.assertNotEqual(first, second)
        body.token = second
        await self.prompt(
            body, self.callTool("write_document", {"documentId": "doc-a", "content": "# A\n"})
        )
        calls = self.https("tools/call")
        self.assertEqual([call["bearer"] for call in calls], [first, second])
        self.assertEqual(
            [ask["detail"].get("toolName") for ask in self.asks()][-1], _tool("write_document")
        )
        self.assertEveryRequestAskedFirst()
        document = self.standIn.document(GRAPH, "doc-a")
        assert document is not None
        self.assertEqual(document["content"], "# A\n")
        self.assertEqual([a["actor"] for a in self.standIn.audit()], [PERSON, PERSON])

    async def test_cancelledFailsTheCallCleanly(self) -> None:
        """
        When the host has no token (it cancels), the graph tool call fails
        with a clear message and no MCP request is made; once the host has a
        token again, the next call works.
        """
        body = self.spawn(self.mint("editor"))
        await self.prompt(body, "hello")
        before = len(self.https())
        body.token = None
        settled = await self.prompt(body, self.callTool("create_document", {"title": "X"}))
        self.assertEqual(settled.get("aborted"), False)
        [end] = self.toolEnds(body)
        self.assertTrue(end["isError"], end)
        self.assertIn("no delegation token", self.resultText(end))
        self.assertEqual(len(self.https()), before)
        body.token = self.mint("editor")
        await self.prompt(body, self.callTool("create_document", {"title": "Y", "documentId": "doc-y"}))
        self.assertFalse(self.toolEnds(body)[-1]["isError"])
        self.assertIsNotNone(self.standIn.document(GRAPH, "doc-y"))

    async def test_refusedTokenToldAndRecovered(self) -> None:
        """
        A token the stand-in refuses (expired, forged) fails the call with a
        message that says so, not pi's advice to sign in; with a good token
        the next call reconnects and works.
        """
        body = self.spawn(self.mint("editor"))
        await self.prompt(body, "hello")
        body.token = "gdt1.e30.forged"
        await self.prompt(body, self.callTool("create_document", {"title": "F", "documentId": "doc-f"}))
        refused = self.toolEnds(body)[-1]
        self.assertTrue(refused["isError"], refused)
        self.assertIn("refused the delegation token", self.resultText(refused))
        self.assertNotIn("sign", self.resultText(refused))
        self.assertIsNone(self.standIn.document(GRAPH, "doc-f"))
        body.token = self.mint("editor")
        await self.prompt(body, self.callTool("create_document", {"title": "G", "documentId": "doc-g"}))
        self.assertFalse(self.toolEnds(body)[-1]["isError"], self.toolEnds(body)[-1])
        self.assertIsNotNone(self.standIn.document(GRAPH, "doc-g"))
        self.assertEveryRequestAskedFirst()

    async def test_graphToolsSurviveClone(self) -> None:
        """
        pi re-runs the extension when it replaces its runtime (here by
        C{clone}): the server is registered again, connects with a token it
        asks for, and the next call works with the host's newest token.
        """
        body = self.spawn(self.mint("editor"))
        await self.prompt(body, self.callTool("create_document", {"title": "C", "documentId": "doc-c"}))
        cloned = body.waitFor(lambda record: record.get("id") == "clone")
        body.send({"id": "clone", "type": "clone"})
        self.assertTrue((await cloned)["success"])
        body.token = self.mint("editor")
        await self.prompt(
            body, self.callTool("write_document", {"documentId": "doc-c", "content": "after"})
        )
        self.assertFalse(self.toolEnds(body)[-1]["isError"], self.toolEnds(body)[-1])
        self.assertEqual(self.https("tools/call")[-1]["bearer"], body.token)
        document = self.standIn.document(GRAPH, "doc-c")
        assert document is not None
        self.assertEqual(document["content"], "after")
        self.assertEveryRequestAskedFirst()

    async def test_tokenNeverOnDiskOrStdout(self) -> None:
        """
        After a write, the token is in no file pi keeps (agent dir, session
        files, home, working folder) and in no record pi printed.
        """
        token = self.mint("editor")
        body = self.spawn(token)
        await self.prompt(body, self.callTool("create_document", {"title": "S", "documentId": "doc-s"}))
        self.assertIsNotNone(self.standIn.document(GRAPH, "doc-s"))
        secret = token.encode("utf-8")
        for name in ("agent", "home", "sessions", "work"):
            for path in self.dirs[name].rglob("*"):
                if path.is_file():
                    self.assertNotIn(secret, path.read_bytes(), path)
        self.assertNotIn(token, json.dumps(body.records))
        self.assertNotIn(secret, body.stderr)
        pid = body.transport.pid
        self.assertNotIn(secret, Path(f"/proc/{pid}/cmdline").read_bytes())
        self.assertNotIn(secret, Path(f"/proc/{pid}/environ").read_bytes())

    async def test_throughTheBridge(self) -> None:
        """
        A boxed body's way: the boot config names the bridge's loopback URL,
        the bridge pipes to the host's proxy (a Unix socket), and the proxy
        forwards C{/mcp} with the body's bearer to the stand-in. The call
        lands as the person.
        """
        # A Unix socket's path is at most 107 bytes: trial's temp dir is too deep.
        runDir = Path(tempfile.mkdtemp(prefix="vg-"))
        self.addCleanup(shutil.rmtree, runDir, True)
        proxy = ModelProxy(
            reactor=reactor,
            socketPath=runDir / "proxy.sock",
            model=Upstream(baseUrl=self.model.url or "", key=self.key),
            mcp=Upstream(baseUrl=self.mcpUrl),
        )
        await proxy.listen()
        self.addCleanup(proxy.close)
        bridgePort = freeLoopbackPort()
        boot = json.loads(
            bootConfig(
                providers={"sophia": providerConfig(f"http://127.0.0.1:{bridgePort}/v1", proxy.token)},
                budget=RunBudget(maxTurns=10, maxCostUsd=5.0),
                mcpUrl=f"http://127.0.0.1:{bridgePort}/mcp",
            )
        )
        boot["bridge"] = {"socket": str(proxy.socketPath), "port": bridgePort, "token": proxy.token}
        body = self.spawn(self.mint("owner"), json.dumps(boot).encode(), tools=AGENT_TOOLS)
        await self.prompt(body, self.callTool("create_document", {"title": "B", "documentId": "doc-b"}))
        self.assertFalse(self.toolEnds(body)[-1]["isError"])
        _, request = self.model.requests[0]
        names = {tool["function"]["name"] for tool in request["tools"]}
        self.assertEqual(names, set(AGENT_TOOLS) | {_tool(name) for name in READERS | WRITERS})
        [audit] = self.standIn.audit()
        self.assertEqual((audit["actor"], audit["tool"]), (PERSON, "create_document"))
        self.assertEqual(self.model.requests[0][0]["authorization"], f"Bearer {self.key}")
        self.assertEveryRequestAskedFirst()


    async def test_fenceRefusesAnotherGraph(self) -> None:
        """
        With C{graphs} in the boot config, a call naming another graph is
        blocked in the body (no MCP request is made for it), and the model is
        told the graphs it reads.
        """
        assert self.model.url is not None
        boot = json.loads(bootConfig(
            providers={"sophia": providerConfig(self.model.url, self.key)},
            budget=RunBudget(maxTurns=10, maxCostUsd=5.0),
            mcpUrl=self.mcpUrl,
        ))
        boot["graphs"] = {"own": GRAPH, "public": [GRAPH]}
        body = self.spawn(self.mint("editor"), boot=json.dumps(boot).encode())
        await self.prompt(
            body, self.callTool("create_document", {"title": "Elsewhere", "graphId": "other-graph"})
        )
        [end] = self.toolEnds(body)
        self.assertTrue(end["isError"], end)
        self.assertIn("the graph other-graph is not one this conversation reads", json.dumps(end))
        self.assertEqual(self.standIn.audit(), [])
        _, request = self.model.requests[0]
        self.assertIn(f"may read these public graphs: {GRAPH}", json.dumps(request["messages"][:2]))


    async def test_resourceToolsFenced(self) -> None:
        """
        pi's MCP resource tools name no graph and lack the graph tools'
        prefix: a fenced (public) conversation is offered none of them and
        its call to one is refused in the body, so a server that serves
        another graph's documents as resources is never asked.
        """
        variant = useVariant(self.standIn, resources=True)
        self.standIn.store.createDocument("g2", title="Secret", documentId="doc-secret")
        boot = json.loads(self.readerBoot())
        del boot["mcpReaders"]
        boot["graphs"] = {"own": GRAPH, "public": [GRAPH]}
        body = self.spawn(self.mint("editor"), boot=json.dumps(boot).encode())
        await self.prompt(body, self.readResource("garden://g2/doc-secret"))
        [end] = self.toolEnds(body)
        self.assertTrue(end["isError"], end)
        self.assertEqual(variant.resourceReads, [])
        for request in range(len(self.model.requests)):
            _, sent = self.model.requests[request]
            names = {t["function"]["name"] for t in sent.get("tools", [])}
            self.assertFalse(names & RESOURCE_TOOLS, names)

    async def test_resourceToolsOpenWithoutFence(self) -> None:
        """
        The same call in a conversation with no fence reaches the server's
        resources: the fence above is what refuses it.
        """
        variant = useVariant(self.standIn, resources=True)
        self.standIn.store.createDocument(GRAPH, title="Open", documentId="doc-open")
        body = self.spawn(self.mint("editor"))
        await self.prompt(body, self.readResource(f"garden://{GRAPH}/doc-open"))
        [end] = self.toolEnds(body)
        self.assertFalse(end["isError"], end)
        self.assertEqual(variant.resourceReads, [f"garden://{GRAPH}/doc-open"])

    def readResource(self, uri: str) -> str:
        arguments = {"server": "graph", "uri": uri}
        return f"please [[TOOL:read_mcp_resource {json.dumps(arguments)}]]"

