"""
C{vehicle tail} as operators run it (C{.venv/bin/vehicle tail} in a child
process) against a live host (real pi, the scripted model) behind the
gardend stand-in: followed across two host restarts and a 10 s outage with
no gap and no repeat; C{--type}; C{--all} picking up a session created after
it started.  And a ride that only watches, and a 17 MiB line, live.
"""

from __future__ import annotations

import json

from twisted.trial.unittest import TestCase

from tests.support._clients import Client, clientEnvironment, runClient, startClient
from tests.support.live import LiveHost, sleep, startStandIn


MASTER = "master-clients-tail"
OWNER = {"principal": "owner", "client": "tab-1"}


def seqOf(line: str, column: int = 0) -> int:
    return int(line.split(" ")[column])


class LiveTail:
    """
    A stand-in and a live host behind it, and helpers to act as the owner.
    """

    def __init__(self, testCase: TestCase) -> None:
        self.testCase = testCase

    async def start(self) -> "LiveTail":
        self.stand = startStandIn(self.testCase, masterKey=MASTER)
        self.host = await LiveHost(self.testCase).start()
        self.stand.setServiceUrl(self.host.url)
        self.env = clientEnvironment(self.testCase, VEHICLE_TOKEN=MASTER)
        return self

    async def create(self, requestId: str) -> str:
        code, frame = await self.host.call("POST", "/sessions", {"requestId": requestId}, **OWNER)
        assert code == 201, frame
        return str(frame["value"]["session"]["sessionId"])

    async def rename(self, sid: str, title: str) -> None:
        code, frame = await self.host.call("PATCH", f"/sessions/{sid}", {"title": title}, **OWNER)
        assert code == 200, frame

    async def prompt(self, sid: str, requestId: str, text: str) -> None:
        code, frame = await self.host.call(
            "POST", f"/sessions/{sid}/commands",
            {"type": "prompt", "requestId": requestId, "text": text}, **OWNER)
        assert code in (200, 201, 202), frame

    async def restart(self, outage: float = 0.0) -> None:
        await self.host.stop()
        if outage:
            await sleep(outage)
        await self.host.restart()
        self.stand.setServiceUrl(self.host.url)

    def tail(self, *args: str) -> Client:
        return startClient(self.testCase, "tail", "--gardend", self.stand.url, "--graph", "g1",
                           *args, env=self.env, stdin=None)


class TailLiveTests(TestCase):
    """
    The tail follows until stopped.
    """

    timeout = 120

    async def test_acrossRestartsAndAnOutage(self) -> None:
        """
        A tail started on a session follows it through a run, two host
        restarts (one mid-run) and a 10 s outage (gardend answering 502
        all along), and stops at the delete, exit 0: the seqs it printed
        are 1..N, strictly consecutive, N the session's last; standard error
        has one line per drop (three) and nothing else.
        """
        live = await LiveTail(self).start()
        sid = await live.create("c1")
        tail = live.tail("--session", sid)
        await tail.waitForLine(lambda line: "lease.claimed" in line)

        await live.prompt(sid, "p1", "[[SLOW]] count the cows")
        await tail.waitForLine(lambda line: "run.started" in line)
        await live.restart()  # mid-run: the host reports the command interrupted
        await live.rename(sid, "After-one")
        await tail.waitForLine(lambda line: "title=After-one" in line)

        await live.restart()
        await live.rename(sid, "After-two")
        await tail.waitForLine(lambda line: "title=After-two" in line)

        await live.restart(outage=10.0)
        await live.rename(sid, "After-the-outage")
        await tail.waitForLine(lambda line: "title=After-the-outage" in line, timeout=30)
        await live.prompt(sid, "p2", "how many cows now?")
        await tail.waitForLine(lambda line: "run.settled" in line, timeout=30)
        code, frame = await live.host.call("DELETE", f"/sessions/{sid}", **OWNER)
        self.assertEqual(code, 200, frame)

        self.assertEqual(await tail.ended, 0, tail.errorText)
        seqs = [seqOf(line) for line in tail.lines]
        self.assertEqual(seqs, list(range(1, len(seqs) + 1)), "\n".join(tail.lines))
        self.assertEqual(tail.lines[-1].split(" ")[1], "session.deleted")
        types = [line.split(" ")[1] for line in tail.lines]
        self.assertGreaterEqual(types.count("session.renamed"), 3)
        self.assertIn("command.interrupted", types)
        self.assertEqual(len(tail.errorLines), 3, tail.errorText)
        for line in tail.errorLines:
            self.assertRegex(line, r"^vehicle tail: connection lost after seq \d+ \(.*\); "
                                   r"reconnecting$")
        # Each reconnection resumed right after the last seq printed.
        resumed = [r for r in live.stand.requestsSeen
                   if "last-event-id" in r["headers"] and r["path"].startswith(f"/sessions/{sid}/")]
        # Three drops, and at least one reconnection refused (502) in the outage.
        self.assertGreater(len(resumed), 3)
        for request in resumed:
            self.assertIn(int(request["headers"]["last-event-id"]), seqs)

    async def test_typeAndAll(self) -> None:
        """
        C{--all --type 'session.*' --type lease.claimed}: each line names
        its session; a session that existed is followed from now on; one
        created after the tail started is picked up from its first event;
        a run's events are filtered out.  SIGINT stops it, exit 0, quiet.
        """
        live = await LiveTail(self).start()
        first = await live.create("c1")
        tail = live.tail("--all", "--type", "session.*", "--type", "lease.claimed")
        await sleep(2.5)  # the first list is read
        await live.rename(first, "First")
        await tail.waitForLine(lambda line: line.startswith(f"{first} ") and "title=First" in line)

        second = await live.create("c2")
        await tail.waitForLine(lambda line: line.startswith(f"{second} ") and "lease.claimed" in line)
        await live.prompt(second, "p1", "hello")
        await live.host.waitFor(second, lambda e: e["type"] == "run.settled", **OWNER)
        await live.rename(second, "Second")
        await tail.waitForLine(lambda line: line.startswith(f"{second} ") and "title=Second" in line)

        tail.transport.signalProcess("INT")
        self.assertEqual(await tail.ended, 0, tail.errorText)
        self.assertLess(tail.elapsed, 60)
        self.assertEqual(tail.errorText, "")
        bySession: dict[str, list[str]] = {}
        for line in tail.lines:
            sid, rest = line.split(" ", 1)
            self.assertIn(sid, (first, second), line)
            bySession.setdefault(sid, []).append(rest)
        self.assertEqual([r.split(" ")[1] for r in bySession[first]], ["session.renamed"])
        self.assertEqual([r.split(" ")[1] for r in bySession[second]],
                         ["session.created", "lease.claimed", "session.renamed"])
        self.assertEqual(seqOf(bySession[second][0]), 1)
        self.assertFalse([line for line in tail.lines if " run." in line or " command." in line])


