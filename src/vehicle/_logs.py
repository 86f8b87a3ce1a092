# -*- test-case-name: tests.live.test_local -*-
"""
Quiet logs: Twisted announces every factory it starts and stops, which for
an HTTP client is a pair of lines per connection.  The host's observer
(C{twistd --logger=vehicle._logs.observer}) and the local run's drop those
and keep everything else.
"""

from __future__ import annotations

import sys
from typing import Any, TextIO

from twisted.logger import (
    FilteringLogObserver,
    ILogFilterPredicate,
    ILogObserver,
    PredicateResult,
    textFileLogObserver,
)
from zope.interface import implementer

_CHATTER = ("Starting factory", "Stopping factory")


@implementer(ILogFilterPredicate)
class _Quiet:
    """
    Drops a factory's start and stop announcements; keeps the rest.
    """

    def __call__(self, event: dict[str, Any]) -> PredicateResult:
        text = event.get("log_format")
        if not isinstance(text, str):
            # Legacy events (log.msg) carry their words in C{message}.
            message = event.get("message") or ()
            text = message[0] if message and isinstance(message[0], str) else ""
        if text.startswith(_CHATTER):
            return PredicateResult.no
        return PredicateResult.maybe


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
