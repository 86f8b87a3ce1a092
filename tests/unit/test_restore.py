"""
Tests for L{vehicle.session._restore}: a session read back from its two logs
after a restart.  The events a cut host owed are numbered on from the log's
last; every piece of state (commands and their status, chimes, the lease,
the title, the preview, the room's policy, the remembered requests) is
derived from the logs alone (issue 10, sections 1 and 2).
"""

from __future__ import annotations

import json
from typing import Any

from twisted.trial.unittest import SynchronousTestCase

from vehicle.protocol import Holder, toObject
from vehicle.session import _restore
from vehicle.session._requests import eventOf, fingerprint, recordOf, remembered
from vehicle.session._restore import Derived
from vehicle.session._values import Lease, parseTimestamp

from tests.support._hints import assertAnnotationsResolve


SID = "s-1"
NOW = "2026-12-01T12:00:00.000Z"
ALICE = {"principal": "alice", "clientId": "tab-1"}


def disk(value: Any) -> Any:
    """
    C{value} as read back from a log: through JSON, so no string in it is a
    constant of this module.
    """
    return json.loads(json.dumps(value))


def derive(
    log: list[dict[str, Any]], requests: list[dict[str, Any]], title: str | None
) -> Derived:
    """
    L{_restore.derive} of logs as they lie on disk (read as the journal
    reads them).
    """
    return _restore.derive(
        [eventOf(e) for e in log], [recordOf(r) for r in requests], title
    )


def owedEvents(
    log: list[dict[str, Any]], requests: list[dict[str, Any]], sessionId: str, now: str
) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """
    L{_restore.owedEvents} of logs as they lie on disk, each owed event and
    its record as the journal would write them.
    """
    return [
        (toObject(event), toObject(record))
        for event, record in _restore.owedEvents(
            [eventOf(e) for e in log], [recordOf(r) for r in requests], sessionId, now
        )
    ]


def at(second: int) -> str:
    return f"2026-12-01T10:00:{second:02d}.000Z"


def event(seq: int, kind: str, data: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"seq": seq, "type": kind, "timestamp": at(seq), "sessionId": SID, "data": data or {}}


def events(*kinds: tuple[str, dict[str, Any]], start: int = 1) -> list[dict[str, Any]]:
    return disk([event(start + i, kind, data) for i, (kind, data) in enumerate(kinds)])


def filler(count: int) -> list[dict[str, Any]]:
    """
    C{count} events of the log before the ones a test looks at.
    """
    return events(*[("body.notice", {"n": n}) for n in range(count)])


def record(
    kind: str, requestId: Any, body: dict[str, Any], frame: dict[str, Any] | None = None,
    route: str = "commands", **extra: Any,
) -> dict[str, Any]:
    return {
        "kind": kind, "requestId": requestId, **ALICE,
        "fingerprint": fingerprint(body, route), "at": at(30), "body": body,
        "frame": frame or {"type": "result", "ok": True}, **extra,
    }


def commandRecord(commandId: str, text: str, **extra: Any) -> dict[str, Any]:
    body = {"requestId": commandId, "type": "prompt", "text": text}
    command = {"commandId": commandId, "requestId": commandId, "type": "prompt",
               "status": "accepted", "acceptedAt": at(30), "by": ALICE, "text": text}
    return record("command", commandId, body, command=command, **extra)


#: A chime's record as its answer holds it (but for its id and status).
CHIME = {"author": "Bea", "delivery": "follow_up", "textBytes": 9, "by": ALICE,
         "receivedAt": at(20)}


def chimeRecord(chimeId: str, status: str, text: str = "look here") -> dict[str, Any]:
    body = {"requestId": "rq-" + chimeId, "author": "Bea", "text": text}
    chime = {**CHIME, "chimeId": chimeId, "status": status}
    frame = {"type": "chime.accepted", "ok": True, "value": {"chime": chime}}
    return record("chime", "rq-" + chimeId, body, frame, route="chimes")


