"""
Helpers for starting the project as a person does: a clean clone of the
repository, C{scripts/run} and the line it prints, run as subprocesses and
read as they come.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Callable

from twisted.internet import reactor
from twisted.internet.defer import Deferred
from twisted.internet.protocol import ProcessProtocol

from tests.support.live import sleep

#: The repository these tests run from.
REPO = Path(__file__).resolve().parent.parent.parent

#: What ends scripts/run's banner.
BANNER_END = "Ctrl-C stops everything."


async def _git(*args: str, cwd: Path, stdin: bytes = b"") -> bytes:
    proc = Process().spawn(["git", *args], cwd=cwd, env=dict(os.environ))
    if stdin:
        proc.write(stdin)
    proc.closeStdin()
    code = await proc.ended
    if code != 0:
        raise AssertionError(f"git {' '.join(args)} failed ({code}): {proc.err.decode(errors='replace')}")
    return bytes(proc.out)


async def cleanClone(dest: Path) -> Path:
    """
    Clone this repository to C{dest} as a newcomer would, sharing its
    C{.venv} (set up already) to save the setup's time.

    What is not committed yet (changed and new files that are not ignored)
    is laid over the clone, so a run before the commit tests the same tree;
    in CI, a clean clone itself, there is nothing to lay over.
    """
    await _git("clone", "-q", str(REPO), str(dest), cwd=REPO.parent)
    diff = await _git("diff", "HEAD", "--binary", cwd=REPO)
    if diff.strip():
        await _git("apply", "--whitespace=nowarn", "-", cwd=dest, stdin=diff)
    untracked = await _git("ls-files", "--others", "--exclude-standard", "-z", cwd=REPO)
    for name in filter(None, untracked.decode().split("\0")):
        target = dest / name
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            target.write_bytes((REPO / name).read_bytes())
            target.chmod((REPO / name).stat().st_mode & 0o777)
        except FileNotFoundError:
            continue  # a scratch file that came and went
    (dest / ".venv").symlink_to(REPO / ".venv")
    return dest


class Process(ProcessProtocol):
    """
    A child whose standard output and error are collected as they come,
    with waits on what it prints.
    """

    def __init__(self) -> None:
        self.out = bytearray()
        self.err = bytearray()
        self.ended: Deferred[int] = Deferred()
        self.status: int | None = None
        self._waiters: list[tuple[Callable[[], Any], Deferred]] = []

    def spawn(self, argv: list[str], cwd: Path, env: dict[str, str]) -> "Process":
        self.argv = argv
        reactor.spawnProcess(self, argv[0] if "/" in argv[0] else _which(argv[0]),
                             argv, env=env, path=str(cwd))
        return self

    @property
    def pid(self) -> int:
        return int(self.transport.pid)

    def write(self, data: bytes) -> None:
        self.transport.write(data)

    def closeStdin(self) -> None:
        self.transport.closeStdin()

    def signal(self, name: str) -> None:
        if self.status is None:
            self.transport.signalProcess(name)

    def outReceived(self, data: bytes) -> None:
        self.out += data
        self._check()

    def errReceived(self, data: bytes) -> None:
        self.err += data
        self._check()

    def processEnded(self, reason: Any) -> None:
        value = reason.value
        self.status = value.exitCode if value.exitCode is not None else -(value.signal or 0)
        self._check()
        self.ended.callback(self.status)

    def _check(self) -> None:
        for test, d in list(self._waiters):
            found = test()
            if found is not None:
                self._waiters.remove((test, d))
                d.callback(found)
            elif self.status is not None:
                self._waiters.remove((test, d))
                d.errback(AssertionError(
                    f"{self.argv[0]} ended ({self.status}) first.\nstdout:\n"
                    f"{self.out.decode(errors='replace')}\nstderr:\n{self.err.decode(errors='replace')}"
                ))

    def waitFor(self, test: Callable[[], Any], timeout: float = 60) -> Deferred:
        """
        Fire with C{test()} once it is not L{None} (checked as output comes).
        """
        found = test()
        if found is not None:
            return Deferred.fromCoroutine(_value(found))
        d: Deferred = Deferred()
        self._waiters.append((test, d))
        self._check()
        d.addTimeout(timeout, reactor)
        return d

    def text(self) -> str:
        return self.out.decode("utf-8", "replace")


async def _value(value: Any) -> Any:
    return value


def _which(name: str) -> str:
    for folder in os.environ.get("PATH", "/usr/bin:/bin").split(":"):
        candidate = Path(folder) / name
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    raise AssertionError(f"{name} is not on PATH")


def personEnv(tmp: Path, **extra: str) -> dict[str, str]:
    """
    The environment a person's shell would hand a command: theirs, with a
    private C{TMPDIR} (to see what is left there) and no test settings.
    """
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("VEHICLE_", "GARDEND_", "MNEMOSYNE_", "OPENROUTER_"))}
    env["TMPDIR"] = str(tmp)
    env.update(extra)
    return env


class LocalRun:
    """
    C{scripts/run} in a clone, as a subprocess, and what its banner says.
    """

    def __init__(self, clone: Path, args: list[str], env: dict[str, str]) -> None:
        self.clone = clone
        self.process = Process().spawn([str(clone / "scripts" / "run"), *args], cwd=clone, env=env)
        self.env = env

    async def banner(self, timeout: float = 120) -> str:
        return await self.process.waitFor(
            lambda: self.process.text() if BANNER_END in self.process.text() else None, timeout
        )

    def rideLine(self) -> str:
        """
        The whole ride line the banner prints, as a person would paste it.
        """
        for line in self.process.text().splitlines():
            if line.strip().startswith("VEHICLE_TOKEN="):
                return line.strip()
        raise AssertionError("no ride line in the banner:\n" + self.process.text())

    def masterKey(self) -> str:
        return self.rideLine().split()[0].split("=", 1)[1]

    def url(self) -> str:
        for line in self.process.text().splitlines():
            if line.strip().startswith("URL:"):
                return line.split()[1]
        raise AssertionError("no URL in the banner:\n" + self.process.text())

    async def stop(self, name: str = "INT") -> int:
        self.process.signal(name)
        return await self.process.ended

    async def reap(self) -> None:
        """
        After a test, whatever happened: Ctrl-C, and if the run is still
        there after a while, kill it and every process under it (a killed
        run cannot stop its parts itself).
        """
        if self.process.status is not None:
            return
        tree = [pid for pid, _ in childrenOf(self.process.pid)]
        self.process.signal("INT")
        for _ in range(200):
            if self.process.status is not None:
                return
            await sleep(0.1)
        for pid in [self.process.pid, *tree]:
            try:
                os.kill(pid, 9)
            except OSError:
                pass
        await self.process.ended


class Ride:
    """
    The banner's ride line run through a shell, one request at a time.
    """

    def __init__(self, line: str, cwd: Path, env: dict[str, str]) -> None:
        self.process = Process().spawn(["bash", "-c", line], cwd=cwd, env=env)
        self.frames: list[dict[str, Any]] = []

    def _frames(self) -> list[dict[str, Any]]:
        lines = self.process.text().splitlines()
        complete = lines if self.process.text().endswith("\n") else lines[:-1]
        return [json.loads(line) for line in complete if line.strip()]

    async def frame(self, test: Callable[[dict[str, Any]], bool], timeout: float = 60) -> dict[str, Any]:
        def find() -> dict[str, Any] | None:
            return next((f for f in self._frames() if test(f)), None)

        return await self.process.waitFor(find, timeout)

    async def send(self, request: dict[str, Any], timeout: float = 60) -> dict[str, Any]:
        """
        Send one request line; the frame answering it.
        """
        self.process.write(json.dumps(request).encode() + b"\n")
        return await self.frame(lambda f: f.get("requestId") == request["requestId"], timeout)

    async def watchUntil(self, eventType: str, prefix: str, rounds: int = 30) -> list[dict[str, Any]]:
        """
        Watch (long-poll) until an event of C{eventType} has come; every
        event seen.
        """
        events: list[dict[str, Any]] = []
        for n in range(rounds):
            frame = await self.send({"op": "watch", "requestId": f"{prefix}{n}", "waitMs": 5000})
            assert frame["type"] == "watch.completed", frame
            events += frame["value"]["events"]
            if any(e["type"] == eventType for e in events):
                return events
        raise AssertionError(f"no {eventType} after {rounds} watches: {events}")

    async def end(self) -> int:
        self.process.closeStdin()
        return await self.process.ended


def processesUnder(*paths: Path) -> list[str]:
    """
    Every live process whose command line or working directory names one
    of C{paths}: what a stopped run must not leave behind.
    """
    marks = [str(p) for p in paths]
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            cwd = os.readlink(entry / "cwd")
            state = next((l for l in (entry / "status").read_text().splitlines()
                          if l.startswith("State:")), "")
        except OSError:
            continue
        if "Z (zombie)" in state:
            continue
        if any(m in cmdline or cwd.startswith(m) for m in marks):
            found.append(f"{entry.name}: {cmdline} (cwd {cwd})")
    return found


def childrenOf(pid: int) -> list[tuple[int, str]]:
    """
    The live descendants of C{pid}: (pid, command line).
    """
    parents: dict[int, int] = {}
    commands: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
        commands[int(entry.name)] = cmdline
    found, frontier = [], [pid]
    while frontier:
        parent = frontier.pop()
        for child, p in parents.items():
            if p == parent:
                found.append((child, commands[child]))
                frontier.append(child)
    return found

