"""
Benchmarks of the pi body through the host (run on demand, not in the suite):

1. time from a prompt to its first text delta, through the host (POST the
   command, first C{message.delta} on an SSE watch) against the same prompt
   sent straight to a C{pi --mode rpc} child, side by side in one run;
2. the host's own cost per durable event (append + fsync + publish);
3. resident memory of a live body (the pi process) and of a dormant session
   (the host's growth per loaded session).

Usage: .venv/bin/python benchmarks/bench_body.py [--runs N]
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from twisted.internet.defer import Deferred
from twisted.internet.task import react

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._common import (  # noqa: E402
    BenchCase, postRaw, rss, spawnBarePi, uncheckedWatcher,
)
from tests.support.harness import newSession  # noqa: E402
from tests.support.live import LiveHost  # noqa: E402
from vehicle.body import PiProtocol  # noqa: E402
from vehicle.session import Caller, Registry  # noqa: E402
from vehicle.store import DataDir  # noqa: E402



class _Sink:
    def __init__(self) -> None:
        self.firstDelta: Deferred = Deferred()
        self.settled: Deferred = Deferred()

    def piEvent(self, event: dict[str, Any]) -> None:
        update = event.get("assistantMessageEvent") or {}
        if update.get("type") == "text_delta" and not self.firstDelta.called:
            self.firstDelta.callback(time.perf_counter())
        if event.get("type") == "agent_settled" and not self.settled.called:
            self.settled.callback(None)

    def bodyExited(self, *a: Any) -> None:
        pass


async def direct(reactor: Any, host: LiveHost, runs: int) -> tuple[list[float], list[int], float]:
    """
    Prompt → first delta, straight to a pi child (warm: one prompt first);
    the child's resident memory; and the cold figure: from its spawn to the
    first delta of its first prompt.
    """
    sink = _Sink()
    proto = PiProtocol(sink)
    spawned = time.perf_counter()
    transport = spawnBarePi(reactor, proto, host.scriptedProvider(), "vehicle-bench-pi-")
    await proto.request({"type": "get_state"})
    times = []
    for n in range(runs + 1):
        sink.firstDelta, sink.settled = Deferred(), Deferred()
        start = time.perf_counter()
        await proto.request({"type": "prompt", "message": f"hello {n}"})
        first = await sink.firstDelta
        await sink.settled
        if n:
            times.append(first - start)
        else:
            cold = first - spawned
    live = rss(transport.pid)
    await proto.terminate(reactor)
    return times, [live], cold


async def throughHost(host: LiveHost, runs: int) -> tuple[list[float], int]:
    sid = await host.create()
    watcher = await uncheckedWatcher(host, sid).start()
    times = []
    for n in range(runs + 1):
        count = len([m for m in watcher.messages if m.get("event") == "message.delta"])
        settled = len([m for m in watcher.messages if m.get("event") == "run.settled"])
        start = time.perf_counter()
        await postRaw(host, f"/sessions/{sid}/commands",
                      {"type": "prompt", "requestId": f"p{n}", "text": f"hello {n}"})
        await watcher.waitFor(lambda m, c=[0]: m.get("event") == "message.delta" and
                              sum(1 for x in watcher.messages if x.get("event") == "message.delta") > count)
        first = time.perf_counter()
        await watcher.waitFor(lambda m: m.get("event") == "run.settled" and
                              sum(1 for x in watcher.messages if x.get("event") == "run.settled") > settled)
        if n:
            times.append(first - start)
    pid = host.registry().sessions[sid].conductor.transport.pid
    live = rss(pid)
    watcher.close()
    return times, live


def perEvent(count: int = 2000) -> tuple[float, float]:
    from twisted.internet.task import Clock

    root = Path(tempfile.mkdtemp(prefix="vehicle-bench-ev-"))
    clock = Clock()
    clock.advance(1_796_000_000)
    registry = Registry(dataDir=DataDir(root), clock=clock)
    registry.dataDir.ensure()
    caller = Caller(principal="alice", clientId="alice", role="owner", graphId="g")
    session = newSession(registry, caller, sessionId="sbench")
    received = []
    session.feed.subscribe(received.append)
    start = time.perf_counter()
    for n in range(count):
        session.emit("tool.started", {"runId": "run-1", "toolCallId": f"c{n}", "toolName": "x"})
    durable = (time.perf_counter() - start) / count
    start = time.perf_counter()
    for n in range(count):
        session.feed.broadcast("message.delta", {"runId": "run-1", "text": "word "})
    ephemeral = (time.perf_counter() - start) / count
    session.close()
    return durable, ephemeral


def dormantCost(sessions: int = 200) -> float:
    """Host memory per dormant session: load N sessions into a registry."""
    import gc
    from twisted.internet.task import Clock

    root = Path(tempfile.mkdtemp(prefix="vehicle-bench-dorm-"))
    clock = Clock()
    clock.advance(1_796_000_000)
    registry = Registry(dataDir=DataDir(root), clock=clock)
    registry.dataDir.ensure()
    for n in range(sessions):
        caller = Caller(principal="alice", clientId="alice", role="owner", graphId="g")
        s = newSession(registry, caller, sessionId=f"s{n:05d}", title=f"t{n}")
        for k in range(20):
            s.emit("tool.started", {"runId": "run-1", "toolCallId": f"c{k}", "toolName": "x"})
    registry.close()
    gc.collect()
    before = rss(os.getpid())
    loaded = Registry(dataDir=DataDir(root), clock=clock)
    loaded.loadAll()
    gc.collect()
    after = rss(os.getpid())
    loaded.close()
    return (after - before) / sessions


async def main(reactor: Any, runs: int = 5) -> None:
    case = BenchCase("vehicle-bench-")
    host = await LiveHost(case).start()
    try:
        hostTimes, hostRss = await throughHost(host, runs)
        directTimes, directRss, _ = await direct(reactor, host, runs)
    finally:
        await case.cleanup()
    durable, ephemeral = perEvent()
    dormant = dormantCost()
    h, d = statistics.median(hostTimes), statistics.median(directTimes)
    print(f"prompt → first delta (median of {runs}, warm body):")
    print(f"  through the host (HTTP + SSE): {h * 1000:8.1f} ms")
    print(f"  straight to pi --mode rpc:     {d * 1000:8.1f} ms")
    print(f"  ratio host / direct:           {h / d:8.2f}")
    print(f"host per durable event (append+fsync+publish): {durable * 1e6:8.1f} µs")
    print(f"host per ephemeral delta (publish only):       {ephemeral * 1e6:8.1f} µs")
    print(f"resident memory of a live body (pi process):   {hostRss / 2**20:8.1f} MiB "
          f"(direct: {directRss[0] / 2**20:.1f} MiB)")
    print(f"host memory per dormant session (20 events):   {dormant / 1024:8.1f} KiB")


if __name__ == "__main__":
    runs = int(sys.argv[sys.argv.index("--runs") + 1]) if "--runs" in sys.argv else 5
    react(lambda reactor: Deferred.fromCoroutine(main(reactor, runs)))
