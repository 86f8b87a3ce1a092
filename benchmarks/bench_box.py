"""
Benchmark of the agent profile's box (run on demand, not in the suite):
body start time and resident memory, boxed (C{agent} profile, pi inside
bwrap behind the model proxy) against unboxed (C{chat} profile), side by side.

For each sample a new session is created on one live host (the real app and
real pi children against the scripted model) and prompted once:

- C{spawn -> get_state}: from the launcher's spawn to the body answering
  C{get_state} (C{body.materialized});
- C{prompt -> materialized}: from POSTing the prompt to the same moment,
  which for a boxed body adds the probe of the box and opening the proxy;
- C{prompt -> settled}: the whole first run;
- C{pi VmRSS}: the node process's resident memory after that run;
- C{body VmRSS}: the same plus every process of the body's tree (for a
  boxed body, the two bwrap processes).

Usage: .venv/bin/python benchmarks/bench_box.py [--runs N]   (default 5)
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from twisted.internet.defer import Deferred, ensureDeferred
from twisted.internet.task import react

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._common import BenchCase  # noqa: E402
from tests.support.live import LiveHost  # noqa: E402



class _TimedLauncher:
    """
    The host's launcher, noting when it spawned.
    """

    def __init__(self, real: Any) -> None:
        self.real = real
        self.spawnedAt: float | None = None

    def spawn(self, protocol: Any, **kw: Any) -> Any:
        self.spawnedAt = time.perf_counter()
        return self.real.spawn(protocol, **kw)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)


def _status(pid: int, field: str) -> str | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return line.split(":", 1)[1].strip()
    except OSError:
        return None
    return None


def _rss(pid: int) -> int:
    value = _status(pid, "VmRSS")
    return int(value.split()[0]) * 1024 if value else 0


def _tree(root: int) -> list[int]:
    """
    C{root} and every descendant of it, from the host's C{/proc}.
    """
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            ppid = _status(int(entry), "PPid")
            if ppid is not None:
                children.setdefault(int(ppid), []).append(int(entry))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, []))
    return found


def _isNode(pid: int) -> bool:
    try:
        return os.readlink(f"/proc/{pid}/exe").endswith("/node")
    except OSError:
        return False


async def sample(host: LiveHost, profile: str) -> dict[str, float]:
    """
    One new session of C{profile}, prompted once.
    """
    sid = await host.create(profile=profile)
    session = host.registry().sessions[sid]
    conductor = session.conductor
    timed = _TimedLauncher(conductor.launcher)
    conductor.launcher = timed
    marks: dict[str, float] = {}
    settled: Deferred = Deferred()

    def listen(event: dict[str, Any]) -> None:
        if event["type"] == "body.materialized":
            marks["materialized"] = time.perf_counter()
        elif event["type"] == "run.settled" and not settled.called:
            marks["settled"] = time.perf_counter()
            settled.callback(None)

    stop = session.feed.subscribe(listen)
    start = time.perf_counter()
    code, frame = await host.command(sid, "prompt", "p1", text="hello")
    assert code == 202, frame
    await settled
    stop()
    tree = _tree(conductor.transport.pid)
    node = [pid for pid in tree if _isNode(pid)]
    assert len(node) == 1, tree
    result = {
        "spawn -> get_state (ms)": (marks["materialized"] - timed.spawnedAt) * 1000,
        "prompt -> materialized (ms)": (marks["materialized"] - start) * 1000,
        "prompt -> settled (ms)": (marks["settled"] - start) * 1000,
        "pi VmRSS (MiB)": _rss(node[0]) / 2**20,
        "body VmRSS (MiB)": sum(_rss(pid) for pid in tree) / 2**20,
        "processes": float(len(tree)),
    }
    await conductor.dispose("bench")
    return result


async def main(reactor: Any, runs: int) -> None:
    case = BenchCase("vehicle-bench-box-")
    try:
        host = LiveHost(case)  # type: ignore[arg-type]
        await host.start()
        profiles = ("chat", "agent")
        # One warm-up of each, not counted (the first node start pays for
        # the page cache).
        for profile in profiles:
            await sample(host, profile)
        samples: dict[str, list[dict[str, float]]] = {p: [] for p in profiles}
        for _ in range(runs):
            for profile in profiles:
                samples[profile].append(await sample(host, profile))
        metrics = list(samples["chat"][0])
        print(f"bench_box: {runs} samples each, medians (min-max)")
        print(f"{'':30} {'chat (unboxed)':>22} {'agent (bwrap)':>22} {'ratio':>7}")
        for metric in metrics:
            cells = []
            medians = []
            for profile in profiles:
                values = [s[metric] for s in samples[profile]]
                median = statistics.median(values)
                medians.append(median)
                cells.append(f"{median:8.1f} ({min(values):.1f}-{max(values):.1f})")
            ratio = medians[1] / medians[0] if medians[0] else float("nan")
            print(f"{metric:30} {cells[0]:>22} {cells[1]:>22} {ratio:7.2f}")
    finally:
        await case.cleanup()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    options = parser.parse_args()
    react(lambda reactor: ensureDeferred(main(reactor, options.runs)))
