"""
Benchmark (a) of issue 16: a prompt's first text delta on a warm body,
through the host against straight to pi, side by side in one run.

For each round, one prompt each (interleaved, so a busy machine weighs on
all alike):

- C{host}: POST the prompt to a live host (real app, real pi, the scripted
  model), until its first C{message.delta} reaches an SSE watcher; the body
  is one the host started for its session (no spares);
- C{host, spare's body}: the same on a body that was a spare (its model
  reached through its proxy), when the checkout has spares;
- C{straight to pi}: the floor: C{prompt} written to a warm C{pi --mode
  rpc} child with vehicle's extension, until its first C{text_delta}.

Each is warmed by one prompt first, not counted.  With C{--trace}, the
host's way of one prompt is timed at its steps (request read, the durable
accept, pi's stdin, pi's first delta, the event handed to the stream, the
delta told to the watchers once the durable events before it are) and
each step's median is printed as time from the POST, with when the run's
first durable events were emitted and made durable.  With
C{TMPDIR=/dev/shm} every folder (the host's data, pi's files) is on tmpfs,
where a sync costs nothing: the host's way without the disk.

Usage: .venv/bin/python benchmarks/bench_delta.py [--runs N] [--trace] [--src CHECKOUT] [--treq]

C{--src} runs the host (and its test support) from another checkout, e.g.
a C{git worktree} of an earlier commit, to measure before a change.

The prompts are sent by a bare HTTP/1.1 client on one kept connection
(L{benchmarks._common.RawClient}): the client shares the host's reactor
thread, as the floor's does pi's, and an HTTP library's own work would
be counted as the host's.  C{--treq} sends them with treq instead, as
the benchmark did before 2026-12-03.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any, Callable

ROOT = Path(__file__).resolve().parent.parent


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--trace", action="store_true")
    parser.add_argument("--src", type=Path, default=None)
    parser.add_argument("--treq", action="store_true",
                        help="send each prompt with treq (as before 2026-12-03), "
                             "not the bare client")
    return parser.parse_args()


ARGS = _arguments() if __name__ == "__main__" else None
CHECKOUT = (ARGS.src.resolve() if ARGS is not None and ARGS.src else ROOT)
sys.path[:0] = [str(CHECKOUT / "src"), str(CHECKOUT)]

from twisted.internet.defer import Deferred  # noqa: E402
from twisted.internet.task import react  # noqa: E402

from benchmarks._common import BenchCase  # noqa: E402


def _ownCommon() -> ModuleType:
    """
    This tree's C{benchmarks/_common.py}, whichever checkout C{--src}
    names: the floor's pi is started by this tree's helper (an earlier
    checkout may not have it), from that checkout's C{vehicle.body}.
    """
    spec = importlib.util.spec_from_file_location("_ownCommon", ROOT / "benchmarks" / "_common.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_common = _ownCommon()
spawnBarePi, postRaw, uncheckedWatcher, rawClient = (
    _common.spawnBarePi, _common.postRaw, _common.uncheckedWatcher, _common.rawClient)


# -- the trace ------------------------------------------------------------------

#: label -> when it happened, for the prompt being traced (first time only).
TRACE: dict[str, float] = {}
TRACING = [False]


def _mark(label: str) -> None:
    if TRACING[0] and label not in TRACE:
        TRACE[label] = time.perf_counter()


def _wrap(owner: Any, name: str, label: str, when: Callable[..., bool] = lambda *a, **k: True,
          after: str | None = None) -> None:
    """
    Mark C{label} when C{owner.name} is called (and C{after} when it
    returns), if C{when} holds for its arguments.  A name the checkout
    does not have is left alone.
    """
    original = getattr(owner, name, None)
    if original is None:
        return

    def traced(*args: Any, **kwargs: Any) -> Any:
        hit = TRACING[0] and when(*args, **kwargs)
        if hit:
            _mark(label)
        result = original(*args, **kwargs)
        if hit and after:
            _mark(after)
        return result

    setattr(owner, name, traced)


#: label -> [calls, seconds] spent in it during the traced prompt, up to its
#: first delta at the SSE client.
SPENT: dict[str, list[float]] = {}


def _account(owner: Any, name: str, label: str) -> None:
    """
    Count the calls of C{owner.name} and the time spent in them while a
    prompt is traced.
    """
    original = getattr(owner, name, None)
    if original is None:
        return

    def counted(*args: Any, **kwargs: Any) -> Any:
        if not TRACING[0] or "SSE client has it" in TRACE:
            return original(*args, **kwargs)
        start = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            spent = SPENT.setdefault(label, [0, 0.0])
            spent[0] += 1
            spent[1] += time.perf_counter() - start

    setattr(owner, name, counted)


def _accountSyncs() -> None:
    """
    Count the logs' syncs while a prompt is traced, wherever they are made:
    by the sync helper's process (each log's sync time comes back with its
    batch's answer, L{JsonlLog.wroteElsewhere}) or by this one (the
    writer's thread, L{JsonlLog.sync}).  A checkout from before the helper
    has its syncs counted at C{os.fsync}.
    """
    from vehicle.store._jsonl import JsonlLog

    wrote = getattr(JsonlLog, "wroteElsewhere", None)
    if wrote is None:
        import os as _os

        _account(_os, "fsync", "fsync")
        return

    def wroteElsewhere(self: Any, written: int, lines: int, syncing: float | None,
                       *args: Any, **kwargs: Any) -> Any:
        if syncing is not None and TRACING[0] and "SSE client has it" not in TRACE:
            spent = SPENT.setdefault("fsync", [0, 0.0])
            spent[0] += 1
            spent[1] += syncing
        return wrote(self, written, lines, syncing, *args, **kwargs)

    JsonlLog.wroteElsewhere = wroteElsewhere  # type: ignore[method-assign]
    _account(JsonlLog, "sync", "fsync")


def installTrace() -> list[str]:
    """
    Time the host's steps of a prompt; the labels, in the order of the way.
    """
    from twisted.web.server import Request

    from vehicle.body._rpc import PiProtocol

    _wrap(Request, "process", "request read")
    try:
        from vehicle.session._journal import Journal

        _wrap(Journal, "commit", "accept: commit begins", after="accept: to the writer")
        _account(Journal, "emit", "durable events (emit)")
        _markEvents(Journal)
    except ImportError:
        pass
    try:
        from vehicle.body._conductor import Conductor

        _wrap(Conductor, "commandAccepted", "handed to the body")
    except ImportError:
        pass
    _wrap(PiProtocol, "request", "written to pi's stdin",
          when=lambda self, command, *a, **k: command.get("type") == "prompt")
    _wrap(PiProtocol, "outReceived", "pi's first delta read",
          when=lambda self, data, *a, **k: b'"text_delta"' in data)
    _account(PiProtocol, "outReceived", "pi's stdout read")
    _accountSyncs()
    try:
        from vehicle.session._watchers import Feed

        _wrap(Feed, "broadcast", "delta given to the feed",
              when=lambda self, kind, *a, **k: kind == "message.delta")
    except ImportError:
        pass
    try:
        from vehicle.session._watchers import Watchers

        # Told to the watchers once every durable event taken before it is.
        _wrap(Watchers, "publish", "delta told to the watchers",
              when=lambda self, entry, *a, **k: entry.event.type == "message.delta")
    except ImportError:
        pass
    return ["request read", "accept: commit begins", "accept: to the writer", "handed to the body",
            "written to pi's stdin", "pi's first delta read", "delta given to the feed",
            "delta told to the watchers", "SSE client has it",
            *(f"{step} {kind}" for kind in RUN_EVENTS for step in ("emitted:", "durable:"))]


#: The durable events of a run's first steps, each marked (with C{--trace})
#: when it is emitted and when it is durable: the delta is told to the
#: watchers only after them.
RUN_EVENTS = ("command.delivered", "run.started", "message.completed")


def _markEvents(journal: Any) -> None:
    """
    Mark the first of each of L{RUN_EVENTS} when the journal emits it and
    when it is durable (L{Journal._durable}, where the checkout has it).
    """
    emit, durable = journal.emit, getattr(journal, "_durable", None)

    def emitted(self: Any, kind: str, *args: Any, **kwargs: Any) -> Any:
        if TRACING[0] and kind in RUN_EVENTS and "SSE client has it" not in TRACE:
            _mark(f"emitted: {kind}")
        return emit(self, kind, *args, **kwargs)

    def madeDurable(self: Any, events: Any) -> Any:
        if TRACING[0] and "SSE client has it" not in TRACE:
            for event in events:
                if event.type in RUN_EVENTS:
                    _mark(f"durable: {event.type}")
        return durable(self, events)

    journal.emit = emitted
    if durable is not None:
        journal._durable = madeDurable


# -- the three ways -------------------------------------------------------------


class Direct:
    """
    A warm pi child with vehicle's extension, driven over its RPC.
    """

    async def start(self, reactor: Any, provider: dict[str, Any]) -> "Direct":
        from vehicle.body import PiProtocol

        self.first: Deferred[float] = Deferred()
        self.settled: Deferred[None] = Deferred()
        self.protocol = PiProtocol(self)
        self.transport = spawnBarePi(reactor, self.protocol, provider, "vehicle-bench-delta-")
        await self.protocol.request({"type": "get_state"})
        await self.prompt("warm up")
        #: When the first delta of its first prompt came.
        self.firstOfWarmUp = self.lastFirst
        return self

    def piEvent(self, event: dict[str, Any]) -> None:
        update = event.get("assistantMessageEvent") or {}
        if update.get("type") == "text_delta" and not self.first.called:
            self.first.callback(time.perf_counter())
        if event.get("type") == "agent_settled" and not self.settled.called:
            self.settled.callback(None)

    def bodyExited(self, *args: Any) -> None:
        pass

    async def prompt(self, text: str) -> float:
        self.first, self.settled = Deferred(), Deferred()
        start = time.perf_counter()
        await self.protocol.request({"type": "prompt", "message": text})
        first = await self.first
        await self.settled
        self.lastFirst = first
        return first - start

    async def stop(self, reactor: Any) -> None:
        await self.protocol.terminate(reactor)


class ThroughHost:
    """
    One session on a live host, watched on SSE.
    """

    def __init__(self, host: Any, treq: bool = False) -> None:
        self.host = host
        self.treq = treq

    async def start(self) -> "ThroughHost":
        from twisted.internet import reactor

        from tests.support.harness import identity

        self.sid = await self.host.create()
        self.watcher = await uncheckedWatcher(self.host, self.sid).start()
        if not self.treq:
            self.client = await rawClient(reactor, self.host.port.getHost().port)
            self.headers = {**identity(), "content-type": "application/json"}
            self.host.testCase.addCleanup(self.client.transport.loseConnection)
        self.n = 0
        await self.prompt("warm up")
        return self

    def _arriving(self, kind: str) -> Callable[[dict[str, Any]], bool]:
        """
        What the watcher waits for: the first C{kind} event of those that
        arrive from now on.  The watcher offers each message to it once, in
        order (those it holds first), so it counts them, rather than
        counting the whole list again at each message (which grew with
        every round, on the reactor thread the host shares).
        """
        held, offered = len(self.watcher.messages), [0]

        def arrived(message: dict[str, Any]) -> bool:
            offered[0] += 1
            return offered[0] > held and message.get("event") == kind

        return arrived

    async def prompt(self, text: str) -> float:
        self.n += 1
        delta, settled = self._arriving("message.delta"), self._arriving("run.settled")
        start = time.perf_counter()
        TRACE.clear()
        TRACE["POST sent"] = start
        path, body = (f"/sessions/{self.sid}/commands",
                      {"type": "prompt", "requestId": f"p{self.n}", "text": text})
        if self.treq:
            await postRaw(self.host, path, body)
        else:
            status, _ = await self.client.request("POST", path, self.headers,
                                                  json.dumps(body).encode())
            assert status in (200, 202), status
        await self.watcher.waitFor(delta)
        first = time.perf_counter()
        _mark("SSE client has it")
        await self.watcher.waitFor(settled)
        return first - start


async def startModel(reactor: Any) -> tuple[Any, str]:
    """
    The scripted model in a process of its own, as a provider is to a
    host: its answers never wait for the host's (or this script's) work.
    """
    from twisted.internet.protocol import ProcessProtocol

    class Model(ProcessProtocol):
        def __init__(self) -> None:
            self.url: Deferred[str] = Deferred()
            self.out = b""

        def outReceived(self, data: bytes) -> None:
            self.out += data
            if b"\n" in self.out and not self.url.called:
                self.url.callback(self.out.split(b"\n")[0].decode().strip())

    model = Model()
    env = {**os.environ, "PYTHONPATH": str(CHECKOUT / "src")}
    transport = reactor.spawnProcess(
        model, sys.executable, [sys.executable, "-m", "vehicle_local.model", "--port", "0"],
        env=env,
    )
    return transport, await model.url


async def hostWith(case: BenchCase, modelUrl: str, **settings: Any) -> Any:
    """
    A live host in this process whose model is the one at C{modelUrl}, and
    whose client keeps its connection (as a browser would).
    """
    from tests.support.live import LiveHost

    class Host(LiveHost):
        async def start(self) -> "Host":
            self.logLines = []
            self.model.url = modelUrl
            await self._startHost()
            return self

    host = await Host(case, **settings).start()
    host.pool.persistent = True
    case.addCleanup(host.pool.closeCachedConnections)
    return host


async def waitForSpare(host: Any, agent: bool = False) -> None:
    """
    Wait for a ready spare: a chat one, or (C{agent}) an agent one.
    """
    from tests.support.live import sleep

    pool = host.host.bodies.agent.spares if agent else host.host.bodies.spares
    for _ in range(600):
        if pool.ready:
            return
        await sleep(0.05)
    raise RuntimeError("no spare became ready")


def _line(name: str, times: list[float], floor: float) -> str:
    median = statistics.median(times)
    return (f"  {name:<28} {median * 1000:7.2f} ms  ({min(times) * 1000:.2f}-"
            f"{max(times) * 1000:.2f})  x {median / floor:5.2f} the floor")


async def main(reactor: Any, args: argparse.Namespace) -> None:
    from vehicle.settings import Settings

    labels = installTrace() if args.trace else []
    spares = any(f.name == "spareBodies" for f in Settings.__attrs_attrs__)
    load = os.getloadavg()
    case = BenchCase("vehicle-bench-delta-")
    model, modelUrl = await startModel(reactor)
    try:
        cold = await hostWith(case, modelUrl)
        ways: dict[str, Any] = {"through the host": await ThroughHost(cold, args.treq).start()}
        if spares:
            warm = await hostWith(case, modelUrl, spareBodies=1, spareRefillMs=60000)
            await waitForSpare(warm)
            ways["host, on a spare's body"] = await ThroughHost(warm, args.treq).start()
        direct = await Direct().start(reactor, cold.scriptedProvider())
        times: dict[str, list[float]] = {name: [] for name in ways}
        floor: list[float] = []
        traces: dict[str, list[float]] = {}
        for n in range(args.runs):
            for name, way in ways.items():
                TRACING[0] = True
                times[name].append(await way.prompt(f"hello {n}"))
                TRACING[0] = False
                if name == "through the host":
                    for label, at in TRACE.items():
                        traces.setdefault(label, []).append((at - TRACE["POST sent"]) * 1000)
                    for label, (calls, seconds) in SPENT.items():
                        traces.setdefault("#" + label, []).append(calls)
                        traces.setdefault("ms " + label, []).append(seconds * 1000)
                SPENT.clear()
            floor.append(await direct.prompt(f"hello {n}"))
        await direct.stop(reactor)
    finally:
        await case.cleanup()
        model.signalProcess("TERM")
    after = os.getloadavg()
    median = statistics.median(floor)
    print(f"prompt -> first text delta, warm body; median of {args.runs} (min-max)")
    print(f"host from {CHECKOUT / 'src'}; {os.cpu_count()} cores; load average "
          f"{load[0]:.2f} before, {after[0]:.2f} after; prompts sent with "
          f"{'treq' if args.treq else 'a bare HTTP/1.1 client'}")
    print(_line("straight to pi (the floor)", floor, median))
    for name, measured in times.items():
        print(_line(name, measured, median))
    if labels:
        print("the host's way of a prompt (median ms after the POST):")
        for label in labels:
            if label in traces:
                print(f"  {label:<28} {statistics.median(traces[label]):7.2f}")
        print("until then, on the host's thread (the syncs wherever they were made: the sync "
              "helper's or the writer's thread), median calls, ms:")
        for label in sorted(k[1:] for k in traces if k.startswith("#")):
            print(f"  {label:<28} {statistics.median(traces['#' + label]):5.0f} calls "
                  f"{statistics.median(traces['ms ' + label]):7.2f} ms")


if __name__ == "__main__":
    assert ARGS is not None
    react(lambda reactor: Deferred.fromCoroutine(main(reactor, ARGS)))
