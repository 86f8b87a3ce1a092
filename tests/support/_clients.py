"""
The clients as a person runs them: C{.venv/bin/vehicle ...} in a child
process, its standard output read line by line as it comes (by the
clients' own line reader, L{vehicle.clients.StdioLines}), its standard
error and exit status kept, the time it took measured.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any, Callable

from twisted.internet import reactor
from twisted.internet.defer import Deferred
from twisted.internet.protocol import ProcessProtocol
from twisted.trial.unittest import TestCase

from vehicle.clients import StdioLines

#: The console script, as the README gives it.
VEHICLE = str(Path(sys.prefix) / "bin" / "vehicle")


class Client(ProcessProtocol):
    """
    One C{vehicle} child.  C{onLine(client, line)} is called with each line
    of its standard output; L{ended} fires with its exit status (or the
    signal's negative number).
    """

    def __init__(self, onLine: Callable[["Client", str], None] | None = None) -> None:
        self.onLine = onLine
        self.lines: list[str] = []
        self.stderr = b""
        self._reader = StdioLines(onLine=self._lineReceived)
        self.ended: Deferred[int] = Deferred()
        self.started = reactor.seconds()
        self.elapsed: float | None = None
        self._waiters: list[tuple[Callable[[str], bool], Deferred[str]]] = []

    def outReceived(self, data: bytes) -> None:
        self._reader.dataReceived(data)

    def outConnectionLost(self) -> None:
        # A last line without its line break is still a line.
        self._reader.readConnectionLost()

    def _lineReceived(self, raw: bytes) -> None:
        line = raw.decode("utf-8", "replace")
        self.lines.append(line)
        for predicate, d in list(self._waiters):
            if predicate(line):
                self._waiters.remove((predicate, d))
                d.callback(line)
        if self.onLine is not None:
            self.onLine(self, line)

    def errReceived(self, data: bytes) -> None:
        self.stderr += data

    def processEnded(self, reason: Any) -> None:
        self.elapsed = reactor.seconds() - self.started
        value = reason.value
        code = value.exitCode if value.exitCode is not None else -(value.signal or 0)
        for _, d in self._waiters:
            d.errback(AssertionError(f"the client ended ({code}) first; stderr: {self.errorText}"))
        self._waiters = []
        self.ended.callback(code)

    @property
    def errorText(self) -> str:
        return self.stderr.decode("utf-8", "replace")

    @property
    def errorLines(self) -> list[str]:
        return [line for line in self.errorText.split("\n") if line]

    def frames(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.lines]

    def send(self, request: dict[str, Any]) -> None:
        self.transport.write(json.dumps(request).encode() + b"\n")

    def waitForLine(self, predicate: Callable[[str], bool], timeout: float = 30) -> Deferred[str]:
        """
        Fires with the first line of output (seen or to come) matching.
        """
        for line in self.lines:
            if predicate(line):
                d: Deferred[str] = Deferred()
                d.callback(line)
                return d
        d = Deferred()
        self._waiters.append((predicate, d))
        d.addTimeout(timeout, reactor)
        return d


def clientEnvironment(testCase: TestCase, **extra: str) -> dict[str, str]:
    """
    A clean environment for a client: a fresh home, no token unless given.
    """
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(Path(testCase.mktemp()).absolute()),
        **extra,
    }


def startClient(
    testCase: TestCase,
    *args: str,
    env: dict[str, str] | None = None,
    onLine: Callable[[Client, str], None] | None = None,
    stdin: bytes | None = b"",
) -> Client:
    """
    Run C{vehicle <args>}; C{stdin} is written then closed (L{None}: left
    open).  The child is killed at the test's end if still running.
    """
    client = Client(onLine)
    env = env if env is not None else clientEnvironment(testCase)
    reactor.spawnProcess(client, VEHICLE, [VEHICLE, *args], env=env)
    if stdin is not None:
        if stdin:
            client.transport.write(stdin)
        client.transport.closeStdin()

    def kill() -> Any:
        if not client.ended.called:
            try:
                client.transport.signalProcess("KILL")
            except Exception:
                pass
            return client.ended
        return None

    testCase.addCleanup(kill)
    return client


async def runClient(testCase: TestCase, *args: str, **kw: Any) -> Client:
    """
    L{startClient}, then wait for its end.
    """
    client = startClient(testCase, *args, **kw)
    await client.ended
    return client
