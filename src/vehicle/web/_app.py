# -*- test-case-name: tests.unit.test_web -*-
"""
The Klein app: thin routes.  Each authenticates the caller, parses and
validates the request JSON, hands it to the host's drive step
(L{Drive}: replay, rules, accept) and renders the answer as one frame.
Errors of every kind are mapped once (L{answered}) to the error frame;
nothing escapes as a traceback.
"""

from __future__ import annotations

import functools
from weakref import WeakKeyDictionary
from typing import Any, Awaitable, Callable, ClassVar, Concatenate, ParamSpec, Protocol, TypeVar, cast

from attrs import define, field
from klein import Klein
from twisted.internet.defer import CancelledError, Deferred
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.web.iweb import IRequest
from twisted.web.resource import IResource
from twisted.web.server import Request
from werkzeug.exceptions import HTTPException, MethodNotAllowed, NotFound

from vehicle import __version__
from vehicle.errors import VehicleError, answerError, answerFrame, encode, errorFrame
from vehicle.host import Drive, Replayed
from vehicle.metrics import Metrics, unserved
from vehicle.protocol import (
    BodyView,
    ChimeRequest,
    ClaimRequest,
    CommandRequest,
    CreateRequest,
    GrantRequest,
    JSONObject,
    ReleaseRequest,
    RenameRequest,
    Snapshot,
    fromRequest,
    textOf,
    toJSON,
)
from vehicle.public import Public
from vehicle.session import Caller, Registry, Session, makeCapsule
from vehicle.web._frames import encodedFrame, frame, parsePayload, validate
from vehicle.web._metered import MeteredResource, routeTaken
from vehicle.web._routing import RouterResource
from vehicle.web._trust import GuardedResource, authenticate, checkSecret
from vehicle.web._watch import (
    STALL_SECONDS,
    EventStream,
    Fanout,
    longPoll,
    parseCursor,
    parseWait,
    wantsEventStream,
    watchFrame,
)


#: What a route's coroutine gives back: the HTTP status and the frame (or
#: its bytes, made of parts each encoded once).
Answered = tuple[int, JSONObject | bytes]

P = ParamSpec("P")
R = TypeVar("R")


class Snapshots(Protocol):
    """
    What the snapshot of a session shows beyond the session package: its
    transcript, pi's queue, tools and stats, the mirror (the host's bodies).
    """

    async def snapshotFor(self, session: Session) -> BodyView: ...


def answered(
    route: Callable[Concatenate[VehicleAPI, Request, P], Awaitable[Answered]]
) -> Callable[Concatenate[VehicleAPI, Request, P], Deferred[bytes | None]]:
    """
    The one error mapping of every route: a replayed request answers its
    frame again, a L{VehicleError} its error frame, anything else the
    C{internal} error frame (and a log line); a stream that already
    answered is left as it is.
    """

    @functools.wraps(route)
    def respond(
        self: VehicleAPI, request: Request, /, *args: P.args, **kw: P.kwargs
    ) -> Deferred[bytes | None]:
        return Deferred.fromCoroutine(self._answer(request, route(self, request, *args, **kw)))

    return respond


#: The app's router (L{VehicleAPI.router}), served by L{RouterResource}.  A
#: path is matched as it was sent: never redirected (in HTML) to another
#: spelling of it.
_router = Klein()
_router.url_map.merge_slashes = False


def route(
    pattern: str, method: str
) -> Callable[[Callable[Concatenate[VehicleAPI, Request, P], R]],
              Callable[Concatenate[VehicleAPI, Request, P], R]]:
    """
    A route of the app: C{method} on C{pattern}, registered with the router;
    the request it takes is counted under C{pattern} (L{routeTaken}).
    """

    def register(
        handler: Callable[Concatenate[VehicleAPI, Request, P], R]
    ) -> Callable[Concatenate[VehicleAPI, Request, P], R]:
        @functools.wraps(handler)
        def taken(self: VehicleAPI, request: Request, /, *args: P.args, **kw: P.kwargs) -> R:
            routeTaken(request, pattern)
            return handler(self, request, *args, **kw)

        # Klein types a handler as one of its renderables; these are.
        _router.route(pattern, methods=[method])(cast(Any, taken))
        return taken

    return register


