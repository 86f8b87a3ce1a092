"""
Tests for C{vehicle tail} (L{vehicle.clients}): the SSE parser and the line format, bounded
reconnection on a fake clock, and the tail of a live host behind the gardend
stand-in, resuming after a drop with no gap and no repeat.
"""

from __future__ import annotations

from typing import Any
import json

from twisted.internet.defer import CancelledError, Deferred, fail, succeed
from twisted.internet.error import ConnectingCancelledError, ConnectionLost, ConnectionRefusedError
from twisted.internet.task import Clock
from twisted.python import usage
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase
from twisted.web.client import ResponseDone, ResponseFailed, ResponseNeverReceived
from twisted.web.http import PotentialDataLoss

from vehicle import PROTOCOL
from vehicle.clients import (
    HostLink,
    SSEParser,
    Tail,
    TailAll,
    TailFailed,
    TailOptions,
    formatEvent,
    typeMatches,
)
from vehicle.clients._tail import _StreamBody

from tests.support.sse import FakeStream, event


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


class FakeAnswer:
    """
    An answer with a body (a refusal, a list).
    """

    def __init__(self, code: int, body: Any) -> None:
        self.code = code
        self.body = json.dumps(body).encode()

    def content(self) -> Deferred:
        return succeed(self.body)


class FakeHTTP:
    """
    An HTTP client answering from a script: each request takes the next
    answer (a L{FakeStream}, a L{FakeAnswer}, or an exception to fail
    with); or C{route(method, url)} makes one.  Records each request.
    """

    def __init__(self, clock: Clock, *answers: Any, route: Any = None) -> None:
        self.clock = clock
        self.answers = list(answers)
        self.route = route
        self.requests: list[dict[str, Any]] = []

    def request(self, method: str, url: str, headers: Any = None, **kw: Any) -> Deferred:
        self.requests.append({"at": self.clock.seconds(), "method": method, "url": url,
                              "headers": dict(headers or {})})
        answer = self.route(method, url) if self.route is not None else self.answers.pop(0)
        if isinstance(answer, BaseException):
            return fail(answer)
        if isinstance(answer, Deferred):
            return answer
        return succeed(answer)


REFUSED = ConnectionRefusedError()
UNAVAILABLE = FakeAnswer(502, {"ok": False, "error": {"code": "service_unavailable",
                                                        "message": "the service did not answer"}})


