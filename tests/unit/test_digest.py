"""
Tests for L{vehicle.session._digest} and dormant sessions: a restart takes
each session from its digest (no log read, no file held open), the same
session as its logs say; a digest missing, stale (a cut between the log and
the digest) or cut while written is derived again from the logs, which
always win; a dormant session wakes for what needs its logs (a replay, its
commands, a write) and goes dormant again when idle.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
from pathlib import Path
from typing import Any, Callable, cast

from twisted.internet.defer import fail
from twisted.internet.task import Clock
from twisted.logger import ILogObserver, formatEvent, globalLogPublisher
from twisted.trial.unittest import SynchronousTestCase

from vehicle.session import Registry
from vehicle.session import _dormancy, _journal, _registry
from vehicle.session._digest import DIGEST_FILE, VERSION, currentDigest, readDigest
from vehicle.session._registry import DORMANT_AFTER_SECONDS, SWEEP_SECONDS
from vehicle.store import GroupWriter

from tests.support._crashfs import Crash, CrashFiles
from tests.support.descriptors import openDescriptors
from tests.support.harness import Harness
from tests.support.spies import spyOn


class Host:
    """
    A harness with a few sessions that have been through a bit of
    everything (claims, renames, a room policy, a chime, commands).
    """

    def __init__(self, case: SynchronousTestCase, root: Path | None = None,
                 writer: Callable[[], GroupWriter] | None = None) -> None:
        self.case = case
        self.h = Harness(case, root, writer=writer)
        case.addCleanup(lambda: self.h.stop())

    def busy(self, count: int = 3) -> list[str]:
        sids = []
        for n in range(count):
            sid = self.h.create(f"create-{n}", title=f"number {n}")["sessionId"]
            self.ok("PATCH", f"/sessions/{sid}", {"requestId": f"rn-{n}", "title": f"renamed {n}"})
            self.ok("POST", f"/sessions/{sid}/commands",
                    {"requestId": f"pol-{n}", "type": "set_room_policy", "policy": "co-drive"})
            self.ok("POST", f"/sessions/{sid}/chimes",
                    {"requestId": f"ch-{n}", "author": "Bob", "text": f"idea {n}"}, principal="bob")
            self.ok("POST", f"/sessions/{sid}/commands",
                    {"requestId": f"p-{n}", "type": "prompt", "text": f"hello {n}"})
            session = self.h.api.registry.sessions[sid]
            session.move(f"p-{n}", _completed(), disposition="started")
            sids.append(sid)
        return sids

    def ok(self, method: str, path: str, body: Any = None, **who: Any) -> dict[str, Any]:
        code, frame = self.h.call(method, path, body, **who)
        self.case.assertLess(code, 300, frame)
        return frame

    def seen(self, sids: list[str]) -> dict[str, Any]:
        """
        What a client sees: the list, and each session's events and
        snapshot.
        """
        out: dict[str, Any] = {"list": self.ok("GET", "/sessions")}
        for sid in sids:
            out[sid] = (self.ok("GET", f"/sessions/{sid}/events?since=0"),
                        self.ok("GET", f"/sessions/{sid}"))
        return out

    def kill(self) -> None:
        """
        The host dies: its logs are closed, no digest is written.
        """
        for session in self.h.api.registry.sessions.values():
            session.close()


def _completed() -> Any:
    from vehicle.protocol import CommandStatus

    return CommandStatus.completed


class DigestFileTests(SynchronousTestCase):
    """
    A digest counts only while it names the logs beside it exactly.
    """

    def setUp(self) -> None:
        self.host = Host(self)
        [self.sid] = self.host.busy(1)
        self.directory = self.host.h.root / "sessions" / self.sid
        self.host.h.restart()

    def test_written(self) -> None:
        """
        A host that stops writes each session's digest, naming its logs.
        """
        digest = currentDigest(self.directory)
        assert digest is not None
        served = self.host.ok("GET", "/sessions")["value"]["sessions"][0]
        self.assertEqual(
            (digest.version, digest.title, digest.roomPolicy, digest.cursor, digest.preview),
            (VERSION, "renamed 0", "co-drive", served["cursor"], "hello 0"),
        )
        self.assertEqual(served["title"], "renamed 0")

    def test_missingOrUnreadable(self) -> None:
        """
        A digest missing, not JSON, not an object of its shape, or of
        another version, is none.
        """
        path = self.directory / DIGEST_FILE
        good = json.loads(path.read_text())
        for content in (None, "{not json", "[]", json.dumps({**good, "version": VERSION + 1}),
                        json.dumps({**good, "cursor": "nine"})):
            if content is None:
                path.unlink()
            else:
                path.write_text(content)
            self.assertIsNone(readDigest(self.directory), content)
            self.assertIsNone(currentDigest(self.directory), content)

    def test_staleWhenTheLogGrew(self) -> None:
        """
        A line appended to either log makes the digest stale.
        """
        for name in ("events.jsonl", "commands.jsonl"):
            log = self.directory / name
            before = log.read_bytes()
            with open(log, "ab") as f:
                f.write(b'{"x":1}\n')
            self.assertIsNotNone(readDigest(self.directory))
            self.assertIsNone(currentDigest(self.directory), name)
            log.write_bytes(before)
            self.assertIsNotNone(currentDigest(self.directory), name)

    def test_staleWhenTheLogChanged(self) -> None:
        """
        A log of the same size with other last bytes, or a shorter one,
        makes it stale too.
        """
        log = self.directory / "events.jsonl"
        before = log.read_bytes()
        log.write_bytes(before[:-3] + b"xx\n")
        self.assertIsNone(currentDigest(self.directory))
        log.write_bytes(before[:-1])
        self.assertIsNone(currentDigest(self.directory))


class DormantRestartTests(SynchronousTestCase):
    """
    A restart takes every session from its digest: the same sessions, no
    log read, no file held open.
    """

    def setUp(self) -> None:
        self.host = Host(self)
        self.sids = self.host.busy(3)
        self.host.h.restart()  # the bodies the prompts started are gone

    def countOpens(self) -> list[Path]:
        return spyOn(self, _journal, "openLogs")

    def test_sameSessions(self) -> None:
        """
        The list, the events and each snapshot are what they were before
        the restart, and what a restart without digests shows.
        """
        before = self.host.seen(self.sids)
        self.host.h.restart()
        self.assertEqual(self.host.seen(self.sids), before)
        for sid in self.sids:
            (self.host.h.root / "sessions" / sid / DIGEST_FILE).unlink()
        self.host.h.restart()
        self.assertEqual(self.host.seen(self.sids), before)

    def test_noLogRead(self) -> None:
        """
        Start reads no log of a session whose digest is current, and each
        is dormant; listing and watching wake none; inspecting one (its
        commands) wakes that one alone.
        """
        self.host.h.restart()
        opened = self.countOpens()
        self.host.h.restart()
        registry = self.host.h.api.registry
        self.assertEqual(opened, [])
        self.assertEqual([registry.sessions[sid].awake for sid in self.sids], [False] * 3)
        self.host.ok("GET", "/sessions")
        self.host.ok("GET", f"/sessions/{self.sids[0]}/events?since=0")
        self.assertEqual(opened, [])
        self.host.ok("GET", f"/sessions/{self.sids[1]}")
        self.assertEqual([registry.sessions[sid].awake for sid in self.sids], [False, True, False])
        self.assertEqual(len(opened), 1)

    def test_noFileHeldOpen(self) -> None:
        """
        A dormant session holds no file open.
        """
        self.host.h.stop()
        before = openDescriptors()
        registry = Registry(dataDir=self.host.h.api.registry.dataDir, clock=self.host.h.clock)
        registry.loadAll()
        self.addCleanup(registry.close)
        self.assertEqual(len(registry.sessions), 3)
        self.assertEqual(openDescriptors(), before)

    def test_replayAfterRestart(self) -> None:
        """
        A request answered before the restart is replayed after it (the
        session's requests are read when a request for it comes), and a
        create too; another body under the same id is still a conflict.
        """
        sid = self.sids[0]
        body = {"requestId": "rn-0", "title": "renamed 0"}
        first = self.host.ok("PATCH", f"/sessions/{sid}", body)
        created = self.host.h.call("POST", "/sessions", {"requestId": "create-0",
                                                         "title": "number 0"})
        self.host.h.restart()
        registry = self.host.h.api.registry
        self.assertFalse(registry.sessions[sid].awake)
        again = self.host.ok("PATCH", f"/sessions/{sid}", body)
        self.assertEqual(again, {**first, "replayed": True})
        code, frame = self.host.h.call("POST", "/sessions", {"requestId": "create-0",
                                                             "title": "number 0"})
        self.assertEqual((code, frame), (200, {**created[1], "replayed": True}))
        code, frame = self.host.h.call("PATCH", f"/sessions/{sid}",
                                       {"requestId": "rn-0", "title": "other"})
        self.assertEqual((code, frame["code"]), (409, "request_id_conflict"))
        code, frame = self.host.h.call("POST", "/sessions", {"requestId": "create-0"})
        self.assertEqual((code, frame["code"]), (409, "request_id_conflict"))

    def test_leaseLapsesWhileDormant(self) -> None:
        """
        A dormant session's lapsed lease is no longer shown, and is written
        once in its log (the session woken in its turn for it, then dormant
        again), as an awake one's would be.
        """
        for sid in self.sids:
            self.host.ok("POST", f"/sessions/{sid}/claim", {"requestId": "short", "ttlMs": 5000})
        self.host.h.restart()
        registry = self.host.h.api.registry
        self.host.h.clock.advance(6)
        for sid in self.sids:
            events = self.host.ok("GET", f"/sessions/{sid}/events?since=0")["value"]["events"]
            self.assertEqual([e["type"] for e in events].count("lease.expired"), 1)
            self.assertEqual(events[-1]["type"], "lease.expired")
            self.assertFalse(registry.sessions[sid].awake)
        self.assertEqual([s["lease"] for s in self.host.ok("GET", "/sessions")["value"]["sessions"]],
                         [None] * 3)
        self.host.h.restart()
        self.host.h.clock.advance(60)
        for sid in self.sids:
            events = self.host.ok("GET", f"/sessions/{sid}/events?since=0")["value"]["events"]
            self.assertEqual([e["type"] for e in events].count("lease.expired"), 1)

    def test_fewAwake(self) -> None:
        """
        Past the most sessions awake at once, the least recently woken go
        dormant (their logs closed).
        """
        self.patch(_registry, "MAX_AWAKE", 2)
        self.host.h.restart()
        registry = self.host.h.api.registry
        for sid in self.sids:
            self.host.ok("GET", f"/sessions/{sid}")
        self.assertEqual([registry.sessions[sid].awake for sid in self.sids], [False, True, True])

    def test_openCommandsReadBack(self) -> None:
        """
        A session with a command left open is read back whole at start, its
        command reported interrupted, and then it goes dormant.
        """
        sid = self.sids[0]
        self.host.ok("POST", f"/sessions/{sid}/commands",
                     {"requestId": "open", "type": "prompt", "text": "still going"})
        self.host.h.restart()
        session = self.host.h.api.registry.sessions[sid]
        self.assertFalse(session.awake)
        self.assertEqual(session.findCommand("open").status.value, "interrupted")

    def test_idleSessionsSleep(self) -> None:
        """
        A session woken goes dormant again once nothing happened in it for
        a while; one in use stays awake.
        """
        self.host.h.restart()
        registry = self.host.h.api.registry
        quiet, busy = (registry.sessions[sid] for sid in self.sids[:2])
        quiet.wake()
        busy.wake()
        for _ in range(int(DORMANT_AFTER_SECONDS // SWEEP_SECONDS)):
            self.host.ok("PATCH", f"/sessions/{busy.sessionId}", {"title": "again"})
            self.host.h.clock.advance(SWEEP_SECONDS)
        self.assertEqual((quiet.awake, busy.awake), (False, True))
        self.assertIsNotNone(currentDigest(quiet.directory))


    def test_digestKeptUpWhileAwake(self) -> None:
        """
        An awake session's digest is brought up to date at the next sweep
        (when no command is under way): a host that dies after it reads no
        log of that session at start.
        """
        self.host.h.restart()
        sid = self.sids[0]
        self.host.ok("PATCH", f"/sessions/{sid}", {"title": "awake"})
        session = self.host.h.api.registry.sessions[sid]
        self.assertIsNone(currentDigest(session.directory))
        self.host.h.clock.advance(SWEEP_SECONDS)
        self.assertTrue(session.awake)
        self.assertIsNotNone(currentDigest(session.directory))
        truth = self.host.seen([sid])
        opened = self.countOpens()
        self.host.kill()
        self.host.h = Harness(self, self.host.h.root)
        self.assertEqual(opened, [])
        self.assertEqual(self.host.seen([sid]), truth)


class DigestByTheWriterTests(SynchronousTestCase):
    """
    On a real host a digest is written by the data directory's writer, a
    second later at most (its syncs off the reactor's thread): the sweep
    and a sleep only hand it over.  A host that dies before it is written
    reads the logs at its next start.
    """

    def setUp(self) -> None:
        self.later = Clock()
        self.host = Host(self, writer=lambda: GroupWriter(clock=self.later))
        [self.sid] = self.host.busy(1)
        self.host.h.restart()
        self.later.advance(1)
        self.directory = self.host.h.root / "sessions" / self.sid
        self.assertIsNotNone(currentDigest(self.directory))
        self.host.ok("PATCH", f"/sessions/{self.sid}", {"requestId": "r", "title": "moved on"})
        self.assertIsNone(currentDigest(self.directory))
        self.written = spyOn(self, _dormancy, "writeDigest")

    def test_sweepHandsItOver(self) -> None:
        """
        The sweep writes no digest itself; the writer writes it in its time.
        """
        session = self.host.h.api.registry.sessions[self.sid]
        self.host.h.clock.advance(SWEEP_SECONDS)
        self.assertTrue(session.awake)
        self.assertEqual(self.written, [])
        self.assertIsNone(currentDigest(self.directory))
        self.later.advance(1)
        self.assertEqual(self.written, [self.directory])
        self.assertIsNotNone(currentDigest(self.directory))

    def test_asleepBeforeItIsWritten(self) -> None:
        """
        A quiet session goes dormant at the sweep with its digest still
        waiting for the writer; a host that dies then reads its logs back
        at the next start, and serves the same session.
        """
        truth = self.host.seen([self.sid])
        session = self.host.h.api.registry.sessions[self.sid]
        for _ in range(int(DORMANT_AFTER_SECONDS // SWEEP_SECONDS) + 1):
            self.host.h.clock.advance(SWEEP_SECONDS)
        self.assertFalse(session.awake)
        self.assertEqual(self.written, [])
        self.host.kill()
        opened = spyOn(self, _journal, "openLogs")
        self.host.h = Harness(self, self.host.h.root)
        self.assertEqual(opened, [self.directory])
        self.assertEqual(self.host.seen([self.sid]), truth)

    def test_notHandedOver(self) -> None:
        """
        A writer that cannot take the digest (its batch broke): the session
        says so in the log, and stays as it was.
        """
        writer = self.host.h.api.registry.dataDir.writer
        self.patch(writer, "runner", lambda batch: fail(OSError(errno.EIO, "the writer is gone")))
        said: list[str] = []
        observer = cast(ILogObserver, lambda event: said.append(formatEvent(event)))
        globalLogPublisher.addObserver(observer)
        self.addCleanup(globalLogPublisher.removeObserver, observer)
        self.host.h.clock.advance(SWEEP_SECONDS)
        self.assertIn(f"Session {self.sid}: its digest was not written ([Errno 5] the writer is gone); "
                      "the next start reads its logs", said)
        self.assertEqual(self.written, [])
        self.assertTrue(self.host.h.api.registry.sessions[self.sid].awake)

    def test_deleteDropsTheDigestWaiting(self) -> None:
        """
        A delete within the writer's second after a sweep: the digest
        waiting is not written, neither where the folder was nor in the
        trash, and nothing is logged as failed.
        """
        self.host.h.clock.advance(SWEEP_SECONDS)
        self.host.ok("DELETE", f"/sessions/{self.sid}")
        self.later.advance(2)
        self.assertEqual(self.written, [])
        self.assertFalse(self.directory.exists())
        self.assertEqual(self.flushLoggedErrors(), [])


class StaleDigestTests(SynchronousTestCase):
    """
    The logs always win: a digest the logs moved past (a host cut between a
    write and the next digest, or while the digest was written) is derived
    again from them.
    """

    def setUp(self) -> None:
        self.root = Path(self.mktemp())
        self.root.mkdir()
        self.host = Host(self, self.root)
        [self.sid] = self.host.busy(1)
        self.host.h.restart()

    def write(self) -> dict[str, Any]:
        """
        Requests after the digest: the session wakes and its logs move on.
        """
        self.host.ok("PATCH", f"/sessions/{self.sid}", {"requestId": "late", "title": "late"})
        self.host.ok("POST", f"/sessions/{self.sid}/commands",
                     {"requestId": "pol-late", "type": "set_room_policy", "policy": "observe"})
        return self.host.seen([self.sid])

    def test_cutAfterTheLog(self) -> None:
        """
        A host killed after writing (its digest not rewritten) shows the
        log's truth after a restart, and the digest is rewritten.
        """
        truth = self.write()
        self.assertIsNone(currentDigest(self.root / "sessions" / self.sid))
        self.host.kill()
        self.host.h = Harness(self, self.root)
        self.assertEqual(self.host.seen([self.sid]), truth)
        digest = currentDigest(self.root / "sessions" / self.sid)
        assert digest is not None
        self.assertEqual((digest.title, digest.roomPolicy), ("late", "observe"))

    def test_cutWhileWritingTheDigest(self) -> None:
        """
        A host killed, or a machine cut off, at any sync of the digest's
        write (at the start that reads the stale session back) shows the
        log's truth after the next restart, with a current digest and no
        temporary file left.
        """
        truth = self.write()
        self.host.kill()
        template = Path(self.mktemp())
        shutil.copytree(self.root, template)

        def start(mode: str, k: int | None) -> tuple[Path, CrashFiles, bool]:
            root = Path(self.mktemp())
            shutil.copytree(template, root)
            files = CrashFiles(root, mode)
            files.install(self.patch)
            self.addCleanup(files.uninstall)
            files.arm(k)
            try:
                self.host.h = Harness(self, root)
            except Crash:
                return root, files, True
            self.host.h.stop()
            return root, files, False

        for mode in ("kill", "power"):
            _, uncut, crashed = start(mode, None)
            self.assertEqual((uncut.syncs, crashed), (2, False))  # the temporary file, its folder
            for k in range(1, uncut.syncs + 1):
                root, files, crashed = start(mode, k)
                self.assertTrue(crashed, (mode, k))
                files.kill()
                files.revive()
                self.flushLoggedErrors(Crash)
                self.host.h = Harness(self, root)
                self.assertEqual(self.host.seen([self.sid]), truth, (mode, k))
                self.assertIsNotNone(currentDigest(root / "sessions" / self.sid))
                for directory, _, names in os.walk(root / "sessions"):
                    self.assertEqual([n for n in names if n.endswith(".tmp")], [], directory)
                self.host.h.stop()
