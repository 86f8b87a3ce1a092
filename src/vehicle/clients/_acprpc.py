# -*- test-case-name: tests.unit.test_acp -*-
"""
The Agent Client Protocol's envelope, without I/O: one line read as a
JSON-RPC 2.0 message (a request, a notification, a response, or the error
that answers it), the methods of protocol version 1 that C{vehicle acp}
takes, and each one's C{params} read as a value of its own (the shape it
must have is checked as it is read).

Pure: L{vehicle.clients._acp} reads lines, calls L{readMessage}, and writes
what it is told to.
"""

from __future__ import annotations

from typing import Callable, Mapping, TypeGuard

from attrs import frozen

from vehicle.protocol import JSON, JSONObject, intOf, loads


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

    def __init__(self, code: int, message: str, data: JSON = None) -> None:
        super().__init__(code, message)
        self.code = code
        self.message = message
        self.data = data

    def error(self) -> JSONObject:
        """
        The response's C{error} member.
        """
        error: JSONObject = {"code": self.code, "message": self.message}
        if self.data is not None:
            error["data"] = self.data
        return error


#: A request's id, as JSON-RPC allows it.
RequestId = str | int | None


# -- params, each method's ----------------------------------------------------


@frozen(kw_only=True)
class InitializeParams:
    """
    C{initialize}'s: the protocol version the client speaks.
    """

    protocolVersion: int


@frozen(kw_only=True)
class AuthenticateParams:
    """
    C{authenticate}'s: the method the client chose.
    """

    methodId: str


@frozen(kw_only=True)
class NewParams:
    """
    C{session/new}'s: the editor's folder and its MCP servers.
    """

    cwd: str
    mcpServers: tuple[JSONObject, ...]


@frozen(kw_only=True)
class ReopenParams:
    """
    C{session/load}'s or C{session/resume}'s: the session, the editor's
    folder and MCP servers, and whether the lease is to be taken over
    (C{_meta}).

    @ivar replay: C{session/load}: the transcript is told again first.
    """

    sessionId: str
    cwd: str
    mcpServers: tuple[JSONObject, ...]
    takeover: bool
    replay: bool


@frozen(kw_only=True)
class ListParams:
    """
    C{session/list}'s: the folder asked about, and a cursor of a page.
    """

    cwd: str | None
    cursor: str | None


@frozen(kw_only=True)
class SessionParams:
    """
    C{session/close}'s and C{session/cancel}'s: the session.
    """

    sessionId: str


@frozen(kw_only=True)
class PromptParams:
    """
    C{session/prompt}'s: the session, the prompt's content blocks (each
    with a C{type}), and whether the lease is to be taken over (C{_meta}).
    """

    sessionId: str
    prompt: tuple[JSONObject, ...]
    takeover: bool


@frozen(kw_only=True)
class CancelRequestParams:
    """
    C{$/cancel_request}'s: the id of the request to cancel.
    """

    requestId: RequestId


RequestParams = (
    InitializeParams
    | AuthenticateParams
    | NewParams
    | ReopenParams
    | ListParams
    | SessionParams
    | PromptParams
)
NotificationParams = SessionParams | CancelRequestParams


# -- messages -----------------------------------------------------------------


@frozen
class Request:
    """
    A call that wants an answer.
    """

    id: RequestId
    method: str
    params: RequestParams


@frozen
class Notification:
    """
    A call that wants none.
    """

    method: str
    params: NotificationParams


@frozen
class Reply:
    """
    An error that answers a message that cannot be handled (C{id} is
    L{None} when the message's id could not be read).
    """

    id: RequestId
    error: RPCError


@frozen
class Ignored:
    """
    A message that gets no answer: a response (this agent asks the client
    nothing), a notification of a method it does not know, or one whose
    params do not fit.

    @ivar why: one line for the log.
    """

    why: str


Message = Request | Notification | Reply | Ignored


def response(requestId: RequestId, result: JSONObject) -> JSONObject:
    """
    A successful answer.
    """
    return {"jsonrpc": "2.0", "id": requestId, "result": result}


def errorResponse(requestId: RequestId, error: RPCError) -> JSONObject:
    """
    An error answer.
    """
    return {"jsonrpc": "2.0", "id": requestId, "error": error.error()}


