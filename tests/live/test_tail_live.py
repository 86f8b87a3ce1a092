"""
The live half of L{tests.unit.test_tail}: L{LiveTailTests}
(real processes, sockets or the real reactor; see that module for the rest).
"""

from __future__ import annotations

from typing import Any

from twisted.internet import reactor
from twisted.internet.defer import CancelledError, Deferred
from twisted.trial.unittest import TestCase
from twisted.web.resource import Resource
from twisted.web.server import NOT_DONE_YET, Site

from vehicle.clients import HostLink, clientHTTP, Tail


from tests.support.live import LiveHost, sleep, startStandIn
from tests.support.sse import encoded, event


MASTER = "master-tail-test"


class LiveTailTests(TestCase):
    """
    The tail against a live host (real pi) behind the gardend stand-in.
    """

    timeout = 60

    async def test_resumesAfterADrop(self) -> None:
        """
        The tail prints each event once, in order, with deltas inline; when
        the stream is cut mid-run it reconnects with C{Last-Event-ID} and
        goes on from the next event: the printed seqs are 1..N with no gap
        and no repeat, ending at C{session.deleted}, where the tail stops.
        """
        stand = startStandIn(self, masterKey=MASTER)
        host = await LiveHost(self).start()
        stand.setServiceUrl(host.url)
        who = {"principal": "owner", "client": "tab-1"}
        code, frame = await host.call("POST", "/sessions", {"requestId": "c1"}, **who)
        self.assertEqual(code, 201, frame)
        sid = frame["value"]["session"]["sessionId"]

        output: list[str] = []
        tail = Tail(
            link=HostLink(http=host.http, gardend=stand.url, graph="g1",
                      headers={"Authorization": f"Bearer {MASTER}"}),
            sessionId=sid,
            clock=reactor,
            write=output.append,
            deltas=True,
            backoff=0.05,
        )
        done = Deferred.fromCoroutine(tail.run())

        async def until(predicate: Any, what: str) -> None:
            for _ in range(300):
                if predicate():
                    return
                await sleep(0.05)
            self.fail(f"never: {what}; printed {''.join(output)!r}")

        await until(lambda: "lease.claimed" in "".join(output), "the replay")
        await host.call("PATCH", f"/sessions/{sid}", {"title": "Cows"}, **who)
        await host.call("POST", f"/sessions/{sid}/commands",
                        {"type": "prompt", "requestId": "p1", "text": "[[SLOW]] count"}, **who)
        await until(lambda: "slow-2" in "".join(output), "the deltas")
        # Cut the stream at the host, mid-run.
        self.assertEqual(len(host.api.streams), 1)
        for stream in list(host.api.streams):
            stream.request.transport.loseConnection()
        await until(lambda: tail.connections >= 2, "a second connection")
        await host.waitFor(sid, lambda e: e["type"] == "command.completed", **who)
        await until(lambda: "run.settled" in "".join(output), "run.settled")
        code, frame = await host.call("DELETE", f"/sessions/{sid}", **who)
        self.assertEqual(code, 200, frame)
        await done

        text = "".join(output)
        lines = [line for line in text.split("\n") if line[:1].isdigit()]
        seqs = [int(line.split(" ", 1)[0]) for line in lines]
        self.assertEqual(seqs, list(range(1, len(seqs) + 1)), text)
        self.assertTrue(lines[-1].split(" ")[1] == "session.deleted", text)
        types = [line.split(" ")[1] for line in lines]
        for expected in ("session.created", "lease.claimed", "session.renamed", "run.started",
                         "run.settled", "command.completed"):
            self.assertIn(expected, types)
        self.assertIn("title=Cows", text)
        self.assertIn("\n    slow-0 slow-1 slow-2", text)  # deltas inline, indented
        # The second connection resumed from the last seq printed.
        resumed = [r for r in stand.requestsSeen if "last-event-id" in r["headers"]]
        self.assertEqual(len(resumed), tail.connections - 1)
        lastBefore = int(resumed[0]["headers"]["last-event-id"])
        self.assertIn(lastBefore, seqs[:-1])
        for request in resumed:
            self.assertTrue(request["path"].endswith(f"since={request['headers']['last-event-id']}"))
        self.flushLoggedErrors()

    async def test_silentStreamIsCut(self) -> None:
        """
        Over a real connection, a stream that goes silent (headers and one
        comment, then nothing) is cut after C{idleSeconds} and asked again
        after the last seq.
        """
        seen: list[Any] = []

        class Silent(Resource):
            isLeaf = True

            def render_GET(self, request: Any) -> Any:
                seen.append(request.getHeader(b"last-event-id"))
                request.setHeader(b"content-type", b"text/event-stream")
                request.write(b": connected\n\n")
                if len(seen) == 1:
                    request.write(encoded(event(1)))
                return NOT_DONE_YET

        port = reactor.listenTCP(0, Site(Silent()), interface="127.0.0.1")
        self.addCleanup(port.stopListening)
        http, pool = clientHTTP(reactor)
        self.addCleanup(pool.closeCachedConnections)
        output: list[str] = []
        warnings: list[str] = []
        tail = Tail(link=HostLink(http=http, gardend=f"http://127.0.0.1:{port.getHost().port}",
                              graph="g1"),
                    sessionId="s1", clock=reactor, write=output.append, warn=warnings.append,
                    idleSeconds=0.5, backoff=0.05)
        done = Deferred.fromCoroutine(tail.run())
        for _ in range(100):
            if len(seen) >= 2:
                break
            await sleep(0.05)
        done.cancel()
        await done.addErrback(lambda f: f.trap(CancelledError))
        await sleep(0.1)  # the host's side of the closed connection sees its end
        self.assertEqual(seen[:2], [None, b"1"])
        self.assertEqual(output, ["1 session.renamed\n"])
        self.assertEqual(warnings[0], "connection lost after seq 1 (nothing came for 0.5s); reconnecting")
