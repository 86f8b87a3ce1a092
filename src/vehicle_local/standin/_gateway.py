# -*- test-case-name: tests.unit.test_gardend -*-
"""
The stand-in's gateway: authenticates the caller (a member, or in public
mode a visitor or Sophia account on a public graph), drops every identity
header the caller sent, mints gardend's set (secret, principal, roles, graph,
delegation token, caller kind) and forwards C{/services/vehicle/...} to the
host, streaming the answer back as it comes. Also mounts C{/health} and
C{/mcp}.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from typing import ClassVar, Optional, TypedDict
from urllib.parse import unquote

from attrs import define, field, frozen
from klein import Klein
from twisted.internet.defer import CancelledError
from twisted.logger import Logger
from twisted.web.client import HTTPConnectionPool
from twisted.web.http_headers import Headers
from twisted.web.server import Request
from treq.client import HTTPClient

from vehicle._http import httpClient
from vehicle._reactors import IClientReactor
from vehicle._relay import copyAnswer, passOn, relayBody
from vehicle.protocol import JSON
from vehicle_local.standin._config import Account, ClientToken, Config
from vehicle_local.standin._delegation import Delegations
from vehicle_local.standin._mcp import MCPEndpoint

#: The mount gardend gives the service.
MOUNT = b"/services/vehicle"

#: The service id (the C{via} of its delegated writes).
SERVICE_ID = "vehicle"

#: What an C{X-Visitor-Id} may be: one printable token.
_VISITOR_ID = re.compile(r"^[\x21-\x7e]{1,200}$")

#: The caller's own headers that reach the host; every other one is dropped.
PASSED = (b"accept", b"content-type", b"last-event-id", b"x-vehicle-client-id")

#: Answer headers that are the connection's, not the answer's.
_HOP = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"transfer-encoding",
        b"content-length",
        b"te",
        b"trailer",
        b"upgrade",
        b"proxy-authenticate",
        b"proxy-authorization",
        b"date",
        b"server",
    }
)


@frozen(kw_only=True)
class Caller:
    """
    Who the gateway let in.

    @ivar principal: the C{x-user-id} it mints.
    @ivar token: the client token, or L{None} for the master key (or a
        public caller).
    @ivar kind: C{member} (master key, client token), or in public mode
        C{anonymous} (a visitor) or C{account} (a Sophia account).
    @ivar account: the account, for C{kind="account"}.
    @ivar publicGraphs: for a public caller, every public graph: it is a
        viewer of these and of nothing else.
    """

    principal: str
    token: Optional[ClientToken]
    kind: str = "member"
    account: Optional[Account] = None
    publicGraphs: tuple[str, ...] = ()

    @property
    def public(self) -> bool:
        """
        Whether this is a public caller (a visitor or an account).
        """
        return self.kind != "member"

    def callerRole(self) -> str:
        """
        The caller's role from its grant (the highest, for a token; always
        C{viewer} for a public caller).
        """
        if self.public:
            return "viewer"
        return "owner" if self.token is None else self.token.highestRole()

    def roleOn(self, graphId: str) -> Optional[str]:
        """
        The caller's role on C{graphId}, or L{None} without a grant.
        """
        if self.public:
            return "viewer" if graphId in self.publicGraphs else None
        if self.token is None:
            return "owner"
        return self.token.grants.get(graphId)


class SeenRequest(TypedDict):
    """
    A request the gateway forwarded, as a test reads it.

    @ivar headers: the headers that went to the host (lower-case names).
    """

    method: str
    path: str
    headers: dict[str, str]


class _Refusal(Exception):
    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(status, code, message)
        self.status = status
        self.code = code
        self.message = message


def _json(request: Request, status: int, body: JSON) -> bytes:
    request.setResponseCode(status)
    request.setHeader(b"content-type", b"application/json")
    return json.dumps(body).encode("utf-8")


@define
class Gateway:
    """
    gardend's way in, for one service.

    @ivar serviceUrl: where the host listens (from the config; settable once
        the host's port is known).
    @ivar requestsSeen: every forwarded request, as C{{"method", "path",
        "headers"}} with the headers that went to the host (lower-case names).
    """

    config: Config
    mcp: MCPEndpoint
    delegations: Delegations
    reactor: IClientReactor
    serviceUrl: str = ""
    requestsSeen: list[SeenRequest] = field(factory=list)
    client: Optional[HTTPClient] = None

    router: ClassVar[Klein] = Klein()
    _log: ClassVar[Logger] = Logger()

    def __attrs_post_init__(self) -> None:
        if not self.serviceUrl:
            self.serviceUrl = self.config.service.url
        if self.client is None:
            pool = HTTPConnectionPool(self.reactor, persistent=False)
            # Its connections to the host send each write at once.
            self.client = httpClient(self.reactor, pool=pool)

    # who

    def authenticate(self, request: Request, graphId: Optional[str] = None) -> Caller:
        """
        The caller named by C{Authorization: Bearer ...}: a member (the
        master key or a client token); or, when C{graphId} is a public graph
        of a gardend in public mode, a Sophia account (a bearer that is an
        account's ID token) or, with no bearer at all, a visitor.

        @raise _Refusal: 401 without a credential the gateway knows (a
            bearer it does not know is refused even on a public graph, so an
            expired sign-in is never quietly downgraded to a visitor).
        """
        header = request.getHeader(b"authorization") or b""
        scheme, _, credential = header.decode("latin-1").partition(" ")
        credential = credential.strip()
        bearer = credential if scheme.lower() == "bearer" and credential else None
        if bearer is not None:
            if _same(bearer, self.config.masterKey):
                return Caller(principal="owner", token=None)
            for token in self.config.tokens:
                if _same(bearer, token.secret):
                    return Caller(principal="token:" + token.id, token=token)
        public = self.config.public
        if public.enabled:
            if bearer is not None:
                for account in public.accounts:
                    if _same(bearer, account.token):
                        return Caller(
                            principal=account.principal,
                            token=None,
                            kind="account",
                            account=account,
                            publicGraphs=public.graphs,
                        )
                raise _Refusal(
                    401, "unauthorized", "the bearer is no credential of this Sophia"
                )
            if public.serves(graphId) and not header:
                return Caller(
                    principal=self.visitorPrincipal(request),
                    token=None,
                    kind="anonymous",
                    publicGraphs=public.graphs,
                )
        raise _Refusal(401, "unauthorized", "a master key or client token is required")

    def visitorPrincipal(self, request: Request) -> str:
        """
        A visitor's principal, C{anon:<hash>}: from its C{X-Visitor-Id}, else
        from its address and user agent.  The hash is keyed by a secret of
        this gardend (derived from the master key), so it is stable across
        restarts and tells nothing of the id or the address.

        @raise _Refusal: 400 for an C{X-Visitor-Id} that is not one printable
            token of at most 200 characters.
        """
        raw = request.getHeader(b"x-visitor-id")
        if raw is not None:
            visitorId = raw.decode("latin-1")
            if not _VISITOR_ID.match(visitorId):
                raise _Refusal(
                    400,
                    "invalid_visitor_id",
                    "X-Visitor-Id must be one printable token of 1 to 200 characters",
                )
            material = "id\0" + visitorId
        else:
            address = getattr(request.getClientAddress(), "host", "") or ""
            agent = (request.getHeader(b"user-agent") or b"").decode("latin-1")
            material = "address\0" + address + "\0" + agent
        key = hmac.new(
            self.config.masterKey.encode("utf-8"), b"gardend visitor principal", hashlib.sha256
        ).digest()
        digest = hmac.new(key, material.encode("utf-8"), hashlib.sha256).hexdigest()
        return "anon:" + digest[:32]

    # routes

    @router.route("/health", methods=["GET"])
    def health(self, request: Request) -> bytes:
        """
        The gateway's own health.
        """
        return _json(request, 200, {"ok": True})

    @router.route("/mcp")
    def mcpRoute(self, request: Request) -> bytes:
        """
        gardend's MCP endpoint: C{POST} only.
        """
        if request.method != b"POST":
            request.setHeader(b"allow", b"POST")
            return _json(
                request,
                405,
                {
                    "ok": False,
                    "error": {"code": "method_not_allowed", "message": "POST only"},
                },
            )
        return self.mcp.handle(request)

    @router.route("/services/vehicle", branch=True)
    async def forward(self, request: Request) -> Optional[bytes]:
        """
        Forward a request for the service to the host.
        """
        try:
            return await self._forward(request)
        except _Refusal as refusal:
            return _json(
                request,
                refusal.status,
                {
                    "ok": False,
                    "error": {"code": refusal.code, "message": refusal.message},
                },
            )

    def mintedHeaders(self, caller: Caller, graphId: Optional[str]) -> dict[str, str]:
        """
        gardend's identity headers for C{caller} on C{graphId}: the secret,
        the principal and roles, the graph, a delegation token, and for a
        public caller its kind (and account).

        @raise _Refusal: 403 for a caller with no grant on C{graphId}, or a
            public caller off the public graphs.
        """
        service = self.config.service
        minted = {
            "x-internal-service": service.secret,
            "x-user-id": caller.principal,
            "x-sophia-caller-role": caller.callerRole(),
        }
        if caller.public:
            if graphId is None or caller.roleOn(graphId) is None:
                raise _Refusal(
                    403, "forbidden", "public callers reach the public graphs only"
                )
            minted["x-sophia-caller-kind"] = caller.kind
            minted["x-sophia-public-graphs"] = ",".join(caller.publicGraphs)
            if caller.account is not None:
                minted["x-sophia-account-email"] = caller.account.email
                minted["x-sophia-account-email-verified"] = (
                    "true" if caller.account.emailVerified else "false"
                )
        if graphId is not None:
            role = caller.roleOn(graphId)
            if role is None:
                raise _Refusal(403, "forbidden", "no grant on this graph")
            minted["x-graph-id"] = graphId
            minted["x-sophia-graph-role"] = role
            if service.delegateCaller:
                minted["x-sophia-delegated-token"] = self.delegations.mint(
                    caller.principal,
                    graphId,
                    role,
                    SERVICE_ID,
                    reads=caller.publicGraphs,
                )
        return minted

    def _outgoing(self, request: Request, caller: Caller, graphId: Optional[str]) -> Headers:
        """
        The headers the host is sent: the caller's own that pass
        (L{PASSED}), then gardend's (L{mintedHeaders}).
        """
        headers = Headers()
        service = self.config.service
        passed = PASSED + ((b"x-model-key",) if service.acceptsModelKey else ())
        for name in passed:
            values = request.requestHeaders.getRawHeaders(name)
            if values:
                headers.setRawHeaders(name, values)
        for key, value in self.mintedHeaders(caller, graphId).items():
            headers.setRawHeaders(key.encode("ascii"), [value])  # bytes, as Twisted names headers
        return headers

    async def _forward(self, request: Request) -> Optional[bytes]:
        path, _, query = request.uri.partition(b"?")
        rest = path[len(MOUNT) :]
        graphId: Optional[str] = None
        segments = rest.split(b"/")
        if len(segments) >= 3 and segments[0] == b"" and segments[1] == b"g":
            graphId = unquote(segments[2].decode("utf-8", "replace"))
            rest = b"/" + b"/".join(segments[3:])
        caller = self.authenticate(request, graphId)
        if path[len(MOUNT) :] and not path[len(MOUNT) :].startswith(b"/"):
            raise _Refusal(404, "not_found", "no such service")
        if graphId is not None and (
            not graphId or graphId not in self.config.knownGraphs()
        ):
            raise _Refusal(404, "not_found", "no such graph")
        tail = (rest or b"/") + (b"?" + query if query else b"")
        headers = self._outgoing(request, caller, graphId)
        target = self.serviceUrl.encode("ascii") + tail
        self.requestsSeen.append(
            {
                "method": request.method.decode("ascii"),
                "path": tail.decode("utf-8", "replace"),
                "headers": {
                    k.decode("latin-1").lower(): v[-1].decode("latin-1")
                    for k, v in headers.getAllRawHeaders()
                },
            }
        )
        assert self.client is not None
        try:
            response = await passOn(self.client, request, target, headers)
        except CancelledError:
            raise
        except Exception as e:
            self._log.error("The service did not answer: {error}", error=str(e))
            raise _Refusal(502, "service_unavailable", "the service did not answer")
        copyAnswer(response, request, _HOP)
        try:
            await relayBody(response, request).done
        except CancelledError:
            raise
        except Exception as e:
            # Headers are gone already: cut the connection so the caller
            # sees a truncated answer rather than a complete one.
            self._log.error("The service's answer broke off: {error}", error=str(e))
            request.loseConnection()
        return None


def _same(given: str, expected: str) -> bool:
    return hmac.compare_digest(given.encode("utf-8"), expected.encode("utf-8"))
