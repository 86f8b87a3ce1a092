# -*- test-case-name: tests.unit.test_gardend -*-
"""
The stand-in's C{/mcp}: MCP over streamable HTTP (JSON-RPC 2.0, answered with
C{application/json}): the bearer token checked, the message dispatched, a
tool call bound to the graph and role of the delegation token and every
write put in the audit log.  The tools themselves are L{DocumentTools}'s.
"""

from __future__ import annotations

import json
from typing import ClassVar, Optional

from attrs import define
from twisted.logger import Logger
from twisted.web.iweb import IRequest

from vehicle.protocol import JSON, JSONObject, loads
from vehicle_local.standin._config import Config
from vehicle_local.standin._delegation import Delegation, DelegationRefused, Delegations
from vehicle_local.standin._store import ToolError
from vehicle_local.standin._tools import CATALOG, READ, TOOLS, WRITE, DocumentTools, ToolSpec

#: Protocol revisions the stand-in negotiates on C{initialize}, newest first.
PROTOCOL_VERSIONS = ("2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05")


_PARSE_ERROR = -32700
_INVALID_REQUEST = -32600
_METHOD_NOT_FOUND = -32601
_INVALID_PARAMS = -32602
_UNAUTHORIZED = -32001
_UNAVAILABLE = -32002

_GRAPH_ARGS = ("graphId", "graph_id")


def _reachable(caller: Delegation) -> tuple[str, ...]:
    """
    Every graph a token that also reads others reaches, its own first; empty
    for a token bound to one graph (or none).
    """
    if caller.graphId is None or not caller.reads:
        return ()
    return (caller.graphId, *(g for g in caller.reads if g != caller.graphId))


class _HTTPRefusal(Exception):
    def __init__(self, status: int, code: int, message: str, data: JSON = None) -> None:
        super().__init__(status, code, message)
        self.status = status
        self.code = code
        self.message = message
        self.data = data


def _error(code: int, message: str) -> JSONObject:
    """
    A JSON-RPC error answer.
    """
    return {"error": {"code": code, "message": message}}


def _toolText(envelope: JSONObject, isError: bool) -> JSONObject:
    """
    A tool's answer: its envelope as the one text part.
    """
    return {"content": [{"type": "text", "text": json.dumps(envelope)}], "isError": isError}


def _bearer(request: IRequest) -> Optional[str]:
    header: bytes | None = request.getHeader(b"authorization")
    if header is None:
        return None
    scheme, _, credential = header.decode("latin-1").partition(" ")
    if scheme.lower() != "bearer" or not credential.strip():
        return None
    return credential.strip()


