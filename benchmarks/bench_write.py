"""
The write path beside its floors, in one run (issue 16, benchmark c).

wrk against the host's durable writes and a read, and against two bare
Klein routes served the same way (one process, one reactor, the same
interpreter): one that parses the same JSON and answers a frame, one that
also appends a line to a file and fsyncs it per request.  The host's
writes are a rename (C{PATCH /sessions/:id}: its event, and C{meta.json}
after it) and a command (C{set_room_policy}: a request's record and its
event, each request a fresh C{requestId}); the read is C{inspect}.  Each
at 16 and 64 connections, every measure repeated round robin (the machine
is shared: figures are given as the median and the range), with the CPU
each request cost the host's reactor thread (and, together, its other threads
and its sync helper process, which make the syncs) read from C{/proc}.

    .venv/bin/python benchmarks/bench_write.py [--seconds N] [--repeat N]
        [--connections 16,64] [--src DIR] [--plain-floor] [--spares]
    .venv/bin/python benchmarks/bench_write.py --profile [--requests N]

The floors are sent the same request as the host (the identity headers
gardend adds, the same body), to their own paths; C{--plain-floor} sends
them only wrk's C{Host} (as before the twelfth stop: ~12 us a request
less for the floor to read).  The hosts keep no spare bodies unless
C{--spares} (L{benchmarks._common.hostEnvironment}).  Each measure runs on
a session of its own, made before the measures and left quiet
L{QUIET_SECONDS}, as a session in use is.

C{--src DIR} runs a second host from another checkout (a C{git worktree}
of an earlier commit, say), or from its C{src/}, beside this checkout's, in
the same run, so the two are measured under the same load.

C{--profile} needs no wrk: it drives the real app in this process through
Twisted's HTTP channel (no sockets, the writer run by hand) and prints the
reactor thread's CPU per request for each route beside the bare parsing
route, alternated, and where its Python calls go (trust, parse, the
session's step, the writer's answer, the answer's bytes...).

The first form needs wrk (Debian's C{wrk}): it is installed on demand
(L{benchmarks._common.requireWrk}) when it is not on the PATH.
"""

from __future__ import annotations

import argparse
import collections
import gc
import json
import os
import re
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any, Callable

from vehicle_local.standin import freeLoopbackPort as freePort


ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks._common import hostEnvironment, requireWrk, scriptedModels  # noqa: E402
PYTHON = ROOT / ".venv" / "bin" / "python"
TWISTD = ROOT / ".venv" / "bin" / "twistd"
SECRET = "bench-" + secrets.token_hex(8)
TICK = os.sysconf("SC_CLK_TCK")
#: How long the measures' sessions are left before the first measure: past
#: the two seconds a session's pi folder is listed on every snapshot after
#: it changed (L{vehicle.body._spawner.RACY_SECONDS}).
QUIET_SECONDS = 3.0

#: A bare Klein app served like the host: one route parsing the body as
#: the host does and answering a frame, one that also syncs a line.
FLOOR = r'''
import json, os, sys
from klein import Klein
from twisted.internet import reactor
from twisted.web.server import Site

app = Klein()
log = os.open(sys.argv[2], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)

def frame(request, value):
    request.setHeader(b"content-type", b"application/json")
    return json.dumps({"protocol": "sophia.vehicle-ride.v2", "type": "session.renamed",
                       "requestId": None, "value": value}, separators=(",", ":")).encode()

@app.route("/parse", methods=["PATCH", "GET"])
def parse(request):
    body = json.loads(request.content.read() or b"{}")
    return frame(request, {"title": body.get("title")})

@app.route("/fsync", methods=["PATCH"])
def fsync(request):
    body = json.loads(request.content.read())
    os.write(log, json.dumps({"title": body.get("title")}).encode() + b"\n")
    os.fsync(log)
    return frame(request, {"title": body.get("title")})

reactor.listenTCP(int(sys.argv[1]), Site(app.resource()), interface="127.0.0.1")
print("ready", flush=True)
reactor.run()
'''

