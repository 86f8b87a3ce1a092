"""
Tests for L{vehicle.web._watch}'s SSE stream, through L{StubTreq} and
through a real request on a L{StringTransport}: replay from C{since} and
C{Last-Event-ID}, live follow, keepalives on the clock, the end at delete,
and a slow (paused) client that catches up with no gap and no duplicate.
"""

from __future__ import annotations

import json
from typing import Any

from treq import collect
from twisted.internet.address import IPv4Address
from twisted.internet.interfaces import IPushProducer
from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase
from twisted.web.server import Request
from zope.interface.verify import verifyObject

from vehicle.errors import VehicleError, encode
from vehicle.protocol import Event, RenameRequest, WatchCompleted, fromRequest, toJSON
from vehicle.session import Caller, Entry
from vehicle.web import VehicleSite, frame
from vehicle.web import _watch

from tests.support._hints import assertAnnotationsResolve
from tests.support.harness import Harness
from tests.support.rawhttp import HalfClosingTransport, RawConnection
from tests.support.schemas import assertValidEvent, assertValidFrame
from tests.support.spies import spyOn


TAB1 = {"client": "tab-1"}


def parse(raw: bytes) -> tuple[list[dict[str, Any]], list[str]]:
    """
    SSE messages (with C{id}, C{event} and the decoded C{data}) and comments.
    """
    messages, comments = [], []
    for block in raw.split(b"\n\n"):
        if not block.strip():
            continue
        lines = block.decode("utf-8").split("\n")
        if lines[0].startswith(":"):
            comments.append(lines[0][1:].strip())
            continue
        message: dict[str, Any] = {}
        for line in lines:
            name, _, value = line.partition(": ")
            message[name] = value
        message["data"] = json.loads(message["data"])
        messages.append(message)
    return messages, comments


class Stream:
    """
    One SSE response through L{StubTreq}, its bytes collected as they come.
    """

    def __init__(self, test: "StreamTestCase", sid: str, query: str = "",
                 lastEventId: str | None = None, **who: Any) -> None:
        self.test = test
        headers = {"accept": "text/event-stream"}
        if lastEventId is not None:
            headers["last-event-id"] = lastEventId
        d = test.h.request("GET", f"/sessions/{sid}/events{query}", headers=headers, **who)
        test.h.stub.flush()
        self.response = test.successResultOf(d)
        self.raw = b""
        self.done = collect(self.response, self._got)
        test.h.stub.flush()

    def _got(self, data: bytes) -> None:
        self.raw += data

    def read(self) -> tuple[list[dict[str, Any]], list[str]]:
        self.test.h.stub.flush()
        messages, comments = parse(self.raw)
        for message in messages:
            self.test.assertEqual(message["data"]["protocol"], "sophia.vehicle-ride.v2")
            assertValidEvent(self.test, message["data"])
            self.test.assertEqual(message["event"], message["data"]["type"])
            if "seq" in message["data"]:
                self.test.assertEqual(int(message["id"]), message["data"]["seq"])
            else:
                self.test.assertNotIn("id", message)
        return messages, comments

    def ids(self) -> list[int]:
        return [int(m["id"]) for m in self.read()[0] if "id" in m]


class StreamTestCase(SynchronousTestCase):
    def setUp(self) -> None:
        self.h = Harness(self)
        self.addCleanup(self.h.stop)
        self.sid = self.h.create(client="tab-1")["sessionId"]
        self.session = self.h.api.registry.sessions[self.sid]
        self.alice = Caller(principal="alice", clientId="tab-1", role="owner", graphId="g1")

    def renew(self, times: int = 1) -> None:
        """
        Write C{times} durable events (the holder's own claims).
        """
        for _ in range(times):
            self.session.takeLease(self.alice, 60_000)


