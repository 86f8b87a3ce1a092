# -*- test-case-name: tests.live.test_proxy -*-
"""
The model proxy of a box: an HTTP proxy on a Unix socket that the box
sees (bound read-only), which swaps a per-body token for the real provider
key and forwards to the provider, streaming the answer back.

The real key never enters the box: a tool that reads pi's memory finds only
the token, and the token is worthless outside the body it was made for.

A spare body's proxy (L{ModelProxy.model} L{None}) reaches no provider: it
answers the spare's one priming prompt itself (L{vehicle.box._apis.primingAnswer}) and
refuses anything else, until the spare is handed to a session
(L{ModelProxy.handTo}).
"""

from __future__ import annotations

import hmac
import json
import secrets
from pathlib import Path
from typing import Any, Callable, ClassVar, Iterable, Mapping

from attrs import define, field
from twisted.internet.defer import CancelledError, Deferred, maybeDeferred
from twisted.internet.endpoints import UNIXServerEndpoint
from twisted.internet.interfaces import IListeningPort
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.web.http import Request as HTTPRequest
from twisted.web.http_headers import Headers
from twisted.web.resource import Resource
from twisted.web.server import NOT_DONE_YET, Request, Site
from treq.client import HTTPClient

from vehicle._http import httpClient
from vehicle._relay import BodyRelay, copyAnswer, passOn, relayBody
from vehicle._request import BoundedRequest
from vehicle._reactors import IHostReactor
from vehicle.box._apis import KEY_HEADERS, isModelPath, primingAnswer
from vehicle.models import ModelCatalog


#: Headers never passed upstream as they came (the proxy sets its own).
_DROP = {
    b"authorization", b"x-api-key", b"x-goog-api-key", b"host", b"content-length",
    b"connection", b"transfer-encoding",
}

#: Answer headers that are the connection's, not the answer's.
_HOP = (b"content-length", b"transfer-encoding", b"connection")


#: The proxies of this process that listen or are closing.
_PROXIES: set["ModelProxy"] = set()


async def proxiesClosed() -> None:
    """
    Wait for every proxy that is closing to be closed: its socket's folder
    may be removed only then (the port lets go of its path a moment after
    it is told to stop).
    """
    for proxy in [p for p in _PROXIES if p.state == "closing"]:
        await proxy.close()


def newToken() -> str:
    return "vbt-" + secrets.token_urlsafe(32)


REDACTED = b"[redacted]"


class KeyScrubber:
    """
    Takes keys out of a body that arrives in pieces (a provider's stream,
    whose error event may quote the caller's key): every key, as written
    and JSON-escaped, becomes C{[redacted]} even when it is cut across
    pieces.  Only a tail that could be the start of a key is held back
    until the next piece (or the end), so the stream stays live.
    """

    def __init__(self, keys: Iterable[str]) -> None:
        forms = set()
        for key in keys:
            if key:
                forms.add(key.encode("utf-8"))
                forms.add(json.dumps(key)[1:-1].encode("utf-8"))
        #: Longest first, so a JSON-escaped form goes before a part of it.
        self.forms = sorted(forms, key=len, reverse=True)
        self.pending = b""

    def scrub(self, data: bytes) -> bytes:
        """
        C{data} with every whole key replaced (nothing held back).
        """
        for form in self.forms:
            data = data.replace(form, REDACTED)
        return data

    def _heldBack(self, data: bytes) -> int:
        """
        How many bytes at the end of C{data} could begin a key.
        """
        longest = len(self.forms[0]) if self.forms else 0
        for size in range(min(longest - 1, len(data)), 0, -1):
            tail = data[-size:]
            if any(form.startswith(tail) for form in self.forms):
                return size
        return 0

    def feed(self, data: bytes) -> bytes:
        """
        The next piece: what may be sent on now.
        """
        data = self.scrub(self.pending + data)
        held = self._heldBack(data)
        self.pending = data[len(data) - held :]
        return data[: len(data) - held]

    def flush(self) -> bytes:
        """
        The end of the body: what was held back, as it is (it holds no
        whole key, which L{feed} replaced, and no key can start there any
        more).
        """
        data, self.pending = self.pending, b""
        return data


