"""
The live half of L{tests.unit.test_pi_smoke}: L{PiSmokeTests}
(real processes, sockets or the real reactor; see that module for the rest).
"""

from __future__ import annotations

import json
import secrets
from pathlib import Path
from typing import Any, Sequence

from twisted.internet import reactor
from twisted.internet.defer import Deferred
from twisted.trial.unittest import SkipTest, TestCase

from vehicle.body._picommand import (
    AGENT_TOOLS,
    BUILTIN_TOOLS,
    PiNotInstalled,
    agentSettings,
    bootConfig,
    findPi,
)
from vehicle.protocol import RunBudget
from vehicle_local.model import ScriptedModel

from tests.support.piconfig import providerConfig
from tests.support.realpi import PI_ROOT, PiProcess, Record, spawnPi


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
    ) -> PiProcess:
        """
        Start pi with the boot config on fd 3; stop it at cleanup.
        """
        assert self.model.url is not None
        boot = bootConfig(
            providers={"sophia": providerConfig(self.model.url, self.key)},
            budget=RunBudget(maxTurns=maxTurns, maxCostUsd=maxCostUsd),
        )
        process = PiProcess(boot)
        spawnPi(self, self.pi, self.dirs, process, tools=tools)
        return process

    async def prompt(self, process: PiProcess, message: str) -> Record:
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
