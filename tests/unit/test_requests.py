"""
Tests for L{vehicle.session._requests}: a request's fingerprint and the
idempotency rule (a retry replays, another body on the same requestId is a
conflict), the record that remembers a request, the refusal of a request the
disk would not take, and a session's two logs (spec, "Idempotency"; issue
10, section 2).
"""

from __future__ import annotations

import errno
import gc
import hashlib
import json
import os
from pathlib import Path

from twisted.trial.unittest import SynchronousTestCase

from vehicle.errors import VehicleError
from vehicle.protocol import toJSON, toObject
from vehicle.session import _requests
from vehicle.session._requests import (
    ROUTE_OF,
    Answering,
    fingerprint,
    openLogs,
    remembered,
    replayed,
    requestRecord,
    storageError,
)
from vehicle.session._values import Caller, isoTimestamp
from vehicle.store import CorruptLog, OsFiles, useFiles

from tests.support._hints import assertAnnotationsResolve
from tests.support.descriptors import openDescriptors


BODY = {"requestId": "r1", "type": "prompt", "text": "hello", "options": {"b": 1, "a": [2, 3]}}
#: The same body as a client might send it again: its keys in another order.
REORDERED = json.loads('{"options": {"a": [2, 3], "b": 1}, "text": "hello", "type": "prompt", '
                       '"requestId": "r1"}')


class FingerprintTests(SynchronousTestCase):
    """
    A fingerprint is the same for the same request whatever the order of its
    JSON keys, and differs for another body or another route.
    """

    def test_keyOrderDoesNotMatter(self) -> None:
        self.assertEqual(list(REORDERED), ["options", "text", "type", "requestId"])
        self.assertEqual(fingerprint(REORDERED), fingerprint(BODY))
        self.assertEqual(fingerprint(REORDERED, "commands"), fingerprint(BODY, "commands"))

    def test_canonicalDigest(self) -> None:
        """
        The digest is SHA-256 of the compact JSON with sorted keys; with a
        route, of the route and the body together.
        """
        canonical = json.dumps(BODY, sort_keys=True, separators=(",", ":"))
        self.assertEqual(fingerprint(BODY), hashlib.sha256(canonical.encode()).hexdigest())
        self.assertEqual(
            fingerprint(BODY, "claim"), fingerprint({"route": "claim", "body": BODY})
        )

    def test_routeAndBodyCount(self) -> None:
        self.assertNotEqual(fingerprint(BODY, "commands"), fingerprint(BODY))
        self.assertNotEqual(fingerprint(BODY, "commands"), fingerprint(BODY, "chimes"))
        self.assertNotEqual(fingerprint(BODY), fingerprint({**BODY, "text": "hello!"}))

    def test_routes(self) -> None:
        """
        Every kind of remembered request names the route it came by.
        """
        self.assertEqual(ROUTE_OF["command"], "commands")
        self.assertEqual(ROUTE_OF["chime"], "chimes")
        self.assertEqual(ROUTE_OF["create"], "create")