#: A wrk script: the method, the body, the headers; a command's body gets a
#: fresh requestId every request (thread and count), so none replays.
SCRIPT = '''
wrk.method = "{method}"
wrk.body = '{body}'
{headers}
local threads = 0
function setup(thread)
  threads = threads + 1
  thread:set("tag", "{tag}-" .. threads)
end
local count = 0
function request()
  if {fresh} then
    count = count + 1
    local body = '{{"requestId":"' .. tag .. '-' .. count .. '","type":"set_room_policy","policy":"suggest"}}'
    return wrk.format(nil, nil, nil, body)
  end
  return wrk.format()
end
'''

IDENTITY = {
    "x-internal-service": SECRET, "x-user-id": "owner", "x-sophia-caller-role": "owner",
    "x-graph-id": "bench", "x-sophia-graph-role": "owner", "x-vehicle-client-id": "bench",
    "content-type": "application/json",
}


def waitFor(url: str, headers: dict[str, str] | None = None, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while True:
        try:
            urllib.request.urlopen(urllib.request.Request(url, headers=headers or {}), timeout=2)
            return
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def startHost(workdir: Path, src: Path | None = None,
              spares: bool = False) -> tuple[subprocess.Popen[bytes], int]:
    """
    A host served by C{twistd} with its data in C{workdir}, from C{src}'s
    tree if given, with no spare pool unless C{spares}
    (L{hostEnvironment}).
    """
    port = freePort()
    env = hostEnvironment(SECRET, scriptedModels(workdir / "models.json"), src, spares)
    process = subprocess.Popen(
        [str(TWISTD), "-n", "--pidfile=", "vehicle", "--listen",
         f"tcp:{port}:interface=127.0.0.1", "--data-dir", str(workdir / "data")],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=workdir,
    )
    waitFor(f"http://127.0.0.1:{port}/health")
    return process, port


def createSession(port: int) -> str:
    """
    A new session (its creator, C{bench}, holds its lease).
    """
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/sessions", method="POST",
        data=json.dumps({"requestId": "bench-" + secrets.token_hex(6)}).encode(),
        headers=IDENTITY,
    )
    frame = json.loads(urllib.request.urlopen(request).read())
    return str(frame["value"]["session"]["sessionId"])


def startFloor(workdir: Path) -> tuple[subprocess.Popen[bytes], int]:
    port = freePort()
    script = workdir / "floor.py"
    script.write_text(FLOOR)
    process = subprocess.Popen(
        [str(PYTHON), str(script), str(port), str(workdir / "floor.log")],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
    )
    assert process.stdout is not None
    process.stdout.readline()
    return process, port


def _statFields(stat: str) -> list[str]:
    """
    The fields of a C{/proc} C{stat} line after the command's name (the
    state is the first, the parent's pid the second).
    """
    return stat.rsplit(")", 1)[1].split()


def _cpuSeconds(fields: list[str]) -> float:
    """
    The user and system CPU seconds of L{_statFields}.
    """
    return (int(fields[11]) + int(fields[12])) / TICK


def threadTimes(pid: int) -> dict[int, float]:
    """
    CPU seconds (user and system) of each thread of process C{pid}.
    """
    times: dict[int, float] = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            stat = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
        except OSError:
            continue
        times[int(tid)] = _cpuSeconds(_statFields(stat))
    return times


def helperTimes(pid: int) -> float:
    """
    CPU seconds (user and system) of the sync helpers process C{pid} has
    started (its children running C{_syncd.py}), or 0.
    """
    total = 0.0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            command = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue
        fields = _statFields(stat)
        if int(fields[1]) == pid and b"_syncd.py" in command:
            total += _cpuSeconds(fields)
    return total


#: One measure: requests per second, p50 and p99 latency (ms), and the CPU
#: per request (us) of the process's main thread and of its other threads
#: and its sync helper together.
Measure = tuple[float, float, float, float, float]