class RideLiveTests(TestCase):
    """
    The ride's own limits and its watch-only form, live.
    """

    timeout = 120

    async def test_watchOnly(self) -> None:
        """
        C{vehicle ride --session ID --watch-only} on a free session: ready
        without the lease, reads answered, a prompt refused by the ride
        itself; the session's log has no lease event after the ride.
        """
        live = await LiveTail(self).start()
        code, frame = await live.host.call("POST", "/sessions",
                                           {"requestId": "c1", "claim": False}, **OWNER)
        self.assertEqual(code, 201, frame)
        sid = frame["value"]["session"]["sessionId"]
        lines = b"".join(json.dumps(r).encode() + b"\n" for r in (
            {"op": "inspect", "requestId": "i1"},
            {"op": "prompt", "requestId": "p1", "text": "hi"},
            {"op": "claim", "requestId": "k1"},
            {"op": "watch", "requestId": "w1", "since": 0},
        ))
        ride = await runClient(self, "ride", "--gardend", live.stand.url, "--graph", "g1",
                               "--session", sid, "--watch-only", env=live.env, stdin=lines)
        self.assertEqual(ride.ended.result, 0, ride.errorText)
        frames = ride.frames()
        self.assertEqual([f.get("code", f["type"]) for f in frames],
                         ["ready", "session.snapshot", "invalid_request", "invalid_request",
                          "watch.completed", "closed"])
        self.assertFalse(frames[0]["value"]["holdsLease"])
        self.assertFalse(frames[-1]["value"]["released"])
        code, frame = await live.host.call("GET", f"/sessions/{sid}/events?since=0", **OWNER)
        types = [e["type"] for e in frame["value"]["events"]]
        self.assertFalse([t for t in types if t.startswith("lease.")], types)
        self.assertEqual({r["method"] for r in live.stand.requestsSeen}, {"GET"})

    async def test_seventeenMiBLine(self) -> None:
        """
        A 17 MiB line is refused at the ride's limit (C{body_too_large},
        the limit in its details) within seconds, and the next line is
        answered.
        """
        live = await LiveTail(self).start()
        payload = b'{"op":"prompt","requestId":"big","text":"' + b"x" * (17 * 1024 * 1024) + b'"}\n'
        payload += b'{"op":"inspect","requestId":"i1"}\n'
        ride = await runClient(self, "ride", "--gardend", live.stand.url, "--graph", "g1",
                               "--new", env=live.env, stdin=payload)
        self.assertEqual(ride.ended.result, 0, ride.errorText)
        frames = ride.frames()
        self.assertEqual([f.get("code", f["type"]) for f in frames],
                         ["ready", "body_too_large", "session.snapshot", "closed"])
        self.assertEqual(frames[1]["details"], {"limit": 16 * 1024 * 1024})
        self.assertEqual(frames[2]["requestId"], "i1")
        assert ride.elapsed is not None
        self.assertLess(ride.elapsed, 8.0)
        self.measured = ride.elapsed
