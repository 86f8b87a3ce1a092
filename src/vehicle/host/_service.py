# -*- test-case-name: tests.unit.test_tap -*-
"""
The host's own parts beside its bodies: the service that loads every
session at start and stops everything at stop (L{HostService}), the
bodies' part in a request (L{HostBodyRules}: a branch, a body let go before
a delete), and the mirror as one of the sessions' observers
(L{MirrorFollower}).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Callable, ClassVar

from attrs import define
from twisted.application.service import Service
from twisted.internet.defer import Deferred
from twisted.logger import Logger

from vehicle.agent import AgentProfile
from vehicle.body import RunInThread, branch
from vehicle.errors import VehicleError
from vehicle.metrics import HostSample
from vehicle.host._bodies import Bodies
from vehicle.mirror import Mirror
from vehicle.protocol import CommandRequest, JSONObject
from vehicle.session import Caller, FolderRecord, Registry, RunSettled, Session


@define(eq=False)
class HostService(Service):
    """
    Loads every session at start (and sweeps what an agent's runs left,
    and probes the box in the background); at stop, ends the watches,
    disposes of the bodies and closes the logs, once the writer has
    written what they took.
    """

    _log: ClassVar[Logger] = Logger()

    registry: Registry
    bodies: Bodies
    #: Ends every open event stream (the web package's).
    stopStreams: Callable[[], None]
    version: str = ""

    def startService(self) -> None:
        Service.startService(self)  # Twisted's, named so: it is not annotated
        self.registry.loadAll()
        agent = self.bodies.agent
        if agent is not None:
            agent.sweepRunDirs()
            Deferred.fromCoroutine(self._probe(agent))
        self.bodies.start()
        self._log.info(
            "vehicle {version} serving {count} sessions from {dataDir}",
            version=self.version,
            count=len(self.registry.sessions),
            dataDir=str(self.registry.dataDir.root),
        )

    async def _probe(self, agent: AgentProfile) -> None:
        try:
            tier = await agent.decide()
        except VehicleError as e:
            self._log.warn("Agent sessions are unavailable here: {reason}", reason=e.message)
        except Exception as e:
            self._log.error("The box probe could not run: {error!r}", error=e)
        else:
            self._log.info("Agent bodies run in isolation tier {tier}", tier=tier)

    def sample(self, streams: int = 0) -> HostSample:
        """
        The host's state for a scrape: its sessions by their body's
        state, the bodies (every session whose body is not dormant) by
        profile, the runs under way, the long-polls waiting, the ledger
        writes owed, the spare bodies ready, the bodies made for a session
        before its first command (held for a new one, or made at a dormant
        one's claim); C{streams} is the web package's count.
        """
        states: Counter[str] = Counter()
        bodies: Counter[str] = Counter()
        runs = polls = ahead = 0
        for session in list(self.registry.sessions.values()):
            state = session.bodyState()
            states[state] += 1
            if state != "dormant":
                bodies[session.meta.profile] += 1
            elif session.conductor is not None and session.conductor.startedAhead():
                ahead += 1
            runs += session.running()
            polls += session.feed.waiting()
        public, agent = self.bodies.public, self.bodies.agent
        pools = [self.bodies.spares, agent.spares if agent is not None else None]
        holds = [self.bodies.holds, agent.holds if agent is not None else None]
        return HostSample(
            sessions=dict(states), bodies=dict(bodies), runs=runs, streams=streams, polls=polls,
            owed=len(public.accounting.owed) if public is not None else 0,
            spares=sum(len(pool.ready) for pool in pools if pool is not None),
            ahead=ahead + sum(len(held.held) for held in holds if held is not None),
        )

    def stopService(self) -> Deferred[None]:
        Service.stopService(self)
        self.stopStreams()
        stopped = self.bodies.stop()
        stopped.addBoth(lambda _: self.registry.close())
        # Stopped once everything taken is written and the logs closed
        # (and the sync helper has ended).
        stopped.addBoth(lambda _: self.registry.dataDir.writer.stop())
        return stopped


@define(eq=False)
class HostBodyRules:
    """
    The bodies' part in a request, as the host does it
    (L{vehicle.host.BodyRules}): a branch from pi's file, a body let go
    before a delete, a chat spare held for a new session.
    """

    registry: Registry
    bodies: Bodies
    agent: AgentProfile
    runInThread: RunInThread

    async def branch(self, source: Session, caller: Caller, request: CommandRequest) -> JSONObject:
        return await branch(
            self.registry, source, caller, request, self.agent.recordFolders, self.runInThread
        )

    async def dispose(self, session: Session) -> None:
        await self.bodies.disposeFor(session)

    def reserveSpare(self, model: str) -> str | None:
        holds = self.bodies.holds
        return holds.reserve(model) if holds is not None else None

    def unreserve(self, sessionId: str) -> None:
        if self.bodies.holds is not None:
            self.bodies.holds.unreserve(sessionId)

    def makeFolders(self, sessionId: str, sessionDir: Path) -> dict[str, FolderRecord]:
        if self.bodies.holds is not None:
            self.bodies.holds.moveIn(sessionId, sessionDir)
        return {}


@define(eq=False)
class MirrorFollower:
    """
    The mirror as an observer of sessions (L{vehicle.session.SessionObserver}).
    """

    mirror: Mirror

    def created(self, session: Session) -> None:
        self.mirror.attach(session)

    def renamed(self, session: Session) -> None:
        self.mirror.afterRename(session)

    def settled(self, session: Session, run: RunSettled) -> None:
        self.mirror.afterSettle(session)

    def deleting(self, session: Session) -> JSONObject | None:
        info = self.mirror.deleteInfo(session)
        return {"mirror": dict(info)} if info else None

    def deleted(self, session: Session) -> None:
        self.mirror.forget(session)
