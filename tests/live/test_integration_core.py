"""
Integration tests of the host's core as operators run it: a real
C{twistd -n vehicle} child on a loopback port, spoken to with treq.  The
lease story across a restart, idempotency across a restart, rename, delete
and the trash, long-poll and SSE, kill -9, a torn log, 413s, and not_found
across principals and graphs.  No pi is needed: no command here starts a body.
"""

from __future__ import annotations

import json
import re
import signal
import sys
from pathlib import Path
from typing import Any

from treq import collect
from treq.client import HTTPClient
from twisted.internet import reactor
from twisted.internet.defer import Deferred, succeed
from twisted.internet.protocol import ProcessProtocol
from twisted.trial.unittest import TestCase
from twisted.web.client import Agent, HTTPConnectionPool
from twisted.web.iweb import UNKNOWN_LENGTH, IBodyProducer
from zope.interface import implementer

from tests.support._headers import bytesNames
from tests.support.harness import SECRET, identity
from tests.support.live import sleep
from tests.support.routes import TAB1, TAB2
from tests.support.schemas import assertValidEvent, assertValidFrame


TWISTD = str(Path(sys.prefix) / "bin" / "twistd")
MiB = 1024 * 1024

class _Child(ProcessProtocol):
    def __init__(self) -> None:
        self.output = bytearray()
        self.ended: Deferred = Deferred()
        self.reason: Any = None

    def outReceived(self, data: bytes) -> None:
        self.output += data

    errReceived = outReceived

    def processEnded(self, reason: Any) -> None:
        self.reason = reason.value
        self.ended.callback(None)


def spawnTwistd(root: Path, env: dict[str, str], listen: str = "tcp:0:interface=127.0.0.1") -> tuple[_Child, Any]:
    child = _Child()
    argv = [TWISTD, "-n", "--pidfile=", "vehicle", "--listen", listen, "--data-dir", str(root)]
    transport = reactor.spawnProcess(child, TWISTD, argv, env=env)
    return child, transport


class CoreHost:
    """
    C{twistd vehicle} in its own process on a loopback port that the host
    itself picked (read back from its log).
    """

    def __init__(self, test: TestCase) -> None:
        self.test = test
        self.root = Path(test.mktemp()).absolute()
        self.root.mkdir(parents=True)
        self.models = self.root.parent / "models.json"
        self.models.write_text(json.dumps({"providers": {"scripted": {
            "baseUrl": "http://127.0.0.1:9/v1", "api": "openai-completions",
            "apiKey": "$SCRIPTED_KEY", "models": [{"id": "echo-1", "name": "Echo"}]}}}))
        self.pool = HTTPConnectionPool(reactor, persistent=False)
        self.http = HTTPClient(Agent(reactor, pool=self.pool))
        self.child: _Child | None = None
        test.addCleanup(self.stop)

    def env(self) -> dict[str, str]:
        return {
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "MNEMOSYNE_INTERNAL_SERVICE_SECRET": SECRET,
            "VEHICLE_MODELS": str(self.models),
            "VEHICLE_DEFAULT_MODEL": "scripted/echo-1",
            "SCRIPTED_KEY": "sk-not-used",
        }

    async def start(self) -> "CoreHost":
        self.child, self.transport = spawnTwistd(self.root, self.env())
        for _ in range(300):
            match = re.search(rb"VehicleSite starting on (\d+)", bytes(self.child.output))
            if match:
                self.url = f"http://127.0.0.1:{int(match.group(1))}"
                break
            if self.child.ended.called:
                break
            await sleep(0.03)
        else:
            match = None
        if match is None:
            raise AssertionError("twistd did not start:\n" + self.child.output.decode("utf-8", "replace"))
        code, frame = await self.call("GET", "/health", secret=None)
        assert code == 200, frame
        return self

    async def stop(self, sig: str = "TERM") -> None:
        if self.child is None:
            return
        child, self.child = self.child, None
        if not child.ended.called:
            try:
                self.transport.signalProcess(sig)
            except Exception:
                pass
            await child.ended
        self.lastReason = child.reason
        await self.pool.closeCachedConnections()

    async def restart(self, sig: str = "TERM") -> None:
        await self.stop(sig)
        await self.start()

    def headers(self, headers: dict[str, str] | None = None, **who: Any) -> dict[bytes, str]:
        out = identity(**who)
        out["content-type"] = "application/json"
        out.update(headers or {})
        return bytesNames(out)

    async def call(self, method: str, path: str, body: Any = None, raw: bytes | None = None,
                   headers: dict[str, str] | None = None, **who: Any) -> tuple[int, dict[str, Any]]:
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        response = await self.http.request(method, self.url + path,
                                           headers=self.headers(headers, **who), data=data)
        frame = json.loads(await response.content())
        assertValidFrame(self.test, frame)
        self.test.assertLess(response.code, 500, frame)
        return response.code, frame

    async def ok(self, method: str, path: str, body: Any = None, **kw: Any) -> dict[str, Any]:
        code, frame = await self.call(method, path, body, **kw)
        self.test.assertNotEqual(frame["type"], "error", frame)
        return frame

    async def refused(self, errorCode: str, method: str, path: str, body: Any = None,
                      **kw: Any) -> dict[str, Any]:
        code, frame = await self.call(method, path, body, **kw)
        self.test.assertEqual(frame.get("code"), errorCode, frame)
        return frame

    async def create(self, requestId: str = "c1", **kw: Any) -> str:
        who = {k: kw.pop(k) for k in list(kw) if k in ("principal", "graph", "role", "client")}
        frame = await self.ok("POST", "/sessions", {"requestId": requestId, **kw}, **who)
        return frame["value"]["session"]["sessionId"]

    async def events(self, sid: str, since: int = 0, waitMs: int = 0) -> dict[str, Any]:
        frame = await self.ok("GET", f"/sessions/{sid}/events?since={since}&waitMs={waitMs}")
        return frame["value"]

    async def policy(self, sid: str, requestId: str, policy: str = "mute", **who: Any) -> tuple[int, dict[str, Any]]:
        return await self.call("POST", f"/sessions/{sid}/commands",
                               {"requestId": requestId, "type": "set_room_policy", "policy": policy},
                               **who)


