"""
The reactor's optional capability (a thread pool) is asked for at run time,
and the pieces split out of the ride and the mirror work on their own: a
request line read and routed, a pass's reader on a reactor with or without
threads.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from twisted.internet.interfaces import IReactorThreads
from twisted.internet.testing import MemoryReactorClock
from twisted.trial.unittest import SynchronousTestCase
from zope.interface import implementer

from vehicle._reactors import IClientReactor, IHostReactor
from vehicle._threads import threadRunner
from vehicle._timers import cancelIfActive
from vehicle.clients._lines import Call, Line, callFor, readLine
from vehicle.mirror import Mirror


class _Pool:
    """
    A thread pool that runs its work at once, and counts it.
    """

    def __init__(self) -> None:
        self.ran = 0

    def callInThreadWithCallback(
        self, onResult: Callable[[bool, Any], None], f: Callable[..., Any], *args: Any, **kwargs: Any
    ) -> None:
        self.ran += 1
        try:
            result = f(*args, **kwargs)
        except BaseException as e:
            onResult(False, e)
        else:
            onResult(True, result)


@implementer(IReactorThreads)
class _ThreadedReactor(MemoryReactorClock):
    def __init__(self) -> None:
        super().__init__()
        self.pool = _Pool()

    def getThreadPool(self) -> _Pool:
        return self.pool

    def callFromThread(self, f: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        f(*args, **kwargs)

    def callInThread(self, f: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        f(*args, **kwargs)

    def suggestThreadPoolSize(self, size: int) -> None:
        pass


class ThreadRunnerTests(SynchronousTestCase):
    """
    Blocking work goes to the reactor's pool when it has one.
    """

    def test_noThreadsRunsInline(self) -> None:
        """
        A reactor without threads (a memory reactor) runs the work at once,
        here; its result, or its exception, is the L{Deferred}'s.
        """
        run = threadRunner(MemoryReactorClock())
        self.assertEqual(self.successResultOf(run(lambda a, b=0: a + b, 2, b=3)), 5)
        self.failureResultOf(run(lambda: 1 // 0), ZeroDivisionError)

    def test_threadsRunInThePool(self) -> None:
        """
        A reactor providing IReactorThreads runs the work in its pool, with
        its positional and keyword arguments.
        """
        reactor = _ThreadedReactor()
        run = threadRunner(reactor)
        self.assertEqual(self.successResultOf(run(lambda a, b=0: a + b, 2, b=3)), 5)
        self.assertEqual(reactor.pool.ran, 1)
        self.failureResultOf(run(lambda: 1 // 0), ZeroDivisionError)
        self.assertEqual(reactor.pool.ran, 2)

    def test_mirrorReader(self) -> None:
        """
        The mirror reads pi's file in the pool when there is one, else
        inline; the answer is the same.
        """
        reactor = _ThreadedReactor()
        inPool = Mirror(reactor=reactor, mcpUrl=None, enabled=False)._read
        here = Mirror(reactor=MemoryReactorClock(), mcpUrl=None, enabled=False)._read
        kwargs = dict(sessionId="s", model="m", createdAt=0.0, person="p", title=None, parent=None)
        missing = Path(self.mktemp())
        self.assertIsNone(self.successResultOf(inPool(missing, **kwargs)))
        self.assertIsNone(self.successResultOf(here(missing, **kwargs)))
        self.assertEqual(reactor.pool.ran, 1)

    def test_intersections(self) -> None:
        """
        The host's reactor is a client's and more; each extends what it
        joins, so it is handed on to a narrower package.
        """
        from twisted.internet.interfaces import IReactorProcess, IReactorTCP, IReactorTime

        self.assertTrue(IHostReactor.extends(IClientReactor))
        for part in (IReactorTime, IReactorTCP, IReactorProcess):
            self.assertTrue(IHostReactor.extends(part), part)


class CancelIfActiveTests(SynchronousTestCase):
    """
    L{cancelIfActive} lets go of a timer in whatever state it is.
    """

    def test_pending(self) -> None:
        """
        A pending call is cancelled: it never runs.
        """
        clock = MemoryReactorClock()
        ran: list[int] = []
        call = clock.callLater(1, ran.append, 1)
        cancelIfActive(call)
        self.assertFalse(call.active())
        clock.advance(2)
        self.assertEqual(ran, [])

    def test_doneCancelledOrNone(self) -> None:
        """
        A call that already ran, one already cancelled, and no call at all
        are left as they are, without the error C{cancel} would raise.
        """
        clock = MemoryReactorClock()
        ran: list[int] = []
        done = clock.callLater(1, ran.append, 1)
        clock.advance(1)
        cancelled = clock.callLater(1, ran.append, 2)
        cancelled.cancel()
        for call in (done, cancelled, None):
            cancelIfActive(call)
        clock.advance(2)
        self.assertEqual(ran, [1])


def _path(sessionId: str, tail: str = "") -> str:
    return f"/sessions/{sessionId}{tail}"


def _route(op: Any, request: dict[str, Any]) -> Call:
    return callFor(op, request, _path, "s1", 7)


class LineTests(SynchronousTestCase):
    """
    A ride's request line, read and routed without a ride.
    """

    def test_blankAndBroken(self) -> None:
        """
        A blank line is skipped; a line that is not a JSON object with a
        requestId is answered with the error frame.
        """
        self.assertIsNone(readLine(b"  \r", False, _route))
        codes = [
            frame["code"]  # type: ignore[index]
            for frame in (
                readLine(b"\xff", False, _route),
                readLine(b"{nope", False, _route),
                readLine(b"[1]", False, _route),
                readLine(b'{"op": "list"}', False, _route),
                readLine(b'{"op": "dance", "requestId": "r"}', False, _route),
            )
        ]
        self.assertEqual(
            codes,
            ["invalid_json", "invalid_json", "invalid_request", "invalid_request", "invalid_request"],
        )

    def test_watchOnly(self) -> None:
        """
        A ride that only watches refuses a prompt, and sends a watch.
        """
        refused = readLine(b'{"op": "prompt", "requestId": "r", "text": "hi"}', True, _route)
        self.assertEqual(refused["requestId"], "r")  # type: ignore[index]
        line = readLine(b'{"op": "watch", "requestId": "w"}', True, _route)
        self.assertEqual(
            line, Line("w", "watch", Call(method="GET", path="/sessions/s1/events", query={"since": "7"}))
        )

    def test_command(self) -> None:
        """
        A command op goes to the session's commands, typed by its op.
        """
        line = readLine(b'{"op": "prompt", "requestId": "r", "text": "hi"}', False, _route)
        assert isinstance(line, Line)
        self.assertEqual(line.call.path, "/sessions/s1/commands")
        self.assertEqual(line.call.payload, {"requestId": "r", "text": "hi", "type": "prompt"})
