# -*- test-case-name: tests.unit.test_tap,tests.unit.test_hardening -*-
"""
The host's sessions given their bodies: each session gets its conductor
with the plan its profile or funding asks for (the agent's box, the
caller's own key), public accounting and the mirror; at stop, every
conductor closes, the doors let go of their sockets, the ledger closes.

This is the one room that knows every part a session is joined to, so the
tap only builds the parts and hands them here.
"""

from __future__ import annotations

from attrs import define, evolve, field
from twisted.internet.defer import Deferred, gatherResults
from twisted.internet.interfaces import IReactorTime

from vehicle.agent import AgentProfile
from vehicle.body import Conductor, Launcher, Planner
from vehicle.box import doorsClosed
from vehicle.mirror import Mirror
from vehicle.public import OwnKeyBodies, Public
from vehicle.protocol import BodyView, JSONObject
from vehicle.session import RunSettled, Session


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
    conductors: dict[str, Conductor] = field(factory=dict)

    def created(self, session: Session) -> None:
        planner: Planner | None = None
        if session.meta.profile == "agent" and self.agent is not None:
            planner = self.agent.plan
        if session.meta.funding == "byok" and self.ownKey is not None:
            planner = self.ownKey.plan
        conductor = Conductor(
            session=session,
            launcher=self.launcher,
            clock=self.clock,
            idleSeconds=self.idleSeconds,
            planner=planner,
        )
        session.conductor = conductor
        self.conductors[session.sessionId] = conductor

    def renamed(self, session: Session) -> None:
        pass

    def settled(self, session: Session, run: RunSettled) -> None:
        pass

    def deleting(self, session: Session) -> JSONObject | None:
        return None

    def deleted(self, session: Session) -> None:
        self.conductors.pop(session.sessionId, None)

    async def disposeFor(self, session: Session) -> None:
        if session.conductor is not None:  # every session is attached, at creation
            await session.conductor.dispose("deleted")

    async def snapshotFor(self, session: Session) -> BodyView:
        view = await session.conductor.snapshot() if session.conductor is not None else BodyView()
        if self.mirror is not None:
            view = evolve(view, mirror=self.mirror.state(session))
        return view

    def stop(self) -> Deferred[None]:
        def closeLedger(_: object) -> None:
            if self.public is not None:
                self.public.ledger.close()
            if self.agent is not None:
                self.agent.removeRunDir()

        closing = gatherResults(
            [c.close() for c in list(self.conductors.values())],
            consumeErrors=True,
        )
        # The bodies' doors let go of their sockets before their folder goes.
        closing.addBoth(lambda _: Deferred.fromCoroutine(doorsClosed()))
        return closing.addBoth(closeLedger)
