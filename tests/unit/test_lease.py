"""
Tests for L{vehicle.session._lease} on a clock: the renewal rule, the lease
read back from the log, and the keeper's claim, takeover, release, renewal by
use and expiry (spec, "The lease"; issue 10, section 2).
"""

from __future__ import annotations

import json
from typing import Any, Callable

from twisted.internet.interfaces import IDelayedCall
from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from vehicle.errors import VehicleError
from vehicle.protocol import Event, Holder, toJSON, toObject
from vehicle.session import _lease
from vehicle.session._lease import Claimed, LeaseKeeper, holderOf, leaseAfter, renewedByUse
from vehicle.session._values import Caller, Lease, isoTimestamp, parseTimestamp

from tests.support._hints import assertAnnotationsResolve


def fresh(value: Any) -> Any:
    """
    C{value} as another request or the log would give it: equal, but no
    string in it is the same object as this module's constants.
    """
    return json.loads(json.dumps(toJSON(value)))


START = 1_796_000_000.0
TTL = 60_000
ALICE = Caller(principal="alice", clientId="tab-1", role="owner")
ALICE2 = Caller(principal=fresh("alice"), clientId="tab-2", role="owner")
BOB = Caller(principal="bob", clientId=fresh("tab-1"), role="editor")


def held(caller: Caller) -> dict[str, Any]:
    """
    The holder C{caller} is, as an event's data says it.
    """
    return toObject(caller.holder())


def event(kind: str, seconds: float, data: Any) -> Event:
    return Event(type=kind, timestamp=isoTimestamp(seconds), sessionId="s1", data=fresh(data))


def lease(caller: Caller = ALICE, claimedAt: float = START, renewedAt: float = START,
          ttlMs: int = TTL) -> Lease:
    return Lease(principal=caller.principal, clientId=caller.clientId, ttlMs=ttlMs,
                 claimedAt=claimedAt, renewedAt=renewedAt)


class ReactorClock(Clock):
    """
    A clock that, like the reactor, refuses a negative delay, and stops a
    timer that would re-arm itself for ever.
    """

    armed = 0

    def callLater(
        self, delay: float, callable: Callable[..., object], *args: object, **kw: object
    ) -> IDelayedCall:
        assert delay >= 0, f"{delay} is not greater than or equal to 0 seconds"
        self.armed += 1
        assert self.armed < 100, "a timer re-arms itself without end"
        return super().callLater(delay, callable, *args, **kw)


class RenewalRuleTests(SynchronousTestCase):
    """
    L{renewedByUse}: an event of a mutation by the lease's exact holder
    renews the lease at the event's time; nothing else does.
    """

    def test_holderRenews(self) -> None:
        renewed = renewedByUse(lease(), event("command.accepted", START + 10, {"by": held(ALICE)}))
        self.assertEqual(renewed, lease(renewedAt=START + 10))

    def test_noLease(self) -> None:
        self.assertIsNone(renewedByUse(None, event("command.accepted", START, {"by": held(ALICE)})))

    def test_notByTheHolder(self) -> None:
        current = lease()
        aaron = {"principal": "aaron", "clientId": "tab-1"}
        for by in (held(ALICE2), held(BOB), aaron, {"principal": "alice"}, "alice", None):
            self.assertIs(
                renewedByUse(current, event("command.accepted", START + 10, {"by": by})), current
            )
        self.assertIs(renewedByUse(current, event("body.notice", START + 10, {})), current)

    def test_leaseEventsAndDeleteDoNot(self) -> None:
        current = lease()
        for kind in ("lease.claimed", "lease.renewed", "session.deleted"):
            self.assertIs(
                renewedByUse(current, event(kind, START + 10, {"by": held(ALICE), **held(ALICE)})),
                current,
            )


