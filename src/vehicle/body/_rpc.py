# -*- test-case-name: tests.unit.test_rpc -*-
"""
The wire to one C{pi --mode rpc} child: LF framing of its stdout, C{id}
correlation of commands and responses, its stderr tail, and stopping it.

Everything pi says that is not a response to a request goes to an
L{IBodySink}.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import ClassVar

from attrs import frozen
from twisted.internet.defer import Deferred, fail, succeed
from twisted.internet.error import ProcessDone, ProcessExitedAlready, ProcessTerminated
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.internet.protocol import ProcessProtocol
from twisted.logger import Logger
from twisted.python.failure import Failure
from zope.interface import Interface

from vehicle._timers import cancelIfActive
from vehicle.protocol import JSON, JSONObject, objectOf


#: The longest stdout line accepted from pi; pi's lines grow with the
#: conversation (C{agent_end}, C{get_messages}).
MAX_LINE_BYTES = 64 * 1024 * 1024

#: How much of pi's stderr is kept.
STDERR_TAIL_BYTES = 8192

#: How much of a line that is not JSON goes into the log, and how many such
#: lines are logged per child.
_LOGGED_LINE_CHARS = 200
_LOGGED_LINES = 20


class IBodySink(Interface):
    """
    Receives what a pi child says outside of responses to requests.
    """

    def piEvent(event: JSONObject) -> None:
        """
        One stdout record that is not the response to a pending request:
        events, C{extension_ui_request}s, responses without a known C{id}.
        """

    def bodyExited(
        exitCode: int | None, signal: int | None, stderrTail: str
    ) -> None:
        """
        The child ended, with its exit code or the signal that killed it and
        the tail of its stderr.
        """


@frozen
class PiCommandError(Exception):
    """
    pi answered a command with C{success: false}.

    @ivar command: the command's C{type} (e.g. C{"prompt"}).
    @ivar error: pi's error text.
    """

    command: str
    error: str


@frozen
class BodyExited(Exception):
    """
    The pi child ended before answering.

    @ivar exitCode: its exit code, or C{None} when a signal ended it.
    @ivar signal: the signal number, or C{None}.
    @ivar stderrTail: the tail of its stderr.
    """

    exitCode: int | None
    signal: int | None
    stderrTail: str


def _encode(record: JSONObject) -> bytes:
    # ASCII-only JSON: U+2028/U+2029 and lone surrogates travel escaped.
    return json.dumps(record, separators=(",", ":")).encode("ascii") + b"\n"


class PiProtocol(ProcessProtocol):
    """
    Speaks pi's RPC mode over a child's stdin and stdout.

    @ivar sink: the L{IBodySink} for events and the child's end.
    @ivar exitCode: set when the child ended (C{None} if a signal ended it).
    @ivar signal: set when a signal ended the child.
    @ivar protocolError: why the host stopped reading the child, if it did.
    @ivar ignoredLines: how many stdout lines were not JSON objects.
    """

    _log: ClassVar[Logger] = Logger()

    def __init__(
        self,
        sink: IBodySink,
        *,
        maxLineBytes: int = MAX_LINE_BYTES,
        stderrTailBytes: int = STDERR_TAIL_BYTES,
        idPrefix: str = "h-",
    ) -> None:
        self.sink = sink
        self._maxLineBytes = maxLineBytes
        self._stderrTailBytes = stderrTailBytes
        self._idPrefix = idPrefix
        self._nextId = 0
        self._pending: dict[str, tuple[str, Deferred[JSONObject]]] = {}
        self._partial: list[bytes] = []
        self._partialLength = 0
        self._stderr = bytearray()
        self._endWaiters: list[Deferred[None]] = []
        self._timers: list[IDelayedCall] = []
        self._stdinClosed = False
        self.hasEnded = False
        self.exitCode: int | None = None
        self.signal: int | None = None
        self.protocolError: str | None = None
        self.ignoredLines = 0

    # Requests

    def request(self, command: JSONObject) -> Deferred[JSONObject]:
        """
        Send a command and wait for its response.

        @param command: pi's command, e.g. C{{"type": "prompt", "message":
            "..."}}; any C{id} in it is replaced by a fresh one.
        @return: a L{Deferred} firing with the response's C{data} (C{{}}
            when it has none or it is not an object), or failing with
            L{PiCommandError} when pi refused the command, or L{BodyExited}
            when the child ended first.
        """
        if self.hasEnded:
            return fail(self._exited())
        if self.transport is None:
            return fail(RuntimeError("pi child is not connected"))
        self._nextId += 1
        requestId = f"{self._idPrefix}{self._nextId}"
        data = _encode({**command, "id": requestId})
        d: Deferred[JSONObject] = Deferred()
        self._pending[requestId] = (str(command.get("type")), d)
        if self._stdinClosed:
            # Stopping: it can no longer be sent; it fails when pi has ended.
            return d
        assert self.transport is not None
        self.transport.write(data)
        return d

    def send(self, message: JSONObject) -> None:
        """
        Write one line that gets no response (C{extension_ui_response}).
        Does nothing once the child has ended.
        """
        data = _encode(message)
        if self.hasEnded or self.transport is None or self._stdinClosed:
            self._log.debug(
                "Dropped a message to a stopped pi child: {type}",
                type=message.get("type"),
            )
            return
        self.transport.write(data)

    @property
    def pendingCount(self) -> int:
        """
        How many requests wait for their response.
        """
        return len(self._pending)

    # Reading

    def outReceived(self, data: bytes) -> None:
        """
        Split stdout into records on LF only (never on U+2028/U+2029).
        """
        start = 0
        while self.protocolError is None:
            end = data.find(b"\n", start)
            if end < 0:
                rest = len(data) - start
                if rest:
                    if self._partialLength + rest > self._maxLineBytes:
                        self._overflow()
                        return
                    self._partial.append(data[start:])
                    self._partialLength += rest
                return
            if self._partialLength + (end - start) > self._maxLineBytes:
                self._overflow()
                return
            if self._partial:
                self._partial.append(data[start:end])
                line = b"".join(self._partial)
                self._partial = []
                self._partialLength = 0
            else:
                line = data[start:end]
            start = end + 1
            self._lineReceived(line)

    def _overflow(self) -> None:
        self.protocolError = (
            f"pi wrote a stdout line longer than {self._maxLineBytes} bytes"
        )
        self._partial = []
        self._partialLength = 0
        self._log.error(
            "Stopping pi child: {problem}", problem=self.protocolError
        )
        self._signal("KILL")

    def _lineReceived(self, line: bytes) -> None:
        if not line.strip():
            return
        try:
            record: JSON = json.loads(line.decode("utf-8"))
        except ValueError:
            record = None
        if not isinstance(record, dict):
            self.ignoredLines += 1
            if self.ignoredLines <= _LOGGED_LINES:
                self._log.warn(
                    "Ignored a stdout line from pi that is not a JSON object: {line}",
                    line=line[:_LOGGED_LINE_CHARS].decode("utf-8", "replace"),
                )
            elif self.ignoredLines == _LOGGED_LINES + 1:
                self._log.warn("Ignoring further stdout lines that are not JSON")
            return
        if record.get("type") == "response":
            requestId = record.get("id")
            if isinstance(requestId, str) and requestId in self._pending:
                command, d = self._pending.pop(requestId)
                if record.get("success") is False:
                    error = record.get("error")
                    d.errback(
                        PiCommandError(
                            str(record.get("command", command)),
                            error if isinstance(error, str) else "unknown error",
                        )
                    )
                else:
                    d.callback(objectOf(record.get("data")))
                return
        try:
            self.sink.piEvent(record)
        except Exception:
            self._log.failure("Body sink failed on a pi record")

    def errReceived(self, data: bytes) -> None:
        """
        Keep the tail of stderr.
        """
        self._stderr += data
        excess = len(self._stderr) - self._stderrTailBytes
        if excess > 0:
            del self._stderr[:excess]

    @property
    def stderrTail(self) -> str:
        """
        The last bytes of the child's stderr, decoded leniently; a protocol
        error the host found is added as a last line.
        """
        tail = self._stderr.decode("utf-8", "replace")
        if self.protocolError is not None:
            tail += f"\n[vehicle] {self.protocolError}\n"
        return tail

    # The end

    def processEnded(self, reason: Failure) -> None:
        """
        Record how the child ended, tell the sink, fail pending requests and
        fire L{whenEnded}'s Deferreds.
        """
        if self._partial and self.protocolError is None:
            # A last record without its LF.
            line = b"".join(self._partial)
            self._partial = []
            self._partialLength = 0
            self._lineReceived(line)
        self.hasEnded = True
        value = reason.value
        if isinstance(value, (ProcessDone, ProcessTerminated)):
            self.exitCode = value.exitCode
            self.signal = value.signal
        for timer in self._timers:
            cancelIfActive(timer)
        self._timers = []
        stderrTail = self.stderrTail
        try:
            self.sink.bodyExited(self.exitCode, self.signal, stderrTail)
        except Exception:
            self._log.failure("Body sink failed on the end of pi")
        pending, self._pending = self._pending, {}
        for _, d in pending.values():
            d.errback(self._exited())
        waiters, self._endWaiters = self._endWaiters, []
        for waiter in waiters:
            waiter.callback(None)

    def _exited(self) -> BodyExited:
        return BodyExited(self.exitCode, self.signal, self.stderrTail)

    def whenEnded(self) -> Deferred[None]:
        """
        @return: a new L{Deferred} that fires with C{None} once the child has
            ended (at once if it has).
        """
        if self.hasEnded:
            return succeed(None)
        d: Deferred[None] = Deferred()
        self._endWaiters.append(d)
        return d

    @property
    def ended(self) -> Deferred[None]:
        """
        Same as L{whenEnded}: each access gives a new L{Deferred}.
        """
        return self.whenEnded()

    def _signal(self, name: str) -> None:
        if self.transport is None or self.hasEnded:
            return
        try:
            self.transport.signalProcess(name)
        except ProcessExitedAlready:
            pass

    def terminate(self, clock: IReactorTime, graceSeconds: float = 3) -> Deferred[None]:
        """
        Stop the child: close its stdin (pi exits on EOF), send C{TERM} if it
        is still running after C{graceSeconds}, and C{KILL} after as long
        again.

        @return: a L{Deferred} firing with C{None} once the child ended.
        """
        if self.hasEnded:
            return succeed(None)
        d = self.whenEnded()
        if self._stdinClosed:
            return d
        self._stdinClosed = True
        if self.transport is not None:
            self.transport.closeStdin()
        self._timers.append(clock.callLater(graceSeconds, self._signal, "TERM"))
        self._timers.append(clock.callLater(2 * graceSeconds, self._signal, "KILL"))
        return d


async def switchSession(protocol: PiProtocol, path: Path, refused: str) -> None:
    """
    Switch pi to the session file C{path} (as pi names it).

    @raise PiCommandError: C{refused}, unless pi says the switch was not
        cancelled (an extension may cancel it; only C{false} is a yes).
    """
    switched = await protocol.request({"type": "switch_session", "sessionPath": str(path)})
    if switched.get("cancelled") is not False:
        raise PiCommandError("switch_session", refused)


async def setModel(protocol: PiProtocol, model: str) -> None:
    """
    Put pi on C{model} (C{provider/id}) from its next model request on.
    pi keeps the change in the session's file (its C{model_change}), as
    it does the model it started a session on.

    @raise PiCommandError: pi has no such model.
    """
    provider, _, modelId = model.partition("/")
    await protocol.request({"type": "set_model", "provider": provider, "modelId": modelId})


async def stateOn(protocol: PiProtocol, path: Path, elsewhere: str) -> JSONObject:
    """
    pi's state, once it says it is on the session file C{path}.

    @raise PiCommandError: C{elsewhere}, when it is on another file.
    """
    state = await protocol.request({"type": "get_state"})
    if state.get("sessionFile") != str(path):
        raise PiCommandError("switch_session", elsewhere)
    return state
