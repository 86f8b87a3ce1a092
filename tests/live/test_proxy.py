# -*- test-case-name: tests.live.test_proxy -*-
"""
The model proxy (L{vehicle.box._proxy.ModelProxy}) on a real Unix socket,
in front of a real upstream on loopback: only the body's token opens the
model route, which gets the real key instead (in the header the body's
client put its token in: a bearer, Anthropic's C{x-api-key}, Google's
C{x-goog-api-key}); answers
stream through as they come; the MCP route passes the body's own bearer; nothing else is
routed.
"""

from __future__ import annotations

import json

import os
import shutil
import stat
import tempfile
from pathlib import Path
from typing import Any

import treq
from treq.client import HTTPClient
from twisted.internet import reactor
from twisted.internet.defer import Deferred
from twisted.internet.error import ConnectionRefusedError
from twisted.trial.unittest import TestCase
from twisted.web.client import Agent, HTTPConnectionPool
from twisted.web.resource import Resource
from twisted.web.server import NOT_DONE_YET, Site

from vehicle.box._proxy import ModelProxy, Upstream

from tests.support.live import sleep
from tests.support.unixhttp import UnixEndpoints


REAL_KEY = "sk-real-provider-key-0123456789"


class Upstream_(Resource):
    """
    The provider (or gardend's MCP endpoint): records each request; answers
    JSON at once, or, in C{stream} mode, one SSE chunk now and the rest when
    the test fires L{release}.
    """

    isLeaf = True

    def __init__(self) -> None:
        super().__init__()
        self.requests: list[dict[str, Any]] = []
        self.release: Deferred = Deferred()
        self.finished = False
        self.lost = False
        self.onRefuse: Any = None
        #: How the next answers are given: C{json}, C{stream} or C{refuse}.
        self.mode = "json"

    def render(self, request: Any) -> Any:
        self.requests.append({
            "method": request.method.decode(),
            "path": request.uri.decode(),
            "headers": {
                name.decode().lower(): [v.decode() for v in values]
                for name, values in request.requestHeaders.getAllRawHeaders()
            },
            "body": request.content.read(),
        })
        if self.mode == "refuse":
            # A provider that quotes the key it was sent, as written and
            # JSON-escaped, while the caller's newest key changes meanwhile.
            key = request.getHeader(b"authorization").split(b" ", 1)[1]
            if self.onRefuse is not None:
                self.onRefuse()
            request.setResponseCode(401)
            request.setHeader(b"content-type", b"application/json")
            escaped = json.dumps(key.decode())[1:-1].encode()
            return b'{"error":{"message":"invalid key ' + key + b" (" + escaped + b')"}}'
        if self.mode == "stream":
            request.setHeader(b"content-type", b"text/event-stream")
            request.write(b"data: first\n\n")
            request.notifyFinish().addErrback(lambda _: setattr(self, "lost", True))

            def rest(_: Any) -> None:
                request.write(b"data: second\n\n")
                request.write(b"data: [DONE]\n\n")
                self.finished = True
                request.finish()

            self.release.addCallback(rest)
            return NOT_DONE_YET
        request.setResponseCode(200)
        request.setHeader(b"content-type", b"application/json")
        request.setHeader(b"x-upstream", b"yes")
        return b'{"ok":true}'


