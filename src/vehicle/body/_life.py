# -*- test-case-name: tests.unit.test_conductor -*-
"""
A session's body over its life: made on demand from its plan (the first
command after dormancy revives it from pi's own file), and let go whole
after the idle time, at a shutdown, a delete or the host's stop, or when
it exits by itself.
"""

from __future__ import annotations

from typing import Any, Awaitable, Callable, ClassVar

from attrs import define
from twisted.internet.defer import Deferred, succeed
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure

from vehicle.body._live import LiveBody
from vehicle.body._pump import Pump
from vehicle.body._rpc import IBodySink
from vehicle.body._spawner import BodyPaths, BodyPlan, Launcher, latestSessionFile
from vehicle.session import Session


#: (session) -> the plan of its next body; raises a VehicleError when a
#: body may not start now (tampering, no box).
Planner = Callable[[Session], Awaitable[BodyPlan]]


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
    paths: BodyPaths | None = None
    state: str = "dormant"
    body: LiveBody | None = None
    _stopping: Deferred | None = None
    #: The host is stopping: deliver nothing more, start no body.
    closing: bool = False

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
        The live body, made now if there is none: planned, spawned, asked
        its state; C{body.materialized} (and C{session.revived} when pi
        resumes its own file) once it answers.

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
        body = LiveBody.prepare(self.session, plan, self.sink)
        self.paths = body.paths
        revived = latestSessionFile(body.paths.piDir) is not None
        self.body = body
        try:
            body.spawn(self.launcher, self.session.meta)
            state = await body.protocol.request({"type": "get_state"})
        except BaseException:
            if self.body is body and not body.protocol.hasEnded and body.transport is not None:
                body.expectExit = True
                body.protocol.terminate(self.clock, graceSeconds=1)
            self.gone()
            raise
        self.state = "live"
        event: dict[str, Any] = {"kind": "rpc", "pid": getattr(body.transport, "pid", None)}
        if plan.box:
            event["box"] = plan.box
        self.session.emit("body.materialized", event)
        if revived:
            self.session.emit("session.revived", {"messageCount": state.get("messageCount")})
        return body

    def _refuseIfClosing(self) -> None:
        if self.closing or self.session.deleted or self.session.closed:
            raise HostClosing()

    # -- letting go -----------------------------------------------------------

    def close(self) -> Deferred:
        """
        The host stops: nothing more is delivered or started, the body is
        disposed, and commands still open stay open (the next start reports
        them C{interrupted}).
        """
        self.closing = True
        return self.dispose("host_stopping")

    def dispose(self, reason: str = "shutdown") -> Deferred:
        """
        Stop the body (if any) and mark the session dormant.
        """
        self.pump.cancelIdle()
        if self.state == "dormant":
            return succeed(None)
        if self._stopping is not None:
            return self._stopping
        body = self.body
        if body is None:
            # Still being planned: it will see the state and not start.
            self.state = "dormant"
            return succeed(None)
        self.state = "stopping"
        body.expectExit = True
        d = body.protocol.terminate(self.clock, graceSeconds=3)

        def stopped(_: Any) -> None:
            self._stopping = None
            self.gone()
            if not self.session.deleted:
                self.session.emit("body.dormant", {"reason": reason})

        d.addBoth(stopped)
        self._stopping = d
        return d

    def gone(self) -> None:
        """
        The body is gone: everything that lived with it goes at once.
        """
        body, self.body = self.body, None
        if body is not None:
            self._cleanUp(body.plan)
        self.state = "dormant"

    def _cleanUp(self, plan: BodyPlan) -> None:
        """
        Undo what a body's plan set up (its door), whatever became of it.
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
        host knows: provider keys, the body's door token, the delegation
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

    def logFailure(self, result: Any) -> Any:
        if isinstance(result, Failure):
            self._log.failure(
                "The conductor of {sessionId} failed", result, sessionId=self.session.sessionId
            )
        return None