class SSETests(StreamTestCase):
    """
    The stream through L{StubTreq}.
    """

    def test_headers(self) -> None:
        """
        The answer is C{text/event-stream}, not cached.
        """
        stream = Stream(self, self.sid)
        self.assertEqual(stream.response.code, 200)
        self.assertEqual(stream.response.headers.getRawHeaders(b"content-type"),
                         [b"text/event-stream; charset=utf-8"])
        self.assertEqual(stream.response.headers.getRawHeaders(b"cache-control"), [b"no-cache"])

    def test_replayFromSince(self) -> None:
        """
        It replays the events after C{since}, each as C{id}/C{event}/C{data}.
        """
        self.renew(3)
        stream = Stream(self, self.sid, "?since=2")
        self.assertEqual(stream.ids(), [3, 4, 5])
        self.assertEqual(Stream(self, self.sid).ids(), [1, 2, 3, 4, 5])

    def test_replayFromLastEventId(self) -> None:
        """
        C{Last-Event-ID} (a reconnecting client) is the cursor, over
        C{since}.
        """
        self.renew(3)
        stream = Stream(self, self.sid, "?since=0", lastEventId="4")
        self.assertEqual(stream.ids(), [5])

    def test_badCursor(self) -> None:
        """
        A C{Last-Event-ID} or C{since} that is not a seq of this session is
        an error frame, not a stream.
        """
        for query, last in (("?since=x", None), ("", "abc"), ("", "99"), ("?since=-1", None)):
            code, frame = self.h.call("GET", f"/sessions/{self.sid}/events{query}",
                                      headers={"accept": "text/event-stream",
                                               **({"last-event-id": last} if last else {})})
            assertValidFrame(self, frame)
            self.assertEqual((code, frame["code"]), (400, "invalid_request"))

    def test_liveFollow(self) -> None:
        """
        After the replay it follows live, in order.
        """
        stream = Stream(self, self.sid)
        self.assertEqual(stream.ids(), [1, 2])
        self.renew(2)
        code, _ = self.h.call("PATCH", f"/sessions/{self.sid}", {"title": "t"})
        self.assertEqual(stream.ids(), [1, 2, 3, 4, 5])
        self.assertEqual(stream.read()[0][-1]["event"], "session.renamed")
        self.assertNoResult(stream.done)

    def test_ephemeralDeltas(self) -> None:
        """
        A C{message.delta} reaches live watchers without an C{id}; it is not
        in the log.
        """
        stream = Stream(self, self.sid)
        self.session.feed.broadcast("message.delta", {"runId": "run-1", "text": "Hel"})
        self.renew()
        messages, _ = stream.read()
        self.assertEqual([m["event"] for m in messages][-2:], ["message.delta", "lease.renewed"])
        self.assertNotIn("id", messages[-2])
        code, frame = self.h.call("GET", f"/sessions/{self.sid}/events")
        self.assertNotIn("message.delta", [e["type"] for e in frame["value"]["events"]])

    def test_keepalive(self) -> None:
        """
        A comment keepalive is sent every 15 s of the clock.
        """
        stream = Stream(self, self.sid)
        before = stream.read()[1].count("keepalive")
        self.assertEqual(before, 0)  # none at once: the stream just said it is connected
        self.h.clock.advance(14.9)
        self.assertEqual(stream.read()[1].count("keepalive"), before)
        self.h.clock.advance(0.1)
        self.assertEqual(stream.read()[1].count("keepalive"), before + 1)
        self.h.clock.advance(15)
        self.assertEqual(stream.read()[1].count("keepalive"), before + 2)

    def test_deleteEndsTheStream(self) -> None:
        """
        C{session.deleted} is the last message; then the stream ends.
        """
        stream = Stream(self, self.sid)
        other = Stream(self, self.sid, "?since=1")
        code, _ = self.h.call("DELETE", f"/sessions/{self.sid}")
        self.assertEqual(code, 200)
        for s in (stream, other):
            self.h.stub.flush()
            self.successResultOf(s.done)
            messages, _ = s.read()
            self.assertEqual(messages[-1]["event"], "session.deleted")
        self.assertEqual(self.h.api.streams, set())
        # No keepalive timer is left behind.
        self.assertEqual([call for call in self.h.clock.getDelayedCalls()
                          if getattr(getattr(call.func, "f", None), "__name__", "") == "_ping"],
                         [])

    def test_reconnectNoGapNoDuplicate(self) -> None:
        """
        A client that reconnects with its last id sees every later event
        once.
        """
        first = Stream(self, self.sid)
        self.renew(2)
        seen = first.ids()
        self.renew(3)  # missed by nobody: the next connection replays them
        again = Stream(self, self.sid, lastEventId=str(seen[-1]))
        self.renew(1)
        self.assertEqual(seen + again.ids(), list(range(1, 9)))

    def test_hostStopEndsStreams(self) -> None:
        """
        Stopping the host ends every stream.
        """
        stream = Stream(self, self.sid)
        self.h.api.stopStreams()
        self.h.stub.flush()
        self.successResultOf(stream.done)


