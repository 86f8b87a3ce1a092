"""
C{vehicle ride} in the tests: C{MODEL_KEY}, a user's own model key, and
L{Rider}, the parent's side of a C{vehicle ride} child (the live tests
spawn it; nothing here starts a process).
"""

from __future__ import annotations

import json
from typing import Any

from twisted.internet.defer import Deferred
from twisted.internet.protocol import ProcessProtocol


MODEL_KEY = "sk-or-own-key-0123456789"


class Rider(ProcessProtocol):
    """
    Drives C{vehicle ride} in a child: writes a line when a frame asks for
    it, collects the frames.
    """

    def __init__(self, onFrame: Any) -> None:
        self.onFrame = onFrame
        self.frames: list[dict[str, Any]] = []
        self.buffer = b""
        self.stderr = b""
        self.ended: Deferred = Deferred()

    def send(self, request: dict[str, Any]) -> None:
        self.transport.write(json.dumps(request).encode() + b"\n")

    def outReceived(self, data: bytes) -> None:
        self.buffer += data
        while b"\n" in self.buffer:
            line, self.buffer = self.buffer.split(b"\n", 1)
            frame = json.loads(line)
            self.frames.append(frame)
            self.onFrame(self, frame)

    def errReceived(self, data: bytes) -> None:
        self.stderr += data

    def processEnded(self, reason: Any) -> None:
        self.ended.callback(reason.value.exitCode)
