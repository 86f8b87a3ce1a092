"""
Group commit through the whole host (L{vehicle.store.GroupWriter} under the
real routes, on the memory host of L{tests.support.harness}): a request is
answered only once its record is durable (a slow sync on the writer's own
thread, and looked at while it waits); a failed sync fails what it covered
and nothing of anyone else; each session's order is kept; a retry waits
for the first; the crash and power-loss guarantees hold with a cut in the
middle of a batch.
"""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path
from typing import Any

from twisted.internet.defer import CancelledError, Deferred
from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from vehicle.protocol import Event, RenameRequest, fromRequest
from vehicle.session import Caller, RunSettled
from vehicle.session._digest import currentDigest
from vehicle.session._eventlog import Entry
from vehicle.session._watchers import Watchers
from vehicle.store import GroupWriter

from tests.support._crashfs import Crash, CrashFiles
from tests.support.batches import HeldBatches, ThreadBatches
from tests.support.crashdriver import LONG, Scenario, look
from tests.support.harness import Harness


Answer = tuple[int, dict[str, Any]]


class _Host:
    """
    A memory host whose writer runs its batches as the test says.
    """

    def __init__(self, case: SynchronousTestCase, root: Path | None = None,
                 runner: Any = None) -> None:
        self.case = case
        self.runner = runner if runner is not None else HeldBatches()
        self.h = Harness(case, root, writer=lambda: GroupWriter(runner=self.runner))
        self.writer = self.h.api.registry.dataDir.writer

    def send(self, method: str, path: str, body: Any = None, **who: Any) -> Deferred[Any]:
        d = self.h.request(method, path, body, **who)
        self.h.stub.flush()
        return d

    def answer(self, d: Deferred[Any]) -> Answer:
        self.h.stub.flush()
        response = self.case.successResultOf(d)
        content = self.case.successResultOf(response.content())
        return response.code, json.loads(content)

    def policy(self, sid: str, requestId: str, policy: str) -> Deferred[Any]:
        return self.send("POST", f"/sessions/{sid}/commands",
                         {"requestId": requestId, "type": "set_room_policy", "policy": policy})

    def events(self, sid: str) -> list[dict[str, Any]]:
        lines = (self.h.root / "sessions" / sid / "events.jsonl").read_text().splitlines()
        return [json.loads(line) for line in lines]

    def create(self, requestId: str) -> str:
        sid = str(self.h.create(requestId)["sessionId"])
        self.settle()
        return sid

    def settle(self) -> None:
        if isinstance(self.runner, HeldBatches):
            self.runner.releaseAll()


