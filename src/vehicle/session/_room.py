# -*- test-case-name: tests.unit.test_chimes,tests.unit.test_session_parts -*-
"""
The room of a session: who besides its driver may speak in it.  The room's
policy (C{suggest}, C{co-drive}, C{observe}, C{mute}) and the chimes held
for the driver to accept or reject.  The rules of a chime request are the
drive step's (L{vehicle.session._drive}); this is the state they move, and
the log rebuilds it at start (L{vehicle.session._restore}).
"""

from __future__ import annotations

from typing import Any

from attrs import define, field


@define(eq=False)
class Room:
    """
    One session's room policy and its chimes, by id (a chime's record with
    its C{text}, which only the driver's command carries on).
    """

    policy: str = "suggest"
    chimes: dict[str, dict[str, Any]] = field(factory=dict)

    def pending(self, chimeId: str) -> dict[str, Any] | None:
        """
        The chime with this id if it still waits for the driver.
        """
        chime = self.chimes.get(chimeId)
        if chime is None or chime.get("status") != "pending":
            return None
        return chime

    def waiting(self) -> list[dict[str, Any]]:
        """
        The chimes that wait for the driver, in the order they came.
        """
        return [c for c in self.chimes.values() if c.get("status") == "pending"]

    def hold(self, record: dict[str, Any], text: str) -> None:
        """
        Keep a pending chime (its record and its words) for the driver.
        """
        self.chimes[record["chimeId"]] = {**record, "text": text}

    def resolve(self, chimeId: str, status: str) -> None:
        """
        A held chime was accepted or rejected.
        """
        self.chimes[chimeId]["status"] = status
