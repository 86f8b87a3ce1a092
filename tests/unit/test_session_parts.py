"""
The parts the session and the body were split into, each on its own: the
lease's renewal rule, the observers' fan-out, the pump's backlog and the
live body's run table.
"""

from __future__ import annotations

import errno
from pathlib import Path
from typing import Any

from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from vehicle.body._live import LiveBody
from vehicle.body._pump import Pump
from vehicle.errors import VehicleError
from vehicle.protocol import Answer, Command, CommandType, Event, HeldChime, Holder, RoomPolicySet
from vehicle.session import Caller, Lease, Observers, RunSettled
from vehicle.session._journal import Journal
from vehicle.session._lease import leaseAfter, renewedByUse
from vehicle.session._room import Room
from vehicle.store import GroupWriter

from tests.support.batches import HeldBatches
from tests.support._crashfs import CrashFiles


def _event(kind: str, at: str, **data: Any) -> Event:
    return Event(type=kind, timestamp=at, sessionId="s1", data=data)


ALICE = {"principal": "alice", "clientId": "tab-1"}
ALICE_CALLER = Caller(principal="alice", clientId="tab-1", role="owner", graphId="g1")
LEASE = Lease(principal="alice", clientId="tab-1", ttlMs=60_000, claimedAt=0.0, renewedAt=0.0)


class LeaseRuleTests(SynchronousTestCase):
    """
    One renewal rule, for live events and the log read back alike.
    """

    def test_holderRenews(self) -> None:
        """
        An event of the holder's mutation renews the lease at its time.
        """
        renewed = renewedByUse(LEASE, _event("command.accepted", "2026-12-01T00:00:10.000Z", by=ALICE))
        self.assertIsNotNone(renewed)
        assert renewed is not None
        self.assertGreater(renewed.renewedAt, LEASE.renewedAt)

    def test_othersAndDeleteDoNot(self) -> None:
        """
        Another client's event, or a delete, renews nothing.
        """
        other = {"principal": "alice", "clientId": "tab-2"}
        at = "2026-12-01T00:00:10.000Z"
        self.assertIs(renewedByUse(LEASE, _event("command.accepted", at, by=other)), LEASE)
        self.assertIs(renewedByUse(LEASE, _event("session.deleted", at, by=ALICE)), LEASE)

    def test_releasedEndsIt(self) -> None:
        """
        The holder's release ends the lease in the log's reading.
        """
        after = leaseAfter(LEASE, _event("lease.released", "2026-12-01T00:00:10.000Z", **ALICE))
        self.assertIsNone(after)


class _Recorder:
    def __init__(self, fail: bool = False, part: dict[str, Any] | None = None) -> None:
        self.seen: list[str] = []
        self.fail = fail
        self.part = part

    def _note(self, what: str) -> None:
        self.seen.append(what)
        if self.fail:
            raise RuntimeError(what)

    def created(self, session: Any) -> None:
        self._note("created")

    def renamed(self, session: Any) -> None:
        self._note("renamed")

    def settled(self, session: Any, run: RunSettled) -> None:
        self._note("settled")

    def deleting(self, session: Any) -> dict[str, Any] | None:
        return self.part

    def deleted(self, session: Any) -> None:
        self._note("deleted")


class ObserversTests(SynchronousTestCase):
    """
    Every observer is told, whatever another one does.
    """

    def test_failingObserverDoesNotStopTheOthers(self) -> None:
        """
        An observer that raises is logged; the next one is told all the same.
        """
        bad, good = _Recorder(fail=True), _Recorder()
        observers = Observers()
        observers.add(bad)
        observers.add(good)
        for tell in (observers.created, observers.renamed, observers.deleted):
            tell(object())  # type: ignore[arg-type]
        observers.settled(object(), RunSettled(seq=3, aborted=False))  # type: ignore[arg-type]
        self.assertEqual(good.seen, ["created", "renamed", "deleted", "settled"])
        self.assertEqual(len(self.flushLoggedErrors(RuntimeError)), 4)

    def test_deletingGathersParts(self) -> None:
        """
        The delete answer gets each observer's part, by its key.
        """
        observers = Observers()
        observers.add(_Recorder(part={"mirror": {"documentId": "d"}}))
        observers.add(_Recorder(part=None))
        self.assertEqual(observers.deleting(object()), {"mirror": {"documentId": "d"}})  # type: ignore[arg-type]


def _command(commandId: str, text: str | None = "hi", kind: CommandType = CommandType.prompt,
             ) -> Command:
    return Command(commandId=commandId, requestId=commandId, type=kind, acceptedAt="t",
                   updatedAt="t", by=Holder(principal="alice", clientId="tab-1"), text=text)


