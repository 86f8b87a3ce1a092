# -*- test-case-name: tests.unit.test_earlybodies -*-
"""
A session's own body started ahead of its next command (L{Early}).

When a dormant conversation is claimed, its driver is likely to send a
command soon.  A chat spare switched to its file serves it best
(L{vehicle.body._life.BodyLife.ahead}); when none can (an agent's, whose
box binds that session's own folders; one on another model than the
spares'; none ready), the session's body is planned and started at the
claim, as its command would start it, and waits: pi boots while the person
types.

Until a command adopts it, nobody hears it: the extension's questions are
answered as the session's body answers them (its MCP client, connecting at
start, asks for the session's delegation token), and whatever else pi says
is held for the session and told when the body is adopted; its exit is no
one's news (the command finds it ended and starts another).
"""

from __future__ import annotations

from typing import Callable

from attrs import define, field
from twisted.internet.defer import Deferred, succeed
from twisted.internet.interfaces import IReactorTime
from zope.interface import implementer

from vehicle.body._live import LiveBody
from vehicle.body._questions import answerFor, isQuestion
from vehicle.body._rpc import IBodySink, PiProtocol
from vehicle.body._spawner import BodyPlan, Launcher
from vehicle.protocol import JSONObject
from vehicle.session import Session


#: The most of pi's records an early body holds for its session (pi says
#: little before its first command; a body that says more is not one to
#: trust with it).
HELD_RECORDS = 200


@implementer(IBodySink)
@define(eq=False)
class _Waiting:
    """
    Hears an early body until it is adopted: questions answered for the
    session, the rest held.
    """

    session: Session
    protocol: PiProtocol | None = None
    held: list[JSONObject] = field(factory=list)

    def piEvent(self, event: JSONObject) -> None:
        if isQuestion(event):
            if self.protocol is not None:
                self.protocol.send(answerFor(event, self.session.delegatedToken))
        elif len(self.held) < HELD_RECORDS:
            self.held.append(event)

    def bodyExited(self, exitCode: int | None, signal: int | None, stderrTail: str) -> None:
        pass


@define(eq=False)
class Early:
    """
    One session's body started before its command.

    @ivar revived: it resumes the conversation pi kept for the session.
    @ivar state: pi's answer to C{get_state}, once started.
    """

    body: LiveBody
    revived: bool
    state: JSONObject = field(factory=dict)

    @classmethod
    def prepare(cls, session: Session, plan: BodyPlan, revived: bool) -> "Early":
        """
        The body C{plan} makes for C{session}, heard by no one yet.
        """
        waiting = _Waiting(session=session)
        body = LiveBody.prepare(session, plan, waiting)
        waiting.protocol = body.protocol
        return cls(body=body, revived=revived)

    @property
    def protocol(self) -> PiProtocol:
        return self.body.protocol

    async def start(self, launcher: Launcher, session: Session) -> None:
        """
        Spawn pi and wait for its state.

        @raise Exception: the process could not be started, or pi did not
            answer (it is ended: see L{end}).
        """
        self.body.spawn(launcher, session.meta)
        self.state = await self.protocol.request({"type": "get_state"})

    def adopt(self, sink: IBodySink) -> None:
        """
        The session's command took the body (it is the session's body
        now): from now on C{sink} hears it, starting with what pi said
        while it waited.
        """
        waiting = self.protocol.sink
        self.protocol.sink = sink
        if isinstance(waiting, _Waiting):
            for record in waiting.held:
                sink.piEvent(record)

    def end(self, clock: IReactorTime, cleanUp: Callable[[BodyPlan], object]) -> Deferred[None]:
        """
        Stop a body no command adopted, then undo its plan (C{cleanUp}:
        its proxy closed).
        """
        body = self.body
        ending: Deferred[None] = succeed(None)
        if body.transport is not None and not body.protocol.hasEnded:
            body.expectingExit()
            ending = body.protocol.terminate(clock, graceSeconds=1)
        return ending.addBoth(lambda _: cleanUp(body.plan)).addCallback(lambda _: None)
