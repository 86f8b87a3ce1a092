# -*- test-case-name: tests.test_web -*-
"""
The Klein app: thin routes that authenticate, parse and validate, call the
session room, and render one frame.  Errors of every kind become the error
frame; nothing escapes as a traceback.
"""

from __future__ import annotations

from typing import Any, Awaitable, Callable, ClassVar

from attrs import define, field
from klein import Klein
from twisted.internet.defer import CancelledError, Deferred
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger
from twisted.web.iweb import IRequest
from werkzeug.exceptions import HTTPException, MethodNotAllowed, NotFound

from vehicle import __version__
from vehicle.errors import VehicleError, encode, errorFrame
from vehicle.models import ModelCatalog
from vehicle.public import Public
from vehicle.body import branch
from vehicle.session import TEXT_COMMANDS, Caller, Registry, Session
from vehicle.session import _drive as drive
from vehicle.session._capsule import makeCapsule
from vehicle.web._frames import frame, parseBody, validate
from vehicle.web._trust import GuardedResource, authenticate, checkSecret
from vehicle.web._watch import EventStream, longPoll, parseCursor, parseWait, wantsEventStream


Handler = Callable[..., Awaitable[tuple[int, dict[str, Any]]]]


@define(eq=False)
class Hooks:
    """
    What the app asks of the rest of the host, so that it stays thin: the
    checks a new session or a delete needs beyond the session room.
    """

    #: (caller, body) -> isolation label, or raises (agent profile).
    checkProfile: Callable[[Caller, dict[str, Any]], Awaitable[str | None]] | None = None
    #: (session) -> Deferred fired when its body is gone.
    disposeBody: Callable[[Session], Awaitable[None]] | None = None
    #: (session) -> extras of the snapshot (transcript, queue, tools, stats).
    snapshotExtras: Callable[[Session], Awaitable[dict[str, Any]]] | None = None
    #: (sessionId, sessionDir) -> the agent's folders, made and recorded.
    makeFolders: Callable[[str, Any], dict[str, Any]] | None = None
    #: (sessionId, sessionDir) -> the agent's folders as they are (a branch's copy).
    recordFolders: Callable[[str, Any], dict[str, Any]] | None = None
    #: (session) -> raises when a body could not be started now (an agent's
    #: box is unavailable, or its folders were tampered with).
    precheckBody: Callable[[Session], Awaitable[None]] | None = None
    #: (session) -> called after a rename (the mirror follows it).
    afterRename: Callable[[Session], Any] | None = None
    #: (session) -> the mirror's part of the delete answer, if any.
    deleteMirror: Callable[[Session], dict[str, Any] | None] | None = None