class SlowClientTests(StreamTestCase):
    """
    A real request on a L{StringTransport}: the transport pauses the
    stream, as TCP back-pressure would.
    """

    def open(self, since: int = 0, conn: RawConnection | None = None) -> RawConnection:
        conn = RawConnection(self.h) if conn is None else conn
        conn.send(conn.head("GET", f"/sessions/{self.sid}/events?since={since}",
                            extra={"accept": "text/event-stream"}))
        self.assertEqual(conn.status(), 200)
        return conn

    def ids(self, conn: RawConnection) -> list[int]:
        messages, _ = parse(conn.body())
        for message in messages:
            assertValidEvent(self, message["data"])
        return [int(m["id"]) for m in messages if "id" in m]

    def readAhead(self, conn: RawConnection) -> None:
        """
        A turn that takes time (a slow watcher beside C{conn}), so the
        next waits for its pace, and one event for it; then C{conn} paused
        and resumed: it catches up from the log past that turn's start.
        """
        self.h.api.fanouts[self.sid].add(SlowStream(self.h.clock, 0.01))  # type: ignore[arg-type]
        self.renew(1)
        self.renew(1)
        conn.transport.producer.pauseProducing()
        conn.transport.producer.resumeProducing()

    def assertCatchesUp(self, conn: RawConnection) -> None:
        """
        Resumed, C{conn} gets every event of the session, in order, once.
        """
        conn.transport.producer.resumeProducing()
        for _ in range(5):
            self.h.clock.advance(0)
        self.assertEqual(self.ids(conn), list(range(1, self.session.cursor + 1)))

    def test_pausedGetsNothingThenCatchesUp(self) -> None:
        """
        While the transport is paused nothing is written (not even a
        keepalive); when it resumes the client catches up from the log, in
        order, with no gap and no duplicate.
        """
        conn = self.open()
        self.assertEqual(self.ids(conn), [1, 2])
        conn.transport.producer.pauseProducing()
        size = len(conn.output())
        self.renew(5)
        self.session.feed.broadcast("message.delta", {"runId": "run-1", "text": "lost while paused"})
        self.h.clock.advance(31)
        self.assertEqual(len(conn.output()), size)
        conn.transport.producer.resumeProducing()
        self.renew(1)
        self.assertEqual(self.ids(conn), list(range(1, 9)))

    def test_slowClientHoldsUpNobody(self) -> None:
        """
        While one client is paused, another stream and a long-poll get every
        event at once.
        """
        slow = self.open()
        slow.transport.producer.pauseProducing()
        fast = self.open()
        d = self.h.request("GET", f"/sessions/{self.sid}/events?since=2&waitMs=30000")
        self.h.stub.flush()
        self.renew(3)
        self.h.stub.flush()
        self.assertEqual(self.ids(fast), [1, 2, 3, 4, 5])
        frame = json.loads(self.successResultOf(self.successResultOf(d).content()))
        self.assertEqual([e["seq"] for e in frame["value"]["events"]], [3])
        self.assertEqual(self.ids(slow), [1, 2])

    def test_pausedManyCatchesUpInPages(self) -> None:
        """
        A client paused across more than a page of events (500) catches up
        over several turns of the reactor, still gapless.
        """
        conn = self.open()
        conn.transport.producer.pauseProducing()
        self.renew(1200)
        conn.transport.producer.resumeProducing()
        for _ in range(5):
            self.h.clock.advance(0)
        self.assertEqual(self.ids(conn), list(range(1, 1203)))

    def test_behindFarApartShareTheLog(self) -> None:
        """
        Streams paused at places far apart (more events between the first
        and the last than a session keeps unwatched) catch up from pages
        they share: each event is encoded once, however many streams read
        it; each stream gets every event once.
        """
        calls = spyOn(self, _watch, "sseEncode")
        conns = [self.open() for _ in range(6)]
        for conn in conns:
            conn.transport.producer.pauseProducing()
            self.renew(100)
        for conn in conns:
            conn.transport.producer.resumeProducing()
        for _ in range(3):
            self.h.clock.advance(0)
        cursor = self.session.cursor
        self.assertEqual(cursor, 602)
        for conn in conns:
            self.assertEqual(self.ids(conn), list(range(1, cursor + 1)))
        self.assertEqual(len(calls), cursor)

    def test_readAheadGetsNoDeltaFromBehind(self) -> None:
        """
        A stream that caught up from the log past a turn's events (resumed
        while the turn waited for its pace) is written none of that turn's
        ephemeral events from before what it already has: a client never
        reads a C{message.delta} after an event that came later.  A delta
        after them still reaches it.
        """
        clock = self.h.clock
        conn = self.open()
        self.readAhead(conn)
        self.session.feed.broadcast("message.delta", {"runId": "run-1", "text": "old"})
        self.renew(1)
        before = self.session.cursor
        clock.advance(0)
        conn.transport.producer.pauseProducing()
        conn.transport.producer.resumeProducing()  # caught up again, past the delta
        self.session.feed.broadcast("message.delta", {"runId": "run-1", "text": "new"})
        clock.advance(1)  # the turn: the old delta, the renewal, the new delta
        messages, _ = parse(conn.body())
        for message in messages:
            assertValidEvent(self, message["data"])
        self.assertEqual([m["id"] if "id" in m else m["data"]["data"]["text"] for m in messages],
                         [str(n) for n in range(1, before + 1)] + ["new"])

    def test_readAheadNotEndedButByDeletion(self) -> None:
        """
        A stream written a turn's events one by one (it read past the
        turn's start from the log) ends at C{session.deleted} only: another
        event it is written, a rename say, leaves it open.
        """
        clock = self.h.clock
        conn = self.open()
        self.readAhead(conn)
        self.session.rename(self.alice, fromRequest({"title": "later"}, RenameRequest))
        clock.advance(1)  # the turn: the renewal it has, the rename it lacks
        self.renew(1)
        clock.advance(1)
        messages, _ = parse(conn.body())
        self.assertEqual([m["event"] for m in messages][-2:], ["session.renamed", "lease.renewed"])
        self.assertEqual(self.ids(conn), list(range(1, self.session.cursor + 1)))

    def test_readAheadStopsAtAPause(self) -> None:
        """
        A stream written a turn's events one by one writes nothing more
        once its transport pauses it in the middle, and catches up from the
        log once resumed.
        """
        conn = self.open(conn=Reader(self.h))
        self.readAhead(conn)
        had = self.session.cursor
        self.renew(10)
        conn.transport.limit = len(conn.output())  # the next write fills it
        self.h.clock.advance(1)  # the turn: one event written, then the pause
        self.assertTrue(conn.transport.paused)
        self.assertEqual(self.ids(conn), list(range(1, had + 2)))
        self.assertCatchesUp(conn)

    def test_catchUpStopsAtAPause(self) -> None:
        """
        A stream catching up from the log writes nothing more once its
        transport pauses it in the middle, and goes on once resumed.
        """
        conn = self.open(conn=Reader(self.h))
        conn.transport.producer.pauseProducing()
        self.renew(300)
        conn.transport.limit = len(conn.output())  # the next write fills it
        conn.transport.producer.resumeProducing()
        self.assertTrue(conn.transport.paused)
        written = len(conn.output())
        self.h.clock.advance(0)
        self.assertEqual(len(conn.output()), written)
        self.assertLess(len(self.ids(conn)), self.session.cursor)
        self.assertCatchesUp(conn)

    def test_catchUpPausedBetweenPages(self) -> None:
        """
        A stream paused between two pages of its catch-up writes nothing
        more until it is resumed.
        """
        conn = self.open()
        conn.transport.producer.pauseProducing()
        self.renew(1200)
        conn.transport.producer.resumeProducing()  # the first page, the next one later
        written = len(conn.output())
        conn.transport.producer.pauseProducing()
        self.h.clock.advance(0)
        self.assertEqual(len(conn.output()), written)
        self.assertLess(len(self.ids(conn)), self.session.cursor)
        self.assertCatchesUp(conn)

    def test_streamOutlivesTheIdleTimeout(self) -> None:
        """
        A stream is a request that never ends: the connection's idle
        timeout (the site's, twelve hours: the client sends nothing once it
        asked) is off while it streams, as Twisted's channel turns it off
        for every request under way.
        """
        conn = self.open()
        timeout = conn.site.timeOut
        self.assertIsNotNone(timeout)
        self.h.clock.advance(timeout / 2)
        self.h.clock.advance(timeout / 2 + 1)
        self.assertFalse(conn.closed)
        self.renew(1)
        self.assertEqual(self.ids(conn), list(range(1, self.session.cursor + 1)))

    def test_disconnectForgetsTheClient(self) -> None:
        """
        A client that goes away is unsubscribed: nothing more is written and
        its timers stop.
        """
        conn = self.open()
        self.assertEqual(len(self.h.api.streams), 1)
        conn.lose()
        self.assertEqual(self.h.api.streams, set())
        self.assertEqual(self.session.feed.watching(), 0)
        self.renew(2)
        self.h.clock.advance(60)


