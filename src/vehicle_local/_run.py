# -*- test-case-name: tests.live.test_local -*-
"""
The one-command local run (C{scripts/run}): the gardend stand-in in this
process, the scripted model as a child (or a real provider when
C{OPENROUTER_API_KEY} is set), and the host started by the stand-in from
C{services/vehicle/service.json}, as gardend starts it.

The banner comes once every part has answered its health check.  Each
part's log goes to C{<data-dir>/logs/}; C{-v} also shows it.  Ctrl-C or
C{TERM} stops every part (exit 0); a part that stops on its own stops the
rest (exit 1, with its last lines).
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import sys
from pathlib import Path
from typing import Any, Callable, Mapping

from twisted.internet.defer import Deferred, DeferredList
from twisted.internet.error import CannotListenError
from twisted.internet.interfaces import IReactorFromThreads
from twisted.internet.task import react
from twisted.logger import FilteringLogObserver, ILogObserver, formatEvent, globalLogBeginner
from twisted.python import usage
from zope.interface import implementer

from vehicle_local.standin import (
    ChildProcess,
    Config,
    Manifest,
    ManifestError,
    ServiceFailed,
    StandIn,
    describeStatus,
    freeLoopbackPort,
    waitHealthy,
)
from vehicle._logs import quiet, quietObserver
from vehicle.store import writeAtomic
from vehicle._reactors import IHostReactor

#: Where the local run keeps everything unless told otherwise (relative to
#: the repository, where C{scripts/run} starts it).
DEFAULT_DATA_DIR = ".data"

#: The file the local master key is kept in, inside the data dir.
MASTER_KEY_FILE = "master-key"


class Options(usage.Options):
    synopsis = "scripts/run [--port N] [--data-dir DIR] [--graph G] [-v]"
    optFlags = [["verbose", "v", "Show every part's log lines as they come."]]
    optParameters = [
        ["port", None, 8700, "The gateway's loopback port.", int],
        ["data-dir", None, DEFAULT_DATA_DIR,
         "Where the local run keeps sessions, the master key and the logs."],
        ["graph", None, "demo", "The graph the local run offers."],
        ["manifest", None, "services/vehicle/service.json",
         "The host's gardend manifest."],
    ]

    def postOptions(self) -> None:
        if not 0 < self["port"] < 65536:
            raise usage.UsageError(f"--port {self['port']} is not a TCP port")


class LocalRunFailed(Exception):
    """
    The local run cannot go on; one message for the operator and the exit
    status to end with.
    """

    def __init__(self, message: str, status: int = 1) -> None:
        super().__init__(message)
        self.status = status


def masterKey(dataDir: Path, environ: dict[str, str] | Any) -> tuple[str, str]:
    """
    The local master key and where it came from: C{GARDEND_MASTER_KEY}
    when set, else the one kept in C{<dataDir>/master-key} (made once,
    mode 0600).
    """
    given = environ.get("GARDEND_MASTER_KEY")
    if given:
        return given, "GARDEND_MASTER_KEY"
    path = dataDir / MASTER_KEY_FILE
    try:
        kept = path.read_text("ascii").strip()
    except FileNotFoundError:
        kept = ""
    if not kept:
        kept = "local-" + secrets.token_urlsafe(18)
        writeAtomic(path, (kept + "\n").encode("ascii"), mode=0o600)
    return kept, str(path)


def _called(child: ChildProcess) -> str:
    return "the scripted model" if child.name == "model" else f"the host ({child.name})"


def _say(line: str = "") -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def _echo(name: str, line: str) -> None:
    _say(f"[{name}] {line}")


@implementer(ILogObserver)
class _Echo:
    """
    Shows this process's own log events (the stand-in's) with C{-v}.
    """

    def __init__(self, echo: Callable[[str, str], None]) -> None:
        self.echo = echo

    def __call__(self, event: dict[str, Any]) -> None:
        text = formatEvent(event)
        if text:
            self.echo("gardend", text)


class LocalRun:
    """
    The parts of one local run and their lives.
    """

    def __init__(self, reactor: IHostReactor, options: Options, environ: Mapping[str, str]) -> None:
        self.reactor = reactor
        self.options = options
        self.environ = environ
        self.root = Path(options["data-dir"]).absolute()
        self.logs = self.root / "logs"
        self.children: list[ChildProcess] = []
        self.standIn: StandIn | None = None
        self.stopping = False
        self.echo: Callable[[str, str], None] | None = _echo if options["verbose"] else None

    def _beginLogging(self) -> None:
        self.logs.mkdir(parents=True, exist_ok=True)
        logFile = open(self.logs / "gardend.log", "a", encoding="utf-8")
        observers: list[Any] = [quietObserver(logFile)]
        if self.echo is not None:
            observers.append(FilteringLogObserver(_Echo(self.echo), [quiet]))
        globalLogBeginner.beginLoggingTo(observers, redirectStandardIO=False)

    async def run(self) -> int:
        self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
        self._beginLogging()
        self.reactor.addSystemEventTrigger("before", "shutdown", self.stopAll)
        self.reactor.callWhenRunning(self._installSignals)
        try:
            manifest = Manifest.fromPath(self.options["manifest"])
        except ManifestError as e:
            raise LocalRunFailed(f"vehicle: {e}", 2)
        master, keptIn = masterKey(self.root, self.environ)
        graph = self.options["graph"]
        secret = secrets.token_urlsafe(24)
        config = Config(
            masterKey=master,
            tokens=(),
            graphs=(graph,),
            service=manifest.serviceConfig("http://127.0.0.1:0", secret),
        )
        standIn = self.standIn = StandIn(root=self.root / "gardend", config=config, reactor=self.reactor)
        port = self.options["port"]
        try:
            standIn.listen(self.reactor, port)
        except CannotListenError:
            raise LocalRunFailed(
                f"vehicle: port {port} is in use; choose another with --port", 2
            )

        baseEnv = {
            "PATH": self.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": self.environ.get("HOME", str(self.root)),
            "LANG": self.environ.get("LANG", "C.UTF-8"),
        }
        which = await self._model(baseEnv)
        try:
            host = await standIn.launch(
                manifest,
                dataDir=self.root / "services" / manifest.serviceId,
                logPath=self.logs / "host.log",
                baseEnv=baseEnv,
                echo=self.echo,
            )
        except ServiceFailed as e:
            self.children.append(e.child)
            raise self._failed(e.child, f"{_called(e.child)} did not start: {e}")
        self.children.append(host)
        self._banner(which, master, keptIn, graph)
        return await self._watch()

    async def _model(self, baseEnv: dict[str, str]) -> str:
        """
        Start the model (or point at the real one) and write C{models.json};
        fill C{baseEnv} with the host's model settings.
        """
        realKey = self.environ.get("OPENROUTER_API_KEY")
        if realKey:
            model = self.environ.get("VEHICLE_DEFAULT_MODEL", "openrouter/openai/gpt-4o-mini")
            provider, modelId = model.split("/", 1)
            spec = {
                "baseUrl": "https://openrouter.ai/api/v1",
                "api": "openai-completions",
                "apiKey": "$OPENROUTER_API_KEY",
                "models": [{"id": modelId, "name": modelId, "reasoning": False,
                            "input": ["text"], "contextWindow": 128000, "maxTokens": 4096}],
            }
            baseEnv["OPENROUTER_API_KEY"] = realKey
            which = f"the real model {model}"
        else:
            port = freeLoopbackPort()
            child = ChildProcess(name="model", logPath=self.logs / "model.log",
                                 clock=self.reactor, echo=self.echo)
            child.spawn(
                self.reactor,
                sys.executable,
                ["-m", "vehicle_local.model", "--port", str(port)],
                {"PATH": baseEnv["PATH"], "PYTHONUNBUFFERED": "1"},
            )
            self.children.append(child)
            assert self.standIn is not None and self.standIn.gateway.client is not None
            url = f"http://127.0.0.1:{port}"
            if not await waitHealthy(
                self.standIn.gateway.client, self.reactor, child, url + "/health", 30
            ):
                raise self._failed(child, "the scripted model did not start")
            provider, model = "scripted", "scripted/echo-1"
            spec = {
                "baseUrl": url + "/v1",
                "api": "openai-completions",
                "apiKey": "$VEHICLE_LOCAL_KEY",
                "models": [{"id": "echo-1", "name": "Scripted echo", "reasoning": False,
                            "input": ["text"],
                            "cost": {"input": 3, "output": 15, "cacheRead": 0, "cacheWrite": 0},
                            "contextWindow": 128000, "maxTokens": 4096}],
            }
            baseEnv["VEHICLE_LOCAL_KEY"] = "sk-local-" + secrets.token_hex(8)
            which = f"the scripted model ({url})"
        models = self.root / "models.json"
        writeAtomic(models, json.dumps({"providers": {provider: spec}}, indent=2).encode())
        baseEnv["VEHICLE_MODELS"] = str(models)
        baseEnv["VEHICLE_DEFAULT_MODEL"] = model
        return which

    def _banner(self, which: str, master: str, keptIn: str, graph: str) -> None:
        assert self.standIn is not None
        front = self.standIn.url
        base = f"{front}/services/vehicle/g/{graph}"
        auth = f"-H 'Authorization: Bearer {master}'"
        _say(f"""
