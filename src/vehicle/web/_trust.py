# -*- test-case-name: tests.unit.test_web -*-
"""
Trust: gardend's secret and the identity headers it mints.  Identity headers
are believed only once the secret matched (compared in constant time).
"""

from __future__ import annotations

import hmac
import re
from typing import Any

from attrs import evolve
from twisted.web.iweb import IRequest
from twisted.web.resource import Resource

from vehicle.errors import VehicleError, answerError
from vehicle.protocol import Role
from vehicle.session import CALLER_KINDS, ROLES, Caller, CallerKind


_PRINTABLE = re.compile(r"^[^\x00-\x1f\x7f]{1,320}$")
_GRAPH = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,199}$")
_CLIENT = re.compile(r"^[\x21-\x7e]{1,200}$")
_MODEL_KEY = re.compile(r"^[\x21-\x7e]{8,512}$")


#: A request's headers as trust reads them: each name in lower case, its
#: last value (as C{getHeader} gives it), as text.
Said = dict[str, str]


def _said(request: IRequest) -> Said:
    """
    The request's headers, read in one pass.
    """
    return {
        name.decode("latin-1").lower(): values[-1].decode("utf-8", "replace")
        for name, values in request.requestHeaders.getAllRawHeaders()
        if values
    }


def checkSecret(request: IRequest, secret: str) -> None:
    """
    @raise VehicleError: C{unauthorized} unless C{x-internal-service} is
        gardend's secret.
    """
    given = request.getHeader(b"x-internal-service") or b""
    if not hmac.compare_digest(given, secret.encode("utf-8")):
        raise VehicleError(
            "unauthorized", "this host is reached through gardend only (x-internal-service)"
        )


#: The most callers L{authenticate} keeps, by what their requests said.
KNOWN_MOST = 256

#: The delegation token's header: gardend mints a new token for each
#: request on a graph, so it is never part of what a caller is kept by, and
#: a kept caller never holds one: each request's own is put on the caller
#: found for the rest of its headers.
_TOKEN = b"X-Sophia-Delegated-Token"

#: The headers a caller is not kept by: the body's length, the token.
_UNHEARD = frozenset([b"Content-Length", _TOKEN])

#: Callers read before, by their requests' headers (L{_heard}): gardend
#: sends one person's same headers with each of their requests (but the
#: token), and reading them again was a fortieth of a durable request.  A
#: caller with a model key is never kept, nor any token: a secret is held
#: no longer than its request needs it.  Cleared when full.
_known: dict[tuple[tuple[bytes, bytes], ...], Caller] = {}


def _heard(request: IRequest) -> tuple[tuple[bytes, bytes], ...]:
    """
    Every header of C{request} trust could read (each name's last value,
    as L{_said} reads it), but those of L{_UNHEARD}.
    """
    return tuple([(name, values[-1]) for name, values in request.requestHeaders.getAllRawHeaders()
                  if values and name not in _UNHEARD])


def _tokenOf(request: IRequest, graphId: str | None) -> str | None:
    """
    The request's delegation token as its caller holds it: only on a
    graph, and none when the header is empty.
    """
    values = request.requestHeaders.getRawHeaders(_TOKEN)
    if graphId is None or not values:
        return None
    return values[-1].decode("utf-8", "replace") or None


def authenticate(request: IRequest, secret: str) -> Caller:
    """
    Check the secret, then read who calls (L{readCaller}), or find them
    read before from the very same headers and give them this request's
    delegation token.

    @raise VehicleError: C{unauthorized}, C{identity_required},
        C{invalid_identity} or C{invalid_model_key}.
    """
    checkSecret(request, secret)
    heard = _heard(request)
    kept = _known.get(heard)
    if kept is not None:
        token = _tokenOf(request, kept.graphId)
        return kept if token is None else evolve(kept, delegatedToken=token)
    caller = readCaller(request)
    if caller.modelKey is None:
        if len(_known) >= KNOWN_MOST:
            _known.clear()
        _known[heard] = evolve(caller, delegatedToken=None) if caller.delegatedToken else caller
    return caller


