"""
Tests for L{vehicle.public._ledger} on its own: each kind of row, what it
counts and for whom, its idempotency key, what a restart reads back, and a
disk that refuses a row (spec, "Public sessions"; issue 10, sections 1 and
2).  The replay of each kind of row is in L{tests.unit.test_credit_holds}.
"""

from __future__ import annotations

import errno
import json
import os
import stat
from pathlib import Path
from typing import Any

from twisted.internet.task import Clock
from twisted.logger import LogLevel, capturedLogs, formatEvent
from twisted.trial.unittest import SynchronousTestCase

from vehicle.errors import VehicleError
from vehicle.public import Ledger, TurnAsk, _ledger
from vehicle.public._ledger import holdKey, turnKey, utcDay
from vehicle.store import OsFiles, useFiles

from tests.support._hints import assertAnnotationsResolve
from tests.support.descriptors import openDescriptors


#: 2026-12-01T12:00:00Z.
NOON = 1_796_126_400.0
TODAY = "2026-12-01"


class Layer(OsFiles):
    """
    The real file system, counting the opens of one file (those that
    succeed), refusing writes
    while C{full} and failing the next close with C{closeFails}.
    """

    def __init__(self, watched: Path) -> None:
        self.watched = watched
        self.opens = 0
        self.full = False
        self.closeFails = False

    def open(self, path: Any, flags: int, mode: int = 0o777) -> int:
        fd = super().open(path, flags, mode)
        if Path(path) == self.watched:
            self.opens += 1
        return fd

    def write(self, fd: int, data: Any) -> int:
        if self.full:
            raise OSError(errno.ENOSPC, "No space left on device")
        return super().write(fd, data)

    def close(self, fd: int) -> None:
        super().close(fd)
        if self.closeFails:
            self.closeFails = False
            raise OSError(errno.EIO, "Input/output error")


class LedgerTestCase(SynchronousTestCase):
    def setUp(self) -> None:
        self.clock = Clock()
        self.clock.advance(NOON)
        self.path = Path(self.mktemp()) / "public" / "ledger.jsonl"

    def ledger(self) -> Ledger:
        ledger = Ledger(path=self.path, clock=self.clock)
        ledger.open()
        self.addCleanup(ledger.close)
        return ledger

    def reopened(self, ledger: Ledger) -> Ledger:
        ledger.close()
        return self.ledger()

    def rows(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.path.read_text().splitlines()]

    def layer(self) -> Layer:
        layer = Layer(self.path)
        previous = useFiles(layer)
        self.addCleanup(useFiles, previous)
        return layer


