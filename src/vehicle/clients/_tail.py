# -*- test-case-name: tests.unit.test_tail -*-
"""
C{vehicle tail}: an operator's view of one session's events (or, with
C{--all}, of every session of a graph), followed over SSE through gardend,
one line each, until it is stopped; after a drop it resumes from the last
C{seq} it saw (C{Last-Event-ID}), so it shows no gap and no repeat.
"""

from __future__ import annotations

import fnmatch
import json
from typing import Callable, Mapping, Sequence

from attrs import define, evolve, field
from twisted.internet.defer import CancelledError, Deferred
from twisted.internet.interfaces import IDelayedCall, IPushProducer, IReactorTime
from twisted.internet.protocol import Protocol, connectionDone
from twisted.internet.stdio import StandardIO
from twisted.internet.task import deferLater
from twisted.python import usage
from twisted.python.failure import Failure
from twisted.web.client import ResponseDone
from twisted.web.http import PotentialDataLoss

from vehicle._reactors import IClientReactor
from vehicle._timers import cancelIfActive
from vehicle.clients._client import GardendOptions, clientHTTP, describeFailure, wasCancelled
from vehicle.clients._link import HostLink, asFrame, valueOf
from vehicle.clients._ridemain import boundedWait, explainRefusal, readCredentials
from vehicle.clients._stdio import StdioLines
from vehicle.protocol import JSON, JSONObject, intOf, loads, objectOf, objectsOf, textOf


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


def _show(value: JSON) -> str:
    if isinstance(value, str) and value and not any(c.isspace() for c in value) and '"' not in value:
        text = value
    else:
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return text if len(text) <= _VALUE_LIMIT else text[: _VALUE_LIMIT - 1] + "…"