class ReplayedTests(SynchronousTestCase):
    """
    L{replayed}: nothing known goes on; the same body replays; another body
    or another route is C{request_id_conflict}.
    """

    frame = {"type": "result", "ok": True, "value": {"commandId": "c1"}}

    def known(self) -> tuple[str, bytes]:
        return remembered(fingerprint(BODY, "commands"), self.frame)

    def test_unknown(self) -> None:
        self.assertIsNone(replayed(None, "r1", BODY, "commands"))

    def test_sameBodyReplays(self) -> None:
        self.assertEqual(replayed(self.known(), "r1", BODY, "commands"), self.frame)

    def test_reorderedRetryReplays(self) -> None:
        self.assertEqual(replayed(self.known(), "r1", REORDERED, "commands"), self.frame)

    def test_eachReplayItsOwn(self) -> None:
        """
        Each replay is a frame of its own: changing one changes neither what
        is remembered nor the next replay.
        """
        known = self.known()
        first = replayed(known, "r1", BODY, "commands")
        assert first is not None
        first["value"] = {"commandId": "changed"}
        self.assertEqual(replayed(known, "r1", BODY, "commands"), self.frame)

    def test_rememberedOutOfTheCollectorsReach(self) -> None:
        """
        What a session remembers of each request holds nothing the
        collector walks: a full pass over tens of thousands of them was a
        pause of tens of milliseconds on the reactor's thread.
        """
        known = remembered(fingerprint(BODY, "commands"), self.frame)
        gc.collect()
        self.assertFalse(gc.is_tracked(known))
        self.assertEqual([part for part in known if gc.is_tracked(part)], [])

    def test_otherBodyConflicts(self) -> None:
        error = self.assertRaises(
            VehicleError, replayed, self.known(), "r1", {**BODY, "text": "bye"}, "commands"
        )
        self.assertEqual(error.code, "request_id_conflict")
        self.assertEqual(error.details, {"requestId": "r1"})
        self.assertIn("'r1'", error.message)

    def test_otherRouteConflicts(self) -> None:
        error = self.assertRaises(VehicleError, replayed, self.known(), "r1", BODY, "chimes")
        self.assertEqual(error.code, "request_id_conflict")


class RecordTests(SynchronousTestCase):
    """
    L{requestRecord} keeps who sent a request, its fingerprint on its route,
    its body, its answer and anything extra.
    """

    def test_record(self) -> None:
        caller = Caller(principal="alice", clientId="tab-1", role="owner")
        frame = {"type": "result", "ok": True}
        record = toObject(requestRecord(
            "command", caller, "r1", BODY, frame, 1_796_000_000.25,
            cursor=4, effects=[("command.accepted", {})],
        ))
        self.assertEqual(record, {
            "kind": "command",
            "requestId": "r1",
            "principal": "alice",
            "clientId": "tab-1",
            "fingerprint": fingerprint(BODY, "commands"),
            "at": isoTimestamp(1_796_000_000.25),
            "body": BODY,
            "frame": frame,
            "cursor": 4,
            "effects": [["command.accepted", {}]],
        })
        self.assertEqual(
            replayed(remembered(record["fingerprint"], frame), "r1", REORDERED, "commands"), frame
        )


class StorageErrorTests(SynchronousTestCase):
    """
    A request the disk would not take is C{storage_unavailable}, with the
    error's words and its errno's name.
    """

    def test_noSpace(self) -> None:
        error = storageError(OSError(errno.ENOSPC, "No space left on device"))
        self.assertEqual(error.code, "storage_unavailable")
        self.assertEqual(error.details, {"errno": "ENOSPC"})
        self.assertIn("its disk (No space left on device); try again later", error.message)

    def test_noErrno(self) -> None:
        """
        An error without an errno or words is named as it is.
        """
        error = storageError(OSError("the log is closed"))
        self.assertEqual(error.details, {"errno": None})
        self.assertIn("its disk (the log is closed); try again later", error.message)