class RowTests(LedgerTestCase):
    """
    Each kind of row as written, and what it counts.
    """

    def test_keys(self) -> None:
        self.assertEqual(holdKey("s1", "c1"), "hold:s1:c1")
        self.assertEqual(turnKey("s1", "c1"), "turn:s1:c1")
        self.assertEqual(utcDay(NOON), TODAY)
        self.assertEqual(utcDay(NOON - 12 * 3600 - 1), "2026-11-30")

    def test_grant(self) -> None:
        ledger = self.ledger()
        self.assertTrue(ledger.grant("p", 2.0, "purchase", "pay-1", note="card"))
        self.assertTrue(ledger.grant("p", 0.5, "operator", "op-1"))
        self.assertFalse(ledger.grant("p", 2.0, "purchase", "pay-1"))
        self.assertEqual(self.rows(), [
            {"type": "grant", "principal": "p", "amountUsd": 2.0, "source": "purchase",
             "key": "pay-1", "note": "card", "day": TODAY, "at": "2026-12-01T12:00:00.000Z"},
            {"type": "grant", "principal": "p", "amountUsd": 0.5, "source": "operator",
             "key": "op-1", "day": TODAY, "at": "2026-12-01T12:00:00.000Z"},
        ])
        self.assertEqual(ledger.balance("p"), 2.5)
        self.assertEqual(ledger.grants, {"pay-1": ("p", 2.0), "op-1": ("p", 0.5)})
        self.assertEqual(self.reopened(ledger).grants, {"pay-1": ("p", 2.0), "op-1": ("p", 0.5)})

    def test_debit(self) -> None:
        ledger = self.ledger()
        ledger.grant("p", 1.0, "operator", "op-1")
        self.assertTrue(ledger.debit("p", 0.25, "run:s1:1", "s1"))
        self.assertTrue(ledger.debit("q", 0.5, "run:s2:1", "s2"))
        self.assertFalse(ledger.debit("p", 0.25, "run:s1:1", "s1"))
        self.assertEqual(self.rows()[1], {
            "type": "debit", "principal": "p", "amountUsd": 0.25, "key": "run:s1:1",
            "session": "s1", "day": TODAY, "at": "2026-12-01T12:00:00.000Z",
        })
        self.assertEqual((ledger.balance("p"), ledger.balance("q")), (0.75, -0.5))
        self.assertEqual(ledger.poolToday(), 0.75)
        again = self.reopened(ledger)
        self.assertEqual((again.balance("p"), again.balance("q"), again.poolToday()),
                         (0.75, -0.5, 0.75))
        self.clock.advance(24 * 3600)
        self.assertEqual(again.poolToday(), 0.0)

    def test_rowBytes(self) -> None:
        """
        Each kind of row is written in the bytes every host has written
        (its keys in their order, compact, ASCII), so that files of older
        and newer hosts read alike.
        """
        ledger = self.ledger()
        ledger.grant("p", 2, "operator", "op-1", note="n")
        ledger.debit("p", 0.25, "run:s1:1", "s1")
        ledger.turn("p", "s1", "pool")
        ledger.hold("p", 0.01, "s1", "c1")
        ledger.release("hold:s1:c1", "completed")
        self.successResultOf(ledger.reserveTurn(TurnAsk(
            principal="p", session="s1", command="c2", funding="credit", day=TODAY,
            turnsPerDay=9, sessionMaxTurns=9, holdUsd=0.5, dailyCapUsd=9.0,
        )))
        self.successResultOf(ledger.voidTurn("s1", "c2"))
        self.successResultOf(ledger.chargeRun("p", 0.1, "run:s1:2", "s1", ["hold:s1:c2"]))
        ledger.grant("p", 1.0, "operator", "op-2")
        self.successResultOf(ledger.reserveTurn(TurnAsk(
            principal="p", session="s1", command="c3", funding="credit", day=TODAY,
            turnsPerDay=9, sessionMaxTurns=9, holdUsd=0.5, dailyCapUsd=9.0,
        )))
        self.successResultOf(ledger.chargeRun("p", 0.1, "run:s1:3", "s1", ["hold:s1:c3"]))
        stamp = f'"day":"{TODAY}","at":"2026-12-01T12:00:00.000Z"'
        self.assertEqual(self.path.read_text().splitlines(), [
            '{"type":"grant","principal":"p","amountUsd":2,"source":"operator","key":"op-1",'
            f'"note":"n",{stamp}}}',
            '{"type":"debit","principal":"p","amountUsd":0.25,"key":"run:s1:1","session":"s1",'
            f'{stamp}}}',
            f'{{"type":"turn","principal":"p","session":"s1","funding":"pool",{stamp}}}',
            '{"type":"hold","principal":"p","amountUsd":0.01,"key":"hold:s1:c1","session":"s1",'
            f'"command":"c1",{stamp}}}',
            '{"type":"release","principal":"p","hold":"hold:s1:c1","key":"release:s1:c1",'
            f'"session":"s1","reason":"completed",{stamp}}}',
            '{"type":"turn","principal":"p","session":"s1","funding":"credit","key":"turn:s1:c2",'
            f'"command":"c2","holdUsd":0.5,{stamp}}}',
            '{"type":"void","principal":"p","session":"s1","turn":"turn:s1:c2","command":"c2",'
            f'{stamp}}}',
            '{"type":"debit","principal":"p","amountUsd":0.1,"key":"run:s1:2","session":"s1",'
            f'{stamp}}}',
            '{"type":"grant","principal":"p","amountUsd":1.0,"source":"operator","key":"op-2",'
            f'{stamp}}}',
            '{"type":"turn","principal":"p","session":"s1","funding":"credit","key":"turn:s1:c3",'
            f'"command":"c3","holdUsd":0.5,{stamp}}}',
            '{"type":"debit","principal":"p","amountUsd":0.1,"key":"run:s1:3","session":"s1",'
            f'"holds":["hold:s1:c3"],{stamp}}}',
        ])

    def test_balanceIsRoundedToNanodollars(self) -> None:
        ledger = self.ledger()
        ledger.grant("p", 1.0, "operator", "op-1")
        ledger.debit("p", 0.0000000012, "run:s1:1", "s1")
        self.assertEqual(ledger.balance("p"), 0.999999999)
        ledger.grant("q", 0.1, "operator", "op-2")
        ledger.grant("q", 0.2, "operator", "op-3")
        self.assertEqual(ledger.balance("q"), 0.3)

    def test_turns(self) -> None:
        """
        A turn named by its command counts once; an unnamed one each time;
        one counted late counts on the day it was accepted.
        """
        ledger = self.ledger()
        self.assertTrue(ledger.turn("p", "s1", "credit", command="c1"))
        self.assertFalse(ledger.turn("p", "s1", "credit", command="c1"))
        self.assertTrue(ledger.turn("p", "s1", "credit", command="c2"))
        self.assertTrue(ledger.turn("p", "s2", "pool"))
        self.assertTrue(ledger.turn("p", "s2", "pool"))
        self.assertTrue(ledger.turn("p", "s3", "pool", command="c1", day="2026-11-30"))
        self.assertTrue(ledger.turn("q", "", "pool"))
        self.assertEqual(ledger.turnsToday("p"), 4)
        self.assertEqual(ledger.turns[("p", "2026-11-30")], 1)
        self.assertEqual(dict(ledger.sessionTurns), {"s1": 2, "s2": 2, "s3": 1})
        self.assertEqual(ledger.keys, {"turn:s1:c1", "turn:s1:c2", "turn:s3:c1"})
        rows = self.rows()
        self.assertEqual(rows[0], {"type": "turn", "principal": "p", "session": "s1",
                                   "funding": "credit", "key": "turn:s1:c1", "day": TODAY,
                                   "at": "2026-12-01T12:00:00.000Z"})
        self.assertNotIn("key", rows[2])
        self.assertEqual(rows[4]["day"], "2026-11-30")
        again = self.reopened(ledger)
        self.assertEqual((again.turnsToday("p"), again.turnsToday("q")), (4, 1))
        self.assertEqual(dict(again.sessionTurns), {"s1": 2, "s2": 2, "s3": 1})
        self.assertFalse(again.turn("p", "s1", "credit", command="c2"))

    def test_holds(self) -> None:
        ledger = self.ledger()
        self.assertTrue(ledger.hold("p", 0.01, "s1", "c1"))
        self.assertFalse(ledger.hold("p", 0.01, "s1", "c1"))
        self.assertTrue(ledger.hold("p", 0.02, "s2", "c1"))
        self.assertTrue(ledger.hold("q", 0.04, "s1", "c2"))
        self.assertEqual(self.rows()[0], {
            "type": "hold", "principal": "p", "amountUsd": 0.01, "key": "hold:s1:c1",
            "session": "s1", "command": "c1", "day": TODAY, "at": "2026-12-01T12:00:00.000Z",
        })
        self.assertEqual((ledger.held("p"), ledger.held("q"), ledger.held()), (0.03, 0.04, 0.07))
        self.assertEqual(ledger.held("nobody"), 0.0)
        self.assertEqual(ledger.holdsOf("s1"), ["hold:s1:c1", "hold:s1:c2"])
        self.assertEqual(ledger.holdsOf("s3"), [])
        self.assertTrue(ledger.release("hold:s1:c1", "completed"))
        self.assertFalse(ledger.release("hold:s1:c1", "completed"))
        self.assertFalse(ledger.release("hold:s9:c9", "completed"))
        self.assertEqual(self.rows()[3], {
            "type": "release", "principal": "p", "hold": "hold:s1:c1", "key": "release:s1:c1",
            "session": "s1", "reason": "completed", "day": TODAY,
            "at": "2026-12-01T12:00:00.000Z",
        })
        self.assertEqual(len(self.rows()), 4)
        self.assertEqual((ledger.held("p"), ledger.held()), (0.02, 0.06))
        self.assertEqual(ledger.holdsOf("s1"), ["hold:s1:c2"])
        again = self.reopened(ledger)
        self.assertEqual((again.held("p"), again.held("q"), again.held()), (0.02, 0.04, 0.06))
        self.assertEqual((again.holdsOf("s1"), again.holdsOf("s2")), (["hold:s1:c2"], ["hold:s2:c1"]))
        self.assertFalse(again.release("hold:s1:c1", "completed"))

    def test_heldIsRoundedToNanodollars(self) -> None:
        ledger = self.ledger()
        self.assertIsInstance(ledger.held(), float)
        ledger.hold("p", 0.0000000012, "s1", "c1")
        self.assertEqual(ledger.held(), 0.000000001)

    def test_rowsOfOtherKindsCountNothing(self) -> None:
        """
        A row of a kind this ledger does not know (a later version's) is
        kept but counts for nothing.
        """
        self.path.parent.mkdir(parents=True)
        kinds = ("adjust", "credit", "grants", "hold-over", "refund", "total", "void")
        hold = {"type": "hold", "principal": "p", "amountUsd": 0.5, "key": "hold:s1:c1",
                "session": "s1", "command": "c1", "day": TODAY}
        self.path.write_text(json.dumps(hold) + "\n" + "".join(
            json.dumps({"type": kind, "principal": "p", "amountUsd": 1.0, "key": kind,
                        "hold": "hold:s1:c1", "session": "s1", "day": TODAY}) + "\n"
            for kind in kinds
        ))
        ledger = self.ledger()
        self.assertEqual((ledger.balance("p"), ledger.turnsToday("p"), ledger.poolToday(),
                          dict(ledger.sessionTurns), ledger.holds),
                         (0.0, 0, 0.0, {}, {"hold:s1:c1": ("p", 0.5, "s1")}))
        self.assertEqual(ledger.keys, {"hold:s1:c1", *kinds})


