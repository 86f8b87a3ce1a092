# -*- test-case-name: tests.unit.test_acp,tests.live.test_acp_live -*-
"""
C{vehicle acp}: an Agent Client Protocol agent over standard input and
output (JSON-RPC 2.0, one message a line), for editors that start it as a
subprocess.  It is a thin client of the host's routes, as the ride is: each
ACP session is a vehicle session whose lease this agent holds, followed over
SSE (L{Tail}, which resumes after a drop from its last C{seq}), its events
told to the editor as C{session/update}s (L{EventMapper}); a prompt is a
C{prompt} (or a C{follow_up} while a run is under way) command, answered
with a stop reason when that command ends.
"""

from __future__ import annotations

import os
from typing import Any, Callable, ClassVar, Mapping

from attrs import define, field
from twisted.internet.defer import CancelledError, Deferred
from twisted.internet.interfaces import IReactorTime
from twisted.internet.stdio import StandardIO
from twisted.logger import Logger
from twisted.python.failure import Failure

import vehicle
from vehicle._reactors import IClientReactor
from vehicle.clients._acpmap import (
    TERMINAL,
    EventMapper,
    Update,
    leaseHeldMessage,
    promptCommand,
    replay,
    rpcErrorFor,
    sessionInfo,
    stopReason,
)
from vehicle.clients._acprpc import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    PROTOCOL_VERSION,
    RESOURCE_NOT_FOUND,
    AuthenticateParams,
    Ignored,
    InitializeParams,
    ListParams,
    NewParams,
    Notification,
    PromptParams,
    ReopenParams,
    Reply,
    Request,
    RequestId,
    RPCError,
    SessionParams,
    errorResponse,
    notification,
    readMessage,
    response,
)
from vehicle.clients._client import GardendOptions
from vehicle.clients._link import HostLink, leaseHeldBy, sessionIdOf, summaryOf, valueOf
from vehicle.clients._ride import NewSession, randomId
from vehicle.clients._ridemain import (
    DRIVER_PARAMETERS,
    STOP_GRACE_SECONDS,
    boundedWait,
    checkDriver,
    driverLink,
    explainRefusal,
    readCredentials,
)
from vehicle.clients._stdio import MAX_LINE, StdioLines
from vehicle.clients._tail import Tail, TailFailed
from vehicle.protocol import EPHEMERAL_TYPES, JSONObject, intOf, objectOf, objectsOf, textOf


#: Refusals that mean this agent does not hold the lease (any more).
_LEASE_LOST = frozenset({"lease_held", "lease_required", "lease_not_held"})

#: How long opening a session waits for its event stream to connect.
CONNECT_WAIT_SECONDS = 10.0


def _ignore(*args: Any) -> None:
    pass


@define(eq=False)
class Pending:
    """
    A prompt waiting for its command to end.

    @ivar requestId: the JSON-RPC id of the C{session/prompt}.
    @ivar commandId: the host command it sent.
    @ivar done: fires with the stop reason, or fails with an L{RPCError}.
    @ivar accepted: the host accepted the command.
    @ivar cancelled: the editor cancelled it.
    """

    requestId: RequestId
    commandId: str
    done: Deferred[str] = field(factory=Deferred)
    accepted: bool = False
    cancelled: bool = False

    def settle(self, result: str | Failure) -> None:
        if not self.done.called:
            if isinstance(result, Failure):
                self.done.errback(result)
            else:
                self.done.callback(result)


