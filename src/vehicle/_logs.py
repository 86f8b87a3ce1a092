# -*- test-case-name: tests.live.test_local,tests.unit.test_logs -*-
"""
Quiet logs: Twisted announces every factory it starts and stops, which for
an HTTP client is a pair of lines per connection.  The host's observer
(C{twistd --logger=vehicle._logs.observer}) and the local run's drop those
and keep everything else.

Logs a machine reads (C{twistd vehicle --log-format json}): one JSON object
a line (Twisted's C{jsonFileLogObserver}), each carrying the C{sessionId}
and C{requestId} of the session and request it is about, where there is one.
"""

from __future__ import annotations

import re
import sys
from typing import TextIO

from twisted.logger import (
    FilteringLogObserver,
    ILogFilterPredicate,
    ILogObserver,
    LogEvent,
    PredicateResult,
    jsonFileLogObserver,
    textFileLogObserver,
)
from zope.interface import implementer

_CHATTER = ("Starting factory", "Stopping factory")

#: The predicate's two answers (Twisted's constants, which the type checker
#: cannot see through, as the values they are).
_DROP: PredicateResult = PredicateResult.no
_KEEP: PredicateResult = PredicateResult.maybe


@implementer(ILogFilterPredicate)
class _Quiet:
    """
    Drops a factory's start and stop announcements; keeps the rest.
    """

    def __call__(self, event: LogEvent) -> PredicateResult:
        text = event.get("log_format")
        if not isinstance(text, str):
            # Legacy events (log.msg) carry their words in C{message}.
            message = event.get("message") or ()
            text = message[0] if message and isinstance(message[0], str) else ""
        if text.startswith(_CHATTER):
            return _DROP
        return _KEEP


#: The one predicate: no factory chatter.
quiet = _Quiet()


def quietObserver(out: TextIO) -> ILogObserver:
    """
    A text observer writing to C{out} without the factories' chatter.
    """
    return FilteringLogObserver(textFileLogObserver(out), [quiet])


def observer() -> ILogObserver:
    """
    The host's observer under twistd (C{--logger=vehicle._logs.observer}):
    standard output, without the chatter.
    """
    return quietObserver(sys.stdout)


_SESSION_PATH = re.compile(rb"/sessions/([A-Za-z0-9_-]{1,128})")


@implementer(ILogObserver)
class _InContext:
    """
    Gives an event that says no C{sessionId} the one a path of it names
    (its request's C{uri}, a session's folder), then passes it on.
    """

    def __init__(self, then: ILogObserver) -> None:
        self.then = then

    def __call__(self, event: LogEvent) -> None:
        if "sessionId" not in event:
            for key, value in event.items():
                if key.startswith("log_"):
                    continue
                if isinstance(value, str):
                    value = value.encode("utf-8", "replace")
                found = _SESSION_PATH.search(value) if isinstance(value, bytes) else None
                if found:
                    event = {**event, "sessionId": found.group(1).decode("ascii")}
                    break
        self.then(event)


def jsonObserver(out: TextIO | None = None) -> ILogObserver:
    """
    The host's observer under C{--log-format json}: one JSON object a line
    on C{out} (standard output), without the chatter.
    """
    return FilteringLogObserver(
        _InContext(jsonFileLogObserver(out if out is not None else sys.stdout)), [quiet]
    )
