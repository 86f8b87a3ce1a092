# -*- test-case-name: tests.unit.test_tap,tests.unit.test_hardening -*-
"""
The host's sessions given their bodies: each session gets its conductor
with the plan its profile or funding asks for (the agent's box, the
caller's own key), public accounting and the mirror; at stop, every
conductor closes, the proxies let go of their sockets, the ledger closes.

This is the one module that knows every part a session is joined to, so the
tap only builds the parts and hands them here.
"""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Callable

from attrs import define, field
from treq.client import HTTPClient
from twisted.internet.defer import Deferred, gatherResults
from twisted.internet.interfaces import IReactorTime
from twisted.web.client import HTTPConnectionPool

from vehicle._reactors import IHostReactor
from vehicle.agent import AgentProfile
from vehicle.body import (
    BodyPaths,
    BodyPlan,
    ChatSpares,
    Conductor,
    Launcher,
    Places,
    Planner,
    RunInThread,
    Spare,
    SpareHolds,
    SpareProxy,
    SparePool,
    SpareSource,
    TranscriptReader,
    primingFolder,
)
from vehicle.box import ModelProxy, Upstream, proxiesClosed, throughProxy
from vehicle.mirror import Mirror
from vehicle.models import ModelCatalog
from vehicle.public import OwnKeyBodies, Public
from vehicle.protocol import BodyView, JSONObject
from vehicle.session import RunSettled, Session


@define(eq=False)
class ChatSpareProxy:
    """
    A chat spare's way to the model (L{SpareProxy}): the host's proxy on a
    socket of its own, which the extension's bridge reaches on a free port
    of the loopback.  The spare's boot config lists every provider of the
    host, each with the proxy's token for its key; the proxy holds the key,
    and reaches the session's provider once the spare is handed over: with
    the house's key, or with the caller's own for a conversation on it.
    """

    proxy: ModelProxy
    models: ModelCatalog
    providers: dict[str, JSONObject] = field(repr=False)
    bootExtra: JSONObject
    ownKey: OwnKeyBodies | None = None

    @classmethod
    async def open(
        cls, reactor: IHostReactor, models: ModelCatalog, socketPath: Path,
        http: HTTPClient | None = None, ownKey: OwnKeyBodies | None = None,
    ) -> "ChatSpareProxy":
        proxy = ModelProxy(reactor=reactor, socketPath=socketPath, model=None, http=http)
        await proxy.listen()
        return cls(
            proxy=proxy,
            models=models,
            # The bridge picks a free port and puts it in place of the 0.
            providers=models.throughProxy("http://127.0.0.1:0/v1", proxy.token),
            bootExtra={"bridge": {"socket": str(socketPath), "port": 0}},
            ownKey=ownKey,
        )

    def handTo(self, session: Session) -> None:
        self.proxy.handTo(
            self._upstreamFor(session),
            gate=lambda: (
                session.conductor.meterModelRequest()
                if session.conductor is not None else "no run is under way"
            ),
        )

    def _upstreamFor(self, session: Session) -> Upstream:
        """
        The session's provider with the house's key, or the caller's own
        for a conversation on it (never the house's: with no public side to
        hold the caller's, none, and the proxy refuses the body's requests).
        """
        if session.meta.funding != "byok":
            return Upstream.provider(self.models, session.meta.model)
        if self.ownKey is not None:
            return self.ownKey.upstreamFor(session)
        return Upstream.provider(
            self.models, session.meta.model, key=None, keySource=lambda: None, scrub=True
        )

    def close(self) -> Deferred[None]:
        return Deferred.fromCoroutine(self.proxy.close())


@define(eq=False)
class ChatAhead:
    """
    The plan of a chat body started at its driver's claim
    (L{vehicle.body.BodyLife.ahead}), on the house's key: primed in a
    session of its own before it is switched to its conversation, so it
    reaches its model as a spare does, through a proxy of its own (the key
    never in its boot config) that answers the priming itself and reaches
    the session's provider once a command adopts the body.
    """

    reactor: IHostReactor
    models: ModelCatalog
    #: Where the proxies' sockets are (the host's private run folder).
    runDir: Callable[[], Path]
    http: HTTPClient | None = None

    async def plan(self, session: Session) -> BodyPlan:
        proxy = await ChatSpareProxy.open(
            self.reactor, self.models,
            self.runDir() / ("ahead-" + secrets.token_hex(8)) / "model.sock", self.http,
        )
        return BodyPlan(
            providers=proxy.providers,
            bootExtra=proxy.bootExtra,
            cleanup=proxy.close,
            primingDir=primingFolder(BodyPaths.forSession(session.directory).piDir),
            onAdopt=lambda: proxy.handTo(session),
        )


@define
class OwnKeySpares:
    """
    Warm chat bodies for a conversation on the caller's own key (a
    L{SpareSource}): one is taken only while the host holds the key, and
    its proxy then reaches the provider with it (L{ChatSpareProxy.handTo}).
    """

    ownKey: OwnKeyBodies
    source: SpareSource

    async def spareFor(self, session: Session) -> Spare | None:
        self.ownKey.requireKey(session)
        return await self.source.spareFor(session)