def wrk(url: str, method: str, connections: int, seconds: int, workdir: Path,
        headers: dict[str, str], pid: int, fresh: bool = False) -> Measure:
    """
    One wrk run against C{url}, served by process C{pid}; C{fresh}: a
    command with a new C{requestId} every request.
    """
    lua = workdir / f"wrk-{secrets.token_hex(3)}.lua"
    body = json.dumps({"title": "a title"}) if method == "PATCH" else ""
    lua.write_text(SCRIPT.format(
        method=method, body=body, tag=secrets.token_hex(4), fresh="true" if fresh else "false",
        headers="\n".join(f'wrk.headers["{k}"] = "{v}"' for k, v in headers.items()),
    ))
    before, helperBefore = threadTimes(pid), helperTimes(pid)
    out = subprocess.run(
        ["wrk", "-t2", f"-c{connections}", f"-d{seconds}s", "--latency", "-s", str(lua), url],
        capture_output=True, text=True, check=True,
    ).stdout
    after, helperAfter = threadTimes(pid), helperTimes(pid)
    rate = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    total = int(re.search(r"(\d+) requests in", out).group(1))  # type: ignore[union-attr]

    def percentile(name: str) -> float:
        match = re.search(rf"^\s+{name}%\s+([\d.]+)(us|ms|s)", out, re.M)
        assert match is not None, out
        value, unit = float(match.group(1)), match.group(2)
        return value / 1000 if unit == "us" else value * 1000 if unit == "s" else value

    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    if errors:
        raise SystemExit(f"wrk saw {errors.group(1)} refusals on {url}:\n{out}")
    used = {tid: t - before.get(tid, 0.0) for tid, t in after.items()}
    main = used.pop(pid, 0.0)
    others = sum(used.values()) + helperAfter - helperBefore
    return (rate, percentile("50"), percentile("99"), main / total * 1e6, others / total * 1e6)


def loadavg() -> str:
    return Path("/proc/loadavg").read_text().split(" ", 1)[0]


def measureAll(args: argparse.Namespace) -> None:
    requireWrk()
    workdir = Path(tempfile.mkdtemp(prefix="vehicle-bench-write-"))
    hosts: list[tuple[str, subprocess.Popen[bytes], int]] = []
    floor, floorPort = startFloor(workdir)
    loads = [loadavg()]
    try:
        for label, src in [("host", None)] + ([("before", args.src)] if args.src else []):
            (workdir / label).mkdir()
            process, port = startHost(workdir / label, src, args.spares)
            hosts.append((label, process, port))
        rows: list[tuple[str, int, Callable[[], Measure]]] = []
        connections = [int(n) for n in args.connections.split(",")]
        # Each measure on a new session (one whose log grew in an earlier
        # measure, or in the other host's, would cost more), made before the
        # measures and left quiet a while, as a session someone uses is: a
        # session's first seconds are not what a request costs it.
        made = {port: [createSession(port) for _ in range(3 * len(connections) * args.repeat)]
                for _, _, port in hosts}
        time.sleep(QUIET_SECONDS)
        for c in connections:
            for label, process, port in hosts:
                rows += [
                    (f"{label}: rename", c, _onNew(made[port], port, "", "PATCH", c, args,
                                                   workdir, process.pid)),
                    (f"{label}: command", c, _onNew(made[port], port, "/commands", "POST", c,
                                                    args, workdir, process.pid, fresh=True)),
                    (f"{label}: inspect", c, _onNew(made[port], port, "", "GET", c, args,
                                                    workdir, process.pid)),
                ]
            bare = f"http://127.0.0.1:{floorPort}"
            # The floors get the very request the host gets (its identity
            # headers too), only to another path.
            same = {} if args.plain_floor else IDENTITY
            rows += [
                ("bare: parse", c, _run(bare + "/parse", "PATCH", c, args, workdir, same,
                                        floor.pid)),
                ("bare: parse + fsync", c, _run(bare + "/fsync", "PATCH", c, args, workdir, same,
                                                floor.pid)),
                ("bare: GET parse", c, _run(bare + "/parse", "GET", c, args, workdir, same,
                                            floor.pid)),
            ]
        results: dict[tuple[str, int], list[Measure]] = collections.defaultdict(list)
        for _ in range(args.repeat):
            for name, c, measure in rows:
                results[(name, c)].append(measure())
            loads.append(loadavg())
    finally:
        for _, process, _ in hosts:
            process.terminate()
            process.wait()
        floor.terminate()
        floor.wait()
        shutil.rmtree(workdir, ignore_errors=True)
    report(results, args, loads, [label for label, *_ in hosts])