class FullTransport(HalfClosingTransport):
    """
    A client that reads nothing: once C{limit} bytes wait unread, the
    transport pauses its producer, as a socket's full buffer would.
    """

    limit = 16 * 1024
    paused = False

    def write(self, data: bytes) -> None:
        super().write(data)
        if len(self.value()) > self.limit and self.producer is not None and not self.paused:
            self.paused = True
            self.producer.pauseProducing()

    def writeSequence(self, data: Any) -> None:
        self.write(b"".join(data))


class Reader(RawConnection):
    """
    A raw connection over a L{FullTransport}.
    """

    def __init__(self, harness: Harness) -> None:
        self.site = VehicleSite(harness.api.resource(), harness.clock)
        self.protocol = self.site.buildProtocol(IPv4Address("TCP", "127.0.0.1", 40000))
        self.transport = FullTransport(peerAddress=IPv4Address("TCP", "127.0.0.1", 40000))
        self.protocol.makeConnection(self.transport)


class SlowStream:
    """
    What a fan-out offers a stream, recorded (each batch's start and end),
    each offer taking C{cost} seconds of C{clock}.
    """

    def __init__(self, clock: Clock, cost: float) -> None:
        self.clock, self.cost = clock, cost
        self.offered: list[tuple[int, int]] = []

    def offer(self, batch: _watch.Batch) -> None:
        self.offered.append((batch.start, batch.end))
        self.clock.rightNow += self.cost  # time passes; nothing else runs


