# -*- test-case-name: tests.test_conductor -*-
"""
The conductor: maps a session's accepted commands onto its pi body, one
pi operation at a time, and turns what pi says into the session's events
and the commands' statuses.

Commands are delivered strictly in order through one pump (L{Pump}), so
pi never sees a prompt while another is still starting (it would drop it).
The body is materialized on demand as one L{LiveBody}, dropped whole when
it is gone (after the idle time, a shutdown, an exit), and revived from
pi's own file by the next command.
"""

from __future__ import annotations

from typing import Any, Callable, ClassVar

from attrs import define, field
from twisted.internet.defer import Deferred, succeed
from twisted.internet.interfaces import IProcessTransport, IReactorTime
from twisted.logger import Logger
from zope.interface import implementer

from vehicle.body._spawner import BodyPaths, BodyPlan, Launcher, latestSessionFile
from vehicle.body._live import LiveBody
from vehicle.body._pump import Pump
from vehicle.body._rpc import BodyExited, IBodySink, PiCommandError, PiProtocol
from vehicle.body._sessionfile import readSession
from vehicle.errors import VehicleError
from vehicle.session import Command, IConductor, Session


TEXT = ("prompt", "follow_up", "steer")

#: The note pi-sophia adds for what the person had open (ids only).
CONTEXT_NOTE_PREFIX = "\n\n[open in Garden: "


def renderText(command: Command) -> str:
    """
    The text the model sees for a command: the person's words, then one
    note of the ids they had open, or a collaborator's attribution.
    """
    text = command.text or ""
    author = command.chimeAuthor
    if author:
        text = f"[{author} collaborator]\n{text}"
    refs = command.contextRefs
    if refs:
        text += CONTEXT_NOTE_PREFIX + ", ".join(refs) + "]"
    return text


def stripContextNote(text: str) -> str:
    """
    The person's words without the note of what they had open.
    """
    at = text.rfind(CONTEXT_NOTE_PREFIX)
    if at >= 0 and text.endswith("]"):
        return text[:at]
    return text


class HostClosing(Exception):
    """
    The host is stopping (or the session is gone): no body is started.
    """