class LeaseAfterTests(SynchronousTestCase):
    """
    L{leaseAfter}: the lease as the log says, event by event.
    """

    def test_claimed(self) -> None:
        claimed = event("lease.claimed", START, {**held(ALICE), "ttlMs": TTL})
        self.assertEqual(leaseAfter(None, claimed), lease())
        # A claim after another's lease (its revocation came first) starts anew.
        later = event("lease.claimed", START + 5, {**held(ALICE2), "ttlMs": 1000})
        self.assertEqual(leaseAfter(lease(), later),
                         lease(ALICE2, claimedAt=START + 5, renewedAt=START + 5, ttlMs=1000))

    def test_renewed(self) -> None:
        renewed = event("lease.renewed", START + 7, {**held(ALICE), "ttlMs": 5000})
        self.assertEqual(leaseAfter(lease(), renewed), lease(renewedAt=START + 7, ttlMs=5000))
        # A renewal with nothing before it (an older log) starts there.
        self.assertEqual(leaseAfter(None, renewed),
                         lease(claimedAt=START + 7, renewedAt=START + 7, ttlMs=5000))

    def test_ended(self) -> None:
        for kind in ("lease.released", "lease.revoked", "lease.expired"):
            ended = event(kind, START + 3, {**held(ALICE), "reason": "x"})
            self.assertIsNone(leaseAfter(lease(), ended))
            self.assertIsNone(leaseAfter(None, ended))
            # The end of another client's lease leaves the present one.
            self.assertEqual(leaseAfter(lease(ALICE2), ended), lease(ALICE2))
            ended = event(kind, START + 3, {**held(ALICE2), "reason": "x"})
            self.assertEqual(leaseAfter(lease(), ended), lease())

    def test_partsMissing(self) -> None:
        """
        A claim or renewal that lacks any one of its holder's principal, its
        client or its TTL says nothing of the lease.
        """
        whole = {**held(ALICE), "ttlMs": TTL}
        for kind in ("lease.claimed", "lease.renewed"):
            for part in ("principal", "clientId", "ttlMs"):
                lacking = {k: v for k, v in whole.items() if k != part}
                self.assertEqual(leaseAfter(lease(ALICE2), event(kind, START + 3, lacking)),
                                 lease(ALICE2), (kind, part))
                self.assertIsNone(leaseAfter(None, event(kind, START + 3, lacking)), (kind, part))

    def test_useRenews(self) -> None:
        used = event("command.accepted", START + 9, {"by": held(ALICE)})
        self.assertEqual(leaseAfter(lease(), used), lease(renewedAt=START + 9))
        self.assertEqual(leaseAfter(lease(), event("body.notice", START + 9, {})), lease())

    def test_holderOf(self) -> None:
        self.assertEqual(holderOf(lease()), {"principal": "alice", "clientId": "tab-1"})


class KeeperTestCase(SynchronousTestCase):
    def setUp(self) -> None:
        self.clock = ReactorClock()
        self.clock.advance(START)
        self.emitted: list[tuple[str, dict[str, Any]]] = []
        self.keeper = LeaseKeeper(clock=self.clock, emit=lambda t, d: self.emitted.append((t, d)))

    def assertLapsesAt(self, when: float, caller: Caller = ALICE) -> None:
        """
        The lease lapses (its timer says so) at C{when} exactly, and not
        a moment before.
        """
        self.clock.advance(when - 0.001 - self.clock.seconds())
        self.assertEqual(self.emitted, [])
        self.clock.advance(0.001)
        self.assertEqual(self.emitted, [("lease.expired", {**held(caller), "reason": "ttl"})])
        self.assertEqual(self.timers(), [])

    def timers(self) -> list[float]:
        return [call.getTime() for call in self.clock.getDelayedCalls()]

    def claim(self, caller: Caller = ALICE, ttlMs: int = TTL,
              takeover: bool = False) -> tuple[dict[str, Any], list[tuple[str, dict[str, Any]]]]:
        return self.keeper.claimEffects(caller, ttlMs, takeover)


