# -*- test-case-name: tests.test_ride -*-
"""
Lines over standard input and output, for the clients: a half-closeable
line receiver, so the end of the input leaves the output open until every
frame is written.
"""

from __future__ import annotations

import json
from typing import Any, Callable

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IHalfCloseableProtocol
from twisted.protocols.basic import LineReceiver
from twisted.python.failure import Failure
from zope.interface import implementer


#: The longest line read (a request body is at most 1 MiB; JSON escapes
#: can make its line longer).
MAX_LINE = 16 * 1024 * 1024


def _ignore(*args: Any) -> None:
    pass


@implementer(IHalfCloseableProtocol)
class StdioLines(LineReceiver):
    """
    Calls C{onLine} with each input line, C{onTooLong} when a line is
    longer than L{MAX_LINE} (reading stops there), and C{onEnd} when the
    input ends or the output is gone.  L{send} writes; L{close} flushes the
    output and fires when it is closed.
    """

    delimiter = b"\n"
    MAX_LENGTH = MAX_LINE

    def __init__(
        self,
        onLine: Callable[[bytes], None] = _ignore,
        onEnd: Callable[[], None] = _ignore,
        onTooLong: Callable[[], None] = _ignore,
    ) -> None:
        self.onLine = onLine
        self.onEnd = onEnd
        self.onTooLong = onTooLong
        self.outputLost = False
        self.done: Deferred[None] = Deferred()
        self._stopped = False

    def lineReceived(self, line: bytes) -> None:
        if not self._stopped:
            self.onLine(line)

    def lineLengthExceeded(self, line: bytes) -> None:
        self._stopped = True
        self.clearLineBuffer()
        if self.transport is not None:
            self.transport.pauseProducing()
        self.onTooLong()

    def dataReceived(self, data: bytes) -> None:
        if not self._stopped:
            super().dataReceived(data)

    def readConnectionLost(self) -> None:
        # The last line may have no line break.
        rest, self._buffer = self._buffer, b""
        if rest and not self._stopped:
            self.onLine(rest)
        self._stopped = True
        self.onEnd()

    def writeConnectionLost(self) -> None:
        self.outputLost = True
        self.onEnd()

    def connectionLost(self, reason: Failure | None = None) -> None:
        self.outputLost = True
        self.onEnd()
        if not self.done.called:
            self.done.callback(None)

    def send(self, data: bytes) -> None:
        """
        Write C{data} unless the output is gone.
        """
        if not self.outputLost and self.transport is not None:
            self.transport.write(data)

    def sendFrame(self, frame: dict[str, Any]) -> None:
        """
        Write one frame as one line.
        """
        self.send(json.dumps(frame, separators=(",", ":"), ensure_ascii=False).encode("utf-8") + b"\n")

    def close(self) -> Deferred[None]:
        """
        Flush the output and close both ends; fires once closed.
        """
        if not self.done.called:
            if self.outputLost or self.transport is None:
                # Nothing more can be written: there is nothing to flush.
                self.done.callback(None)
            else:
                self.transport.loseConnection()
        return self.done
