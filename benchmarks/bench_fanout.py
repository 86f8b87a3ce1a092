"""
Fan-out to many watchers of one busy session, beside its floor, in one run
(issue 16, benchmark d).

A writer (wrk, C{--connections} connections) renames one session as fast
as it can for C{--seconds} (each rename a durable event); meanwhile
C{--watchers} SSE clients (100 and 1,000 by default, raw sockets read by
this process) follow the session.  The figures:

- deliveries per second: every watcher's events, from the writer's start
  to the moment the last watcher has the last event (those behind catch up
  after the writer stops, and count);
- the writer's requests per second beside its rate alone (no watcher).

The floor is a bare Klein process doing the same the simplest way: the
writer's route parses the JSON, encodes one message and writes it to every
watcher's request as it comes (no disk, no log, no catching up).

    .venv/bin/python benchmarks/bench_fanout.py [--watchers 100,1000]
        [--seconds N] [--connections N] [--src DIR]

It needs wrk (Debian's C{wrk}): installed on demand
(L{benchmarks._common.requireWrk}) when it is not on the PATH.
"""

from __future__ import annotations

import argparse
import json
import re
import selectors
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, NamedTuple

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._common import requireWrk  # noqa: E402
from benchmarks._fleet import IDENTITY, HostProcess, freePort, machine  # noqa: E402


#: The floor: SSE watchers on C{/events}, a writer on C{/write} whose every
#: request is written to every watcher as it comes.
FLOOR = r'''
import json, sys
from klein import Klein
from twisted.internet import reactor
from twisted.internet.defer import Deferred
from twisted.web.server import Site

app = Klein()
watchers = []
seq = [0]

@app.route("/events", methods=["GET"])
def events(request):
    request.setHeader(b"content-type", b"text/event-stream; charset=utf-8")
    request.write(b": connected\n\n")
    watchers.append(request)
    done = Deferred()
    request.notifyFinish().addBoth(lambda _: (watchers.remove(request), done.callback(None)))
    return done

@app.route("/cursor", methods=["GET"])
def cursor(request):
    return json.dumps({"cursor": seq[0]}).encode()

@app.route("/write", methods=["PATCH"])
def write(request):
    body = json.loads(request.content.read())
    seq[0] += 1
    data = json.dumps({"protocol": "sophia.vehicle-ride.v2", "seq": seq[0],
                       "type": "session.renamed", "data": {"title": body.get("title")}},
                      separators=(",", ":"))
    message = f"id: {seq[0]}\nevent: session.renamed\ndata: {data}\n\n".encode()
    for watcher in list(watchers):
        watcher.write(message)
    request.setHeader(b"content-type", b"application/json")
    return json.dumps({"type": "session.renamed", "value": {"title": body.get("title")}}).encode()

reactor.listenTCP(int(sys.argv[1]), Site(app.resource()), interface="127.0.0.1", backlog=2048)
print("ready", flush=True)
reactor.run()
'''

WRK = '''
wrk.method = "PATCH"
wrk.body = '{"title": "a title"}'
%s
'''


class Target(NamedTuple):
    """
    Where the writer writes and the watchers watch.
    """

    port: int
    write: str
    #: The watchers' path, following from the seq given.
    events: Callable[[int], str]
    headers: dict[str, str]
    #: The newest seq written so far.
    cursor: Callable[[], int]


class Result(NamedTuple):
    watchers: int
    writer: float
    deliveries: float
    events: int
    seconds: float


def wrk(url: str, headers: dict[str, str], connections: int, seconds: int,
        work: Path) -> subprocess.Popen[str]:
    script = work / "write.lua"
    script.write_text(WRK % "\n".join(f'wrk.headers["{k}"] = "{v}"' for k, v in headers.items()))
    return subprocess.Popen(
        ["wrk", "-t2", f"-c{connections}", f"-d{seconds}s", "-s", str(script), url],
        stdout=subprocess.PIPE, text=True,
    )


def rate(output: str) -> float:
    match = re.search(r"Requests/sec:\s+([\d.]+)", output)
    if match is None:
        raise SystemExit(f"wrk said:\n{output}")
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", output)
    if errors:
        raise SystemExit(f"wrk saw {errors.group(1)} refusals:\n{output}")
    return float(match.group(1))


#: The bytes a watcher keeps: an event's C{id} line comes before its data
#: (hundreds of bytes), so the last event's id is within the last few KiB.
TAIL = 16384