class FileTests(LedgerTestCase):
    """
    The ledger's file: made private, opened once, closed.
    """

    def test_privateDirectory(self) -> None:
        """
        The ledger's directory (and any missing above it) is made for the
        host alone, whatever the umask.
        """
        self.path = Path(self.mktemp()) / "deep" / "public" / "ledger.jsonl"
        umask = os.umask(0)
        try:
            self.ledger()
        finally:
            os.umask(umask)
        self.assertEqual(stat.S_IMODE(self.path.parent.stat().st_mode), 0o700)
        self.assertEqual(stat.S_IMODE(self.path.stat().st_mode), 0o600)

    def test_openedOnce(self) -> None:
        """
        A healthy ledger opens its file once, however many rows it writes.
        """
        layer = self.layer()
        ledger = self.ledger()
        ledger.grant("p", 1.0, "operator", "op-1")
        ledger.turn("p", "s1", "credit")
        self.assertEqual(layer.opens, 1)

    def test_close(self) -> None:
        before = openDescriptors()
        ledger = self.ledger()
        self.assertEqual(openDescriptors(), before + 1)
        ledger.close()
        self.assertEqual(openDescriptors(), before)
        ledger.close()
        self.assertRaises(AssertionError, ledger.grant, "p", 1.0, "operator", "op-1")

    def test_identity(self) -> None:
        """
        A ledger is itself: two on the same file are not equal, and each
        can be kept in a set.
        """
        one, other = Ledger(path=self.path, clock=self.clock), Ledger(path=self.path, clock=self.clock)
        self.assertNotEqual(one, other)
        self.assertEqual(len({one, other, one}), 2)