class OwedEventsTests(SynchronousTestCase):
    """
    A request's record names the events it implies and the log's seq before
    them (its cursor): those the log does not hold yet are owed, numbered on
    from the log's last.
    """

    effects = [["command.accepted", {"commandId": "c1"}],
               ["queue.updated", {"depth": 1}],
               ["command.delivered", {"commandId": "c1"}]]

    def owed(self, log: list[dict[str, Any]], *records: dict[str, Any]) -> list[tuple[int, str]]:
        found = owedEvents(log, disk(list(records)), SID, NOW)
        for owedEvent, owing in found:
            self.assertEqual(owedEvent["sessionId"], SID)
            self.assertIn(owing, disk(list(records)))
        return [(e["seq"], e["type"]) for e, _ in found]

    def test_nothingOwed(self) -> None:
        self.assertEqual(owedEvents([], [], SID, NOW), [])
        log = filler(4) + events(*map(tuple, self.effects), start=5)  # type: ignore[arg-type]
        self.assertEqual(self.owed(log, record("command", "r1", {}, cursor=4,
                                               effects=self.effects)), [])

    def test_cutAfterTheRecord(self) -> None:
        """
        The host was cut right after the record: every event is owed, with
        the record's time and data.
        """
        log = filler(3)
        found = owedEvents(log, disk([record("command", "r1", {}, cursor=3,
                                             effects=self.effects)]), SID, NOW)
        self.assertEqual([e for e, _ in found], [
            {"seq": 4, "type": "command.accepted", "timestamp": at(30), "sessionId": SID,
             "data": {"commandId": "c1"}},
            {"seq": 5, "type": "queue.updated", "timestamp": at(30), "sessionId": SID,
             "data": {"depth": 1}},
            {"seq": 6, "type": "command.delivered", "timestamp": at(30), "sessionId": SID,
             "data": {"commandId": "c1"}},
        ])
        self.assertEqual([r["requestId"] for _, r in found], ["r1", "r1", "r1"])

    def test_cutMidway(self) -> None:
        """
        The host was cut after some of the events: only the rest is owed.
        """
        self.assertEqual(
            self.owed(filler(4), record("command", "r1", {}, cursor=3, effects=self.effects)),
            [(5, "queue.updated"), (6, "command.delivered")],
        )
        effects = self.effects + [["run.started", {}]]
        self.assertEqual(
            self.owed(filler(5), record("command", "r1", {}, cursor=2, effects=effects)),
            [(6, "run.started")],
        )
        self.assertEqual(
            self.owed(filler(7), record("command", "r1", {}, cursor=5, effects=effects)),
            [(8, "command.delivered"), (9, "run.started")],
        )

    def test_freshLog(self) -> None:
        """
        A session cut after its first record owes from seq 1.
        """
        self.assertEqual(
            self.owed([], record("command", "r1", {}, cursor=0, effects=self.effects[:1])),
            [(1, "command.accepted")],
        )

    def test_cursorPastTheEnd(self) -> None:
        """
        A log that ends before a record's cursor owes all of its events,
        numbered on from the log's last (never a gap).
        """
        self.assertEqual(
            self.owed(filler(2), record("command", "r1", {}, cursor=4, effects=self.effects)),
            [(3, "command.accepted"), (4, "queue.updated"), (5, "command.delivered")],
        )

    def test_recordsWithoutEffectsAreSkipped(self) -> None:
        """
        An older record (no cursor or no effects) owes nothing, and those
        after it are still read.
        """
        older = record("create", "r0", {})
        halfOld = record("command", "r1", {}, effects=self.effects)
        noList = record("command", "r2", {}, cursor=3, effects={"x": 1})
        self.assertEqual(
            self.owed(filler(3), older, halfOld, noList,
                      record("command", "r3", {}, cursor=3, effects=self.effects[:1])),
            [(4, "command.accepted")],
        )

    def test_twoRecordsCut(self) -> None:
        first = record("command", "r1", {}, cursor=3, effects=self.effects[:2])
        second = record("command", "r2", {}, cursor=5, effects=self.effects[2:])
        self.assertEqual(
            self.owed(filler(3), first, second),
            [(4, "command.accepted"), (5, "queue.updated"), (6, "command.delivered")],
        )

    def test_recordWithoutTime(self) -> None:
        cut = record("command", "r1", {}, cursor=0, effects=self.effects[:1])
        del cut["at"]
        [(owed, _)] = owedEvents([], disk([cut]), SID, NOW)
        self.assertEqual(owed["timestamp"], NOW)