@define
class MCPEndpoint(DocumentTools):
    """
    gardend's C{/mcp} over a L{FolderStore}: the protocol in front of the
    document tools it is (L{DocumentTools}, the tools' own idea: see there
    why this is a subclass rather than a part).

    @ivar offline: when set, every request is answered 503 (gardend down).
    """

    config: Config
    delegations: Delegations
    offline: bool = False

    _log: ClassVar[Logger] = Logger()

    # HTTP

    def handle(self, request: IRequest) -> bytes:
        """
        Answer one C{POST /mcp}.
        """
        message: JSON = None
        try:
            if self.offline:
                raise _HTTPRefusal(503, _UNAVAILABLE, "gardend is offline")
            caller = self._authenticate(request)
            version = request.getHeader(b"mcp-protocol-version")
            if (
                version is not None
                and version.decode("latin-1") not in PROTOCOL_VERSIONS
            ):
                raise _HTTPRefusal(
                    400, _INVALID_REQUEST, "unsupported MCP-Protocol-Version"
                )
            try:
                message = loads(request.content.read())
            except ValueError:
                raise _HTTPRefusal(400, _PARSE_ERROR, "the body is not JSON")
            if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
                raise _HTTPRefusal(
                    400, _INVALID_REQUEST, "one JSON-RPC 2.0 message per POST"
                )
            if "method" not in message or "id" not in message:
                # A notification or a response to us: nothing to answer.
                request.setResponseCode(202)
                return b""
            result = self._dispatch(caller, message)
        except _HTTPRefusal as refusal:
            request.setResponseCode(refusal.status)
            if refusal.status == 401:
                request.setHeader(b"www-authenticate", b'Bearer realm="gardend"')
            error: JSONObject = {"code": refusal.code, "message": refusal.message}
            if refusal.data is not None:
                error["data"] = refusal.data
            requestId = message.get("id") if isinstance(message, dict) else None
            return self._json(
                request, {"jsonrpc": "2.0", "id": requestId, "error": error}
            )
        return self._json(request, {"jsonrpc": "2.0", "id": message["id"], **result})

    def _json(self, request: IRequest, body: JSONObject) -> bytes:
        request.setHeader(b"content-type", b"application/json")
        return json.dumps(body).encode("utf-8")

    def _authenticate(self, request: IRequest) -> Delegation:
        token = _bearer(request)
        if token is None:
            raise _HTTPRefusal(
                401,
                _UNAUTHORIZED,
                "a bearer token is required",
                {"code": "unauthorized"},
            )
        if token == self.config.masterKey:
            return Delegation(
                principal="owner",
                graphId=None,
                role="owner",
                via=None,
                expires=float("inf"),
            )
        try:
            return self.delegations.verify(token)
        except DelegationRefused as refused:
            raise _HTTPRefusal(
                401,
                _UNAUTHORIZED,
                "the token is not accepted",
                {"code": refused.args[0]},
            )

    # JSON-RPC

    def _dispatch(self, caller: Delegation, message: JSONObject) -> JSONObject:
        method = message["method"]
        params = message.get("params") or {}
        if not isinstance(params, dict):
            return _error(_INVALID_PARAMS, "params must be an object")
        if method == "initialize":
            requested = params.get("protocolVersion")
            version = (
                requested if requested in PROTOCOL_VERSIONS else PROTOCOL_VERSIONS[0]
            )
            return {
                "result": {
                    "protocolVersion": version,
                    "capabilities": {"tools": {"listChanged": False}},
                    "serverInfo": {"name": "gardend-stand-in", "version": "1.0.0"},
                }
            }
        if method == "ping":
            return {"result": {}}
        if method == "tools/list":
            return {"result": {"tools": self._listing(caller)}}
        if method == "tools/call":
            return self._toolsCall(caller, params)
        return _error(_METHOD_NOT_FOUND, f"Method not found: {method}")

    def _listing(self, caller: Delegation) -> list[JSON]:
        """
        The tools C{caller} may call, as C{tools/list} offers them.
        """
        return [
            tool.listing(bound=caller.graphId is not None, reads=_reachable(caller))
            for tool in CATALOG
            if self._permits(caller, tool)
        ]

    def _toolsCall(self, caller: Delegation, params: JSONObject) -> JSONObject:
        name = params.get("name")
        arguments = params.get("arguments") or {}
        tool = TOOLS.get(name) if isinstance(name, str) else None
        if tool is None:
            return _error(_INVALID_PARAMS, f"Unknown tool: {name}")
        if not isinstance(arguments, dict):
            return _error(_INVALID_PARAMS, "arguments must be an object")
        return {"result": self._call(caller, tool, arguments)}

    def _permits(self, caller: Delegation, tool: ToolSpec) -> bool:
        return tool.scope == READ or caller.role in ("owner", "editor")

    def _call(self, caller: Delegation, tool: ToolSpec, arguments: JSONObject) -> JSONObject:
        try:
            if not self._permits(caller, tool):
                raise ToolError(
                    "forbidden", f"a {caller.role} may not call {tool.name}"
                )
            graphId = self._graphFor(caller, arguments, tool)
            envelope, audited = self.run(tool.name, graphId, arguments)
        except ToolError as e:
            return _toolText(
                {"ok": False, "error": {"code": e.code, "message": e.message}}, isError=True
            )
        if tool.scope == WRITE:
            self.store.appendAudit(tool.name, graphId, caller.principal, audited, caller.via)
            self._log.info(
                "{tool} on {graphId} by {actor}",
                tool=tool.name,
                graphId=graphId,
                actor=caller.principal,
            )
        return _toolText(envelope, isError=False)

    def _graphFor(self, caller: Delegation, arguments: JSONObject, tool: ToolSpec) -> str:
        named: set[str] = set()
        for key in _GRAPH_ARGS:
            value = arguments.get(key)
            if value is not None and not isinstance(value, str):
                raise ToolError("invalid_argument", f"{key} must be a string")
            if value is not None:
                named.add(value)
        if len(named) > 1:
            raise ToolError(
                "invalid_argument", "graphId and graph_id name different graphs"
            )
        if caller.graphId is not None:
            if tool.scope == READ and len(named) == 1 and named <= set(caller.reads):
                # A public caller's token reads every public graph.
                (other,) = named
                return other
            if named and named != {caller.graphId}:
                raise ToolError(
                    "graph_mismatch", "this token is bound to another graph"
                )
            return caller.graphId
        if not named:
            raise ToolError("graph_required", "graphId is required")
        (graphId,) = named
        if graphId not in self.config.knownGraphs():
            raise ToolError("not_found", f"no graph {graphId!r}")
        return graphId