class ReconnectTests(SynchronousTestCase):
    """
    L{Tail}'s reconnection, on a fake clock: it follows until stopped,
    backing off (capped) between failed reconnections, one line per drop.
    """

    def tail(self, http: FakeHTTP, clock: Clock, **kw: Any) -> tuple[Tail, list[str], list[str]]:
        out: list[str] = []
        warnings: list[str] = []
        tail = Tail(link=HostLink(http=http, gardend="http://g", graph="g1"), sessionId="s1",
                    clock=clock, write=out.append, warn=warnings.append, **kw)
        return tail, out, warnings

    def test_retryCountResetsAfterAGoodConnection(self) -> None:
        """
        C{maxRetries} counts failed reconnections since the last good
        connection: with C{maxRetries=2}, a failure, a good connection, then
        two failures in a row: it gives up only then (three failures in
        all).
        """
        clock = Clock()
        first, second = FakeStream(), FakeStream()
        http = FakeHTTP(clock, first, REFUSED, second, REFUSED, UNAVAILABLE, FakeStream())
        tail, out, warnings = self.tail(http, clock, maxRetries=2)
        d = Deferred.fromCoroutine(tail.run())
        first.send(event(1))
        first.cut()
        clock.advance(0.5)
        clock.advance(1.0)
        second.send(event(2))
        second.end()
        clock.advance(0.5)
        self.assertNoResult(d)
        clock.advance(1.0)
        failure = self.failureResultOf(d, TailFailed)
        self.assertIn("gave up after 2 failed reconnections", str(failure.value))
        self.assertIn("502 service_unavailable", str(failure.value))
        self.assertEqual(len(http.requests), 5)
        self.assertEqual(out, ["1 session.renamed\n", "2 session.renamed\n"])
        self.assertEqual(len(warnings), 2, warnings)  # one per drop

    def test_backoffIsCapped(self) -> None:
        """
        Failed reconnections wait 0.5, 1, 2, 4 s, then at most C{maxBackoff}
        (5 s) each, for ever by default.
        """
        clock = Clock()
        stream = FakeStream()
        http = FakeHTTP(clock, stream, *[REFUSED] * 8, FakeStream())
        tail, out, warnings = self.tail(http, clock)
        d = Deferred.fromCoroutine(tail.run())
        stream.end()
        for _ in range(200):
            clock.advance(0.25)
        self.assertNoResult(d)
        times = [r["at"] for r in http.requests]
        self.assertEqual([b - a for a, b in zip(times, times[1:])],
                         [0.5, 1, 2, 4, 5, 5, 5, 5, 5])
        self.assertEqual(len(warnings), 1, warnings)
        self.assertIn("connection lost after seq 0 (the stream ended); reconnecting", warnings[0])
        d.cancel()
        self.failureResultOf(d, CancelledError)

    def test_resumesAfterTheLastSeq(self) -> None:
        """
        A reconnection asks for what follows the last seq seen, with
        C{Last-Event-ID} and C{since}; an event sent again is not printed
        again.
        """
        clock = Clock()
        first, second = FakeStream(), FakeStream()
        http = FakeHTTP(clock, first, second)
        tail, out, _ = self.tail(http, clock)
        d = Deferred.fromCoroutine(tail.run())
        first.send(event(1), event(2))
        first.cut()
        clock.advance(0.5)
        second.send(event(2), event(3), event(4, "session.deleted"))
        second.end()
        self.assertIsNone(self.successResultOf(d))
        self.assertNotIn(b"Last-Event-ID", http.requests[0]["headers"])
        self.assertEqual(http.requests[1]["headers"][b"Last-Event-ID"], "2")
        self.assertTrue(http.requests[1]["url"].endswith("/events?since=2"))
        self.assertEqual([line.split()[0] for line in out], ["1", "2", "3", "4"])

    def test_refusedAtTheStartEnds(self) -> None:
        """
        Nothing listening at the start is not waited for: L{TailFailed} at
        once, exit code 3, and nothing on the clock.
        """
        clock = Clock()
        http = FakeHTTP(clock, REFUSED)
        tail, _, warnings = self.tail(http, clock)
        failure = self.failureResultOf(Deferred.fromCoroutine(tail.run()), TailFailed)
        self.assertEqual(failure.value.exitCode, 3)
        self.assertIn("connection refused", str(failure.value))
        self.assertEqual(clock.getDelayedCalls(), [])

    def test_tlsFailureEnds(self) -> None:
        """
        A TLS failure is never retried, even after a good connection.
        """
        from OpenSSL.SSL import Error as SSLError

        clock = Clock()
        stream = FakeStream()
        bad = ResponseNeverReceived([Failure(SSLError([("SSL routines", "", "certificate verify failed")]))])
        http = FakeHTTP(clock, stream, bad)
        tail, _, _ = self.tail(http, clock)
        d = Deferred.fromCoroutine(tail.run())
        stream.end()
        clock.advance(0.5)
        failure = self.failureResultOf(d, TailFailed)
        self.assertIn("TLS failure with g: certificate verify failed", str(failure.value))

    def test_hostAwayAtTheStartIsWaitedFor(self) -> None:
        """
        A 5xx from gardend (the host is away) is retried, saying so once.
        """
        clock = Clock()
        stream = FakeStream()
        http = FakeHTTP(clock, UNAVAILABLE, UNAVAILABLE, stream)
        tail, out, warnings = self.tail(http, clock)
        d = Deferred.fromCoroutine(tail.run())
        clock.advance(0.5)
        clock.advance(1.0)
        stream.send(event(1, "session.deleted"))
        stream.end()
        self.successResultOf(d)
        self.assertEqual(warnings, ["gardend answered 502 service_unavailable: the service did "
                                    "not answer; retrying"])

    def test_refusalEnds(self) -> None:
        """
        gardend's or the host's refusal ends the tail with its frame.
        """
        clock = Clock()
        http = FakeHTTP(clock, FakeAnswer(401, {"ok": False, "error": {
            "code": "unauthorized", "message": "a master key or client token is required"}}))
        tail, _, _ = self.tail(http, clock)
        failure = self.failureResultOf(Deferred.fromCoroutine(tail.run()), TailFailed)
        self.assertEqual(failure.value.frame["code"], "unauthorized")

    def test_silentStreamIsReconnected(self) -> None:
        """
        A stream silent for C{idleSeconds} (the host pings every 15 s) is
        taken for dead: cut, and resumed.
        """
        clock = Clock()
        first, second = FakeStream(), FakeStream()
        http = FakeHTTP(clock, first, second)
        tail, _, warnings = self.tail(http, clock, idleSeconds=45)
        Deferred.fromCoroutine(tail.run()).addErrback(lambda f: None)
        clock.advance(30)
        first.write(b": keepalive\n\n")
        clock.advance(30)
        self.assertEqual(len(http.requests), 1)
        clock.advance(15)
        clock.advance(0.5)
        self.assertEqual(len(http.requests), 2)
        self.assertIn("nothing came for 45s", warnings[0])

    def test_cancelledWhileConnecting(self) -> None:
        """
        Cancelling the tail while it reconnects ends it, even when the agent
        reports the cancellation wrapped (a connection attempt cancelled, a
        request that never got its answer) rather than as a plain
        L{CancelledError}: it is not taken for a failure to retry.
        """
        for wrapped in (ConnectingCancelledError(None),
                        ResponseNeverReceived([Failure(CancelledError())])):
            clock = Clock()
            first = FakeStream()
            pending: Deferred = Deferred(lambda d, w=wrapped: d.errback(w))
            http = FakeHTTP(clock, first, pending)
            tail, _, _ = self.tail(http, clock)
            done = Deferred.fromCoroutine(tail.run())
            first.send(event(1))
            first.cut()
            clock.advance(0.5)
            self.assertEqual(len(http.requests), 2)
            done.cancel()
            self.failureResultOf(done, CancelledError)
            clock.advance(60)
            self.assertEqual(len(http.requests), 2)

    def test_callCancelledIsNotUnreachable(self) -> None:
        """
        A host call cancelled while its connection is made raises
        L{CancelledError}; it is not answered with an C{unreachable} frame
        as if gardend had not answered.
        """
        clock = Clock()
        pending: Deferred = Deferred(lambda d: d.errback(ConnectingCancelledError(None)))
        link = HostLink(http=FakeHTTP(clock, pending), gardend="http://g", graph="g1")
        call = Deferred.fromCoroutine(link.call("GET", "/sessions"))
        call.cancel()
        self.failureResultOf(call, CancelledError)

    def test_typeFilter(self) -> None:
        """
        Only the types matching a pattern are printed; the others still
        move the cursor, so a resume neither repeats nor skips.
        """
        clock = Clock()
        stream = FakeStream()
        tail, out, _ = self.tail(FakeHTTP(clock, stream), clock, types=("run.*", "lease.claimed"))
        Deferred.fromCoroutine(tail.run()).addErrback(lambda f: None)
        stream.send(event(1, "session.created"), event(2, "lease.claimed"), event(3, "run.started"),
                    event(4, "command.completed"), event(5, "run.settled"),
                    {"type": "message.delta", "data": {"text": "x"}})
        self.assertEqual(out, ["2 lease.claimed\n", "3 run.started\n", "5 run.settled\n"])
        self.assertEqual(tail.lastSeq, 5)
        self.assertTrue(typeMatches((), "anything"))
        self.assertFalse(typeMatches(("run.*",), "runner"))

    def test_deltasInline(self) -> None:
        """
        With C{deltas}, the words' deltas are printed inline, indented, and
        the model's thinking is not mixed in; with C{asJSON} both kinds of
        delta are printed as their frames.
        """
        clock = Clock()
        stream = FakeStream()
        tail, out, _ = self.tail(FakeHTTP(clock, stream), clock, deltas=True)
        Deferred.fromCoroutine(tail.run()).addErrback(lambda f: None)
        stream.send({"type": "thinking.delta", "data": {"text": "hmm"}},
                    {"type": "message.delta", "data": {"text": "Hel"}},
                    {"type": "message.delta", "data": {"text": "lo"}}, event(1, "run.settled"))
        self.assertEqual("".join(out), "    Hello\n1 run.settled\n")
        stream = FakeStream()
        tail, out, _ = self.tail(FakeHTTP(clock, stream), clock, deltas=True, asJSON=True)
        Deferred.fromCoroutine(tail.run()).addErrback(lambda f: None)
        stream.send({"type": "thinking.delta", "data": {"text": "hmm"}},
                    {"type": "message.delta", "data": {"text": "Hel"}})
        self.assertEqual([json.loads(line)["type"] for line in out],
                         ["thinking.delta", "message.delta"])

    def test_options(self) -> None:
        """
        C{--gardend} (with a scheme), C{--graph} and one of C{--session} and
        C{--all} are required; C{--type} repeats; C{--since} and
        C{--max-retries} are whole numbers.
        """
        options = TailOptions()
        options.parseOptions(["--gardend", "http://g", "--graph", "g1", "--session", "s1",
                              "--since", "4", "--json", "--type", "run.*", "--type", "lease.*",
                              "--max-retries", "3"])
        self.assertEqual((options["since"], options["json"], options["type"], options["max-retries"]),
                         (4, True, ["run.*", "lease.*"], 3))
        for argv in (["--gardend", "http://g"],
                     ["--gardend", "g.example", "--graph", "g", "--session", "s"],
                     ["--gardend", "http://g", "--graph", "g", "--session", "s", "--all"],
                     ["--gardend", "http://g", "--graph", "g", "--session", "s", "--since", "-1"],
                     ["--gardend", "http://g", "--graph", "g", "--all", "--deltas"]):
            self.assertRaises(usage.UsageError, TailOptions().parseOptions, argv)