class GroupCommitTests(SynchronousTestCase):
    """
    The host's requests through a writer whose batches the test holds.
    """

    def setUp(self) -> None:
        self.host = _Host(self)
        self.held = self.host.runner
        self.sid = self.host.create("c1")
        self.other = self.host.create("c2")

    def test_manyRequestsOneBatch(self) -> None:
        """
        Requests that come while a batch is written are written together:
        each of their logs synced once for all of them; none answered
        before.
        """
        host = self.host
        first = host.policy(self.sid, "p0", "mute")
        waiting = [host.policy(self.sid, f"p{n}", "observe") for n in (1, 2, 3)]
        waiting.append(host.policy(self.other, "q1", "co-drive"))
        for d in [first, *waiting]:
            self.assertNoResult(d)
        self.held.release()
        self.assertEqual(host.answer(first)[0], 202)
        for d in waiting:
            self.assertNoResult(d)
        files = CrashFiles(host.h.root)
        files.install(self.patch)
        self.addCleanup(files.uninstall)
        files.arm(None)
        self.held.release()
        self.assertEqual([host.answer(d)[0] for d in waiting], [202, 202, 202, 202])
        # Two sessions, two logs each: four syncs for four requests.
        self.assertEqual(files.syncs, 4)

    def test_failedSyncFailsWhatItCovered(self) -> None:
        """
        A sync of one session's log fails: the requests whose lines it
        covered are refused, and so are the requests of that session taken
        behind them before the failure was known (numbered after lines the
        disk may have lost); every other session's requests, in that batch
        and after, are answered; the session, read back from disk, takes
        the next request.
        """
        host = self.host
        host.policy(self.other, "q0", "mute")
        p1, q1 = host.policy(self.sid, "p1", "co-drive"), host.policy(self.other, "q1", "observe")
        self.held.release()
        p2, q2 = host.policy(self.sid, "p2", "observe"), host.policy(self.other, "q2", "co-drive")
        files = CrashFiles(host.h.root)
        files.install(self.patch)
        self.addCleanup(files.uninstall)
        files.fail("fsync", errno.EIO, path=host.h.root / "sessions" / self.sid / "events.jsonl")
        self.held.release()
        self.assertEqual(host.answer(p1)[1].get("code"), "storage_unavailable")
        self.assertEqual(host.answer(q1)[0], 202)
        self.held.release()
        self.assertEqual(host.answer(p2)[1].get("code"), "storage_unavailable")
        self.assertEqual(host.answer(q2)[0], 202)
        p3 = host.policy(self.sid, "p3", "mute")
        self.held.release()
        self.assertEqual(host.answer(p3)[0], 202)
        self.flushLoggedErrors()
        code, frame = host.h.call("GET", f"/sessions/{self.sid}")
        self.assertEqual(frame["value"]["session"]["roomPolicy"], "mute")
        seqs = [e["seq"] for e in host.events(self.sid)]
        self.assertEqual(seqs, list(range(1, len(seqs) + 1)))
        self.assertEqual([e["data"]["policy"] for e in host.events(self.other)
                          if e["type"] == "room.policy"], ["mute", "observe", "co-drive"])
        # The disk decides the refused ones: a retry replays what it kept,
        # or is taken afresh; never twice.
        again = host.policy(self.sid, "p1", "co-drive")
        host.settle()
        self.assertIn(host.answer(again)[0], (200, 202))
        host.h.restart()
        policies = [e["data"]["policy"] for e in host.events(self.sid) if e["type"] == "room.policy"]
        self.assertEqual(policies.count("observe"), 0)
        self.assertEqual(policies.count("mute"), 1)

    def test_orderPerSession(self) -> None:
        """
        A session's requests, spread over batches, are written, numbered
        and answered in the order they came; each answer's cursor names
        its own event; C{meta.json} ends with the last title.
        """
        host = self.host
        sent = []
        for n in range(6):
            sent.append(host.send("PATCH", f"/sessions/{self.sid}",
                                  {"requestId": f"t{n}", "title": f"title {n}"}))
            if n % 2:
                host.policy(self.other, f"q{n}", "mute" if n % 4 == 1 else "observe")
                self.held.release()
        host.settle()
        answers = [host.answer(d) for d in sent]
        cursors = [frame["value"]["session"]["cursor"] for _, frame in answers]
        renamed = [e for e in host.events(self.sid) if e["type"] == "session.renamed"]
        self.assertEqual([e["data"]["title"] for e in renamed], [f"title {n}" for n in range(6)])
        self.assertEqual(cursors, [e["seq"] for e in renamed])
        meta = json.loads((host.h.root / "sessions" / self.sid / "meta.json").read_text())
        self.assertEqual(meta["title"], "title 5")

    def test_retryWaitsForTheFirst(self) -> None:
        """
        A retry of a request still being written waits for it, then
        replays its answer; one with another body waits, then is a
        conflict.  Neither is answered before the first is durable.
        """
        host = self.host
        first = host.policy(self.sid, "p1", "observe")
        retry = host.policy(self.sid, "p1", "observe")
        other = host.policy(self.sid, "p1", "mute")
        for d in (first, retry, other):
            self.assertNoResult(d)
        host.settle()
        self.assertEqual(host.answer(first)[0], 202)
        code, frame = host.answer(retry)
        self.assertEqual((code, frame.get("replayed")), (200, True))
        self.assertEqual(host.answer(other)[1].get("code"), "request_id_conflict")
        self.assertEqual(sum(e["type"] == "room.policy" for e in host.events(self.sid)), 1)

    def test_retryAfterARefusalIsTaken(self) -> None:
        """
        A retry that waited for a first the disk refused (a failed write,
        nothing kept) is taken afresh.
        """
        host = self.host
        files = CrashFiles(host.h.root)
        files.install(self.patch)
        self.addCleanup(files.uninstall)
        first = host.policy(self.sid, "p1", "observe")
        retry = host.policy(self.sid, "p1", "observe")
        files.fail("write", errno.ENOSPC)
        self.held.release()
        self.assertEqual(host.answer(first)[1].get("code"), "storage_unavailable")
        self.assertNoResult(retry)
        host.settle()
        self.assertEqual(host.answer(retry)[0], 202)
        self.flushLoggedErrors()

    def test_eventsToldOnceDurable(self) -> None:
        """
        A body's events go through the same writer, in order with the
        requests around them: numbered when taken, seen by the session's
        watchers only once durable, in seq order.
        """
        host = self.host
        session = host.h.api.registry.sessions[self.sid]
        seen: list[int | None] = []
        session.feed.subscribe(lambda event: seen.append(event.seq))
        before = session.cursor
        taken = session.emit("body.notice", {"n": 1})
        answered = host.policy(self.sid, "p1", "observe")
        session.emit("body.notice", {"n": 2})
        self.assertEqual(taken.seq, before + 1)
        self.assertEqual((seen, session.cursor), ([], before))
        host.settle()
        self.assertEqual(seen, [before + 1, before + 2, before + 3])
        self.assertEqual(host.answer(answered)[1]["type"], "room.policy")
        self.assertEqual([e["type"] for e in host.events(self.sid)][-3:],
                         ["body.notice", "room.policy", "body.notice"])

    def test_runSettledFollowersOnceDurable(self) -> None:
        """
        A settled run is told to the session's followers once its event is
        durable, and not at all if the disk refused it.
        """
        host = self.host
        session = host.h.api.registry.sessions[self.sid]
        told: list[int | None] = []

        class Followers:
            def renamed(self, session: Any) -> None:
                pass

            def settled(self, session: Any, run: RunSettled) -> None:
                told.append(run.seq)

        session.followers = Followers()
        kept = session.emit("run.settled", {"runId": "run-1"})
        session.settled(RunSettled(seq=kept.seq, aborted=False, costUsd=None))
        self.assertEqual(told, [])
        host.settle()
        self.assertEqual(told, [kept.seq])
        files = CrashFiles(host.h.root)
        files.install(self.patch)
        self.addCleanup(files.uninstall)
        files.fail("write", errno.EIO)
        lost = session.emit("run.settled", {"runId": "run-2"})
        session.settled(RunSettled(seq=lost.seq, aborted=False, costUsd=None))
        host.settle()
        self.assertEqual(told, [kept.seq])
        self.flushLoggedErrors()

    def test_callerGoneWhileWritten(self) -> None:
        """
        A request whose caller goes away while its step is being written
        (the route's L{Deferred} cancelled: the client closed its
        connection) is still made durable, remembered and told: the
        session is not read back as if the disk had refused it, and a
        retry replays it.
        """
        host = self.host
        session = host.h.api.registry.sessions[self.sid]
        told: list[int] = []
        session.feed.follow(lambda entry: told.append(entry.event.seq or 0))
        caller = Caller(principal="alice", clientId="tab-1", role="owner", graphId="g1")
        request = fromRequest({"requestId": "gone-1", "title": "while gone"}, RenameRequest)
        waiting = session.rename(caller, request)
        waiting.cancel()
        self.failureResultOf(waiting, CancelledError)
        host.settle()
        self.assertEqual(self.flushLoggedErrors(), [])
        self.assertEqual(told, [session.cursor])
        self.assertTrue(session.knowsRequest("gone-1"))
        code, frame = host.answer(host.send("PATCH", f"/sessions/{self.sid}",
                                            {"requestId": "gone-1", "title": "while gone"}))
        self.assertEqual((code, frame.get("replayed")), (200, True))

    def test_deleteWaitsForItsEvent(self) -> None:
        """
        A delete is answered once C{session.deleted} is durable; from the
        moment it is taken the session takes no other request.
        """
        host = self.host
        deleting = host.send("DELETE", f"/sessions/{self.sid}")
        self.assertNoResult(deleting)
        self.assertEqual(host.answer(host.policy(self.sid, "p1", "mute"))[1]["code"], "not_found")
        host.settle()
        self.assertEqual(host.answer(deleting)[0], 200)
        [trashed] = os.listdir(host.h.root / "trash")
        lines = (host.h.root / "trash" / trashed / "events.jsonl").read_text().splitlines()
        self.assertEqual(json.loads(lines[-1])["type"], "session.deleted")

    def test_refusedDeleteKeepsTheSession(self) -> None:
        """
        A delete whose event the disk refuses is refused, and the session
        is served as before.
        """
        host = self.host
        files = CrashFiles(host.h.root)
        files.install(self.patch)
        self.addCleanup(files.uninstall)
        deleting = host.send("DELETE", f"/sessions/{self.sid}")
        files.fail("fsync", errno.EIO)
        self.held.release()
        self.assertEqual(host.answer(deleting)[1]["code"], "storage_unavailable")
        after = host.policy(self.sid, "p1", "mute")
        host.settle()
        self.assertEqual(host.answer(after)[0], 202)
        self.flushLoggedErrors()