class SSEClient:
    """
    An SSE connection to the real host, its messages parsed as they come.
    """

    def __init__(self, host: CoreHost) -> None:
        self.host = host
        self.messages: list[dict[str, Any]] = []
        self.buffer = b""
        self.waiting: list[tuple[int, Deferred]] = []

    async def open(self, sid: str, since: int = 0, lastEventId: str | None = None) -> "SSEClient":
        headers = {"accept": "text/event-stream"}
        if lastEventId is not None:
            headers["last-event-id"] = lastEventId
        response = await self.host.http.get(f"{self.host.url}/sessions/{sid}/events?since={since}",
                                            headers=self.host.headers(headers))
        self.host.test.assertEqual(response.code, 200)
        self.done = collect(response, self._data)
        return self

    def _data(self, chunk: bytes) -> None:
        self.buffer += chunk
        while b"\n\n" in self.buffer:
            block, self.buffer = self.buffer.split(b"\n\n", 1)
            if block.startswith(b":"):
                continue
            fields = dict(line.split(": ", 1) for line in block.decode().split("\n"))
            data = json.loads(fields["data"])
            assertValidEvent(self.host.test, data)
            self.host.test.assertEqual(int(fields["id"]), data["seq"])
            self.messages.append(data)
        for count, d in list(self.waiting):
            if len(self.messages) >= count:
                self.waiting.remove((count, d))
                d.callback(None)

    def seqs(self) -> list[int]:
        return [m["seq"] for m in self.messages]

    def until(self, count: int, timeout: float = 10) -> Deferred:
        if len(self.messages) >= count:
            return succeed(None)
        d: Deferred = Deferred()
        self.waiting.append((count, d))
        return d.addTimeout(timeout, reactor)


@implementer(IBodyProducer)
class ChunkedBody:
    """
    A body of unknown length (sent chunked), C{count} chunks of C{size}.
    """

    length = UNKNOWN_LENGTH

    def __init__(self, size: int, count: int) -> None:
        self.size, self.count = size, count

    def startProducing(self, consumer: Any) -> Deferred:
        for _ in range(self.count):
            consumer.write(b"x" * self.size)
        return succeed(None)

    def pauseProducing(self) -> None:
        pass

    def resumeProducing(self) -> None:
        pass

    def stopProducing(self) -> None:
        pass