@define(eq=False)
class AcpSession:
    """
    One vehicle session opened by this agent: its stream of events, the
    lease as its events tell, and the prompts under way.
    """

    _log: ClassVar[Logger] = Logger()

    agent: "AcpAgent"
    sessionId: str
    holdsLease: bool = False
    running: bool = False
    mapper: EventMapper = field(factory=EventMapper)
    prompts: dict[str, Pending] = field(factory=dict)
    tail: Tail | None = None
    connected: Deferred[None] = field(factory=Deferred)
    _following: Deferred[None] | None = None
    _events: list[JSONObject] = field(factory=list)
    _draining: bool = False
    closed: bool = False

    def follow(self, since: int) -> None:
        """
        Follow the session's events after C{since}, until L{stop}.
        """
        agent = self.agent
        self.tail = Tail(
            link=agent.link,
            sessionId=self.sessionId,
            clock=agent.clock,
            write=_ignore,
            warn=agent.warn,
            lastSeq=since,
            backoff=agent.backoff,
            onEvent=self._received,
            onConnected=self._connected,
        )
        self._following = Deferred.fromCoroutine(self.tail.run())
        self._following.addBoth(self._followEnded)

    def stop(self) -> None:
        """
        Stop following.
        """
        self.closed = True
        if self._following is not None and not self._following.called:
            self._following.cancel()

    def _connected(self, count: int) -> None:
        if count > 1:
            # A reconnection: deltas sent meanwhile are lost.
            self.mapper.gap = True
        if not self.connected.called:
            self.connected.callback(None)

    def _followEnded(self, result: None | Failure) -> None:
        if not self.connected.called:
            self.connected.callback(None)
        if isinstance(result, Failure):
            if result.check(CancelledError):
                return
            error = result.value
            if isinstance(error, TailFailed):
                frame = error.frame
                rpc = (
                    rpcErrorFor(frame, self.agent.explain)
                    if frame is not None
                    else RPCError(INTERNAL_ERROR, str(error))
                )
            else:
                self._log.failure("Following session {sessionId} failed", result,
                                  sessionId=self.sessionId)
                rpc = RPCError(INTERNAL_ERROR, "following the session's events failed")
            self.agent.warn(f"{self.sessionId}: the event stream ended: {rpc.message}")
            self._failAll(rpc)
        elif not self.closed:
            self._failAll(RPCError(RESOURCE_NOT_FOUND, f"session {self.sessionId} was deleted"))

    def _failAll(self, error: RPCError) -> None:
        prompts, self.prompts = list(self.prompts.values()), {}
        for pending in prompts:
            pending.settle(Failure(error))

    # -- events, in order ---------------------------------------------------

    def _received(self, event: JSONObject) -> None:
        self._events.append(event)
        if not self._draining:
            Deferred.fromCoroutine(self._drain()).addErrback(
                lambda f: self._log.failure("Telling the editor of an event failed", f)
            )

    async def _drain(self) -> None:
        self._draining = True
        try:
            while self._events:
                await self._handle(self._events.pop(0))
        finally:
            self._draining = False

    async def _handle(self, event: JSONObject) -> None:
        for update in self.mapper.feed(event):
            self.agent.update(self.sessionId, update)
        kind = textOf(event.get("type")) or ""
        data = objectOf(event.get("data"))
        if kind in EPHEMERAL_TYPES:
            return
        self._noteLease(kind, data)
        if kind == "run.started":
            self.running = True
        elif kind == "run.settled":
            self.running = False
        if self.mapper.awaiting:
            await self.readToolOutputs()
            if kind == "run.settled":
                # What the transcript does not hold by now, it never will
                # (a call cut off by an abort).
                self.mapper.awaiting.clear()
        if kind == "command.delivered":
            pending = self.prompts.get(str(data.get("commandId")))
            if pending is not None and pending.cancelled:
                # Cancelled before it reached pi: stop it there too.
                await self.abort()
        elif kind in TERMINAL:
            pending = self.prompts.pop(str(data.get("commandId")), None)
            if pending is not None:
                try:
                    reason = stopReason(TERMINAL[kind], data, self.mapper.lastRun,
                                        pending.cancelled)
                except RPCError as e:
                    pending.settle(Failure(e))
                else:
                    pending.settle(reason)

    def _noteLease(self, kind: str, data: JSONObject) -> None:
        mine = data.get("clientId") == self.agent.clientId
        if kind == "lease.claimed":
            self.holdsLease = mine
        elif kind in ("lease.revoked", "lease.released", "lease.expired") and mine:
            self.holdsLease = False

    async def readToolOutputs(self) -> None:
        """
        Show the output of the tool calls that ended, from the transcript.
        """
        frame = await self.agent.link.call("GET", self.agent.link.sessionPath(self.sessionId))
        if frame.get("type") == "session.snapshot":
            for update in self.mapper.outputs(objectsOf(valueOf(frame).get("transcript"))):
                self.agent.update(self.sessionId, update)

    # -- the lease and commands ---------------------------------------------

    async def claim(self, takeover: bool) -> JSONObject:
        """
        Claim the lease (taking it over from the same person's other client
        when C{takeover}); the answer.
        """
        payload: JSONObject = {"requestId": self.agent.newId("acp-claim")}
        if takeover:
            payload["takeover"] = True
        frame = await self.agent.link.call(
            "POST", self.agent.link.sessionPath(self.sessionId, "/claim"), payload
        )
        if frame.get("type") == "driver.claimed":
            self.holdsLease = True
        return frame

    async def command(self, payload: JSONObject) -> JSONObject:
        return await self.agent.link.call(
            "POST", self.agent.link.sessionPath(self.sessionId, "/commands"), payload
        )

    async def abort(self) -> None:
        """
        Abort the run under way (and what is queued), for a cancel.
        """
        frame = await self.command({"type": "abort", "requestId": self.agent.newId("acp-abort")})
        if frame.get("type") == "error":
            self.agent.warn(f"{self.sessionId}: the abort was refused: {frame.get('message')}")

    async def release(self) -> None:
        if self.holdsLease:
            frame = await self.agent.link.call(
                "POST",
                self.agent.link.sessionPath(self.sessionId, "/release"),
                {"requestId": self.agent.newId("acp-release")},
            )
            if frame.get("type") == "driver.released":
                self.holdsLease = False

    async def cancel(self) -> None:
        """
        The editor cancels its prompts: each is marked, and the run is
        aborted once a command of them is accepted.
        """
        prompts = list(self.prompts.values())
        for pending in prompts:
            pending.cancelled = True
        if any(pending.accepted for pending in prompts):
            await self.abort()

    async def prompt(self, pending: Pending, text: str, refs: list[str], takeover: bool) -> str:
        """
        Send a prompt (a follow-up while a run is under way); its stop
        reason once its command ends.

        @raise RPCError: the host refused it, or it did not end well.
        """
        if not self.holdsLease:
            await self._ensureLease(takeover)
        payload: JSONObject = {
            "type": "follow_up" if self.running else "prompt",
            "requestId": pending.commandId,
            "text": text,
        }
        if refs:
            payload["contextRefs"] = list(refs)  # to the checker, a list[str] is no list[JSON]
        self.prompts[pending.commandId] = pending
        self.mapper.expectUser(text)
        frame = await self.command(payload)
        if frame.get("type") == "error" and frame.get("code") in _LEASE_LOST:
            # The lease went (expired, taken over) since this agent knew.
            self.holdsLease = False
            await self._ensureLease(takeover)
            frame = await self.command(payload)
        if frame.get("type") != "command.accepted":
            self.prompts.pop(pending.commandId, None)
            self.mapper.forgetUser(text)
            raise self._refusal(frame)
        pending.accepted = True
        if pending.cancelled:
            await self.abort()
        return await pending.done

    async def _ensureLease(self, takeover: bool) -> None:
        frame = await self.claim(takeover)
        if frame.get("type") != "driver.claimed":
            raise self._refusal(frame)

    def _refusal(self, frame: JSONObject) -> RPCError:
        error = rpcErrorFor(frame, self.agent.explain)
        if frame.get("code") == "lease_held":
            details = objectOf(frame.get("details"))
            error.message = leaseHeldMessage(
                self.sessionId, details.get("holder"), bool(details.get("canTakeOver"))
            )
        return error


