# -*- test-case-name: tests.live.test_mirror,tests.unit.test_public -*-
"""
Who follows a session's life beyond the session room (the mirror, public
accounting): told when a session is created (or loaded), renamed, when a
run of it settled and when it is deleted, and asked for its part of a
delete's answer.  The host wires them (the tap); the session room only
tells them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from attrs import define, field
from twisted.logger import Logger


if TYPE_CHECKING:
    from vehicle.session._session import Session


class SessionObserver(Protocol):
    """
    One follower of sessions' lives.
    """

    def created(self, session: Session) -> None: ...

    def renamed(self, session: Session) -> None: ...

    def settled(self, session: Session, info: dict[str, Any]) -> None: ...

    def deleting(self, session: Session) -> dict[str, Any] | None: ...

    def deleted(self, session: Session) -> None: ...


@define(eq=False)
class Observers:
    """
    The host's observers, told in the order they were added; one that fails
    is logged, and the others are told all the same.
    """

    _log: ClassVar[Logger] = Logger()

    _all: list[SessionObserver] = field(factory=list)

    def add(self, observer: SessionObserver) -> None:
        self._all.append(observer)

    def created(self, session: Session) -> None:
        for o in self._all:
            self._tell(o.created, session)

    def renamed(self, session: Session) -> None:
        for o in self._all:
            self._tell(o.renamed, session)

    def settled(self, session: Session, info: dict[str, Any]) -> None:
        for o in self._all:
            self._tell(o.settled, session, info)

    def deleted(self, session: Session) -> None:
        for o in self._all:
            self._tell(o.deleted, session)

    def deleting(self, session: Session) -> dict[str, Any]:
        """
        The observers' parts of a delete's answer (C{mirror}: the mirror's
        document), by the answer's key.
        """
        parts: dict[str, Any] = {}
        for o in self._all:
            part = o.deleting(session)
            if part:
                parts.update(part)
        return parts

    def _tell(self, what: Any, *args: Any) -> None:
        try:
            what(*args)
        except Exception:
            self._log.failure("A session observer failed")