class PumpTests(SynchronousTestCase):
    """
    The backlog: what can still be taken back, and what goes first.
    """

    def test_deliveringIsNotWaiting(self) -> None:
        """
        The command being delivered is pi's already: only those behind it
        wait, and an abort goes right behind it.
        """
        pump = Pump(clock=Clock(), idleSeconds=1)
        one, two = _command("one"), _command("two")
        pump.add(one)
        pump.add(two)
        self.assertEqual(pump.waiting(), [one, two])
        self.assertIs(pump.next(), one)
        self.assertEqual(pump.waiting(), [two])
        abort = _command("a", None, CommandType.abort)
        pump.add(abort, first=True)
        self.assertEqual(pump.backlog, [one, abort, two])
        pump.deliveredOne(one)
        self.assertEqual((pump.delivering, pump.backlog), (None, [abort, two]))
        self.assertIs(pump.next(), abort)

    def test_idleFires(self) -> None:
        """
        The idle timer fires once after the idle time, and cancelling it
        stops it.
        """
        clock = Clock()
        pump = Pump(clock=clock, idleSeconds=5)
        fired: list[int] = []
        pump.armIdle(lambda: fired.append(1))
        clock.advance(5)
        self.assertEqual(fired, [1])
        pump.armIdle(lambda: fired.append(2))
        pump.cancelIdle()
        clock.advance(10)
        self.assertEqual(fired, [1])


class LiveBodyTests(SynchronousTestCase):
    """
    The run table of one pi process.
    """

    def _body(self) -> LiveBody:
        return LiveBody(protocol=None, plan=None, paths=None, translator=None)  # type: ignore[arg-type]

    def test_deliveredJoinsTheRun(self) -> None:
        """
        pi's user message with a queued command's rendered text delivers
        that command into the run; the run's end forgets its texts.
        """
        body = self._body()
        body.startRun(_command("p1"))
        queued = _command("f1")
        body.enqueue(queued)
        body.render(queued, "more\n\n[open in Garden: d]")
        self.assertIsNone(body.delivered("more"))
        self.assertEqual(body.delivered("more\n\n[open in Garden: d]"), queued)
        self.assertEqual(body.queued, [])
        self.assertEqual([c.commandId for c in body.endRun()], ["p1", "f1"])
        self.assertEqual(body.rendered, {})
        self.assertIsNone(body.run)

    def test_queueTakenBack(self) -> None:
        """
        What pi's queue holds as the host knows it, taken back or forgotten
        only by the body's own methods.
        """
        body = self._body()
        one, two = _command("f1"), _command("f2")
        body.enqueue(one)
        body.enqueue(two)
        body.render(one, "one")
        self.assertTrue(body.isQueued(one))
        body.forget(one)
        self.assertEqual((body.queued, body.rendered), ([two], {}))
        self.assertEqual(body.takeQueued(), [two])
        self.assertEqual(body.queued, [])
        body.unqueue(two)  # already out: nothing to do

    def test_abortAndTurns(self) -> None:
        body = self._body()
        body.requestAbort()
        self.assertTrue(body.abortRequested)
        body.abortSettled()
        self.assertFalse(body.abortRequested)
        body.startRun()
        self.assertIsNone(body.meter(1))
        body.turnStarted()
        self.assertIsNone(body.meter(1))
        body.runRefused()
        self.assertIsNone(body.run)

    def test_meter(self) -> None:
        """
        The proxy forwards only during a run, up to the turn budget.
        """
        body = self._body()
        self.assertEqual(body.meter(2), "no run is under way")
        body.startRun()
        self.assertEqual([body.meter(2), body.meter(2)], [None, None])
        self.assertEqual(body.meter(2), "this run's turn budget is spent")


class RoomTests(SynchronousTestCase):
    """
    The room holds chimes for the driver; only a pending one can be resolved.
    """

    def test_heldThenResolved(self) -> None:
        """
        A held chime waits (with its words) until it is accepted; then it is
        no longer pending.
        """
        room = Room()
        room.hold(HeldChime(chimeId="c1", author="bob", delivery="steer", textBytes=5,
                            by=Holder(principal="bob", clientId="b"), receivedAt="t",
                            status="pending", text="hello"))
        chime = room.pending("c1")
        assert chime is not None
        self.assertEqual(chime.text, "hello")
        self.assertEqual([c.chimeId for c in room.waiting()], ["c1"])
        room.resolve("c1", "accepted")
        self.assertIsNone(room.pending("c1"))
        self.assertEqual(room.waiting(), [])
        self.assertIsNone(room.pending("nobody"))


