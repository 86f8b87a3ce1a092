# -*- test-case-name: tests.unit.test_tap -*-
"""
C{twistd vehicle}: the command line, and the service tree it builds.  It
reads the settings, builds the packages and wires them; it knows nothing of
how any of them work.
"""

from __future__ import annotations

import gc
import os
import sys
from pathlib import Path
from typing import Any

from attrs import define
from twisted.application.internet import StreamServerEndpointService
from twisted.application.service import MultiService, Service
from twisted.internet.endpoints import serverFromString
from twisted.python import usage
from twisted.web.client import HTTPConnectionPool

from vehicle import __version__
from vehicle._reactors import IHostReactor, globalReactor
from vehicle._threads import threadRunner
from vehicle.agent import AgentProfile, agentSpares
from vehicle.body import EXTENSION, Launcher, RunInThread, SpareHolds
from vehicle._http import httpClient
from vehicle.host import (
    Bodies, ChatAhead, Drive, HostBodyRules, HostService, MirrorFollower, chatSpares,
)
from vehicle.metrics import Metrics, metricsSite
from vehicle.mirror import Mirror
from vehicle.public import OwnKeyBodies, Public, openLedger
from vehicle.models import ModelCatalog
from vehicle.session import Registry
from vehicle.settings import Settings, SettingsError, scrubEnvironment
from vehicle.store import DataDir, DataDirLock, DataDirLocked, GroupWriter, observeLogs, writerFor
from vehicle.web import VehicleAPI, VehicleSite


class SettingsRefused(SystemExit):
    """
    The host will not start with these settings.  A C{SystemExit}, so that
    twistd prints this one line and not its page of usage.
    """

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class Options(usage.Options):
    """
    C{twistd vehicle --listen ENDPOINT --data-dir DIR}.
    """

    optParameters = [
        ["listen", None, None,
         "Endpoint to listen on (default tcp:$PORT:interface=$GARDEN_SERVICE_HOST, "
         "host 127.0.0.1). Loopback only."],
        ["data-dir", None, None,
         "Where sessions live (default $VEHICLE_DATA_DIR, else $DATA_DIR)."],
        ["metrics", None, None,
         "Endpoint to serve /metrics on, in Prometheus's text format (e.g. "
         "tcp:9464:interface=127.0.0.1; default $VEHICLE_METRICS, else off). Never gardend's."],
        ["log-format", None, "text",
         "text (for a person, the default) or json (one JSON object a line on standard "
         "output, for a machine; in place of --logger's observer)."],
    ]

    def postOptions(self) -> None:
        if self["log-format"] not in ("text", "json"):
            raise usage.UsageError("--log-format is text or json")
        if self["log-format"] == "json" and self.parent is not None:
            # twistd starts the observer its --logger names.
            self.parent["logger"] = "vehicle._logs.jsonObserver"
        try:
            self["settings"] = Settings.fromEnvironment(
                os.environ, listen=self["listen"], dataDir=self["data-dir"],
                metrics=self["metrics"],
            )
            self["models"] = ModelCatalog.load(
                self["settings"].modelsFile, self["settings"].defaultModel, os.environ
            )
        except SettingsError as e:
            # One clear line, not twistd's page of usage.
            raise SettingsRefused(f"vehicle: {e}")
        scrubEnvironment(os.environ)


def buildHost(
    settings: Settings,
    models: ModelCatalog,
    reactor: IHostReactor,
    launcher: Launcher | None = None,
    runInThread: RunInThread | None = None,
    metrics: Metrics | None = None,
    writer: GroupWriter | None = None,
) -> tuple[VehicleAPI, HostService]:
    """
    The packages, wired: registry, bodies, app and the service that owns them.

    @param runInThread: runs blocking file work (a branch's workspace copy,
        a changed transcript's reading) off the reactor's thread: the
        reactor's pool by default, inline on a reactor without threads (a
        test's fake clock).
    @param metrics: where every package tells what happened (the app's
        C{metrics}; a new one when not given); the store's logs tell it
        too, process-wide.
    @param writer: the data directory's writer (group commit): its own
        thread by default, at once on a reactor without threads.
    """
    if metrics is None:
        metrics = Metrics()
    if runInThread is None:
        runInThread = threadRunner(reactor)
    observeLogs(metrics)
    dataDir = DataDir(settings.dataDir,
                      writer=writer or writerFor(reactor, helper=settings.syncHelper))
    dataDir.ensure()
    registry = Registry(dataDir=dataDir, clock=reactor, defaultLeaseTtlMs=settings.leaseTtlMs)
    if launcher is None:
        launcher = _launcher(settings, models, reactor)
    agent = _agentProfile(settings, models, reactor, dataDir, metrics)
    agent.holds = _agentSpares(settings, models, agent, launcher, registry)
    mirror = Mirror(
        reactor=reactor, mcpUrl=settings.mcpUrl, enabled=settings.mirror, metrics=metrics
    )
    public, ownKey = _publicParts(settings, models, reactor, dataDir, agent, metrics)
    bodies = _bodies(settings, models, reactor, launcher, agent, mirror, public, ownKey,
                     runInThread, registry)
    _follow(registry, bodies, public, mirror)
    drive = _drive(settings, models, registry, bodies, agent, public, runInThread)
    api = VehicleAPI(
        drive=drive,
        secret=settings.secret,
        clock=reactor,
        snapshots=bodies,
        keepaliveSeconds=settings.keepaliveSeconds,
        stallSeconds=settings.stallSeconds,
        public=public,
        metrics=metrics,
    )
    host = HostService(
        registry=registry, bodies=bodies, stopStreams=api.stopStreams, version=__version__.public()
    )
    metrics.sample(lambda: host.sample(streams=len(api.streams)))
    return api, host


