# -*- test-case-name: tests.unit.test_localrun,tests.live.test_local -*-
"""
The one-command local run (C{scripts/run}, C{python -m vehicle_local}) as
one service tree, L{LocalRun}: this process's log file, the gardend
stand-in (the gateway and C{/mcp}) serving on the port, the scripted model
as a child (or a real provider when C{OPENROUTER_API_KEY} is set), and the
host started from C{services/vehicle/service.json} as gardend starts it.

The banner comes once every part has answered its health check.  Each
part's log goes to C{<data-dir>/logs/}; C{-v} also shows it.  Ctrl-C or
C{TERM} stops the reactor (Twisted's own handlers), and the reactor's
shutdown stops the tree, the host first (exit 0).  A part that ends on its
own fails the run (exit 1, with its last lines), which stops the reactor
and so the rest.
"""

from __future__ import annotations

import json
import os
import secrets
import sys
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, TextIO

from attrs import define, field
from twisted.application.service import MultiService
from twisted.internet.defer import Deferred, DeferredList
from twisted.internet.error import CannotListenError
from twisted.internet.task import deferLater, react
from twisted.logger import (
    FilteringLogObserver,
    ILogObserver,
    LogEvent,
    LogPublisher,
    formatEvent,
    globalLogBeginner,
    globalLogPublisher,
)
from twisted.python import usage
from treq.client import HTTPClient
from zope.interface import implementer

from vehicle._logs import quiet, quietObserver
from vehicle._reactors import IHostReactor
from vehicle.protocol import JSONObject
from vehicle.store import writeAtomic
from vehicle_local._options import Options as TypedOptions
from vehicle_local._supervise import (
    Echo,
    InTurn,
    Named,
    ServiceFailed,
    Supervised,
    describeStatus,
)
from vehicle_local.standin import Config, Manifest, ManifestError, StandIn, freeLoopbackPort

#: Where the local run keeps everything unless told otherwise (relative to
#: the repository, where C{scripts/run} starts it).
DEFAULT_DATA_DIR = ".data"

#: The file the local master key is kept in, inside the data dir.
MASTER_KEY_FILE = "master-key"

#: How long after a part ends the run may still begin its stop, for the
#: part's end to count as part of the stop rather than a failure.
STOP_GRACE_SECONDS = 0.5

#: How long each part has to answer its health check.
MODEL_HEALTH_SECONDS = 30.0
HOST_HEALTH_SECONDS = 60.0


class Options(TypedOptions):
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


def masterKey(dataDir: Path, environ: Mapping[str, str]) -> tuple[str, str]:
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


def _say(line: str = "") -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


@implementer(ILogObserver)
class _Echo:
    """
    Shows this process's own log events (the stand-in's) with C{-v}.
    """

    def __init__(self, echo: Echo) -> None:
        self.echo = echo

    def __call__(self, event: LogEvent) -> None:
        text = formatEvent(event)
        if text:
            self.echo("gardend", text)


