"""
The minute's sweep on the reactor's thread (issue 16: nothing that waits on
the disk runs there), beside its floor, in one run.

Every minute the host lets its quiet sessions go dormant and brings the
digest of each other awake session up to date
(L{vehicle.session.Registry.sleepIdle}).  This times one sweep over
C{--sessions} awake sessions whose logs moved since their last digest:
the real app in this process, its data on the disk in a temporary folder,
its writer's batches held (what the writer does later, on its own thread,
is not the reactor's).  Beside it, in the same run and the same folder, the
floor: one atomic write of a session's digest (temporary file, its sync,
the rename, the folder's sync), what the sweep cost each session when it
wrote the digests itself.

    .venv/bin/python benchmarks/bench_sweep.py [--sessions N] [--runs N] [--src DIR]

C{--src DIR} times the sweep of another checkout (a C{git worktree} of an
earlier commit) in the same run, alternated.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def sweep(sessions: int, tree: Path = ROOT) -> dict[str, float]:
    """
    One sweep over C{sessions} awake sessions whose logs moved, run with
    C{tree}'s code in this process.

    @return: the reactor thread's seconds in the sweep, the sessions
        awake after it, and the floor (one atomic write of a digest) in
        seconds.
    """
    for path in (tree, tree / "src"):
        sys.path.insert(0, str(path))
    from twisted.internet.address import IPv4Address
    from twisted.internet.task import Clock
    from twisted.internet.testing import MemoryReactorClock, StringTransport

    from tests.support.batches import HeldBatches
    from tests.support.harness import MODELS, FakeLauncher
    from vehicle._tap import buildHost
    from vehicle.models import ModelCatalog
    from vehicle.settings import Settings
    from vehicle.store import GroupWriter, writeJsonAtomic
    from vehicle.web import VehicleSite

    held = HeldBatches()
    runHeld = held.releaseAll

    work = Path(tempfile.mkdtemp(prefix="vehicle-bench-sweep-", dir=os.environ.get("TMPDIR")))
    clock = MemoryReactorClock()
    clock.advance(1_796_000_000)
    later = Clock()
    secret = "bench-sweep"
    try:
        api, host = buildHost(
            Settings(secret=secret, dataDir=work / "data", listen="tcp:0"),
            ModelCatalog(MODELS["providers"], "scripted/echo-1"), clock,
            launcher=FakeLauncher(), writer=GroupWriter(runner=held, clock=later),
        )
        host.startService()
        registry = api.registry
        channel = VehicleSite(api.resource(), clock).buildProtocol(
            IPv4Address("TCP", "127.0.0.1", 40000))
        transport = StringTransport()
        channel.makeConnection(transport)

        def call(method: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
            data = json.dumps(body).encode()
            headers = {"Host": "127.0.0.1", "x-internal-service": secret, "x-user-id": "owner",
                       "x-sophia-caller-role": "owner", "x-graph-id": "bench",
                       "x-sophia-graph-role": "owner", "x-vehicle-client-id": "bench",
                       "content-type": "application/json", "content-length": str(len(data))}
            transport.clear()
            channel.dataReceived(f"{method} {path} HTTP/1.1\r\n".encode() + "".join(
                f"{k}: {v}\r\n" for k, v in headers.items()).encode() + b"\r\n" + data)
            runHeld()
            answer = transport.value().split(b"\r\n\r\n", 1)[1]
            if b"transfer-encoding: chunked" in transport.value().lower():
                answer = answer.split(b"\r\n", 1)[1].rsplit(b"\r\n0\r\n", 1)[0]
            return dict(json.loads(answer.strip()))

        made = [str(call("POST", "/sessions", {"requestId": f"create-{n}"})
                    ["value"]["session"]["sessionId"]) for n in range(sessions)]
        # Past a first sweep (each digest written once), then every log moved.
        registry.sleepIdle()
        runHeld()
        later.advance(2)
        runHeld()
        for sid in made:
            call("PATCH", f"/sessions/{sid}", {"requestId": f"r-{sid}", "title": "moved on"})
        started = time.perf_counter()
        registry.sleepIdle()
        took = time.perf_counter() - started
        awake = sum(1 for sid in made if registry.sessions[sid].awake)
        runHeld()
        later.advance(2)
        runHeld()
        digest = json.loads((work / "data" / "sessions" / made[0] / "digest.json").read_text())
        floors = []
        for n in range(max(8, min(sessions, 64))):
            started = time.perf_counter()
            writeJsonAtomic(work / f"floor-{n}.json", digest)
            floors.append(time.perf_counter() - started)
        host.stopService()
        runHeld()
        return {"sweep": took, "awake": awake, "floor": statistics.median(floors)}
    finally:
        shutil.rmtree(work, ignore_errors=True)


def measure(sessions: int, tree: Path) -> dict[str, float]:
    """
    L{sweep} in a process of its own (one tree's modules, a fresh heap).
    """
    out = subprocess.run(
        [sys.executable, __file__, "--inner", str(tree), "--sessions", str(sessions)],
        capture_output=True, text=True, check=True,
    ).stdout
    return dict(json.loads(out.splitlines()[-1]))


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    parser.add_argument("--sessions", type=int, default=64)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--src", type=Path, default=None)
    parser.add_argument("--inner", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.inner is not None:
        print(json.dumps(sweep(args.sessions, args.inner)))
        return
    trees = [("this tree", ROOT)] + ([("--src", args.src.resolve())] if args.src else [])
    results: dict[str, list[dict[str, float]]] = {label: [] for label, _ in trees}
    for _ in range(args.runs):
        for label, tree in trees:
            results[label].append(measure(args.sessions, tree))
    load = Path("/proc/loadavg").read_text().split()[0]
    print(f"one sweep over {args.sessions} awake sessions whose logs moved, the reactor's "
          f"thread; median of {args.runs} (range); {os.cpu_count()} cores, load {load}")
    for label, runs in results.items():
        sweeps = [r["sweep"] * 1e3 for r in runs]
        each = [r["sweep"] / args.sessions * 1e6 for r in runs]
        floors = [r["floor"] * 1e6 for r in runs]
        ratios = [r["sweep"] / args.sessions / r["floor"] for r in runs]
        print(f"  {label:<10} {statistics.median(sweeps):8.2f} ms ({min(sweeps):.2f}-"
              f"{max(sweeps):.2f}); a session {statistics.median(each):7.1f} us; floor (one "
              f"atomic write of its digest) {statistics.median(floors):7.1f} us; a session "
              f"÷ the floor {statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f})"
              f"; awake after {int(runs[0]['awake'])}")


if __name__ == "__main__":
    main(sys.argv[1:])