def _bodies(
    settings: Settings,
    models: ModelCatalog,
    reactor: IHostReactor,
    launcher: Launcher,
    agent: AgentProfile,
    mirror: Mirror,
    public: Public | None,
    ownKey: OwnKeyBodies | None,
    runInThread: RunInThread,
    registry: Registry,
) -> Bodies:
    """
    The sessions' bodies, with the spare chat bodies kept warm for them
    (each made for a new session's id, in its folder to be).
    """
    # The spares' proxies keep their connections to the provider open.
    proxyConnections = HTTPConnectionPool(reactor, persistent=True)
    spares = chatSpares(
        launcher=launcher,
        reactor=reactor,
        models=models,
        size=settings.spareBodies,
        runDir=agent.runDir,
        refillSeconds=settings.spareRefillMs / 1000.0,
        http=httpClient(reactor, pool=proxyConnections),
        reserve=(registry.newSessionId, registry.dataDir.sessionDir),
        ownKey=ownKey,
    )
    return Bodies(
        launcher=launcher,
        clock=reactor,
        idleSeconds=settings.bodyIdleMs / 1000.0,
        agent=agent,
        mirror=mirror,
        public=public,
        ownKey=ownKey,
        spares=spares,
        holds=(
            SpareHolds(pool=spares, clock=reactor, holdSeconds=settings.bodyIdleMs / 1000.0)
            if spares is not None else None
        ),
        chatAhead=(
            ChatAhead(reactor=reactor, models=models, runDir=agent.runDir,
                      http=httpClient(reactor, pool=proxyConnections))
            if spares is not None else None
        ),
        proxyConnections=proxyConnections,
        runInThread=runInThread,
    )


def _drive(
    settings: Settings,
    models: ModelCatalog,
    registry: Registry,
    bodies: Bodies,
    agent: AgentProfile,
    public: Public | None,
    runInThread: RunInThread,
) -> Drive:
    """
    The host's request rules over the registry and the bodies.
    """
    return Drive(
        registry=registry,
        chooseModel=models.choose,
        agent=agent,
        bodies=HostBodyRules(
            registry=registry, bodies=bodies, agent=agent, runInThread=runInThread,
        ),
        maxTurns=settings.maxTurns,
        maxCostUsd=settings.maxCostUsd,
        leaseTtlMs=settings.leaseTtlMs,
        requireDelegation=settings.mcpUrl is not None,
        public=public,
    )


def _launcher(settings: Settings, models: ModelCatalog, reactor: IHostReactor) -> Launcher:
    """
    What starts a session's pi, as the settings say.
    """
    return Launcher(
        reactor=reactor,
        models=models,
        piRoot=settings.piRoot,
        piCommand=settings.piCommand,
        mcpUrl=settings.mcpUrl,
    )


def _agentProfile(
    settings: Settings, models: ModelCatalog, reactor: IHostReactor, dataDir: DataDir,
    metrics: Metrics,
) -> AgentProfile:
    """
    The agent profile's part: its box, as the settings ask for it.
    """
    return AgentProfile(
        reactor=reactor,
        dataDir=dataDir,
        models=models,
        isolation=settings.isolation,
        agentUnisolated=settings.agentUnisolated,
        piRoot=settings.piRoot,
        extensionDir=EXTENSION.parent,
        mcpUrl=settings.mcpUrl,
        hidden=(Path.home(),) + settings.boxHidden,
        metrics=metrics,
        # A spare reserved for a new session waits as long as a body idles.
        spareHoldSeconds=settings.bodyIdleMs / 1000.0,
    )