def readCaller(request: IRequest) -> Caller:
    """
    Read who calls from the identity headers (each header in turn: the
    first that is missing or malformed is the refusal); the secret
    matched already.

    @raise VehicleError: C{identity_required}, C{invalid_identity} or
        C{invalid_model_key}.
    """
    said = _said(request)
    principal = _principal(said)
    graphId, role = _graphAndRole(said)
    clientId = _clientId(said, principal)
    kind = _callerKind(said)
    modelKey = _modelKey(said)
    publicGraphs: tuple[str, ...] = ()
    if kind != "member":
        # Public callers are always viewers, whatever else was said.
        role = "viewer"
        raw = said.get("x-sophia-public-graphs") or ""
        publicGraphs = tuple(g.strip() for g in raw.split(",") if _GRAPH.match(g.strip()))
    return Caller(
        principal=principal,
        clientId=clientId,
        role=role,
        graphId=graphId,
        delegatedToken=_tokenOf(request, graphId),
        kind=kind,
        email=said.get("x-sophia-account-email") or None,
        emailVerified=(said.get("x-sophia-account-email-verified") or "").lower()
        in ("true", "1", "yes"),
        publicGraphs=publicGraphs,
        modelKey=modelKey,
    )


def _principal(said: Said) -> str:
    principal = said.get("x-user-id")
    if principal is None or principal == "":
        raise VehicleError("identity_required", "x-user-id is missing")
    if not _PRINTABLE.match(principal) or principal != principal.strip():
        raise VehicleError("invalid_identity", "x-user-id is malformed", {"header": "x-user-id"})
    return principal


def _graphAndRole(said: Said) -> tuple[str | None, Role]:
    """
    The bound graph (L{None} on an unbound path) and the caller's role: on
    the graph when there is one, else the caller's own.
    """
    graphId = said.get("x-graph-id")
    if graphId is not None:
        if not _GRAPH.match(graphId):
            raise VehicleError(
                "invalid_identity", "x-graph-id is malformed", {"header": "x-graph-id"}
            )
        roleHeader = "x-sophia-graph-role"
    else:
        roleHeader = "x-sophia-caller-role"
    named = said.get(roleHeader)
    if named is None or named == "":
        raise VehicleError("identity_required", f"{roleHeader} is missing", {"header": roleHeader})
    role = ROLES.get(named)
    if role is None:
        raise VehicleError(
            "invalid_identity",
            f"{roleHeader} must be owner, editor or viewer",
            {"header": roleHeader},
        )
    return graphId, role


def _clientId(said: Said, principal: str) -> str:
    clientId = said.get("x-vehicle-client-id")
    if clientId is None or clientId == "":
        return principal
    if not _CLIENT.match(clientId):
        raise VehicleError(
            "invalid_identity",
            "x-vehicle-client-id must be 1 to 200 printable characters without spaces",
            {"header": "x-vehicle-client-id"},
        )
    return clientId


def _callerKind(said: Said) -> CallerKind:
    kind = CALLER_KINDS.get(said.get("x-sophia-caller-kind") or "member")
    if kind is None:
        raise VehicleError(
            "invalid_identity",
            "x-sophia-caller-kind must be anonymous or account",
            {"header": "x-sophia-caller-kind"},
        )
    return kind


def _modelKey(said: Said) -> str | None:
    modelKey = said.get("x-model-key")
    if modelKey is not None and not _MODEL_KEY.match(modelKey):
        raise VehicleError(
            "invalid_model_key",
            "x-model-key must be one printable token of 8 to 512 characters",
        )
    return modelKey or None


class GuardedResource(Resource):
    """
    The app's front: a request whose path or host cannot be read as UTF-8
    never reaches the router (which would answer it in HTML).  The secret
    is checked first, as on every route; then such a path names nothing
    (C{not_found}) and such a host is C{invalid_request}, each as the
    error frame.
    """

    isLeaf = True

    def __init__(self, inner: Resource, secret: str) -> None:
        Resource.__init__(self)
        self._inner = inner
        self._secret = secret

    def render(self, request: IRequest) -> Any:
        error = _unreadable(request)
        if error is None:
            return self._inner.render(request)
        try:
            checkSecret(request, self._secret)
        except VehicleError as e:
            error = e
        return answerError(request, error)


def _unreadable(request: IRequest) -> VehicleError | None:
    host = request.getHeader(b"host")
    if request.path.isascii() and b"%" not in request.path and (host is None or host.isascii()):
        # Neither the path's segments (the path unquoted) nor the host can
        # be anything but ASCII: nothing to decode.
        return None
    try:
        for segment in list(request.prepath) + list(request.postpath):
            segment.decode("utf-8")
    except UnicodeDecodeError:
        return VehicleError("not_found", "no such route or session (the path is not UTF-8)")
    try:
        request.getRequestHostname().decode("utf-8")
    except UnicodeDecodeError:
        return VehicleError("invalid_request", "the Host header is not UTF-8", {"header": "host"})
    return None
