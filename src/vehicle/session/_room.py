# -*- test-case-name: tests.unit.test_chimes,tests.unit.test_session_parts -*-
"""
The room of a session (spec, "Chimes"): who besides its driver may speak
in it.  The room's policy (C{suggest}, C{co-drive}, C{observe}, C{mute})
and the chimes held for the driver to accept or reject.  The rules of a
chime are the session's (L{vehicle.session.Session.chime}); this is the
state they move, and the log rebuilds it at start
(L{vehicle.session._restore}).
"""

from __future__ import annotations

from typing import Literal

from attrs import define, evolve, field

from vehicle.protocol import JSON, HeldChime, RoomPolicy


#: The room's policies, by name.
POLICIES: dict[str, RoomPolicy] = {
    "observe": "observe", "mute": "mute", "suggest": "suggest", "co-drive": "co-drive"
}

ChimeStatus = Literal["pending", "accepted", "rejected"]
STATUSES: dict[str, ChimeStatus] = {
    "pending": "pending", "accepted": "accepted", "rejected": "rejected"
}


def policyOf(value: JSON, otherwise: RoomPolicy) -> RoomPolicy:
    """
    The policy a log's event names, or C{otherwise}.
    """
    return POLICIES.get(value, otherwise) if isinstance(value, str) else otherwise


@define(eq=False)
class Room:
    """
    One session's room policy and its chimes, by id.
    """

    policy: RoomPolicy = "suggest"
    chimes: dict[str, HeldChime] = field(factory=dict)

    def pending(self, chimeId: str) -> HeldChime | None:
        """
        The chime with this id if it still waits for the driver.
        """
        held = self.chimes.get(chimeId)
        return held if held is not None and held.pending else None

    def waiting(self) -> list[HeldChime]:
        """
        The chimes that wait for the driver, in the order they came.
        """
        return [held for held in self.chimes.values() if held.pending]

    def hold(self, chime: HeldChime) -> None:
        """
        Keep a pending chime (its record and its words) for the driver.
        """
        self.chimes[chime.chimeId] = chime

    def resolve(self, chimeId: str, status: str | None) -> None:
        """
        A held chime was accepted or rejected.
        """
        held = self.chimes.get(chimeId)
        if held is not None:
            self.chimes[chimeId] = evolve(held, status=STATUSES.get(status or ""))
