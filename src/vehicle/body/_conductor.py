# -*- test-case-name: tests.unit.test_conductor -*-
"""
The conductor: one session's body as the session and the host see it
(L{IConductor}), and as pi's protocol reports to it (L{IBodySink}).

It joins three parts, each with one idea: the body's life (L{BodyLife}:
made on demand, revived from pi's own file, let go whole), the way out
(L{Delivery}: commands one pi operation at a time, and cancel), and the way
back (L{Settlement}: pi's events, runs settled, an exit).  The facts they
share are held by their owners: the process and its run by L{LiveBody},
the backlog and the idle timer by L{Pump}, a command's status by the
session.
"""

from __future__ import annotations

from pathlib import Path

from attrs import define, field
from twisted.internet.defer import Deferred, succeed
from twisted.internet.interfaces import IProcessTransport, IReactorTime
from zope.interface import implementer

from vehicle.body._delivery import Delivery
from vehicle.body._early import Places
from vehicle.body._ahead import Planner
from vehicle.body._life import BodyLife
from vehicle.body._live import LiveBody
from vehicle.body._branching import RunInThread
from vehicle.body._pump import Pump
from vehicle.body._rpc import BodyExited, IBodySink, PiCommandError
from vehicle.body._sessionfile import readSession
from vehicle.body._settlement import Settlement
from vehicle.body._spares import SpareSource
from vehicle.body._spawner import Launcher, NewestSessionFile
from vehicle.protocol import BodyState, BodyView, Command, JSONObject, PiQueue
from vehicle.session import IConductor, Session


def _transcriptOf(path: Path) -> tuple[JSONObject, ...]:
    return tuple(item.toJSON() for item in readSession(path).transcript())


@define(eq=False)
class TranscriptReader:
    """
    A session's transcript from pi's file, read again only when the file
    changed (another path, inode, size or time), and then read and parsed
    off the reactor's thread (a long conversation is megabytes of JSON).

    @ivar runInThread: where the file is read; here, at once, when
        L{None}.
    """

    runInThread: RunInThread | None = None
    newest: NewestSessionFile = field(factory=NewestSessionFile)
    _key: tuple[str, int, int, int] | None = None
    _items: tuple[JSONObject, ...] = ()

    async def read(self, piDir: Path) -> tuple[JSONObject, ...]:
        """
        The transcript of the conversation file in C{piDir} (none yet:
        empty).
        """
        found = self.newest(piDir)
        if found is None:
            return ()
        current, st = found
        key = (str(current), st.st_ino, st.st_size, st.st_mtime_ns)
        if key != self._key:
            # Keyed by the file as it was before the read: a change made
            # while it is read shows as a new key next time.
            reading = (succeed(_transcriptOf(current)) if self.runInThread is None
                       else self.runInThread(_transcriptOf, current))
            items = await reading
            self._key, self._items = key, items
        return self._items


@implementer(IConductor, IBodySink)
@define(eq=False)
class Conductor:
    """
    Drives one session's body: commands go out one at a time (L{Delivery}),
    pi's events come back (L{Settlement}), and the body is made and let go
    (L{BodyLife}).
    """

    session: Session
    launcher: Launcher
    clock: IReactorTime
    idleSeconds: float = 600.0
    #: The plan of each body (an agent's box, a visitor's own key); the
    #: defaults when L{None}.
    planner: Planner | None = None
    #: Where a warm spare is taken from (the chat pool; an agent's own).
    spares: SpareSource | None = None
    #: The plan of a body started at a claim, if not L{planner}'s.
    aheadPlanner: Planner | None = None
    #: The places of bodies started at claims, shared by one kind's
    #: sessions; L{None}: none is started at a claim (L{BodyLife.ahead}).
    places: Places | None = None
    #: Reads the transcript for a snapshot.
    transcripts: TranscriptReader = field(factory=TranscriptReader)
    pump: Pump = field(init=False)
    life: BodyLife = field(init=False)
    delivery: Delivery = field(init=False)
    settlement: Settlement = field(init=False)

    def __attrs_post_init__(self) -> None:
        self.pump = Pump(clock=self.clock, idleSeconds=self.idleSeconds)
        self.life = BodyLife(
            session=self.session,
            launcher=self.launcher,
            clock=self.clock,
            sink=self,
            pump=self.pump,
            planner=self.planner,
            spares=self.spares,
            aheadPlanner=self.aheadPlanner,
            places=self.places,
        )
        self.delivery = Delivery(session=self.session, life=self.life, clock=self.clock)
        self.settlement = Settlement(session=self.session, life=self.life, delivery=self.delivery)

    # -- what the body is now ------------------------------------------------

    @property
    def state(self) -> BodyState:
        """
        C{dormant}, C{starting}, C{live} or C{stopping}.
        """
        return self.life.state

    @property
    def body(self) -> LiveBody | None:
        return self.life.body

    @property
    def transport(self) -> IProcessTransport | None:
        return self.body.transport if self.body is not None else None

    # -- IConductor ---------------------------------------------------------

    def running(self) -> bool:
        return self.life.running()

    def bodyState(self) -> BodyState:
        return self.life.state

    def commandAccepted(self, command: Command) -> None:
        self.delivery.accept(command)

    def claimed(self) -> None:
        self.life.ahead()

    def startedAhead(self) -> bool:
        return self.life.claim.made()

    def snapshot(self) -> Deferred[BodyView]:
        return Deferred.fromCoroutine(self._snapshot())

    async def _snapshot(self) -> BodyView:
        body = self.body
        tools: tuple[str, ...] | None = None
        stats: JSONObject | None = None
        if self.life.live() is not None and body is not None:
            tools = tuple(body.translator.tools)
            try:
                stats = await body.protocol.request({"type": "get_session_stats"})
            except (PiCommandError, BodyExited):
                pass
        return BodyView(
            transcript=await self.transcript(),
            queue=body.snapshotQueue() if body is not None else PiQueue(),
            tools=tools,
            stats=stats,
        )

    async def transcript(self) -> tuple[JSONObject, ...]:
        """
        The transcript of the session's active branch, from pi's file.
        """
        return await self.transcripts.read(self.life.sessionPaths().piDir)

    def meterModelRequest(self) -> str | None:
        """
        May the body's proxy forward one more model request?  Only during a
        run, and no more than the run's turn budget: pi's own guard stops
        it before that, so only a tool calling the proxy itself is refused.
        """
        if self.body is None:
            return "no run is under way"
        return self.body.meter(self.session.meta.maxTurns)

    def close(self) -> Deferred[None]:
        return self.life.close()

    def dispose(self, reason: str = "shutdown") -> Deferred[None]:
        return self.life.dispose(reason)

    # -- IBodySink ----------------------------------------------------------

    def piEvent(self, event: JSONObject) -> None:
        self.settlement.piEvent(event)

    def bodyExited(self, exitCode: int | None, signal: int | None, stderrTail: str) -> None:
        self.settlement.bodyExited(exitCode, signal, stderrTail)