class MetaLaterTests(SynchronousTestCase):
    """
    A rename's C{meta.json}, rewritten by the writer a second later at
    most, and a delete that comes first.
    """

    def setUp(self) -> None:
        self.later = Clock()
        self.h = Harness(self, writer=lambda: GroupWriter(clock=self.later))
        self.sid = str(self.h.create("c1")["sessionId"])

    def rename(self, title: str) -> None:
        code, frame = self.h.call("PATCH", f"/sessions/{self.sid}",
                                  {"requestId": "rename-1", "title": title})
        self.assertEqual(code, 200, frame)

    def meta(self, folder: Path) -> dict[str, Any]:
        return dict(json.loads((folder / "meta.json").read_text()))

    def test_deleteRightAfterARename(self) -> None:
        """
        A delete within the second after a rename moves a C{meta.json}
        holding the new title to the trash: the rewrite still waiting is
        done before the move, and not again after it.
        """
        self.rename("new title")
        folder = self.h.root / "sessions" / self.sid
        self.assertNotEqual(self.meta(folder).get("title"), "new title")
        code, frame = self.h.call("DELETE", f"/sessions/{self.sid}")
        self.assertEqual(code, 200, frame)
        [trashed] = os.listdir(self.h.root / "trash")
        self.assertEqual(self.meta(self.h.root / "trash" / trashed)["title"], "new title")
        self.later.advance(2)
        self.assertFalse(folder.exists())

    def test_refusedDeleteRewritesLater(self) -> None:
        """
        A delete the disk refuses leaves the rewrite to the writer, which
        does it in its time.
        """
        self.rename("kept title")
        files = CrashFiles(self.h.root)
        files.install(self.patch)
        self.addCleanup(files.uninstall)
        files.fail("fsync", errno.EIO)
        code, frame = self.h.call("DELETE", f"/sessions/{self.sid}")
        self.assertEqual(frame["code"], "storage_unavailable")
        files.uninstall()
        self.later.advance(2)
        folder = self.h.root / "sessions" / self.sid
        self.assertEqual(self.meta(folder)["title"], "kept title")
        self.flushLoggedErrors()