@define(eq=False)
class LogFile(Named):
    """
    This process's own log events (the stand-in's), without the factories'
    chatter, appended to C{path} while the service runs and echoed with
    C{-v}; the file is closed when it stops.

    @ivar publisher: where the events come from (Twisted's global one).
    """

    path: Path
    publisher: LogPublisher
    echo: Optional[Echo] = None
    name: str = "logs"
    _file: Optional[TextIO] = field(init=False, default=None)
    _observers: list[ILogObserver] = field(init=False, factory=list)

    def startService(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(self.path, "a", encoding="utf-8")
        self._observers = [quietObserver(self._file)]
        if self.echo is not None:
            self._observers.append(FilteringLogObserver(_Echo(self.echo), [quiet]))
        for observer in self._observers:
            self.publisher.addObserver(observer)
        Named.startService(self)

    def stopService(self) -> None:
        Named.stopService(self)
        for observer in self._observers:
            self.publisher.removeObserver(observer)
        self._observers = []
        if self._file is not None:
            self._file.close()
            self._file = None


def _called(part: Supervised) -> str:
    return "the scripted model" if part.name == "model" else f"the host ({part.name})"


@define(eq=False)
class LocalRun(InTurn):
    """
    One local run: a tree of its log file, the stand-in serving, the model
    (when scripted) and the host, stopped in turn from the host back.

    @ivar host: the host, started from its manifest.
    @ivar model: the scripted model, or L{None} for a real provider.
    @ivar which: the model, in words, for the banner.
    """

    reactor: IHostReactor
    standIn: StandIn
    port: int
    host: Supervised
    model: Optional[Supervised]
    which: str
    master: str = field(repr=False)
    keptIn: str
    graph: str
    root: Path
    verbose: bool
    say: Callable[[str], None] = _say

    def __attrs_post_init__(self) -> None:
        MultiService.__init__(self)

    @property
    def parts(self) -> list[Supervised]:
        """
        The supervised children: the model (when scripted), then the host.
        """
        return [p for p in (self.model, self.host) if p is not None]

    async def run(self) -> None:
        """
        Start every part, print the banner once each is healthy, then wait
        until one ends on its own.  Returns when the tree is stopped first.

        @raise LocalRunFailed: when the port is taken, or a part does not
            start or ends on its own (the rest are stopped by the tree's
            stop, which the reactor's shutdown brings).
        """
        try:
            self.startService()
        except CannotListenError:
            raise LocalRunFailed(
                f"vehicle: port {self.port} is in use; choose another with --port", 2
            )
        try:
            if self.model is not None:
                assert self.standIn.gateway.client is not None
                await self.model.whenHealthy(self.standIn.gateway.client, MODEL_HEALTH_SECONDS)
            await self.standIn.front(self.host, HOST_HEALTH_SECONDS)
        except ServiceFailed as e:
            if await self._stopping():
                return
            raise self._failed(e.service, f"{_called(e.service)} did not start: {e}")
        if not self.running:
            return
        self.say(self.banner())
        parts = self.parts
        _, index = await DeferredList([p.whenEnded() for p in parts], fireOnOneCallback=True)
        if await self._stopping():
            return
        raise self._failed(parts[index], f"{_called(parts[index])} stopped on its own")

    async def _stopping(self) -> bool:
        """
        Whether a part that just ended ended with the run: the run stops
        now or within L{STOP_GRACE_SECONDS} (Ctrl-C in a terminal reaches
        every part at once, and a part may be quicker to end than this
        process to begin its stop).
        """
        if self.running:
            await deferLater(self.reactor, STOP_GRACE_SECONDS)
        return not self.running

    def banner(self) -> str:
        """
        What to paste, once every part answers.
        """
        front = self.standIn.url
        base = f"{front}/services/vehicle/g/{self.graph}"
        auth = f"-H 'Authorization: Bearer {self.master}'"
        logs = self.root / "logs"
        where = "from " if self.keptIn == "GARDEND_MASTER_KEY" else "kept in "
        return f"""
vehicle is running locally, with {self.which}.

  page:  {self.standIn.page.link(front)}
         (a one-time login link; afterwards open {front}/ and type the key)
  URL:   {base}
  key:   {self.master}   ({where}{self.keptIn})
  data:  {self.root}   (logs in {logs}{'' if self.verbose else '; -v shows them'})

List your sessions:
  curl -s {base}/sessions {auth}

Start one and talk to it (one JSON request per line; see docs/ride.md):
  VEHICLE_TOKEN={self.master} .venv/bin/vehicle ride --gardend {front} --graph {self.graph} --new

Ctrl-C stops everything.
"""

    def _failed(self, part: Supervised, what: str) -> LocalRunFailed:
        process = part.process
        assert process is not None
        running = process.exitStatus is None
        status = "" if running else f" ({describeStatus(process.exitStatus or 0)})"
        lines = process.lastLines()[-20:]
        tail = "\n".join("  " + line for line in lines) if lines else "  (it wrote nothing)"
        return LocalRunFailed(
            f"vehicle: {what}{status}. Its last lines ({part.logPath}):\n{tail}"
        )


def _models(
    environ: Mapping[str, str],
    reactor: IHostReactor,
    logs: Path,
    python: str,
    echo: Optional[Echo],
) -> tuple[Optional[Supervised], str, str, JSONObject, dict[str, str]]:
    """
    The model: the scripted one as a child, or a real provider when
    C{OPENROUTER_API_KEY} is set.

    @return: the child (or L{None}), the model in words, the model's id,
        its provider in pi's C{models.json} form, and what the host's
        environment needs for it.
    """
    realKey = environ.get("OPENROUTER_API_KEY")
    if realKey:
        model = environ.get("VEHICLE_DEFAULT_MODEL", "openrouter/openai/gpt-4o-mini")
        provider, modelId = model.split("/", 1)
        spec: JSONObject = {
            "baseUrl": "https://openrouter.ai/api/v1",
            "api": "openai-completions",
            "apiKey": "$OPENROUTER_API_KEY",
            "models": [{"id": modelId, "name": modelId, "reasoning": False,
                        "input": ["text"], "contextWindow": 128000, "maxTokens": 4096}],
        }
        return None, f"the real model {model}", model, {provider: spec}, {
            "OPENROUTER_API_KEY": realKey
        }
    port = freeLoopbackPort()
    url = f"http://127.0.0.1:{port}"
    path = environ.get("PATH", "/usr/bin:/bin")
    child = Supervised(
        name="model",
        command=python,
        args=("-m", "vehicle_local.model", "--port", str(port)),
        environment=lambda: {"PATH": path, "PYTHONUNBUFFERED": "1"},
        logPath=logs / "model.log",
        reactor=reactor,
        url=url,
        healthPath="/health",
        echo=echo,
    )
    spec = {
        "baseUrl": url + "/v1",
        "api": "openai-completions",
        "apiKey": "$VEHICLE_LOCAL_KEY",
        "models": [{"id": "echo-1", "name": "Scripted echo", "reasoning": False,
                    "input": ["text"],
                    "cost": {"input": 3, "output": 15, "cacheRead": 0, "cacheWrite": 0},
                    "contextWindow": 128000, "maxTokens": 4096}],
    }
    key = {"VEHICLE_LOCAL_KEY": "sk-local-" + secrets.token_hex(8)}
    return child, f"the scripted model ({url})", "scripted/echo-1", {"scripted": spec}, key


def _echoTo(say: Callable[[str], None]) -> Echo:
    """
    Each part's lines, named (C{-v}).
    """

    def echo(name: str, line: str) -> None:
        say(f"[{name}] {line}")

    return echo


def _hostEnvironment(
    environ: Mapping[str, str],
    root: Path,
    providers: JSONObject,
    modelId: str,
    modelEnv: Mapping[str, str],
) -> dict[str, str]:
    """
    What the operator passes on to the host, with its model: C{providers}
    written to C{<root>/models.json} for C{VEHICLE_MODELS}, C{modelId} its
    default, C{modelEnv} what the model needs.
    """
    models = root / "models.json"
    writeAtomic(models, json.dumps({"providers": providers}, indent=2).encode())
    return {
        "PATH": environ.get("PATH", "/usr/bin:/bin"),
        "HOME": environ.get("HOME", str(root)),
        "LANG": environ.get("LANG", "C.UTF-8"),
        **modelEnv,
        "VEHICLE_MODELS": str(models),
        "VEHICLE_DEFAULT_MODEL": modelId,
    }


def makeLocalRun(
    options: Options,
    environ: Mapping[str, str],
    reactor: IHostReactor,
    *,
    publisher: LogPublisher = globalLogPublisher,
    python: str = sys.executable,
    http: Optional[HTTPClient] = None,
    say: Callable[[str], None] = _say,
) -> LocalRun:
    """
    The local run's tree, not started: the data dir, its master key and
    C{models.json} are made; each part is built.

    @param publisher: the log events this process's log file takes.
    @param python: the interpreter the scripted model runs under.
    @param http: the stand-in's HTTP client (treq's over the reactor when
        L{None}), which also asks each part for its health.
    @param say: writes the banner (and with C{-v}, each part's lines).
    @raise LocalRunFailed: when the manifest cannot be read.
    """
    root = Path(options["data-dir"]).absolute()
    root.mkdir(parents=True, exist_ok=True, mode=0o700)
    logs = root / "logs"
    echo = _echoTo(say) if options["verbose"] else None
    try:
        manifest = Manifest.fromPath(options["manifest"])
    except ManifestError as e:
        raise LocalRunFailed(f"vehicle: {e}", 2)
    master, keptIn = masterKey(root, environ)
    graph = options["graph"]
    config = Config(
        masterKey=master,
        tokens=(),
        graphs=(graph,),
        service=manifest.serviceConfig("http://127.0.0.1:0", secrets.token_urlsafe(24)),
    )
    standIn = StandIn(root=root / "gardend", config=config, reactor=reactor, http=http)
    model, which, modelId, providers, modelEnv = _models(
        environ, reactor, logs, python, echo
    )
    host = standIn.serviceFor(
        manifest,
        dataDir=root / "services" / manifest.serviceId,
        logPath=logs / "host.log",
        baseEnv=_hostEnvironment(environ, root, providers, modelId, modelEnv),
        echo=echo,
    )
    local = LocalRun(
        reactor=reactor, standIn=standIn, port=options["port"], host=host, model=model, which=which,
        master=master, keptIn=keptIn, graph=graph, root=root,
        verbose=bool(options["verbose"]), say=say,
    )
    for part in (LogFile(path=logs / "gardend.log", publisher=publisher, echo=echo),
                 standIn.serving(options["port"]), *local.parts):
        part.setServiceParent(local)
    return local


async def runLocally(
    reactor: IHostReactor, options: Options, environ: Mapping[str, str], **injected: Any
) -> None:
    """
    Build the tree (L{makeLocalRun}), have the reactor's shutdown stop it,
    and run it; a failure is one message on standard error and the exit
    status.
    """
    try:
        local = makeLocalRun(options, environ, reactor, **injected)
        reactor.addSystemEventTrigger("before", "shutdown", local.stopService)
        await local.run()
    except LocalRunFailed as e:
        sys.stderr.write(str(e) + "\n")
        sys.stderr.flush()
        raise SystemExit(e.status)


def main(argv: Optional[list[str]] = None) -> None:
    """
    C{python -m vehicle_local}: parse C{argv} and run until Ctrl-C, C{TERM}
    or a part's end.
    """
    options = Options()
    try:
        options.parseOptions(sys.argv[1:] if argv is None else argv)
    except usage.UsageError as e:
        sys.stderr.write(f"vehicle: {e}\n{options}")
        raise SystemExit(2)
    # Events go to the log file while the tree runs (LogFile), nowhere else.
    globalLogBeginner.beginLoggingTo([], redirectStandardIO=False)
    react(
        lambda reactor: Deferred.fromCoroutine(runLocally(reactor, options, os.environ))
    )
