"""
Crash injection: for every mutating route, the host (the real one, in
memory: L{tests.support.harness.Harness}) is killed right after the k-th durable
write (fsync) of one request, thrown away, and a new host is started on
the same data directory; the same request (same C{requestId}, same body) is
sent again.  The state must then be one of the two a whole request allows,
each with its answer: the request done before the kill (the same as a run
killed just after it: the retry replays), or not done at all (the same as
a run killed just before it: the retry does it).  Never half: one effect,
gapless seqs, no half-made folder, no trash entry without C{deleted.json},
no temporary file, C{meta.json} agreeing with what is served.

The same runs go under a simulated power loss (L{tests.support._crashfs}: only what
was synced survives).  The default run cuts at the first and the last
write of each route; C{VEHICLE_LONG_PROOFS=1} cuts at every one.

Other packages add their routes with L{scenario} (the public grants and turns:
a setup and a request, as below).
"""

from __future__ import annotations

import errno
import gc
import json
import os
from pathlib import Path
from typing import Any, Callable

from twisted.internet.defer import Deferred
from twisted.trial.unittest import SynchronousTestCase

from vehicle.protocol import CommandRequest, CommandStatus, fromRequest
from vehicle.store import GroupWriter, OsFiles, runAtOnce, useFiles

from tests.support._crashfs import CrashFiles
from tests.support.batches import HeldBatches
from tests.support.crashdriver import CrashDriver, Request, addCrashTests, scenario
from tests.support.descriptors import openDescriptors
from tests.support.harness import Harness
from tests.support.pifiles import HEADER, assistant, encode, user


def _session(h: Harness, **kw: Any) -> dict[str, Any]:
    return {"sid": h.create(**kw)["sessionId"]}


def _withPi(h: Harness, **kw: Any) -> dict[str, Any]:
    ctx = _session(h, **kw)
    directory = h.api.registry.sessions[ctx["sid"]].directory
    piFile = directory / "pi" / "2026-11-30T07-00-50-130Z_01a22b41.jsonl"
    piFile.touch(mode=0o600)  # pi's own file, as pi makes it
    piFile.write_bytes(encode([
        HEADER,
        user("aaaa0001", None, 1, "first question"),
        assistant("aaaa0002", "aaaa0001", 2, [{"type": "text", "text": "first answer"}]),
        user("aaaa0003", "aaaa0002", 3, "second question"),
        assistant("aaaa0004", "aaaa0003", 4, [{"type": "text", "text": "second answer"}]),
    ]))
    return ctx


def _command(kind: str, **body: Any) -> Callable[[dict[str, Any]], Request]:
    def request(ctx: dict[str, Any]) -> Request:
        extra = {k: (v(ctx) if callable(v) else v) for k, v in body.items()}
        return ("POST", f"/sessions/{ctx['sid']}/commands",
                {"requestId": f"r-{kind}", "type": kind, **extra}, {})
    return request


def _withChime(h: Harness) -> dict[str, Any]:
    ctx = _session(h)
    code, frame = h.call("POST", f"/sessions/{ctx['sid']}/chimes",
                         {"requestId": "chime-setup", "author": "Bob", "text": "try this"},
                         principal="bob")
    assert code == 202, frame
    ctx["chimeId"] = frame["value"]["chime"]["chimeId"]
    return ctx


def _withPolicy(policy: str) -> Callable[[Harness], dict[str, Any]]:
    def setup(h: Harness) -> dict[str, Any]:
        ctx = _session(h)
        code, frame = h.call("POST", f"/sessions/{ctx['sid']}/commands",
                             {"requestId": "policy-setup", "type": "set_room_policy",
                              "policy": policy})
        assert code == 202, frame
        return ctx
    return setup


def _withQueue(h: Harness) -> dict[str, Any]:
    ctx = _session(h)
    for n in (1, 2):
        code, frame = h.call("POST", f"/sessions/{ctx['sid']}/commands",
                             {"requestId": f"p{n}", "type": "prompt", "text": f"question {n}"})
        assert code == 202, frame
    return ctx


def _chime(ctx: dict[str, Any]) -> Request:
    return ("POST", f"/sessions/{ctx['sid']}/chimes",
            {"requestId": "r-chime", "author": "Bob", "text": "look here"}, {"principal": "bob"})


#: The session package's mutating routes, registered with the driver.
ROUTES = [
    scenario("create", lambda h: {"sid": None},
             lambda ctx: ("POST", "/sessions", {"requestId": "r-create", "title": "A title"}, {})),
    scenario("claim", lambda h: _session(h, claim=False),
             lambda ctx: ("POST", f"/sessions/{ctx['sid']}/claim", {"requestId": "r-claim"}, {})),
    scenario("takeover", _session,
             lambda ctx: ("POST", f"/sessions/{ctx['sid']}/claim",
                          {"requestId": "r-take", "takeover": True}, {"client": "tab-2"})),
    scenario("release", _session,
             lambda ctx: ("POST", f"/sessions/{ctx['sid']}/release", {"requestId": "r-release"}, {})),
    scenario("rename", _session,
             lambda ctx: ("PATCH", f"/sessions/{ctx['sid']}", {"requestId": "r-rename",
                                                              "title": "A new  name"}, {})),
    scenario("delete", _session,
             lambda ctx: ("DELETE", f"/sessions/{ctx['sid']}", None, {})),
    *(scenario(kind, _session, _command(kind, text="hello there"))
      for kind in ("prompt", "follow_up", "steer")),
    scenario("abort", _session, _command("abort"), lease=False),
    scenario("shutdown", _session, _command("shutdown"), lease=False),
    scenario("cancel", _withQueue, _command("cancel", targetCommandId="p2"), lease=False),
    scenario("set_room_policy", _session, _command("set_room_policy", policy="observe")),
    scenario("accept_chime", _withChime, _command("accept_chime", chimeId=lambda c: c["chimeId"])),
    scenario("reject_chime", _withChime, _command("reject_chime", chimeId=lambda c: c["chimeId"])),
    scenario("chime", _session, _chime),
    scenario("chime_co_drive", _withPolicy("co-drive"), _chime),
    scenario("chime_observed", _withPolicy("observe"), _chime),
    scenario("fork", _withPi, _command("fork", entryId="aaaa0003")),
    scenario("clone", _withPi, _command("clone")),
]


