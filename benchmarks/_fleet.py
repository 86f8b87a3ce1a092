"""
What the restart, fan-out and memory benchmarks share: a data directory of
many sessions made quickly (one made by the host's own code, then copied
under new ids), and a host process (C{twistd vehicle}) to start, time, weigh
and stop.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Iterator

from twisted.internet.task import Clock

from benchmarks._common import hostEnvironment, rss, scriptedModels, sourceRoot
from vehicle.protocol import CommandRequest, CommandStatus, fromRequest
from vehicle.session import Caller, Registry
from vehicle.store import DataDir
from vehicle.store import _jsonl
from vehicle_local.standin import freeLoopbackPort as freePort

from tests.support.harness import newSession


ROOT = Path(__file__).resolve().parent.parent
TWISTD = ROOT / ".venv" / "bin" / "twistd"
SECRET = "bench-fleet-secret"
PRINCIPAL = "bench"
GRAPH = "bench"
#: The id of the session every other is copied from (as long as theirs).
TEMPLATE_ID = "s" + "0" * 32

IDENTITY = {
    "x-internal-service": SECRET, "x-user-id": PRINCIPAL, "x-sophia-caller-role": "owner",
    "x-graph-id": GRAPH, "x-sophia-graph-role": "owner", "x-vehicle-client-id": "bench",
    "content-type": "application/json",
}


@contextlib.contextmanager
def unsynced() -> Iterator[None]:
    """
    Logs appended without an fsync: only for making a benchmark's data.
    """
    real = _jsonl._sync
    _jsonl._sync = lambda fd: None
    try:
        yield
    finally:
        _jsonl._sync = real


def makeTemplate(root: Path, events: int) -> Path:
    """
    One session made by the host's own code, with about C{events} events:
    turns of a conversation (a prompt's record and its acceptance, its run,
    a tool call and its result, the reply, the settlement), its lease given
    back at the end.

    @return: its folder.
    """
    clock = Clock()
    clock.advance(1_796_000_000)
    registry = Registry(dataDir=DataDir(root), clock=clock)
    registry.dataDir.ensure()
    caller = Caller(principal=PRINCIPAL, clientId="bench", role="owner", graphId=GRAPH)
    with unsynced():
        session = newSession(registry, caller, sessionId=TEMPLATE_ID, title="a conversation")
        turn = 0
        while session.cursor < events:
            turn += 1
            clock.advance(7)
            session.command(caller, fromRequest(
                {"requestId": f"p{turn}", "type": "prompt",
                 "text": f"question {turn}: what does the log say about this?"},
                CommandRequest,
            ))
            session.move(f"p{turn}", CommandStatus.delivered, disposition="started")
            runId = f"run-{turn}"
            session.emit("run.started", {"runId": runId, "commandId": f"p{turn}",
                                         "tools": ["read", "bash"]})
            session.emit("tool.started", {"runId": runId, "toolCallId": f"c{turn}",
                                          "toolName": "read", "args": {"path": "notes.md"}})
            session.emit("tool.result", {"runId": runId, "toolCallId": f"c{turn}",
                                         "isError": False, "text": "line one\nline two\n" * 4})
            session.emit("message.completed", {
                "runId": runId, "role": "assistant",
                "text": f"Here is what I found for question {turn}. " * 6,
                "usage": {"input": 1200, "output": 240, "costUsd": 0.0012},
            })
            session.emit("run.ended", {"runId": runId})
            session.emit("run.settled", {"runId": runId, "costUsd": 0.0012, "aborted": False})
            session.move(f"p{turn}", CommandStatus.completed, disposition="started")
        # Long ago, the lease was given back (a lease still held would
        # lapse at the host's start, and each session write its expiry).
        session.release(caller, "release", {"requestId": "release"})
    registry.close()
    directory = registry.dataDir.sessionDir(TEMPLATE_ID)
    (directory / "digest.json").unlink(missing_ok=True)
    return directory


def sessionIds(count: int, prefix: str = "s") -> list[str]:
    return [f"{prefix}{n:0{len(TEMPLATE_ID) - len(prefix)}x}" for n in range(1, count + 1)]


def cloneSessions(template: Path, dataDir: Path, count: int) -> list[str]:
    """
    C{count} copies of the template session in C{dataDir} (made when
    missing), each under an id of its own; no digest (a first start derives
    them).

    @return: their ids.
    """
    DataDir(dataDir).ensure()
    files = {name: (template / name).read_bytes()
             for name in ("meta.json", "events.jsonl", "commands.jsonl")}
    sids = sessionIds(count)
    for sid in sids:
        folder = dataDir / "sessions" / sid
        folder.mkdir(mode=0o700)
        (folder / "pi").mkdir(mode=0o700)
        (folder / "work").mkdir(mode=0o700)
        for name, data in files.items():
            (folder / name).write_bytes(data.replace(TEMPLATE_ID.encode(), sid.encode()))
    return sids


def fleet(dataDir: Path, count: int, events: int) -> list[str]:
    """
    A data directory of C{count} sessions of about C{events} events each.
    """
    scratch = dataDir.parent / (dataDir.name + "-template")
    template = makeTemplate(scratch, events)
    try:
        return cloneSessions(template, dataDir, count)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def dropDigests(dataDir: Path) -> None:
    """
    Every session's digest removed (as after a host older than digests, or
    with every digest stale after a crash).
    """
    for folder in (dataDir / "sessions").iterdir():
        (folder / "digest.json").unlink(missing_ok=True)


class HostFailed(Exception):
    """
    The host did not start (or did not answer): the message says why.
    """


class HostProcess:
    """
    One C{twistd -n vehicle} on a data directory (from C{src}, another
    checkout or its C{src/}, when given: L{sourceRoot}).
    """

    def __init__(self, dataDir: Path, src: Path | None = None,
                 env: dict[str, str] | None = None) -> None:
        self.dataDir = dataDir
        self.src = None if src is None else sourceRoot(src)
        self.extraEnv = env or {}
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 600.0) -> float:
        """
        Start it; return the seconds from the spawn to its first C{/health}
        answer.  It is stopped when this interpreter exits, if not before:
        a benchmark that fails on the way leaves no host running.
        """
        atexit.unregister(self.stop)
        atexit.register(self.stop)
        work = self.dataDir.parent
        env = hostEnvironment(SECRET, scriptedModels(work / "models.json"), self.src,
                              extra={"VEHICLE_MIRROR": "off", **self.extraEnv})
        self.port = freePort()
        began = time.perf_counter()
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen(
                [str(TWISTD), "-n", "--pidfile=", "vehicle", "--listen",
                 f"tcp:{self.port}:interface=127.0.0.1", "--data-dir", str(self.dataDir)],
                env=env, stdout=log, stderr=subprocess.STDOUT, cwd=work,
            )
        deadline = began + timeout
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=5)
                return time.perf_counter() - began
            except Exception as e:
                if self.process.poll() is not None or time.perf_counter() > deadline or (
                    isinstance(e, urllib.error.HTTPError)
                ):
                    self.stop()
                    raise HostFailed(f"the host did not answer /health ({e}); its log ends:\n"
                                     + self.logTail()) from e
                time.sleep(0.005)

    @property
    def log(self) -> Path:
        """
        Where its output goes.
        """
        return self.dataDir.parent / f"{self.dataDir.name}.log"

    def logTail(self, lines: int = 12) -> str:
        text = self.log.read_text(errors="replace").splitlines()
        return "\n".join(text[-lines:])

    def rss(self) -> int:
        assert self.process is not None
        return rss(self.process.pid)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def call(self, method: str, path: str, body: object = None) -> bytes:
        request = urllib.request.Request(
            self.url(path), method=method, headers=IDENTITY,
            data=None if body is None else json.dumps(body).encode(),
        )
        with urllib.request.urlopen(request, timeout=120) as answer:
            return bytes(answer.read())

    def stop(self) -> None:
        """
        Stop it as an operator would (SIGTERM), and wait.
        """
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=300)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None


def machine() -> str:
    """
    The machine, as each benchmark prints it beside its figures.
    """
    load = os.getloadavg()
    return (f"cores: {os.cpu_count()}; load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} "
            f"(1, 5, 15 min)")