def _run(url: str, method: str, c: int, args: argparse.Namespace, workdir: Path,
         headers: dict[str, str], pid: int, fresh: bool = False) -> Callable[[], Measure]:
    return lambda: wrk(url, method, c, args.seconds, workdir, headers, pid, fresh)


def _onNew(sessions: list[str], port: int, path: str, method: str, c: int,
           args: argparse.Namespace, workdir: Path, pid: int,
           fresh: bool = False) -> Callable[[], Measure]:
    """
    A measure on the next of C{sessions} (made beforehand, each used once).
    """
    def measure() -> Measure:
        url = f"http://127.0.0.1:{port}/sessions/{sessions.pop()}{path}"
        return wrk(url, method, c, args.seconds, workdir, IDENTITY, pid, fresh)
    return measure


def _spread(values: list[float], digits: int = 0) -> str:
    if len(values) == 1:
        return f"{values[0]:.{digits}f}"
    return f"{statistics.median(values):.{digits}f} ({min(values):.{digits}f}-{max(values):.{digits}f})"


def report(results: dict[tuple[str, int], list[Measure]], args: argparse.Namespace,
           loads: list[str], labels: list[str]) -> None:
    print(f"cores: {os.cpu_count()}; load average (1 min) {', '.join(loads)}; wrk -t2, "
          f"{args.seconds} s each, {args.repeat} rounds round robin; median (range)")
    if args.src:
        print(f"host: {ROOT / 'src'}; before: {args.src}")
    print("the floors' requests: " + ("wrk's Host header only (--plain-floor)" if args.plain_floor
                                      else "the host's own (its identity headers, the same body)")
          + "; the hosts' spare pools: " + ("kept (--spares)" if args.spares else "none"))
    print(f"{'what':<22}{'conns':>6}{'req/s':>20}{'p99 ms':>22}{'reactor us/req':>22}"
          f"{'others us/req':>16}")
    for (name, c), measures in results.items():
        print(f"{name:<22}{c:>6}{_spread([m[0] for m in measures]):>20}"
              f"{_spread([m[2] for m in measures], 1):>22}{_spread([m[3] for m in measures]):>22}"
              f"{_spread([m[4] for m in measures]):>16}")
    print("ratios to the floors (each round's own, median and range): req/s, p99 x")
    for label in labels:
        for c in sorted({c for _, c in results}):
            for what, floorName in (("rename", "bare: parse"), ("command", "bare: parse"),
                                    ("rename", "bare: parse + fsync"),
                                    ("command", "bare: parse + fsync"),
                                    ("inspect", "bare: GET parse")):
                host, floor = results[(f"{label}: {what}", c)], results[(floorName, c)]
                rate = [h[0] / f[0] for h, f in zip(host, floor)]
                p99 = [h[2] / f[2] for h, f in zip(host, floor)]
                print(f"  {label}: {what:<8} c{c:<3} / {floorName:<20} "
                      f"{_spread(rate, 2):>18}   p99 x {_spread(p99, 2)}")


# -- in process: the reactor's share, and where it goes -------------------------

#: The phases a request's Python calls are put under: the innermost of
#: these functions on the stack when the call is made.
PHASES = {
    "authenticate": "trust", "_parse": "parse and validate", "find": "find the session",
    "settledReplay": "replay", "summary": "the answer's summary", "commit": "the record",
    "rewrite": "the record", "_ran": "the writer's answer", "_pump": "the writer",
    "answerFrame": "the answer's bytes", "_frame": "the answer's bytes",
    "headerReceived": "HTTP", "lineReceived": "HTTP", "requestDone": "HTTP", "finish": "HTTP",
    "process": "HTTP", "match": "routing", "render": "routing", "_execute": "routing",
    "emit": "the record", "_log": "logging", "emitEvent": "logging",
    "_answer": "the route", "respond": "the route", "_onSession": "the route",
    "rename": "the session's verb", "command": "the session's verb",
    "settled": "the session's verb", "dataReceived": "HTTP", "allContentReceived": "HTTP",
}