def sessionList(*ids: str, cursor: int = 0) -> FakeAnswer:
    return FakeAnswer(200, {"protocol": PROTOCOL, "type": "session.list", "requestId": None,
                            "value": {"sessions": [{"sessionId": i, "cursor": cursor} for i in ids]}})


class TailAllTests(SynchronousTestCase):
    """
    L{TailAll}: every session the list shows, new ones as they appear.
    """

    def test_picksUpNewSessions(self) -> None:
        """
        The sessions listed at the start are followed from their cursor;
        one that appears later is followed from its first event; each
        line names its session; a session's drop is its own.
        """
        clock = Clock()
        listed = ["a"]
        streams: dict[str, list[FakeStream]] = {}

        def route(method: str, url: str) -> Any:
            if url.endswith("/sessions"):
                return sessionList(*listed, cursor=7)
            sid = url.split("/sessions/")[1].split("/")[0]
            stream = FakeStream()
            streams.setdefault(sid, []).append(stream)
            return stream

        http = FakeHTTP(clock, route=route)
        link = HostLink(http=http, gardend="http://g", graph="g1")
        out: list[str] = []
        warnings: list[str] = []
        follower = TailAll(
            link=link, clock=clock, warn=warnings.append,
            makeTail=lambda sid, since: Tail(link=link, sessionId=sid, clock=clock,
                                             write=out.append, warn=warnings.append,
                                             lastSeq=since, label=sid, patient=True),
        )
        d = Deferred.fromCoroutine(follower.run())
        self.assertEqual(list(streams), ["a"])
        self.assertTrue(http.requests[1]["url"].endswith("/sessions/a/events?since=7"))
        streams["a"][0].send(event(8, sessionId="a"))
        listed.append("b")
        clock.advance(2)
        self.assertEqual(list(streams), ["a", "b"])
        self.assertTrue(http.requests[-1]["url"].endswith("/sessions/b/events?since=0"))
        streams["b"][0].send(event(1, "session.created", "b"))
        streams["a"][0].cut()
        clock.advance(0.5)
        self.assertEqual(len(streams["a"]), 2)
        streams["a"][1].send(event(9, "session.deleted", "a"))
        streams["a"][1].end()
        listed.remove("a")
        clock.advance(2)
        self.assertEqual(len(streams["a"]), 2)
        self.assertEqual(out, ["a 8 session.renamed\n", "b 1 session.created\n",
                               "a 9 session.deleted\n"])
        self.assertEqual(len(warnings), 1)
        self.assertTrue(warnings[0].startswith("a: connection lost after seq 8"), warnings)
        d.cancel()
        self.failureResultOf(d, CancelledError)
        self.assertEqual(clock.getDelayedCalls(), [])
        # Stopping closed the streams it followed, and said nothing.
        self.assertTrue(streams["b"][0].stopped)
        self.assertEqual(len(warnings), 1, warnings)

    def test_hostAwayAtTheStart(self) -> None:
        """
        A 5xx for the first list (the host is away) is waited for, said
        once; the sessions are followed once it answers.
        """
        clock = Clock()
        stream = FakeStream()
        http = FakeHTTP(clock, UNAVAILABLE, UNAVAILABLE, sessionList("a"), stream)
        warnings: list[str] = []
        link = HostLink(http=http, gardend="http://g", graph="g1")
        follower = TailAll(link=link, clock=clock, warn=warnings.append,
                           makeTail=lambda sid, since: Tail(link=link, sessionId=sid, clock=clock,
                                                            write=lambda text: None, lastSeq=since))
        d = Deferred.fromCoroutine(follower.run())
        clock.advance(2)
        clock.advance(2)
        self.assertEqual(list(follower.tails), ["a"])
        self.assertEqual(warnings, ["cannot list the sessions: the service did not answer; retrying"])
        d.cancel()
        self.failureResultOf(d, CancelledError)

    def test_firstListRefused(self) -> None:
        """
        A list refused at the start ends the tail with the refusal.
        """
        clock = Clock()
        http = FakeHTTP(clock, REFUSED)
        follower = TailAll(link=HostLink(http=http, gardend="http://g", graph="g1"), clock=clock,
                           makeTail=lambda sid, since: None)  # type: ignore[arg-type,return-value]
        failure = self.failureResultOf(Deferred.fromCoroutine(follower.run()), TailFailed)
        self.assertEqual(failure.value.exitCode, 3)