class ProxyTests(TestCase):
    """
    A proxy with a model upstream and an MCP upstream, both served here.
    """

    timeout = 20

    async def setUp(self) -> None:
        self.upstream = Upstream_()
        site = Site(self.upstream)
        site.noisy = False
        self.upstreamPort = reactor.listenTCP(0, site, interface="127.0.0.1")
        self.addCleanup(self.upstreamPort.stopListening)
        base = f"http://127.0.0.1:{self.upstreamPort.getHost().port}"
        # A Unix socket's path is short: keep it out of trial's deep folder.
        self.folder = Path(tempfile.mkdtemp(prefix="proxy-"))
        self.addCleanup(shutil.rmtree, self.folder, True)
        self.proxy = ModelProxy(
            reactor=reactor,
            socketPath=self.folder / "sid" / "model.sock",
            model=Upstream(baseUrl=base + "/api/v1", key=REAL_KEY),
            mcp=Upstream(baseUrl=base + "/mcp-endpoint"),
        )
        await self.proxy.listen()
        self.addCleanup(self.proxy.close)
        pool = HTTPConnectionPool(reactor, persistent=False)
        self.client = HTTPClient(
            Agent.usingEndpointFactory(reactor, UnixEndpoints(self.proxy.socketPath), pool=pool)
        )

    async def ask(self, path: str, token: str | None = None, method: str = "POST",
                  body: bytes = b'{"model":"m"}', proxyToken: str | None = None,
                  extra: dict[bytes, str] | None = None) -> tuple[int, bytes, Any]:
        headers = {b"content-type": "application/json", **(extra or {})}
        if token is not None:
            headers[b"authorization"] = f"Bearer {token}"
        if proxyToken is not None:
            headers[b"x-vehicle-proxy"] = proxyToken
        response = await self.client.request(
            method, "http://proxy" + path, headers=headers, data=body
        )
        return response.code, await response.content(), response

    async def test_socketIsPrivate(self) -> None:
        """
        The socket is the owner's only (0600) in a folder of the owner's
        only (0700); the token is a fresh, long secret unlike the key.
        """
        mode = os.stat(self.proxy.socketPath).st_mode
        self.assertTrue(stat.S_ISSOCK(mode))
        self.assertEqual(stat.S_IMODE(mode), 0o600)
        self.assertEqual(stat.S_IMODE(os.stat(self.proxy.socketPath.parent).st_mode), 0o700)
        self.assertTrue(self.proxy.token.startswith("vbt-"))
        self.assertGreater(len(self.proxy.token), 40)
        other = ModelProxy(reactor=reactor, socketPath=self.folder / "x.sock",
                          model=Upstream(baseUrl="http://127.0.0.1:9", key=REAL_KEY))
        self.assertNotEqual(other.token, self.proxy.token)
        self.assertNotIn(REAL_KEY, repr(self.proxy))
        self.assertNotIn(self.proxy.token, repr(self.proxy))

    async def test_wrongToken(self) -> None:
        """
        A wrong, missing or non-bearer token gets 401 and never reaches
        the provider; nor does the real key itself.
        """
        for token in ("vbt-wrong", None, REAL_KEY, self.proxy.token + "x", ""):
            code, body, _ = await self.ask("/v1/chat/completions", token)
            self.assertEqual(code, 401, (token, body))
            self.assertNotIn(REAL_KEY.encode(), body)
        response = await self.client.request(
            "POST", "http://proxy/v1/chat/completions",
            headers={b"authorization": self.proxy.token}, data=b"{}",
        )
        self.assertEqual(response.code, 401)
        await response.content()
        self.assertEqual(self.upstream.requests, [])

    async def test_rightToken(self) -> None:
        """
        The body's token opens the model route: the provider gets the
        request at its own base URL, with the real key and never the
        token, the body unchanged; the answer comes back with its status
        and headers.
        """
        code, body, response = await self.ask(
            "/v1/chat/completions", self.proxy.token, body=b'{"model":"m","x":1}'
        )
        self.assertEqual((code, body), (200, b'{"ok":true}'))
        self.assertEqual(response.headers.getRawHeaders(b"x-upstream"), [b"yes"])
        [seen] = self.upstream.requests
        self.assertEqual(seen["method"], "POST")
        self.assertEqual(seen["path"], "/api/v1/chat/completions")
        self.assertEqual(seen["headers"]["authorization"], [f"Bearer {REAL_KEY}"])
        self.assertEqual(seen["body"], b'{"model":"m","x":1}')
        self.assertNotIn(self.proxy.token, repr(seen))
        self.assertEqual(seen["headers"]["host"], [f"127.0.0.1:{self.upstreamPort.getHost().port}"])

    async def test_theProvidersHeaders(self) -> None:
        """
        The provider's headers (the catalogue's, held by the host as the
        key is) go with each model request, in place of any the body sent
        under those names; the body's others pass; an MCP request gets none
        of them.
        """
        self.proxy.model = Upstream(
            baseUrl=self.proxy.model.baseUrl, key=REAL_KEY,
            headers={"x-provider-secret": "hs-123", "X-Team": "garden"},
        )
        code, _, _ = await self.ask(
            "/v1/chat/completions", self.proxy.token,
            extra={b"x-team": "forged", b"x-pi-own": "kept"},
        )
        self.assertEqual(code, 200)
        [seen] = self.upstream.requests
        self.assertEqual(seen["headers"]["x-provider-secret"], ["hs-123"])
        self.assertEqual(seen["headers"]["x-team"], ["garden"])
        self.assertEqual(seen["headers"]["x-pi-own"], ["kept"])
        await self.ask("/mcp", "delegated-abc", proxyToken=self.proxy.token)
        self.assertNotIn("hs-123", repr(self.upstream.requests[-1]))
        self.assertNotIn("x-provider-secret", self.upstream.requests[-1]["headers"])

    async def test_anthropicsKeyHeader(self) -> None:
        """
        A body on Anthropic's API presents its token as that client puts a
        key (C{x-api-key}) and asks for the path it adds to its base
        (C{/v1/messages} after the proxy's C{/v1}): the provider gets that
        path after its own base, with the key in the same header and no
        bearer; a wrong token there is refused and reaches nobody.
        """
        code, _, _ = await self.ask(
            "/v1/v1/messages?beta=true", extra={b"x-api-key": "not-the-token"}
        )
        self.assertEqual(code, 401)
        self.assertEqual(self.upstream.requests, [])
        code, _, _ = await self.ask(
            "/v1/v1/messages?beta=true", extra={b"x-api-key": self.proxy.token}
        )
        self.assertEqual(code, 200)
        [seen] = self.upstream.requests
        self.assertEqual(seen["path"], "/api/v1/v1/messages?beta=true")
        self.assertEqual(seen["headers"]["x-api-key"], [REAL_KEY])
        self.assertNotIn("authorization", seen["headers"])
        self.assertNotIn(self.proxy.token, repr(seen))
        # A bearer body that also sends another x-api-key: the key goes in
        # the bearer, and the other header does not pass.
        await self.ask("/v1/chat/completions", self.proxy.token,
                       extra={b"x-api-key": "stray"})
        seen = self.upstream.requests[-1]
        self.assertEqual(seen["headers"]["authorization"], [f"Bearer {REAL_KEY}"])
        self.assertNotIn("x-api-key", seen["headers"])
        # The token in both (pi's authHeader on Anthropic's API): the key in
        # both.
        await self.ask("/v1/v1/messages", self.proxy.token,
                       extra={b"x-api-key": self.proxy.token})
        seen = self.upstream.requests[-1]
        self.assertEqual(seen["headers"]["authorization"], [f"Bearer {REAL_KEY}"])
        self.assertEqual(seen["headers"]["x-api-key"], [REAL_KEY])

    async def test_googlesKeyHeader(self) -> None:
        """
        A body on Google's API presents its token in C{x-goog-api-key} and
        asks for one model's generateContent after the proxy's C{/v1}: the
        provider gets it after its own base, with the key in that header;
        another path under it reaches nobody.
        """
        path = "/v1/models/gemini-1:streamGenerateContent?alt=sse"
        code, _, _ = await self.ask(path, extra={b"x-goog-api-key": self.proxy.token})
        self.assertEqual(code, 200)
        [seen] = self.upstream.requests
        self.assertEqual(seen["path"], "/api/v1/models/gemini-1:streamGenerateContent?alt=sse")
        self.assertEqual(seen["headers"]["x-goog-api-key"], [REAL_KEY])
        self.assertNotIn("authorization", seen["headers"])
        for elsewhere in ("/v1/models/gemini-1:countTokens", "/v1/models/a/b:generateContent",
                          "/v1/files:upload", "/v1/models/..:generateContent/x"):
            code, _, _ = await self.ask(elsewhere, extra={b"x-goog-api-key": self.proxy.token})
            self.assertEqual(code, 404, elsewhere)
        self.assertEqual(len(self.upstream.requests), 1)

    async def test_streams(self) -> None:
        """
        An SSE answer streams through: its first chunk reaches the body
        while the provider is still answering.
        """
        self.upstream.mode = "stream"
        response = await self.client.request(
            "POST", "http://proxy/v1/chat/completions",
            headers={b"authorization": f"Bearer {self.proxy.token}"}, data=b"{}",
        )
        self.assertEqual(response.code, 200)
        self.assertEqual(response.headers.getRawHeaders(b"content-type"), [b"text/event-stream"])
        chunks: list[bytes] = []
        done = treq.collect(response, chunks.append)
        for _ in range(50):
            if b"".join(chunks):
                break
            await sleep(0.05)
        self.assertEqual(b"".join(chunks), b"data: first\n\n")
        self.assertFalse(self.upstream.finished)
        self.upstream.release.callback(None)
        await done
        self.assertEqual(b"".join(chunks), b"data: first\n\ndata: second\n\ndata: [DONE]\n\n")

    async def test_mcpPassesBearer(self) -> None:
        """
        The MCP route opens to the body's proxy token (its own header, never
        forwarded) and passes the body's bearer (the delegated token)
        through unchanged, never the model key, to the MCP endpoint, query
        and all; without the proxy token it is 401 and reaches nobody.
        """
        code, body, _ = await self.ask("/mcp?session=1", "delegated-abc")
        self.assertEqual(code, 401)
        self.assertEqual(self.upstream.requests, [])
        code, body, _ = await self.ask("/mcp?session=1", "delegated-abc", proxyToken=self.proxy.token)
        self.assertEqual(code, 200)
        [seen] = self.upstream.requests
        self.assertEqual(seen["path"], "/mcp-endpoint?session=1")
        self.assertEqual(seen["headers"]["authorization"], ["Bearer delegated-abc"])
        self.assertNotIn("x-vehicle-proxy", seen["headers"])
        code, body, _ = await self.ask("/mcp", proxyToken=self.proxy.token)
        self.assertEqual(code, 200)
        self.assertNotIn("authorization", self.upstream.requests[-1]["headers"])
        self.assertNotIn(REAL_KEY, repr(self.upstream.requests))

    async def test_onlyTheModelRoutes(self) -> None:
        """
        With the right token, only POST to the model API paths is forwarded.
        """
        code, _, _ = await self.ask("/v1/models", self.proxy.token)
        self.assertEqual(code, 404)
        code, _, _ = await self.ask("/v1/chat/completions", self.proxy.token, method="PUT")
        self.assertEqual(code, 405)
        self.assertEqual(self.upstream.requests, [])

    async def test_bodyTooLarge(self) -> None:
        """
        A body over the proxy's limit is refused with 413 and never forwarded.
        """
        from vehicle.box._proxy import MAX_PROXY_BODY

        code, _, _ = await self.ask("/v1/chat/completions", self.proxy.token,
                                    body=b"x" * (MAX_PROXY_BODY + 1))
        self.assertEqual(code, 413)
        self.assertEqual(self.upstream.requests, [])

    async def test_abortClosesUpstream(self) -> None:
        """
        When the body hangs up mid-answer, the proxy closes its connection to
        the provider (an abort stops the provider's generation).
        """
        self.upstream.mode = "stream"
        response = await self.client.request(
            "POST", "http://proxy/v1/chat/completions",
            headers={b"authorization": f"Bearer {self.proxy.token}"}, data=b"{}",
            unbuffered=True,
        )
        self.assertEqual(response.code, 200)
        response.original._transport.stopProducing()
        for _ in range(100):
            if self.upstream.lost:
                break
            await sleep(0.02)
        self.assertTrue(self.upstream.lost)

    async def test_unknownPaths(self) -> None:
        """
        Anything but C{/v1/...} and C{/mcp} is 404, even with the right
        token, and reaches nobody.
        """
        for path in ("/", "/v2/chat", "/v1", "/mcpx", "/mcp/other", "/api/v1/chat/completions",
                     "/x/../v1/chat"):
            code, body, _ = await self.ask(path, self.proxy.token)
            self.assertEqual(code, 404, (path, body))
        self.assertEqual(self.upstream.requests, [])

    async def test_noMcpUpstream(self) -> None:
        """
        A proxy without an MCP upstream answers C{/mcp} with 404.
        """
        self.proxy.mcp = None
        code, _, _ = await self.ask("/mcp", "delegated-abc", proxyToken=self.proxy.token)
        self.assertEqual(code, 404)
        self.assertEqual(self.upstream.requests, [])

    async def test_providerDown(self) -> None:
        """
        A provider the host cannot reach gives 502, not a hang.
        """
        await self.upstreamPort.stopListening()
        code, body, _ = await self.ask("/v1/chat/completions", self.proxy.token)
        self.assertEqual(code, 502, body)
        self.assertNotIn(REAL_KEY.encode(), body)
        self.assertEqual(len(self.flushLoggedErrors(ConnectionRefusedError)), 1)

    async def test_close(self) -> None:
        """
        A closed proxy removes its socket.
        """
        await self.proxy.close()
        self.assertFalse(self.proxy.socketPath.exists())

    async def test_scrubsTheKeySentAndTheNewest(self) -> None:
        """
        A provider's error quoting the key the request carried is scrubbed,
        also when the caller sent a newer key while it was under way, and
        also JSON-escaped.
        """
        keys = ['sk-or-old"key\\1234']
        self.proxy.model = Upstream(
            baseUrl=self.proxy.model.baseUrl, keySource=lambda: keys[-1], scrub=True
        )
        self.upstream.onRefuse = lambda: keys.append("sk-or-new-key-5678")
        self.upstream.mode = "refuse"
        code, body, _ = await self.ask("/v1/chat/completions", self.proxy.token)
        self.assertEqual(code, 401)
        self.assertNotIn(b"sk-or-old", body)
        self.assertIn(b"[redacted]", body)