@implementer(IConductor, IBodySink)
@define(eq=False)
class Conductor:
    """
    Drives one session's body: commands go out one at a time (the verbs),
    pi's events come back (L{IBodySink}), and the body is made and let go.

    Why one class of this size: the way out and the way back meet on the
    same facts (a command sent to pi's queue is delivered when pi's user
    message comes back; an abort clears what a settling run would restart;
    an exit fails what was being delivered), and they interleave on the
    reactor between each await.  The facts themselves are held by their
    owners: the process and its run by L{LiveBody}, the backlog and the
    idle timer by L{Pump}, a command's status by the session.

    @ivar state: C{dormant}, C{starting}, C{live} or C{stopping}.
    @ivar body: the live pi process, if any (L{LiveBody}).
    """

    _log: ClassVar[Logger] = Logger()

    session: Session
    launcher: Launcher
    clock: IReactorTime
    idleSeconds: float = 600.0
    #: (session) -> Deferred/coroutine of a L{BodyPlan}; raises a
    #: VehicleError when a body may not start now (tampering, no box).
    planner: Callable[[Session], Any] | None = None
    #: Called after each settled run (the mirror hooks in here).
    onSettled: list[Callable[[Session, dict[str, Any]], Any]] = field(factory=list)
    paths: BodyPaths | None = None
    state: str = "dormant"
    body: LiveBody | None = None
    pump: Pump = field(init=False)
    _stopping: Deferred | None = None
    #: The host is stopping: deliver nothing more, start no body.
    closing: bool = False

    @pump.default
    def _newPump(self) -> Pump:
        return Pump(clock=self.clock, idleSeconds=self.idleSeconds)

    # -- what the body is now ------------------------------------------------

    @property
    def protocol(self) -> PiProtocol | None:
        return self.body.protocol if self.body is not None else None

    @property
    def transport(self) -> IProcessTransport | None:
        return self.body.transport if self.body is not None else None

    def _live(self) -> LiveBody | None:
        """
        The body, when it is live (not starting, not stopping).
        """
        return self.body if self.state == "live" else None

    # -- IConductor ---------------------------------------------------------

    def running(self) -> bool:
        return (
            (self.body is not None and self.body.run is not None)
            or bool(self.pump.backlog)
            or (self.body is not None and bool(self.body.queued))
        )

    def bodyState(self) -> str:
        return self.state

    def commandAccepted(self, command: Command) -> None:
        kind = command.type
        # Only what waits behind the command being delivered (pi's already)
        # can be taken back without asking pi.
        if kind == "cancel":
            target = [c for c in self.pump.waiting() if c.commandId == command.targetCommandId]
            if target:
                # Never sent to pi: taking it out is bookkeeping.
                self._cancelled(target, "cancelled")
                self.session.setStatus(command.commandId, "completed")
                return
        if kind in ("abort", "shutdown"):
            # Everything not yet handed to pi is cancelled, not delivered.
            self._cancelled([c for c in self.pump.waiting() if c.hasText], kind)
            self.pump.add(command, first=True)
        else:
            self.pump.add(command)
        self.pump.run(self._drain)

    def snapshot(self) -> Deferred:
        return Deferred.fromCoroutine(self._snapshot())

    async def _snapshot(self) -> dict[str, Any]:
        extras: dict[str, Any] = {
            "queue": {"steering": [], "followUp": []},
            "transcript": self.transcript(),
            "tools": None,
            "stats": None,
        }
        body = self.body
        if body is not None:
            extras["queue"] = body.snapshotQueue()
        if self._live() is not None and body is not None:
            extras["tools"] = list(body.translator.tools)
            try:
                extras["stats"] = await body.protocol.request({"type": "get_session_stats"})
            except (PiCommandError, BodyExited):
                pass
        return extras

    def transcript(self) -> list[dict[str, Any]]:
        piDir = self._paths().piDir
        current = latestSessionFile(piDir) if piDir.exists() else None
        if current is None:
            return []
        return readSession(current).transcript()

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

        def gone(_: Any) -> None:
            self._stopping = None
            self._becomeDormant()
            if not self.session.deleted:
                self.session.emit("body.dormant", {"reason": reason})

        d.addBoth(gone)
        self._stopping = d
        return d

    # -- the pump -----------------------------------------------------------

    def _logFailure(self, result: Any) -> Any:
        if hasattr(result, "getTraceback"):
            self._log.failure("The conductor of {sessionId} failed", result, sessionId=self.session.sessionId)
        return None

    async def _drain(self) -> None:
        pump = self.pump
        while pump.backlog and not self.session.deleted and not self.closing:
            command = pump.backlog[0]
            pump.delivering = command
            try:
                await self._perform(command)
            except HostClosing:
                pass  # left open: the next start reports it interrupted
            except VehicleError as e:
                self._fail(command, e.message, code=e.code)
            except BodyExited:
                if not self.closing:
                    self._fail(command, "the body exited before the command was delivered")
            except PiCommandError as e:
                self._fail(command, str(e.error) if hasattr(e, "error") else str(e))
            except Exception:
                self._log.failure(
                    "Delivering {commandId} in {sessionId} failed",
                    commandId=command.commandId,
                    sessionId=self.session.sessionId,
                )
                self._fail(command, "the host failed to deliver the command", code="internal")
            finally:
                pump.delivering = None
                pump.take([command])
        self._armIdle()

    def _fail(self, command: Command, message: str, code: str | None = None) -> None:
        self.session.setStatus(command.commandId, "failed", error=self.scrub(message), code=code)

    def _cancelled(self, commands: list[Command], reason: str) -> None:
        """
        Cancel, in one place: C{commands} are taken out of the backlog and
        out of pi's queue as the host knows it, and the session is asked to
        mark them cancelled.  (pi's own queue is cleared by the caller.)
        """
        self.pump.take(commands)
        body = self.body
        for command in commands:
            if body is not None:
                if command in body.queued:
                    body.queued.remove(command)
                body.rendered.pop(command.commandId, None)
            self.session.setStatus(command.commandId, "cancelled", reason=reason)

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

    # -- making a body --------------------------------------------------------

    async def _ensureBody(self) -> LiveBody:
        live = self._live()
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
        body = LiveBody.prepare(self.session, plan, self)
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
            self._becomeDormant()
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

    def _paths(self) -> BodyPaths:
        if self.paths is None:
            self.paths = BodyPaths.forSession(self.session.directory)
        return self.paths

    # -- the verbs ------------------------------------------------------------

    async def _perform(self, command: Command) -> None:
        kind = command.type
        if kind in TEXT or kind == "accept_chime":
            await self._deliverText(command)
        elif kind == "abort":
            await self._abort(command)
        elif kind == "cancel":
            await self._cancel(command)
        elif kind == "shutdown":
            await self._shutdown(command)
        else:
            self._fail(command, f"{kind} is not supported by this body")

    async def _deliverText(self, command: Command) -> None:
        body = await self._ensureBody()
        message = renderText(command)
        body.rendered[command.commandId] = message
        if body.run is None:
            # A new run: the door's meter starts again (pi may compact the
            # context before the run's first request, and that counts too).
            body.startRun(command)
            try:
                data = await body.protocol.request({"type": "prompt", "message": message})
            except BaseException:
                body.run = None
                raise
            disposition = (data or {}).get("disposition", "started")
            self.session.setStatus(command.commandId, "delivered", disposition=disposition)
            if disposition != "started":
                # An extension handled it: no run comes of it.
                body.run = None
                self.session.setStatus(command.commandId, "completed")
            return
        verb = command.delivery or command.type
        request: dict[str, Any] = {"type": verb, "message": message}
        if verb == "prompt":
            request["streamingBehavior"] = "followUp"
        body.queued.append(command)
        try:
            data = await body.protocol.request(request)
        except BaseException:
            if command in body.queued:
                body.queued.remove(command)
            raise
        disposition = (data or {}).get("disposition", "queued")
        if command in body.queued:
            self.session.setStatus(command.commandId, "queued", disposition=disposition)

    async def _clearQueue(self, body: LiveBody, reason: str) -> list[Command]:
        await body.protocol.request({"type": "clear_queue"})
        cleared = list(body.queued)
        self._cancelled(cleared, reason)
        return cleared

    async def _abort(self, command: Command) -> None:
        body = self._live()
        if body is not None:
            if body.queued or body.translator.queue.get("steering") or body.translator.queue.get(
                "followUp"
            ):
                await self._clearQueue(body, "aborted")
            if body.run is not None:
                body.abortRequested = True
                slow = self.clock.callLater(5, self._abortSlow)
                try:
                    await body.protocol.request({"type": "abort"})
                finally:
                    if slow.active():
                        slow.cancel()
        self.session.setStatus(command.commandId, "completed")

    def _abortSlow(self) -> None:
        self.session.emit("abort.slow", {"afterMs": 5000})

    async def _cancel(self, command: Command) -> None:
        target = command.targetCommandId
        body = self._live()
        targets = [c for c in body.queued if c.commandId == target] if body else []
        if body is None or not targets:
            self._fail(command, f"command {target!r} is no longer in the queue", code="not_cancellable")
            return
        keep = [c for c in body.queued if c.commandId != target]
        await body.protocol.request({"type": "clear_queue"})
        self._cancelled(targets, "cancelled")
        # pi has no dequeue: what stays goes back in its original order.
        body.queued = []
        for other in keep:
            kind = other.delivery or other.type
            verb = "steer" if kind == "steer" else "follow_up"
            body.queued.append(other)
            await body.protocol.request({"type": verb, "message": body.rendered[other.commandId]})
        self.session.setStatus(command.commandId, "completed")

    async def _shutdown(self, command: Command) -> None:
        body = self._live()
        if body is not None:
            if body.queued:
                await self._clearQueue(body, "shutdown")
            if body.run is not None:
                body.abortRequested = True
                await body.protocol.request({"type": "abort"})
        await self.dispose("shutdown")
        by = dict(command.by)
        self.session.releaseLeaseOf(by, "shutdown")
        self.session.emit("session.shutdown", {"by": by})
        self.session.setStatus(command.commandId, "completed")

    # -- the door's meter ---------------------------------------------------

    def meterModelRequest(self) -> str | None:
        """
        May the body's door forward one more model request?  Only during a
        run, and no more than the run's turn budget: pi's own guard stops
        it before that, so only a tool calling the door itself is refused.
        """
        if self.body is None:
            return "no run is under way"
        return self.body.meter(self.session.meta.maxTurns)

    # -- IBodySink ----------------------------------------------------------

    def piEvent(self, event: dict[str, Any]) -> None:
        body = self.body
        if body is None:
            return
        kind = event.get("type")
        if kind == "agent_start":
            if body.run is None:
                body.startRun()
            elif not body.translator.runOpen:
                body.run.modelRequests = 0
            self.pump.cancelIdle()
        elif kind == "message_end":
            self._userMessage(body, event.get("message") or {})
        settled: dict[str, Any] = {}
        for hostEvent in body.translator.feed(event):
            if hostEvent.type == "ui.request":
                self._answerUI(hostEvent.data)
            elif hostEvent.durable:
                emitted = self.session.emit(hostEvent.type, hostEvent.data)
                if hostEvent.type == "budget.exceeded":
                    self._budgetStop()
                if hostEvent.type == "run.settled":
                    settled = {**hostEvent.data, "seq": emitted.get("seq")}
            else:
                self.session.broadcast(hostEvent.type, hostEvent.data)
        if kind == "agent_settled":
            self._settled(bool(event.get("aborted")), settled)

    def _userMessage(self, body: LiveBody, message: dict[str, Any]) -> None:
        if message.get("role") != "user":
            return
        parts = message.get("content")
        if isinstance(parts, str):
            text = parts
        else:
            text = "".join(
                p.get("text", "") for p in parts or [] if isinstance(p, dict) and p.get("type") == "text"
            )
        command = body.delivered(text)
        if command is not None:
            self.session.setStatus(command.commandId, "delivered")

    def _budgetStop(self) -> None:
        body = self.body
        if body is not None and body.queued:
            Deferred.fromCoroutine(self._clearQueue(body, "budget_exceeded")).addErrback(
                self._logFailure
            )

    def _settled(self, aborted: bool, info: dict[str, Any] | None = None) -> None:
        body = self.body
        if body is None:
            return
        finished = body.endRun()
        status = "aborted" if aborted else "completed"
        for command in finished:
            self.session.setStatus(command.commandId, status)
        body.abortRequested = False
        leftovers = list(body.queued)
        if leftovers and not aborted:
            # Still in pi's queue with no run to take them: start one.
            self.session.emit(
                "queue.stranded", {"commandIds": [c.commandId for c in leftovers]}
            )
            body.queued = []
            Deferred.fromCoroutine(self._restart(body, leftovers)).addErrback(self._logFailure)
        elif leftovers and aborted:
            Deferred.fromCoroutine(self._clearQueue(body, "aborted")).addErrback(
                self._logFailure
            )
        self._runSettleHooks({**(info or {}), "aborted": aborted})
        self._armIdle()

    def _runSettleHooks(self, info: dict[str, Any]) -> None:
        for hook in self.onSettled:
            try:
                hook(self.session, info)
            except Exception:
                self._log.failure("A settle hook failed")
        self.session.settled(info)

    async def _restart(self, body: LiveBody, leftovers: list[Command]) -> None:
        await body.protocol.request({"type": "clear_queue"})
        for command in leftovers:
            if body.abortRequested or self.closing or any(
                c.type in ("abort", "shutdown") for c in self.pump.backlog
            ):
                # An abort came while pi's queue was being cleared: these
                # are taken out, not delivered after it.
                self._cancelled([command], "aborted")
                continue
            self.session.requeue(command.commandId)
            self.pump.add(command)
        self.pump.run(self._drain)

    def _answerUI(self, request: dict[str, Any]) -> None:
        if self.body is None:
            return
        answer: dict[str, Any] = {"type": "extension_ui_response", "id": request.get("id")}
        if request.get("method") == "input" and request.get("title") == "sophia.delegated-token":
            token = self.session.delegatedToken
            if token:
                answer["value"] = token
            else:
                answer["cancelled"] = True
        elif request.get("method") == "confirm":
            answer["confirmed"] = False
        else:
            answer["cancelled"] = True
        self.body.protocol.send(answer)

    def bodyExited(self, exitCode: int | None, signal: int | None, stderrTail: str) -> None:
        body = self.body
        expected = body is None or body.expectExit
        wasRunning = body is not None and body.run is not None
        runId = body.translator.currentRunId if body is not None else None
        cost = body.translator.runCostUsd if body is not None else None
        tail = self.scrub(stderrTail)[-4096:]  # while the body's own token is known
        self._becomeDormant()
        if expected or self.session.deleted or self.closing:
            return
        self.session.emit(
            "body.exited",
            {"exitCode": exitCode, "signal": signal, "stderrTail": tail},
        )
        if wasRunning:
            settled = self.session.emit(
                "run.settled",
                {"runId": runId, "aborted": True, "stopReason": "body_exited",
                 "costUsd": cost},
            )
            # A run that ended with its body is still a settled run: its
            # cost is debited and the mirror catches up.
            self._runSettleHooks({"aborted": True, "seq": settled.get("seq"), "costUsd": cost})
        waiting = {c.commandId for c in self.pump.backlog[1:]}
        for record in self.session.openCommands():
            if record["commandId"] in waiting:
                continue
            self.session.setStatus(
                record["commandId"], "failed", error="the body exited", code="body_exited"
            )

    def _cleanUp(self, plan: BodyPlan) -> None:
        """
        Undo what a body's plan set up (its door), whatever became of it.
        """
        if plan.cleanup is not None:
            result = plan.cleanup()
            if isinstance(result, Deferred):
                result.addErrback(self._logFailure)

    def _becomeDormant(self) -> None:
        """
        The body is gone: everything that lived with it goes at once.
        """
        body, self.body = self.body, None
        if body is not None:
            self._cleanUp(body.plan)
        self.state = "dormant"

    # -- idleness -----------------------------------------------------------

    def _armIdle(self) -> None:
        self.pump.cancelIdle()
        if self.state == "live" and not self.running() and not self.session.deleted:
            self.pump.armIdle(self._idleFired)

    def _idleFired(self) -> None:
        if self.state == "live" and not self.running():
            self.dispose("idle").addErrback(self._logFailure)