def profile(requests: int, rounds: int = 7, phases: bool = True) -> dict[str, Any]:
    """
    The host's routes in this process (its real app and HTTP channel, no
    sockets, syncs made no-ops, the writer's batches run by hand between
    rounds of 16 requests), beside the bare parsing route, alternated.

    @return: per route, the reactor's CPU per request (the floor's beside
        it) and, with C{phases}, its Python calls per request by phase.
    """
    sys.path.insert(0, str(ROOT))
    sys.path.insert(0, str(ROOT / "src"))
    from klein import Klein
    from twisted.internet.address import IPv4Address
    from twisted.internet.defer import Deferred
    from twisted.internet.testing import MemoryReactorClock, StringTransport
    from twisted.web.server import Site

    from tests.support.harness import MODELS, FakeLauncher
    from vehicle._tap import buildHost
    from vehicle.models import ModelCatalog
    from vehicle.settings import Settings
    from vehicle.store import GroupWriter, OsFiles, useFiles
    from vehicle.web import VehicleSite

    class NoSync(OsFiles):
        def fsync(self, fd: int) -> None:
            pass

    previous = useFiles(NoSync())
    held: list[tuple[Callable[[], None], Deferred[None]]] = []

    def runner(work: Callable[[], None]) -> Deferred[None]:
        ran: Deferred[None] = Deferred()
        held.append((work, ran))
        return ran

    workdir = Path(tempfile.mkdtemp(prefix="vehicle-bench-profile-"))
    clock = MemoryReactorClock()
    clock.advance(1_796_000_000)
    secret = "profile-" + secrets.token_hex(8)
    api, host = buildHost(
        Settings(secret=secret, dataDir=workdir, listen="tcp:0"),
        ModelCatalog(MODELS["providers"], "scripted/echo-1"), clock,
        launcher=FakeLauncher(), writer=GroupWriter(runner=runner, clock=clock),
    )
    host.startService()
    bare = Klein()

    @bare.route("/parse", methods=["PATCH", "GET"])
    def parse(request: Any) -> bytes:
        body = json.loads(request.content.read() or b"{}")
        request.setHeader(b"content-type", b"application/json")
        return json.dumps({"protocol": "sophia.vehicle-ride.v2", "type": "session.renamed",
                           "requestId": None, "value": {"title": body.get("title")}},
                          separators=(",", ":")).encode()

    headers = {"Host": "127.0.0.1", **IDENTITY, "x-internal-service": secret}

    def raw(method: str, path: str, body: bytes = b"") -> bytes:
        head = f"{method} {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        if body:
            head += f"Content-Length: {len(body)}\r\n"
        return head.encode() + b"\r\n" + body

    def channels(site: Any) -> list[tuple[Any, Any]]:
        made = []
        for n in range(16):
            channel = site.buildProtocol(IPv4Address("TCP", "127.0.0.1", 40000 + n))
            transport = StringTransport()
            channel.makeConnection(transport)
            made.append((channel, transport))
        return made

    hostChannels = channels(VehicleSite(api.resource(), clock))
    bareChannels = channels(Site(bare.resource(), reactor=clock))
    channel, transport = hostChannels[0]
    channel.dataReceived(raw("POST", "/sessions", b'{"requestId": "x"}'))
    writerTime = [0.0]

    def runHeld() -> None:
        while held:
            work, ran = held.pop(0)
            started = time.process_time()
            work()
            writerTime[0] += time.process_time() - started
            ran.callback(None)

    runHeld()
    found = re.search(rb'"sessionId":"(s[0-9a-f]+)"', transport.value())
    assert found is not None, transport.value()
    sid = found.group(1).decode()
    count = [0]
    routes: dict[str, Callable[[], bytes]] = {
        "rename": lambda: raw("PATCH", f"/sessions/{sid}", b'{"title": "a title"}'),
        "command": lambda: raw("POST", f"/sessions/{sid}/commands", json.dumps({
            "requestId": f"p{count[0]}", "type": "set_room_policy", "policy": "suggest"}).encode()),
        "inspect": lambda: raw("GET", f"/sessions/{sid}"),
        "bare: parse": lambda: raw("PATCH", "/parse", b'{"title": "a title"}'),
        "bare: GET parse": lambda: raw("GET", "/parse"),
    }

    def drive(route: str, n: int) -> float:
        made = bareChannels if route.startswith("bare") else hostChannels
        writerTime[0] = 0.0
        started = time.process_time()
        for _ in range(max(1, n // 16)):
            for channel, transport in made:
                count[0] += 1
                channel.dataReceived(routes[route]())
            runHeld()
            for channel, transport in made:
                assert b" 20" in transport.value()[:20], transport.value()[:300]
                transport.clear()
        used = time.process_time() - started - writerTime[0]
        return used / (max(1, n // 16) * 16) * 1e6

    out: dict[str, Any] = {}
    try:
        for route, floorRoute in (("rename", "bare: parse"), ("command", "bare: parse"),
                                  ("inspect", "bare: GET parse")):
            drive(route, 160)
            drive(floorRoute, 160)
            pairs = [(drive(floorRoute, requests), drive(route, requests)) for _ in range(rounds)]
            out[route] = {"host": [h for _, h in pairs], "floor": [f for f, _ in pairs]}
            out[route]["garbage"] = _garbage(lambda: drive(route, 160), 160)
            out[route]["floorGarbage"] = _garbage(lambda: drive(floorRoute, 160), 160)
            if phases:
                out[route]["calls"] = _calls(lambda: drive(route, 160), 160)
                out[route]["floorCalls"] = _calls(lambda: drive(floorRoute, 160), 160)
    finally:
        host.stopService()
        runHeld()
        useFiles(previous)
        shutil.rmtree(workdir, ignore_errors=True)
    return out


def _garbage(run: Callable[[], Any], n: int, tries: int = 3) -> float:
    """
    The objects per request that C{run} leaves for the collector (held in
    reference cycles after their request was answered): counted with the
    collector off while it runs, then by one full collection; the fewest
    of C{tries} (what a request leaves, it leaves every time; a cycle let
    go meanwhile by something else, once).
    """
    counts = []
    for _ in range(tries):
        gc.collect()
        gc.disable()
        try:
            run()
            counts.append(gc.collect() / n)
        finally:
            gc.enable()
    return min(counts)


def _calls(run: Callable[[], Any], n: int) -> dict[str, float]:
    """
    The Python calls (C functions too) per request made while C{run}
    runs, by the phase of L{PHASES} they are made under.
    """
    counts: collections.Counter[str] = collections.Counter()

    def tally(frame: Any, event: str, arg: Any) -> None:
        if event not in ("call", "c_call"):
            return
        while frame is not None:
            phase = PHASES.get(frame.f_code.co_name)
            if phase is not None:
                counts[phase] += 1
                return
            frame = frame.f_back
        counts["the rest (the reactor, Klein, Deferreds)"] += 1

    sys.setprofile(tally)
    try:
        run()
    finally:
        sys.setprofile(None)
    return {phase: value / n for phase, value in counts.most_common()}


def reportProfile(out: dict[str, Any]) -> None:
    print(f"in process, the reactor thread's CPU per request (us), the bare route's beside it, "
          f"alternated; median (range); load average {loadavg()}")
    for route, figures in out.items():
        ratios = [h / f for h, f in zip(figures["host"], figures["floor"])]
        print(f"  {route:<8} host {_spread(figures['host'])}  floor {_spread(figures['floor'])}"
              f"  host / floor {_spread(ratios, 2)}")
        print(f"    left to the collector, objects per request (host, floor): "
              f"{figures['garbage']:.1f}, {figures['floorGarbage']:.1f}")
        if "calls" in figures:
            print(f"    Python calls per request (host, floor): "
                  f"{sum(figures['calls'].values()):.0f}, "
                  f"{sum(figures['floorCalls'].values()):.0f}")
            for phase, calls in figures["calls"].items():
                print(f"      {calls:7.1f} {figures['floorCalls'].get(phase, 0.0):7.1f}  {phase}")


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--connections", default="16,64")
    parser.add_argument("--src", type=Path, default=None)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--plain-floor", action="store_true",
                        help="the floors' requests without the host's identity headers "
                             "(as before the twelfth stop)")
    parser.add_argument("--spares", action="store_true",
                        help="keep the hosts' spare pools (refilled during the measures)")
    parser.add_argument("--requests", type=int, default=640)
    args = parser.parse_args(argv)
    if args.profile:
        reportProfile(profile(args.requests))
    else:
        measureAll(args)


if __name__ == "__main__":
    main(sys.argv[1:])