class OpenLogsTests(SynchronousTestCase):
    """
    L{openLogs} opens (or makes) a session's event log and request log and
    reads both back; when the second cannot be opened, the first is closed.
    """

    def test_makesAndReadsBack(self) -> None:
        directory = Path(self.mktemp())
        directory.mkdir()
        events, eventRecords, commands, records = openLogs(directory)
        self.assertEqual((eventRecords, records), ([], []))
        event = {"seq": 1, "type": "session.created", "timestamp": isoTimestamp(1),
                 "sessionId": "s1", "data": {}}
        record = {"kind": "command", "requestId": "r1", "principal": "alice",
                  "clientId": "tab-1", "body": {}, "frame": {}}
        events.append(event)
        commands.append(record)
        events.close()
        commands.close()
        events, eventRecords, commands, records = openLogs(directory)
        self.addCleanup(events.close)
        self.addCleanup(commands.close)
        self.assertEqual(toJSON(eventRecords), [event])
        self.assertEqual(toJSON(records), [record])
        self.assertEqual(events.path, directory / "events.jsonl")
        self.assertEqual(commands.path, directory / "commands.jsonl")

    def test_folderSyncedUnlessAside(self) -> None:
        """
        The logs made in a served folder are durable at once (the folder is
        synced as each is made); in a folder built aside (C{syncFolder}
        false) nothing is synced.
        """
        synced: list[str] = []

        class Noting(OsFiles):
            def fsync(self, fd: int) -> None:
                synced.append(os.readlink(f"/proc/self/fd/{fd}"))
                super().fsync(fd)

        self.addCleanup(useFiles, useFiles(Noting()))
        for how, expected in (({"syncFolder": False}, 0), ({}, 2)):
            directory = Path(self.mktemp()).absolute()
            directory.mkdir()
            del synced[:]
            events, _, commands, _ = openLogs(directory, **how)
            events.close()
            commands.close()
            self.assertEqual(synced, [str(directory)] * expected)

    def test_eventsAreNumbered(self) -> None:
        """
        The event log is read with its sequence numbers checked.
        """
        directory = Path(self.mktemp())
        directory.mkdir()
        (directory / "events.jsonl").write_text('{"seq":1}\n{"seq":3}\n')
        self.assertRaises(CorruptLog, openLogs, directory)

    def test_secondFailsFirstIsClosed(self) -> None:
        directory = Path(self.mktemp())
        directory.mkdir()
        (directory / "commands.jsonl").mkdir()
        before = openDescriptors()
        self.assertRaises(OSError, openLogs, directory)
        self.assertEqual(openDescriptors(), before)
        self.assertTrue((directory / "events.jsonl").exists())


    def test_aLineNotARecordClosesBoth(self) -> None:
        """
        A line of the request log that is not a record is refused, and
        neither log is left open.
        """
        directory = Path(self.mktemp())
        directory.mkdir()
        (directory / "commands.jsonl").write_text('{"kind":"dance"}\n')
        before = openDescriptors()
        self.assertRaises(ValueError, openLogs, directory)
        self.assertEqual(openDescriptors(), before)


class AnsweringTests(SynchronousTestCase):
    """
    L{Answering}: a retry that comes while its request is being made
    durable waits for it; once settled, every waiter goes on.
    """

    def test_nothingBegun(self) -> None:
        answering = Answering()
        self.assertFalse(answering)
        self.assertIsNone(answering.waiter("r1"))
        answering.settled("r1")
        self.assertFalse(answering)

    def test_waitersGoOnWhenSettled(self) -> None:
        answering = Answering()
        answering.begin("r1")
        answering.begin("r2")
        self.assertTrue(answering)
        first, second, other = answering.waiter("r1"), answering.waiter("r1"), answering.waiter("r2")
        assert first is not None and second is not None and other is not None
        self.assertNoResult(first)
        answering.settled("r1")
        self.assertIsNone(self.successResultOf(first))
        self.assertIsNone(self.successResultOf(second))
        self.assertNoResult(other)
        self.assertIsNone(answering.waiter("r1"))
        self.assertTrue(answering)
        answering.settled("r2")
        self.assertIsNone(self.successResultOf(other))
        self.assertFalse(answering)

    def test_begunAgainKeepsItsWaiters(self) -> None:
        """
        A request held (a branch being published) whose step then begins:
        who waited already waits on, until it is settled.
        """
        answering = Answering()
        answering.begin("r1")
        waiter = answering.waiter("r1")
        assert waiter is not None
        answering.begin("r1")
        self.assertNoResult(waiter)
        answering.settled("r1")
        self.assertIsNone(self.successResultOf(waiter))


class AnnotationTests(SynchronousTestCase):
    def test_resolve(self) -> None:
        assertAnnotationsResolve(self, _requests)