class CoreIntegrationTests(TestCase):
    """
    The core against a real C{twistd vehicle}.
    """

    timeout = 60

    async def test_leaseStory(self) -> None:
        """
        The creator holds the lease; another tab is refused and may take it
        over (revoked, then claimed); the lease is rebuilt after a restart;
        another principal cannot reach it; with a short ttl it expires.
        """
        host = await CoreHost(self).start()
        sid = await host.create(**TAB1)
        frame = await host.refused("lease_held", "POST", f"/sessions/{sid}/commands",
                                   {"requestId": "p", "type": "set_room_policy", "policy": "mute"},
                                   **TAB2)
        self.assertTrue(frame["details"]["canTakeOver"])
        frame = await host.ok("POST", f"/sessions/{sid}/claim",
                              {"requestId": "k", "takeover": True}, **TAB2)
        self.assertEqual(frame["value"]["tookOverFrom"], {"principal": "alice", "clientId": "tab-1"})
        events = (await host.events(sid, since=2))["events"]
        self.assertEqual([e["type"] for e in events], ["lease.revoked", "lease.claimed"])
        await host.refused("not_found", "POST", f"/sessions/{sid}/claim",
                           {"requestId": "k", "takeover": True}, principal="bob")

        await host.restart()
        frame = await host.ok("GET", f"/sessions/{sid}")
        self.assertEqual(frame["value"]["session"]["lease"]["clientId"], "tab-2")
        await host.refused("lease_held", "POST", f"/sessions/{sid}/commands",
                           {"requestId": "p", "type": "set_room_policy", "policy": "mute"}, **TAB1)
        code, frame = await host.policy(sid, "p", **TAB2)
        self.assertEqual((code, frame["type"]), (202, "room.policy"))

        frame = await host.ok("POST", f"/sessions/{sid}/claim", {"requestId": "k2", "ttlMs": 800}, **TAB2)
        cursor = frame["value"]["session"]["cursor"]
        watch = await host.events(sid, since=cursor, waitMs=5000)
        self.assertEqual([e["type"] for e in watch["events"]], ["lease.expired"])
        await host.refused("lease_required", "POST", f"/sessions/{sid}/commands",
                           {"requestId": "p2", "type": "set_room_policy", "policy": "mute"}, **TAB2)

    async def test_idempotencyAcrossRestart(self) -> None:
        """
        After a restart, creation and a command replay their first frames
        (C{replayed: true}), a changed body conflicts, and nothing is made
        twice.
        """
        host = await CoreHost(self).start()
        created = await host.ok("POST", "/sessions", {"requestId": "c1", "title": "T"}, **TAB1)
        sid = created["value"]["session"]["sessionId"]
        code, first = await host.policy(sid, "rp", **TAB1)
        await host.restart()
        again = await host.ok("POST", "/sessions", {"requestId": "c1", "title": "T"}, **TAB1)
        self.assertTrue(again.pop("replayed"))
        self.assertEqual(again, created)
        code, again = await host.policy(sid, "rp", **TAB1)
        self.assertTrue(again.pop("replayed"))
        self.assertEqual(again, first)
        await host.refused("request_id_conflict", "POST", f"/sessions/{sid}/commands",
                           {"requestId": "rp", "type": "set_room_policy", "policy": "observe"}, **TAB1)
        await host.refused("request_id_conflict", "POST", "/sessions", {"requestId": "c1"}, **TAB1)
        listed = (await host.ok("GET", "/sessions"))["value"]["sessions"]
        self.assertEqual([s["sessionId"] for s in listed], [sid])

    async def test_renameDeleteTrash(self) -> None:
        """
        Rename normalizes and is kept; delete moves the directory to the
        trash with C{deleted.json} and C{session.deleted} last; then every
        route is C{not_found}, also after a restart.
        """
        host = await CoreHost(self).start()
        sid = await host.create()
        frame = await host.ok("PATCH", f"/sessions/{sid}", {"title": "  a \t b  "})
        self.assertEqual(frame["value"]["session"]["title"], "a b")
        frame = await host.ok("DELETE", f"/sessions/{sid}")
        trashedAs = frame["value"]["trashedAs"]
        trash = host.root / "trash" / trashedAs
        self.assertFalse((host.root / "sessions" / sid).exists())
        self.assertEqual(json.loads((trash / "deleted.json").read_text())["sessionId"], sid)
        self.assertEqual(json.loads((trash / "meta.json").read_text())["title"], "a b")
        last = json.loads((trash / "events.jsonl").read_text().splitlines()[-1])
        self.assertEqual(last["type"], "session.deleted")
        for method, path in [("GET", ""), ("DELETE", ""), ("GET", "/events")]:
            await host.refused("not_found", method, f"/sessions/{sid}{path}")
        await host.restart()
        await host.refused("not_found", "GET", f"/sessions/{sid}")
        self.assertEqual((await host.ok("GET", "/sessions"))["value"]["sessions"], [])

    async def test_longPollWakes(self) -> None:
        """
        A long-poll waiting for the next event is answered as soon as it is
        written, long before its C{waitMs}.
        """
        host = await CoreHost(self).start()
        sid = await host.create()
        started = reactor.seconds()
        waiting = Deferred.fromCoroutine(host.events(sid, since=2, waitMs=20000))
        await sleep(0.3)
        self.assertFalse(waiting.called)
        await host.ok("PATCH", f"/sessions/{sid}", {"title": "now"})
        watch = await waiting
        self.assertEqual([e["type"] for e in watch["events"]], ["session.renamed"])
        self.assertLess(reactor.seconds() - started, 5)
        waiting = Deferred.fromCoroutine(host.events(sid, since=3, waitMs=20000))
        await sleep(0.2)
        await host.ok("DELETE", f"/sessions/{sid}")
        watch = await waiting
        self.assertEqual([e["type"] for e in watch["events"]], ["session.deleted"])

    async def test_sse(self) -> None:
        """
        SSE replays from C{Last-Event-ID}, follows live, and ends at delete;
        a reconnect with the last id misses nothing and repeats nothing.
        """
        host = await CoreHost(self).start()
        sid = await host.create(**TAB1)
        await host.ok("PATCH", f"/sessions/{sid}", {"title": "one"})
        first = await SSEClient(host).open(sid, lastEventId="1")
        await first.until(2)
        self.assertEqual(first.seqs(), [2, 3])
        await host.ok("PATCH", f"/sessions/{sid}", {"title": "two"})
        await first.until(3)
        self.assertEqual(first.messages[-1]["data"], {"title": "two"})
        second = await SSEClient(host).open(sid, since=0, lastEventId=str(first.seqs()[-1]))
        await host.ok("POST", f"/sessions/{sid}/claim", {"requestId": "k"}, **TAB1)
        await first.until(4)
        await second.until(1)
        self.assertEqual(second.seqs(), [5])
        await host.ok("DELETE", f"/sessions/{sid}")
        await first.done
        await second.done
        self.assertEqual(first.seqs(), [2, 3, 4, 5, 6])
        self.assertEqual(first.messages[-1]["type"], "session.deleted")

    async def test_killNineLosesNothing(self) -> None:
        """
        Everything acknowledged before a kill -9 is there after the restart:
        sessions, titles, events, leases and the idempotency records.
        """
        host = await CoreHost(self).start()
        sessions = {}
        for n in range(3):
            sid = await host.create(f"c{n}", **TAB1)
            await host.ok("PATCH", f"/sessions/{sid}", {"title": f"title {n}"})
            code, _ = await host.policy(sid, f"rp{n}", "observe", **TAB1)
            await host.ok("POST", f"/sessions/{sid}/claim", {"requestId": "k", "takeover": True}, **TAB2)
            sessions[sid] = await host.events(sid)
        await host.restart("KILL")
        self.assertEqual(host.lastReason.signal, signal.SIGKILL)
        for n, (sid, before) in enumerate(sessions.items()):
            after = await host.events(sid)
            self.assertEqual(after["events"], before["events"])
            summary = (await host.ok("GET", f"/sessions/{sid}"))["value"]["session"]
            self.assertEqual(summary["title"], f"title {n}")
            self.assertEqual(summary["roomPolicy"], "observe")
            self.assertEqual(summary["lease"]["clientId"], "tab-2")
            code, frame = await host.policy(sid, f"rp{n}", "observe", **TAB1)
            self.assertTrue(frame.get("replayed"), frame)
        self.assertEqual(len((await host.ok("GET", "/sessions"))["value"]["sessions"]), 3)

    async def test_tornLastLineRepaired(self) -> None:
        """
        A torn last line of C{events.jsonl} is cut at restart (the original
        kept as C{.broken}); the events before it are intact and the next
        event follows them.
        """
        host = await CoreHost(self).start()
        sid = await host.create(**TAB1)
        before = (await host.events(sid))["events"]
        await host.stop("KILL")
        log = host.root / "sessions" / sid / "events.jsonl"
        with log.open("ab") as f:
            f.write(b'{"seq":3,"type":"lease.rene')
        await host.start()
        self.assertEqual((await host.events(sid))["events"], before)
        self.assertTrue((log.parent / "events.jsonl.broken").exists())
        await host.ok("PATCH", f"/sessions/{sid}", {"title": "after"})
        lines = [json.loads(line) for line in log.read_text().splitlines()]
        self.assertEqual([e["seq"] for e in lines], [1, 2, 3])
        self.assertEqual(lines[-1]["type"], "session.renamed")

    async def test_bodyTooLarge(self) -> None:
        """
        A body over 1 MiB is 413, announced by length or streamed chunked;
        the host goes on serving.
        """
        host = await CoreHost(self).start()
        sid = await host.create(**TAB1)
        code, frame = await host.call("POST", "/sessions", raw=b"x" * (MiB + 1))
        self.assertEqual((code, frame["code"]), (413, "body_too_large"))
        response = await host.http.request(
            "POST", f"{host.url}/sessions/{sid}/commands", headers=host.headers(**TAB1),
            data=ChunkedBody(64 * 1024, 17))
        frame = json.loads(await response.content())
        assertValidFrame(self, frame)
        self.assertEqual((response.code, frame["code"]), (413, "body_too_large"))
        await host.ok("GET", f"/sessions/{sid}")

    async def test_notFoundAcrossPrincipalsAndGraphs(self) -> None:
        """
        Another principal, or the owner through another graph, gets the
        missing session's very answer on every route.
        """
        host = await CoreHost(self).start()
        sid = await host.create(**TAB1)
        routes = [
            ("GET", "", None, {}), ("PATCH", "", {"title": "x"}, {}), ("DELETE", "", None, {}),
            ("POST", "/claim", {"requestId": "k", "takeover": True}, {}),
            ("POST", "/release", {"requestId": "r"}, {}),
            ("POST", "/commands", {"requestId": "c", "type": "abort"}, {}),
            ("GET", "/events?since=0&waitMs=10000", None, {}),
            ("GET", "/events", None, {"accept": "text/event-stream"}),
        ]
        for who in ({"principal": "bob"}, {"graph": "g2"}, {"principal": "bob", "graph": None}):
            for method, path, body, headers in routes:
                _, missing = await host.call(method, f"/sessions/snope{path}", body,
                                             headers=headers, **who)
                code, hidden = await host.call(method, f"/sessions/{sid}{path}", body,
                                               headers=headers, **who)
                self.assertEqual((code, hidden), (404, missing), (who, method, path))
            listed = (await host.ok("GET", "/sessions", **who))["value"]["sessions"]
            self.assertEqual(listed, [])
        self.assertEqual(len((await host.events(sid))["events"]), 2)