@define(eq=False)
class VehicleAPI:
    """
    The host's HTTP surface (spec, "Routes").
    """

    router: ClassVar[Klein] = _router
    _log: ClassVar[Logger] = Logger()

    drive: Drive
    secret: str = field(repr=False)
    clock: IReactorTime
    snapshots: Snapshots
    keepaliveSeconds: float = 15.0
    #: Public sessions (their doors, limits and ledger), if this host has them.
    public: Public | None = None
    streams: set[EventStream] = field(factory=set)
    #: Where every request answered is counted.
    metrics: Metrics = field(factory=unserved)
    #: How long a stream whose client reads nothing is kept before it is cut.
    stallSeconds: float = STALL_SECONDS
    #: Each watched session's fan-out (its SSE streams), by session id.
    fanouts: dict[str, Fanout] = field(factory=dict)
    #: The C{requestId} of each request whose payload said one, for its frames.
    _requestIds: WeakKeyDictionary[Request, str] = field(init=False, factory=WeakKeyDictionary)

    @property
    def registry(self) -> Registry:
        return self.drive.registry

    def resource(self) -> IResource:
        guarded = GuardedResource(RouterResource(self.router), self.secret)
        return MeteredResource(guarded, self.metrics, self.clock)

    # -- trust, parse, answer ----------------------------------------------

    async def _answer(self, request: Request, route: Awaitable[Answered]) -> bytes | None:
        try:
            status, answer = await route
        except Replayed as replayed:
            status, answer = 200, self._frame(request, replayed.sent, replayed=True)
        except VehicleError as e:
            status, answer = e.httpStatus, errorFrame(e, self._requestId(request))
        except CancelledError:
            raise
        except Exception:
            self._log.failure("Unexpected failure answering {uri}", uri=request.uri,
                              requestId=self._requestId(request))
            status, answer = 500, errorFrame(
                VehicleError("internal", "the host failed to answer; nothing was changed"),
                self._requestId(request),
            )
        if request.startedWriting:  # a stream that already answered
            return None
        return answerFrame(request, status, answer)

    def _requestId(self, request: Request) -> str | None:
        return self._requestIds.get(request)

    def _caller(self, request: Request) -> Caller:
        caller = authenticate(request, self.secret)
        if caller.public and self.public is None:
            # One rule for every route: a host without public sessions
            # takes no public caller (spec, the error table: not_public).
            raise VehicleError("not_public", "public sessions are off on this host")
        return caller

    def _parse(self, request: Request, schema: str, kind: type[R]) -> R:
        """
        The request JSON, validated against its schema (its C{requestId}
        is remembered for the error frame), then read as its value, once.
        """
        raw = request.content.read() if request.content is not None else b""
        parsed = parsePayload(raw, request.getHeader(b"content-type"))
        requestId = textOf(parsed.get("requestId")) if isinstance(parsed, dict) else None
        if requestId is not None:
            self._requestIds[request] = requestId
        return fromRequest(validate(schema, parsed), kind)

    async def _onSession(
        self,
        request: Request,
        sessionId: str,
        schema: str,
        kind: type[R],
        verb: Callable[[Session, Caller, R], Awaitable[JSONObject]],
    ) -> Answered:
        """
        A verb on one session: trust, find (C{not_found} before a bad
        request), parse, then the drive step; answered C{200} once durable.
        """
        caller = self._caller(request)
        session = self.drive.find(caller, sessionId)
        sent = await verb(session, caller, self._parse(request, schema, kind))
        return 200, self._frame(request, sent)

    def _frame(self, request: Request, sent: JSONObject, replayed: bool = False) -> JSONObject:
        """
        The frame of an answer as it was sent (and remembered).
        """
        return frame(textOf(sent.get("type")) or "", self._requestId(request), sent.get("value"),
                     replayed=replayed)

    # -- routes -------------------------------------------------------------

    @route("/health", "GET")
    def health(self, request: Request) -> bytes:
        request.setHeader(b"content-type", b"application/json")
        return encode(frame("health", None, {"ok": True, "version": __version__.public()}))

    @route("/sessions", "POST")
    @answered
    async def create(self, request: Request) -> Answered:
        caller = self._caller(request)
        sent = await self.drive.create(
            caller, self._parse(request, "create.request", CreateRequest)
        )
        return 201, self._frame(request, sent)

    @route("/sessions", "GET")
    @answered
    async def listSessions(self, request: Request) -> Answered:
        caller = self._caller(request)
        # Each session's summary is encoded when it changed, not at every
        # list (the frame SessionList makes, byte for byte).
        sessions = [s.listed(encode) for s in self.registry.listFor(caller)]
        return 200, encodedFrame("session.list", {"sessions": []}, "sessions", sessions)

    @route("/sessions/<sessionId>", "GET")
    @answered
    async def inspect(self, request: Request, sessionId: str) -> Answered:
        session = self.drive.find(self._caller(request), sessionId)
        body = await self.snapshots.snapshotFor(session)
        snapshot = Snapshot(
            session=session.summary(),
            commands=tuple(session.commands()),
            queue=body.queue,
            chimes=tuple(session.waitingChimes()),
            transcript=body.transcript,
            tools=body.tools,
            stats=body.stats,
            mirror=body.mirror,
        )
        return 200, frame("session.snapshot", None, toJSON(snapshot))

    @route("/sessions/<sessionId>", "PATCH")
    @answered
    async def rename(self, request: Request, sessionId: str) -> Answered:
        return await self._onSession(
            request, sessionId, "rename.request", RenameRequest, self.drive.rename
        )

    @route("/sessions/<sessionId>", "DELETE")
    @answered
    async def delete(self, request: Request, sessionId: str) -> Answered:
        caller = self._caller(request)
        deleted = await self.drive.delete(self.drive.find(caller, sessionId), caller)
        return 200, frame("session.deleted", None, toJSON(deleted))

    @route("/sessions/<sessionId>/claim", "POST")
    @answered
    async def claim(self, request: Request, sessionId: str) -> Answered:
        return await self._onSession(
            request, sessionId, "claim.request", ClaimRequest, self.drive.claim
        )

    @route("/sessions/<sessionId>/release", "POST")
    @answered
    async def release(self, request: Request, sessionId: str) -> Answered:
        return await self._onSession(
            request, sessionId, "release.request", ReleaseRequest, self.drive.release
        )

    @route("/sessions/<sessionId>/commands", "POST")
    @answered
    async def command(self, request: Request, sessionId: str) -> Answered:
        caller = self._caller(request)
        session = self.drive.find(caller, sessionId)
        status, sent = await self.drive.command(
            session, caller, self._parse(request, "command.request", CommandRequest)
        )
        return status, self._frame(request, sent)

    @route("/sessions/<sessionId>/chimes", "POST")
    @answered
    async def chime(self, request: Request, sessionId: str) -> Answered:
        caller = self._caller(request)
        session = self.drive.findForChime(caller, sessionId)
        sent = await self.drive.chime(
            session, caller, self._parse(request, "chime.request", ChimeRequest)
        )
        return 202, self._frame(request, sent)

    @route("/sessions/<sessionId>/capsule", "GET")
    @answered
    async def capsule(self, request: Request, sessionId: str) -> Answered:
        session = self.drive.find(self._caller(request), sessionId)
        transcript = (await self.snapshots.snapshotFor(session)).transcript
        return 200, frame("session.capsule", None, toJSON(makeCapsule(session, transcript)))

    @route("/account", "GET")
    @answered
    async def account(self, request: Request) -> Answered:
        caller = self._caller(request)
        if self.public is None:
            return 200, frame("account", None, {"kind": "member", "principal": caller.principal})
        return 200, frame("account", None, await self.public.account(caller))

    @route("/account/grants", "POST")
    @answered
    async def grant(self, request: Request) -> Answered:
        caller = self._caller(request)
        if caller.public or caller.principal != "owner":
            raise VehicleError("forbidden", "only this Sophia's owner may grant credit")
        grant = self._parse(request, "grant.request", GrantRequest)
        if self.public is None:
            raise VehicleError("not_public", "public sessions are off on this host")
        value = await self.public.grant(caller, grant)
        return 200, frame("account.granted", grant.requestId, value)

    @route("/sessions/<sessionId>/events", "GET")
    @answered
    async def events(self, request: Request, sessionId: str) -> Answered:
        session = self.drive.find(self._caller(request), sessionId)
        since = _arg(request.args or {}, b"since")
        if wantsEventStream(request.getHeader(b"accept")):
            lastId = request.getHeader(b"last-event-id")
            if lastId is not None and lastId.strip():
                start = parseCursor(lastId.decode("latin-1").strip(), "Last-Event-ID", session)
            else:
                start = parseCursor(since, "since", session)
            await self._stream(request, session, start)
            return 200, {}
        waitMs = parseWait(_arg(request.args or {}, b"waitMs"))
        entries, cursor, more = await longPoll(
            session, parseCursor(since, "since", session), waitMs, self.clock
        )
        return 200, watchFrame(entries, cursor, more)

    async def _stream(self, request: Request, session: Session, since: int) -> None:
        fanout = self.fanouts.get(session.sessionId)
        if fanout is None or fanout.session is not session:
            fanout = self.fanouts[session.sessionId] = Fanout(session=session, clock=self.clock)
        stream = EventStream(
            request=request,
            session=session,
            since=since,
            clock=self.clock,
            keepaliveSeconds=self.keepaliveSeconds,
            stallSeconds=self.stallSeconds,
            fanout=fanout,
        )
        self.streams.add(stream)

        def ended(_: object) -> None:
            self.streams.discard(stream)
            if not fanout.streams and self.fanouts.get(session.sessionId) is fanout:
                del self.fanouts[session.sessionId]

        stream.done.addBoth(ended)
        request.notifyFinish().addBoth(lambda _: stream.stopProducing())
        stream.start()
        try:
            await stream.done
        except CancelledError:
            stream.stopProducing()

    # -- errors outside the routes -----------------------------------------

    @router.handle_errors(NotFound)
    def notFound(self, request: IRequest, failure: Failure) -> bytes:
        return self._plainError(request, VehicleError("not_found", "no such route"))

    @router.handle_errors(MethodNotAllowed)
    def notAllowed(self, request: IRequest, failure: Failure) -> bytes:
        error = failure.value
        allowed = sorted(error.valid_methods or ()) if isinstance(error, MethodNotAllowed) else []
        return self._plainError(
            request,
            VehicleError(
                "method_not_allowed",
                "this route does not take that method",
                {"allowed": list(allowed)},
            ),
            {b"allow": ", ".join(allowed).encode("ascii")},
        )

    @router.handle_errors(HTTPException)
    def otherHttpError(self, request: IRequest, failure: Failure) -> bytes:
        # Whatever else the router refuses (a redirect it would make, a
        # request it cannot read) names no route of this host.
        return self._plainError(request, VehicleError("not_found", "no such route"))

    @router.handle_errors(Exception)
    def unexpected(self, request: IRequest, failure: Failure) -> bytes:
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
        return answerError(request, error)

    def stopStreams(self) -> None:
        for stream in list(self.streams):
            stream.stop()


def _arg(args: dict[bytes, list[bytes]], name: bytes) -> str | None:
    values = args.get(name)
    if not values:
        return None
    return values[-1].decode("utf-8", "replace")
