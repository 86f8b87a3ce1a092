# -*- test-case-name: tests.unit.test_acp -*-
"""
The Agent Client Protocol's envelope, without I/O: one line read as a
JSON-RPC 2.0 message (a request, a notification, a response, or the error
that answers it), the methods of protocol version 1 that C{vehicle acp}
takes, and the shape each one's C{params} must have.

Pure: L{vehicle.clients._acp} reads lines, calls L{readMessage}, and writes
what it is told to.
"""

from __future__ import annotations

import json
from typing import Any, Callable, Mapping

from attrs import frozen


#: The protocol version this agent speaks (the only stable one).
PROTOCOL_VERSION = 1

#: JSON-RPC's and ACP's error codes (the schema's C{ErrorCode}).
PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
AUTH_REQUIRED = -32000
RESOURCE_NOT_FOUND = -32002

#: Methods the client calls and this agent answers.
REQUESTS = frozenset(
    {
        "initialize",
        "authenticate",
        "session/new",
        "session/load",
        "session/resume",
        "session/list",
        "session/close",
        "session/prompt",
    }
)

#: Notifications this agent acts on.
NOTIFICATIONS = frozenset({"session/cancel", "$/cancel_request"})

#: Methods of protocol version 1 that this agent does not offer (and does
#: not advertise): each is answered "method not found".
NOT_OFFERED = frozenset(
    {"session/set_mode", "session/set_config_option", "session/delete", "logout"}
)


class RPCError(Exception):
    """
    A JSON-RPC error to answer a request with.
    """

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(code, message)
        self.code = code
        self.message = message
        self.data = data

    def error(self) -> dict[str, Any]:
        """
        The response's C{error} member.
        """
        error: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.data is not None:
            error["data"] = self.data
        return error


@frozen
class Request:
    """
    A call that wants an answer.
    """

    id: str | int | None
    method: str
    params: dict[str, Any]


@frozen
class Notification:
    """
    A call that wants none.
    """

    method: str
    params: dict[str, Any]


@frozen
class Reply:
    """
    An error that answers a message that cannot be handled (C{id} is
    L{None} when the message's id could not be read).
    """

    id: str | int | None
    error: RPCError


@frozen
class Ignored:
    """
    A message that gets no answer: a response (this agent asks the client
    nothing), or a notification of a method it does not know.

    @ivar why: one line for the log.
    """

    why: str


Message = Request | Notification | Reply | Ignored


def response(requestId: str | int | None, result: Any) -> dict[str, Any]:
    """
    A successful answer.
    """
    return {"jsonrpc": "2.0", "id": requestId, "result": result}


def errorResponse(requestId: str | int | None, error: RPCError) -> dict[str, Any]:
    """
    An error answer.
    """
    return {"jsonrpc": "2.0", "id": requestId, "error": error.error()}


def notification(method: str, params: dict[str, Any]) -> dict[str, Any]:
    """
    A notification to the client.
    """
    return {"jsonrpc": "2.0", "method": method, "params": params}


def _validId(value: Any) -> bool:
    return value is None or isinstance(value, str) or (
        isinstance(value, int) and not isinstance(value, bool)
    )