def formatEvent(event: JSONObject) -> str:
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
    The tail cannot go on: the host refused it, gardend cannot be reached,
    or too many reconnections failed in a row.

    @ivar frame: the refusal, when gardend or the host refused.
    @ivar exitCode: 1 (refused, gave up) or 3 (gardend not reached).
    """

    def __init__(self, text: str, frame: JSONObject | None = None, exitCode: int = 1) -> None:
        super().__init__(text)
        self.frame = frame
        self.exitCode = exitCode


class _NoStream(Exception):
    """
    gardend answered, but not with the stream (a 5xx: the host is away).
    """


#: Failures to connect that no retry mends, before the first connection:
#: nothing listens there, or no such name.  A TLS failure never mends.
_FATAL_AT_START = frozenset({"refused", "dns", "network"})


def _ignore(text: str) -> None:
    pass


def _hostAway(frame: JSONObject) -> bool:
    """
    Is C{frame} a 5xx (gardend is up, the host is away or failed)?
    """
    details = frame.get("details")
    status = details.get("status") if isinstance(details, dict) else None
    return (isinstance(status, int) and status >= 500) or frame.get("code") == "internal"


def typeMatches(patterns: Sequence[str], eventType: str) -> bool:
    """
    Does C{eventType} match one of C{patterns} (shell-style, C{run.*}); no
    pattern matches every type.
    """
    return not patterns or any(fnmatch.fnmatchcase(eventType, p) for p in patterns)


@define(eq=False)
class Tail:
    """
    Follow one session's events until it is deleted or the tail is stopped.

    @ivar link: the host's routes, through gardend.
    @ivar sessionId: the session.
    @ivar clock: for the backoff between reconnections.
    @ivar write: called with text to print (each event's line ends in a
        line break; deltas are printed inline, as they come, on lines
        indented by L{DELTA_INDENT}).
    @ivar warn: called with one line for the person (standard error) at
        each drop, and when the first connection is put off.
    @ivar lastSeq: the last C{seq} seen; the next connection resumes after
        it.
    @ivar types: shell-style patterns; only events whose type matches one
        are printed (every event when empty).
    @ivar label: printed first on each line (C{--all}: the session's id).
    @ivar maxRetries: reconnections that may fail in a row, after a drop,
        before the tail gives up; L{None}: never give up.
    @ivar backoff: the wait before the first reconnection; each failure
        doubles it, up to C{maxBackoff}.
    @ivar patient: also retry when the very first connection cannot be
        made (C{--all}, which knows the session exists).
    @ivar idleSeconds: a stream silent this long (the host sends a
        keepalive every 15 s) is taken for dead and reconnected.
    @ivar connections: the connections that delivered the stream.
    @ivar drops: the streams that broke off before the session ended.
    @ivar onEvent: when set, called with each event (the durable ones
        once each, in order, and the deltas) instead of printing it.
    @ivar onConnected: when set, called with L{connections} each time a
        connection delivers the stream.
    """

    link: HostLink
    sessionId: str
    clock: IReactorTime
    write: Callable[[str], None]
    warn: Callable[[str], None] = _ignore
    lastSeq: int = 0
    asJSON: bool = False
    deltas: bool = False
    types: tuple[str, ...] = ()
    label: str | None = None
    maxRetries: int | None = None
    backoff: float = 0.5
    maxBackoff: float = 5.0
    patient: bool = False
    idleSeconds: float = 45.0
    onEvent: Callable[[JSONObject], None] | None = None
    onConnected: Callable[[int], None] | None = None
    connections: int = field(init=False, default=0)
    drops: int = field(init=False, default=0)
    ended: bool = field(init=False, default=False)
    _live: bool = field(init=False, default=False)
    _midLine: bool = field(init=False, default=False)

    async def run(self) -> None:
        """
        Print events until the session is deleted.

        @raise TailFailed: the host refused the tail, gardend could not be
            reached at the start, or C{maxRetries} reconnections failed in a
            row.
        """
        retries = 0
        while not self.ended:
            self._live = False
            try:
                await self._follow()
                problem = "the stream ended"
            except (CancelledError, TailFailed):
                raise
            except _NoStream as e:
                problem = str(e)
            except Exception as e:
                if wasCancelled(e):
                    raise CancelledError() from e
                reason, problem = describeFailure(e, self.link.gardend)
                if reason == "tls" or (
                    not self.connections and not self.patient and reason in _FATAL_AT_START
                ):
                    raise TailFailed(problem, exitCode=3)
            if self.ended:
                break
            if self._live:
                retries = 0
                self.drops += 1
                self.warn(
                    f"{self._prefix()}connection lost after seq {self.lastSeq} ({problem}); "
                    "reconnecting"
                )
            elif not self.connections and not retries:
                self.warn(f"{self._prefix()}{problem}; retrying")
            if self.maxRetries is not None and retries >= self.maxRetries:
                raise TailFailed(
                    f"{self._prefix()}gave up after {retries} failed reconnection"
                    f"{'' if retries == 1 else 's'} (--max-retries {self.maxRetries}): {problem}"
                )
            retries += 1
            await deferLater(self.clock, self.delay(retries), lambda: None)
        self._endLine()

    def delay(self, retries: int) -> float:
        """
        The wait before reconnection number C{retries} (from 1) since the
        last good connection: L{backoff}, doubling, at most L{maxBackoff}.
        """
        return float(min(self.backoff * 2 ** (retries - 1), self.maxBackoff))

    def _prefix(self) -> str:
        return f"{self.label}: " if self.label else ""

    async def _follow(self) -> None:
        """
        One connection, followed to its end.

        @raise _NoStream: gardend answered with a 5xx.
        @raise TailFailed: gardend or the host refused the tail.
        """
        # Names in bytes, as Twisted keeps them (python -b: no str twin).
        headers = self.link.requestHeaders({b"Accept": "text/event-stream"})
        if self.connections:
            headers[b"Last-Event-ID"] = str(self.lastSeq)
        url = self.link.url(
            self.link.sessionPath(self.sessionId, "/events"), {"since": str(self.lastSeq)}
        )
        response = await self.link.http.request("GET", url, headers=headers, unbuffered=True)
        if response.code != 200:
            frame = asFrame(response.code, await response.content())
            if response.code >= 500:
                raise _NoStream(
                    f"gardend answered {response.code} {frame.get('code')}: {frame.get('message')}"
                )
            raise TailFailed(f"{frame.get('code')}: {frame.get('message')}", frame)
        self.connections += 1
        self._live = True
        if self.onConnected is not None:
            self.onConnected(self.connections)
        parser = SSEParser(self._message)

        def received(data: bytes) -> None:
            watchdog.reset()
            parser.feed(data)

        body = _StreamBody(received)
        watchdog = _Watchdog(self.clock, self.idleSeconds, body.stop)
        response.deliverBody(body)
        try:
            await body.finished
        except CancelledError:
            raise
        except Exception:
            if not watchdog.fired:
                raise
        finally:
            watchdog.stop()
        if watchdog.fired:
            raise _NoStream(f"nothing came for {self.idleSeconds:g}s")

    def _message(self, message: dict[str, str]) -> None:
        try:
            event = loads(message["data"])
        except ValueError:
            self.warn(f"{self._prefix()}an event that is not JSON: {message['data'][:200]!r}")
            return
        if not isinstance(event, dict):
            return
        seq = event.get("seq")
        eventType = str(event.get("type", "?"))
        if seq is None:
            if self.onEvent is not None:
                self.onEvent(event)
            elif self.deltas and typeMatches(self.types, eventType):
                if self.asJSON:
                    self._line(json.dumps(event, ensure_ascii=False))
                elif eventType == "message.delta":
                    # The words only: the model's thinking (thinking.delta)
                    # mixed in would read as what it said.
                    text = textOf(objectOf(event.get("data")).get("text")) or ""
                    if text:
                        # Indented, so no delta line reads as an event's.
                        if not self._midLine:
                            self.write(DELTA_INDENT)
                        self.write(text.replace("\n", "\n" + DELTA_INDENT))
                        self._midLine = True
            return
        if not isinstance(seq, int) or seq <= self.lastSeq:
            return  # already seen
        self.lastSeq = seq
        if self.onEvent is not None:
            self.onEvent(event)
        elif typeMatches(self.types, eventType):
            if self.asJSON:
                self._line(json.dumps(event, ensure_ascii=False))
            else:
                self._line(f"{self.label} {formatEvent(event)}" if self.label else formatEvent(event))
        if eventType == "session.deleted":
            self.ended = True

    def _line(self, text: str) -> None:
        self._endLine()
        self.write(text + "\n")

    def _endLine(self) -> None:
        if self._midLine:
            self._midLine = False
            self.write("\n")


@define(eq=False)
class _Watchdog:
    """
    Calls C{cut} when the stream has been silent for C{seconds}.
    """

    clock: IReactorTime
    seconds: float
    cut: Callable[[], None]
    fired: bool = False
    _call: IDelayedCall | None = None

    def __attrs_post_init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        if self._call is not None and self._call.active():
            self._call.reset(self.seconds)
        elif not self.fired:
            self._call = self.clock.callLater(self.seconds, self._fire)

    def stop(self) -> None:
        cancelIfActive(self._call)

    def _fire(self) -> None:
        self.fired = True
        self.cut()


class _StreamBody(Protocol):
    """
    A streamed answer's body (L{IResponse.deliverBody}), each piece to
    C{collector} as it comes; L{finished} fires at its end, and fails when
    it broke off.  L{stop} closes the connection it comes on: the transport
    C{deliverBody} connects it to is an L{IPushProducer}, whose
    C{stopProducing} closes the connection; cancelling L{finished} (the
    tail is stopped) stops it too.
    """

    def __init__(self, collector: Callable[[bytes], None]) -> None:
        self.collector = collector
        self.finished: Deferred[None] = Deferred(self._cancel)

    def dataReceived(self, data: bytes) -> None:
        try:
            self.collector(data)
        except BaseException:
            self._settle(Failure())
            self.stop()

    def connectionLost(self, reason: Failure = connectionDone) -> None:
        # PotentialDataLoss: a body without a length, ended by the close.
        self._settle(None if reason.check(ResponseDone, PotentialDataLoss) else reason)

    def stop(self) -> None:
        """
        Close the connection the body comes on.
        """
        if self.transport is not None:
            IPushProducer(self.transport).stopProducing()

    def _cancel(self, finished: Deferred[None]) -> None:
        # Cancelled first, so what the close says comes too late to count.
        finished.errback(Failure(CancelledError()))
        self.stop()

    def _settle(self, result: Failure | None) -> None:
        if not self.finished.called:
            if result is None:
                self.finished.callback(None)
            else:
                self.finished.errback(result)


@define(eq=False)
class TailAll:
    """
    Follow every session of the graph the caller can see (C{GET /sessions},
    polled), each with its own L{Tail}, new sessions as they appear.

    @ivar makeTail: a L{Tail} for a session id, starting after a seq.
    @ivar since: where the sessions listed at the start begin (L{None}:
        at their cursor, so only what happens from now on is printed);
        sessions that appear later are printed from their first event.
    @ivar pollSeconds: how often the list is read.
    """

    link: HostLink
    clock: IReactorTime
    makeTail: Callable[[str, int], Tail]
    warn: Callable[[str], None] = _ignore
    since: int | None = None
    pollSeconds: float = 2.0
    tails: dict[str, Tail] = field(factory=dict)
    _running: dict[str, Deferred[None]] = field(factory=dict)
    _away: bool = False

    async def run(self) -> None:
        """
        Follow until cancelled.

        @raise TailFailed: the first list was refused, or gardend could not
            be reached at the start.
        """
        first = True
        try:
            while True:
                frame = await self.link.call("GET", "/sessions")
                if frame.get("type") == "session.list":
                    self._away = False
                    for summary in objectsOf(valueOf(frame).get("sessions")):
                        self._follow(summary, first)
                    first = False
                elif first and not _hostAway(frame):
                    # Nothing listening, TLS, a refusal: no wait mends it.
                    raise TailFailed(
                        str(frame.get("message")),
                        frame,
                        exitCode=3 if frame.get("code") == "unreachable" else 1,
                    )
                elif not self._away:
                    self._away = True
                    self.warn(f"cannot list the sessions: {frame.get('message')}; retrying")
                await deferLater(self.clock, self.pollSeconds, lambda: None)
        finally:
            for running in list(self._running.values()):
                running.cancel()

    def _follow(self, summary: JSONObject, atStart: bool) -> None:
        sessionId = summary.get("sessionId")
        if not isinstance(sessionId, str) or sessionId in self._running:
            return
        tail = self.tails.get(sessionId)
        if tail is None:
            if atStart:
                since = self.since if self.since is not None else intOf(summary.get("cursor")) or 0
            else:
                since = 0
            tail = self.tails[sessionId] = self.makeTail(sessionId, since)
        elif tail.ended:
            return
        running = self._running[sessionId] = Deferred.fromCoroutine(tail.run())

        def ended(result: None | Failure) -> None:
            self._running.pop(sessionId, None)
            if isinstance(result, Failure):
                error = result.value
                if isinstance(error, TailFailed):
                    # Picked up again at the next list, if it is still there.
                    self.warn(f"{sessionId}: {error}")
                elif not isinstance(error, CancelledError):
                    self.warn(f"{sessionId}: the tail failed: {error.__class__.__name__}")

        running.addBoth(ended)


class TailOptions(GardendOptions):
    """
    C{vehicle tail --gardend URL --graph G (--session ID | --all) ...}.
    """

    longdesc = ""
    synopsis = (
        "--gardend URL --graph G (--session ID | --all) [--since N] [--type PATTERN ...]"
        " [--json] [--deltas] [--max-retries N] [--ca-file PEM]"
    )

    optFlags = [
        ["json", None, "Print each event's frame as JSON."],
        ["deltas", None, "Print message deltas (inline text; with --json, their frames and the "
                         "model's thinking.delta frames)."],
        ["all", None, "Follow every session of the graph you can see, new ones as they come."],
    ]
    optParameters = [
        ["session", None, None, "The session to follow."],
        ["since", None, None, "Start after this seq (default 0; with --all, each session's "
         "cursor).", int],
        ["max-retries", None, None, "Give up after this many failed reconnections in a row "
         "(default: never).", int],
    ]

    def __init__(self) -> None:
        super().__init__()
        self["type"] = []

    def opt_type(self, pattern: str) -> None:
        """
        Print only events whose type matches PATTERN (shell-style, e.g.
        'run.*'); repeatable.
        """
        self["type"].append(pattern)

    def postOptions(self) -> None:
        super().postOptions()
        if bool(self["all"]) == bool(self["session"]):
            raise usage.UsageError("give exactly one of --session and --all")
        if self["all"] and self["deltas"] and not self["json"]:
            raise usage.UsageError("--deltas with --all needs --json (deltas of many sessions)")
        for name in ("since", "max-retries"):
            if self[name] is not None and self[name] < 0:
                raise usage.UsageError(f"--{name} is at least 0")


async def runTail(
    reactor: IClientReactor,
    options: TailOptions,
    environ: Mapping[str, str] | None = None,
    say: Callable[[str], None] | None = None,
) -> int:
    """
    Tail on standard output until the session is deleted (or, with
    C{--all}, until stopped).

    @return: the exit code: 0; 1 when the tail was refused or gave up; 2
        for credentials; 3 when gardend could not be reached.
    """
    credentials, say = readCredentials(options, environ, say, "tail")
    if credentials is None:
        return 2
    http, pool = clientHTTP(reactor, options["ca-file"])
    link = HostLink(
        http=http,
        gardend=options["gardend"],
        graph=options["graph"],
        # Reading needs no model key: it is not sent.
        headers=evolve(credentials, modelKey=None).headers(),
    )
    output = StdioLines()
    StandardIO(output, reactor=reactor)

    def warn(text: str) -> None:
        say(f"vehicle tail: {text}")

    follower = _follower(reactor, options, link, lambda text: output.send(text.encode("utf-8")), warn)
    running = Deferred.fromCoroutine(follower.run())
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
        text = str(e)
        if e.frame is not None and e.frame.get("code") != "unreachable":
            text, _ = explainRefusal(e.frame, credentials, "the session's events")
        say(f"vehicle tail: {text}")
        code = e.exitCode
    finally:
        await output.close()
        await pool.closeCachedConnections()
        finished.callback(None)
    return code


def _follower(
    reactor: IClientReactor,
    options: TailOptions,
    link: HostLink,
    write: Callable[[str], None],
    warn: Callable[[str], None],
) -> Tail | TailAll:
    """
    What C{--session} (a L{Tail}) or C{--all} (a L{TailAll}, each of its
    sessions' lines labelled with its id) follows, as C{options} say.
    """

    def makeTail(sessionId: str, since: int, label: str | None = None) -> Tail:
        return Tail(
            link=link,
            sessionId=sessionId,
            clock=reactor,
            write=write,
            warn=warn,
            lastSeq=since,
            asJSON=bool(options["json"]),
            deltas=bool(options["deltas"]),
            types=tuple(options["type"]),
            label=label,
            maxRetries=options["max-retries"],
            patient=label is not None,
        )

    if options["all"]:
        return TailAll(
            link=link,
            clock=reactor,
            makeTail=lambda sessionId, since: makeTail(sessionId, since, sessionId),
            warn=warn,
            since=options["since"],
        )
    return makeTail(options["session"], options["since"] or 0)
