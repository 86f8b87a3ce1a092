# -*- test-case-name: tests.test_conductor -*-
"""
The conductor: maps a session's accepted commands onto its pi body, one
pi operation at a time, and turns what pi says into the session's events
and the commands' statuses.

Commands are delivered strictly in order through one pump, so pi never
sees a prompt while another is still starting (it would drop it).  The
body is materialized on demand, disposed after the idle time, and revived
from pi's own file by the next command.
"""

from __future__ import annotations

from typing import Any, Callable, ClassVar

from attrs import define, field
from twisted.internet.defer import Deferred, succeed
from twisted.internet.interfaces import IDelayedCall, IProcessTransport, IReactorTime
from twisted.logger import Logger
from zope.interface import implementer

from vehicle.body._launcher import BodyPaths, BodyPlan, Launcher, latestSessionFile
from vehicle.body._rpc import BodyExited, IBodySink, PiCommandError, PiProtocol
from vehicle.body._sessionfile import readSession
from vehicle.body._translate import Translator
from vehicle.errors import VehicleError
from vehicle.session import Command, IConductor, Session


TEXT = ("prompt", "follow_up", "steer")

#: gardend's reader tools (their scopes end in C{.read}): all a session
#: started by a viewer may call.
READER_TOOLS = ("read_document", "list_documents", "get_workspace", "search_documents")

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
    Drives one session's body.

    @ivar state: C{dormant}, C{starting}, C{live} or C{stopping}.
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
    protocol: PiProtocol | None = None
    transport: IProcessTransport | None = None
    translator: Translator = field(factory=Translator)
    runActive: bool = False
    _backlog: list[Command] = field(factory=list)
    _queued: list[Command] = field(factory=list)
    _runCommands: list[Command] = field(factory=list)
    _pumping: bool = False
    _idle: IDelayedCall | None = None
    _stopping: Deferred | None = None
    _expectExit: bool = False
    _abortRequested: bool = False
    _plan: BodyPlan | None = None
    _delivering: Command | None = None
    #: The host is stopping: deliver nothing more, start no body.
    closing: bool = False
    _modelRequests: int = 0
    #: The text pi was sent for each command (the model's, never the
    #: session's record): how pi's user messages are matched to commands.
    _rendered: dict[str, str] = field(factory=dict)

    # -- IConductor ---------------------------------------------------------

    def running(self) -> bool:
        return self.runActive or bool(self._backlog) or bool(self._queued)

    def bodyState(self) -> str:
        return self.state

    def commandAccepted(self, command: Command) -> None:
        kind = command.type
        # The command the pump is delivering now is pi's already: only what
        # waits behind it can be taken back without asking pi.
        waitingStart = 1 if self._delivering is not None else 0
        if kind == "cancel":
            target = command.targetCommandId
            for waiting in self._backlog[waitingStart:]:
                if waiting.commandId == target:
                    # Never sent to pi: taking it out is bookkeeping.
                    self._backlog.remove(waiting)
                    self.session.setStatus(target, "cancelled", reason="cancelled")
                    self.session.setStatus(command.commandId, "completed")
                    return
        if kind in ("abort", "shutdown"):
            # Everything not yet handed to pi is cancelled, not delivered.
            for waiting in [c for c in self._backlog[waitingStart:] if c.hasText]:
                self._backlog.remove(waiting)
                self.session.setStatus(waiting.commandId, "cancelled", reason=kind)
            self._backlog.insert(waitingStart, command)
        else:
            self._backlog.append(command)
        self._pump()

    def snapshot(self) -> Deferred:
        return Deferred.fromCoroutine(self._snapshot())

    async def _snapshot(self) -> dict[str, Any]:
        extras: dict[str, Any] = {
            "queue": {
                "steering": list(self.translator.queue.get("steering", [])),
                "followUp": list(self.translator.queue.get("followUp", [])),
            },
            "transcript": self.transcript(),
            "tools": None,
            "stats": None,
        }
        if self.state == "live" and self.protocol is not None:
            extras["tools"] = list(self.translator.tools)
            try:
                extras["stats"] = await self.protocol.request({"type": "get_session_stats"})
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
        self._cancelIdle()
        if self.state == "dormant":
            return succeed(None)
        if self._stopping is not None:
            return self._stopping
        protocol = self.protocol
        if protocol is None:
            # Still being planned: it will see the state and not start.
            self.state = "dormant"
            return succeed(None)
        self.state = "stopping"
        self._expectExit = True
        d = protocol.terminate(self.clock, graceSeconds=3)

        def gone(_: Any) -> None:
            self._stopping = None
            self._becomeDormant()
            if not self.session.deleted:
                self.session.emit("body.dormant", {"reason": reason})

        d.addBoth(gone)
        self._stopping = d
        return d

    # -- the pump -----------------------------------------------------------

    def _pump(self) -> None:
        if self._pumping:
            return
        self._pumping = True
        d = Deferred.fromCoroutine(self._drain())

        def done(result: Any) -> None:
            self._pumping = False
            return None

        d.addBoth(self._logFailure).addBoth(done)

    def _logFailure(self, result: Any) -> Any:
        if hasattr(result, "getTraceback"):
            self._log.failure("The conductor of {sessionId} failed", result, sessionId=self.session.sessionId)
        return None

    async def _drain(self) -> None:
        while self._backlog and not self.session.deleted and not self.closing:
            command = self._backlog[0]
            self._delivering = command
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
                self._delivering = None
                if command in self._backlog:
                    self._backlog.remove(command)
        self._armIdle()

    def _fail(self, command: Command, message: str, code: str | None = None) -> None:
        self.session.setStatus(command.commandId, "failed", error=self.scrub(message), code=code)

    def scrub(self, text: str) -> str:
        """
        C{text} (pi's words: an error, its stderr) without any secret the
        host knows: provider keys, the body's door token, the delegation
        token.  Events are durable and watched; secrets are neither.
        """
        secrets: set[str] = set()
        secrets.update(self.launcher.secrets())
        if self.session.delegatedToken:
            secrets.add(self.session.delegatedToken)
        plan = self._plan
        if plan is not None and plan.providers:
            secrets.update(
                str(p.get("apiKey")) for p in plan.providers.values() if p.get("apiKey")
            )
        for secret in sorted(secrets, key=len, reverse=True):
            if len(secret) >= 8:
                text = text.replace(secret, "[redacted]")
        return text

    async def _ensureBody(self) -> PiProtocol:
        if self.state == "live" and self.protocol is not None:
            return self.protocol
        if self._stopping is not None:
            await self._stopping
        self._refuseIfClosing()
        self._cancelIdle()
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
        self._plan = plan
        paths = BodyPaths.forSession(self.session.directory, plan.workDir)
        self.paths = paths
        revived = latestSessionFile(paths.piDir) is not None
        self.translator = Translator(runCount=self.session.runsSoFar())
        protocol = PiProtocol(self)
        self.protocol = protocol
        self._expectExit = False
        meta = self.session.meta
        try:
            self.transport = self.launcher.spawn(
                protocol,
                paths=paths,
                model=meta.model,
                profile=meta.profile,
                budget={"maxTurns": meta.maxTurns, "maxCostUsd": meta.maxCostUsd},
                providers=plan.providers,
                wrap=plan.wrap,
                bootExtra=self._bootExtra(plan),
                mcpUrl=plan.mcpUrl or self.launcher.mcpUrl,
                **({"extraFDs": plan.extraFDs} if plan.extraFDs else {}),
            )
            state = await protocol.request({"type": "get_state"})
        except BaseException:
            if self.protocol is protocol and not protocol.hasEnded and self.transport is not None:
                self._expectExit = True
                protocol.terminate(self.clock, graceSeconds=1)
            self._becomeDormant()
            raise
        self.state = "live"
        self.translator.setTools(self.tools())
        event: dict[str, Any] = {"kind": "rpc", "pid": getattr(self.transport, "pid", None)}
        if plan.box:
            event["box"] = plan.box
        self.session.emit("body.materialized", event)
        if revived:
            self.session.emit("session.revived", {"messageCount": state.get("messageCount")})
        return protocol

    def _bootExtra(self, plan: BodyPlan) -> dict[str, Any] | None:
        extra = dict(plan.bootExtra or {})
        if self.session.meta.access == "read" and (plan.mcpUrl or self.launcher.mcpUrl):
            # The role at creation fixes the tools for the session's life.
            extra["mcpReaders"] = list(READER_TOOLS)
        if self.session.meta.graphs:
            # A public conversation reads every public graph, and no other.
            extra["graphs"] = {"own": self.session.meta.graphId,
                               "public": list(self.session.meta.graphs)}
        return extra or None

    def _refuseIfClosing(self) -> None:
        if self.closing or self.session.deleted or self.session.closed:
            raise HostClosing()

    def tools(self) -> list[str]:
        if self.session.meta.profile == "agent":
            return ["read", "write", "edit", "bash"]
        return []

    def _paths(self) -> BodyPaths:
        if self.paths is None:
            self.paths = BodyPaths.forSession(self.session.directory)
        return self.paths

    async def _perform(self, command: Command) -> None:
        kind = command.type
        if kind in TEXT:
            await self._deliverText(command)
        elif kind == "abort":
            await self._abort(command)
        elif kind == "cancel":
            await self._cancel(command)
        elif kind == "shutdown":
            await self._shutdown(command)
        elif kind == "accept_chime":
            await self._deliverText(command)
        else:
            self._fail(command, f"{kind} is not supported by this body")

    async def _deliverText(self, command: Command) -> None:
        protocol = await self._ensureBody()
        message = renderText(command)
        self._rendered[command.commandId] = message
        if not self.runActive:
            self.runActive = True
            # A new run: the door's meter starts again (pi may compact the
            # context before the run's first request, and that counts too).
            self._modelRequests = 0
            self._runCommands = [command]
            try:
                data = await protocol.request({"type": "prompt", "message": message})
            except BaseException:
                self.runActive = False
                self._runCommands = []
                raise
            disposition = (data or {}).get("disposition", "started")
            if disposition == "started":
                self.session.setStatus(command.commandId, "delivered", disposition=disposition)
            else:
                # An extension handled it: no run comes of it.
                self.runActive = False
                self._runCommands = []
                self.session.setStatus(command.commandId, "delivered", disposition=disposition)
                self.session.setStatus(command.commandId, "completed")
            return
        verb = command.delivery or command.type
        request: dict[str, Any] = {"type": verb, "message": message}
        if verb == "prompt":
            request["streamingBehavior"] = "followUp"
        self._queued.append(command)
        try:
            data = await protocol.request(request)
        except BaseException:
            if command in self._queued:
                self._queued.remove(command)
            raise
        disposition = (data or {}).get("disposition", "queued")
        if command in self._queued:
            self.session.setStatus(command.commandId, "queued", disposition=disposition)

    async def _clearQueue(self, protocol: PiProtocol, reason: str) -> list[Command]:
        await protocol.request({"type": "clear_queue"})
        cleared, self._queued = self._queued, []
        for command in cleared:
            self.session.setStatus(command.commandId, "cancelled", reason=reason)
        return cleared

    async def _abort(self, command: Command) -> None:
        if self.state == "live" and self.protocol is not None:
            protocol = self.protocol
            if self._queued or self.translator.queue.get("steering") or self.translator.queue.get(
                "followUp"
            ):
                await self._clearQueue(protocol, "aborted")
            if self.runActive:
                self._abortRequested = True
                slow = self.clock.callLater(5, self._abortSlow)
                try:
                    await protocol.request({"type": "abort"})
                finally:
                    if slow.active():
                        slow.cancel()
        self.session.setStatus(command.commandId, "completed")

    def _abortSlow(self) -> None:
        self.session.emit("abort.slow", {"afterMs": 5000})

    async def _cancel(self, command: Command) -> None:
        target = command.targetCommandId
        waiting = [c for c in self._queued if c.commandId == target]
        if not waiting or self.protocol is None or self.state != "live":
            self._fail(command, f"command {target!r} is no longer in the queue", code="not_cancellable")
            return
        protocol = self.protocol
        keep = [c for c in self._queued if c.commandId != target]
        await protocol.request({"type": "clear_queue"})
        self._queued = []
        self.session.setStatus(target, "cancelled", reason="cancelled")
        # pi has no dequeue: what stays goes back in its original order.
        for other in keep:
            kind = other.delivery or other.type
            verb = "steer" if kind == "steer" else "follow_up"
            self._queued.append(other)
            await protocol.request({"type": verb, "message": self._rendered[other.commandId]})
        self.session.setStatus(command.commandId, "completed")

    async def _shutdown(self, command: Command) -> None:
        if self.state == "live" and self.protocol is not None:
            if self._queued:
                await self._clearQueue(self.protocol, "shutdown")
            if self.runActive:
                self._abortRequested = True
                await self.protocol.request({"type": "abort"})
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
        if not self.runActive:
            return "no run is under way"
        if self._modelRequests >= self.session.meta.maxTurns:
            return "this run's turn budget is spent"
        self._modelRequests += 1
        return None

    # -- IBodySink ----------------------------------------------------------

    def piEvent(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        if kind == "agent_start":
            if not self.translator.runOpen:
                self._modelRequests = 0
            self.runActive = True
            self._cancelIdle()
        elif kind == "message_end":
            self._userMessage(event.get("message") or {})
        settled: dict[str, Any] = {}
        for hostEvent in self.translator.feed(event):
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

    def _userMessage(self, message: dict[str, Any]) -> None:
        if message.get("role") != "user":
            return
        parts = message.get("content")
        if isinstance(parts, str):
            text = parts
        else:
            text = "".join(
                p.get("text", "") for p in parts or [] if isinstance(p, dict) and p.get("type") == "text"
            )
        for command in self._queued:
            if self._rendered.get(command.commandId) == text:
                self._queued.remove(command)
                self._runCommands.append(command)
                self.session.setStatus(command.commandId, "delivered")
                return

    def _budgetStop(self) -> None:
        if self.protocol is not None and self._queued:
            d = self._clearQueue(self.protocol, "budget_exceeded")
            Deferred.fromCoroutine(d).addErrback(self._logFailure)

    def _settled(self, aborted: bool, info: dict[str, Any] | None = None) -> None:
        self.runActive = False
        finished, self._runCommands = self._runCommands, []
        for command in finished:
            self._rendered.pop(command.commandId, None)
        status = "aborted" if aborted else "completed"
        for command in finished:
            self.session.setStatus(command.commandId, status)
        self._abortRequested = False
        leftovers = list(self._queued)
        if leftovers and not aborted and self.protocol is not None:
            # Still in pi's queue with no run to take them: start one.
            self.session.emit(
                "queue.stranded", {"commandIds": [c.commandId for c in leftovers]}
            )
            self._queued = []
            Deferred.fromCoroutine(self._restart(leftovers)).addErrback(self._logFailure)
        elif leftovers and aborted and self.protocol is not None:
            Deferred.fromCoroutine(self._clearQueue(self.protocol, "aborted")).addErrback(
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

    async def _restart(self, leftovers: list[Command]) -> None:
        assert self.protocol is not None
        await self.protocol.request({"type": "clear_queue"})
        for command in leftovers:
            if self._abortRequested or self.closing or any(
                c.type in ("abort", "shutdown") for c in self._backlog
            ):
                # An abort came while pi's queue was being cleared: these
                # are taken out, not delivered after it.
                self.session.setStatus(command.commandId, "cancelled", reason="aborted")
                continue
            self.session.requeue(command.commandId)
            self._backlog.append(command)
        self._pump()

    def _answerUI(self, request: dict[str, Any]) -> None:
        if self.protocol is None:
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
        self.protocol.send(answer)

    def bodyExited(self, exitCode: int | None, signal: int | None, stderrTail: str) -> None:
        expected = self._expectExit
        wasRunning = self.runActive
        runId = self.translator.currentRunId
        cost = self.translator.runCostUsd
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
        waiting = {c.commandId for c in self._backlog[1:]}
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
        plan, self._plan = self._plan, None
        if plan is not None:
            self._cleanUp(plan)
        self.state = "dormant"
        self.protocol = None
        self.transport = None
        self.runActive = False
        self._queued = []
        self._runCommands = []
        self._rendered = {}

    # -- idleness -----------------------------------------------------------

    def _armIdle(self) -> None:
        self._cancelIdle()
        if self.state == "live" and not self.running() and not self.session.deleted:
            self._idle = self.clock.callLater(self.idleSeconds, self._idleFired)

    def _cancelIdle(self) -> None:
        if self._idle is not None and self._idle.active():
            self._idle.cancel()
        self._idle = None

    def _idleFired(self) -> None:
        self._idle = None
        if self.state == "live" and not self.running():
            self.dispose("idle").addErrback(self._logFailure)
