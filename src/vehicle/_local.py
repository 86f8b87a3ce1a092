# -*- test-case-name: tests.test_local -*-
"""
The one-command local run: the gardend stand-in (front door and MCP), a
model (the scripted one, or a real provider when a key is given), and the
host itself as operators run it, C{twistd -n vehicle}, in its own process.

Run with C{scripts/run}; it prints how to call the host through the front
door and stops everything on Ctrl-C.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import sys
from pathlib import Path
from typing import Any

from twisted.internet.defer import Deferred
from twisted.internet.protocol import ProcessProtocol
from twisted.internet.task import react
from twisted.python import usage

from vehicle.gardend import Config, StandIn
from vehicle.testing import ScriptedModel


class Options(usage.Options):
    optParameters = [
        ["root", None, "local", "Where the local run keeps its data."],
        ["port", None, "8700", "The front door's loopback port.", int],
        ["graph", None, "demo", "The graph the local run offers."],
    ]


class _Host(ProcessProtocol):
    def __init__(self) -> None:
        self.ended: Deferred = Deferred()

    def outReceived(self, data: bytes) -> None:
        sys.stdout.buffer.write(data)
        sys.stdout.flush()

    errReceived = outReceived

    def processEnded(self, reason: Any) -> None:
        self.ended.callback(None)


def _freePort() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def run(reactor: Any, options: Options) -> None:
    root = Path(options["root"]).absolute()
    root.mkdir(parents=True, exist_ok=True)
    secret = secrets.token_urlsafe(24)
    master = os.environ.get("GARDEND_MASTER_KEY") or "local-" + secrets.token_urlsafe(12)
    hostPort = _freePort()
    graph = options["graph"]

    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "MNEMOSYNE_INTERNAL_SERVICE_SECRET": secret,
        "VEHICLE_DATA_DIR": str(root / "data"),
    }
    realKey = os.environ.get("OPENROUTER_API_KEY")
    models = root / "models.json"
    if realKey:
        model = os.environ.get("VEHICLE_DEFAULT_MODEL", "openrouter/openai/gpt-4o-mini")
        provider, modelId = model.split("/", 1)
        spec = {"baseUrl": "https://openrouter.ai/api/v1", "api": "openai-completions",
                "apiKey": "$OPENROUTER_API_KEY",
                "models": [{"id": modelId, "name": modelId, "reasoning": False, "input": ["text"],
                            "contextWindow": 128000, "maxTokens": 4096}]}
        env["OPENROUTER_API_KEY"] = realKey
        which = f"the real model {model}"
    else:
        scripted = ScriptedModel(reactor=reactor)
        await scripted.listen(reactor)
        provider, model = "scripted", "scripted/echo-1"
        spec = {"baseUrl": scripted.url, "api": "openai-completions",
                "apiKey": "$VEHICLE_LOCAL_KEY",
                "models": [{"id": "echo-1", "name": "Scripted echo", "reasoning": False,
                            "input": ["text"],
                            "cost": {"input": 3, "output": 15, "cacheRead": 0, "cacheWrite": 0},
                            "contextWindow": 128000, "maxTokens": 4096}]}
        env["VEHICLE_LOCAL_KEY"] = "sk-local-" + secrets.token_hex(8)
        which = f"the scripted model at {scripted.url}"
    models.write_text(json.dumps({"providers": {provider: spec}}, indent=2))
    env["VEHICLE_MODELS"] = str(models)
    env["VEHICLE_DEFAULT_MODEL"] = model

    config = Config.fromJSON(
        {
            "masterKey": master,
            "graphs": [graph],
            "tokens": [],
            "service": {"url": f"http://127.0.0.1:{hostPort}", "secret": secret,
                        "delegateCaller": True, "acceptsModelKey": False},
        }
    )
    standIn = StandIn(root=str(root / "gardend"), config=config, reactor=reactor)
    standIn.listen(reactor, options["port"])
    env["MNEMOSYNE_MCP_URL"] = standIn.mcpUrl

    twistd = str(Path(sys.prefix) / "bin" / "twistd")
    host = _Host()
    transport = reactor.spawnProcess(
        host, twistd,
        [twistd, "-n", "--pidfile=", "vehicle",
         "--listen", f"tcp:{hostPort}:interface=127.0.0.1", "--data-dir", env["VEHICLE_DATA_DIR"]],
        env=env,
    )
    base = f"{standIn.url}/services/vehicle/g/{graph}"
    print(
        f"""
vehicle is running locally, with {which}.
  front door (gardend stand-in): {standIn.url}   master key: {master}
  host: http://127.0.0.1:{hostPort} (reached through the front door)   data: {root}

Try:
  curl -s -X POST {base}/sessions -H 'Authorization: Bearer {master}' \\
       -H 'content-type: application/json' -d '{{"requestId":"r1"}}'
  curl -s -X POST {base}/sessions/<id>/commands -H 'Authorization: Bearer {master}' \\
       -H 'content-type: application/json' -d '{{"type":"prompt","requestId":"p1","text":"hello"}}'
  curl -sN {base}/sessions/<id>/events -H 'Authorization: Bearer {master}' -H 'accept: text/event-stream'

Ctrl-C stops everything.
""",
        flush=True,
    )

    def stop(*_: Any) -> None:
        try:
            transport.signalProcess("TERM")
        except Exception:
            pass

    reactor.addSystemEventTrigger("before", "shutdown", stop)
    signal.signal(signal.SIGINT, lambda *_: reactor.callFromThread(reactor.stop))
    await host.ended


def main() -> None:
    options = Options()
    try:
        options.parseOptions(sys.argv[1:])
    except usage.UsageError as e:
        raise SystemExit(f"{e}\n{options}")
    react(lambda reactor: Deferred.fromCoroutine(run(reactor, options)))


if __name__ == "__main__":
    main()
