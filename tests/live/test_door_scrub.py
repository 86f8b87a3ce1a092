"""
The own-key door scrubs the caller's key out of everything the provider
sends back, also out of an error event inside a 200 stream and across the
pieces it arrives in (issue 10, section 3): L{KeyScrubber} cut at every
point, then the door in front of the scripted model echoing the key.
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
from twisted.trial.unittest import SynchronousTestCase, TestCase
from twisted.web.client import Agent, HTTPConnectionPool
from twisted.web.resource import Resource
from twisted.web.server import Site

from vehicle.box import _proxy
from vehicle.box._proxy import KeyScrubber, ModelDoor, Upstream, doorsClosed
from vehicle.testing import ScriptedModel
from vehicle.testing._model import StreamedError

from tests.live.test_proxy import _UnixEndpoints


KEY = 'sk-or-v1-"quoted"\\slash-0123456789abcdef'


def _escaped(key: str) -> str:
    return json.dumps(key)[1:-1]


class KeyScrubberTests(SynchronousTestCase):
    """
    L{KeyScrubber} on bodies cut into pieces anywhere.
    """

    body = (
        b'data: {"choices":[]}\n\n'
        + b'data: {"error":{"message":"Invalid key ' + KEY.encode()
        + b' (' + _escaped(KEY).encode() + b')"}}\n\n'
        + b"data: [DONE]\n\n"
    )

    def scrubbed(self, pieces: list[bytes]) -> bytes:
        scrubber = KeyScrubber([KEY])
        out = []
        for piece in pieces:
            sent = scrubber.feed(piece)
            out.append(sent)
        out.append(scrubber.flush())
        return b"".join(out)

    def assertClean(self, data: bytes) -> None:
        for form in (KEY, _escaped(KEY)):
            self.assertNotIn(form.encode(), data)
            # Not even its middle part.
            self.assertNotIn(form[5:-5].encode(), data)
        self.assertEqual(data.count(b"[redacted]"), 2)

    def test_everyCutInTwo(self) -> None:
        """
        Cut in two anywhere, the key never passes, and all else does.
        """
        whole = self.scrubbed([self.body])
        self.assertClean(whole)
        for at in range(len(self.body) + 1):
            self.assertEqual(self.scrubbed([self.body[:at], self.body[at:]]), whole, at)

    def test_byteByByte(self) -> None:
        """
        One byte at a time, the key never passes, and the bytes that come
        out are the same.
        """
        pieces = [self.body[i : i + 1] for i in range(len(self.body))]
        result = self.scrubbed(pieces)
        self.assertClean(result)
        self.assertEqual(result, self.scrubbed([self.body]))

    def test_streamStaysLive(self) -> None:
        """
        What cannot begin a key is passed on at once: only a tail that could
        is held back, until the next piece shows it is not one.
        """
        scrubber = KeyScrubber([KEY])
        self.assertEqual(scrubber.feed(b"data: hello\n\n"), b"data: hello\n\n")
        self.assertEqual(scrubber.feed(b"data: sk-or"), b"data: ")
        self.assertEqual(scrubber.feed(b"ange\n\n"), b"sk-orange\n\n")
        self.assertEqual(scrubber.flush(), b"")

    def test_noKeys(self) -> None:
        """
        With no key to look for, everything passes as it came.
        """
        scrubber = KeyScrubber([])
        self.assertEqual(scrubber.feed(self.body), self.body)
        self.assertEqual(scrubber.flush(), b"")


class StreamedErrorDoorTests(TestCase):
    """
    The door in front of the scripted model, which quotes the key it was
    sent in an error event of a 200 stream, a few bytes at a time.
    """

    timeout = 20

    async def setUp(self) -> None:
        self.model = ScriptedModel(reactor=reactor)
        port = await self.model.listen(reactor)
        self.addCleanup(port.stopListening)
        self.folder = Path(tempfile.mkdtemp(prefix="door-"))
        self.addCleanup(shutil.rmtree, self.folder, True)
        assert self.model.url is not None
        self.door = ModelDoor(
            reactor=reactor,
            socketPath=self.folder / "s" / "model.sock",
            model=Upstream(baseUrl=self.model.url, keySource=lambda: KEY, scrub=True),
        )
        await self.door.listen()
        self.addCleanup(self.door.close)
        pool = HTTPConnectionPool(reactor, persistent=False)
        self.client = HTTPClient(
            Agent.usingEndpointFactory(reactor, _UnixEndpoints(self.door.socketPath), pool=pool)
        )

    async def test_keyInA200Stream(self) -> None:
        """
        The provider got the caller's key, quoted it back inside a 200
        stream cut into 3-byte writes; the body reads the event with the
        key redacted (a gzip answer is read decoded, so scrubbed too).
        """
        self.model.enqueue(StreamedError("Invalid API key {key} for this account", pieceBytes=3))
        response = await self.client.request(
            "POST", "http://door/v1/chat/completions",
            headers={"authorization": f"Bearer {self.door.token}",
                     "content-type": "application/json",
                     "accept-encoding": "gzip"},
            data=json.dumps({"model": "echo-1", "stream": True, "messages": []}).encode(),
        )
        body = await response.content()
        self.assertEqual(response.code, 200)
        headers, _ = self.model.requests[-1]
        self.assertEqual(headers["authorization"], f"Bearer {KEY}")
        self.assertIn(b"Invalid API key [redacted] for this account", body)
        for form in (KEY, _escaped(KEY)):
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


class EchoDoorTests(TestCase):
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
        folder = Path(tempfile.mkdtemp(prefix="door-"))
        self.addCleanup(shutil.rmtree, folder, True)
        door = ModelDoor(
            reactor=reactor,
            socketPath=folder / "s" / "model.sock",
            model=Upstream(baseUrl=f"http://127.0.0.1:{port.getHost().port}/v1",
                           keySource=lambda: keys[0], scrub=True),
        )
        await door.listen()
        self.addCleanup(door.close)
        pool = HTTPConnectionPool(reactor, persistent=False)
        client = HTTPClient(Agent.usingEndpointFactory(reactor, _UnixEndpoints(door.socketPath), pool=pool))
        response = await client.request(
            "POST", "http://door/v1/chat/completions",
            headers={"authorization": f"Bearer {door.token}"}, data=b"{}",
        )
        body = await response.content()
        self.assertEqual(body, b'data: {"error": "[redacted] then [redacted]"}\n\n')
        self.assertEqual(response.headers.getRawHeaders(b"x-echo"), [b"key=[redacted]"])


class DoorClosingTests(TestCase):
    """
    A door lets go of its socket before its folder may be removed.
    """

    timeout = 20

    async def test_folderRemovedAfterDoorsClosed(self) -> None:
        """
        A close under way is waited for by L{doorsClosed} and by a second
        close; the folder removed after that takes nothing from under the
        port (its path is let go a moment after it is told to stop).
        """
        folder = Path(tempfile.mkdtemp(prefix="door-"))
        self.addCleanup(shutil.rmtree, folder, True)
        door = ModelDoor(reactor=reactor, socketPath=folder / "s" / "model.sock",
                         model=Upstream(baseUrl="http://127.0.0.1:9", key="k"))
        await door.listen()
        self.assertTrue(door.socketPath.exists())
        first = Deferred.fromCoroutine(door.close())
        second = Deferred.fromCoroutine(door.close())
        self.assertEqual(door.state, "closing")
        self.assertFalse(first.called)
        await doorsClosed()
        self.assertEqual(door.state, "closed")
        self.assertFalse(door.socketPath.exists())
        shutil.rmtree(folder)
        await first
        await second
        await door.close()
        self.assertFalse(folder.exists())
        self.assertNotIn(door, _proxy._DOORS)
