"""
Memory, each figure beside its floor, in one run (issue 16, benchmark f):

1. a dormant session: the host's resident memory at its first C{/health}
   with C{--sessions} sessions of about C{--events} events (from their
   digests), less the same host's with none, per session; the floor is
   the issue's target, 20 KiB;
2. a restart beside the run before it: a host makes C{--made} sessions
   through its routes (a create and C{--renames} renames each) and is
   weighed, stopped cleanly, started again and weighed;
3. a live body beside a bare pi: C{bench_body.py}'s own figures (the pi
   process a host runs, a C{pi --mode rpc} child started alone), run in a
   process of its own (C{--no-body} skips it: it needs pi and the scripted
   model);
4. a spare body: measured once spare bodies exist in this tree (another
   change of issue 16); until then the line says so;
5. watchers that read nothing, over time: C{--watchers} SSE clients that
   never read (a small receive buffer) while a writer renames the session
   ten times a second; the host's memory every few seconds, beside the
   same run with watchers that read.  A stream stalled past
   C{VEHICLE_SSE_STALL_SECONDS} (C{--stall}) is cut.

    .venv/bin/python benchmarks/bench_memory.py [--sessions N] [--events N]
        [--made N] [--renames N] [--watchers N] [--stall S] [--no-body]
        [--src DIR]
"""

from __future__ import annotations

import argparse
import http.client
import json
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import NamedTuple

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._fleet import IDENTITY, HostProcess, fleet, machine  # noqa: E402


KiB, MiB = 1024, 1024 * 1024


def dormant(work: Path, sessions: int, events: int, src: Path | None) -> tuple[float, int, int]:
    """
    Bytes per dormant session; the host's memory with them and with none.
    """
    empty = HostProcess(work / "empty", src)
    empty.start()
    bare = empty.rss()
    empty.stop()
    data = work / "dormant"
    fleet(data, sessions, events)
    host = HostProcess(data, src)
    host.start()  # derives every digest
    host.stop()
    host.start()
    loaded = host.rss()
    host.stop()
    return (loaded - bare) / sessions, loaded, bare


class Client:
    """
    One keep-alive connection to a host, with its identity.
    """

    def __init__(self, port: int) -> None:
        self.connection = http.client.HTTPConnection("127.0.0.1", port, timeout=120)

    def call(self, method: str, path: str, body: object) -> dict[str, object]:
        self.connection.request(method, path, json.dumps(body), IDENTITY)
        answer = self.connection.getresponse()
        frame = json.loads(answer.read())
        if answer.status >= 300:
            raise SystemExit(f"{method} {path}: {frame}")
        return dict(frame)


def restartBeside(work: Path, made: int, renames: int, src: Path | None) -> tuple[int, int]:
    """
    The host's memory after making sessions, and after a restart.
    """
    host = HostProcess(work / "made", src)
    host.start()
    client = Client(host.port)
    for n in range(made):
        frame = client.call("POST", "/sessions", {"requestId": f"c{n}", "title": f"t{n}"})
        sid = frame["value"]["session"]["sessionId"]  # type: ignore[index]
        for k in range(renames):
            client.call("PATCH", f"/sessions/{sid}", {"title": f"title {n}.{k}"})
    before = host.rss()
    host.stop()
    host.start()
    after = host.rss()
    host.stop()
    return before, after


def body() -> str:
    """
    C{bench_body.py}'s memory lines, from a run of its own.
    """
    out = subprocess.run(
        [sys.executable, str(Path(__file__).parent / "bench_body.py"), "--runs", "2"],
        capture_output=True, text=True,
    )
    lines = [line for line in out.stdout.splitlines() if "memory" in line]
    return "\n".join(lines) if lines else f"bench_body.py failed:\n{out.stdout}{out.stderr}"


def spare() -> str:
    """
    A spare body's memory, once spare bodies exist here.
    """
    try:
        from vehicle.host import _bodies
    except ImportError:
        return "no host here"
    if not any("spare" in name.lower() for name in dir(_bodies)):
        return ("not measured: spare bodies (another change of issue 16) are not in this tree; "
                "once they are, this measures one spare's pi beside a bare pi")
    return ("spare bodies are in this tree: measure a spare's pi (its VmRSS) beside "
            "bench_body.py's bare pi")


class Sample(NamedTuple):
    at: float
    rss: int