@define(eq=False)
class Upstream:
    """
    Where a path prefix goes: C{baseUrl} and the key to put in place of the
    body's token (L{None}: pass the body's own bearer through, as for MCP).
    """

    baseUrl: str
    key: str | None = field(default=None, repr=False)
    #: For a key that may change (a caller's own, newest wins): asked per
    #: request, and takes precedence over C{key}.
    keySource: Callable[[], str | None] | None = field(default=None, repr=False)
    #: Scrub the key out of error answers before the body sees them.
    scrub: bool = False
    #: Headers the provider is sent with each model request, in place of
    #: any the body sent under those names (the catalogue's, which the
    #: host holds as it holds the key: L{vehicle.models.ModelCatalog.headersFor}).
    headers: Mapping[str, str] = field(factory=dict, repr=False)

    @classmethod
    def provider(cls, models: ModelCatalog, model: str, **overrides: Any) -> "Upstream":
        """
        The provider of C{model} as the catalogue names it: its C{baseUrl},
        its key and its headers (C{overrides} replace any of them).
        """
        _, spec = models.providerFor(model)
        key = spec.get("apiKey")
        return cls(**{
            "baseUrl": str(spec["baseUrl"]),
            "key": key if isinstance(key, str) else None,
            "headers": models.headersFor(model),
            **overrides,
        })

    def currentKey(self) -> str | None:
        if self.keySource is not None:
            return self.keySource()
        return self.key

    @property
    def swapsKey(self) -> bool:
        return self.key is not None or self.keySource is not None


#: The most a body may send through its proxy in one request (a long
#: conversation's whole context, with tool results, fits).
MAX_PROXY_BODY = 32 * 1024 * 1024

#: The header a body's MCP requests carry to open the proxy (the bearer there
#: is the person's delegation token, for gardend).
PROXY_HEADER = b"x-vehicle-proxy"


class _ProxyRequest(BoundedRequest):
    limit = MAX_PROXY_BODY


class _ProxySite(Site):
    """
    The proxy's site: quiet, no access log (a body's requests are its own).
    """

    noisy = False
    requestFactory = _ProxyRequest

    def __init__(self, resource: Resource) -> None:
        Site.__init__(self, resource)

    def log(self, request: HTTPRequest) -> None:
        pass


class _ProxyResource(Resource):
    isLeaf = True
    _log: ClassVar[Logger] = Logger()

    def __init__(self, proxy: "ModelProxy") -> None:
        Resource.__init__(self)
        self.proxy = proxy

    def render(self, request: Request) -> int:
        d = Deferred.fromCoroutine(self.proxy.forward(request))
        gone: list[Failure] = []
        d.addErrback(self._failed, request, gone)

        def lost(reason: Failure) -> None:
            gone.append(reason)
            d.cancel()

        request.notifyFinish().addErrback(lost)
        return NOT_DONE_YET

    def _failed(self, failure: Failure, request: Request, gone: list[Failure]) -> None:
        if failure.check(CancelledError):
            return
        self._log.failure("The model proxy failed", failure)
        if not request.finished and not gone:
            if not request.startedWriting:
                request.setResponseCode(502)
                request.write(b'{"error":{"message":"the host could not reach the provider"}}')
            request.finish()