class ClaimTests(KeeperTestCase):
    """
    Claiming: a free lease, our own (renewed), another client's of the same
    principal with takeover; never another principal's.
    """

    def test_free(self) -> None:
        value, effects = self.claim()
        self.assertEqual(effects, [("lease.claimed", {**held(ALICE), "ttlMs": TTL})])
        self.assertEqual(value, Claimed(lease=lease().info(), tookOverFrom=None))
        self.assertEqual(self.keeper.current(), lease())
        self.assertEqual(self.timers(), [START + 60])
        self.assertEqual(self.emitted, [])

    def test_ours(self) -> None:
        self.claim()
        self.clock.advance(20)
        value, effects = self.claim(ttlMs=30_000)
        self.assertEqual(effects, [("lease.renewed", {**held(ALICE), "ttlMs": 30_000})])
        self.assertEqual(self.keeper.lease, lease(renewedAt=START + 20, ttlMs=30_000))
        self.assertEqual(value.tookOverFrom, None)
        self.assertEqual(self.timers(), [START + 50])

    def test_takeover(self) -> None:
        self.claim()
        self.clock.advance(5)
        value, effects = self.claim(ALICE2, takeover=True)
        self.assertEqual(effects, [
            ("lease.revoked", {**held(ALICE), "by": held(ALICE2), "reason": "takeover"}),
            ("lease.claimed", {**held(ALICE2), "ttlMs": TTL}),
        ])
        self.assertEqual(value.tookOverFrom, ALICE.holder())
        self.assertEqual(self.keeper.lease, lease(ALICE2, claimedAt=START + 5, renewedAt=START + 5))
        self.assertLapsesAt(START + 65, ALICE2)

    def test_heldWithoutTakeover(self) -> None:
        self.claim()
        error = self.assertRaises(VehicleError, self.claim, ALICE2)
        self.assertEqual(error.code, "lease_held")
        self.assertEqual(error.details, {"holder": toObject(lease().info()), "canTakeOver": True})
        self.assertIn("takeover: true", error.message)
        self.assertEqual(self.keeper.lease, lease())

    def test_anotherPrincipals(self) -> None:
        self.claim()
        error = self.assertRaises(VehicleError, self.claim, BOB, takeover=True)
        self.assertEqual(error.details, {"holder": toObject(lease().info()), "canTakeOver": False})
        self.assertEqual(error.message, "another client holds this session's lease")
        self.assertEqual(self.keeper.lease, lease())
        self.keeper.drop()
        self.claim(BOB)
        error = self.assertRaises(VehicleError, self.claim, ALICE, takeover=True)
        self.assertEqual(error.details, {"holder": toObject(lease(BOB).info()), "canTakeOver": False})
        self.assertEqual(self.keeper.lease, lease(BOB))

    def test_lapsedIsFree(self) -> None:
        """
        A lease past its time is retired when looked at, and free to claim.
        """
        self.claim()
        self.clock.rightNow += 61  # the timer has not run yet
        value, effects = self.claim(BOB)
        self.assertEqual(self.emitted, [("lease.expired", {**held(ALICE), "reason": "ttl"})])
        self.assertEqual(effects, [("lease.claimed", {**held(BOB), "ttlMs": TTL})])
        self.assertEqual(value.tookOverFrom, None)
        self.assertEqual(self.timers(), [START + 121])


class RequireTests(KeeperTestCase):
    """
    A mutation needs the exact lease.
    """

    def test_nobody(self) -> None:
        error = self.assertRaises(VehicleError, self.keeper.require, ALICE)
        self.assertEqual(error.code, "lease_required")

    def test_holder(self) -> None:
        self.claim()
        self.keeper.require(ALICE)

    def test_others(self) -> None:
        self.claim()
        error = self.assertRaises(VehicleError, self.keeper.require, ALICE2)
        self.assertEqual((error.code, error.details["canTakeOver"]), ("lease_held", True))
        error = self.assertRaises(VehicleError, self.keeper.require, BOB)
        self.assertEqual((error.code, error.details["canTakeOver"]), ("lease_held", False))
        self.keeper.drop()
        self.claim(BOB)
        error = self.assertRaises(VehicleError, self.keeper.require, ALICE)
        self.assertEqual((error.code, error.details["canTakeOver"]), ("lease_held", False))

    def test_lapsed(self) -> None:
        self.claim()
        self.clock.rightNow += 60
        error = self.assertRaises(VehicleError, self.keeper.require, ALICE)
        self.assertEqual(error.code, "lease_required")
        self.assertEqual(self.emitted, [("lease.expired", {**held(ALICE), "reason": "ttl"})])
        self.assertEqual(self.timers(), [])


