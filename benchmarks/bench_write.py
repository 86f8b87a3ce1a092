"""
The write path beside its floors, in one run: wrk against the host's
durable write (C{PATCH /sessions/:id}, a rename: its event written and
synced, C{meta.json} rewritten) and against two bare Klein routes served
the same way (one process, the same reactor, the same interpreter): one
that parses the same JSON and answers a frame, one that also appends a line
to a file and fsyncs it.  Each at 16 and 64 connections; the table gives
requests per second, the p50 and p99 latency, and the host's ratio to each
floor.  Also the inspect (a read) beside the bare parsing route.

    .venv/bin/python benchmarks/bench_write.py [--seconds N] [--connections 16,64]
        [--src DIR]

C{--src} runs the host from another checkout's C{src/} (an earlier commit,
say) with this checkout's interpreter, so two trees can be measured side
by side on one machine.

wrk (Debian's C{wrk}) must be on the PATH; nothing here installs it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path


ROOT = Path(__file__).resolve().parent.parent
PYTHON = ROOT / ".venv" / "bin" / "python"
TWISTD = ROOT / ".venv" / "bin" / "twistd"
SECRET = "bench-" + secrets.token_hex(8)

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

SCRIPT = '''
wrk.method = "{method}"
wrk.body = '{body}'
{headers}
'''


def freePort() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


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


IDENTITY = {
    "x-internal-service": SECRET, "x-user-id": "owner", "x-sophia-caller-role": "owner",
    "x-graph-id": "bench", "x-sophia-graph-role": "owner", "x-vehicle-client-id": "bench",
    "content-type": "application/json",
}


def startHost(workdir: Path, src: Path | None = None) -> tuple[subprocess.Popen[bytes], int]:
    port = freePort()
    models = workdir / "models.json"
    # A model the host offers (never called: nothing is prompted).
    models.write_text(json.dumps({"providers": {"scripted": {
        "baseUrl": "http://127.0.0.1:9/v1", "api": "openai-completions",
        "apiKey": "sk-bench-not-real", "models": [{"id": "echo-1", "name": "Echo"}],
    }}}))
    env = dict(os.environ, MNEMOSYNE_INTERNAL_SERVICE_SECRET=SECRET,
               VEHICLE_MODELS=str(models), VEHICLE_DEFAULT_MODEL="scripted/echo-1")
    env.pop("MNEMOSYNE_MCP_URL", None)
    if src is not None:
        env["PYTHONPATH"] = str(src)
    process = subprocess.Popen(
        [str(TWISTD), "-n", "--pidfile=", "vehicle", "--listen",
         f"tcp:{port}:interface=127.0.0.1", "--data-dir", str(workdir / "data")],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=workdir,
    )
    waitFor(f"http://127.0.0.1:{port}/health")
    return process, port


def createSession(port: int) -> str:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/sessions", method="POST",
        data=json.dumps({"requestId": "bench-create"}).encode(), headers=IDENTITY,
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


def wrk(url: str, method: str, connections: int, seconds: int, workdir: Path,
        headers: dict[str, str]) -> tuple[float, float, float]:
    """
    Requests per second, p50 and p99 latency (ms) of one wrk run.
    """
    lua = workdir / f"wrk-{secrets.token_hex(3)}.lua"
    body = json.dumps({"title": "a title"}) if method == "PATCH" else ""
    lua.write_text(SCRIPT.format(
        method=method, body=body,
        headers="\n".join(f'wrk.headers["{k}"] = "{v}"' for k, v in headers.items()),
    ))
    out = subprocess.run(
        ["wrk", "-t2", f"-c{connections}", f"-d{seconds}s", "--latency", "-s", str(lua), url],
        capture_output=True, text=True, check=True,
    ).stdout
    rate = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]

    def percentile(name: str) -> float:
        match = re.search(rf"^\s+{name}%\s+([\d.]+)(us|ms|s)", out, re.M)
        assert match is not None, out
        value, unit = float(match.group(1)), match.group(2)
        return value / 1000 if unit == "us" else value * 1000 if unit == "s" else value

    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    if errors:
        raise SystemExit(f"wrk saw {errors.group(1)} refusals on {url}:\n{out}")
    return rate, percentile("50"), percentile("99")


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--connections", default="16,64")
    parser.add_argument("--src", type=Path, default=None)
    args = parser.parse_args(argv)
    if shutil.which("wrk") is None:
        raise SystemExit("wrk is not on the PATH (Debian: apt-get install wrk)")
    workdir = Path(tempfile.mkdtemp(prefix="vehicle-bench-write-"))
    host, hostPort = startHost(workdir, args.src)
    floor, floorPort = startFloor(workdir)
    try:
        sid = createSession(hostPort)
        rows: list[tuple[str, int, float, float, float]] = []
        for c in (int(n) for n in args.connections.split(",")):
            for name, url, method, headers in (
                ("host PATCH (rename)", f"http://127.0.0.1:{hostPort}/sessions/{sid}", "PATCH",
                 IDENTITY),
                ("bare: parse", f"http://127.0.0.1:{floorPort}/parse", "PATCH", {}),
                ("bare: parse + fsync", f"http://127.0.0.1:{floorPort}/fsync", "PATCH", {}),
                ("host GET (inspect)", f"http://127.0.0.1:{hostPort}/sessions/{sid}", "GET",
                 IDENTITY),
                ("bare: GET parse", f"http://127.0.0.1:{floorPort}/parse", "GET", {}),
            ):
                rate, p50, p99 = wrk(url, method, c, args.seconds, workdir, headers)
                rows.append((name, c, rate, p50, p99))
    finally:
        host.terminate()
        floor.terminate()
        host.wait()
        floor.wait()
        shutil.rmtree(workdir, ignore_errors=True)
    print(f"cores: {os.cpu_count()}; wrk -t2, {args.seconds} s each; one process each; "
          f"host from {args.src or ROOT / 'src'}")
    print(f"{'what':<24}{'conns':>6}{'req/s':>10}{'p50 ms':>9}{'p99 ms':>9}")
    for name, c, rate, p50, p99 in rows:
        print(f"{name:<24}{c:>6}{rate:>10.0f}{p50:>9.2f}{p99:>9.2f}")
    byKey = {(name, c): (rate, p99) for name, c, rate, _, p99 in rows}
    print("ratios (host / floor): req/s, p99")
    for c in sorted({c for _, c, *_ in rows}):
        host_ = byKey[("host PATCH (rename)", c)]
        for floorName in ("bare: parse", "bare: parse + fsync"):
            f = byKey[(floorName, c)]
            print(f"  write c{c} / {floorName:<20} {host_[0] / f[0]:.2f}   p99 x {host_[1] / f[1]:.2f}")
        read, bare = byKey[("host GET (inspect)", c)], byKey[("bare: GET parse", c)]
        print(f"  read  c{c} / bare: GET parse        {read[0] / bare[0]:.2f}   p99 x {read[1] / bare[1]:.2f}")


if __name__ == "__main__":
    main(sys.argv[1:])