class DeriveTests(SynchronousTestCase):
    """
    L{derive}: what the logs say a session is.
    """

    def test_empty(self) -> None:
        self.assertEqual(derive([], [], "Title").title, "Title")
        derived = derive([], [], None)
        self.assertEqual(
            (derived.requests, derived.commands, derived.room.chimes, derived.lease,
             derived.title, derived.preview, derived.previewInherited, derived.room.policy),
            ({}, {}, {}, None, None, None, False, "suggest"),
        )

    def test_completedCommand(self) -> None:
        """
        A command's status after a restart is its last event's.
        """
        log = events(
            ("command.accepted", {"commandId": "c1", "status": "accepted"}),
            ("command.delivered", {"commandId": "c1"}),
            ("command.completed", {"commandId": "c1", "disposition": "handled"}),
            ("command.accepted", {"commandId": "c2"}),
            ("command.completed", {"commandId": "other"}),
        )
        derived = derive(log, disk([commandRecord("c1", "first"), commandRecord("c2", "then")]),
                         None)
        self.assertEqual(derived.commands["c1"].status, "completed")
        self.assertEqual(derived.commands["c1"].disposition, "handled")
        self.assertEqual(derived.commands["c1"].updatedAt, at(3))
        self.assertEqual(derived.commands["c2"].status, "accepted")
        self.assertNotIn("other", derived.commands)

    def test_olderCommandRecord(self) -> None:
        """
        A record that keeps only its body still makes its command.
        """
        older = record("command", "r1", {"requestId": "r1", "type": "prompt", "text": "hi"})
        derived = derive([], disk([older]), None)
        self.assertEqual(derived.commands["r1"].status, "accepted")
        self.assertEqual(derived.commands["r1"].by, Holder(**ALICE))

    def test_preview(self) -> None:
        """
        The first words said are the preview; later ones do not move it.
        """
        derived = derive([], disk([commandRecord("c1", "first  words"),
                                   commandRecord("c2", "second")]), None)
        self.assertEqual((derived.preview, derived.previewInherited), ("first words", False))

    def test_branchInheritsItsSourcesPreview(self) -> None:
        created = events(("session.created", {"preview": "from the source"}),
                         ("session.created", {"preview": "not this"}))
        derived = derive(created, [], None)
        self.assertEqual((derived.preview, derived.previewInherited), ("from the source", True))
        derived = derive(events(("session.created", {})), [], None)
        self.assertEqual((derived.preview, derived.previewInherited), (None, False))

    def test_ownWordsBeatTheInheritedPreview(self) -> None:
        derived = derive(events(("session.created", {"preview": "from the source"})),
                         disk([commandRecord("c1", "mine")]), None)
        self.assertEqual((derived.preview, derived.previewInherited), ("mine", False))

    def test_roomPolicy(self) -> None:
        """
        The room's policy after a restart is the last one set.
        """
        log = events(("room.policy", {"policy": "co-drive"}), ("room.policy", {"policy": "mute"}))
        self.assertEqual(derive(log, [], None).room.policy, "mute")
        log = events(("room.policy", {"policy": "observe"}), ("room.policy", {}))
        self.assertEqual(derive(log, [], None).room.policy, "observe")

    def test_renamed(self) -> None:
        log = events(("session.renamed", {"title": "One"}), ("session.renamed", {"title": "Two"}),
                     ("session.revived", {"by": ALICE}), ("body.materialized", {}))
        self.assertEqual(derive(log, [], "Base").title, "Two")
        self.assertEqual(derive(events(("body.notice", {})), [], "Base").title, "Base")

    def test_eventWithoutData(self) -> None:
        log = events(("session.renamed", {"title": "One"}))
        log.append({"seq": 2, "type": "session.renamed", "timestamp": at(2), "sessionId": SID,
                    "data": None})
        self.assertIsNone(derive(log, [], "Base").title)

    def test_lease(self) -> None:
        log = events(("lease.claimed", {**ALICE, "ttlMs": 60_000}))
        self.assertEqual(
            derive(log, [], None).lease,
            Lease(principal="alice", clientId="tab-1", ttlMs=60_000,
                  claimedAt=parseTimestamp(at(1)), renewedAt=parseTimestamp(at(1))),
        )

    def test_pendingChimes(self) -> None:
        """
        A chime held for the driver is pending after a restart, with its
        words; one resolved since is not pending.
        """
        requests = disk([chimeRecord("ch1", "pending", "look here"),
                         chimeRecord("ch2", "rejected"),
                         chimeRecord("ch3", "pending", "and here")])
        log = events(("chime.received", {"chimeId": "ch1", "author": "Bea"}),
                     ("chime.received", {"chimeId": "ch3", "author": "Bea"}),
                     ("chime.resolved", {"chimeId": "ch3", "status": "accepted"}),
                     ("chime.resolved", {"chimeId": "ch2", "status": "rejected"}))
        derived = derive(log, requests, None)
        self.assertEqual(sorted(derived.room.chimes), ["ch1", "ch3"])
        self.assertEqual(toObject(derived.room.chimes["ch1"]), {**CHIME, "chimeId": "ch1",
                                                                 "status": "pending",
                                                                 "text": "look here"})
        self.assertEqual(derived.room.chimes["ch3"].status, "accepted")

    def test_chimeWithoutAFrame(self) -> None:
        """
        A chime record whose frame holds no chime (refused) adds nothing.
        """
        bare = record("chime", "rq", {"text": "x"}, {"type": "error", "ok": False}, "chimes")
        empty = record("chime", "rq2", {"text": "x"}, {"type": "r", "value": {}}, "chimes")
        noValue = dict(record("chime", "rq3", {"text": "x"}, route="chimes"), frame=None)
        self.assertEqual(derive([], disk([bare, empty, noValue]), None).room.chimes, {})

    def test_requests(self) -> None:
        """
        The session's own requests are remembered with their fingerprint and
        frame; the one that made it (a create, a branch), an older record
        without a fingerprint, or one without a requestId are not.
        """
        command = commandRecord("c1", "hi")
        claim = record("claim", "r-claim", {"ttlMs": 1}, {"type": "lease"}, route="claim")
        create = record("create", "r-create", {})
        branched = record("branched", "r-branched", {})
        older = record("command", "r-old", {"text": "x"})
        del older["fingerprint"]
        anonymous = record("rename", None, {"title": "t"})
        derived = derive([], disk([command, claim, create, branched, older, anonymous]), None)
        self.assertEqual(derived.requests, {
            "c1": remembered(command["fingerprint"], command["frame"]),
            "r-claim": remembered(claim["fingerprint"], {"type": "lease"}),
        })


