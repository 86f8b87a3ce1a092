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

A plan with a priming folder (an agent's in a box, whose proxy answers one
priming prompt itself until the body is adopted) is primed too: pi starts a
new session of its own there, is prompted once (what pi loads for its first
prompt, ~66-240 ms, is paid then, not by the person's), and is then switched
to the session's conversation; the folder goes.  Nothing of the priming is
told, and the conversation never holds it.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Callable

from attrs import define, field
from twisted.internet.defer import Deferred, succeed
from twisted.internet.interfaces import IReactorTime
from zope.interface import implementer

from vehicle.body._live import LiveBody
from vehicle.body._questions import answerFor, isQuestion
from vehicle.body._rpc import BodyExited, IBodySink, PiProtocol, stateOn, switchSession
from vehicle.body._spares import PRIMING_PROMPT
from vehicle.body._spawner import BodyPlan, Launcher
from vehicle.protocol import JSONObject
from vehicle.session import Session


#: Where, in a session's pi folder, a body started at its driver's claim
#: keeps the session of its own it is primed in (never a conversation: the
#: host reads only the pi folder's own files); gone once it is switched.
PRIMING_FOLDER = ".priming"


def primingFolder(piDir: Path) -> Path:
    """
    A new empty folder in C{piDir} for a body to be primed in (what a
    killed host left there goes; a link or a file a body put in its place
    is removed, never followed).
    """
    folder = piDir / PRIMING_FOLDER
    if folder.is_symlink() or folder.is_file():
        folder.unlink()
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(mode=0o700, parents=True)
    return folder


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
    #: Fires when the priming run settles; while set, nothing pi says is
    #: held (the priming is no one's).
    priming: Deferred[None] | None = None

    def piEvent(self, event: JSONObject) -> None:
        if isQuestion(event):
            if self.protocol is not None:
                self.protocol.send(answerFor(event, self.session.delegatedToken))
        elif self.priming is not None:
            if event.get("type") == "agent_settled" and not self.priming.called:
                self.priming.callback(None)
        elif len(self.held) < HELD_RECORDS:
            self.held.append(event)

    def bodyExited(self, exitCode: int | None, signal: int | None, stderrTail: str) -> None:
        if self.priming is not None and not self.priming.called:
            # Nothing else would end the wait for its priming run.
            self.priming.errback(BodyExited(exitCode, signal, stderrTail))


@define(eq=False)
class Places:
    """
    How many bodies started at claims may wait for their commands at once
    (each is a process, and a claim costs its caller nothing): for one kind
    of body, host-wide, as many as the spares it keeps.
    """

    limit: int
    taken: int = 0

    def take(self) -> bool:
        """
        Take a place, if one is free.
        """
        if self.taken >= self.limit:
            return False
        self.taken += 1
        return True

    def give(self) -> None:
        """
        A place taken is free again.
        """
        self.taken -= 1


@define(eq=False)
class Early:
    """
    One session's body started before its command.

    @ivar revived: it resumes the conversation pi kept for the session.
    @ivar state: pi's answer to C{get_state}, once started.
    @ivar places: the places it holds one of until it is adopted or ends.
    """

    body: LiveBody
    revived: bool
    state: JSONObject = field(factory=dict)
    places: Places | None = None

    @classmethod
    def prepare(
        cls, session: Session, plan: BodyPlan, revived: bool, places: Places | None = None,
    ) -> "Early":
        """
        The body C{plan} makes for C{session}, heard by no one yet (holding
        a place of C{places}, taken already).
        """
        waiting = _Waiting(session=session)
        body = LiveBody.prepare(session, plan, waiting)
        waiting.protocol = body.protocol
        return cls(body=body, revived=revived, places=places)

    def _leave(self) -> None:
        """
        Give its place back, once.
        """
        places, self.places = self.places, None
        if places is not None:
            places.give()

    @property
    def protocol(self) -> PiProtocol:
        return self.body.protocol

    async def start(self, launcher: Launcher, session: Session, conversation: Path) -> None:
        """
        Spawn pi and wait for its state; with a priming folder, prime it
        there and switch it to C{conversation} (the session's file, as pi
        sees it) first.

        @raise Exception: the process could not be started, pi did not
            answer, or refused the conversation (it is to be ended: see
            L{end}).
        """
        self.body.spawn(launcher, session.meta)
        self.state = await self.protocol.request({"type": "get_state"})
        primingDir = self.body.plan.primingDir
        if primingDir is None:
            return
        waiting = self.protocol.sink
        assert isinstance(waiting, _Waiting)
        settled: Deferred[None] = Deferred()
        waiting.priming = settled
        try:
            await self.protocol.request({"type": "prompt", "message": PRIMING_PROMPT})
            await settled
            await switchSession(self.protocol, conversation, "the body refused its conversation")
            self.state = await stateOn(
                self.protocol, conversation, "the body is not on its conversation"
            )
        finally:
            waiting.priming = None
            # Nobody waits for the priming run any more (its end may be an
            # exit that failed the request first).
            settled.addErrback(lambda _: None)
        # pi is off its own session: nothing of the priming stays.
        shutil.rmtree(primingDir, ignore_errors=True)

    def adopt(self, sink: IBodySink) -> None:
        """
        The session's command took the body (it is the session's body
        now): from now on C{sink} hears it, starting with what pi said
        while it waited.
        """
        self._leave()
        waiting = self.protocol.sink
        self.protocol.sink = sink
        if self.body.plan.onAdopt is not None:
            self.body.plan.onAdopt()
        if isinstance(waiting, _Waiting):
            for record in waiting.held:
                sink.piEvent(record)

    def end(self, clock: IReactorTime, cleanUp: Callable[[BodyPlan], object]) -> Deferred[None]:
        """
        Stop a body no command adopted, then undo its plan (C{cleanUp}:
        its proxy closed).
        """
        self._leave()
        body = self.body
        ending: Deferred[None] = succeed(None)
        if body.transport is not None and not body.protocol.hasEnded:
            body.expectingExit()
            ending = body.protocol.terminate(clock, graceSeconds=1)
        primingDir = body.plan.primingDir

        def ended(_: object) -> None:
            if primingDir is not None:
                shutil.rmtree(primingDir, ignore_errors=True)
            cleanUp(body.plan)

        return ending.addBoth(ended)