class FanoutTests(StreamTestCase):
    """
    One session's watchers share its events: each encoded once, the same
    bytes to every stream; many streams are served a slice at a time; a
    stream whose client reads nothing costs bounded memory and is cut, and
    resumes without a gap.
    """

    def counting(self, name: str) -> list[Event]:
        return spyOn(self, _watch, name)

    def slowFanout(self, count: int, cost: float) -> list[SlowStream]:
        """
        A fan-out of the session to C{count} L{SlowStream}s of C{cost}.
        """
        fanout = _watch.Fanout(session=self.session, clock=self.h.clock)
        self.addCleanup(fanout.close)
        streams = [SlowStream(self.h.clock, cost) for _ in range(count)]
        for stream in streams:
            fanout.add(stream)  # type: ignore[arg-type]
        self.fanout = fanout
        return streams

    def test_encodedOnce(self) -> None:
        """
        However many streams watch, each event (durable or ephemeral, live
        or replayed from the log) is encoded once, and every stream gets
        the same bytes.
        """
        calls = self.counting("sseEncode")
        early = [Stream(self, self.sid) for _ in range(12)]
        self.renew(3)
        self.session.feed.broadcast("message.delta", {"runId": "run-1", "text": "Hel"})
        self.assertEqual(len(calls), 2 + 3 + 1)
        late = [Stream(self, self.sid) for _ in range(12)]
        self.assertEqual(len(calls), 6)
        self.renew(1)
        self.assertEqual(len(calls), 7)
        bodies = {stream.raw for stream in early}
        self.assertEqual(len(bodies), 1)
        self.assertEqual([m["event"] for m in early[0].read()[0]].count("message.delta"), 1)
        self.assertEqual({tuple(stream.ids()) for stream in late + early}, {(1, 2, 3, 4, 5, 6)})

    def test_longPollEncodedOnce(self) -> None:
        """
        Long-polls of the same events encode each once, and answer the
        frame the protocol's values make, byte for byte.
        """
        calls = self.counting("eventJSON")
        self.renew(2)
        self.session.rename(self.alice, fromRequest({"title": "Ünïcode\n\u2028 title"},
                                                      RenameRequest))
        answers = []
        for _ in range(5):
            d = self.h.request("GET", f"/sessions/{self.sid}/events?since=1")
            self.h.stub.flush()
            answers.append(self.successResultOf(self.successResultOf(d).content()))
        self.assertEqual(len(calls), 4)
        self.assertEqual(len(set(answers)), 1)
        events, _ = self.session.feed.after(1)
        expected = encode(frame("watch.completed", None, toJSON(
            WatchCompleted(events=tuple(events), cursor=5, more=False))))
        self.assertEqual(answers[0], expected)

    def test_slices(self) -> None:
        """
        Many streams are served a slice at a time, the reactor free between
        slices; what comes meanwhile reaches every stream after, in order.
        """
        self.patch(_watch, "SLICE", 2)
        streams = [Stream(self, self.sid) for _ in range(5)]
        self.renew(1)
        self.assertEqual([s.ids()[-1] for s in streams], [3, 3, 2, 2, 2])
        self.assertEqual([c.getTime() for c in self.h.clock.getDelayedCalls()
                          if c.func == self.h.api.fanouts[self.sid]._serve], [self.h.clock.seconds()])
        self.renew(2)
        self.assertEqual([s.ids()[-1] for s in streams], [3, 3, 2, 2, 2])
        self.h.clock.advance(0)
        self.assertEqual({tuple(s.ids()) for s in streams}, {(1, 2, 3, 4, 5)})

    def test_streamedWhileFollowed(self) -> None:
        """
        The session keeps more pages for its streams from the first stream
        added to the last one gone (L{Pages.streamed}).
        """
        said: list[bool] = []
        self.patch(type(self.session.feed), "streamed", lambda feed, on: said.append(on))
        streams = self.slowFanout(2, 0.001)
        self.assertEqual(said, [True])
        self.fanout.remove(streams[0])  # type: ignore[arg-type]
        self.assertEqual(said, [True])
        self.fanout.remove(streams[1])  # type: ignore[arg-type]
        self.assertEqual(said, [True, False])

    def test_aStreamIsAPushProducer(self) -> None:
        """
        A stream is its request's push producer: its transport pauses and
        resumes it.
        """
        Stream(self, self.sid)
        [stream] = self.h.api.streams
        self.assertTrue(verifyObject(IPushProducer, stream))

    def test_aBigDeltaReachesAStreamUpToDate(self) -> None:
        """
        A delta bigger than a write, alone in its turn, reaches a stream
        that has everything before it (it is in no log to catch up from).
        """
        self.patch(_watch, "MAX_WRITE", 2000)
        stream = Stream(self, self.sid)
        self.h.clock.advance(1)
        self.session.feed.broadcast("message.delta", {"runId": "run-1", "text": "x" * 3000})
        self.h.clock.advance(1)
        [delta] = [m for m in stream.read()[0] if m["event"] == "message.delta"]
        self.assertEqual(delta["data"]["data"]["text"], "x" * 3000)

    def test_servesAgainAfterItsLastStreamLeft(self) -> None:
        """
        A fan-out whose last stream left stops following the session; a
        stream added then is served again.
        """
        c = self.session.cursor
        [first] = self.slowFanout(1, 0.001)
        self.fanout.remove(first)  # type: ignore[arg-type]
        self.assertEqual(self.session.feed.watching(), 0)
        self.renew(1)
        second = SlowStream(self.h.clock, 0.001)
        self.fanout.add(second)  # type: ignore[arg-type]
        self.h.clock.advance(1)
        self.renew(1)
        self.assertEqual(second.offered, [(c + 1, c + 2)])
        self.assertEqual(first.offered, [])

    def test_paced(self) -> None:
        """
        A turn follows the last no sooner than L{_watch.PACE} times the time
        the last spent serving: what comes meanwhile is joined into one
        offer to each stream; after a quiet spell an event goes at once.
        """
        clock, c = self.h.clock, self.session.cursor
        streams = self.slowFanout(3, 0.001)
        self.renew(1)
        self.assertEqual([s.offered for s in streams], [[(c, c + 1)]] * 3)
        self.renew(2)
        self.assertEqual([len(s.offered) for s in streams], [1, 1, 1])
        clock.advance(_watch.PACE * 0.003 - 0.0005)
        self.assertEqual([len(s.offered) for s in streams], [1, 1, 1])
        clock.advance(0.0005)
        self.assertEqual([s.offered for s in streams], [[(c, c + 1), (c + 1, c + 3)]] * 3)
        self.renew(1)  # the paced turn is paced in its turn
        self.assertEqual([len(s.offered) for s in streams], [2, 2, 2])
        clock.advance(_watch.PACE * 0.003)
        self.assertEqual([s.offered[-1] for s in streams], [(c + 3, c + 4)] * 3)
        clock.advance(1)
        self.renew(1)
        self.assertEqual([s.offered[-1] for s in streams], [(c + 4, c + 5)] * 3)

    def test_pacedOverSlices(self) -> None:
        """
        The time a turn spent is counted over all its slices.
        """
        self.patch(_watch, "SLICE", 2)
        clock, c = self.h.clock, self.session.cursor
        streams = self.slowFanout(4, 0.001)
        self.renew(1)
        clock.advance(0)
        self.assertEqual([len(s.offered) for s in streams], [1, 1, 1, 1])
        self.renew(1)
        clock.advance(_watch.PACE * 0.004 - 0.0005)
        self.assertEqual([len(s.offered) for s in streams], [1, 1, 1, 1])
        clock.advance(0.0005)
        self.assertEqual([s.offered[-1] for s in streams], [(c + 1, c + 2)] * 4)

    def test_paceBounded(self) -> None:
        """
        However long a turn took, the next waits at most
        L{_watch.MAX_PACE_SECONDS}.
        """
        clock, c = self.h.clock, self.session.cursor
        [stream] = self.slowFanout(1, 5.0)
        self.renew(2)
        self.assertEqual(stream.offered, [(c, c + 1)])
        clock.advance(_watch.MAX_PACE_SECONDS)
        self.assertEqual(stream.offered, [(c, c + 1), (c + 1, c + 2)])

    def test_fullTurnNotPaced(self) -> None:
        """
        Once the events pending come to L{_watch.TURN_BYTES}, the turn goes
        at once, whatever the pace: joined further, they would fill a
        stream's buffer in one write.
        """
        clock, c = self.h.clock, self.session.cursor
        [stream] = self.slowFanout(1, 0.001)
        self.renew(2)
        self.assertEqual(stream.offered, [(c, c + 1)])
        self.session.feed.broadcast("message.delta",
                                    {"runId": "run-1", "text": "x" * (_watch.TURN_BYTES // 2)})
        self.assertEqual(stream.offered, [(c, c + 1)])
        self.session.feed.broadcast("message.delta",
                                    {"runId": "run-1", "text": "y" * (_watch.TURN_BYTES // 2)})
        self.assertEqual(stream.offered, [(c, c + 1), (c + 1, c + 2)])
        self.assertEqual([call for call in clock.getDelayedCalls()
                          if call.func == self.fanout._turn], [])

    def test_bigTurnInWritesOfBoundedSize(self) -> None:
        """
        A turn whose events come to more than L{_watch.MAX_WRITE} bytes is
        offered in parts of at most that, in order, one write each to every
        stream, which misses nothing.
        """
        self.patch(_watch, "MAX_WRITE", 2000)
        clock = self.h.clock
        one, two = Stream(self, self.sid), Stream(self, self.sid)
        stream = SlowStream(clock, 0.001)
        self.h.api.fanouts[self.sid].add(stream)  # type: ignore[arg-type]
        self.renew(1)
        writes: list[bytes] = []
        real = Request.write

        def write(request: Request, data: bytes) -> None:
            writes.append(data)
            real(request, data)

        self.patch(Request, "write", write)
        self.renew(40)
        self.assertEqual(writes, [])
        clock.advance(1)
        sizes = [len(data) for data in writes]
        self.assertEqual(len(sizes), 2 * len(stream.offered) - 2)
        self.assertGreater(len(stream.offered), 3)
        self.assertLessEqual(max(sizes), 2000)
        self.assertEqual([b for _, b in stream.offered[1:-1]],
                         [a for a, _ in stream.offered[2:]])
        self.assertEqual(one.ids(), list(range(1, self.session.cursor + 1)))
        self.assertEqual(two.ids(), list(range(1, self.session.cursor + 1)))
        # The next turn starts where the last part of this one ended.
        end = stream.offered[-1][1]
        self.renew(1)
        clock.advance(1)
        self.assertEqual(stream.offered[-1], (end, end + 1))

    def test_batchesOfBoundedSize(self) -> None:
        """
        L{_watch.batches} cuts a turn's events in order into parts of at
        most L{_watch.MAX_WRITE} bytes, an event bigger than that alone;
        each part starts where the last ended, and only the last ends a
        deleted session's stream.
        """
        self.patch(_watch, "MAX_WRITE", 1000)

        def entry(seq: int | None, text: str, kind: str = "tool.started") -> Entry:
            return Entry(Event(seq=seq, type=kind, timestamp="2026-12-03T07:00:00.000Z",
                               sessionId="s1", data={"toolCallId": "c", "text": text}))

        entries = [entry(1, "a"), entry(None, "b" * 2000), entry(2, "c"), entry(3, "d"),
                   entry(4, "e" * 600), entry(5, "", "session.deleted")]
        parts = _watch.batches(0, entries)
        self.assertEqual([len(p.entries) for p in parts], [1, 1, 2, 2])
        self.assertEqual([(p.start, p.end, p.ends) for p in parts],
                         [(0, 1, False), (1, 1, False), (1, 3, False), (3, 5, True)])
        self.assertEqual(b"".join(p.data for p in parts),
                         b"".join(e.encoded(_watch.sseEncode) for e in entries))
        self.assertLessEqual(max(len(p.data) for p in parts if len(p.entries) > 1), 1000)

    def test_nonReaderBoundedThenCut(self) -> None:
        """
        A client that reads nothing holds at most its buffer and one write
        more, however many events come; past the stall time it is cut, its
        stream and its fan-out let go; it reconnects with its last id and
        misses nothing.
        """
        reader = Reader(self.h)
        reader.send(reader.head("GET", f"/sessions/{self.sid}/events?since=0",
                                extra={"accept": "text/event-stream"}))
        self.renew(200)
        held = len(reader.output())
        self.renew(800)
        self.session.feed.broadcast("message.delta", {"runId": "run-1", "text": "x" * 1000})
        self.assertTrue(reader.transport.paused)
        self.assertEqual(len(reader.output()), held)
        self.assertLessEqual(held, FullTransport.limit + _watch.MAX_WRITE)
        self.h.clock.advance(self.h.api.stallSeconds - 1)
        self.assertFalse(reader.cut)
        self.h.clock.advance(1)
        self.assertTrue(reader.cut)
        self.assertEqual((self.h.api.streams, self.h.api.fanouts), (set(), {}))
        self.assertEqual(self.session.feed.watching(), 0)
        got = [int(line[4:]) for line in reader.body().decode().split("\n")
               if line.startswith("id: ")]
        last = got[-1]
        self.assertEqual(got, list(range(1, last + 1)))
        again = Stream(self, self.sid, lastEventId=str(last))
        self.h.clock.advance(0)  # the catch-up goes a page a turn
        self.renew(1)
        self.assertEqual(got + again.ids(), list(range(1, self.session.cursor + 1)))
        self.assertGreater(self.session.cursor, 1000)

    def test_slowReaderNotCut(self) -> None:
        """
        A client that reads, however slowly, is never cut: each resume
        starts the stall time again.
        """
        reader = Reader(self.h)
        reader.send(reader.head("GET", f"/sessions/{self.sid}/events?since=0",
                                extra={"accept": "text/event-stream"}))
        for _ in range(3):
            self.renew(300)
            self.assertTrue(reader.transport.paused)
            self.h.clock.advance(self.h.api.stallSeconds - 1)
            reader.transport.clear()
            reader.transport.paused = False
            reader.transport.producer.resumeProducing()
        self.assertFalse(reader.cut)
        self.assertEqual(len(self.h.api.streams), 1)


class AnnotationTests(SynchronousTestCase):
    def test_annotationsResolve(self) -> None:
        """
        Every annotation of the fan-out's and the stream's module is a type
        (mutation testing reads them so).
        """
        assertAnnotationsResolve(self, _watch)


class NegotiationTests(SynchronousTestCase):
    """
    L{_watch.wantsEventStream} and L{_watch.wholeNumber}: what a watch
    request asks for, read from its header and arguments.
    """

    def test_streamAsked(self) -> None:
        """
        C{text/event-stream} with a non-zero C{q} (1 when none is said, any
        case, any parameters) and no JSON type preferred to it.
        """
        for accept in ("text/event-stream", b"TEXT/Event-Stream; charset=utf-8",
                       "text/event-stream;q=1.0, application/json;q=0.9",
                       "text/event-stream, application/json",
                       "text/event-stream;q=0.5, application/atom+xml",
                       "text/css, text/event-stream;q=0.2",
                       "application/json;q=0.1, text/event-stream;q=0.12345678901",
                       "text/event-stream; version=0", "text/event-stream;q=0.000001"):
            self.assertTrue(_watch.wantsEventStream(accept), accept)

    def test_streamNotAsked(self) -> None:
        """
        No header, no stream type, a zero, unreadable or out-of-range C{q},
        or a JSON type (C{application/json}, any C{+json}) preferred.
        """
        for accept in (None, "", b"", "application/json", "*/*", "text/css", "text/*",
                       "text/event-stream;q=0", "text/event-stream;q=x",
                       "text/event-stream;q=2", "text/event-stream;q=-1",
                       "text/event-stream;q=0.5, application/json",
                       "application/vnd.sophia+json, text/event-stream;q=0.9",
                       # q is read to its eighth character: 0.000000 here
                       "text/event-stream;q=0.0000001"):
            self.assertFalse(_watch.wantsEventStream(accept), accept)

    def test_theFirst64Items(self) -> None:
        """
        Only the header's first 64 items are read.
        """
        self.assertTrue(_watch.wantsEventStream("text/css, " * 63 + "text/event-stream"))
        self.assertFalse(_watch.wantsEventStream("text/css, " * 64 + "text/event-stream"))

    def test_theStreamsOwnTypeOnly(self) -> None:
        """
        A type sorting after the stream's is not it; a JSON type with no
        C{q} weighs 1, as much as the stream's.
        """
        self.assertFalse(_watch.wantsEventStream("text/plain"))
        self.assertFalse(_watch.wantsEventStream("video/mp4, text/event-stream;q=0"))
        self.assertTrue(_watch.wantsEventStream("application/json, text/event-stream;q=1"))

    def test_wholeNumber(self) -> None:
        """
        Absent or empty is 0; digits up to the maximum are their number;
        anything else, more than the maximum, or more digits than the
        maximum's and two, is refused.
        """
        self.assertEqual(_watch.wholeNumber(None, "n", 100), 0)
        self.assertEqual(_watch.wholeNumber("", "n", 100), 0)
        self.assertEqual(_watch.wholeNumber("100", "n", 100), 100)
        self.assertEqual(_watch.wholeNumber("00007", "n", 100), 7)
        self.assertEqual(_watch.wholeNumber("0000030000", "n", 30_000_000), 30000)
        # A cursor: up to 10**15.
        self.assertEqual(_watch.wholeNumber(str(10**15), "since", _watch.MAX_CURSOR), 10**15)
        self.assertRaises(VehicleError, _watch.wholeNumber, str(10**15 + 1), "since",
                          _watch.MAX_CURSOR)
        for raw, maximum in (("101", 100), ("000007", 100), ("00000030000", 30_000_000),
                             ("-1", 100), ("1e2", 100), ("１２", 100), (" 1", 100)):
            with self.assertRaises(VehicleError) as caught:
                _watch.wholeNumber(raw, "n", maximum)
            self.assertEqual((caught.exception.code, caught.exception.details),
                             ("invalid_request", {"field": "n"}))
