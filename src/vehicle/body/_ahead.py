# -*- test-case-name: tests.unit.test_earlybodies,tests.unit.test_preparedspares -*-
"""
What a session's claim makes for its next body before any command comes
(L{Ahead}): a spare switched to the conversation's file, or the session's
own body started, and primed, early (L{Early}).  One thing at a time, held
until the next body takes it, or let go: no command came within the idle
time, or the session's body was disposed of.  Whether a claim makes
anything (the session dormant, a conversation to revive) is the body's
life's to say (L{vehicle.body._life.BodyLife.ahead}).
"""

from __future__ import annotations

from pathlib import Path
from typing import Awaitable, Callable, ClassVar

from attrs import define
from twisted.internet.defer import Deferred, succeed
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure

from vehicle._timers import cancelIfActive
from vehicle.body._early import Early, Places
from vehicle.body._rpc import BodyExited, PiCommandError
from vehicle.body._sessionfile import hasConversation
from vehicle.body._spare import Spare
from vehicle.body._spares import SpareSource
from vehicle.body._spawner import BodyPaths, BodyPlan, Launcher, latestSessionFile
from vehicle.errors import VehicleError
from vehicle.session import Session


#: (session) -> the plan of its next body; raises a VehicleError when a
#: body may not start now (tampering, no box).
Planner = Callable[[Session], Awaitable[BodyPlan]]

#: What a claim made: a spare, the session's own body, or nothing.
Made = Spare | Early | None


def resumes(current: Path | None) -> bool:
    """
    Will the session's body resume the conversation pi kept in C{current}
    (not a file holding only the header a spare's hand-off wrote)?
    """
    return current is not None and hasConversation(current)


def currentFile(paths: BodyPaths) -> Path | None:
    """
    The session's file in its pi folder, if any.  (A spare's own session's
    file is never there by then: an agent's spare let go of it when it was
    switched to its session's file, a chat spare keeps its own elsewhere.)
    """
    return latestSessionFile(paths.piDir)


@define(eq=False)
class Ahead:
    """
    What one session's claims make for its next body.

    @ivar making: what is being made, or was, and is not taken yet: fires
        with the spare, the early body, or L{None} (nothing could be made).
    """

    _log: ClassVar[Logger] = Logger()

    session: Session
    launcher: Launcher
    clock: IReactorTime
    #: Is the host stopping, or the session gone?
    going: Callable[[], bool]
    #: Undoes what a body's plan set up (an early body's, ended unused).
    cleanUp: Callable[[BodyPlan], None]
    #: pi's words without any secret the host knows.
    scrub: Callable[[str], str]
    making: Deferred[Made] | None = None
    _timer: IDelayedCall | None = None
    #: What L{making} fired with, once it did (until it is taken).
    _got: Made = None

    def make(
        self,
        target: Path,
        *,
        spares: SpareSource | None,
        places: Places | None,
        planner: Planner | None,
        waitSeconds: float,
    ) -> None:
        """
        Make something for the next body of a session whose conversation is
        C{target}: a spare of C{spares} switched to it, else (with
        C{places}) the session's own body planned by C{planner} and started.
        What no command takes within C{waitSeconds} ends (it holds the
        session's conversation: it is never returned).  One thing at a
        time: while something made is not taken, this does nothing.
        """
        if self.making is not None:
            return
        self.making = Deferred.fromCoroutine(
            self._made(target, spares, places, planner)
        ).addCallback(self._fired)
        self._timer = self.clock.callLater(waitSeconds, self.letGo)

    def _fired(self, made: Made) -> Made:
        self._got = made
        return made

    def made(self) -> bool:
        """
        Is something made (or being made), not taken and not ended?
        """
        making = self.making
        if making is None:
            return False
        if not making.called:
            return True
        made = self._got
        return isinstance(made, (Spare, Early)) and not made.protocol.hasEnded

    def take(self) -> Deferred[Made] | None:
        """
        What was made (or is being made) for the next body, now the
        caller's; L{None} if nothing was.
        """
        making, self.making = self.making, None
        self._got = None
        cancelIfActive(self._timer)
        self._timer = None
        return making

    def letGo(self) -> Deferred[None]:
        """
        What was made will be no body (no command came in time, or the
        session's body is disposed of): it ends (fires then).
        """
        making = self.take()
        if making is None:
            return succeed(None)
        ended: Deferred[None] = making.addCallback(
            lambda made: self.end(made) if made is not None else None
        )
        return ended.addErrback(self._logFailure)

    def end(self, made: Spare | Early) -> Deferred[None]:
        """
        End what was made for a next body that will not be its body.
        """
        if isinstance(made, Early):
            return made.end(self.clock, self.cleanUp)
        return made.end(self.clock)

    def endQuietly(self, made: Spare | Early) -> None:
        """
        L{end}, a failure logged.
        """
        self.end(made).addErrback(self._logFailure)

    async def _made(
        self,
        target: Path,
        spares: SpareSource | None,
        places: Places | None,
        planner: Planner | None,
    ) -> Made:
        if spares is not None:
            spare = await self._switched(spares, target)
            if spare is not None:
                return spare
        if places is None:
            return None
        return await self._started(target, places, planner)

    async def _started(self, target: Path, places: Places, planner: Planner | None) -> Early | None:
        """
        The session's own body, planned and started as its command would
        start it, waiting for that command and holding a place of
        C{places}; L{None} if none is free, it may not start now (the
        command says why) or it did not start.
        """
        sessionId = self.session.sessionId
        if not places.take():
            return None  # as many wait as may: the command starts its own
        try:
            plan = BodyPlan()
            if planner is not None:
                plan = await planner(self.session)
        except Exception as e:
            places.give()
            if not isinstance(e, VehicleError):  # else the command says why
                self._log.failure("No body could be planned ahead for {sessionId}",
                                  sessionId=sessionId)
            return None
        early = Early.prepare(
            self.session, plan,
            revived=resumes(currentFile(BodyPaths.forSession(self.session.directory))),
            places=places,
        )
        if self.going():
            self.endQuietly(early)  # nothing started: its plan undone, its folder gone
            return None
        try:
            await early.start(self.launcher, self.session, target)
        except Exception as e:
            self._log.warn("A body started ahead for {sessionId} did not start ({error})",
                           sessionId=sessionId, error=self.scrub(str(e)))
            self.endQuietly(early)
            return None
        return early

    async def _switched(self, spares: SpareSource, target: Path) -> Spare | None:
        """
        A spare taken for the session and switched to C{target}, or
        L{None} (none ready, or it refused or ended: let go).
        """
        sessionId = self.session.sessionId
        try:
            spare = await spares.spareFor(self.session)
        except VehicleError:
            return None  # none for it now (a visitor's key not held): the command says why
        except Exception:
            self._log.failure("No spare could be taken ahead for {sessionId}", sessionId=sessionId)
            return None
        if spare is None:
            return None
        try:
            await spare.switchTo(target, sessionId)
        except (PiCommandError, BodyExited) as e:
            self._log.warn(
                "Spare {spareId} could not be switched ahead to {sessionId} ({error})",
                spareId=spare.spareId, sessionId=sessionId, error=str(e),
            )
            spare.end(self.clock).addErrback(self._logFailure)
            return None
        spare.revives = True
        return spare

    def _logFailure(self, result: object) -> None:
        if isinstance(result, Failure):
            self._log.failure(
                "What was made ahead for {sessionId} failed", result,
                sessionId=self.session.sessionId,
            )
        return None