def chatSpares(
    *,
    launcher: Launcher,
    reactor: IHostReactor,
    models: ModelCatalog,
    size: int,
    runDir: Callable[[], Path],
    refillSeconds: float,
    http: HTTPClient | None = None,
    reserve: tuple[Callable[[], str], Callable[[str], Path]] | None = None,
    ownKey: OwnKeyBodies | None = None,
) -> SparePool | None:
    """
    The pool of chat spares, started on the catalogue's default model and
    serving a session on any of its models a proxy reaches (not one on an
    API it does not speak: L{vehicle.box.throughProxy}), or L{None} when
    there are to be none (size 0, no model).  With C{reserve} (a
    session id's maker, and its folder's namer) each spare is made for a
    new session (L{vehicle.body.ChatSpares}); with C{ownKey}, a spare may
    serve a conversation on the caller's own key.
    """
    model = models.default
    if size < 1 or model is None:
        return None

    async def openProxy(spareId: str) -> SpareProxy:
        return await ChatSpareProxy.open(
            reactor, models, runDir() / spareId / "model.sock", http, ownKey
        )

    return SparePool(
        launcher=launcher,
        clock=reactor,
        size=size,
        model=model,
        serves=throughProxy(models),
        kind=ChatSpares(
            root=runDir, openProxy=openProxy, mcpUrl=launcher.mcpUrl, reserve=reserve
        ),
        refillSeconds=refillSeconds,
    )


@define(eq=False)
class Bodies:
    """
    Gives every session its conductor (the first of the sessions'
    observers: a session has its body before anyone else hears of it), and
    stops them all with the host.
    """

    launcher: Launcher
    clock: IReactorTime
    idleSeconds: float
    agent: AgentProfile | None = None
    mirror: Mirror | None = None
    public: Public | None = None
    ownKey: OwnKeyBodies | None = None
    #: Warm chat bodies for new and revived chat conversations on the
    #: host's key (a visitor's own key is planned; an agent's spares are
    #: the agent profile's).
    spares: SparePool | None = None
    #: The chat spares held for the new sessions made with them.
    holds: SpareHolds | None = None
    #: The plan of a chat body started at a claim (primed), if spares are
    #: kept.
    chatAhead: ChatAhead | None = None
    #: The connections the proxies keep open to the providers (closed once
    #: every proxy is).
    proxyConnections: HTTPConnectionPool | None = None
    #: Where a session's changed transcript is read (off the reactor's
    #: thread); here, at once, when L{None}.
    runInThread: RunInThread | None = None
    conductors: dict[str, Conductor] = field(factory=dict)
    #: The places of bodies started at claims, one set for each kind of
    #: body (as many as its spares).
    _places: dict[str, Places] = field(factory=dict)

    def start(self) -> None:
        """
        The host starts: the spares are made, in the background.
        """
        if self.spares is not None:
            self.spares.start()
        if self.agent is not None:
            self.agent.startSpares()

    def created(self, session: Session) -> None:
        planner: Planner | None = None
        spares: SpareSource | None = self.holds or self.spares
        # Where warm bodies are kept for its kind, a claim starts its body
        # when no spare can serve it (in one of that kind's places).
        aheadPlanner: Planner | None = self.chatAhead.plan if self.chatAhead else None
        places = self._placesFor("chat", self.spares)
        if session.meta.profile == "agent" and self.agent is not None:
            # An agent's spare is the one reserved for it at its creation.
            planner, spares = self.agent.plan, self.agent
            aheadPlanner = self.agent.planAhead
            places = self._placesFor("agent", self.agent.spares)
        if session.meta.funding == "byok" and self.ownKey is not None:
            planner, aheadPlanner = self.ownKey.plan, None
            spares = OwnKeySpares(self.ownKey, spares) if spares is not None else None
        conductor = Conductor(
            session=session,
            launcher=self.launcher,
            clock=self.clock,
            idleSeconds=self.idleSeconds,
            planner=planner,
            spares=spares,
            aheadPlanner=aheadPlanner,
            places=places,
            transcripts=TranscriptReader(runInThread=self.runInThread),
        )
        session.conductor = conductor
        self.conductors[session.sessionId] = conductor

    def _placesFor(self, kind: str, pool: SparePool | None) -> Places | None:
        """
        The places of bodies of C{kind} started at claims: as many as its
        spares (L{None} with no spares: none is started at a claim).
        """
        if pool is None:
            return None
        return self._places.setdefault(kind, Places(limit=pool.size))

    def renamed(self, session: Session) -> None:
        pass

    def settled(self, session: Session, run: RunSettled) -> None:
        pass

    def deleting(self, session: Session) -> JSONObject | None:
        return None

    def deleted(self, session: Session) -> None:
        self.conductors.pop(session.sessionId, None)
        if self.holds is not None:
            self.holds.unreserve(session.sessionId)
        if self.agent is not None:
            # A spare reserved for it and never handed over ends.
            self.agent.unreserve(session.sessionId)

    async def disposeFor(self, session: Session) -> None:
        if session.conductor is not None:  # every session is attached, at creation
            await session.conductor.dispose("deleted")

    async def snapshotFor(self, session: Session) -> BodyView:
        view = await session.conductor.snapshot() if session.conductor is not None else BodyView()
        if self.mirror is not None:
            view = view.withMirror(self.mirror.state(session))
        return view

    def stop(self) -> Deferred[None]:
        def closeLedger(_: object) -> None:
            if self.public is not None:
                self.public.ledger.close()
            if self.agent is not None:
                self.agent.removeRunDir()

        closing = gatherResults(
            [c.close() for c in list(self.conductors.values())]
            + ([(self.holds or self.spares).stop()] if self.spares is not None else [])
            + ([self.agent.stopSpares()] if self.agent is not None else []),
            consumeErrors=True,
        )
        # The bodies' proxies let go of their sockets before their folder goes.
        closing.addBoth(lambda _: Deferred.fromCoroutine(proxiesClosed()))
        connections = self.proxyConnections
        if connections is not None:
            closing.addBoth(lambda _: connections.closeCachedConnections())
        return closing.addBoth(closeLedger)