class NewestTests(SynchronousTestCase):
    """
    What a session knows of its log without reading it (its cursor, its
    last time, its trash name, its highest run) is the log's newest
    event's, and its highest C{run-<n>}.
    """

    def test_nothing(self) -> None:
        derived = derive([], [], None)
        self.assertEqual(
            (derived.cursor, derived.lastAt, derived.deletedAs, derived.runs, derived.origin,
             derived.branches),
            (0, None, None, 0, None, frozenset()),
        )

    def test_newest(self) -> None:
        log = events(("run.started", {"runId": "run-3"}), ("run.started", {"runId": "run-12"}),
                     ("run.started", {"runId": "run-5"}),
                     ("session.deleted", {"trashedAs": "s-1.trashed"}))
        derived = derive(log, [], None)
        self.assertEqual((derived.cursor, derived.lastAt, derived.deletedAs, derived.runs),
                         (4, at(4), "s-1.trashed", 12))
        self.assertIsNone(derive(log[:3], [], None).deletedAs)

    def test_newestWithoutSeq(self) -> None:
        """
        A log whose newest line lost its seq counts from nothing: the
        events its requests owe are numbered from 1.
        """
        log = disk([{k: v for k, v in event(1, "body.notice").items() if k != "seq"}])
        self.assertEqual(derive(log, [], None).cursor, 0)
        owing = record("command", "r1", {}, cursor=0,
                       effects=[["command.accepted", {"commandId": "c1"}]])
        [(owed, _)] = owedEvents(log, disk([owing]), SID, NOW)
        self.assertEqual(owed["seq"], 1)

    def test_runNumber(self) -> None:
        self.assertEqual(
            _restore.runNumber(eventOf(event(1, "run.started", {"runId": "run-12"}))), 12
        )
        for kind, data in [("run.ended", {"runId": "run-12"}), ("tool.started", {"runId": "run-12"}),
                           ("run.started", {}), ("run.started", {"runId": "run-x"}),
                           ("run.started", {"runId": "run-x1"}),
                           ("run.started", {"runId": "walk-3"}), ("run.started", {"runId": 4})]:
            self.assertEqual(_restore.runNumber(eventOf(event(1, kind, data))), 0, (kind, data))

    def test_deletedAs(self) -> None:
        self.assertEqual(
            _restore.deletedAs(eventOf(event(1, "session.deleted", {"trashedAs": "t"}))), "t"
        )
        for kind in ("session.renamed", "lease.claimed"):
            self.assertIsNone(_restore.deletedAs(eventOf(event(1, kind, {"trashedAs": "t"}))))
        self.assertIsNone(_restore.deletedAs(eventOf(event(1, "session.deleted", {}))))


class OriginTests(SynchronousTestCase):
    """
    The request that made the session (the first create or branched
    record) and the branches it made (its branch records' ids).
    """

    def test_createdThenBranched(self) -> None:
        requests = disk([
            record("command", "r-cmd", {"text": "x"}),
            record("create", "r-create", {}, route="create"),
            record("branch", "b1", {}),
            record("branched", "r-branched", {}),
            record("branch", None, {}),
            record("branch", "b2", {}),
        ])
        derived = derive([], requests, None)
        assert derived.origin is not None
        self.assertEqual(derived.origin.requestId, "r-create")
        self.assertEqual(derived.branches, frozenset({"b1", "b2"}))

    def test_branched(self) -> None:
        derived = derive([], disk([record("branched", "r-branched", {})]), None)
        assert derived.origin is not None
        self.assertEqual(derived.origin.requestId, "r-branched")

    def test_pendingChimeInAShapeNotHeld(self) -> None:
        """
        A pending chime whose answer holds it in a shape the host cannot
        read is not held, and the rest is read.
        """
        odd = chimeRecord("ch1", "pending")
        odd["frame"]["value"]["chime"]["delivery"] = "by pigeon"
        derived = derive([], disk([odd, chimeRecord("ch2", "pending")]), None)
        self.assertEqual(sorted(derived.room.chimes), ["ch2"])


class AnnotationTests(SynchronousTestCase):
    def test_resolve(self) -> None:
        assertAnnotationsResolve(self, _restore)