@define(eq=False)
class AcpAgent:
    """
    The agent: reads messages (L{lineReceived}), answers each request in
    its own time (a prompt waits for its run while a cancel comes), and
    writes every message with C{send}.

    @ivar link: the host's routes, through gardend.
    @ivar clientId: this agent's C{x-vehicle-client-id}: the lease is its.
    @ivar explain: one line for the person for a refusal of credentials.
    @ivar cwd: the folder reported for listed sessions when none is asked.
    @ivar takeover: take the lease over from the same person's other
        client when a session is opened or prompted.
    @ivar new: what C{session/new} asks for (profile, model).
    """

    _log: ClassVar[Logger] = Logger()

    link: HostLink
    clientId: str
    send: Callable[[JSONObject], None]
    clock: IReactorTime
    explain: Callable[[JSONObject], str] = lambda frame: str(frame.get("message"))
    warn: Callable[[str], None] = _ignore
    cwd: str = "/"
    takeover: bool = False
    new: NewSession = NewSession()
    newId: Callable[[str], str] = randomId
    backoff: float = 0.5
    initialized: bool = False
    sessions: dict[str, AcpSession] = field(factory=dict)
    #: The requests being answered, by id (its type too: C{1} is not C{"1"}).
    _inFlight: dict[tuple[str, RequestId], Deferred[None]] = field(factory=dict)
    _ended: bool = False
    finished: Deferred[None] = field(factory=Deferred)

    # -- input --------------------------------------------------------------

    def lineReceived(self, raw: bytes) -> None:
        """
        One message from the editor.
        """
        if self._ended:
            return
        message = readMessage(raw, self.initialized)
        if message is None:
            return
        if isinstance(message, Reply):
            self.send(errorResponse(message.id, message.error))
        elif isinstance(message, Ignored):
            self.warn(f"ignored {message.why}")
        elif isinstance(message, Notification):
            d = Deferred.fromCoroutine(self._notified(message))
            d.addErrback(lambda f: self._log.failure("A notification failed", f))
        else:
            self._start(message)

    def lineTooLong(self) -> None:
        """
        A line longer than L{MAX_LINE}: refused, and the next one read.
        """
        if not self._ended:
            self.send(
                errorResponse(
                    None,
                    RPCError(
                        INVALID_REQUEST,
                        f"Invalid request: the line is longer than {MAX_LINE} bytes; it was skipped",
                    ),
                )
            )

    def inputEnded(self) -> None:
        """
        The editor closed our input (or asked us to stop): let every lease
        go and stop following; runs under way go on in the host.
        """
        if self._ended:
            return
        self._ended = True
        for d in list(self._inFlight.values()):
            d.cancel()
        Deferred.fromCoroutine(self._end()).addBoth(
            lambda result: self.finished.callback(None) if not self.finished.called else None
        )

    async def _end(self) -> None:
        sessions, self.sessions = list(self.sessions.values()), {}
        for session in sessions:
            session.stop()
            try:
                await session.release()
            except Exception:
                self._log.failure("Releasing {sessionId} failed", sessionId=session.sessionId)

    def update(self, sessionId: str, update: Update) -> None:
        """
        Tell the editor of one change of a session.
        """
        if not self._ended:
            self.send(
                notification("session/update", {"sessionId": sessionId, "update": update.toJSON()})
            )

    # -- requests -------------------------------------------------------------

    def _start(self, request: Request) -> None:
        key = (type(request.id).__name__, request.id)
        d = Deferred.fromCoroutine(self._answer(request))
        if not d.called:
            self._inFlight[key] = d
            d.addBoth(lambda _: self._inFlight.pop(key, None))

    async def _answer(self, request: Request) -> None:
        try:
            result = await self._call(request)
        except CancelledError:
            return
        except RPCError as e:
            if not self._ended:
                self.send(errorResponse(request.id, e))
            return
        except Exception:
            self._log.failure("Answering {method} failed", method=request.method)
            if not self._ended:
                self.send(
                    errorResponse(
                        request.id,
                        RPCError(INTERNAL_ERROR, f"Internal error: {request.method} failed"),
                    )
                )
            return
        if not self._ended:
            self.send(response(request.id, result))

    async def _call(self, request: Request) -> JSONObject:
        """
        The result of one request, by the method its params are read for.

        @raise RPCError: the request is refused.
        """
        match request.params:
            case InitializeParams():
                return self._initialize()
            case AuthenticateParams():
                raise RPCError(
                    INVALID_PARAMS,
                    "Invalid params: vehicle acp offers no authentication method; it reads the "
                    "token from VEHICLE_TOKEN or --key-file",
                    {"field": "methodId"},
                )
            case NewParams() as params:
                return await self._newSession(params)
            case ReopenParams() as params:
                return await self._reopen(params)
            case ListParams() as params:
                return await self._listSessions(params)
            case PromptParams() as params:
                return await self._prompt(request.id, params)
            case SessionParams() as params:
                return await self._close(params)

    def _initialize(self) -> JSONObject:
        self.initialized = True
        return {
            "protocolVersion": PROTOCOL_VERSION,
            "agentCapabilities": {
                "loadSession": True,
                "promptCapabilities": {"image": False, "audio": False, "embeddedContext": False},
                "mcpCapabilities": {"http": False, "sse": False},
                "sessionCapabilities": {"list": {}, "resume": {}, "close": {}},
            },
            "agentInfo": {
                "name": "vehicle",
                "title": "vehicle (pi through gardend)",
                "version": vehicle.__version__.public(),
            },
            "authMethods": [],
        }

    def _ignoredServers(self, params: NewParams | ReopenParams) -> JSONObject:
        """
        What of a session's opening this agent does not take (the editor's
        MCP servers, its folder), for the answer's C{_meta.vehicle}.
        """
        names = [str(server.get("name")) for server in params.mcpServers if server]
        if names:
            self.warn(
                "the editor's MCP servers are not connected (the session's pi runs in the host, "
                f"with the graph tools only): {', '.join(names)}"
            )
        # list(names): to the checker, a list[str] is no list[JSON]
        return {"mcpServersIgnored": list(names), "cwdIgnored": params.cwd}

    async def _newSession(self, params: NewParams) -> JSONObject:
        frame = await self.link.call("POST", "/sessions", self.new.payload(self.newId("acp-create")))
        if frame.get("type") != "session.created":
            raise rpcErrorFor(frame, self.explain)
        session = await self._open(summaryOf(frame), gap=False)
        ours = self._ignoredServers(params)
        ours["holdsLease"] = session.holdsLease
        return {"sessionId": session.sessionId, "_meta": {"vehicle": ours}}

    async def _reopen(self, params: ReopenParams) -> JSONObject:
        """
        C{session/load} (the transcript told again first) or
        C{session/resume}.
        """
        sessionId = params.sessionId
        frame = await self.link.call("GET", self.link.sessionPath(sessionId))
        if frame.get("type") != "session.snapshot":
            raise rpcErrorFor(frame, self.explain)
        value = valueOf(frame)
        summary = objectOf(value.get("session"))
        old = self.sessions.pop(sessionId, None)
        if old is not None:
            old.stop()
        if params.replay:
            for update in replay(objectsOf(value.get("transcript"))):
                self.update(sessionId, update)
        session = await self._open(summary, gap=summary.get("status") == "running")
        lease = summary.get("lease")
        if not session.holdsLease and (lease is None or self.takeover or params.takeover):
            await session.claim(takeover=lease is not None)
        ours = self._ignoredServers(params)
        ours["holdsLease"] = session.holdsLease
        if not session.holdsLease and isinstance(lease, dict):
            ours["holder"] = {key: lease.get(key) for key in ("principal", "clientId")}
        return {"_meta": {"vehicle": ours}}

    async def _open(self, summary: JSONObject, gap: bool) -> AcpSession:
        session = AcpSession(
            agent=self,
            sessionId=sessionIdOf(summary),
            holdsLease=leaseHeldBy(summary, self.clientId),
            running=summary.get("status") == "running",
        )
        session.mapper.gap = gap
        self.sessions[session.sessionId] = session
        session.follow(intOf(summary.get("cursor")) or 0)
        await boundedWait(self.clock, session.connected, CONNECT_WAIT_SECONDS)
        return session

    async def _listSessions(self, params: ListParams) -> JSONObject:
        if params.cursor is not None:
            raise RPCError(
                INVALID_PARAMS,
                "Invalid params: cursor is not one this agent gave (it lists every session at once)",
                {"field": "cursor"},
            )
        frame = await self.link.call("GET", "/sessions")
        if frame.get("type") != "session.list":
            raise rpcErrorFor(frame, self.explain)
        cwd = params.cwd or self.cwd
        return {
            "sessions": [sessionInfo(s, cwd) for s in objectsOf(valueOf(frame).get("sessions"))]
        }

    def _session(self, sessionId: str) -> AcpSession:
        session = self.sessions.get(sessionId)
        if session is None:
            raise RPCError(
                RESOURCE_NOT_FOUND,
                f"session {sessionId} is not open here: session/new, session/load or "
                "session/resume it first",
                {"field": "sessionId"},
            )
        return session

    async def _prompt(self, requestId: RequestId, params: PromptParams) -> JSONObject:
        session = self._session(params.sessionId)
        text, refs = promptCommand(params.prompt)
        pending = Pending(requestId=requestId, commandId=self.newId("acp-prompt"))
        takeover = self.takeover or params.takeover
        return {"stopReason": await session.prompt(pending, text, refs, takeover)}

    async def _close(self, params: SessionParams) -> JSONObject:
        session = self._session(params.sessionId)
        await session.cancel()
        for pending in list(session.prompts.values()):
            pending.settle("cancelled")
        session.prompts.clear()
        del self.sessions[session.sessionId]
        session.stop()
        await session.release()
        return {}

    # -- notifications --------------------------------------------------------

    async def _notified(self, message: Notification) -> None:
        params = message.params
        if isinstance(params, SessionParams):
            # session/cancel
            session = self.sessions.get(params.sessionId)
            if session is not None:
                await session.cancel()
            return
        # $/cancel_request: a prompt's is a cancel of its session's prompts.
        for session in list(self.sessions.values()):
            if any(p.requestId == params.requestId for p in session.prompts.values()):
                await session.cancel()


