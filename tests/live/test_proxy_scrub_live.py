"""
The live half of L{tests.unit.test_proxy_scrub}: L{StreamedErrorProxyTests}, L{EchoProxyTests}, L{ProxyClosingTests}
(real processes, sockets or the real reactor; see that module for the rest).
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

from treq.client import HTTPClient
from twisted.internet import reactor
from twisted.internet.defer import Deferred
from twisted.trial.unittest import TestCase
from twisted.web.client import Agent, HTTPConnectionPool
from twisted.web.resource import Resource
from twisted.web.server import Site

from vehicle.box import _proxy
from vehicle.box._proxy import ModelProxy, Upstream, proxiesClosed
from vehicle_local.model import ScriptedModel
from vehicle_local.model._model import StreamedError

from tests.support.scrub import KEY, escaped
from tests.support.unixhttp import UnixEndpoints


class StreamedErrorProxyTests(TestCase):
    """
    The proxy in front of the scripted model, which quotes the key it was
    sent in an error event of a 200 stream, a few bytes at a time.
    """

    timeout = 20

    async def setUp(self) -> None:
        self.model = ScriptedModel(reactor=reactor)
        port = await self.model.listen(reactor)
        self.addCleanup(port.stopListening)
        self.folder = Path(tempfile.mkdtemp(prefix="proxy-"))
        self.addCleanup(shutil.rmtree, self.folder, True)
        assert self.model.url is not None
        self.proxy = ModelProxy(
            reactor=reactor,
            socketPath=self.folder / "s" / "model.sock",
            model=Upstream(baseUrl=self.model.url, keySource=lambda: KEY, scrub=True),
        )
        await self.proxy.listen()
        self.addCleanup(self.proxy.close)
        pool = HTTPConnectionPool(reactor, persistent=False)
        self.client = HTTPClient(
            Agent.usingEndpointFactory(reactor, UnixEndpoints(self.proxy.socketPath), pool=pool)
        )

    async def test_keyInA200Stream(self) -> None:
        """
        The provider got the caller's key, quoted it back inside a 200
        stream cut into 3-byte writes; the body reads the event with the
        key redacted (a gzip answer is read decoded, so scrubbed too).
        """
        self.model.enqueue(StreamedError("Invalid API key {key} for this account", pieceBytes=3))
        response = await self.client.request(
            "POST", "http://proxy/v1/chat/completions",
            headers={b"authorization": f"Bearer {self.proxy.token}",
                     b"content-type": "application/json",
                     b"accept-encoding": "gzip"},
            data=json.dumps({"model": "echo-1", "stream": True, "messages": []}).encode(),
        )
        body = await response.content()
        self.assertEqual(response.code, 200)
        headers, _ = self.model.requests[-1]
        self.assertEqual(headers["authorization"], f"Bearer {KEY}")
        self.assertIn(b"Invalid API key [redacted] for this account", body)
        for form in (KEY, escaped(KEY)):
            self.assertNotIn(form.encode(), body)


class _Echo(Resource):
    """
    A provider that quotes the key it was sent in a header and in its 200
    body, after the caller's newest key changed meanwhile (C{onRequest}).
    """

    isLeaf = True

    def __init__(self, onRequest: Any) -> None:
        super().__init__()
        self.onRequest = onRequest

    def render(self, request: Any) -> bytes:
        sent = request.getHeader(b"authorization").split(b" ", 1)[1]
        newest = self.onRequest().encode()
        request.setHeader(b"x-echo", b"key=" + sent)
        request.setHeader(b"content-type", b"text/event-stream")
        return b"data: {\"error\": \"" + sent + b" then " + newest + b"\"}\n\n"


class EchoProxyTests(TestCase):
    """
    The key the request carried and the caller's newest are both scrubbed,
    from the body and from the headers.
    """

    timeout = 20

    async def test_sentAndNewestKeysInBodyAndHeaders(self) -> None:
        keys = ["sk-or-first-key-000111", "sk-or-newer-key-222333"]

        def turnOver() -> str:
            keys.append(keys.pop(0))
            return keys[0]

        site = Site(_Echo(turnOver))
        site.noisy = False
        port = reactor.listenTCP(0, site, interface="127.0.0.1")
        self.addCleanup(port.stopListening)
        folder = Path(tempfile.mkdtemp(prefix="proxy-"))
        self.addCleanup(shutil.rmtree, folder, True)
        proxy = ModelProxy(
            reactor=reactor,
            socketPath=folder / "s" / "model.sock",
            model=Upstream(baseUrl=f"http://127.0.0.1:{port.getHost().port}/v1",
                           keySource=lambda: keys[0], scrub=True),
        )
        await proxy.listen()
        self.addCleanup(proxy.close)
        pool = HTTPConnectionPool(reactor, persistent=False)
        client = HTTPClient(Agent.usingEndpointFactory(reactor, UnixEndpoints(proxy.socketPath), pool=pool))
        response = await client.request(
            "POST", "http://proxy/v1/chat/completions",
            headers={b"authorization": f"Bearer {proxy.token}"}, data=b"{}",
        )
        body = await response.content()
        self.assertEqual(body, b'data: {"error": "[redacted] then [redacted]"}\n\n')
        self.assertEqual(response.headers.getRawHeaders(b"x-echo"), [b"key=[redacted]"])


class ProxyClosingTests(TestCase):
    """
    A proxy lets go of its socket before its folder may be removed.
    """

    timeout = 20

    async def test_folderRemovedAfterProxiesClosed(self) -> None:
        """
        A close under way is waited for by L{proxiesClosed} and by a second
        close; the folder removed after that takes nothing from under the
        port (its path is let go a moment after it is told to stop).
        """
        folder = Path(tempfile.mkdtemp(prefix="proxy-"))
        self.addCleanup(shutil.rmtree, folder, True)
        proxy = ModelProxy(reactor=reactor, socketPath=folder / "s" / "model.sock",
                         model=Upstream(baseUrl="http://127.0.0.1:9", key="k"))
        await proxy.listen()
        self.assertTrue(proxy.socketPath.exists())
        first = Deferred.fromCoroutine(proxy.close())
        second = Deferred.fromCoroutine(proxy.close())
        self.assertEqual(proxy.state, "closing")
        self.assertFalse(first.called)
        await proxiesClosed()
        self.assertEqual(proxy.state, "closed")
        self.assertFalse(proxy.socketPath.exists())
        shutil.rmtree(folder)
        await first
        await second
        await proxy.close()
        self.assertFalse(folder.exists())
        self.assertNotIn(proxy, _proxy._PROXIES)
