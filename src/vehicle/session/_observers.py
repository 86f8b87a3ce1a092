# -*- test-case-name: tests.live.test_mirror,tests.unit.test_public -*-
"""
Who follows sessions' lives (the bodies, the mirror, public accounting),
heard one way: told when a session is created (or loaded), renamed, when a
run of it settled and when it is deleted, and asked for its part of a
delete's answer.  The host wires them (the tap) in the order they are to
hear; the registry and the session only tell them.  One failure rule: an
observer that fails is logged, and the others are told all the same.
"""

from __future__ import annotations

from typing import Callable, ClassVar, Protocol

from attrs import define, field
from twisted.logger import Logger

from vehicle.protocol import JSONObject
from vehicle.session._interfaces import RunSettled
from vehicle.session._session import Session



class SessionObserver(Protocol):
    """
    One follower of sessions' lives.
    """

    def created(self, session: Session) -> None: ...

    def renamed(self, session: Session) -> None: ...

    def settled(self, session: Session, run: RunSettled) -> None: ...

    def deleting(self, session: Session) -> JSONObject | None: ...

    def deleted(self, session: Session) -> None: ...


@define(eq=False)
class Observers:
    """
    The host's observers, told in the order they were added.
    """

    _log: ClassVar[Logger] = Logger()

    _all: list[SessionObserver] = field(factory=list)

    def add(self, observer: SessionObserver) -> None:
        self._all.append(observer)

    def created(self, session: Session) -> None:
        self._tellAll(lambda o: o.created(session))

    def renamed(self, session: Session) -> None:
        self._tellAll(lambda o: o.renamed(session))

    def settled(self, session: Session, run: RunSettled) -> None:
        self._tellAll(lambda o: o.settled(session, run))

    def deleted(self, session: Session) -> None:
        self._tellAll(lambda o: o.deleted(session))

    def deleting(self, session: Session) -> JSONObject:
        """
        The observers' parts of a delete's answer (C{mirror}: the mirror's
        document), by the answer's key.
        """
        parts: JSONObject = {}

        def ask(observer: SessionObserver) -> None:
            parts.update(observer.deleting(session) or {})

        self._tellAll(ask)
        return parts

    def _tellAll(self, tell: Callable[[SessionObserver], None]) -> None:
        for observer in self._all:
            try:
                tell(observer)
            except Exception:
                self._log.failure(
                    "A session observer ({observer}) failed", observer=type(observer).__name__
                )