class SlowSyncTests(SynchronousTestCase):
    """
    The writer on a thread of its own, its syncs held by the file layer
    (a slow disk): look while they wait.
    """

    def test_noAnswerBeforeTheSync(self) -> None:
        """
        While the writer's thread waits in the sync of a request's record,
        that request is not answered and its event is seen by nobody; the
        requests that come meanwhile wait for the next batch; once the sync
        returns, each is answered in turn.
        """
        threads = ThreadBatches()
        host = _Host(self, runner=threads)
        sid = str(host.h.create("c1")["sessionId"])
        session = host.h.api.registry.sessions[sid]
        files = CrashFiles(host.h.root)
        files.install(self.patch)
        self.addCleanup(files.uninstall)
        hold = files.holdSyncs()
        self.addCleanup(hold.release)
        seen: list[Event] = []
        session.feed.subscribe(seen.append)
        cursor = session.cursor
        first = host.send("PATCH", f"/sessions/{sid}", {"requestId": "t1", "title": "one"})
        self.assertTrue(hold.entered.wait(timeout=30))
        self.assertNoResult(first)
        later = [host.send("PATCH", f"/sessions/{sid}", {"requestId": f"t{n}", "title": f"t{n}"})
                 for n in (2, 3)]
        for d in [first, *later]:
            self.assertNoResult(d)
        self.assertEqual((seen, session.cursor), ([], cursor))
        polled = host.send("GET", f"/sessions/{sid}/events?since={cursor}&waitMs=0")
        self.assertEqual(host.answer(polled)[1]["value"]["events"], [])
        hold.release()
        threads.deliver()
        self.assertEqual(host.answer(first)[0], 200)
        self.assertEqual([e.seq for e in seen], [cursor + 1])
        for d in later:
            self.assertNoResult(d)
        threads.deliver()
        self.assertEqual([host.answer(d)[0] for d in later], [200, 200])
        self.assertEqual(host.writer.batches, 2)
        host.h.stop()
        # Nothing was left on its way (the logs closed at once); the stop's
        # one batch is the session's digest, written on the writer's thread
        # (which may have written it already: not looked at before).
        self.assertEqual(host.writer.batches, 3)
        threads.deliver()
        self.successResultOf(host.writer.drain())
        self.assertEqual(host.writer.batches, 3)
        self.assertIsNotNone(currentDigest(session.directory))