class CrashTests(CrashDriver):
    """
    Every route of the session package, killed at its durable writes.
    """


addCrashTests(CrashTests, ROUTES)


class PowerLossTests(CrashTests):
    """
    The same, but the kill is a power cut: what was not synced is lost
    (a file's data without its sync, an entry without its directory's).
    """

    mode = "power"


class RestartTests(SynchronousTestCase):
    """
    Whatever a kind of record changed is there again after a restart: the
    state is derived from the logs, never from memory.
    """

    def setUp(self) -> None:
        self.h = Harness(self)
        self.sid = self.h.create()["sessionId"]

    def command(self, requestId: str, kind: str, **body: Any) -> tuple[int, dict[str, Any]]:
        return self.h.call("POST", f"/sessions/{self.sid}/commands",
                           {"requestId": requestId, "type": kind, **body})

    def snapshot(self) -> dict[str, Any]:
        code, frame = self.h.call("GET", f"/sessions/{self.sid}")
        self.assertEqual(code, 200, frame)
        return frame["value"]

    def test_roomPolicy(self) -> None:
        """
        The room's policy survives a restart.
        """
        self.assertEqual(self.command("p", "set_room_policy", policy="co-drive")[0], 202)
        self.h.restart()
        self.assertEqual(self.snapshot()["session"]["roomPolicy"], "co-drive")

    def test_completedCommand(self) -> None:
        """
        A command's final status (as its body reported it) survives a
        restart; it is not reported interrupted.
        """
        self.assertEqual(self.command("c1", "prompt", text="hi")[0], 202)
        session = self.h.api.registry.sessions[self.sid]
        session.move("c1", CommandStatus.completed, disposition="started")
        self.h.restart()
        [command] = self.snapshot()["commands"]
        self.assertEqual((command["status"], command["disposition"]), ("completed", "started"))

    def test_acceptedChimeText(self) -> None:
        """
        An accepted chime's command keeps its text and author across a
        restart (the record holds the command whole).
        """
        code, frame = self.h.call("POST", f"/sessions/{self.sid}/chimes",
                                  {"requestId": "ch", "author": "Bob", "text": "try this"},
                                  principal="bob")
        chimeId = frame["value"]["chime"]["chimeId"]
        self.assertEqual(self.command("acc", "accept_chime", chimeId=chimeId)[0], 202)
        self.h.restart()
        [command] = self.snapshot()["commands"]
        self.assertEqual((command["text"], command["chimeAuthor"]), ("try this", "Bob"))
        self.assertEqual(self.snapshot()["chimes"], [])

    def test_runIdsGoOn(self) -> None:
        """
        A body revived after a restart numbers its runs on from the log:
        run ids stay unique for the session's whole life.
        """
        runs = []
        for n in (1, 2):
            self.assertEqual(self.command(f"p{n}", "prompt", text="hi")[0], 202)
            self.h.launcher.reply({"type": "agent_start"})
            session = self.h.api.registry.sessions[self.sid]
            runs += [e.data["runId"] for e in session.feed.after(0)[0]
                     if e.type == "run.started"]
            self.h.restart()
        self.assertEqual(sorted(set(runs)), ["run-1", "run-2"])

    def test_fingerprintIgnoresKeyOrder(self) -> None:
        """
        A retry whose JSON keys come in another order is the same request:
        a replay, not a conflict.
        """
        body = b'{"requestId": "k1", "type": "prompt", "text": "hi", "contextRefs": ["a"]}'
        again = b'{"contextRefs": ["a"], "text": "hi", "type": "prompt", "requestId": "k1"}'
        for raw in (body, again):
            d = self.h.request("POST", f"/sessions/{self.sid}/commands", raw=raw)
            self.h.stub.flush()
            response = self.successResultOf(d)
            frame = json.loads(self.successResultOf(response.content()))
        self.assertEqual((response.code, frame["type"], frame.get("replayed")),
                         (200, "command.accepted", True))

    def test_answerShowsItsEvents(self) -> None:
        """
        A claim's, a release's and a rename's answer show the session after
        the events the request wrote (its cursor names the last of them),
        and so does their replay.
        """
        for method, path, body in (
            ("POST", "/claim", {"requestId": "k"}),
            ("PATCH", "", {"requestId": "n", "title": "x"}),
            ("POST", "/release", {"requestId": "r"}),
        ):
            code, frame = self.h.call(method, f"/sessions/{self.sid}{path}", body)
            code, events = self.h.call("GET", f"/sessions/{self.sid}/events?since=0")
            self.assertEqual(frame["value"]["session"]["cursor"], events["value"]["cursor"], path)
            code, again = self.h.call(method, f"/sessions/{self.sid}{path}", body)
            self.assertEqual(again["value"]["session"]["cursor"], events["value"]["cursor"], path)

    def test_titleFollowsTheLog(self) -> None:
        """
        A rename is kept in the log; a C{meta.json} left behind (a host cut
        between the two) is put right at start.
        """
        meta = self.h.root / "sessions" / self.sid / "meta.json"
        before = meta.read_bytes()
        code, _ = self.h.call("PATCH", f"/sessions/{self.sid}", {"title": "New"})
        self.assertEqual(code, 200)
        meta.write_bytes(before)
        self.h.restart()
        self.assertEqual(self.snapshot()["session"]["title"], "New")
        self.assertEqual(json.loads(meta.read_text())["title"], "New")