def readMessage(raw: bytes, initialized: bool) -> Message | None:
    """
    Read one line: L{None} for a blank one, else what it is.

    @param initialized: whether C{initialize} has been answered; before it,
        every request but C{initialize} is refused.
    """
    text = raw.rstrip(b"\r")
    if not text.strip():
        return None
    try:
        message = json.loads(text.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        return Reply(None, RPCError(PARSE_ERROR, f"Parse error: the line is not JSON ({e})"))
    if isinstance(message, list):
        return Reply(
            None,
            RPCError(INVALID_REQUEST, "Invalid request: batches are not taken; send one message a line"),
        )
    if not isinstance(message, dict):
        return Reply(None, RPCError(INVALID_REQUEST, "Invalid request: a message is a JSON object"))
    hasId = "id" in message
    requestId = message.get("id")
    if hasId and not _validId(requestId):
        return Reply(
            None, RPCError(INVALID_REQUEST, "Invalid request: id is a string, an integer or null")
        )
    if message.get("jsonrpc") != "2.0":
        return Reply(
            requestId, RPCError(INVALID_REQUEST, 'Invalid request: "jsonrpc" must be "2.0"')
        )
    if "method" not in message:
        if hasId and ("result" in message or "error" in message):
            return Ignored(f"a response to a request never sent (id {requestId!r})")
        return Reply(requestId, RPCError(INVALID_REQUEST, "Invalid request: no method"))
    method = message["method"]
    if not isinstance(method, str):
        return Reply(requestId, RPCError(INVALID_REQUEST, "Invalid request: method is a string"))
    params = message.get("params")
    if params is None:
        params = {}
    elif isinstance(params, list):
        if hasId:
            return Reply(
                requestId, RPCError(INVALID_PARAMS, f"Invalid params: {method} takes an object")
            )
        return Ignored(f"a notification of {method} with params that are not an object")
    elif not isinstance(params, dict):
        return Reply(
            requestId if hasId else None,
            RPCError(INVALID_REQUEST, "Invalid request: params is an object"),
        )
    if not hasId:
        if method in REQUESTS or method in NOT_OFFERED:
            return Reply(
                None,
                RPCError(INVALID_REQUEST, f"Invalid request: {method} is a request; it needs an id"),
            )
        if method not in NOTIFICATIONS:
            return Ignored(f"a notification this agent does not know: {method}")
        if not initialized:
            return Ignored(f"{method} before initialize")
        return Notification(method, params)
    if method in NOTIFICATIONS:
        return Reply(
            requestId,
            RPCError(
                INVALID_REQUEST, f"Invalid request: {method} is a notification; send it without an id"
            ),
        )
    if method not in REQUESTS:
        return Reply(requestId, RPCError(METHOD_NOT_FOUND, f"Method not found: {method}"))
    if not initialized and method != "initialize":
        return Reply(
            requestId,
            RPCError(INVALID_REQUEST, f"Invalid request: call initialize before {method}"),
        )
    return Request(requestId, method, params)


# -- params -------------------------------------------------------------------


def _invalid(field: str, what: str) -> RPCError:
    return RPCError(INVALID_PARAMS, f"Invalid params: {field} {what}", {"field": field})


def _string(params: Mapping[str, Any], name: str, optional: bool = False) -> str | None:
    value = params.get(name)
    if value is None and optional:
        return None
    if not isinstance(value, str) or not value:
        raise _invalid(name, "is a non-empty string" + (" or null" if optional else ""))
    return value


def _absolute(params: Mapping[str, Any], name: str, optional: bool = False) -> str | None:
    value = _string(params, name, optional)
    if value is not None and not value.startswith("/"):
        raise _invalid(name, f"is an absolute path (got {value!r})")
    return value


def _objects(params: Mapping[str, Any], name: str, optional: bool = False) -> list[dict[str, Any]]:
    value = params.get(name)
    if value is None and optional:
        return []
    if not isinstance(value, list) or not all(isinstance(item, dict) for item in value):
        raise _invalid(name, "is an array of objects")
    return value


def _noAdditionalDirectories(params: Mapping[str, Any]) -> None:
    extra = params.get("additionalDirectories")
    if extra:
        raise _invalid(
            "additionalDirectories",
            "is not taken: this agent does not advertise additional roots",
        )


def _checkInitialize(params: Mapping[str, Any]) -> None:
    version = params.get("protocolVersion")
    if isinstance(version, bool) or not isinstance(version, int) or not 0 <= version <= 65535:
        raise _invalid("protocolVersion", "is an integer from 0 to 65535")
    for name in ("clientCapabilities", "clientInfo"):
        if params.get(name) is not None and not isinstance(params[name], dict):
            raise _invalid(name, "is an object")


def _checkAuthenticate(params: Mapping[str, Any]) -> None:
    _string(params, "methodId")


def _checkNew(params: Mapping[str, Any]) -> None:
    _absolute(params, "cwd")
    _objects(params, "mcpServers")
    _noAdditionalDirectories(params)


def _checkLoad(params: Mapping[str, Any]) -> None:
    _string(params, "sessionId")
    _checkNew(params)


def _checkResume(params: Mapping[str, Any]) -> None:
    _string(params, "sessionId")
    _absolute(params, "cwd")
    _objects(params, "mcpServers", optional=True)
    _noAdditionalDirectories(params)


def _checkList(params: Mapping[str, Any]) -> None:
    _absolute(params, "cwd", optional=True)
    _string(params, "cursor", optional=True)


def _checkSession(params: Mapping[str, Any]) -> None:
    _string(params, "sessionId")


def _checkPrompt(params: Mapping[str, Any]) -> None:
    _string(params, "sessionId")
    blocks = _objects(params, "prompt")
    for index, block in enumerate(blocks):
        if not isinstance(block.get("type"), str):
            raise _invalid(f"prompt[{index}].type", "is a string")


def _checkCancelRequest(params: Mapping[str, Any]) -> None:
    if "requestId" not in params or not _validId(params["requestId"]):
        raise _invalid("requestId", "is a string, an integer or null")


#: Each method's check of its params (raises L{RPCError}).
CHECKS: Mapping[str, Callable[[Mapping[str, Any]], None]] = {
    "initialize": _checkInitialize,
    "authenticate": _checkAuthenticate,
    "session/new": _checkNew,
    "session/load": _checkLoad,
    "session/resume": _checkResume,
    "session/list": _checkList,
    "session/close": _checkSession,
    "session/prompt": _checkPrompt,
    "session/cancel": _checkSession,
    "$/cancel_request": _checkCancelRequest,
}


def checkParams(method: str, params: Mapping[str, Any]) -> None:
    """
    Does C{params} have the shape C{method} takes?

    @raise RPCError: C{INVALID_PARAMS}, naming the field (C{data.field}).
    """
    CHECKS[method](params)