vehicle is running locally, with {which}.

  URL:   {base}
  key:   {master}   ({'from ' + keptIn if keptIn == 'GARDEND_MASTER_KEY' else 'kept in ' + keptIn})
  data:  {self.root}   (logs in {self.logs}{'' if self.echo else '; -v shows them'})

List your sessions:
  curl -s {base}/sessions {auth}

Start one and talk to it (one JSON request per line; see docs/ride.md):
  VEHICLE_TOKEN={master} .venv/bin/vehicle ride --gardend {front} --graph {graph} --new

Ctrl-C stops everything.
""")

    async def _watch(self) -> int:
        """
        Wait until a part ends.  During a stop that is expected (exit 0);
        otherwise the rest are stopped and the part's last lines shown.
        """
        ended = DeferredList([c.ended for c in self.children], fireOnOneCallback=True)
        _, index = await ended
        if self.stopping:
            return 0
        child = self.children[index]
        raise self._failed(child, f"{_called(child)} stopped on its own")

    def _failed(self, child: ChildProcess, what: str) -> LocalRunFailed:
        status = "" if child.running else f" ({describeStatus(child.exitStatus or 0)})"
        lines = child.lastLines()[-20:]
        tail = "\n".join("  " + line for line in lines) if lines else "  (it wrote nothing)"
        return LocalRunFailed(
            f"vehicle: {what}{status}. Its last lines ({child.logPath}):\n{tail}"
        )

    def _installSignals(self) -> None:
        def stop(signum: int, frame: Any) -> None:
            self.stopping = True
            # A signal handler may run between two steps of the reactor.
            IReactorFromThreads(self.reactor).callFromThread(self.reactor.stop)

        signal.signal(signal.SIGINT, stop)
        signal.signal(signal.SIGTERM, stop)

    def stopAll(self) -> Deferred:
        """
        Stop every part still running: the host first (it stops its pi
        bodies), then the model; then the gateway.
        """
        self.stopping = True

        async def inOrder() -> None:
            for child in sorted(self.children, key=lambda c: c.name != "vehicle"):
                if child.running:
                    await child.stop()
            if self.standIn is not None:
                await self.standIn.stopListening()

        return Deferred.fromCoroutine(inOrder())


def main(argv: list[str] | None = None) -> None:
    options = Options()
    try:
        options.parseOptions(sys.argv[1:] if argv is None else argv)
    except usage.UsageError as e:
        sys.stderr.write(f"vehicle: {e}\n{options}")
        raise SystemExit(2)

    async def start(reactor: IHostReactor) -> None:
        local = LocalRun(reactor, options, os.environ)
        try:
            status = await local.run()
        except LocalRunFailed as e:
            sys.stderr.write(str(e) + "\n")
            sys.stderr.flush()
            raise SystemExit(e.status)
        if status:
            raise SystemExit(status)

    react(lambda reactor: Deferred.fromCoroutine(start(reactor)))