class ReleaseTests(KeeperTestCase):
    def test_holderReleases(self) -> None:
        self.claim()
        self.assertEqual(self.keeper.releaseEffects(ALICE),
                         [("lease.released", {**held(ALICE), "reason": "release"})])
        self.assertIsNone(self.keeper.current())
        self.assertEqual(self.timers(), [])
        self.claim()
        self.assertEqual(self.keeper.releaseEffects(ALICE, "shutdown"),
                         [("lease.released", {**held(ALICE), "reason": "shutdown"})])

    def test_notTheHolder(self) -> None:
        error = self.assertRaises(VehicleError, self.keeper.releaseEffects, ALICE)
        self.assertEqual((error.code, error.details), ("lease_not_held", {"holder": None}))
        self.claim()
        for other in (ALICE2, BOB):
            error = self.assertRaises(VehicleError, self.keeper.releaseEffects, other)
            self.assertEqual((error.code, error.details),
                             ("lease_not_held", {"holder": toObject(lease().info())}))
        self.assertEqual(self.keeper.lease, lease())

    def test_releaseOf(self) -> None:
        """
        A shutdown its holder sent ends the lease with the body; anyone
        else's ends nothing.
        """
        self.keeper.releaseOf(ALICE.holder(), "shutdown")
        self.claim()
        for other in (ALICE2.holder(), BOB.holder(), Holder(principal="alice", clientId="")):
            self.keeper.releaseOf(other, "shutdown")
        self.assertEqual((self.keeper.lease, self.emitted), (lease(), []))
        self.keeper.releaseOf(Holder(principal=fresh("alice"), clientId=fresh("tab-1")), "shutdown")
        self.assertIsNone(self.keeper.lease)
        self.assertEqual(self.emitted, [("lease.released", {**held(ALICE), "reason": "shutdown"})])
        self.assertEqual(self.timers(), [])


class RenewalTests(KeeperTestCase):
    """
    L{LeaseKeeper.observe}: the holder's mutation renews the lease and
    moves its timer; nothing else does.
    """

    def test_holdersMutation(self) -> None:
        self.claim()
        self.clock.advance(30)
        self.keeper.observe(event("command.accepted", START + 30, {"by": held(ALICE)}))
        self.assertEqual(self.keeper.lease, lease(renewedAt=START + 30))
        self.assertLapsesAt(START + 90)

    def test_armedForTheSameLapse(self) -> None:
        """
        Arming the timer again for the lapse it is armed for keeps it.
        """
        self.claim()
        [timer] = self.clock.getDelayedCalls()
        self.keeper.armTimer()
        self.assertEqual(self.clock.getDelayedCalls(), [timer])
        self.assertTrue(timer.active())

    def test_renewalKeepsItsTimer(self) -> None:
        """
        A renewal moves the lapse later and arms nothing new: the timer
        armed for the old lapse is kept, and arms itself again when it
        fires early.
        """
        self.claim()
        [timer] = self.clock.getDelayedCalls()
        for n in range(1, 6):
            self.clock.advance(10)
            self.keeper.observe(event("command.accepted", START + 10 * n, {"by": held(ALICE)}))
            self.assertEqual(self.clock.getDelayedCalls(), [timer])
        self.assertEqual(self.keeper.lease, lease(renewedAt=START + 50))
        self.clock.advance(10)
        self.assertEqual(self.timers(), [START + 110])
        self.assertLapsesAt(START + 110)

    def test_othersMutation(self) -> None:
        self.claim()
        [timer] = self.clock.getDelayedCalls()
        self.clock.advance(30)
        self.keeper.observe(event("command.accepted", START + 30, {"by": held(BOB)}))
        self.assertEqual(self.keeper.lease, lease())
        self.assertEqual(self.clock.getDelayedCalls(), [timer])

    def test_nothingHeld(self) -> None:
        self.keeper.observe(event("command.accepted", START, {"by": held(ALICE)}))
        self.assertEqual((self.keeper.lease, self.timers()), (None, []))


