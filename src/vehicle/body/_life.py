# -*- test-case-name: tests.unit.test_conductor -*-
"""
A session's body over its life: made on demand from its plan (the first
command after dormancy revives it from pi's own file), and let go whole
after the idle time, at a shutdown, a delete or the host's stop, or when
it exits by itself.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import ClassVar

from attrs import define, field
from twisted.internet.defer import Deferred, succeed
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure

from vehicle.body._ahead import Ahead, Planner, currentFile, resumes
from vehicle.body._early import Early, Places
from vehicle.body._live import LiveBody
from vehicle.body._pump import Pump
from vehicle.body._rpc import (
    BodyExited, IBodySink, PiCommandError, setModel, stateOn, switchSession,
)
from vehicle.body._sessionfile import newSessionFile
from vehicle.body._spare import Spare
from vehicle.body._spares import SpareSource
from vehicle.body._spawner import BodyPaths, BodyPlan, Launcher
from vehicle.protocol import BodyState, JSONObject
from vehicle.session import Session


class HostClosing(Exception):
    """
    The host is stopping (or the session is gone): no body is started.
    """


@define(eq=False)
class BodyLife:
    """
    What a session's body is now, and its making and letting go.

    @ivar state: C{dormant}, C{starting}, C{live} or C{stopping}.
    @ivar body: the live pi process, if any (L{LiveBody}); its events go
        to C{sink}.
    @ivar pump: the line of delivery, whose idle timer lets a quiet body go.
    """

    _log: ClassVar[Logger] = Logger()

    session: Session
    launcher: Launcher
    clock: IReactorTime
    sink: IBodySink
    pump: Pump
    planner: Planner | None = None
    #: Where a warm spare is taken from, if spares are kept (a chat body
    #: on the host's key: the pool's; an agent: the one reserved for it).
    spares: SpareSource | None = None
    paths: BodyPaths | None = None
    state: BodyState = "dormant"
    body: LiveBody | None = None
    _stopping: Deferred[None] | None = None
    #: The host is stopping: deliver nothing more, start no body.
    closing: bool = False
    #: The plan of a body started at a claim, if not L{planner}'s (one
    #: whose proxy answers its priming: L{Early}).
    aheadPlanner: Planner | None = None
    #: The places of bodies started at claims, shared by the sessions of
    #: one kind; L{None}: the session's own body is never started at a
    #: claim (no spare can serve it: L{ahead}).
    places: Places | None = None
    #: What its claims make for the session's next body (L{ahead}).
    claim: Ahead = field(init=False)

    def __attrs_post_init__(self) -> None:
        self.claim = Ahead(
            session=self.session, launcher=self.launcher, clock=self.clock,
            going=self._going, cleanUp=self._cleanUp, scrub=self.scrub,
        )

    def live(self) -> LiveBody | None:
        """
        The body, when it is live (not starting, not stopping).
        """
        return self.body if self.state == "live" else None

    def running(self) -> bool:
        """
        Is anything under way: a run, a command waiting for the body, or
        one in pi's queue?
        """
        body = self.body
        return (
            (body is not None and body.run is not None)
            or bool(self.pump.backlog)
            or (body is not None and bool(body.queued))
        )

    def sessionPaths(self) -> BodyPaths:
        """
        Where the session's bodies keep their things (the newest body's, or
        the defaults before any).
        """
        if self.paths is None:
            self.paths = BodyPaths.forSession(self.session.directory)
        return self.paths

    # -- making ---------------------------------------------------------------

    async def ensure(self) -> LiveBody:
        """
        The live body, made now if there is none: a spare handed over when
        one is ready (L{_handOff}), else planned, spawned and asked its
        state; C{body.materialized} (and C{session.revived} when pi resumes
        the session's conversation) once it answers.

        @raise HostClosing: the host is stopping or the session is gone.
        """
        live = self.live()
        if live is not None:
            return live
        if self._stopping is not None:
            await self._stopping
        self._refuseIfClosing()
        self.pump.cancelIdle()
        self.state = "starting"
        started = None
        try:
            made = await self._taken()
        except BaseException:
            self.state = "dormant"
            raise
        if made is not None:
            try:
                self._refuseIfClosing()
            except HostClosing:
                self.state = "dormant"
                self.claim.endQuietly(made)
                raise
            started = self._adopt(made) if isinstance(made, Early) else await self._handOff(made)
        if started is None:
            started = await self._planned()
        body, revived, state = started
        self.state = "live"
        event: JSONObject = {"kind": "rpc", "pid": getattr(body.transport, "pid", None)}
        if body.plan.box:
            event["box"] = body.plan.box
        self.session.emit("body.materialized", event)
        if revived:
            self.session.emit("session.revived", {"messageCount": state.get("messageCount")})
        return body

    async def _taken(self) -> Spare | Early | None:
        """
        What the next body is made of: what was made ahead (L{ahead}), else
        a spare from the spares, else L{None} (start one).
        """
        ahead = self.claim.take()
        if ahead is not None:
            made = await ahead
            if made is not None and not made.protocol.hasEnded:
                return made
            if made is not None:
                self.claim.endQuietly(made)
        return await self.spares.spareFor(self.session) if self.spares is not None else None

    def _adopt(self, early: Early) -> tuple[LiveBody, bool, JSONObject]:
        """
        The session's body started early is its body now.
        """
        self.paths = early.body.paths
        self.body = early.body
        early.adopt(self.sink)
        return early.body, early.revived, early.state

    def ahead(self) -> None:
        """
        The session was claimed: its driver is likely to send a command
        soon.  When it is dormant with a conversation to revive, something
        is made for its next body now (L{claim}): a ready spare switched
        to the conversation's file (pi rebuilds its runtime for a switch:
        40-90 ms) while the person types, so that the command finds it on
        the file and hands it over with the session's facts alone; or,
        when no spare can serve it and a place of L{places} is free, the
        session's own body started (L{Early}: Node boots while the person
        types, and with a plan that allows it pi is primed, then switched
        to the conversation).  Nothing is told: the body is materialized by
        the command, as without it.  What no command took within the idle
        time a body has ends.
        """
        if (
            self.state != "dormant"
            or (self.spares is None and self.places is None)
            or self._going()
        ):
            return
        target = currentFile(BodyPaths.forSession(self.session.directory))
        if not resumes(target):
            return
        assert target is not None
        self.claim.make(
            target,
            spares=self.spares,
            places=self.places,
            planner=self.aheadPlanner or self.planner,
            waitSeconds=self.pump.idleSeconds,
        )

    async def _planned(self) -> tuple[LiveBody, bool, JSONObject]:
        """
        Plan the session's body and start it (no spare).
        """
        try:
            plan = BodyPlan()
            if self.planner is not None:
                plan = await self.planner(self.session)
        except BaseException:
            self.state = "dormant"
            raise
        try:
            self._refuseIfClosing()
        except HostClosing:
            self.state = "dormant"
            self._cleanUp(plan)
            raise
        return await self._spawn(plan)

    async def _spawn(self, plan: BodyPlan) -> tuple[LiveBody, bool, JSONObject]:
        """
        Start a body for the session from C{plan}: the body, whether it
        resumes the session's conversation, and its state.
        """
        body = LiveBody.prepare(self.session, plan, self.sink)
        self.paths = body.paths
        self.body = body
        try:
            revived = resumes(currentFile(body.paths))
            body.spawn(self.launcher, self.session.meta)
            state = await body.protocol.request({"type": "get_state"})
        except BaseException:
            if self.body is body and not body.protocol.hasEnded and body.transport is not None:
                body.expectingExit()
                body.protocol.terminate(self.clock, graceSeconds=1)
            self.gone()
            raise
        return body, revived, state

    async def _handOff(self, spare: Spare) -> tuple[LiveBody, bool, JSONObject] | None:
        """
        Make C{spare} the session's body.  A spare made for this session
        is on its new file already: the extension is given the session's
        facts by its command.  Any other is switched to the session's file
        (a new one holding only its header, with the session's working
        folder as its cwd, when it has none yet), its extension asking for
        the session's facts on the way.  Either way its proxy opens to the
        session's provider (L{_putOn}).  L{None} when the spare refused or
        ended: it is let go, and a body is started as if there had been no
        spare.

        An agent's spare was made for this session (its box binds its
        folders where the session's are, and they are the session's now):
        its own session's file, which it kept there, is no conversation of
        the session's, and goes once pi is off it.
        """
        paths = spare.inside or BodyPaths.forSession(self.session.directory)
        paths.prepareConversation()
        # A spare made for this session is on its new file already; one
        # switched ahead (L{ahead}), on the conversation it revives.
        target = spare.preparedFor(self.session.sessionId)
        revived = target is not None and spare.revives
        if target is None:
            existing = currentFile(paths)
            revived = resumes(existing)
            target = existing if existing is not None else newSessionFile(
                paths.piDir,
                sessionId=str(uuid.uuid4()),
                now=datetime.fromtimestamp(self.clock.seconds(), timezone.utc),
                cwd=paths.workDir,
            )
        body = LiveBody.handed(self.session, spare, paths, self.launcher.mcpUrl)
        self.paths = paths
        self.body = body
        spare.proxy.handTo(self.session)
        try:
            state = await self._putOn(body, spare, target)
        except (PiCommandError, BodyExited) as e:
            if self.body is not body or self.state != "starting":
                raise  # let go meanwhile (a delete, the host's stop)
            self._log.warn(
                "Spare {spareId} could not be handed to {sessionId} ({error}); starting a body",
                spareId=spare.spareId, sessionId=self.session.sessionId, error=str(e),
            )
            self.body = None
            body.expectingExit()
            body.protocol.terminate(self.clock, graceSeconds=1).addBoth(
                lambda _: self._cleanUp(body.plan)
            )
            return None
        # pi is off it: nothing of the spare's stays in the session's folder,
        # nor a folder made for a session it does not serve.
        spare.forgetOwnFile()
        spare.letGoOfReserved()
        spare.handedOver(self.sink)
        return body, revived, state

    async def _putOn(self, body: LiveBody, spare: Spare, target: Path) -> JSONObject:
        """
        Put the handed C{spare}'s pi on the session whose file is C{target}:
        given the session's facts when it is on that file already, else
        switched to it; then set to the session's model when it was started
        on another (a spare's boot config lists every model of the host,
        each through its proxy).  pi's state on the file.

        @raise PiCommandError: pi refused (the facts, the file, the model).
        @raise BodyExited: pi ended on the way.
        """
        if spare.prepared == target:
            await body.protocol.request(spare.handOffCommand())
            refusal = spare.handOffRefusal()
            if refusal is not None:
                raise PiCommandError("prompt", refusal)
        else:
            await switchSession(body.protocol, target, "the spare refused the session")
        state = await stateOn(body.protocol, target, "the spare is not on the session's file")
        if spare.model is not None and spare.model != self.session.meta.model:
            await setModel(body.protocol, self.session.meta.model)
        return state

    def _going(self) -> bool:
        """
        Is the host stopping, or the session gone?
        """
        return self.closing or self.session.deleted or self.session.closed

    def _refuseIfClosing(self) -> None:
        if self._going():
            raise HostClosing()

    # -- letting go -----------------------------------------------------------

    def close(self) -> Deferred[None]:
        """
        The host stops: nothing more is delivered or started, the body is
        disposed, and commands still open stay open (the next start reports
        them C{interrupted}).
        """
        self.closing = True
        return self.dispose("host_stopping")

    def dispose(self, reason: str = "shutdown") -> Deferred[None]:
        """
        Stop the body (if any) and mark the session dormant.
        """
        aheadEnded = self.claim.letGo()
        self.pump.cancelIdle()
        if self.state == "dormant":
            return aheadEnded
        if self._stopping is not None:
            return self._stopping
        body = self.body
        if body is None:
            # Still being planned: it will see the state and not start.
            self.state = "dormant"
            return succeed(None)
        self.state = "stopping"
        body.expectingExit()
        d = body.protocol.terminate(self.clock, graceSeconds=3)

        def stopped(_: object) -> None:
            self._stopping = None
            self.gone()
            if not self.session.deleted:
                self.session.emit("body.dormant", {"reason": reason})

        d.addBoth(stopped)
        self._stopping = d
        return d

    def gone(self) -> None:
        """
        The body is gone: everything that lived with it goes at once (its
        idle timer too).
        """
        self.pump.cancelIdle()
        body, self.body = self.body, None
        if body is not None:
            self._cleanUp(body.plan)
        self.state = "dormant"

    def _cleanUp(self, plan: BodyPlan) -> None:
        """
        Undo what a body's plan set up (its proxy), whatever became of it.
        """
        if plan.cleanup is not None:
            result = plan.cleanup()
            if isinstance(result, Deferred):
                result.addErrback(self.logFailure)

    # -- idleness -------------------------------------------------------------

    def armIdle(self) -> None:
        """
        Nothing is under way: the body goes after the idle time unless
        something comes first.
        """
        self.pump.cancelIdle()
        if self.state == "live" and not self.running() and not self.session.deleted:
            self.pump.armIdle(self._idleFired)

    def _idleFired(self) -> None:
        if self.state == "live" and not self.running():
            self.dispose("idle").addErrback(self.logFailure)

    # -- what the body's words must not show ----------------------------------

    def scrub(self, text: str) -> str:
        """
        C{text} (pi's words: an error, its stderr) without any secret the
        host knows: provider keys, the body's proxy token, the delegation
        token.  Events are durable and watched; secrets are neither.
        """
        secrets: set[str] = set(self.launcher.secrets())
        if self.session.delegatedToken:
            secrets.add(self.session.delegatedToken)
        if self.body is not None:
            secrets.update(self.body.secrets())
        for secret in sorted(secrets, key=len, reverse=True):
            if len(secret) >= 8:
                text = text.replace(secret, "[redacted]")
        return text

    def logFailure(self, result: object) -> None:
        if isinstance(result, Failure):
            self._log.failure(
                "The conductor of {sessionId} failed", result, sessionId=self.session.sessionId
            )
        return None
