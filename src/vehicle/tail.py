# -*- test-case-name: tests.test_tail -*-
"""
C{vehicle tail}: an operator's view of one session's events, followed over
SSE through gardend, one line each; after a drop it resumes from the last
C{seq} it printed (C{Last-Event-ID}), so it shows no gap and no repeat.
"""

from __future__ import annotations

import json
import os
from typing import Any, Callable, ClassVar, Mapping

from attrs import define, evolve, field
from twisted.internet.defer import CancelledError, Deferred
from twisted.internet.interfaces import IReactorTime
from twisted.internet.stdio import StandardIO
from twisted.internet.task import deferLater
from twisted.logger import Logger
from twisted.python import usage
from twisted.web.client import Agent, HTTPConnectionPool
from treq.client import HTTPClient

from vehicle.ride import CredentialError, Door, StdioLines, asFrame, credentialsFor
from vehicle.ride._main import boundedWait


#: The longest value shown in a compact line.
_VALUE_LIMIT = 120

#: What starts each line of deltas' text.
DELTA_INDENT = "    "


@define(eq=False)
class SSEParser:
    """
    Server-sent events from a byte stream: calls C{onMessage} with each
    message's fields (C{id}, C{event}, C{data}); comments are skipped.
    """

    onMessage: Callable[[dict[str, str]], None]
    _buffer: bytes = b""
    _fields: dict[str, str] = field(factory=dict)

    def feed(self, data: bytes) -> None:
        self._buffer += data
        while b"\n" in self._buffer:
            raw, self._buffer = self._buffer.split(b"\n", 1)
            line = raw.rstrip(b"\r").decode("utf-8", "replace")
            if not line:
                fields, self._fields = self._fields, {}
                if "data" in fields:
                    self.onMessage(fields)
                continue
            if line.startswith(":"):
                continue
            name, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if name == "data" and "data" in self._fields:
                self._fields["data"] += "\n" + value
            else:
                self._fields[name] = value


def _show(value: Any) -> str:
    if isinstance(value, str) and value and not any(c.isspace() for c in value) and '"' not in value:
        text = value
    else:
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return text if len(text) <= _VALUE_LIMIT else text[: _VALUE_LIMIT - 1] + "…"


def formatEvent(event: dict[str, Any]) -> str:
    """
    One event as C{<seq> <type> key=value ...}: its data's fields, each
    value shown bare when it is one word, else as JSON, cut at 120
    characters.
    """
    parts = [str(event.get("seq", "-")), str(event.get("type", "?"))]
    data = event.get("data")
    if isinstance(data, dict):
        parts.extend(f"{key}={_show(value)}" for key, value in data.items())
    return " ".join(parts)


class TailFailed(Exception):
    """
    The tail cannot go on: the host refused it, or it could not reconnect.
    """


@define(eq=False)
class Tail:
    """
    Follow one session's events.

    @ivar door: the host's routes, through gardend.
    @ivar sessionId: the session.
    @ivar clock: for the backoff between reconnections.
    @ivar write: called with text to print (each event's line ends in a
        line break; deltas are printed inline, as they come, on lines
        indented by L{DELTA_INDENT}).
    @ivar lastSeq: the last C{seq} printed; the next connection resumes
        after it.
    @ivar retries: how many reconnections in a row may fail before the
        tail gives up.
    """

    _log: ClassVar[Logger] = Logger()

    door: Door
    sessionId: str
    clock: IReactorTime
    write: Callable[[str], None]
    lastSeq: int = 0
    asJSON: bool = False
    deltas: bool = False
    retries: int = 8
    backoff: float = 0.5
    maxBackoff: float = 10.0
    connections: int = field(init=False, default=0)
    _ended: bool = field(init=False, default=False)
    _midLine: bool = field(init=False, default=False)

    async def run(self) -> None:
        """
        Print events until the session is deleted.

        @raise TailFailed: the host refused the tail, or too many
            reconnections failed in a row.
        """
        failures = 0
        while True:
            if failures:
                if failures > self.retries:
                    raise TailFailed(f"gave up after {self.retries} failed reconnections")
                delay = min(self.backoff * 2 ** (failures - 1), self.maxBackoff)
                self._log.warn(
                    "Reconnecting in {delay}s after seq {seq}", delay=delay, seq=self.lastSeq
                )
                await deferLater(self.clock, delay, lambda: None)
            try:
                connected = await self._follow()
            except CancelledError:
                raise
            except TailFailed:
                raise
            except Exception as e:
                self._log.warn("The stream broke off: {error}", error=e.__class__.__name__)
                connected = False
            if self._ended:
                break
            # A stream that ends before the session does was cut: resume,
            # at once after a connection that worked, else backing off.
            failures = 1 if connected else failures + 1
        self._endLine()

    async def _follow(self) -> bool:
        """
        One connection, followed to its end.

        @return: whether it connected (and so delivered what it had).
        """
        headers = {**self.door.headers, "Accept": "text/event-stream"}
        if self.connections:
            headers["Last-Event-ID"] = str(self.lastSeq)
        url = self.door.url(
            self.door.sessionPath(self.sessionId, "/events"), {"since": str(self.lastSeq)}
        )
        response = await self.door.http.request("GET", url, headers=headers, unbuffered=True)
        if response.code != 200:
            frame = asFrame(response.code, await response.content())
            if response.code >= 500 or frame.get("code") == "unreachable":
                self._log.warn(
                    "gardend answered {code}: {message}",
                    code=response.code,
                    message=frame.get("message"),
                )
                return False
            raise TailFailed(f"{frame.get('code')}: {frame.get('message')}")
        self.connections += 1
        await response.collect(SSEParser(self._message).feed)
        return True

    def _message(self, message: dict[str, str]) -> None:
        try:
            event = json.loads(message["data"])
        except ValueError:
            self._log.warn("An event that is not JSON: {data!r}", data=message["data"][:200])
            return
        seq = event.get("seq")
        if seq is None:
            if self.deltas:
                if self.asJSON:
                    self._line(json.dumps(event, ensure_ascii=False))
                else:
                    text = (event.get("data") or {}).get("text") or ""
                    if text:
                        # Indented, so no delta line reads as an event's.
                        if not self._midLine:
                            self.write(DELTA_INDENT)
                        self.write(text.replace("\n", "\n" + DELTA_INDENT))
                        self._midLine = True
            return
        if not isinstance(seq, int) or seq <= self.lastSeq:
            return  # already printed
        self.lastSeq = seq
        self._line(json.dumps(event, ensure_ascii=False) if self.asJSON else formatEvent(event))
        if event.get("type") == "session.deleted":
            self._ended = True

    def _line(self, text: str) -> None:
        self._endLine()
        self.write(text + "\n")

    def _endLine(self) -> None:
        if self._midLine:
            self._midLine = False
            self.write("\n")