class FullDiskTests(LedgerTestCase):
    """
    A grant the disk refuses counts for nothing and is
    C{storage_unavailable}.  A row that follows an effect already durable
    elsewhere (a turn's count and hold, a run's debit and release) counts in
    memory all the same and says so in the log.  Either way the log is
    opened afresh once, before the next row.
    """

    def test_grantRefusedThenTaken(self) -> None:
        layer = self.layer()
        ledger = self.ledger()
        ledger.grant("p", 1.0, "operator", "op-1")
        layer.full = True
        error = self.assertRaises(VehicleError, ledger.grant, "p", 2.0, "purchase", "pay-1")
        self.assertEqual((error.code, error.details), ("storage_unavailable", {"errno": "ENOSPC"}))
        self.assertEqual((ledger.balance("p"), "pay-1" in ledger.keys), (1.0, False))
        self.assertRaises(VehicleError, ledger.grant, "p", 2.0, "purchase", "pay-1")
        layer.full = False
        self.assertTrue(ledger.grant("p", 2.0, "purchase", "pay-1"))
        self.assertTrue(ledger.turn("p", "s1", "credit"))
        self.assertEqual(ledger.balance("p"), 3.0)
        # Opened at start, and afresh before each row after a refusal.
        self.assertEqual(layer.opens, 3)
        self.assertEqual([r.get("key") for r in self.rows()], ["op-1", "pay-1", None])
        self.assertEqual(self.reopened(ledger).balance("p"), 3.0)

    def test_afterTheFactCountsInMemory(self) -> None:
        layer = self.layer()
        ledger = self.ledger()
        ledger.grant("p", 1.0, "operator", "op-1")
        layer.full = True
        with capturedLogs() as events:
            self.assertTrue(ledger.turn("p", "s1", "credit", command="c1"))
            self.assertTrue(ledger.hold("p", 0.25, "s1", "c1"))
            self.assertTrue(ledger.hold("p", 0.5, "s1", "c2"))
            self.assertTrue(ledger.debit("p", 0.125, "run:s1:1", "s1"))
            self.assertTrue(ledger.release("hold:s1:c1", "completed"))
        self.assertEqual(
            [(e["kind"], e["error"], e["log_level"]) for e in events],
            [(kind, "No space left on device", LogLevel.warn)
             for kind in ("turn", "hold", "hold", "debit", "release")],
        )
        self.assertIn("counts until the host restarts", formatEvent(events[0]))
        self.assertEqual((ledger.turnsToday("p"), ledger.held("p"), ledger.balance("p")),
                         (1, 0.5, 0.875))
        self.assertFalse(ledger.turn("p", "s1", "credit", command="c1"))
        self.assertFalse(ledger.debit("p", 0.125, "run:s1:1", "s1"))
        layer.full = False
        self.assertTrue(ledger.grant("p", 2.0, "purchase", "pay-1"))
        # At start, then before each of the five rows after the first refusal.
        self.assertEqual(layer.opens, 6)
        self.assertEqual([r["type"] for r in self.rows()], ["grant", "grant"])
        again = self.reopened(ledger)
        self.assertEqual((again.turnsToday("p"), again.held("p"), again.balance("p")),
                         (0, 0.0, 3.0))

    def test_closeFailsToo(self) -> None:
        """
        A failed close of the refused log does not stop the next row.
        """
        layer = self.layer()
        ledger = self.ledger()
        layer.full = True
        self.assertRaises(VehicleError, ledger.grant, "p", 2.0, "purchase", "pay-1")
        layer.full = False
        layer.closeFails = True
        self.assertTrue(ledger.grant("p", 2.0, "purchase", "pay-1"))
        self.assertFalse(layer.closeFails)
        self.assertEqual(self.reopened(ledger).balance("p"), 2.0)


class AnnotationTests(SynchronousTestCase):
    def test_resolve(self) -> None:
        assertAnnotationsResolve(self, _ledger)