def watchers(work: Path, count: int, stall: float, seconds: float, read: bool,
             src: Path | None) -> tuple[list[Sample], int, int]:
    """
    The host's memory over time with C{count} watchers (reading or not)
    while a writer renames ten times a second; how many were cut, and the
    bytes the readers got.
    """
    host = HostProcess(work / f"watch-{read}", src,
                       env={"VEHICLE_SSE_STALL_SECONDS": str(stall)})
    host.start()
    client = Client(host.port)
    sid = client.call("POST", "/sessions", {"requestId": "w"})["value"]["session"]["sessionId"]  # type: ignore[index]
    head = [f"GET /sessions/{sid}/events?since=0 HTTP/1.1", "host: bench",
            "accept: text/event-stream"] + [f"{k}: {v}" for k, v in IDENTITY.items()]
    request = ("\r\n".join(head) + "\r\n\r\n").encode()
    sockets = []
    for _ in range(count):
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.connect(("127.0.0.1", host.port))
        s.sendall(request)
        sockets.append(s)
    got = [0]
    stop = threading.Event()

    def drain() -> None:
        for s in sockets:
            s.setblocking(False)
        while not stop.is_set():
            for s in sockets:
                try:
                    got[0] += len(s.recv(65536))
                except (BlockingIOError, ConnectionError):
                    pass
            time.sleep(0.01)

    reader = threading.Thread(target=drain) if read else None
    if reader is not None:
        reader.start()
    samples = [Sample(0.0, host.rss())]
    began = time.perf_counter()
    n = 0
    text = "x" * 400
    while time.perf_counter() - began < seconds:
        n += 1
        client.call("PATCH", f"/sessions/{sid}", {"title": f"{text} {n}"})
        now = time.perf_counter() - began
        if now - samples[-1].at >= 2:
            samples.append(Sample(now, host.rss()))
        time.sleep(max(0.0, n / 10 - (time.perf_counter() - began)))
    stop.set()
    if reader is not None:
        reader.join()
    cut = 0
    for s in sockets:
        s.setblocking(False)
        try:
            while s.recv(1 << 20):
                pass
        except BlockingIOError:
            pass
        except ConnectionError:
            cut += 1
        s.close()
    host.stop()
    return samples, cut, got[0]


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sessions", type=int, default=1000)
    parser.add_argument("--events", type=int, default=1000)
    parser.add_argument("--made", type=int, default=1000)
    parser.add_argument("--renames", type=int, default=10)
    parser.add_argument("--watchers", type=int, default=100)
    parser.add_argument("--stall", type=float, default=20.0)
    parser.add_argument("--no-body", action="store_true")
    parser.add_argument("--src", type=Path, default=None)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="vehicle-bench-memory-") as scratch:
        work = Path(scratch)
        perSession, loaded, bare = dormant(work, args.sessions, args.events, args.src)
        before, after = restartBeside(work, args.made, args.renames, args.src)
        seconds = args.stall + 16
        silent, cut, _ = watchers(work, args.watchers, args.stall, seconds, False, args.src)
        reading, readerCut, got = watchers(work, args.watchers, args.stall, seconds, True,
                                           args.src)
    print(machine())
    print(f"host from {args.src or 'this checkout'}")
    print(f"a dormant session ({args.sessions} of ~{args.events} events; host {loaded / MiB:.1f} "
          f"MiB, {bare / MiB:.1f} MiB with none):")
    print(f"  {perSession / KiB:8.1f} KiB each   floor (target) 20 KiB   x {perSession / KiB / 20:.2f}")
    print(f"a restart beside the run before it ({args.made} sessions made, {args.renames} "
          f"renames each):")
    print(f"  the run {before / MiB:.1f} MiB, restarted {after / MiB:.1f} MiB   "
          f"x {after / before:.2f}   (floor: x 1.00)")
    if not args.no_body:
        print("a live body beside a bare pi (bench_body.py):")
        print("  " + body().replace("\n", "\n  "))
    print(f"a spare body: {spare()}")
    print(f"{args.watchers} watchers over {seconds:.0f} s while the session is renamed 10 times "
          f"a second (~450 B an event), stall {args.stall:.0f} s; host MiB:")
    print(f"  {'s':>5}{'not reading':>13}{'reading':>10}")
    for a, b in zip(silent, reading):
        print(f"  {a.at:5.0f}{a.rss / MiB:13.1f}{b.rss / MiB:10.1f}")
    print(f"  cut: {cut} of the non-readers, {readerCut} of the readers "
          f"(the readers got {got / MiB:.1f} MiB)")


if __name__ == "__main__":
    main(sys.argv[1:])