@define(eq=False)
class VehicleAPI:
    """
    The host's HTTP surface (spec, "Routes").
    """

    router: ClassVar[Klein] = Klein()
    # A path is matched as it was sent: never redirected (in HTML) to
    # another spelling of it.
    router.url_map.merge_slashes = False
    _log: ClassVar[Logger] = Logger()

    registry: Registry
    secret: str = field(repr=False)
    clock: IReactorTime
    models: ModelCatalog = field(factory=ModelCatalog.empty)
    maxTurns: int = 12
    maxCostUsd: float = 0.25
    leaseTtlMs: int = 30 * 60 * 1000
    keepaliveSeconds: float = 15.0
    #: Graph tools exist (an MCP URL is configured): bodies need a token.
    requireDelegation: bool = False
    hooks: Hooks = field(factory=Hooks)
    #: Public sessions (their doors, limits and ledger), if this host has them.
    public: Public | None = None
    streams: set[EventStream] = field(factory=set)

    def resource(self) -> Any:
        return GuardedResource(self.router.resource(), self.secret)

    # -- plumbing ---------------------------------------------------------

    async def _respond(self, request: IRequest, handler: Handler, *args: Any) -> bytes | None:
        requestId = None
        try:
            status, body = await handler(request, *args)
        except VehicleError as e:
            requestId = getattr(request, "vehicleRequestId", None)
            status, body = e.httpStatus, errorFrame(e, requestId)
        except CancelledError:
            raise
        except Exception:
            self._log.failure("Unexpected failure answering {uri}", uri=request.uri)
            status, body = 500, errorFrame(
                VehicleError("internal", "the host failed to answer; nothing was changed"),
                getattr(request, "vehicleRequestId", None),
            )
        if request.startedWriting:  # a stream that already answered
            return None
        request.setResponseCode(status)
        request.setHeader(b"content-type", b"application/json")
        request.setHeader(b"cache-control", b"no-store")
        return encode(body)

    def _caller(self, request: IRequest) -> Caller:
        caller = authenticate(request, self.secret)
        if caller.public and self.public is None:
            # One rule for every route: a host without public sessions
            # takes no public caller (spec, the error table: not_public).
            raise VehicleError("not_public", "public sessions are off on this host")
        return caller

    def _body(self, request: IRequest, schema: str) -> dict[str, Any]:
        raw = request.content.read() if request.content is not None else b""
        parsed = parseBody(raw, request.getHeader(b"content-type"))
        if isinstance(parsed, dict) and isinstance(parsed.get("requestId"), str):
            request.vehicleRequestId = parsed["requestId"]
        return validate(schema, parsed)

    def _session(self, caller: Caller, sessionId: str) -> Session:
        session = self.registry.find(caller, sessionId)
        if (
            caller.delegatedToken is not None
            and caller.graphId == session.meta.graphId
        ):
            session.delegatedToken = caller.delegatedToken
        if self.public is not None and session.meta.funding == "byok":
            self.public.rememberKey(session, caller)
        return session

    def _frame(
        self, request: IRequest, status: int, result: dict[str, Any], replayed: bool = False
    ) -> tuple[int, dict[str, Any]]:
        requestId = getattr(request, "vehicleRequestId", None)
        return status, frame(result["type"], requestId, result["value"], replayed=replayed)

    # -- routes -------------------------------------------------------------

    @router.route("/health", methods=["GET"])
    def health(self, request: IRequest) -> bytes:
        request.setHeader(b"content-type", b"application/json")
        return encode(
            frame("health", None, {"ok": True, "version": __version__.public()})
        )

    @router.route("/sessions", methods=["POST"])
    def create(self, request: IRequest) -> Deferred:
        return Deferred.fromCoroutine(self._respond(request, self._create))

    async def _create(self, request: IRequest) -> tuple[int, dict[str, Any]]:
        caller = self._caller(request)
        body = self._body(request, "create.request")
        if caller.graphId is None:
            raise VehicleError(
                "graph_required",
                "create a session through a graph's path (/g/<graph>/sessions)",
            )
        if "graphId" in body and body["graphId"] != caller.graphId:
            raise VehicleError(
                "graph_mismatch",
                "graphId names another graph than the path this request came through",
                {"graphId": caller.graphId},
            )
        replayed = self.registry.replayCreation(caller, body["requestId"], body)
        if replayed is not None:
            return self._frame(request, 200, replayed, replayed=True)
        door: dict[str, Any] = {}
        if caller.public:
            if self.public is None:
                raise VehicleError("not_public", "public sessions are off on this host")
            door = self.public.chooseDoor(caller, body)
            model = door["model"]
        else:
            model = self.models.choose(body.get("model"))
        isolation = None
        if body.get("profile") == "agent":
            if caller.role != "owner":
                raise VehicleError(
                    "forbidden_profile",
                    "only the graph's owner may create an agent session",
                    {"role": caller.role},
                )
            if self.hooks.checkProfile is None:
                raise VehicleError(
                    "isolation_unavailable", "this host has no box for agent bodies"
                )
            isolation = await self.hooks.checkProfile(caller, body)
            # The world may have changed while the box was probed.
            replayed = self.registry.replayCreation(caller, body["requestId"], body)
            if replayed is not None:
                return self._frame(request, 200, replayed, replayed=True)
        result = drive.createSession(
            self.registry,
            caller,
            body,
            model=model,
            maxTurns=door.get("maxTurns", self.maxTurns),
            maxCostUsd=door.get("maxCostUsd", self.maxCostUsd),
            isolation=isolation,
            makeFolders=self.hooks.makeFolders,
            funding=door.get("funding"),
            graphs=caller.publicGraphs if caller.public else (),
        )
        if self.public is not None and caller.public:
            session = self.registry.sessions[result["value"]["session"]["sessionId"]]
            self.public.rememberKey(session, caller)
        return self._frame(request, 201, result)

    @router.route("/sessions", methods=["GET"])
    def listSessions(self, request: IRequest) -> Deferred:
        return Deferred.fromCoroutine(self._respond(request, self._list))

    async def _list(self, request: IRequest) -> tuple[int, dict[str, Any]]:
        caller = self._caller(request)
        sessions = [s.summary() for s in self.registry.listFor(caller)]
        return 200, frame("session.list", None, {"sessions": sessions})

    @router.route("/sessions/<sessionId>", methods=["GET"])
    def inspect(self, request: IRequest, sessionId: str) -> Deferred:
        return Deferred.fromCoroutine(self._respond(request, self._inspect, sessionId))

    async def _inspect(self, request: IRequest, sessionId: str) -> tuple[int, dict[str, Any]]:
        caller = self._caller(request)
        session = self._session(caller, sessionId)
        value: dict[str, Any] = {
            "session": session.summary(),
            "commands": list(session.commands.values()),
            "queue": {"steering": [], "followUp": []},
            "chimes": [c for c in session.chimes.values() if c.get("status") == "pending"],
            "transcript": [],
            "tools": None,
            "stats": None,
            "mirror": {"state": "off", "documentId": None, "folder": None,
                       "reason": "the mirror is not configured", "writtenAt": None,
                       "error": None},
        }
        if self.hooks.snapshotExtras is not None:
            value.update(await self.hooks.snapshotExtras(session))
        return 200, frame("session.snapshot", None, value)

    @router.route("/sessions/<sessionId>", methods=["PATCH"])
    def rename(self, request: IRequest, sessionId: str) -> Deferred:
        return Deferred.fromCoroutine(self._respond(request, self._rename, sessionId))

    async def _rename(self, request: IRequest, sessionId: str) -> tuple[int, dict[str, Any]]:
        caller = self._caller(request)
        session = self._session(caller, sessionId)
        body = self._body(request, "rename.request")
        if "requestId" in body:
            replayed = session.replay(body["requestId"], body, "rename")
            if replayed is not None:
                return self._frame(request, 200, replayed, replayed=True)
        result = drive.rename(session, caller, body)
        if self.hooks.afterRename is not None:
            self.hooks.afterRename(session)
        return self._frame(request, 200, result)

    @router.route("/sessions/<sessionId>", methods=["DELETE"])
    def delete(self, request: IRequest, sessionId: str) -> Deferred:
        return Deferred.fromCoroutine(self._respond(request, self._delete, sessionId))

    async def _delete(self, request: IRequest, sessionId: str) -> tuple[int, dict[str, Any]]:
        caller = self._caller(request)
        session = self._session(caller, sessionId)
        self._refuseIfRunning(session)
        if self.hooks.disposeBody is not None:
            await self.hooks.disposeBody(session)
            session = self._session(caller, sessionId)  # still ours, still there
            self._refuseIfRunning(session)
        mirror = self.hooks.deleteMirror(session) if self.hooks.deleteMirror else None
        trashedAs = self.registry.delete(caller, session)
        value: dict[str, Any] = {"sessionId": sessionId, "trashedAs": trashedAs}
        if mirror:
            value["mirror"] = mirror
        return 200, frame("session.deleted", None, value)

    def _refuseIfRunning(self, session: Session) -> None:
        work = drive.openWork(session)
        if work or session.running():
            raise VehicleError(
                "session_running",
                "a run or a command is still under way: abort first",
                {"open": work},
            )

    @router.route("/sessions/<sessionId>/claim", methods=["POST"])
    def claim(self, request: IRequest, sessionId: str) -> Deferred:
        return Deferred.fromCoroutine(self._respond(request, self._claim, sessionId))

    async def _claim(self, request: IRequest, sessionId: str) -> tuple[int, dict[str, Any]]:
        caller = self._caller(request)
        session = self._session(caller, sessionId)
        body = self._body(request, "claim.request")
        replayed = session.replay(body["requestId"], body, "claim")
        if replayed is not None:
            return self._frame(request, 200, replayed, replayed=True)
        drive.checkDriver(session, caller)
        return self._frame(request, 200, drive.claim(session, caller, body, self.leaseTtlMs))

    @router.route("/sessions/<sessionId>/release", methods=["POST"])
    def release(self, request: IRequest, sessionId: str) -> Deferred:
        return Deferred.fromCoroutine(self._respond(request, self._release, sessionId))

    async def _release(self, request: IRequest, sessionId: str) -> tuple[int, dict[str, Any]]:
        caller = self._caller(request)
        session = self._session(caller, sessionId)
        body = self._body(request, "release.request")
        replayed = session.replay(body["requestId"], body, "release")
        if replayed is not None:
            return self._frame(request, 200, replayed, replayed=True)
        return self._frame(request, 200, drive.release(session, caller, body))

    @router.route("/sessions/<sessionId>/commands", methods=["POST"])
    def command(self, request: IRequest, sessionId: str) -> Deferred:
        return Deferred.fromCoroutine(self._respond(request, self._command, sessionId))

    async def _command(self, request: IRequest, sessionId: str) -> tuple[int, dict[str, Any]]:
        caller = self._caller(request)
        session = self._session(caller, sessionId)
        body = self._body(request, "command.request")
        replayed = session.replay(body["requestId"], body, "commands")
        if replayed is not None:
            return self._frame(request, 200, replayed, replayed=True)
        if body["type"] in ("fork", "clone"):
            # Ownership is enough: the source is not touched.
            # The branch and the source's record of it are written by branch().
            result = await branch(self.registry, session, caller, body, self.hooks.recordFolders)
            return self._frame(request, 201, result)
        if (
            self.requireDelegation
            and (body["type"] in TEXT_COMMANDS or body["type"] == "accept_chime")
            and session.bodyState() != "live"
            and session.delegatedToken is None
        ):
            raise VehicleError(
                "delegation_required",
                "this session has no delegation token yet: the session's owner must "
                "send a request through its graph first",
            )
        publicTurn = (
            session.meta.funding is not None
            and body["type"] in TEXT_COMMANDS
            and self.public is not None
        )
        if publicTurn:
            drive.checkDriver(session, caller)
            session.requireLease(caller)
            self.public.checkTurn(session, caller)
        if (
            self.hooks.precheckBody is not None
            and ("text" in body or body["type"] == "accept_chime")
            and session.bodyState() == "dormant"
        ):
            # Refuse now, with the protocol's status, rather than accept a
            # command whose body cannot be made.
            drive.checkDriver(session, caller)
            await self.hooks.precheckBody(session)
            session = self._session(caller, sessionId)
            replayed = session.replay(body["requestId"], body, "commands")
            if replayed is not None:
                return self._frame(request, 200, replayed, replayed=True)
        result = drive.submitCommand(session, caller, body)
        if publicTurn:
            self.public.turnTaken(session, caller)
        return self._frame(request, 202, result)

    @router.route("/sessions/<sessionId>/chimes", methods=["POST"])
    def chime(self, request: IRequest, sessionId: str) -> Deferred:
        return Deferred.fromCoroutine(self._respond(request, self._chime, sessionId))

    async def _chime(self, request: IRequest, sessionId: str) -> tuple[int, dict[str, Any]]:
        caller = self._caller(request)
        session = self.registry.findForChime(caller, sessionId)
        if session.meta.funding is not None or caller.public:
            raise VehicleError("chimes_closed", "a public conversation takes no chimes")
        body = self._body(request, "chime.request")
        replayed = session.replay(body["requestId"], body, "chimes")
        if replayed is not None:
            return self._frame(request, 200, replayed, replayed=True)
        # Under co-drive a chime becomes a command at once, unless that would
        # start a body that may not start now (no delegation token): then it
        # waits for the driver, as under suggest.
        immediate = not (
            self.requireDelegation
            and session.delegatedToken is None
            and session.bodyState() != "live"
        )
        return self._frame(request, 202, drive.chime(session, caller, body, immediate))

    @router.route("/sessions/<sessionId>/capsule", methods=["GET"])
    def capsule(self, request: IRequest, sessionId: str) -> Deferred:
        return Deferred.fromCoroutine(self._respond(request, self._capsule, sessionId))

    async def _capsule(self, request: IRequest, sessionId: str) -> tuple[int, dict[str, Any]]:
        caller = self._caller(request)
        session = self._session(caller, sessionId)
        transcript: list[dict[str, Any]] = []
        if self.hooks.snapshotExtras is not None:
            transcript = (await self.hooks.snapshotExtras(session)).get("transcript") or []
        return 200, frame("session.capsule", None, makeCapsule(session, transcript))

    @router.route("/account", methods=["GET"])
    def account(self, request: IRequest) -> Deferred:
        return Deferred.fromCoroutine(self._respond(request, self._account))

    async def _account(self, request: IRequest) -> tuple[int, dict[str, Any]]:
        caller = self._caller(request)
        if self.public is None:
            if caller.public:
                raise VehicleError("not_public", "public sessions are off on this host")
            return 200, frame("account", None, {"kind": "member", "principal": caller.principal})
        return 200, frame("account", None, self.public.account(caller))

    @router.route("/account/grants", methods=["POST"])
    def grant(self, request: IRequest) -> Deferred:
        return Deferred.fromCoroutine(self._respond(request, self._grant))

    async def _grant(self, request: IRequest) -> tuple[int, dict[str, Any]]:
        caller = self._caller(request)
        if caller.public or caller.principal != "owner":
            raise VehicleError("forbidden", "only this Sophia's owner may grant credit")
        body = self._body(request, "grant.request")
        if self.public is None:
            raise VehicleError("not_public", "public sessions are off on this host")
        value = self.public.grant(caller, body)
        return 200, frame("account.granted", body.get("requestId"), value)

    @router.route("/sessions/<sessionId>/events", methods=["GET"])
    def events(self, request: IRequest, sessionId: str) -> Deferred:
        return Deferred.fromCoroutine(self._respond(request, self._events, sessionId))

    async def _events(self, request: IRequest, sessionId: str) -> tuple[int, dict[str, Any]]:
        caller = self._caller(request)
        session = self._session(caller, sessionId)
        args = request.args
        since_raw = _arg(args, b"since")
        if wantsEventStream(request.getHeader(b"accept")):
            lastId = request.getHeader(b"last-event-id")
            if lastId is not None and lastId.strip():
                since = parseCursor(lastId.decode("latin-1").strip(), "Last-Event-ID", session)
            else:
                since = parseCursor(since_raw, "since", session)
            stream = EventStream(
                request=request,
                session=session,
                since=since,
                clock=self.clock,
                keepaliveSeconds=self.keepaliveSeconds,
            )
            self.streams.add(stream)
            stream.done.addBoth(lambda _: self.streams.discard(stream))
            request.notifyFinish().addBoth(lambda _: stream.stopProducing())
            stream.start()
            try:
                await stream.done
            except CancelledError:
                stream.stopProducing()
            return 200, {}
        since = parseCursor(since_raw, "since", session)
        waitMs = parseWait(_arg(args, b"waitMs"))
        value = await longPoll(session, since, waitMs, self.clock)
        return 200, frame("watch.completed", None, value)

    # -- errors outside the routes -----------------------------------------

    @router.handle_errors(NotFound)
    def notFound(self, request: IRequest, failure: Any) -> bytes:
        return self._plainError(request, VehicleError("not_found", "no such route"))

    @router.handle_errors(MethodNotAllowed)
    def notAllowed(self, request: IRequest, failure: Any) -> bytes:
        allowed = sorted(failure.value.valid_methods or ())
        return self._plainError(
            request,
            VehicleError(
                "method_not_allowed",
                "this route does not take that method",
                {"allowed": allowed},
            ),
            {b"allow": ", ".join(allowed).encode("ascii")},
        )

    @router.handle_errors(HTTPException)
    def otherHttpError(self, request: IRequest, failure: Any) -> bytes:
        # Whatever else the router refuses (a redirect it would make, a
        # request it cannot read) names no route of this host.
        return self._plainError(request, VehicleError("not_found", "no such route"))

    @router.handle_errors(Exception)
    def unexpected(self, request: IRequest, failure: Any) -> bytes:
        self._log.failure("Unexpected failure routing {uri}", failure, uri=request.uri)
        return self._plainError(
            request, VehicleError("internal", "the host failed to answer; nothing was changed")
        )

    def _plainError(
        self, request: IRequest, error: VehicleError, headers: dict[bytes, bytes] | None = None
    ) -> bytes:
        try:
            checkSecret(request, self.secret)
        except VehicleError as e:
            error, headers = e, None
        for name, value in (headers or {}).items():
            request.setHeader(name, value)
        request.setResponseCode(error.httpStatus)
        request.setHeader(b"content-type", b"application/json")
        request.setHeader(b"cache-control", b"no-store")
        return encode(errorFrame(error))

    def stopStreams(self) -> None:
        for stream in list(self.streams):
            stream.stop()


def _arg(args: dict[bytes, list[bytes]], name: bytes) -> str | None:
    values = args.get(name)
    if not values:
        return None
    return values[-1].decode("utf-8", "replace")