class AcpOptions(GardendOptions):
    """
    C{vehicle acp --gardend URL --graph G [--profile P] [--model M] ...}.
    """

    longdesc = ""
    synopsis = (
        "--gardend URL --graph G [--profile chat|agent] [--model M] [--takeover]"
        " [--client-id ID] [--ca-file PEM]"
    )

    optFlags = [
        ["takeover", None, "Take the lease over from your own other client (an editor, a ride) "
         "when a session is opened or prompted."],
    ]
    optParameters = [
        ["profile", None, None, "New sessions' profile: chat (default) or agent."],
        ["model", None, None, "New sessions' model: provider/model."],
        *DRIVER_PARAMETERS,
    ]

    def postOptions(self) -> None:
        super().postOptions()
        checkDriver(self)


async def runAcp(
    reactor: IClientReactor,
    options: AcpOptions,
    environ: Mapping[str, str] | None = None,
    say: Callable[[str], None] | None = None,
) -> int:
    """
    Be an ACP agent on standard input and output until the input ends (or
    the process is asked to stop).  Standard output carries nothing but
    protocol; every word for the person goes to standard error.

    @return: the exit code: 0; 2 when the credentials could not be had.
    """
    credentials, say = readCredentials(options, environ, say, "acp")
    if credentials is None:
        return 2
    clientId = options["client-id"] or randomId("acp")
    link, pool = driverLink(reactor, options, credentials, clientId)
    output = StdioLines()
    agent = AcpAgent(
        link=link,
        clientId=clientId,
        send=output.sendFrame,
        clock=reactor,
        explain=lambda frame: explainRefusal(frame, credentials, "the session")[0],
        warn=lambda text: say(f"vehicle acp: {text}"),
        cwd=os.getcwd(),
        takeover=bool(options["takeover"]),
        new=NewSession(profile=options["profile"], model=options["model"]),
    )
    output.onLine = agent.lineReceived
    output.onEnd = agent.inputEnded
    output.onTooLong = agent.lineTooLong
    StandardIO(output, reactor=reactor)

    def stopping() -> Deferred[None]:
        # Asked to stop (a signal): end as at the end of the input.
        agent.inputEnded()
        return boundedWait(reactor, agent.finished, STOP_GRACE_SECONDS)

    reactor.addSystemEventTrigger("before", "shutdown", stopping)
    try:
        await agent.finished
    finally:
        await output.close()
        await pool.closeCachedConnections()
    return 0


__all__ = ["AcpAgent", "AcpOptions", "AcpSession", "runAcp"]
