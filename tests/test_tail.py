"""
Tests for L{vehicle.tail}: the SSE parser and the line format, bounded
reconnection on a fake clock, and the tail of a live host behind the gardend
stand-in, resuming after a drop with no gap and no repeat.
"""

from __future__ import annotations

from typing import Any

from twisted.internet import reactor
from twisted.internet.defer import Deferred, fail
from twisted.internet.error import ConnectionRefusedError
from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase, TestCase

from vehicle.ride import Door
from vehicle.tail import SSEParser, Tail, TailFailed, TailOptions, formatEvent

from tests.live import LiveHost, sleep, startStandIn


MASTER = "master-tail-test"


class FormatTests(SynchronousTestCase):
    """
    L{SSEParser} and L{formatEvent}.
    """

    def test_parser(self) -> None:
        """
        Messages split across chunks are put together; comments are
        skipped; several data lines are joined; CRLF is accepted.
        """
        messages: list[dict[str, str]] = []
        parser = SSEParser(messages.append)
        parser.feed(b": connected\n\nid: 1\nevent: a\nda")
        parser.feed(b"ta: {}\n\r\n: keepalive\n\nevent: b\ndata: x\ndata: y\n\n")
        self.assertEqual(
            messages,
            [{"id": "1", "event": "a", "data": "{}"}, {"event": "b", "data": "x\ny"}],
        )

    def test_compactLine(self) -> None:
        """
        C{<seq> <type> key=value...}: one-word strings bare, everything else
        as JSON, long values cut.
        """
        line = formatEvent(
            {
                "seq": 7,
                "type": "command.completed",
                "data": {"commandId": "p1", "text": "two words", "n": 3, "ok": True,
                         "tools": ["a"], "long": "x" * 500},
            }
        )
        self.assertTrue(
            line.startswith('7 command.completed commandId=p1 text="two words" n=3 ok=true '
                            'tools=["a"] long=xxx'),
            line,
        )
        self.assertLess(len(line), 300)


class FailingHTTP:
    """
    An HTTP client whose every request fails to connect; records when.
    """

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.times: list[float] = []

    def request(self, method: str, url: str, **kw: Any) -> Deferred:
        self.times.append(self.clock.seconds())
        return fail(ConnectionRefusedError())


class ReconnectTests(SynchronousTestCase):
    """
    L{Tail}'s bounded reconnection, on a fake clock.
    """

    def test_backsOffThenGivesUp(self) -> None:
        """
        Failed connections are retried after 0.5, 1, 2, ... seconds (at
        most C{maxBackoff}); after C{retries} failures in a row the tail
        gives up with L{TailFailed}.
        """
        clock = Clock()
        http = FailingHTTP(clock)
        tail = Tail(
            door=Door(http=http, gardend="http://g", graph="g1"),
            sessionId="s1",
            clock=clock,
            write=lambda text: None,
            retries=4,
            maxBackoff=3.0,
        )
        d = Deferred.fromCoroutine(tail.run())
        for _ in range(100):
            clock.advance(0.25)
        self.failureResultOf(d, TailFailed)
        self.assertEqual(http.times, [0, 0.5, 1.5, 3.5, 6.5])
        self.flushLoggedErrors()

    def test_options(self) -> None:
        """
        C{--gardend}, C{--graph} and C{--session} are required; C{--since}
        is a whole number.
        """
        options = TailOptions()
        options.parseOptions(["--gardend", "http://g", "--graph", "g1", "--session", "s1",
                              "--since", "4", "--json"])
        self.assertEqual((options["since"], options["json"]), (4, True))
        self.assertRaises(Exception, TailOptions().parseOptions, ["--gardend", "http://g"])
        self.assertRaises(Exception, TailOptions().parseOptions,
                          ["--gardend", "http://g", "--graph", "g", "--session", "s", "--since", "-1"])


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
            door=Door(http=host.http, gardend=stand.url, graph="g1",
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