@define(eq=False)
class ModelProxy:
    """
    One body's proxy: a Unix socket, a token, and the upstreams it reaches
    (C{/v1...} to the model provider; C{/mcp} to gardend's MCP endpoint).
    """

    _log: ClassVar[Logger] = Logger()

    reactor: IHostReactor
    socketPath: Path
    #: The provider; L{None} for a spare's proxy, which answers its one
    #: priming prompt itself and refuses the rest until L{handTo}.
    model: Upstream | None
    mcp: Upstream | None = None
    token: str = field(factory=newToken, repr=False)
    #: Asked before each model request: L{None} to let it through, or the
    #: reason to refuse it (the proxy meters the body's own budget, since a
    #: tool that read the token out of pi's memory could call it too).
    gate: Callable[[], str | None] | None = None
    port: IListeningPort | None = None
    #: The client to reach upstreams with (default: one that connects to
    #: IP addresses without a name lookup, made at L{listen}).
    http: HTTPClient | None = None
    _relays: set[BodyRelay] = field(factory=set)
    #: C{open}, C{closing} (its socket is being let go) or C{closed}.
    state: str = "open"
    _closeWaiters: list[Deferred[None]] = field(factory=list)
    #: A spare's proxy has answered its priming prompt (it answers one).
    primed: bool = False

    def handTo(self, model: Upstream, gate: Callable[[], str | None]) -> None:
        """
        A spare's body is handed to a session: from now on its proxy reaches
        C{model} (the session's provider, the host holding the key), each
        request let through by C{gate} (the session's meter).
        """
        self.model = model
        self.gate = gate

    async def listen(self) -> None:
        if self.http is None:
            self.http = httpClient(self.reactor)
        self.socketPath.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        if self.socketPath.exists():
            self.socketPath.unlink()
        site = _ProxySite(_ProxyResource(self))
        endpoint = UNIXServerEndpoint(self.reactor, str(self.socketPath), mode=0o600)
        self.port = await endpoint.listen(site)
        _PROXIES.add(self)

    async def close(self) -> None:
        """
        Stop listening, stop every answer under way, remove the socket.  A
        second call waits for the first to finish.
        """
        if self.state == "closed":
            return
        if self.state == "closing":
            waiter: Deferred[None] = Deferred()
            self._closeWaiters.append(waiter)
            await waiter
            return
        self.state = "closing"
        try:
            await self._close()
        finally:
            self.state = "closed"
            _PROXIES.discard(self)
            waiters, self._closeWaiters = self._closeWaiters, []
            for waiter in waiters:
                waiter.callback(None)

    async def _close(self) -> None:
        if self.port is not None:
            port, self.port = self.port, None
            await maybeDeferred(port.stopListening)
        for relay in list(self._relays):
            relay.stop()
        self._relays.clear()
        try:
            self.socketPath.unlink()
            self.socketPath.parent.rmdir()
        except OSError:
            pass

    def _route(self, path: bytes) -> tuple[Upstream, str] | None:
        text = path.decode("latin-1")
        if text == "/mcp" or text.startswith("/mcp?"):
            if self.mcp is None:
                return None
            return self.mcp, self.mcp.baseUrl + text[len("/mcp"):]
        if isModelPath(text) and self.model is not None:
            return self.model, self.model.baseUrl.rstrip("/") + text[len("/v1"):]
        return None

    def _presented(self, request: Request) -> tuple[bytes, ...]:
        """
        The headers in which the body presented this proxy's token for a
        model request, as its provider's client sends a key: a bearer
        (C{authorization}), Anthropic's C{x-api-key}, or both (a provider
        with pi's C{authHeader}); none when neither holds it.
        """
        token = self.token.encode("ascii")
        return tuple(
            name for name, prefix in KEY_HEADERS
            if hmac.compare_digest(request.getHeader(name) or b"", prefix + token)
        )

    def _prime(self, request: Request) -> bool:
        """
        Answer a spare's priming prompt here, if C{request} is it: the
        first model request of a proxy that reaches no provider yet, with
        its body's token.  Anything else is refused by L{forward}.
        """
        if self.model is not None or self.primed or request.method != b"POST":
            return False
        answer = primingAnswer(request.uri.decode("latin-1").split("?", 1)[0])
        if answer is None or not self._presented(request):
            return False
        self.primed = True
        request.setResponseCode(200)
        request.setHeader(b"content-type", b"text/event-stream")
        request.write(answer)
        request.finish()
        return True

    async def forward(self, request: Request) -> None:
        if self._prime(request):
            return None
        route = self._route(request.uri)
        given = request.getHeader(b"authorization") or b""
        if route is None:
            if self.model is None and isModelPath(request.uri.decode("latin-1")):
                return self._refuse(request, 503, "this body serves no session yet")
            return self._refuse(request, 404, "no such upstream")
        upstream, url = route
        sent: str | None = None
        headers = Headers()
        for name, values in request.requestHeaders.getAllRawHeaders():
            if name.lower() not in _DROP and name.lower() != PROXY_HEADER:
                headers.setRawHeaders(name, values)
        if upstream.swapsKey and request.method != b"POST":
            return self._refuse(request, 405, "the model takes POST only")
        if not upstream.swapsKey:
            # MCP: the bearer is the person's, for gardend; the proxy itself
            # opens to its body's token only.
            presented = request.getHeader(PROXY_HEADER) or b""
            if not hmac.compare_digest(presented, self.token.encode("ascii")):
                return self._refuse(request, 401, "this proxy needs its body's token")
        if upstream.swapsKey:
            # The model: only this body's token opens it, and the key goes
            # where the token was.
            keyHeaders = self._presented(request)
            if not keyHeaders:
                return self._refuse(request, 401, "this proxy needs its body's token")
            refusal = self.gate() if self.gate is not None else None
            if refusal is not None:
                return self._refuse(request, 429, refusal)
            key = upstream.currentKey()
            if key is None:
                return self._refuse(request, 401, "no model key for this body right now")
            sent = key
            for header, value in upstream.headers.items():
                headers.setRawHeaders(header.encode("latin-1"), [value.encode("utf-8")])
            for name, prefix in KEY_HEADERS:
                headers.removeHeader(name)
                if name in keyHeaders:
                    headers.setRawHeaders(name, [prefix + key.encode("utf-8")])
        elif given:
            headers.setRawHeaders(b"authorization", [given])
        assert self.http is not None, "the proxy forwards once it listens"
        response = await passOn(self.http, request, url, headers)
        scrubber: KeyScrubber | None = None
        if upstream.scrub:
            # A provider's answer may quote the key (an error answer, or an
            # error event inside a 200 stream): never let pi record it (the
            # key this request carried, and the newest).
            scrubber = KeyScrubber(k for k in (sent, upstream.currentKey()) if k)
        copyAnswer(
            response, request, _HOP, scrubber.scrub if scrubber is not None else None
        )
        relay = relayBody(response, request, scrubber)
        self._relays.add(relay)
        try:
            await relay.done
        finally:
            self._relays.discard(relay)
        if not request.finished:
            request.finish()

    def _refuse(self, request: Request, code: int, message: str) -> None:
        request.setResponseCode(code)
        request.setHeader(b"content-type", b"application/json")
        request.write(('{"error":{"message":"%s"}}' % message).encode("utf-8"))
        request.finish()
