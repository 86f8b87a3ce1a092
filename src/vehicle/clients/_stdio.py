# -*- test-case-name: tests.unit.test_ride -*-
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
from twisted.internet.protocol import Protocol
from twisted.python.failure import Failure
from zope.interface import implementer

from vehicle.protocol import JSONObject


#: The longest line read (a request body is at most 1 MiB; JSON escapes
#: can make its line longer).  A longer line is refused when its bytes
#: pass this, without waiting for its end.
MAX_LINE = 16 * 1024 * 1024


def _ignore(*args: Any) -> None:
    pass


@implementer(IHalfCloseableProtocol)
class StdioLines(Protocol):
    """
    Calls C{onLine} with each input line, C{onTooLong} as soon as a line
    grows past L{MAX_LINE} (what it has so far is dropped, the rest of it is
    skipped up to its line break, and the lines after it are read again),
    and C{onEnd} when the input ends or the output is gone.  L{send} writes;
    L{close} flushes the output and fires when it is closed.

    Each byte is looked at once: a line is kept as a list of chunks, joined
    when its line break comes, so a long line costs no more than its length.
    """

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
        self._chunks: list[bytes] = []
        self._size = 0
        self._skipping = False

    def dataReceived(self, data: bytes) -> None:
        start = 0
        while not self._stopped:
            end = data.find(b"\n", start)
            if self._skipping:
                if end < 0:
                    return
                self._skipping = False
            elif end < 0:
                self._keep(data[start:])
                return
            elif self._size + end - start > self.MAX_LENGTH:
                self._tooLong()
                self._skipping = False
            else:
                self._chunks.append(data[start:end])
                line = b"".join(self._chunks)
                self._chunks, self._size = [], 0
                self.onLine(line)
            start = end + 1

    def _keep(self, rest: bytes) -> None:
        if not rest:
            return
        if self._size + len(rest) > self.MAX_LENGTH:
            self._tooLong()
        else:
            self._chunks.append(rest)
            self._size += len(rest)

    def _tooLong(self) -> None:
        self._chunks, self._size = [], 0
        self._skipping = True
        self.onTooLong()

    def readConnectionLost(self) -> None:
        # The last line may have no line break.
        rest = b"".join(self._chunks)
        self._chunks, self._size = [], 0
        if rest and not self._stopped and not self._skipping:
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

    def sendFrame(self, frame: JSONObject) -> None:
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