class BatchCutTests(SynchronousTestCase):
    """
    A batch of several requests of two sessions cut at each of its syncs
    (by a kill, or a power loss: only what was synced survives); a new
    host retries every request: each is done once or not at all, and a
    request answered before the cut is done.
    """

    def cutRun(self, mode: str, cut: int | None) -> tuple[list[Any], Any, int]:
        root = Path(self.mktemp())
        root.mkdir(parents=True)
        files = CrashFiles(root, mode)
        files.install(self.patch)
        self.addCleanup(files.uninstall)
        host = _Host(self, root)
        one, two = host.create("c1"), host.create("c2")
        requests = [
            ("POST", f"/sessions/{one}/commands",
             {"requestId": "a0", "type": "set_room_policy", "policy": "observe"}),
            ("POST", f"/sessions/{one}/commands",
             {"requestId": "a1", "type": "set_room_policy", "policy": "co-drive"}),
            ("PATCH", f"/sessions/{one}", {"requestId": "a2", "title": "renamed"}),
            ("POST", f"/sessions/{two}/claim", {"requestId": "b1", "takeover": True}),
            ("POST", f"/sessions/{one}/chimes", {"requestId": "a3", "author": "Bob",
                                                 "text": "look"}),
        ]
        whose = [{}, {}, {}, {"client": "tab-2"}, {"principal": "bob"}]
        first = host.send(*requests[0], **whose[0])
        batch = [host.send(*r, **w) for r, w in zip(requests[1:], whose[1:])]
        host.runner.release()
        answered = host.answer(first)
        files.arm(cut)
        try:
            host.runner.release()
        except Crash:
            pass
        syncs, crashed = files.syncs, files.crashed
        if cut is not None:
            self.assertTrue(crashed)
            for d in batch:
                self.assertNoResult(d)
        files.kill()
        files.revive()
        self.flushLoggedErrors(Crash)
        again = Harness(self, root)
        retried = [again.call(r[0], r[1], r[2], **w) for r, w in zip(requests, whose)]
        outcome = [(code, frame.get("replayed", False), frame["type"]) for code, frame in retried]
        self.assertEqual(outcome[0][:2], (200, True), f"{answered} was answered, then lost")
        state = look(self, again, Scenario("batch", lambda h: {}, lambda c: ("", "", None, {})))
        again.stop()
        return outcome, state, syncs

    def cuts(self, mode: str) -> None:
        done, doneState, syncs = self.cutRun(mode, None)
        # Each session's two logs, then the rename's meta.json (its file
        # and its folder).
        self.assertEqual(syncs, 6)
        for k in range(1, syncs + 1) if LONG else (1, 2, syncs):
            outcome, state = self.cutRun(mode, k)[:2]
            for (code, replayed, kind), (_, _, doneKind) in zip(outcome, done):
                self.assertIn(code, (200, 201, 202), outcome)
                self.assertEqual(kind, doneKind)
            self.assertEqual(state, doneState, f"{mode}, cut after sync {k}")

    def test_kill(self) -> None:
        """
        The host killed after each sync of the batch.
        """
        self.cuts("kill")

    def test_power(self) -> None:
        """
        The power lost after each sync of the batch.
        """
        self.cuts("power")


