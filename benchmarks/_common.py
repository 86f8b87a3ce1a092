"""
What the benchmarks share: a stand-in for the trial TestCase that
L{tests.support.live.LiveHost} wants, a process's resident memory, and wrk.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from twisted.internet.defer import Deferred
from twisted.internet.protocol import Protocol, connectionDone
from twisted.python.failure import Failure


class BenchCase:
    """
    Stands for a trial TestCase where a L{LiveHost} wants one: temporary
    folders and cleanups, run by L{cleanup}.
    """

    def __init__(self, prefix: str = "vehicle-bench-") -> None:
        self.cleanups: list[tuple[Any, tuple[Any, ...]]] = []
        self.root = Path(tempfile.mkdtemp(prefix=prefix))

    def mktemp(self) -> str:
        return str(self.root / secrets.token_hex(4))

    def addCleanup(self, f: Any, *a: Any) -> None:
        self.cleanups.append((f, a))

    async def cleanup(self) -> None:
        for f, a in reversed(self.cleanups):
            result = f(*a)
            if isinstance(result, Deferred) or hasattr(result, "__await__"):
                await result


def sourceRoot(src: Path) -> Path:
    """
    The folder that holds the C{vehicle} package a host from C{src} runs
    (C{--src}): a checkout's C{src/}, or C{src} itself when the package is
    there.  Put on C{PYTHONPATH}, a folder without the package would run
    this checkout's host under the other's name.

    @raise SystemExit: neither holds it.
    """
    for candidate in (src / "src", src):
        if (candidate / "vehicle" / "__init__.py").is_file():
            return candidate.resolve()
    raise SystemExit(f"--src {src}: no vehicle package in it nor in its src/")


def scriptedModels(path: Path) -> Path:
    """
    Write at C{path} the model catalogue of a benchmark's host: one
    scripted model it offers and never calls (nothing is prompted).
    """
    path.write_text(json.dumps({"providers": {"scripted": {
        "baseUrl": "http://127.0.0.1:9/v1", "api": "openai-completions",
        "apiKey": "sk-bench-not-real", "models": [{"id": "echo-1", "name": "Echo"}],
    }}}))
    return path


def hostEnvironment(secret: str, models: Path, src: Path | None = None, spares: bool = False,
                    extra: dict[str, str] | None = None) -> dict[str, str]:
    """
    The environment of a host a benchmark starts with C{twistd}: this
    one's, with the internal secret, the scripted models of C{models}, no
    gardend MCP endpoint, C{extra}, and the C{vehicle} of C{src} (a
    checkout or its C{src/}: L{sourceRoot}) when given.

    With no spare bodies unless C{spares}: a spare handed to a measure's
    new session is refilled two seconds later, a Node booting on the same
    cores in the middle of that measure (and the pool's first spares boot
    while the first measures run, in the other host's measure when two are
    compared), which the floor it is divided by never pays.
    """
    env = dict(os.environ, MNEMOSYNE_INTERNAL_SERVICE_SECRET=secret, VEHICLE_MODELS=str(models),
               VEHICLE_DEFAULT_MODEL="scripted/echo-1", **(extra or {}))
    env.pop("MNEMOSYNE_MCP_URL", None)
    if not spares:
        env.update(VEHICLE_SPARE_BODIES="0", VEHICLE_AGENT_SPARE_BODIES="0")
    if src is not None:
        env["PYTHONPATH"] = str(sourceRoot(src))
    return env


def rss(pid: int) -> int:
    """
    The resident memory of process C{pid}, in bytes.
    """
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def spawnBarePi(reactor: Any, protocol: Any, provider: dict[str, Any], prefix: str) -> Any:
    """
    A bare C{pi --mode rpc} child with vehicle's extension and no host (the
    floor of the body benchmarks): its own folders under a new temporary
    one, the scripted provider C{provider} in its boot config on fd 3.
    Returns its transport.
    """
    import json

    from vehicle.body import EXTENSION, agentSettings, bootConfig, findPi, piArgv, piEnvironment
    from vehicle.protocol import RunBudget
    from vehicle.settings import defaultPiRoot

    pi = findPi(defaultPiRoot())
    root = Path(tempfile.mkdtemp(prefix=prefix))
    for d in ("agent", "home", "sess", "work"):
        (root / d).mkdir()
    (root / "agent" / "settings.json").write_text(json.dumps(agentSettings()))
    argv = piArgv(pi, sessionDir=root / "sess", sessionFile=None, extension=EXTENSION,
                  model="scripted/echo-1", tools=None)
    env = piEnvironment(home=root / "home", agentDir=root / "agent",
                        path=f"{pi.node.parent}:/usr/bin:/bin")
    transport = reactor.spawnProcess(protocol, argv[0], argv, env=env, path=str(root / "work"),
                                     childFDs={0: "w", 1: "r", 2: "r", 3: "w"})
    transport.writeToChild(3, bootConfig(providers={"scripted": provider},
                                         budget=RunBudget(maxTurns=12, maxCostUsd=1.0)))
    transport.closeChildFD(3)
    return transport


async def postRaw(host: Any, path: str, body: Any, headers: dict[str, str] | None = None,
                  **who: Any) -> Any:
    """
    POST C{body} to a live host (L{tests.support.live.LiveHost}) as its
    person would (C{who}, with C{headers} besides the identity), and read
    the frame: without the tests' schema check of every answer, which is
    the client's time, not the host's.
    """
    import json

    from tests.support._headers import bytesNames
    from tests.support.harness import identity

    extra = headers or {}
    headers = identity(**who)
    headers["content-type"] = "application/json"
    headers.update(extra)
    response = await host.http.request(
        "POST", host.url + path, headers=bytesNames(headers), data=json.dumps(body).encode()
    )
    return json.loads(await response.content())


class RawClient(Protocol):
    """
    A bare HTTP/1.1 client on one kept-alive connection: a request's bytes
    written as they are, its answer read by its C{Content-Length} or its
    chunks, one request at a time.  A benchmark whose client shares the
    host's reactor thread uses it so that an HTTP library's own work (an
    agent, a pool, a response's protocol) is not counted as the host's.

    Connect it with L{rawClient}; L{request} sends and waits.
    """

    def __init__(self) -> None:
        self._buffer = b""
        self._waiting: Deferred[tuple[int, bytes]] | None = None

    def request(self, method: str, path: str, headers: dict[str, str],
                body: bytes = b"") -> Deferred[tuple[int, bytes]]:
        """
        Send one request; fires with its status and body.
        """
        assert self._waiting is None, "one request at a time"
        assert self.transport is not None
        lines = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1"]
        lines += [f"{name}: {value}" for name, value in headers.items()]
        lines.append(f"Content-Length: {len(body)}")
        self._waiting = Deferred()
        self.transport.write("\r\n".join(lines).encode("latin-1") + b"\r\n\r\n" + body)
        return self._waiting

    def dataReceived(self, data: bytes) -> None:
        self._buffer += data
        answer = parseAnswer(self._buffer)
        if answer is not None and self._waiting is not None:
            status, body, self._buffer = answer
            waiting, self._waiting = self._waiting, None
            waiting.callback((status, body))

    def connectionLost(self, reason: Failure = connectionDone) -> None:
        if self._waiting is not None:
            waiting, self._waiting = self._waiting, None
            waiting.errback(reason)


def parseAnswer(data: bytes) -> tuple[int, bytes, bytes] | None:
    """
    The first whole HTTP/1.1 answer in C{data}: its status, its body (by
    C{Content-Length}, or its chunks joined) and what follows it; L{None}
    while it is not whole.
    """
    head, sep, rest = data.partition(b"\r\n\r\n")
    if not sep:
        return None
    lines = head.split(b"\r\n")
    status = int(lines[0].split(b" ", 2)[1])
    fields = {}
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        fields[name.strip().lower()] = value.strip()
    if fields.get(b"transfer-encoding", b"").lower() == b"chunked":
        chunks = []
        while True:
            size, crlf, after = rest.partition(b"\r\n")
            if not crlf:
                return None
            length = int(size.split(b";", 1)[0], 16)
            if len(after) < length + 2:
                return None
            if length == 0:
                # No trailers from the host: the last chunk's line, then CRLF.
                return status, b"".join(chunks), after[2:]
            chunks.append(after[:length])
            rest = after[length + 2:]
    length = int(fields.get(b"content-length", b"0"))
    if len(rest) < length:
        return None
    return status, rest[:length], rest[length:]


async def rawClient(reactor: Any, port: int) -> RawClient:
    """
    A L{RawClient} connected to C{127.0.0.1:port}.
    """
    from twisted.internet.endpoints import TCP4ClientEndpoint, connectProtocol

    client = RawClient()
    await connectProtocol(TCP4ClientEndpoint(reactor, "127.0.0.1", port), client)
    return client


def uncheckedWatcher(host: Any, sessionId: str, **who: Any) -> Any:
    """
    An SSE watcher (L{tests.support.live.SSEWatcher}, of whichever checkout
    runs the host) that does not hold each event to the schemas: the
    check is the client's time, on the host's own reactor thread.  A
    checkout from before the watcher could be told so has its check
    switched off where the watcher finds it.
    """
    import inspect

    from tests.support import live

    if "validate" in inspect.signature(live.SSEWatcher).parameters:
        return live.SSEWatcher(host, sessionId, validate=False, **who)
    live.assertValidEvent = lambda case, frame: None  # type: ignore[assignment]
    return live.SSEWatcher(host, sessionId, **who)


def requireWrk() -> None:
    """
    Make sure wrk (Debian's package) is on the PATH, installing it on
    demand as the project's setup installs its own packages (as root, with
    apt-get): the tests never need it, so setup does not install it.

    @raise SystemExit: it is missing and cannot be installed here.
    """
    if shutil.which("wrk") is not None:
        return
    if os.geteuid() == 0 and shutil.which("apt-get") is not None:
        print("installing wrk (Debian's package) for this benchmark", file=sys.stderr)
        environment = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        subprocess.run(["apt-get", "update", "-qq"], env=environment, check=False,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        subprocess.run(["apt-get", "install", "-y", "-qq", "wrk"], env=environment,
                       check=False, stdout=subprocess.DEVNULL)
    if shutil.which("wrk") is None:
        raise SystemExit("wrk is not on the PATH and could not be installed "
                         "(Debian: apt-get install wrk)")
