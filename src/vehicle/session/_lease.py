# -*- test-case-name: tests.unit.test_web.LeaseTests -*-
"""
A session's lease: who drives it and until when.  L{LeaseKeeper} holds the
lease and its expiry timer; the rules (claim, takeover, release, renewal by
use, expiry) are written here once, for live requests and for the log read
back at start alike.
"""

from __future__ import annotations

from typing import Callable

from attrs import define, field, frozen
from twisted.internet.interfaces import IDelayedCall, IReactorTime

from vehicle._timers import cancelIfActive
from vehicle.errors import VehicleError
from vehicle.protocol import Effects, Event, Holder, JSONObject, LeaseInfo, intOf, objectOf, toObject
from vehicle.session._values import Caller, Lease, parseTimestamp


def holderOf(lease: Lease) -> JSONObject:
    """
    The lease's holder as an event's data says it.
    """
    return toObject(lease.holder)


def renewedByUse(lease: Lease | None, event: Event) -> Lease | None:
    """
    The renewal rule: any event of a mutation by the lease's holder renews
    the lease at the event's time (the lease's own claims say more, and a
    delete ends everything).
    """
    if lease is None or event.type in ("lease.claimed", "lease.renewed", "session.deleted"):
        return lease
    by = objectOf(event.data.get("by"))
    if by.get("principal") == lease.principal and by.get("clientId") == lease.clientId:
        return lease.renewed(parseTimestamp(event.timestamp))
    return lease


def leaseAfter(lease: Lease | None, event: Event) -> Lease | None:
    """
    The lease after one event of the log: renewal by use, then what the
    lease's own events say.  Start rebuilds the lease with it.
    """
    lease = renewedByUse(lease, event)
    kind, data = event.type, event.data
    if kind in ("lease.claimed", "lease.renewed"):
        at = parseTimestamp(event.timestamp)
        principal, clientId = data.get("principal"), data.get("clientId")
        ttlMs = intOf(data.get("ttlMs"))
        if not isinstance(principal, str) or not isinstance(clientId, str) or ttlMs is None:
            return lease
        return Lease(
            principal=principal,
            clientId=clientId,
            ttlMs=ttlMs,
            claimedAt=lease.claimedAt if (kind == "lease.renewed" and lease) else at,
            renewedAt=at,
        )
    if kind in ("lease.released", "lease.revoked", "lease.expired"):
        if lease is not None and data.get("clientId") == lease.clientId:
            return None
    return lease


@frozen(kw_only=True)
class Claimed:
    """
    What a claim says: the lease now, and whose it was before a takeover.
    """

    lease: LeaseInfo
    tookOverFrom: Holder | None