class Watchers:
    """
    C{count} SSE clients on raw sockets, read as fast as this process can;
    each keeps only its last bytes (enough to hold an event whole, its
    C{id} line before its data) and a count.
    """

    def __init__(self, port: int, path: str, headers: dict[str, str], count: int) -> None:
        # HTTP/1.0: the body comes as it is written, no chunk framing that
        # could fall inside an id line.
        head = [f"GET {path} HTTP/1.0", "host: bench", "accept: text/event-stream"]
        head += [f"{k}: {v}" for k, v in headers.items() if k != "content-type"]
        request = ("\r\n".join(head) + "\r\n\r\n").encode()
        self.selector = selectors.DefaultSelector()
        self.tails: dict[socket.socket, bytes] = {}
        self.received = 0
        for _ in range(count):
            s = socket.create_connection(("127.0.0.1", port))
            s.sendall(request)
            s.setblocking(False)
            self.tails[s] = b""
            self.selector.register(s, selectors.EVENT_READ)

    def pump(self, timeout: float = 0.05) -> None:
        for key, _ in self.selector.select(timeout):
            s = key.fileobj
            assert isinstance(s, socket.socket)
            while True:
                try:
                    data = s.recv(262144)
                except BlockingIOError:
                    break
                if not data:
                    self.selector.unregister(s)
                    break
                self.received += len(data)
                self.tails[s] = (self.tails[s] + data)[-TAIL:]

    def waitFor(self, seq: int, timeout: float = 600.0) -> float:
        """
        Read until every watcher has event C{seq}; return when that was.
        """
        return self.waitForBytes(b"id: %d\n" % seq, f"event {seq}", timeout)

    def waitForBytes(self, marker: bytes, what: str, timeout: float = 600.0) -> float:
        """
        Read until every watcher's last bytes hold C{marker}.
        """
        waiting = set(self.tails)
        deadline = time.perf_counter() + timeout
        while waiting:
            self.pump()
            waiting = {s for s in waiting if marker not in self.tails[s]}
            if time.perf_counter() > deadline:
                raise SystemExit(f"{len(waiting)} watchers never got {what}")
        return time.perf_counter()

    def close(self) -> None:
        for s in self.tails:
            s.close()
        self.selector.close()


def run(target: Target, watchers: int, seconds: int, connections: int, work: Path) -> Result:
    """
    The writer for C{seconds} with C{watchers} watching (none: the writer
    alone).
    """
    start = target.cursor()
    clients = (Watchers(target.port, target.events(start), target.headers, watchers)
               if watchers else None)
    try:
        if clients is not None:
            # Every watcher follows from the cursor: what is measured is
            # the fan-out of what is written from now on.
            clients.waitForBytes(b": connected\n", "connected")
        began = time.perf_counter()
        writer = wrk(f"http://127.0.0.1:{target.port}{target.write}", target.headers,
                     connections, seconds, work)
        while writer.poll() is None:
            if clients is not None:
                clients.pump()
            else:
                time.sleep(0.05)
        output = writer.communicate()[0]
        end = target.cursor()
        done = clients.waitFor(end) if clients is not None else time.perf_counter()
    finally:
        if clients is not None:
            clients.close()
    events = end - start
    took = done - began
    return Result(watchers, rate(output), watchers * events / took, events, took)


def hostTarget(src: Path | None, work: Path) -> tuple[HostProcess, Target]:
    host = HostProcess(work / "data", src, env={"VEHICLE_SSE_STALL_SECONDS": "600"})
    host.start()
    made = json.loads(host.call("POST", "/sessions", {"requestId": "bench-fanout"}))
    sid = made["value"]["session"]["sessionId"]

    def cursor() -> int:
        return int(json.loads(host.call("GET", f"/sessions/{sid}"))["value"]["session"]["cursor"])

    return host, Target(host.port, f"/sessions/{sid}",
                        lambda since: f"/sessions/{sid}/events?since={since}", IDENTITY, cursor)


def floorTarget(work: Path) -> tuple[subprocess.Popen[bytes], Target]:
    script = work / "floor.py"
    script.write_text(FLOOR)
    port = freePort()
    process = subprocess.Popen([sys.executable, str(script), str(port)],
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert process.stdout is not None
    process.stdout.readline()

    def cursor() -> int:
        with socket.create_connection(("127.0.0.1", port)) as s:
            s.sendall(b"GET /cursor HTTP/1.0\r\n\r\n")
            answer = b""
            while chunk := s.recv(4096):
                answer += chunk
        return int(json.loads(answer.split(b"\r\n\r\n", 1)[1])["cursor"])

    return process, Target(port, "/write", lambda since: "/events",
                           {"content-type": "application/json"}, cursor)


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--watchers", default="100,1000")
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--src", type=Path, default=None)
    args = parser.parse_args(argv)
    requireWrk()
    counts = [int(n) for n in args.watchers.split(",")]
    rows: dict[str, list[Result]] = {}
    with tempfile.TemporaryDirectory(prefix="vehicle-bench-fanout-") as scratch:
        work = Path(scratch)
        host, target = hostTarget(args.src, work)
        try:
            rows["host"] = [run(target, n, args.seconds, args.connections, work)
                            for n in [0] + counts]
        finally:
            host.stop()
        floor, target = floorTarget(work)
        try:
            rows["floor"] = [run(target, n, args.seconds, args.connections, work)
                             for n in [0] + counts]
        finally:
            floor.terminate()
            floor.wait()
    print(machine())
    print(f"host from {args.src or 'this checkout'}; writer: wrk -t2 -c{args.connections}, "
          f"{args.seconds} s of PATCH /sessions/:id (a durable rename each)")
    print(f"{'':8}{'watchers':>9}{'writer req/s':>14}{'x alone':>9}{'events':>8}"
          f"{'deliveries/s':>14}{'to the last':>13}")
    for name, results in rows.items():
        alone = results[0].writer
        for r in results:
            print(f"{name:8}{r.watchers:>9}{r.writer:>14.0f}{r.writer / alone:>9.2f}{r.events:>8}"
                  f"{r.deliveries:>14.0f}{r.seconds:>12.1f}s")
    print("host / floor:")
    for h, f in zip(rows["host"][1:], rows["floor"][1:]):
        print(f"  {h.watchers:>5} watchers: deliveries/s x {h.deliveries / f.deliveries:.2f}, "
              f"writer x {h.writer / f.writer:.2f}")


if __name__ == "__main__":
    main(sys.argv[1:])