class _Owner:
    def __init__(self) -> None:
        self.seqs: list[int] = []
        self.derived: list[Any] = []
        self.forgot = 0

    def told(self, event: Event) -> None:
        assert event.seq is not None
        self.seqs.append(event.seq)

    def forgetting(self) -> None:
        self.forgot += 1

    def restored(self, derived: Any) -> None:
        self.derived.append(derived)


class JournalTests(SynchronousTestCase):
    """
    The journal writes a request's record and its events, and reads them
    back as they were.
    """

    def setUp(self) -> None:
        self.directory = Path(self.mktemp())
        self.directory.mkdir()
        self.clock = Clock()
        self.clock.advance(1_000_000)

    def open(self) -> tuple[Journal, list[Any], list[Any]]:
        journal, events, requests = Journal.open(
            "s1", self.directory, self.clock, None, GroupWriter()
        )
        self.addCleanup(journal.close)
        return journal, events, requests

    def test_closedAtOnceWhenNothingIsOnItsWay(self) -> None:
        """
        A journal with nothing on its way through the writer closes its
        logs at once, though the writer's batches have not run (a start
        reading back many sessions holds no descriptor for them); with a
        step on its way, its logs close once the writer has written it.
        """
        held = HeldBatches()
        journal, _, _ = Journal.open("s1", self.directory, self.clock, None,
                                     GroupWriter(runner=held))
        logs = [journal._events, journal._records]
        journal.close()
        self.assertEqual([log.closed for log in logs if log is not None], [True, True])
        busy, _, _ = Journal.open("s1", self.directory, self.clock, None, GroupWriter(runner=held))
        busy.emit("room.policy", {"policy": "mute"})
        logs = [busy._events, busy._records]
        busy.close()
        self.assertEqual([log.closed for log in logs if log is not None], [False, False])
        held.releaseAll()
        self.assertEqual([log.closed for log in logs if log is not None], [True, True])

    def test_commitThenReadBack(self) -> None:
        """
        A committed request is remembered for replay and its events are
        numbered from 1 and told to the owner; a journal opened afresh on
        the same folder restores the same history and requests.
        """
        journal, _, _ = self.open()
        owner = _Owner()
        journal.owner = owner
        answer = Answer(type="room.policy", value=RoomPolicySet(policy="mute"))
        sent = self.successResultOf(journal.commit(
            "policy", ALICE_CALLER, "r1", {"policy": "mute"}, answer,
            [("room.policy", {"policy": "mute"}), ("run.started", {"runId": "run-7"})],
        ))
        self.assertEqual(sent, {"type": "room.policy", "value": {"policy": "mute"}})
        self.assertEqual(owner.seqs, [1, 2])
        self.assertEqual(journal.cursor, 2)
        self.assertEqual(journal.replay("r1", {"policy": "mute"}, "commands"), sent)
        self.assertEqual(journal.runsSoFar(), 7)
        journal.close()
        again, events, requests = self.open()
        reader = _Owner()
        again.owner = reader
        again.restore(events, requests)
        written, _ = journal.eventsAfter(0, 10)
        self.assertEqual([(e.seq, e.type) for e in written],
                         [(1, "room.policy"), (2, "run.started")])
        self.assertEqual(again.eventsAfter(0, 10), (written, False))
        self.assertEqual((again.cursor, again.runsSoFar()), (2, 7))
        self.assertEqual(again.requests, journal.requests)
        self.assertEqual(reader.derived[0].room.policy, "mute")

    def test_closedKeepsNothing(self) -> None:
        """
        After close, late news is dropped: not written, not told.
        """
        journal, _, _ = self.open()
        owner = _Owner()
        journal.owner = owner
        journal.close()
        journal.emit("mirror.written", {})
        self.assertEqual((journal.cursor, journal.eventsAfter(0, 10)[0], owner.seqs), (0, [], []))

    def test_refusedWriteReadsBack(self) -> None:
        """
        A write the disk refuses answers C{storage_unavailable}, and the
        journal reads its logs back: the owner forgets, then is restored.
        """
        journal, _, _ = self.open()
        owner = _Owner()
        journal.owner = owner
        layer = CrashFiles(self.directory)
        layer.install(self.patch)
        self.addCleanup(layer.uninstall)
        layer.fail("write", errno.ENOSPC)
        answer = Answer(type="room.policy", value=RoomPolicySet(policy="mute"))
        error = self.assertRaises(
            VehicleError, journal.commit, "policy", ALICE_CALLER, "r1", {"policy": "mute"},
            answer, [("room.policy", {"policy": "mute"})],
        )
        self.assertEqual(error.code, "storage_unavailable")
        self.assertEqual((owner.forgot, len(owner.derived)), (1, 1))
        self.assertEqual((journal.requests, journal.cursor, owner.seqs), ({}, 0, []))
        self.flushLoggedErrors()