class RefusalTests(TestCase):
    """
    C{twistd vehicle} refuses to start, clearly.
    """

    timeout = 30

    async def launch(self, env: dict[str, str], listen: str) -> _Child:
        root = Path(self.mktemp()).absolute()
        child, _ = spawnTwistd(root, {"PATH": "/usr/bin:/bin", **env}, listen)
        await child.ended
        return child

    async def test_noSecret(self) -> None:
        """
        Without the secret it exits non-zero naming the variable.
        """
        child = await self.launch({}, "tcp:0:interface=127.0.0.1")
        self.assertNotEqual(child.reason.exitCode, 0)
        self.assertIn(b"MNEMOSYNE_INTERNAL_SERVICE_SECRET is not set", bytes(child.output))

    async def test_notLoopback(self) -> None:
        """
        On a non-loopback interface it exits non-zero saying so.
        """
        child = await self.launch({"MNEMOSYNE_INTERNAL_SERVICE_SECRET": SECRET},
                               "tcp:0:interface=0.0.0.0")
        self.assertNotEqual(child.reason.exitCode, 0)
        self.assertIn(b"binds loopback only", bytes(child.output))

    async def test_oneLine(self) -> None:
        """
        The refusal is one line, not twistd's usage text.
        """
        child = await self.launch({}, "tcp:0:interface=127.0.0.1")
        self.assertEqual(len(bytes(child.output).strip().splitlines()), 1, bytes(child.output))