class StartSweepTests(SynchronousTestCase):
    """
    Start removes or finishes what a dead host left half made, and logs
    one line for each.
    """

    def test_sweep(self) -> None:
        h = Harness(self)
        sid = h.create()["sessionId"]
        other = h.create("c2")["sessionId"]
        h.stop()
        root = h.root
        (root / "sessions" / ".new-sabc" / "pi").mkdir(parents=True)
        (root / "sessions" / "sold" / "pi").mkdir(parents=True)  # an older host's cut create
        (root / "sessions" / "sold" / "events.jsonl").write_text("")
        (root / "sessions" / sid / ".meta.json.0123456789ab.tmp").write_text("{}")
        (root / "trash" / "sgone").mkdir()  # an empty reservation
        (root / "trash" / "shalf").mkdir()  # an older host's cut delete
        (root / "trash" / "shalf" / "events.jsonl").write_text("")
        (root / "workspaces" / "snever").mkdir()
        lines: list[str] = []
        from twisted.logger import globalLogPublisher

        def observe(event: dict[str, Any]) -> None:
            if "what" in event:
                lines.append(event["what"])

        globalLogPublisher.addObserver(observe)
        self.addCleanup(globalLogPublisher.removeObserver, observe)
        h = Harness(self, root)
        self.assertEqual(len(lines), 7, lines)
        self.assertEqual(sorted(os.listdir(root / "sessions")), sorted([sid, other]))
        self.assertEqual(os.listdir(root / "sessions" / sid).count(".meta.json.0123456789ab.tmp"), 0)
        self.assertEqual(sorted(os.listdir(root / "trash")), ["shalf", "sold"])
        self.assertTrue((root / "trash" / "shalf" / "deleted.json").is_file())
        self.assertTrue((root / "trash" / "sold" / "deleted.json").is_file())
        self.assertEqual(os.listdir(root / "workspaces"), [])
        self.assertEqual(len(h.api.registry.sessions), 2)


class _SyncsAndRenames(OsFiles):
    """
    The real file layer, noting each sync (by path), write (by path) and
    rename, in order.
    """

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def fsync(self, fd: int) -> None:
        self.calls.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
        super().fsync(fd)

    def write(self, fd: int, data: Any) -> int:
        self.calls.append(("write", os.readlink(f"/proc/self/fd/{fd}")))
        return super().write(fd, data)

    def rename(self, source: Any, target: Any) -> None:
        self.calls.append(("rename", str(Path(source).resolve())))
        super().rename(source, target)


class AsideSyncTests(SynchronousTestCase):
    """
    A new session's folder built aside is written with no sync (nobody
    reads it), then each of its files is synced once after its last
    write, the folder after them, and the folder's parent after its
    rename: five syncs, where each write synced on its own made nine.
    """

    def test_createSyncsEachFileOnceThenTheFolder(self) -> None:
        h = Harness(self)
        self.addCleanup(h.stop)
        root = h.root.resolve()
        layer = _SyncsAndRenames()
        self.addCleanup(useFiles, useFiles(layer))
        sid = h.create("c1")["sessionId"]
        building = root / "sessions" / f".new-{sid}"
        aside = [(op, path) for op, path in layer.calls if path.startswith(str(building))
                 or path == str(root / "sessions")]
        self.assertEqual([c for c in aside if c[0] != "write"], [
            ("fsync", str(building / "events.jsonl")),
            ("fsync", str(building / "commands.jsonl")),
            ("fsync", str(building / "meta.json")),
            ("fsync", str(building)),
            ("rename", str(building)),
            ("fsync", str(root / "sessions")),
        ])
        lastWrite = {path: n for n, (op, path) in enumerate(aside) if op == "write"}
        synced = {path: n for n, (op, path) in enumerate(aside) if op == "fsync"}
        for path, n in lastWrite.items():
            if Path(path).name.startswith(".meta.json"):
                path = str(building / "meta.json")
            self.assertLess(n, synced[path], path)
        self.assertEqual(
            sorted(Path(p).name for p in lastWrite if not Path(p).name.startswith(".meta")),
            ["commands.jsonl", "events.jsonl"])