class ExpiryTests(KeeperTestCase):
    """
    A lease nobody uses lapses at its time, by its timer: once.
    """

    def test_lapses(self) -> None:
        self.claim()
        self.clock.advance(59.999)
        self.assertEqual(self.keeper.current(), lease())
        self.clock.advance(0.001)
        self.assertEqual(self.emitted, [("lease.expired", {**held(ALICE), "reason": "ttl"})])
        self.assertIsNone(self.keeper.current())
        self.assertEqual(self.timers(), [])
        self.clock.advance(100)
        self.assertEqual(len(self.emitted), 1)

    def test_lapsesWhileAway(self) -> None:
        """
        A host that looks again long after the lease's time retires it at
        once.
        """
        self.claim()
        self.clock.advance(3600)
        self.assertEqual(self.emitted, [("lease.expired", {**held(ALICE), "reason": "ttl"})])
        self.assertIsNone(self.keeper.lease)

    def test_restoredPastItsTime(self) -> None:
        """
        A lease read back at start after its time lapses at once, and the
        reactor is never asked for a negative delay.
        """
        self.keeper.lease = lease(renewedAt=START - 120)
        self.keeper.armTimer()
        self.assertEqual(self.timers(), [START])
        self.clock.advance(0)
        self.assertEqual(self.emitted, [("lease.expired", {**held(ALICE), "reason": "ttl"})])

    def test_renewedBehindTheTimer(self) -> None:
        """
        A timer that finds the lease renewed since it was armed waits for
        the new time.
        """
        self.claim()
        self.keeper.lease = lease(renewedAt=START + 40)
        self.clock.advance(60)
        self.assertEqual((self.emitted, self.timers()), ([], [START + 100]))
        self.clock.advance(40)
        self.assertEqual(self.emitted, [("lease.expired", {**held(ALICE), "reason": "ttl"})])

    def test_droppedBehindTheTimer(self) -> None:
        self.claim()
        [timer] = self.clock.getDelayedCalls()
        self.keeper.lease = None
        self.clock.advance(60)
        self.assertEqual((self.emitted, self.timers()), ([], []))
        self.keeper.cancelTimer()
        self.assertFalse(timer.active())

    def test_dropped(self) -> None:
        self.claim()
        self.keeper.drop()
        self.assertEqual((self.keeper.lease, self.timers()), (None, []))
        self.keeper.drop()
        self.clock.advance(60)
        self.assertEqual(self.emitted, [])


class InfoTests(KeeperTestCase):
    """
    The current lease as answers show it, made once for each lease.
    """

    def test_shownOncePerLease(self) -> None:
        """
        Two answers on one lease show the very same info; a renewal shows
        the new one; a lease that lapsed or was dropped shows none.
        """
        self.assertIsNone(self.keeper.info())
        self.claim()
        shown = self.keeper.info()
        assert shown is not None
        self.assertEqual(shown, lease().info())
        self.assertIs(self.keeper.info(), shown)
        self.clock.advance(30)
        self.keeper.observe(event("command.accepted", START + 30, {"by": held(ALICE)}))
        renewed = self.keeper.info()
        self.assertEqual(renewed, lease(renewedAt=START + 30).info())
        self.assertIsNot(renewed, shown)
        self.clock.advance(60)
        self.assertIsNone(self.keeper.info())
        self.assertEqual(self.emitted, [("lease.expired", {**held(ALICE), "reason": "ttl"})])
        self.claim()
        self.assertEqual(self.keeper.info(), lease(claimedAt=START + 90, renewedAt=START + 90).info())
        self.keeper.drop()
        self.assertIsNone(self.keeper.info())


class StopTests(KeeperTestCase):
    """
    A deleted session's keeper arms nothing and renews nothing.
    """

    def test_stop(self) -> None:
        self.claim()
        self.keeper.stop()
        self.assertTrue(self.keeper.stopped)
        self.assertEqual(self.timers(), [])
        self.keeper.observe(event("command.accepted", START + 1, {"by": held(ALICE)}))
        self.keeper.armTimer()
        self.assertEqual((self.keeper.lease, self.timers()), (lease(), []))

    def test_timerAfterStop(self) -> None:
        """
        A timer that fires after the stop (it was already due) does nothing.
        """
        self.claim()
        [timer] = self.clock.getDelayedCalls()
        self.keeper.stopped = True
        self.clock.advance(60)
        self.assertEqual((self.emitted, self.keeper.lease), ([], lease()))
        self.assertFalse(timer.active())

    def test_newKeeper(self) -> None:
        self.assertFalse(self.keeper.stopped)
        self.assertIsNone(self.keeper.lease)

    def test_identity(self) -> None:
        """
        A keeper is itself: two with the same fields are not equal, and
        each can be kept in a set.
        """
        other = LeaseKeeper(clock=self.clock, emit=self.keeper.emit)
        self.assertNotEqual(self.keeper, other)
        self.assertEqual(len({self.keeper, other, self.keeper}), 2)


class AnnotationTests(SynchronousTestCase):
    def test_resolve(self) -> None:
        assertAnnotationsResolve(self, _lease)
        self.assertEqual(parseTimestamp(isoTimestamp(START)), START)