def notification(method: str, params: JSONObject) -> JSONObject:
    """
    A notification to the client.
    """
    return {"jsonrpc": "2.0", "method": method, "params": params}


def _validId(value: JSON) -> TypeGuard[RequestId]:
    return value is None or isinstance(value, str) or intOf(value) is not None


@frozen
class _Envelope:
    """
    A message's envelope, read: whether it has an id (and which), its
    method and its params (an object: none is an empty one).
    """

    hasId: bool
    id: RequestId
    method: str
    params: JSONObject


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
        message = loads(text.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        return Reply(None, RPCError(PARSE_ERROR, f"Parse error: the line is not JSON ({e})"))
    if isinstance(message, list):
        return Reply(
            None,
            RPCError(INVALID_REQUEST, "Invalid request: batches are not taken; send one message a line"),
        )
    if not isinstance(message, dict):
        return Reply(None, RPCError(INVALID_REQUEST, "Invalid request: a message is a JSON object"))
    envelope = _envelope(message)
    if not isinstance(envelope, _Envelope):
        return envelope
    if envelope.hasId:
        return _request(envelope, initialized)
    return _notification(envelope, initialized)


def _envelope(message: JSONObject) -> _Envelope | Reply | Ignored:
    """
    The envelope of a message (a JSON object), or what answers it when it
    is not one JSON-RPC 2.0 allows (or asks for no answer: a response).
    """
    hasId = "id" in message
    requestId = message.get("id")  # None when there is none: a valid id
    if not _validId(requestId):
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
        return Reply(requestId, RPCError(INVALID_REQUEST, "Invalid request: params is an object"))
    return _Envelope(hasId, requestId, method, params)


def _notification(envelope: _Envelope, initialized: bool) -> Notification | Reply | Ignored:
    """
    A message without an id: a notification this agent acts on, or not.
    """
    method = envelope.method
    if method in REQUESTS or method in NOT_OFFERED:
        return Reply(
            None,
            RPCError(INVALID_REQUEST, f"Invalid request: {method} is a request; it needs an id"),
        )
    if method not in NOTIFICATIONS:
        return Ignored(f"a notification this agent does not know: {method}")
    if not initialized:
        return Ignored(f"{method} before initialize")
    try:
        return Notification(method, NOTIFICATION_PARAMS[method](envelope.params))
    except RPCError as e:
        return Ignored(f"{method}: {e.message}")


def _request(envelope: _Envelope, initialized: bool) -> Request | Reply:
    """
    A message with an id: a request this agent answers, or the error that
    answers it.
    """
    method, requestId = envelope.method, envelope.id
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
    try:
        return Request(requestId, method, REQUEST_PARAMS[method](envelope.params))
    except RPCError as e:
        return Reply(requestId, e)


# -- reading params -------------------------------------------------------------


def _invalid(field: str, what: str) -> RPCError:
    return RPCError(INVALID_PARAMS, f"Invalid params: {field} {what}", {"field": field})


def _string(params: JSONObject, name: str) -> str:
    value = params.get(name)
    if not isinstance(value, str) or not value:
        raise _invalid(name, "is a non-empty string")
    return value


def _optionalString(params: JSONObject, name: str) -> str | None:
    value = params.get(name)
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise _invalid(name, "is a non-empty string or null")
    return value


def _absolute(path: str | None, name: str) -> str | None:
    if path is not None and not path.startswith("/"):
        raise _invalid(name, f"is an absolute path (got {path!r})")
    return path


def _folder(params: JSONObject) -> str:
    cwd = _string(params, "cwd")
    _absolute(cwd, "cwd")
    return cwd


def _objects(params: JSONObject, name: str, optional: bool = False) -> tuple[JSONObject, ...]:
    value = params.get(name)
    if value is None and optional:
        return ()
    if not isinstance(value, list):
        raise _invalid(name, "is an array of objects")
    objects = tuple(item for item in value if isinstance(item, dict))
    if len(objects) != len(value):
        raise _invalid(name, "is an array of objects")
    return objects


def _noAdditionalDirectories(params: JSONObject) -> None:
    extra = params.get("additionalDirectories")
    if extra:
        raise _invalid(
            "additionalDirectories",
            "is not taken: this agent does not advertise additional roots",
        )


def _takeover(params: JSONObject) -> bool:
    """
    Does a request's C{_meta} ask to take the lease over
    (C{{"vehicle": {"takeover": true}}})?
    """
    meta = params.get("_meta")
    ours = meta.get("vehicle") if isinstance(meta, dict) else None
    return isinstance(ours, dict) and ours.get("takeover") is True


def _readInitialize(params: JSONObject) -> InitializeParams:
    version = intOf(params.get("protocolVersion"))
    if version is None or not 0 <= version <= 65535:
        raise _invalid("protocolVersion", "is an integer from 0 to 65535")
    for name in ("clientCapabilities", "clientInfo"):
        if params.get(name) is not None and not isinstance(params[name], dict):
            raise _invalid(name, "is an object")
    return InitializeParams(protocolVersion=version)


def _readAuthenticate(params: JSONObject) -> AuthenticateParams:
    return AuthenticateParams(methodId=_string(params, "methodId"))


def _readNew(params: JSONObject) -> NewParams:
    cwd = _folder(params)
    servers = _objects(params, "mcpServers")
    _noAdditionalDirectories(params)
    return NewParams(cwd=cwd, mcpServers=servers)


def _readLoad(params: JSONObject) -> ReopenParams:
    sessionId = _string(params, "sessionId")
    new = _readNew(params)
    return ReopenParams(
        sessionId=sessionId,
        cwd=new.cwd,
        mcpServers=new.mcpServers,
        takeover=_takeover(params),
        replay=True,
    )


def _readResume(params: JSONObject) -> ReopenParams:
    sessionId = _string(params, "sessionId")
    cwd = _folder(params)
    servers = _objects(params, "mcpServers", optional=True)
    _noAdditionalDirectories(params)
    return ReopenParams(
        sessionId=sessionId, cwd=cwd, mcpServers=servers, takeover=_takeover(params), replay=False
    )


def _readList(params: JSONObject) -> ListParams:
    cwd = _absolute(_optionalString(params, "cwd"), "cwd")
    return ListParams(cwd=cwd, cursor=_optionalString(params, "cursor"))


def _readSession(params: JSONObject) -> SessionParams:
    return SessionParams(sessionId=_string(params, "sessionId"))


def _readPrompt(params: JSONObject) -> PromptParams:
    sessionId = _string(params, "sessionId")
    blocks = _objects(params, "prompt")
    for index, block in enumerate(blocks):
        if not isinstance(block.get("type"), str):
            raise _invalid(f"prompt[{index}].type", "is a string")
    return PromptParams(sessionId=sessionId, prompt=blocks, takeover=_takeover(params))


def _readCancelRequest(params: JSONObject) -> CancelRequestParams:
    requestId = params.get("requestId")
    if "requestId" not in params or not _validId(requestId):
        raise _invalid("requestId", "is a string, an integer or null")
    return CancelRequestParams(requestId=requestId)


#: Each request's reading of its params (raises L{RPCError}).
REQUEST_PARAMS: Mapping[str, Callable[[JSONObject], RequestParams]] = {
    "initialize": _readInitialize,
    "authenticate": _readAuthenticate,
    "session/new": _readNew,
    "session/load": _readLoad,
    "session/resume": _readResume,
    "session/list": _readList,
    "session/close": _readSession,
    "session/prompt": _readPrompt,
}

#: Each notification's.
NOTIFICATION_PARAMS: Mapping[str, Callable[[JSONObject], NotificationParams]] = {
    "session/cancel": _readSession,
    "$/cancel_request": _readCancelRequest,
}


def checkParams(method: str, params: JSONObject) -> RequestParams | NotificationParams:
    """
    C{params} read as C{method} takes them.

    @raise RPCError: C{INVALID_PARAMS}, naming the field (C{data.field}):
        they do not have its shape.
    """
    if method in NOTIFICATION_PARAMS:
        return NOTIFICATION_PARAMS[method](params)
    return REQUEST_PARAMS[method](params)
