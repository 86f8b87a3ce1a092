# -*- test-case-name: tests.unit.test_conductor -*-
"""
The way out to pi: a session's accepted commands delivered strictly in
order through one pump (L{Pump}), so pi never sees a prompt while another
is still starting (it would drop it), each as the pi operation its verb
asks for; and cancel, in one place (L{Delivery.cancelled}).
"""

from __future__ import annotations

from typing import ClassVar

from attrs import define
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger

from vehicle._timers import cancelIfActive
from vehicle.body._life import BodyLife, HostClosing
from vehicle.body._live import LiveBody
from vehicle.body._modeltext import renderText
from vehicle.body._pump import Pump
from vehicle.body._rpc import BodyExited, PiCommandError
from vehicle.errors import VehicleError
from vehicle.protocol import (
    DISPOSITIONS,
    Command,
    CommandStatus,
    CommandType,
    JSONObject,
    TEXT_COMMANDS,
    textOf,
    toObject,
)
from vehicle.session import Session


@define(eq=False)
class Delivery:
    """
    Delivers one session's commands to its body, one pi operation at a
    time; the body is made on the way (L{BodyLife.ensure}) when it is not
    live.  A command's status is moved by the session, told here.
    """

    _log: ClassVar[Logger] = Logger()

    session: Session
    life: BodyLife
    clock: IReactorTime

    @property
    def pump(self) -> Pump:
        return self.life.pump

    def accept(self, command: Command) -> None:
        """
        A command was accepted: in line for delivery (an abort or shutdown
        ahead of what waits, which it cancels; a cancel of what waits done
        at once).
        """
        kind = command.type
        # Only what waits behind the command being delivered (pi's already)
        # can be taken back without asking pi.
        if kind == CommandType.cancel:
            target = [c for c in self.pump.waiting() if c.commandId == command.targetCommandId]
            if target:
                # Never sent to pi: taking it out is bookkeeping.
                self.cancelled(target, "cancelled")
                self.session.move(command.commandId, CommandStatus.completed)
                return
        if kind in (CommandType.abort, CommandType.shutdown):
            # Everything not yet handed to pi is cancelled, not delivered.
            self.cancelled([c for c in self.pump.waiting() if c.hasText], kind)
            self.pump.add(command, first=True)
        else:
            self.pump.add(command)
        self.pump.run(self._drain)

    def behind(self) -> set[str]:
        """
        The commands waiting behind the one being delivered.
        """
        return {c.commandId for c in self.pump.backlog[1:]}

    async def _drain(self) -> None:
        pump = self.pump
        while not self.session.deleted and not self.life.closing:
            command = pump.next()
            if command is None:
                break
            try:
                await self._perform(command)
            except HostClosing:
                pass  # left open: the next start reports it interrupted
            except VehicleError as e:
                self.fail(command, e.message, code=e.code)
            except BodyExited:
                if not self.life.closing:
                    self.fail(command, "the body exited before the command was delivered")
            except PiCommandError as e:
                self.fail(command, str(e.error))
            except Exception:
                self._log.failure(
                    "Delivering {commandId} in {sessionId} failed",
                    commandId=command.commandId,
                    sessionId=self.session.sessionId,
                )
                self.fail(command, "the host failed to deliver the command", code="internal")
            finally:
                pump.deliveredOne(command)
        self.life.armIdle()

    def fail(self, command: Command, message: str, code: str | None = None) -> None:
        self.session.move(
            command.commandId, CommandStatus.failed, error=self.life.scrub(message), code=code
        )

    def cancelled(self, commands: list[Command], reason: str) -> None:
        """
        Cancel, in one place: C{commands} are taken out of the backlog and
        out of pi's queue as the host knows it, and the session is asked to
        mark them cancelled.  (pi's own queue is cleared by the caller.)
        """
        self.pump.take(commands)
        body = self.life.body
        for command in commands:
            if body is not None:
                body.forget(command)
            self.session.move(command.commandId, CommandStatus.cancelled, reason=reason)

    # -- the verbs ------------------------------------------------------------

    async def _perform(self, command: Command) -> None:
        kind = command.type
        if kind in TEXT_COMMANDS or kind == CommandType.acceptChime:
            await self._deliverText(command)
        elif kind == CommandType.abort:
            await self._abort(command)
        elif kind == CommandType.cancel:
            await self._cancel(command)
        elif kind == CommandType.shutdown:
            await self._shutdown(command)
        else:
            self.fail(command, f"{kind.value} is not supported by this body")

    async def _deliverText(self, command: Command) -> None:
        body = await self.life.ensure()
        message = renderText(command)
        body.render(command, message)
        if body.run is None:
            # A new run: the proxy's meter starts again (pi may compact the
            # context before the run's first request, and that counts too).
            body.startRun(command)
            try:
                data = await body.protocol.request({"type": "prompt", "message": message})
            except BaseException:
                body.runRefused()
                raise
            disposition = DISPOSITIONS.get(textOf(data.get("disposition")) or "", "started")
            self.session.move(command.commandId, CommandStatus.delivered, disposition=disposition)
            if disposition != "started":
                # An extension handled it: no run comes of it.
                body.runRefused()
                self.session.move(command.commandId, CommandStatus.completed)
            return
        verb = command.delivery or command.type.value
        request: JSONObject = {"type": verb, "message": message}
        if verb == "prompt":
            request["streamingBehavior"] = "followUp"
        body.enqueue(command)
        try:
            data = await body.protocol.request(request)
        except BaseException:
            body.unqueue(command)
            raise
        disposition = DISPOSITIONS.get(textOf(data.get("disposition")) or "", "queued")
        if body.isQueued(command):
            self.session.move(command.commandId, CommandStatus.queued, disposition=disposition)

    async def _clearQueue(self, body: LiveBody, reason: str) -> list[Command]:
        await body.protocol.request({"type": "clear_queue"})
        cleared = list(body.queued)
        self.cancelled(cleared, reason)
        return cleared

    def clearLater(self, body: LiveBody, reason: str) -> None:
        """
        Clear pi's queue now, outside the line of delivery (a run that
        settled aborted, a budget stop): what it held is cancelled.
        """
        Deferred.fromCoroutine(self._clearQueue(body, reason)).addErrback(self.life.logFailure)

    async def _abort(self, command: Command) -> None:
        body = self.life.live()
        if body is not None:
            if body.piQueues():
                await self._clearQueue(body, "aborted")
            if body.run is not None:
                body.requestAbort()
                slow = self.clock.callLater(5, self._abortSlow)
                try:
                    await body.protocol.request({"type": "abort"})
                finally:
                    cancelIfActive(slow)
        self.session.move(command.commandId, CommandStatus.completed)

    def _abortSlow(self) -> None:
        self.session.emit("abort.slow", {"afterMs": 5000})

    async def _cancel(self, command: Command) -> None:
        target = command.targetCommandId
        body = self.life.live()
        targets = [c for c in body.queued if c.commandId == target] if body else []
        if body is None or not targets:
            self.fail(command, f"command {target!r} is no longer in the queue", code="not_cancellable")
            return
        keep = [c for c in body.queued if c.commandId != target]
        await body.protocol.request({"type": "clear_queue"})
        self.cancelled(targets, "cancelled")
        # pi has no dequeue: what stays goes back in its original order.
        body.takeQueued()
        for other in keep:
            kind = other.delivery or other.type.value
            verb = "steer" if kind == "steer" else "follow_up"
            body.enqueue(other)
            await body.protocol.request({"type": verb, "message": body.renderedText(other)})
        self.session.move(command.commandId, CommandStatus.completed)

    async def _shutdown(self, command: Command) -> None:
        body = self.life.live()
        if body is not None:
            if body.queued:
                await self._clearQueue(body, "shutdown")
            if body.run is not None:
                body.requestAbort()
                await body.protocol.request({"type": "abort"})
        await self.life.dispose("shutdown")
        self.session.releaseLeaseOf(command.by, "shutdown")
        self.session.emit("session.shutdown", {"by": toObject(command.by)})
        self.session.move(command.commandId, CommandStatus.completed)

    # -- what a settled run left in pi's queue --------------------------------

    def redeliver(self, body: LiveBody, leftovers: list[Command]) -> None:
        """
        C{leftovers} are still in pi's queue with no run to take them:
        clear it and deliver them again, in order, as commands of their own
        (unless an abort came meanwhile: then they are cancelled).
        """
        Deferred.fromCoroutine(self._restart(body, leftovers)).addErrback(self.life.logFailure)

    async def _restart(self, body: LiveBody, leftovers: list[Command]) -> None:
        await body.protocol.request({"type": "clear_queue"})
        for command in leftovers:
            if body.abortRequested or self.life.closing or any(
                c.type in (CommandType.abort, CommandType.shutdown) for c in self.pump.backlog
            ):
                # An abort came while pi's queue was being cleared: these
                # are taken out, not delivered after it.
                self.cancelled([command], "aborted")
                continue
            self.session.requeue(command.commandId)
            self.pump.add(command)
        self.pump.run(self._drain)