class _HeldSeals(SynchronousTestCase):
    """
    A host whose maker's runner (where a new folder is sealed and renamed)
    holds each piece of work until the test runs it.
    """

    def setUp(self) -> None:
        self.root = Path(self.mktemp()).absolute()
        self.root.mkdir(parents=True)
        self.h = Harness(self, self.root)
        self.addCleanup(self.h.stop)
        self.held = HeldBatches()
        self.h.api.registry.maker.runner = self.held
        self.synced: list[str] = []
        test = self

        class Noting(OsFiles):
            def fsync(self, fd: int) -> None:
                test.synced.append(os.readlink(f"/proc/self/fd/{fd}"))
                super().fsync(fd)

        self.addCleanup(useFiles, useFiles(Noting()))

    def send(self, requestId: str) -> Deferred[Any]:
        d = self.h.request("POST", "/sessions", {"requestId": requestId})
        self.h.stub.flush()
        return d

    def answer(self, d: Deferred[Any]) -> tuple[int, dict[str, Any]]:
        self.h.stub.flush()
        response = self.successResultOf(d)
        return response.code, json.loads(self.successResultOf(response.content()))

    def aside(self) -> list[str]:
        return sorted(n for n in os.listdir(self.root / "sessions") if n.startswith(".new-"))

    def replayedOnceMade(
        self, first: Deferred[Any], again: Deferred[Any]
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """
        C{again}, the same request as C{first} sent while its folder waits
        to be sealed, waits; once it is, the first is made and the second
        replays it.

        @return: their frames.
        """
        self.assertNoResult(again)
        self.assertEqual((len(self.held.waiting), len(self.aside())), (1, 1))
        self.held.release()
        code, frame = self.answer(first)
        replayCode, replayed = self.answer(again)
        self.assertEqual((code, replayCode, replayed.get("replayed")), (201, 200, True))
        return frame, replayed


class CreateOffThreadTests(_HeldSeals):
    """
    A create's syncs and rename are made off the reactor's thread: its
    answer waits for them, a retry meanwhile waits for it, and a client
    that goes away does not stop it.
    """

    def test_answeredOnceSealedOffThread(self) -> None:
        """
        The create's request makes no sync: its folder waits aside, its
        answer with it, until the runner has sealed and published it.
        """
        first = self.send("c1")
        self.assertNoResult(first)
        self.assertEqual(self.synced, [])
        [building] = self.aside()
        self.assertEqual(len(self.held.waiting), 1)
        self.held.release()
        code, frame = self.answer(first)
        self.assertEqual(code, 201, frame)
        sid = frame["value"]["session"]["sessionId"]
        self.assertEqual(building, f".new-{sid}")
        self.assertEqual(self.aside(), [])
        self.assertEqual(self.synced[-2:], [str(self.root / "sessions" / building),
                                            str(self.root / "sessions")])
        self.assertEqual(self.h.call("GET", f"/sessions/{sid}")[0], 200)

    def test_retryWaitsThenReplays(self) -> None:
        """
        The same create sent again while the first is made waits for it,
        then replays it: one session.
        """
        frame, replayed = self.replayedOnceMade(self.send("c1"), self.send("c1"))
        self.assertEqual(replayed["value"]["session"]["sessionId"],
                         frame["value"]["session"]["sessionId"])
        self.assertEqual(len(self.h.call("GET", "/sessions")[1]["value"]["sessions"]), 1)

    def test_refusedThenMadeAfresh(self) -> None:
        """
        A seal the disk refuses: the create is refused and its folder
        removed; the retry that waited for it is made afresh.
        """
        first = self.send("c1")
        again = self.send("c1")
        [building] = self.aside()
        refused: list[int] = []

        def refuseOnce(layer: OsFiles, fd: int) -> None:
            if not refused:
                refused.append(fd)
                raise OSError(errno.EIO, "the disk refused")
            _realFsync(layer, fd)

        self.patch(OsFiles, "fsync", refuseOnce)
        self.held.release()
        code, frame = self.answer(first)
        self.assertEqual((code, frame["code"]), (503, "storage_unavailable"), frame)
        # The retry that waited is under way afresh, in a folder of its own.
        self.assertNoResult(again)
        self.assertEqual(len(refused), 1)
        self.assertEqual(len(self.held.waiting), 1)
        self.assertNotIn(building, self.aside())
        self.assertEqual(len(self.aside()), 1)
        self.held.release()
        code, frame = self.answer(again)
        self.assertEqual((code, frame.get("replayed")), (201, None), frame)
        self.assertEqual(len(self.h.call("GET", "/sessions")[1]["value"]["sessions"]), 1)
        self.flushLoggedErrors()

    def test_refusedLetsItsSpareGo(self) -> None:
        """
        A create refused at its seal, made for a spare reserved for it:
        the spare is let go; one made is not.
        """
        rules = self.h.api.drive.bodies
        reserved: list[str] = []
        letGo: list[str] = []

        def reserve(rules: object, model: str) -> str:
            reserved.append(self.h.api.registry.newSessionId())
            return reserved[-1]

        # (Its class's: the rules are slotted.)
        self.patch(type(rules), "reserveSpare", reserve)
        self.patch(type(rules), "unreserve", lambda rules, sessionId: letGo.append(sessionId))
        first = self.send("c1")
        self.patch(OsFiles, "fsync", lambda layer, fd: _refuse())
        self.held.release()
        self.assertEqual(self.answer(first)[0], 503)
        self.assertEqual(letGo, reserved)
        self.patch(OsFiles, "fsync", _realFsync)
        second = self.send("c2")
        self.held.release()
        code, frame = self.answer(second)
        self.assertEqual((code, frame["value"]["session"]["sessionId"]), (201, reserved[1]))
        self.assertEqual(letGo, reserved[:1])
        self.flushLoggedErrors()

    def test_callerGoneStillMade(self) -> None:
        """
        A client that goes away while its create is sealed: the session is
        made all the same, and its retry replays it.
        """
        first = self.send("c1")
        first.cancel()
        self.failureResultOf(first)
        self.held.release()
        self.assertEqual(self.aside(), [])
        code, frame = self.h.call("POST", "/sessions", {"requestId": "c1"})
        self.assertEqual((code, frame.get("replayed")), (200, True), frame)
        self.assertEqual(len(self.h.call("GET", "/sessions")[1]["value"]["sessions"]), 1)


_realFsync = OsFiles.fsync


def _refuse() -> None:
    raise OSError(errno.EIO, "the disk refused")


class DiskFailureTests(SynchronousTestCase):
    """
    A full disk or an I/O error, on an append or an atomic rewrite: the
    request gets a clear error frame (C{storage_unavailable}, 503), nothing
    acknowledged is lost, and the host serves on.
    """

    def setUp(self) -> None:
        self.root = Path(self.mktemp())
        self.root.mkdir(parents=True)
        self.files = CrashFiles(self.root)
        self.files.install(self.patch)
        self.addCleanup(self.files.uninstall)
        self.h = Harness(self, self.root)
        self.sid = self.h.create()["sessionId"]
        self.other = self.h.create("c2")["sessionId"]

    def refusedForDisk(self, answer: tuple[int, dict[str, Any]]) -> None:
        code, frame = answer
        self.assertEqual((code, frame["type"], frame["code"]), (503, "error", "storage_unavailable"),
                         frame)
        self.assertIn("disk", frame["message"])
        self.flushLoggedErrors()

    def policy(self, sid: str, requestId: str, policy: str) -> tuple[int, dict[str, Any]]:
        return self.h.call("POST", f"/sessions/{sid}/commands",
                           {"requestId": requestId, "type": "set_room_policy", "policy": policy})

    def servesOn(self) -> None:
        """
        The other session takes requests; this one too, once the disk works.
        """
        self.assertEqual(self.policy(self.other, "o1", "mute")[0], 202)
        self.assertEqual(self.policy(self.sid, "again", "observe")[0], 202)
        self.h.restart()
        code, frame = self.h.call("GET", f"/sessions/{self.sid}")
        self.assertEqual(frame["value"]["session"]["roomPolicy"], "observe")
        code, frame = self.h.call("GET", f"/sessions/{self.sid}/events?since=0")
        events = frame["value"]["events"]
        self.assertEqual([e["seq"] for e in events], list(range(1, len(events) + 1)))

    def test_appendNoSpace(self) -> None:
        """
        The record's append fails with ENOSPC: refused, nothing kept, the
        lease and policy as before.
        """
        self.files.fail("write", errno.ENOSPC)
        self.refusedForDisk(self.policy(self.sid, "p1", "co-drive"))
        code, frame = self.h.call("GET", f"/sessions/{self.sid}")
        self.assertEqual(frame["value"]["session"]["roomPolicy"], "suggest")
        self.assertEqual(frame["value"]["session"]["lease"]["clientId"], "alice")
        self.servesOn()

    def test_appendIOError(self) -> None:
        """
        The record's append fails with EIO: the same.
        """
        self.files.fail("write", errno.EIO)
        self.refusedForDisk(self.policy(self.sid, "p1", "co-drive"))
        self.servesOn()

    def test_syncFails(self) -> None:
        """
        The record's sync fails: it is never retried; the session is read
        back from disk and the request refused.  What the disk kept decides:
        a retry replays or is taken afresh, never twice.
        """
        self.files.fail("fsync", errno.EIO)
        self.refusedForDisk(self.policy(self.sid, "p1", "co-drive"))
        code, frame = self.policy(self.sid, "p1", "co-drive")
        self.assertIn(code, (200, 202))
        self.h.restart()
        code, frame = self.h.call("GET", f"/sessions/{self.sid}/events?since=0")
        self.assertEqual([e["type"] for e in frame["value"]["events"]].count("room.policy"), 1)

    def test_eventAppendFails(self) -> None:
        """
        The record is written, its event's append fails: refused, and the
        event is finished from the record when the session is read back
        (so a retry replays what was kept).
        """
        self.files.fail("write", errno.ENOSPC, after=1)
        self.refusedForDisk(self.policy(self.sid, "p1", "co-drive"))
        code, frame = self.policy(self.sid, "p1", "co-drive")
        self.assertEqual((code, frame.get("replayed")), (200, True))
        code, frame = self.h.call("GET", f"/sessions/{self.sid}")
        self.assertEqual(frame["value"]["session"]["roomPolicy"], "co-drive")

    def test_bodyNewsFails(self) -> None:
        """
        An event outside any request (a body's news) that the disk refuses
        leaves the log refusing appends; the next request reads the session
        back from disk first, and is taken.
        """
        session = self.h.api.registry.sessions[self.sid]
        self.files.fail("write", errno.EIO)
        self.assertRaises(OSError, session.emit, "body.notice", {"message": "hello"})
        self.assertEqual(self.policy(self.sid, "p1", "co-drive")[0], 202)
        self.servesOn()

    def test_createRewriteFails(self) -> None:
        """
        A create whose C{meta.json} cannot be written (the atomic rewrite's
        rename fails): refused, no half-made folder, no temporary file.
        """
        self.files.fail("replace", errno.ENOSPC)
        self.refusedForDisk(self.h.call("POST", "/sessions", {"requestId": "new"}))
        self.assertEqual(sorted(os.listdir(self.root / "sessions")), sorted([self.sid, self.other]))
        self.assertEqual(self.h.call("POST", "/sessions", {"requestId": "new"})[0], 201)
        self.servesOn()

    def test_createPublishedSyncFails(self) -> None:
        """
        A create whose folder was renamed into place but whose directory
        sync failed: refused, yet served, so the retry replays it (one
        session, never two).
        """
        self.files.fail("fsync", errno.EIO, path=self.root / "sessions")
        self.refusedForDisk(self.h.call("POST", "/sessions", {"requestId": "new"}))
        code, frame = self.h.call("POST", "/sessions", {"requestId": "new"})
        self.assertEqual((code, frame.get("replayed")), (200, True))
        self.assertEqual(len(os.listdir(self.root / "sessions")), 3)
        self.h.restart()
        self.assertEqual(len(self.h.call("GET", "/sessions")[1]["value"]["sessions"]), 3)

    def test_createNoSpace(self) -> None:
        """
        A create that cannot write its first record: refused, nothing left.
        """
        self.files.fail("write", errno.ENOSPC)
        self.refusedForDisk(self.h.call("POST", "/sessions", {"requestId": "new"}))
        self.assertEqual(sorted(os.listdir(self.root / "sessions")), sorted([self.sid, self.other]))
        self.servesOn()

    def test_forkNoSpace(self) -> None:
        """
        A fork whose branch cannot be written: refused, no half-made
        folder, the source as it was; the retry makes one branch.
        """
        ctx = _withPi(self.h, requestId="c3")
        self.files.fail("write", errno.ENOSPC, after=2)
        fork = {"requestId": "f1", "type": "fork", "entryId": "aaaa0003"}
        self.refusedForDisk(self.h.call("POST", f"/sessions/{ctx['sid']}/commands", fork))
        self.assertFalse([e for e in os.listdir(self.root / "sessions") if e.startswith(".")])
        self.assertEqual(self.h.call("POST", f"/sessions/{ctx['sid']}/commands", fork)[0], 201)
        self.assertEqual(len(os.listdir(self.root / "sessions")), 4)
        self.servesOn()

    def test_forkPublishedSyncFails(self) -> None:
        """
        A branch renamed into place whose directory sync failed: refused,
        yet recorded on its source, so the retry replays it.
        """
        ctx = _withPi(self.h, requestId="c3")
        self.files.fail("fsync", errno.EIO, path=self.root / "sessions")
        fork = {"requestId": "f1", "type": "fork", "entryId": "aaaa0003"}
        self.refusedForDisk(self.h.call("POST", f"/sessions/{ctx['sid']}/commands", fork))
        code, frame = self.h.call("POST", f"/sessions/{ctx['sid']}/commands", fork)
        self.assertEqual((code, frame.get("replayed")), (200, True))
        self.assertEqual(len(os.listdir(self.root / "sessions")), 4)

    def test_deleteNoSpace(self) -> None:
        """
        A delete that cannot reserve its trash name: refused, the session
        untouched.
        """
        self.files.fail("mkdir", errno.ENOSPC)
        self.refusedForDisk(self.h.call("DELETE", f"/sessions/{self.sid}"))
        self.assertEqual(os.listdir(self.root / "trash"), [])
        self.servesOn()

    def test_renameRewriteFails(self) -> None:
        """
        A rename whose C{meta.json} rewrite fails is still done (the log
        holds it) and C{meta.json} is put right at the next start.
        """
        self.files.fail("replace", errno.EIO)
        code, frame = self.h.call("PATCH", f"/sessions/{self.sid}", {"title": "Kept"})
        self.assertEqual((code, frame["value"]["session"]["title"]), (200, "Kept"))
        self.h.restart()
        meta = json.loads((self.root / "sessions" / self.sid / "meta.json").read_text())
        self.assertEqual(meta["title"], "Kept")
        self.flushLoggedErrors()


class HygieneTests(SynchronousTestCase):
    """
    File modes under a permissive umask, and no descriptor left open.
    """

    def test_modesUnderUmaskZero(self) -> None:
        """
        With umask 0, nothing the host makes in its data dir is readable
        or writable by anyone but its user.
        """
        old = os.umask(0)
        self.addCleanup(os.umask, old)
        h = Harness(self)
        sid = _withPi(h)["sid"]
        h.call("PATCH", f"/sessions/{sid}", {"title": "t"})
        h.call("POST", f"/sessions/{sid}/commands", {"requestId": "f", "type": "fork",
                                                     "entryId": "aaaa0003"})
        h.call("POST", f"/sessions/{sid}/commands", {"requestId": "p", "type": "prompt",
                                                     "text": "hi"})
        victim = h.create("c3")["sessionId"]
        h.call("DELETE", f"/sessions/{victim}")
        h.restart()
        loose = []
        for directory, dirs, names in os.walk(h.root):
            for name in dirs + names:
                mode = os.lstat(os.path.join(directory, name)).st_mode
                if mode & 0o077:
                    loose.append(f"{directory}/{name} {oct(mode & 0o777)}")
        self.assertEqual(loose, [])

    def test_noDescriptorLeak(self) -> None:
        """
        Creating, using, failing, deleting and stopping leave no descriptor
        open.
        """
        root = Path(self.mktemp())
        before = openDescriptors()
        h = Harness(self, root)
        sid = h.create()["sessionId"]
        h.call("PATCH", f"/sessions/{sid}", {"title": "t"})
        files = CrashFiles(root)
        files.install(self.patch)
        files.fail("write", errno.ENOSPC)
        h.call("POST", f"/sessions/{sid}/claim", {"requestId": "c"})
        h.call("POST", "/sessions", {"requestId": "new"})
        files.uninstall()
        self.flushLoggedErrors()
        h.call("DELETE", f"/sessions/{sid}")
        h.create("c2")
        h.restart()
        h.stop()
        gc.collect()
        self.assertEqual(openDescriptors(), before)


class BranchTwiceTests(SynchronousTestCase):
    """
    A branch that finds its request answered meanwhile (the same fork
    sent twice at once) drops its copy.
    """

    def test_answeredMeanwhile(self) -> None:
        from vehicle.body import branch
        from vehicle.session import Caller

        h = Harness(self)
        sid = _withPi(h)["sid"]
        body = {"requestId": "f1", "type": "fork", "entryId": "aaaa0003"}
        code, first = h.call("POST", f"/sessions/{sid}/commands", body)
        self.assertEqual(code, 201)
        registry = h.api.registry
        caller = Caller(principal="alice", clientId="alice", role="owner", graphId="g1")
        again = self.successResultOf(Deferred.fromCoroutine(
            branch(registry, registry.sessions[sid], caller, fromRequest(body, CommandRequest))))
        self.assertEqual(again["value"]["session"]["sessionId"],
                         first["value"]["session"]["sessionId"])
        self.assertEqual(len(os.listdir(h.root / "sessions")), 2)


    def test_answeredWhileItsRecordIsWritten(self) -> None:
        """
        The same fork, taken again by one that was past its wait before the
        first began (as an agent's branch is while its workspace is
        copied), while the first's record is on its way to its source's
        disk: the second waits for that record, then answers as the first
        did and drops its copy.
        """
        from vehicle.body import branch
        from vehicle.session import Caller

        held = HeldBatches()
        h = Harness(self, writer=lambda: GroupWriter(runner=held))
        self.addCleanup(h.stop)
        sid = _withPi(h)["sid"]
        held.releaseAll()
        body = {"requestId": "f1", "type": "fork", "entryId": "aaaa0003"}
        first = h.request("POST", f"/sessions/{sid}/commands", body)
        h.stub.flush()
        self.assertNoResult(first)
        registry = h.api.registry
        caller = Caller(principal="alice", clientId="alice", role="owner", graphId="g1")
        again = Deferred.fromCoroutine(
            branch(registry, registry.sessions[sid], caller, fromRequest(body, CommandRequest)))
        held.releaseAll()
        h.stub.flush()
        response = self.successResultOf(first)
        answered = json.loads(self.successResultOf(response.content()))
        self.assertEqual(response.code, 201, answered)
        self.assertEqual(self.successResultOf(again)["value"]["session"]["sessionId"],
                         answered["value"]["session"]["sessionId"])
        self.assertEqual(len([n for n in os.listdir(h.root / "sessions")
                              if not n.startswith(".")]), 2)


class BranchOffThreadTests(_HeldSeals):
    """
    A branch's seal and rename are made off the reactor's thread too: its
    answer waits for them and for its source's record; the same fork taken
    again meanwhile (at the door, or past it) waits, then answers as the
    first did; one refused lets the next be made afresh.
    """

    def setUp(self) -> None:
        super().setUp()
        maker = self.h.api.registry.maker
        maker.runner = runAtOnce
        self.sid = _withPi(self.h)["sid"]
        maker.runner = self.held
        self.body = {"requestId": "f1", "type": "fork", "entryId": "aaaa0003"}

    def fork(self) -> Deferred[Any]:
        d = self.h.request("POST", f"/sessions/{self.sid}/commands", self.body)
        self.h.stub.flush()
        return d

    def branches(self) -> list[str]:
        return [n for n in os.listdir(self.root / "sessions") if n not in (".", self.sid)
                and not n.startswith(".")]

    def test_answeredOnceSealedOffThread(self) -> None:
        first = self.fork()
        self.assertNoResult(first)
        self.assertEqual((len(self.held.waiting), len(self.aside()), self.branches()), (1, 1, []))
        self.held.release()
        code, frame = self.answer(first)
        self.assertEqual(code, 201, frame)
        self.assertEqual(self.branches(), [frame["value"]["session"]["sessionId"]])
        self.assertEqual(self.aside(), [])

    def test_retryWaitsThenReplays(self) -> None:
        frame, replayed = self.replayedOnceMade(self.fork(), self.fork())
        self.assertEqual(replayed["value"], frame["value"])
        self.assertEqual(len(self.branches()), 1)

    def test_pastItsWaitWaits(self) -> None:
        """
        One taken past the door's wait (as an agent's branch is while its
        workspace is copied) waits for the first's publication too, then
        drops its copy.
        """
        from vehicle.body import branch
        from vehicle.session import Caller

        first = self.fork()
        registry = self.h.api.registry
        caller = Caller(principal="alice", clientId="alice", role="owner", graphId="g1")
        again = Deferred.fromCoroutine(branch(
            registry, registry.sessions[self.sid], caller, fromRequest(self.body, CommandRequest)))
        self.assertNoResult(again)
        self.assertEqual((len(self.held.waiting), len(self.aside())), (1, 2))
        self.held.release()
        code, frame = self.answer(first)
        self.assertEqual(code, 201, frame)
        self.assertEqual(self.successResultOf(again)["value"], frame["value"])
        self.assertEqual((len(self.branches()), self.aside()), (1, []))

    def test_refusedThenMadeAfresh(self) -> None:
        first, again = self.fork(), self.fork()
        self.patch(OsFiles, "fsync", lambda layer, fd: _refuse())
        self.held.release()
        code, frame = self.answer(first)
        self.assertEqual((code, frame["code"]), (503, "storage_unavailable"), frame)
        self.patch(OsFiles, "fsync", _realFsync)
        self.assertNoResult(again)
        self.assertEqual((len(self.held.waiting), len(self.aside()), self.branches()), (1, 1, []))
        self.held.release()
        code, frame = self.answer(again)
        self.assertEqual((code, frame.get("replayed")), (201, None), frame)
        self.assertEqual(self.branches(), [frame["value"]["session"]["sessionId"]])
        self.flushLoggedErrors()

    def test_callerGoneStillMade(self) -> None:
        first = self.fork()
        first.cancel()
        self.failureResultOf(first)
        self.held.release()
        self.assertEqual(self.aside(), [])
        code, frame = self.h.call("POST", f"/sessions/{self.sid}/commands", self.body)
        self.assertEqual((code, frame.get("replayed")), (200, True), frame)
        self.assertEqual(self.branches(), [frame["value"]["session"]["sessionId"]])


class RebuildEqualsLiveTests(SynchronousTestCase):
    """
    Reading a session back from its logs gives the state the live session
    holds, after any sequence of requests (a Hypothesis property).
    """

    def test_property(self) -> None:
        from hypothesis import HealthCheck, given, settings
        from hypothesis import strategies as st

        from vehicle.session import Registry

        ops = st.lists(st.sampled_from([
            "claim", "takeover", "release", "rename", "policy-suggest", "policy-co-drive",
            "policy-observe", "chime", "accept", "reject", "prompt", "cancel", "abort",
            "body-settles",
        ]), max_size=12)

        @settings(max_examples=25, deadline=None, derandomize=True,
                  suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
        @given(ops)
        def check(sequence: list[str]) -> None:
            h = Harness(self)
            sid = h.create()["sessionId"]
            chimes: list[str] = []
            for n, op in enumerate(sequence):
                rid = f"r{n}"
                path = f"/sessions/{sid}"
                if op in ("claim", "takeover"):
                    h.call("POST", path + "/claim", {"requestId": rid, "takeover": op == "takeover"},
                           client="tab-2" if op == "takeover" else None)
                elif op == "release":
                    h.call("POST", path + "/release", {"requestId": rid})
                elif op == "rename":
                    h.call("PATCH", path, {"requestId": rid, "title": f"title {n}"})
                elif op.startswith("policy-"):
                    h.call("POST", path + "/commands", {"requestId": rid, "type": "set_room_policy",
                                                        "policy": op[7:]})
                elif op == "chime":
                    code, frame = h.call("POST", path + "/chimes",
                                         {"requestId": rid, "author": "Bob", "text": f"idea {n}"},
                                         principal="bob")
                    if frame["type"] == "chime.accepted":
                        chimes.append(frame["value"]["chime"]["chimeId"])
                elif op in ("accept", "reject") and chimes:
                    h.call("POST", path + "/commands", {"requestId": rid, "type": f"{op}_chime",
                                                        "chimeId": chimes[-1]})
                elif op == "prompt":
                    h.call("POST", path + "/commands", {"requestId": rid, "type": "prompt",
                                                        "text": f"question {n}"})
                elif op == "cancel":
                    h.call("POST", path + "/commands", {"requestId": rid, "type": "cancel",
                                                        "targetCommandId": f"r{n - 1}"})
                elif op == "abort":
                    h.call("POST", path + "/commands", {"requestId": rid, "type": "abort"})
                elif op == "body-settles":
                    # What a body reports: the oldest open command ends.
                    session = h.api.registry.sessions[sid]
                    for command in session.openCommands()[:1]:
                        session.move(command.commandId, CommandStatus.failed,
                                     disposition="started", error="the model failed",
                                     reason="model_error")
            live = h.api.registry.sessions[sid]
            fresh = Registry(dataDir=h.api.registry.dataDir, clock=h.clock)._load(sid)
            try:
                self.assertEqual(fresh.durableState(), live.durableState(), sequence)
            finally:
                fresh.close()
                h.stop()

        check()


class HelperCrashTests(CrashTests):
    """
    The same kills, every batch written and synced by the sync helper's
    code (L{vehicle._syncd}) through its wire's encoding.
    """

    helper = True


class HelperPowerLossTests(PowerLossTests):
    """
    The same power cuts, the batches the sync helper's.
    """

    helper = True