class StreamBodyTests(SynchronousTestCase):
    """
    The tail reads a stream's body through the public L{IResponse}
    interface: C{deliverBody}, and its transport's C{stopProducing}.
    """

    def test_endings(self) -> None:
        """
        The body's end and a length-less body ended by the close are its
        end; anything else is the failure.
        """
        for reason, ended in ((ResponseDone(), True), (PotentialDataLoss(), True),
                              (ResponseFailed([Failure(ConnectionLost())]), False)):
            pieces: list[bytes] = []
            body = _StreamBody(pieces.append)
            stream = FakeStream()
            stream.deliverBody(body)
            stream.write(b"a")
            body.connectionLost(Failure(reason))
            if ended:
                self.assertIsNone(self.successResultOf(body.finished))
            else:
                self.failureResultOf(body.finished, ResponseFailed)
            self.assertEqual(pieces, [b"a"])

    def test_collectorFails(self) -> None:
        """
        A collector that raises stops the stream, and is the failure.
        """
        def broken(data: bytes) -> None:
            raise ValueError(data)

        body = _StreamBody(broken)
        stream = FakeStream()
        stream.deliverBody(body)
        stream.write(b"a")
        self.failureResultOf(body.finished, ValueError)
        self.assertTrue(stream.stopped)

    def test_cancelStops(self) -> None:
        """
        Cancelling closes the stream's connection; the close after it
        changes nothing.
        """
        body = _StreamBody(lambda data: None)
        stream = FakeStream()
        stream.deliverBody(body)
        body.finished.cancel()
        self.failureResultOf(body.finished, CancelledError)
        self.assertTrue(stream.stopped)