@define(eq=False)
class LeaseKeeper:
    """
    One session's lease and the timer that retires it when it lapses.

    @ivar emit: writes one of the session's durable events (C{lease.expired}).
    @ivar dormant: is the session dormant?  Then a lapsed lease is no
        longer current, and its C{lease.expired} waits for its turn
        (C{due}: the session is woken to write it, a few at a time).
    """

    clock: IReactorTime
    emit: Callable[[str, JSONObject], object]
    dormant: Callable[[], bool] = lambda: False
    due: Callable[[], None] = lambda: None
    lease: Lease | None = None
    #: The session is deleted: no timer is armed again.
    stopped: bool = False
    _timer: IDelayedCall | None = field(default=None, init=False)
    #: The last lease L{info} showed, and what it showed.
    _shown: tuple[Lease, LeaseInfo] | None = field(default=None, init=False)

    def info(self) -> LeaseInfo | None:
        """
        The current lease (L{current}) as answers show it: made once for
        each lease, and shown by every answer until the lease changes (a
        renewal is a new lease).
        """
        lease = self.current()
        if lease is None:
            return None
        if self._shown is None or self._shown[0] is not lease:
            self._shown = (lease, lease.info())
        return self._shown[1]

    def current(self) -> Lease | None:
        """
        The lease, after retiring it if it has lapsed (C{lease.expired}).
        """
        expired = self.lease
        if expired is None or not self._lapsed():
            return expired
        if self.dormant():
            self.due()
            return None
        self.lease = None
        self.cancelTimer()
        self.emit("lease.expired", {**holderOf(expired), "reason": "ttl"})
        return None

    def _lapsed(self) -> bool:
        return self.lease is not None and self.clock.seconds() >= self.lease.expiresAt

    def require(self, caller: Caller) -> None:
        """
        A mutation needs the exact lease: same principal and client.  It is
        renewed by the event the accepted mutation writes (L{observe}), so
        a refused one renews nothing and a restart agrees.

        @raise VehicleError: C{lease_required} or C{lease_held}.
        """
        lease = self.current()
        if lease is None:
            raise VehicleError(
                "lease_required",
                "nobody holds this session's lease: claim it first",
            )
        if not lease.heldBy(caller):
            raise self._held(lease, caller)

    def _held(self, lease: Lease, caller: Caller) -> VehicleError:
        canTakeOver = lease.principal == caller.principal
        message = "another client holds this session's lease"
        if canTakeOver:
            message += " (claim with takeover: true to take it over)"
        return VehicleError(
            "lease_held",
            message,
            {"holder": toObject(lease.info()), "canTakeOver": canTakeOver},
        )

    def claimEffects(self, caller: Caller, ttlMs: int, takeover: bool) -> tuple[Claimed, Effects]:
        """
        Take the lease: free, or already ours (renewed), or the same
        principal's with C{takeover}.  Returns the frame's value and the
        events that say so (for the session's commit, which writes them).
        """
        now = self.clock.seconds()
        lease = self.current()
        tookOverFrom = None
        effects: Effects = []
        holder = toObject(caller.holder())
        if lease is not None and lease.heldBy(caller):
            claimedAt = lease.claimedAt
            effects.append(("lease.renewed", {**holder, "ttlMs": ttlMs}))
        else:
            if lease is not None:
                if not (takeover and lease.principal == caller.principal):
                    raise self._held(lease, caller)
                tookOverFrom = lease.holder
                effects.append((
                    "lease.revoked",
                    {**holderOf(lease), "by": holder, "reason": "takeover"},
                ))
            claimedAt = now
            effects.append(("lease.claimed", {**holder, "ttlMs": ttlMs}))
        self.lease = Lease(
            principal=caller.principal,
            clientId=caller.clientId,
            ttlMs=ttlMs,
            claimedAt=claimedAt,
            renewedAt=now,
        )
        self.armTimer()
        return Claimed(lease=self.lease.info(), tookOverFrom=tookOverFrom), effects

    def releaseEffects(self, caller: Caller, reason: str = "release") -> Effects:
        """
        Give the lease back; returns the event that says so.

        @raise VehicleError: C{lease_not_held} for anyone but the holder.
        """
        lease = self.current()
        if lease is None or not lease.heldBy(caller):
            raise VehicleError(
                "lease_not_held",
                "this client does not hold the session's lease",
                {"holder": toObject(lease.info()) if lease else None},
            )
        self.drop()
        return [("lease.released", {**toObject(caller.holder()), "reason": reason})]

    def releaseOf(self, holder: Holder, reason: str) -> None:
        """
        Give the lease back when C{holder} holds it (a shutdown its holder
        sent ends the lease with the body), and say so; otherwise nothing.
        """
        lease = self.current()
        if lease is None or not lease.heldBy(holder):
            return
        self.drop()
        self.emit("lease.released", {**holderOf(lease), "reason": reason})

    def observe(self, event: Event) -> None:
        """
        A durable event was written: its holder's mutation renews the lease.
        """
        if self.stopped:
            return
        renewed = renewedByUse(self.lease, event)
        if renewed is not self.lease:
            self.lease = renewed
            self.armTimer()

    def drop(self) -> None:
        self.lease = None
        self.cancelTimer()

    def stop(self) -> None:
        """
        The session is deleted: its lease ends with it, and no timer runs.
        """
        self.stopped = True
        self.cancelTimer()

    def armTimer(self) -> None:
        """
        Have a timer fire by the time the lease lapses.  A timer already
        armed for no later than that is kept: a renewal (every mutation of
        its holder makes one) only moves the lapse later, and the timer,
        when it fires early, arms itself again for what is left.
        """
        if self.lease is None or self.stopped:
            self.cancelTimer()
            return
        timer = self._timer
        if timer is not None and timer.active() and timer.getTime() <= self.lease.expiresAt:
            return
        self.cancelTimer()
        delay = max(0.0, self.lease.expiresAt - self.clock.seconds())
        self._timer = self.clock.callLater(delay, self._timerFired)

    def cancelTimer(self) -> None:
        cancelIfActive(self._timer)
        self._timer = None

    def _timerFired(self) -> None:
        self._timer = None
        if self.lease is None or self.stopped:
            return
        if self.clock.seconds() >= self.lease.expiresAt:
            self.current()
        else:
            self.armTimer()
