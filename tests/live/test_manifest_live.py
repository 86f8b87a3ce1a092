"""
The live half of L{tests.unit.test_manifest}: L{StandInLaunchTests}
(real processes, sockets or the real reactor; see that module for the rest).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from treq.client import HTTPClient
from twisted.internet import reactor
from twisted.trial.unittest import TestCase
from twisted.web.client import Agent, HTTPConnectionPool

from vehicle_local.standin import Config, Manifest, StandIn

from tests.support._localrun import REPO, sleep
from tests.support.live import requirePi
from tests.support.manifest import MANIFEST, writeManifest


class StandInLaunchTests(TestCase):
    """
    Live: the stand-in starts the real host from a manifest as gardend
    does, and fronts it.
    """

    timeout = 120

    async def test_startsTheHostFromTheManifest(self) -> None:
        requirePi()
        tmp = Path(self.mktemp()).absolute()
        tmp.mkdir(parents=True)
        # The project's manifest, moved next to a copy that tries to set
        # what gardend injects: gardend's values win.
        data = json.loads(MANIFEST.read_text())
        data["command"] = str(REPO / ".venv" / "bin" / "twistd")
        data["workingDir"] = str(REPO)
        data["env"] += [{"name": "PORT", "value": "1"}, {"name": "DATA_DIR", "value": "/nope"}]
        path = writeManifest(tmp)
        path.write_text(json.dumps(data))
        manifest = Manifest.fromPath(path)
        config = Config(masterKey="master-m", tokens=(), graphs=("g1",),
                        service=manifest.serviceConfig("http://127.0.0.1:0", "x" * 32))
        standIn = StandIn(root=tmp / "gardend", config=config, reactor=reactor)
        standIn.listen(reactor, 0)
        self.addCleanup(standIn.stopListening)
        dataDir = tmp / "services" / "vehicle-data"
        models = tmp / "models.json"
        models.write_text(json.dumps({"providers": {"scripted": {
            "baseUrl": "http://127.0.0.1:9/v1", "api": "openai-completions", "apiKey": "$K",
            "models": [{"id": "echo-1", "name": "Echo", "reasoning": False, "input": ["text"],
                        "contextWindow": 128000, "maxTokens": 4096}]}}}))
        host = await standIn.launch(
            manifest, dataDir=dataDir, logPath=tmp / "host.log",
            baseEnv={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "K": "sk-unused",
                     "VEHICLE_MODELS": str(models), "VEHICLE_DEFAULT_MODEL": "scripted/echo-1",
                     "VEHICLE_DATA_DIR": "", "MNEMOSYNE_MCP_ACCESS_TOKEN": "operator's"},
        )
        self.addCleanup(host.stopService)
        pool = HTTPConnectionPool(reactor, persistent=False)
        http = HTTPClient(Agent(reactor, pool=pool))
        response = await http.post(
            standIn.url + "/services/vehicle/g/g1/sessions",
            json={"requestId": "r1"},
            headers={b"authorization": "Bearer master-m"},
        )
        body = json.loads(await response.content())
        self.assertEqual(response.code, 201, body)
        sessionId = body["value"]["session"]["sessionId"]
        # DATA_DIR is gardend's, not the manifest's.
        self.assertTrue((dataDir / "sessions" / sessionId).is_dir())
        self.assertEqual((dataDir / "vehicle.lock").read_text().strip(),
                         str(host.process.transport.pid))
        # The host was handed the delegation flag the manifest sets.
        self.assertIn("x-sophia-delegated-token", standIn.requestsSeen[-1]["headers"])
        await host.stopService()
        self.assertEqual(await host.whenEnded(), -15)
        await sleep(0)
