# -*- test-case-name: tests.unit.test_ride -*-
"""
How a client reaches the host: through gardend's gateway, with the
caller's credentials (a bearer token, or a visitor's id) and its model key,
each read once from the environment or a file, never from the command line.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path
from typing import Any, Mapping
from urllib.parse import quote, urlencode

from attrs import field, frozen
from twisted.internet.defer import CancelledError

from vehicle import PROTOCOL
from vehicle.clients._client import GardendOptions, describeFailure, isLoopback, wasCancelled
from vehicle.protocol import JSON, JSONObject, dumps, loads, objectOf, textOf


#: Where a visitor's id is kept between rides, under the state directory.
VISITOR_FILE = Path("vehicle") / "visitor-id"

#: The variables the clients read.
TOKEN_ENV = "VEHICLE_TOKEN"
MODEL_KEY_ENV = "VEHICLE_MODEL_KEY"


class CredentialError(Exception):
    """
    The credentials asked for cannot be had (a key file that cannot be
    read, a model-key variable that is not set); one line for the person.
    """


def stateDirectory(environ: Mapping[str, str]) -> Path:
    """
    C{$XDG_STATE_HOME}, else C{~/.local/state}.
    """
    if environ.get("XDG_STATE_HOME"):
        return Path(environ["XDG_STATE_HOME"])
    home = environ.get("HOME")
    return (Path(home) if home else Path.home()) / ".local" / "state"


def loadVisitorId(stateDir: Path) -> str:
    """
    The visitor id kept in C{stateDir/vehicle/visitor-id}, made (readable by
    this user only) the first time, so the visitor is the same from one ride
    to the next.
    """
    path = stateDir / VISITOR_FILE
    try:
        existing = path.read_text("ascii").strip()
    except (OSError, UnicodeDecodeError):
        existing = ""
    if existing:
        return existing
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    visitorId = "v-" + secrets.token_urlsafe(24)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="ascii") as f:
        f.write(visitorId + "\n")
    return visitorId


@frozen(kw_only=True)
class Credentials:
    """
    What a client sends to say who it is.  Kept out of every C{repr}.

    @ivar token: the bearer (master key, client token, an account's ID
        token), or L{None}.
    @ivar visitorId: a visitor's C{X-Visitor-Id}, or L{None}.
    @ivar modelKey: the caller's own model key (C{X-Model-Key}), or L{None}.
    """

    token: str | None = field(default=None, repr=False)
    visitorId: str | None = field(default=None, repr=False)
    modelKey: str | None = field(default=None, repr=False)

    @property
    def anonymous(self) -> bool:
        return self.token is None and self.visitorId is not None

    def headers(self) -> dict[str, str]:
        """
        The request headers these credentials make.
        """
        out: dict[str, str] = {}
        if self.token is not None:
            out["Authorization"] = "Bearer " + self.token
        if self.visitorId is not None:
            out["X-Visitor-Id"] = self.visitorId
        if self.modelKey is not None:
            out["X-Model-Key"] = self.modelKey
        return out


def credentialsFor(options: GardendOptions, environ: Mapping[str, str]) -> Credentials:
    """
    L{resolveCredentials} from a client's command line (C{--gardend},
    C{--key-file}, C{--anonymous}, C{--visitor-id}, C{--model-key-env}
    where it has one).
    """
    return resolveCredentials(
        gardend=options["gardend"],
        environ=environ,
        keyFile=options["key-file"],
        anonymous=bool(options["anonymous"]),
        visitorId=options["visitor-id"],
        modelKeyEnv=options.get("model-key-env"),
    )


def resolveCredentials(
    *,
    gardend: str,
    environ: Mapping[str, str],
    keyFile: str | None = None,
    anonymous: bool = False,
    visitorId: str | None = None,
    modelKeyEnv: str | None = None,
    stateDir: Path | None = None,
) -> Credentials:
    """
    The caller's credentials (spec, "The JSONL form").

    The token is C{keyFile}'s content, else C{$VEHICLE_TOKEN}.  With neither,
    a gardend that is not on loopback is ridden as a visitor; C{anonymous}
    forces it (no token is sent).  A visitor's id is C{visitorId}, else the
    one kept under C{stateDir}.  The model key is the variable
    C{modelKeyEnv} names, else C{$VEHICLE_MODEL_KEY}.

    @raise CredentialError: the key file cannot be read, or C{modelKeyEnv}
        names a variable that is not set.
    """
    token: str | None = None
    if keyFile is not None:
        try:
            token = Path(keyFile).read_text("utf-8").strip() or None
        except (OSError, UnicodeDecodeError) as e:
            # The path is not echoed: it may be a token typed in its place.
            raise CredentialError(f"cannot read the --key-file: {e.__class__.__name__}")
        if token is None:
            raise CredentialError("the --key-file is empty")
    else:
        token = (environ.get(TOKEN_ENV) or "").strip() or None

    visitor: str | None = None
    if anonymous or (token is None and not isLoopback(gardend)):
        token = None
        visitor = visitorId or loadVisitorId(
            stateDir if stateDir is not None else stateDirectory(environ)
        )

    if modelKeyEnv is not None:
        modelKey = (environ.get(modelKeyEnv) or "").strip() or None
        if modelKey is None:
            raise CredentialError(f"the variable {modelKeyEnv} (--model-key-env) is not set")
    else:
        modelKey = (environ.get(MODEL_KEY_ENV) or "").strip() or None
    return Credentials(token=token, visitorId=visitor, modelKey=modelKey)


def errorFrame(
    code: str,
    message: str,
    requestId: str | None = None,
    details: JSONObject | None = None,
) -> JSONObject:
    """
    A refusal the client makes itself, in the host's error frame's shape.
    """
    return {
        "protocol": PROTOCOL,
        "type": "error",
        "requestId": requestId,
        "code": code,
        "message": message,
        "details": details,
    }


def localFrame(frameType: str, requestId: str | None, value: JSON) -> JSONObject:
    """
    A frame the client makes itself (C{ready}, C{closed}), in the host's
    frames' shape.
    """
    return {"protocol": PROTOCOL, "type": frameType, "requestId": requestId, "value": value}


def _withoutTrailingSlash(url: str) -> str:
    return url.rstrip("/")


@frozen(kw_only=True)
class HostLink:
    """
    The host's routes under one graph, through gardend's gateway.

    @ivar http: a treq C{HTTPClient} (or C{StubTreq}, whose methods are
        made when it is: typed as L{Any}).
    @ivar gardend: gardend's URL (C{https://cow-tools.example}).
    @ivar graph: the graph the paths are bound to.
    @ivar headers: sent with every request (credentials, client id).
    """

    http: Any
    gardend: str = field(converter=_withoutTrailingSlash)
    graph: str
    headers: Mapping[str, str] = field(factory=dict, repr=False)

    def url(self, path: str, query: Mapping[str, str] | None = None) -> str:
        """
        The gateway's URL for the host's C{path} on the bound graph.
        """
        url = f"{self.gardend}/services/vehicle/g/{quote(self.graph, safe='')}{path}"
        if query:
            url += "?" + urlencode(query)
        return url

    def sessionPath(self, sessionId: str, rest: str = "") -> str:
        """
        C{/sessions/<sessionId><rest>}, the id quoted.
        """
        return f"/sessions/{quote(sessionId, safe='')}{rest}"

    def requestHeaders(self, extra: Mapping[bytes, str]) -> dict[bytes, str]:
        """
        The headers of one request: L{headers} and C{extra}, every name as
        bytes, as Twisted keeps them (a str name beside the same name in
        bytes is compared with it: a C{BytesWarning} under C{python -b}).
        """
        return {**{name.encode("ascii"): value for name, value in self.headers.items()}, **extra}

    async def call(
        self,
        method: str,
        path: str,
        payload: JSON = None,
        query: Mapping[str, str] | None = None,
    ) -> JSONObject:
        """
        One request; its answer as a frame.  What is not the host's frame
        becomes an error frame: gardend's own refusals keep their code
        (C{unauthorized}, C{forbidden}, ...), a gardend that does not answer
        is C{unreachable}, an answer that is not a frame is C{bad_answer}.
        """
        # Header names as bytes, as Twisted keeps them (str names mixed in
        # are compared with bytes ones: a BytesWarning under python -b).
        headers = self.requestHeaders({b"Accept": "application/json"})
        data = None
        if payload is not None:
            headers[b"Content-Type"] = "application/json"
            data = dumps(payload)
        try:
            response = await self.http.request(
                method, self.url(path, query), headers=headers, data=data
            )
            content = await response.content()
        except CancelledError:
            raise
        except Exception as e:
            if wasCancelled(e):
                raise CancelledError() from e
            reason, text = describeFailure(e, self.gardend)
            return errorFrame(
                "unreachable", text, details={"gardend": self.gardend, "reason": reason}
            )
        return asFrame(response.code, content)


def asFrame(status: int, content: bytes) -> JSONObject:
    """
    The frame an answer carries, or an error frame that says what came
    instead.
    """
    try:
        answer = loads(content.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        answer = None
    if isinstance(answer, dict) and answer.get("protocol") == PROTOCOL and "type" in answer:
        return answer
    error = answer.get("error") if isinstance(answer, dict) else None
    if isinstance(error, dict):
        # gardend's own refusal: {"ok": false, "error": {"code", "message"}}
        return errorFrame(
            str(error.get("code") or "gardend_error"),
            str(error.get("message") or f"gardend answered {status}"),
            details={"status": status, "from": "gardend"},
        )
    return errorFrame(
        "bad_answer",
        f"gardend answered {status} with something that is not a frame",
        details={"status": status},
    )


# -- reading the host's frames ------------------------------------------------


def valueOf(frame: JSONObject) -> JSONObject:
    """
    A frame's C{value} as an object (empty when it carries none).
    """
    return objectOf(frame.get("value"))


def summaryOf(frame: JSONObject) -> JSONObject:
    """
    The session summary a frame's value carries (C{value.session}), or an
    empty object.
    """
    return objectOf(valueOf(frame).get("session"))


def sessionIdOf(summary: JSONObject) -> str:
    """
    The id of the session C{summary} describes.

    @raise ValueError: it names none (not an answer of the host's).
    """
    sessionId = textOf(summary.get("sessionId"))
    if sessionId is None:
        raise ValueError("the host's answer names no session")
    return sessionId


def leaseHeldBy(summary: JSONObject, clientId: str) -> bool:
    """
    Does C{summary} say that C{clientId} holds the session's lease?
    """
    lease = summary.get("lease")
    return isinstance(lease, dict) and lease.get("clientId") == clientId
