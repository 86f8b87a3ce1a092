# -*- test-case-name: tests.live.test_mirror -*-
"""
A small MCP client for gardend's C{/mcp}: JSON-RPC 2.0 over HTTP POST with
treq, C{initialize} once per client, then C{tools/call}, each result's first
text block parsed as gardend's JSON envelope. Every refusal is a
L{MirrorError}; the bearer token is never part of one.
"""

from __future__ import annotations

import json
from typing import Any, ClassVar

import treq
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorTime
from attrs import define, field
from twisted.logger import Logger
from twisted.web.iweb import IResponse

from vehicle.protocol import JSON, JSONObject, loads, objectOf, textOf


#: The MCP revision this client asks for.
PROTOCOL_VERSION = "2025-06-18"

#: The client's name on C{initialize}.
CLIENT_INFO: JSONObject = {"name": "vehicle-mirror", "version": "1.0.0"}


class MirrorError(Exception):
    """
    A call to C{/mcp} did not succeed.

    @ivar message: one line for people (never the token).
    @ivar code: gardend's envelope code (C{not_found}, C{already_exists},
        ...), C{http_<status>}, C{rpc_<code>} or C{transport}; L{None} when
        unknown.
    """

    def __init__(self, message: str, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.code = code

    def __str__(self) -> str:
        return self.message


def _sseMessages(body: bytes) -> list[JSON]:
    """
    The JSON payloads of the C{data:} fields of a C{text/event-stream} body
    (streamable HTTP may answer a POST that way).
    """
    out: list[JSON] = []
    data: list[str] = []
    for line in body.decode("utf-8", "replace").splitlines() + [""]:
        if line == "":
            if data:
                try:
                    out.append(loads("\n".join(data)))
                except ValueError:
                    pass
                data = []
        elif line.startswith("data:"):
            data.append(line[5:].lstrip(" "))
    return out


@define
class MCPClient:
    """
    One connection's worth of MCP state (the negotiated revision and
    C{Mcp-Session-Id}) against one endpoint; the token is handed in per
    call, so the newest one is always used.

    @ivar url: the endpoint (gardend's C{MNEMOSYNE_MCP_URL}).
    @ivar reactor: for request timeouts.
    @ivar http: treq, or a treq client (an object with its C{post}).
    @ivar timeout: seconds before a request is given up.
    """

    _log: ClassVar[Logger] = Logger()

    url: str
    reactor: IReactorTime
    http: Any = treq
    timeout: float = 30.0
    initialized: bool = field(default=False, init=False)
    _protocolVersion: str | None = field(default=None, init=False)
    _sessionHeader: str | None = field(default=None, init=False)
    _nextId: int = field(default=0, init=False)

    async def callTool(self, token: str, name: str, arguments: JSONObject) -> JSONObject:
        """
        Call one tool (after C{initialize}, the first time).

        @return: the tool's JSON envelope.
        @raise MirrorError: on any refusal: HTTP, JSON-RPC, or the tool's own
            (C{isError} or C{ok: false}), with the envelope's code.
        """
        if not self.initialized:
            await self.initialize(token)
        try:
            result = await self._request(
                token, "tools/call", {"name": name, "arguments": dict(arguments)}
            )
        except MirrorError as e:
            if e.code == "http_404" and self._sessionHeader is not None:
                # The server forgot our MCP session: start a new one next time.
                self.initialized = False
                self._sessionHeader = None
            raise
        return _envelope(name, result)

    async def initialize(self, token: str) -> None:
        """
        The MCP handshake: C{initialize}, then C{notifications/initialized}.
        """
        self._sessionHeader = None
        self._protocolVersion = None
        result = await self._request(
            token,
            "initialize",
            {
                "protocolVersion": PROTOCOL_VERSION,
                "capabilities": {},
                "clientInfo": CLIENT_INFO,
            },
        )
        self._protocolVersion = textOf(result.get("protocolVersion"))
        await self._post(
            token, {"jsonrpc": "2.0", "method": "notifications/initialized"}
        )
        self.initialized = True

    async def _request(self, token: str, method: str, params: JSONObject) -> JSONObject:
        self._nextId += 1
        requestId = self._nextId
        messages = await self._post(
            token,
            {"jsonrpc": "2.0", "id": requestId, "method": method, "params": params},
        )
        message = next(
            (m for m in messages if isinstance(m, dict) and m.get("id") == requestId), None
        )
        if message is None:
            raise MirrorError(f"{method}: no answer from the MCP endpoint", "protocol")
        error = message.get("error")
        if isinstance(error, dict):
            raise MirrorError(
                f"{method}: {error.get('message') or 'error'}",
                f"rpc_{error.get('code')}",
            )
        result = message.get("result")
        if not isinstance(result, dict):
            raise MirrorError(f"{method}: the answer has no result", "protocol")
        return result

    async def _post(self, token: str, message: JSONObject) -> list[JSON]:
        # Header names as bytes, as Twisted keeps them (a str name beside
        # the same name in bytes is a BytesWarning under python -b).
        headers: dict[bytes, str] = {
            b"authorization": "Bearer " + token,
            b"content-type": "application/json",
            b"accept": "application/json, text/event-stream",
        }
        if self._protocolVersion is not None:
            headers[b"mcp-protocol-version"] = self._protocolVersion
        if self._sessionHeader is not None:
            headers[b"mcp-session-id"] = self._sessionHeader
        # One write per settled run: no reason to keep idle connections.
        oneShot = {"persistent": False} if self.http is treq else {}
        method = message.get("method", "?")

        async def fetch() -> tuple[IResponse, bytes]:
            response: IResponse = await self.http.post(
                self.url,
                data=json.dumps(message).encode("utf-8"),
                headers=headers,
                timeout=self.timeout,
                # A redirect must not carry the bearer token elsewhere.
                allow_redirects=False,
                reactor=self.reactor,
                **oneShot,
            )
            return response, await treq.content(response)

        # One deadline over the answer and its body: a stalled body must not
        # hold the session's mirror for good.
        fetching = Deferred.fromCoroutine(fetch())
        fetching.addTimeout(self.timeout, self.reactor)
        try:
            response, body = await fetching
        except Exception as e:
            raise MirrorError(
                f"{method}: the MCP endpoint is unreachable ({e.__class__.__name__})",
                "transport",
            ) from None
        sessionHeader = response.headers.getRawHeaders(b"mcp-session-id")
        if sessionHeader:
            self._sessionHeader = sessionHeader[0].decode("latin-1")
        contentType = (response.headers.getRawHeaders(b"content-type") or [b""])[0]
        messages: list[JSON] = []
        if contentType.lower().startswith(b"text/event-stream"):
            messages = _sseMessages(body)
        elif body.strip():
            try:
                messages = [loads(body)]
            except ValueError:
                pass
        if response.code >= 400:
            detail = _errorText(messages) or f"HTTP {response.code}"
            raise MirrorError(f"{method}: {detail}", f"http_{response.code}")
        return messages


def _errorText(messages: list[JSON]) -> str | None:
    for message in messages:
        error = objectOf(message).get("error")
        if isinstance(error, dict):
            text = textOf(error.get("message"))
            if text is not None:
                return text
    return None


def _envelope(name: str, result: JSONObject) -> JSONObject:
    """
    The JSON envelope in a tool result's first text block.

    @raise MirrorError: the tool refused, or the result is not an envelope.
    """
    content = result.get("content")
    text = None
    if isinstance(content, list):
        for block in content:
            if isinstance(block, dict) and block.get("type") == "text":
                text = block.get("text")
                break
    envelope: JSON = None
    if isinstance(text, str):
        try:
            envelope = loads(text)
        except ValueError:
            envelope = None
    if not isinstance(envelope, dict):
        if result.get("isError"):
            raise MirrorError(f"{name}: {text or 'the tool failed'}", "tool_error")
        raise MirrorError(f"{name}: the result is not a JSON envelope", "protocol")
    if result.get("isError") or envelope.get("ok") is False:
        error = envelope.get("error")
        code = message = None
        if isinstance(error, dict):
            code = error.get("code")
            message = error.get("message")
        elif isinstance(error, str):
            message = error
        raise MirrorError(
            f"{name}: {message or 'the tool failed'}",
            code if isinstance(code, str) else "tool_error",
        )
    return envelope