class TailOptions(usage.Options):
    """
    C{vehicle tail --gardend URL --graph G --session ID [--since N]}.
    """

    longdesc = ""
    synopsis = "--gardend URL --graph G --session ID [--since N] [--json] [--deltas]"

    optFlags = [
        ["json", None, "Print each event's frame as JSON."],
        ["deltas", None, "Print message deltas (inline text; with --json, their frames)."],
        ["anonymous", None, "Tail as a visitor (no Authorization)."],
    ]
    optParameters = [
        ["gardend", None, None, "gardend's URL."],
        ["graph", None, None, "The session's graph."],
        ["session", None, None, "The session to follow."],
        ["since", None, 0, "Start after this seq (0: from the start).", int],
        ["retries", None, 8, "Failed reconnections in a row before giving up.", int],
        ["visitor-id", None, None, "A visitor's X-Visitor-Id."],
        ["key-file", None, None, "A file holding the bearer token (default: $VEHICLE_TOKEN)."],
    ]

    def postOptions(self) -> None:
        for name in ("gardend", "graph", "session"):
            if not self[name]:
                raise usage.UsageError(f"--{name} is required")
        if self["since"] < 0 or self["retries"] < 0:
            raise usage.UsageError("--since and --retries are at least 0")


async def runTail(
    reactor: Any, options: TailOptions, environ: Mapping[str, str] | None = None
) -> int:
    """
    Tail on standard output until the session is deleted.

    @return: the exit code: 0, 1 when the tail failed, 2 for credentials.
    """
    environ = os.environ if environ is None else environ
    log = Logger()
    try:
        credentials = credentialsFor(options, environ)
    except CredentialError as e:
        log.error("{error}", error=str(e))
        return 2
    pool = HTTPConnectionPool(reactor, persistent=False)
    door = Door(
        http=HTTPClient(Agent(reactor, pool=pool)),
        gardend=options["gardend"],
        graph=options["graph"],
        # Reading needs no model key: it is not sent.
        headers=evolve(credentials, modelKey=None).headers(),
    )
    output = StdioLines()
    StandardIO(output, reactor=reactor)
    tail = Tail(
        door=door,
        sessionId=options["session"],
        clock=reactor,
        write=lambda text: output.send(text.encode("utf-8")),
        lastSeq=options["since"],
        asJSON=bool(options["json"]),
        deltas=bool(options["deltas"]),
        retries=options["retries"],
    )
    running = Deferred.fromCoroutine(tail.run())
    finished: Deferred[None] = Deferred()

    def stopping() -> Deferred[None]:
        # Asked to stop (a signal): stop following, flush what was printed.
        running.cancel()
        return boundedWait(reactor, finished, 2.0)

    reactor.addSystemEventTrigger("before", "shutdown", stopping)
    code = 0
    try:
        await running
    except CancelledError:
        pass
    except TailFailed as e:
        log.error("vehicle tail: {error}", error=str(e))
        code = 1
    finally:
        await output.close()
        finished.callback(None)
    return code
