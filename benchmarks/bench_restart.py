"""
Restart and listing at scale, beside their floors, in one run (issue 16,
benchmark e):

1. restart with C{--sessions} sessions of about C{--events} events each
   (1,000 x 1,000 by default): the seconds from spawning C{twistd vehicle}
   to its first C{/health} answer, with every digest missing (a first start,
   or one after every session changed) and then with the digests a clean
   stop wrote (the median of C{--runs}); beside it the floor, a bare Klein
   process started the same way to its first answer;
2. listing C{--list} sessions (10,000 by default, of a few events each, one
   person's): C{GET /sessions} from the request to the last byte of the
   answer, the first after start and the median of C{--runs} after it;
   beside it two floors served by a bare Klein process: the same JSON
   encoded at each request from its values, and its bytes as they are.

    .venv/bin/python benchmarks/bench_restart.py [--sessions N] [--events N]
        [--list N] [--runs N] [--src DIR]

C{--src} runs the host from another checkout (an earlier commit) or its
C{src/}, for the before figures.  The data is made in a temporary folder (a session
made by the host's own code, copied under new ids) and removed after.
"""

from __future__ import annotations

import argparse
import http.client
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, NamedTuple, TypeVar

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._fleet import (  # noqa: E402
    IDENTITY,
    HostFailed,
    HostProcess,
    fleet,
    freePort,
    machine,
)


#: A bare Klein app: C{/health}, and the listing's JSON from its values
#: (C{/list}) or as bytes (C{/bytes}); argv: port, the listing's file.
FLOOR = r'''
import json, sys
from klein import Klein
from twisted.internet import reactor
from twisted.web.server import Site

app = Klein()
raw = open(sys.argv[2], "rb").read() if len(sys.argv) > 2 else b"{}"
values = json.loads(raw)

@app.route("/health")
def health(request):
    return b'{"ok":true}'

@app.route("/list")
def listing(request):
    request.setHeader(b"content-type", b"application/json")
    return json.dumps(values, separators=(",", ":")).encode()

@app.route("/bytes")
def asBytes(request):
    request.setHeader(b"content-type", b"application/json")
    return raw

reactor.listenTCP(int(sys.argv[1]), Site(app.resource()), interface="127.0.0.1")
reactor.run()
'''


def startFloor(work: Path, listing: Path | None = None) -> tuple[subprocess.Popen[bytes], int, float]:
    """
    The bare Klein process: its port and the seconds to its first answer.
    """
    script = work / "floor.py"
    script.write_text(FLOOR)
    port = freePort()
    began = time.perf_counter()
    argv = [sys.executable, str(script), str(port)] + ([str(listing)] if listing else [])
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while True:
        try:
            get(port, "/health")
            return process, port, time.perf_counter() - began
        except OSError:
            time.sleep(0.005)


def get(port: int, path: str, headers: dict[str, str] | None = None) -> tuple[float, bytes]:
    """
    One GET on a new connection: seconds from sending it to the last byte
    of the answer, and the answer.
    """
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    connection.connect()
    began = time.perf_counter()
    connection.request("GET", path, headers=headers or {})
    body = connection.getresponse().read()
    took = time.perf_counter() - began
    connection.close()
    return took, body


class Restart(NamedTuple):
    made: float
    first: float
    firstRss: int
    again: list[float]
    againRss: int
    floor: float


class Listing(NamedTuple):
    started: float
    listed: int
    size: int
    first: float
    warm: list[float]
    fromValues: float
    asBytes: float


def restart(work: Path, sessions: int, events: int, runs: int, src: Path | None) -> Restart:
    data = work / "data"
    made = time.perf_counter()
    fleet(data, sessions, events)
    made = time.perf_counter() - made
    host = HostProcess(data, src)
    first = host.start()
    firstRss = host.rss()
    host.stop()
    again = []
    for _ in range(runs):
        again.append(host.start())
        againRss = host.rss()
        host.stop()
    floors = []
    for _ in range(runs):
        process, _, took = startFloor(work)
        process.terminate()
        process.wait()
        floors.append(took)
    return Restart(made, first, firstRss, again, againRss, statistics.median(floors))


def listing(work: Path, count: int, runs: int, src: Path | None) -> Listing:
    data = work / "list"
    fleet(data, count, 10)
    host = HostProcess(data, src)
    started = host.start()
    first, body = get(host.port, "/sessions", IDENTITY)
    warm = [get(host.port, "/sessions", IDENTITY)[0] for _ in range(runs)]
    host.stop()
    saved = work / "listing.json"
    saved.write_bytes(body)
    process, port, _ = startFloor(work, saved)
    try:
        fromValues = statistics.median(get(port, "/list")[0] for _ in range(runs))
        asBytes = statistics.median(get(port, "/bytes")[0] for _ in range(runs))
    finally:
        process.terminate()
        process.wait()
    return Listing(started, body.count(b'"sessionId"'), len(body), first, warm,
                   fromValues, asBytes)


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sessions", type=int, default=1000)
    parser.add_argument("--events", type=int, default=1000)
    parser.add_argument("--list", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--src", type=Path, default=None)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="vehicle-bench-restart-") as scratch:
        work = Path(scratch)
        r = failed(lambda: restart(work, args.sessions, args.events, args.runs, args.src))
        ls = failed(lambda: listing(work, args.list, max(args.runs, 5), args.src))
    print(machine())
    print(f"host from {args.src or 'this checkout'}")
    print(f"restart, {args.sessions} sessions x ~{args.events} events, to the first /health "
          f"answer:")
    if isinstance(r, str):
        print("  " + r.replace("\n", "\n  "))
    else:
        printRestart(r)
    print(f"listing {args.list} sessions, request to last byte:")
    if isinstance(ls, str):
        print("  " + ls.replace("\n", "\n  "))
    else:
        printListing(ls)


T = TypeVar("T")


def failed(measure: Callable[[], T]) -> T | str:
    """
    A measure's result, or why the host failed it.
    """
    try:
        return measure()
    except HostFailed as e:
        return f"failed: {e}"


def printRestart(r: Restart) -> None:
    again = statistics.median(r.again)
    print(f"  every digest missing (first start)    {r.first:8.2f} s   x {r.first / r.floor:6.1f} "
          f"the floor   host RSS {r.firstRss / 2**20:6.1f} MiB")
    print(f"  after a clean stop (median of {len(r.again)})      {again:8.2f} s   "
          f"x {again / r.floor:6.1f} the floor   host RSS {r.againRss / 2**20:6.1f} MiB   "
          f"({min(r.again):.2f}-{max(r.again):.2f})")
    print(f"  floor: a bare Klein process           {r.floor:8.2f} s   (data made in {r.made:.1f} s)")


def printListing(ls: Listing) -> None:
    warm = statistics.median(ls.warm)
    print(f"  {ls.listed} listed ({ls.size / 2**20:.1f} MiB of JSON; the host started in "
          f"{ls.started:.2f} s)")
    print(f"  first after start                     {ls.first * 1000:8.1f} ms")
    print(f"  then (median of {len(ls.warm)})                  {warm * 1000:8.1f} ms   "
          f"({min(ls.warm) * 1000:.1f}-{max(ls.warm) * 1000:.1f})")
    print(f"  floor: bare Klein, JSON from values   {ls.fromValues * 1000:8.1f} ms   "
          f"host x {warm / ls.fromValues:.2f}")
    print(f"  floor: bare Klein, the same bytes     {ls.asBytes * 1000:8.1f} ms   "
          f"host x {warm / ls.asBytes:.2f}")


if __name__ == "__main__":
    main(sys.argv[1:])