class OrderTests(SynchronousTestCase):
    """
    A durable event is told once written, an ephemeral one (a delta) at
    once: no watcher sees an ephemeral event before a durable one taken
    before it (the next message's words before the last one's end).
    """

    def test_throughAHeldWriter(self) -> None:
        host = _Host(self)
        sid = host.create("c1")
        session = host.h.api.registry.sessions[sid]
        seen: list[str] = []
        session.feed.subscribe(lambda event: seen.append(event.type))
        session.emit("message.completed", {"runId": "run-1", "role": "assistant", "text": "a"})
        session.feed.broadcast("message.delta", {"runId": "run-1", "text": "b"})
        self.assertEqual(seen, [])
        host.runner.release()
        self.assertEqual(seen, ["message.completed", "message.delta"])
        # With nothing on its way to disk, a delta is told at once.
        session.feed.broadcast("message.delta", {"runId": "run-1", "text": "c"})
        self.assertEqual(seen, ["message.completed", "message.delta", "message.delta"])

    def test_watchers(self) -> None:
        """
        Each ephemeral event waits for the durable events taken before it,
        and only those; a numbering that went back (a session read back
        after a refused write) lets go of what waited for the lost ones.
        """
        watchers = Watchers("s1")
        seen: list[str] = []
        watchers.subscribe(lambda event: seen.append(event.data.get("n", event.type)))

        def durable(seq: int) -> Entry:
            return Entry(Event(type="command.accepted", timestamp="t", sessionId="s1",
                               data={"n": f"d{seq}"}, seq=seq))

        watchers.broadcast("message.delta", {"n": "e1"}, "t", taken=2, told=0)
        watchers.publish(durable(1))
        self.assertEqual(seen, ["d1"])
        watchers.broadcast("message.delta", {"n": "e2"}, "t", taken=3, told=1)
        watchers.publish(durable(2))
        self.assertEqual(seen, ["d1", "d2", "e1"])
        watchers.publish(durable(3))
        self.assertEqual(seen, ["d1", "d2", "e1", "d3", "e2"])
        watchers.broadcast("message.delta", {"n": "e3"}, "t", taken=5, told=3)
        watchers.broadcast("message.delta", {"n": "e4"}, "t", taken=3, told=3)
        self.assertEqual(seen[-2:], ["e3", "e4"])
