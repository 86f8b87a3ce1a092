"""
C{vehicle acp} beside pi's own ACP adapter, C{pi-acp}, on the same scripted
model (run on demand, not in the suite).  Both are driven by the official
ACP client library (C{acp}), as an editor would:

1. a new session's first chunk: from C{session/new} to the first
   C{agent_message_chunk} of the prompt sent when it answers (a vehicle
   session's body is started by that prompt, or is a spare handed over
   when one is ready; pi-acp starts pi at C{session/new}).  vehicle is
   measured twice: with a spare ready before each session (the host's
   default, for a person who does not open sessions faster than the pool
   refills), and with no spare (the pool stopped);
2. a prompt's first chunk: the next prompt on that warm session, from
   C{session/prompt} to its first C{agent_message_chunk}.

Each figure is printed beside its floor, the same straight to a C{pi --mode
rpc} child (L{benchmarks.bench_body.direct}): spawn to the first text delta
for (1), prompt to the first text delta on a warm child for (2).

C{pi-acp} is installed with npm into a temporary folder, each run, and runs
on the pinned pi's own Node; its pi is the pinned pi, on the scripted model
(a C{models.json} in its agent folder), with pi's isolation flags.

Usage: .venv/bin/python benchmarks/bench_acp.py [--runs N] [--pi-acp VERSION]
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

from twisted.internet.defer import Deferred
from twisted.internet.task import react

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from acp import text_block  # noqa: E402

from benchmarks._common import BenchCase  # noqa: E402
from benchmarks.bench_body import direct  # noqa: E402
from tests.support.acp import AsyncioThread, Editor, vehicleEditor  # noqa: E402
from tests.support.live import LiveHost, pool, startStandIn  # noqa: E402
from vehicle.body import findPi  # noqa: E402
from vehicle.settings import defaultPiRoot  # noqa: E402


MASTER = "master-bench-acp"

#: The pi-acp measured unless --pi-acp says otherwise.
PI_ACP = "0.0.34"


def firstChunk(editor: Editor, after: int, sessionId: str) -> float:
    """
    When the first agent message chunk of C{sessionId} came, among the
    updates after the first C{after}.
    """
    for (sid, update), when in zip(editor.updates[after:], editor.recorder.times[after:]):
        if sid == sessionId and update["sessionUpdate"] == "agent_message_chunk":
            return when
    raise AssertionError(f"no message chunk for {sessionId}")


async def measure(
    editor: Editor, runs: int, cwd: str, ready: Callable[[], bool] | None = None
) -> tuple[list[float], list[float]]:
    """
    In the editor's loop: C{runs} new sessions (one more first, not
    counted), each prompted twice; the times of each's first chunk.

    @param ready: before each new session, wait until it holds (untimed).
    """
    conn = editor.conn
    fresh: list[float] = []
    warm: list[float] = []
    for n in range(runs + 1):
        while ready is not None and not ready():
            await asyncio.sleep(0.05)
        start = time.perf_counter()
        session = await conn.new_session(cwd=cwd, mcp_servers=[])
        sid = session.session_id
        count = len(editor.updates)
        await conn.prompt(session_id=sid, prompt=[text_block(f"hello {n}")])
        first = firstChunk(editor, count, sid) - start
        count = len(editor.updates)
        start = time.perf_counter()
        await conn.prompt(session_id=sid, prompt=[text_block(f"and again {n}")])
        again = firstChunk(editor, count, sid) - start
        if n:
            fresh.append(first)
            warm.append(again)
        try:
            await conn.close_session(session_id=sid)
        except Exception:
            pass
    return fresh, warm


def installPiAcp(root: Path, version: str) -> Path:
    """
    C{npm install pi-acp@<version>} into C{root}; its entry point.
    """
    subprocess.run(
        ["npm", "install", "--prefix", str(root), "--no-audit", "--no-fund", "--loglevel=error",
         f"pi-acp@{version}"],
        check=True,
    )
    return root / "node_modules" / "pi-acp" / "dist" / "index.js"


def piAcpEditor(loop: AsyncioThread, root: Path, host: LiveHost, entry: Path) -> Editor:
    """
    pi-acp on the pinned Node, its pi the pinned pi on the scripted model.
    """
    pi = findPi(defaultPiRoot())
    agent = root / "agent"
    agent.mkdir(parents=True)
    spec = host.scriptedProvider()
    (agent / "models.json").write_text(json.dumps({"providers": {"scripted": spec}}))
    wrapper = root / "pi"
    wrapper.write_text(
        "#!/bin/sh\n"
        f'exec "{pi.node}" "{pi.cli}" "$@" --offline --no-context-files --no-skills '
        "--no-prompt-templates --no-extensions --no-approve --model scripted/echo-1\n"
    )
    wrapper.chmod(0o755)
    (root / "home").mkdir()
    env = {
        "PATH": f"{pi.node.parent}:/usr/bin:/bin",
        "HOME": str(root / "home"),
        "PI_CODING_AGENT_DIR": str(agent),
        "PI_ACP_PI_COMMAND": str(wrapper),
        "PI_OFFLINE": "1",
        "PI_SKIP_VERSION_CHECK": "1",
        "PI_TELEMETRY": "0",
    }
    return Editor(loop, [str(pi.node), str(entry)], env)


def row(name: str, times: list[float], floor: list[float]) -> str:
    median, low = statistics.median(times) * 1000, statistics.median(floor) * 1000
    return (f"  {name:<27} {median:8.1f} ms  ({min(times) * 1000:.1f}-{max(times) * 1000:.1f})"
            f"   floor {low:8.1f} ms   x{median / low:5.2f}")


async def main(reactor: Any, runs: int = 5, version: str = PI_ACP) -> None:
    case = BenchCase("vehicle-bench-acp-")
    loop = AsyncioThread()
    root = Path(tempfile.mkdtemp(prefix="vehicle-bench-piacp-"))
    try:
        entry = installPiAcp(root / "npm", version)
        stand = startStandIn(case, masterKey=MASTER)
        host = await LiveHost(case, spareBodies=1, spareRefillMs=0).start()
        stand.setServiceUrl(host.url)
        work = root / "work"
        work.mkdir()
        results = {}
        spares = pool(host)
        for name, editor, ready in (
            ("vehicle acp, a spare ready",
             vehicleEditor(loop, stand.url, MASTER, home=case.mktemp()),
             lambda: bool(spares.ready)),
            ("vehicle acp, no spare",
             vehicleEditor(loop, stand.url, MASTER, home=case.mktemp()), None),
            (f"pi-acp {version}", piAcpEditor(loop, root / "piacp", host, entry), None),
        ):
            if ready is None and not spares.stopped:
                # No spare from here on: the pool is stopped (its spares end).
                await spares.stop()
            await editor.start()
            results[name] = await loop.run(measure(editor, runs, str(work), ready))
            await editor.close()
        warmFloor, _, _ = await direct(reactor, host, runs)
        coldFloor = []
        for _ in range(runs):
            _, _, cold = await direct(reactor, host, 0)
            coldFloor.append(cold)
    finally:
        loop.stop()
        await case.cleanup()
    print(f"median of {runs} (min-max), after one not counted; floor: straight to pi --mode rpc")
    print("a new session's first chunk (session/new, then a prompt):")
    for name, (fresh, _) in results.items():
        print(row(name, fresh, coldFloor))
    print("a prompt's first chunk (a warm session):")
    for name, (_, warm) in results.items():
        print(row(name, warm, warmFloor))


if __name__ == "__main__":
    runs = int(sys.argv[sys.argv.index("--runs") + 1]) if "--runs" in sys.argv else 5
    version = sys.argv[sys.argv.index("--pi-acp") + 1] if "--pi-acp" in sys.argv else PI_ACP
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    react(lambda reactor: Deferred.fromCoroutine(main(reactor, runs, version)))