def _agentSpares(
    settings: Settings, models: ModelCatalog, agent: AgentProfile, launcher: Launcher,
    registry: Registry,
) -> SpareHolds | None:
    """
    The agent profile's warm boxed bodies, each reserving a new session's
    id as the registry makes them, held for the session made with it.
    """
    pool = agentSpares(
        agent,
        launcher=launcher,
        model=models.default,
        size=settings.agentSpareBodies,
        refillSeconds=settings.spareRefillMs / 1000.0,
        newSessionId=registry.newSessionId,
    )
    if pool is None:
        return None
    return SpareHolds(pool=pool, clock=agent.reactor, holdSeconds=agent.spareHoldSeconds)


def _publicParts(
    settings: Settings,
    models: ModelCatalog,
    reactor: IHostReactor,
    dataDir: DataDir,
    agent: AgentProfile,
    metrics: Metrics,
) -> tuple[Public | None, OwnKeyBodies | None]:
    """
    Public sessions (their ledger opened) and the bodies of callers who
    bring their own key, when the settings turn public sessions on.
    """
    if not settings.public.enabled:
        return None, None
    ledger = openLedger(settings.public, dataDir.public, reactor, metrics)
    public = Public(
        settings=settings.public, ledger=ledger, models=models, clock=reactor, metrics=metrics
    )
    ownKey = OwnKeyBodies(reactor=reactor, public=public, models=models, runDir=agent.runDir)
    return public, ownKey


def _follow(registry: Registry, bodies: Bodies, public: Public | None, mirror: Mirror) -> None:
    """
    Who follows the sessions' lives, in the order they hear: a session has
    its body before anyone else hears of it.
    """
    registry.observers.add(bodies)
    if public is not None:
        registry.observers.add(public)
    registry.observers.add(MirrorFollower(mirror))


@define(eq=False)
class LockService(Service):
    """
    Holds the data directory's lock for the host's life: taken when the
    service tree is made (so a second host refuses before it starts
    anything), stamped with the serving process's pid at start, let go at
    stop.
    """

    lock: DataDirLock

    def startService(self) -> None:
        Service.startService(self)
        self.lock.stamp()

    def stopService(self) -> Any:
        Service.stopService(self)
        self.lock.release()
        return None


def makeService(options: Options, reactor: IHostReactor | None = None) -> MultiService:
    if reactor is None:
        reactor = globalReactor()
    settings: Settings = options["settings"]
    lock = DataDirLock(settings.dataDir)
    try:
        lock.acquire()
    except DataDirLocked as e:
        raise SettingsRefused(f"vehicle: {e}")
    # The sync helper holds the lock too: no second host takes the data
    # dir while it finishes a batch of this one's.
    writer = writerFor(reactor, helper=settings.syncHelper, holding=lock.fileno())
    api, host = buildHost(settings, options["models"], reactor, writer=writer)
    site = VehicleSite(api.resource(), reactor, headerTimeout=settings.headerTimeoutSeconds)
    top = MultiService()
    # Started in this order, stopped in the reverse: the lock is held
    # before the sessions load and after the last request is answered.
    children: tuple[Service, ...] = (
        LockService(lock),
        host,
        StreamServerEndpointService(serverFromString(reactor, settings.listen), site),
    )
    if settings.metricsListen is not None:
        # Its own port, never gardend's: an operator's scraper reaches it.
        children += (StreamServerEndpointService(
            serverFromString(reactor, settings.metricsListen), metricsSite(api.metrics, reactor)
        ),)
    for child in children:
        child.setServiceParent(top)
    reactor.callWhenRunning(settleHeap)
    return top


#: How many more objects the collector lets be made between its passes
#: over the youngest (CPython's default is 700).
YOUNG_PASS = 10_000


def settleHeap() -> None:
    """
    Once the host runs: what it made to start (its modules, the schemas,
    the router, the sessions read back) lives as long as the process, so
    it is collected once and then left out of the collector's passes
    (C{gc.freeze}).  A full pass, made every few thousand requests, went
    over all of it each time: tens of milliseconds on the reactor's
    thread.  Objects made later are collected as before.

    The youngest objects are passed over every L{YOUNG_PASS} made, not
    every 700: a request leaves nothing for the collector (its objects go
    when it is answered), so each pass found nothing and cost the same,
    the requests in flight, whenever it came; a pass every 700 was about
    4 us of each request.  What a cycle holds lives at most that much
    longer.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(YOUNG_PASS, *gc.get_threshold()[1:])


def main(argv: list[str] | None = None) -> None:  # pragma: no cover - convenience
    print("use: twistd -n --pidfile= vehicle --listen ENDPOINT --data-dir DIR", file=sys.stderr)
