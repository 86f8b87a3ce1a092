"""
Tests for L{vehicle_local._supervise}: a child process kept as a service
(L{Supervised}: spawned on start, C{TERM} then C{KILL} on stop, never
restarted, its health asked for), one life of it (L{ChildProcess}: the log,
the last lines, the end), and the tree whose children stop in turn
(L{InTurn}); over a fake process reactor, as Twisted's procmon tests do.
"""

from __future__ import annotations

import errno
from pathlib import Path
from typing import Any

from twisted.application.service import Service
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IProcessTransport
from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase
from zope.interface.verify import verifyObject

from vehicle_local import (
    ChildProcess,
    InTurn,
    ServiceFailed,
    Supervised,
    describeStatus,
    waitHealthy,
)

from tests.support.processes import HealthClient, ProcessReactor


class ChildProcessTests(SynchronousTestCase):
    """
    L{ChildProcess}: one life of one child.
    """

    def spawn(self, **kw: Any) -> tuple[ChildProcess, ProcessReactor]:
        reactor = ProcessReactor()
        log = Path(self.mktemp()) / "logs" / "part.log"
        child = ChildProcess(name="part", logPath=log, **kw)
        child.spawn(reactor, "/bin/part", ["--flag"], {"PATH": "/bin"}, Path("/work"))
        return child, reactor

    def test_spawned(self) -> None:
        """
        The command is the first argument too; the environment is the one
        given and nothing else; stdin is closed; the log's folder is made.
        """
        child, reactor = self.spawn()
        [spawned] = reactor.spawned
        self.assertTrue(verifyObject(IProcessTransport, spawned.transport))
        self.assertEqual((spawned.executable, spawned.args), ("/bin/part", ["/bin/part", "--flag"]))
        self.assertEqual((spawned.env, spawned.path), ({"PATH": "/bin"}, "/work"))
        self.assertEqual(spawned.childFDs, {0: "w", 1: "r", 2: "r"})
        self.assertTrue(spawned.transport.stdinClosed)
        self.assertTrue(child.logPath.exists())
        self.assertEqual(child.logPath.stat().st_mode & 0o777, 0o600)

    def test_linesLoggedAndEchoed(self) -> None:
        """
        Output goes to the log as it comes; whole lines are echoed with the
        part's name; the last ones are kept, the partial one included.
        """
        seen: list[tuple[str, str]] = []
        child, reactor = self.spawn(echo=lambda n, l: seen.append((n, l)), tailLines=2)
        child.childDataReceived(1, b"one\ntw")
        child.childDataReceived(2, b"o\r\nthree\nfou")
        self.assertEqual(seen, [("part", "one"), ("part", "two"), ("part", "three")])
        self.assertEqual(child.lastLines(), ["two", "three", "fou"])
        self.assertEqual(child.logPath.read_bytes(), b"one\ntwo\r\nthree\nfou")
        reactor.spawned[0].end()
        self.assertEqual(child.logPath.read_bytes(), b"one\ntwo\r\nthree\nfou")

    def test_exitStatus(self) -> None:
        """
        Its end fires every waiter with the status: 0, the exit code, or
        minus the signal; a waiter that comes later has it at once.
        """
        for ending, status in (({}, 0), ({"exitCode": 3}, 3), ({"signal": 9}, -9)):
            child, reactor = self.spawn()
            first, second = child.whenEnded(), child.whenEnded()
            self.assertTrue(child.running)
            self.assertNoResult(first)
            reactor.spawned[0].end(**ending)
            self.assertEqual(
                [self.successResultOf(first), self.successResultOf(second),
                 self.successResultOf(child.whenEnded())],
                [status] * 3,
            )
            self.assertFalse(child.running)
        self.assertEqual(describeStatus(-9), "killed by SIGKILL")
        self.assertEqual(describeStatus(1), "exit status 1")

    def test_cannotSpawn(self) -> None:
        """
        A program that cannot be started has ended (127), the reason as
        its last line, in its log too.
        """
        reactor = ProcessReactor()
        reactor.spawnError = FileNotFoundError(errno.ENOENT, "No such file or directory")
        child = ChildProcess(name="part", logPath=Path(self.mktemp()) / "part.log")
        child.spawn(reactor, "/nowhere", [], {})
        self.assertEqual(self.successResultOf(child.whenEnded()), 127)
        self.assertIn("cannot start /nowhere", child.lastLines()[-1])
        self.assertIn(b"No such file", child.logPath.read_bytes())

    def test_signalAfterTheEnd(self) -> None:
        """
        A signal to a child that is gone is not sent, and not an error.
        """
        child, reactor = self.spawn()
        transport = reactor.spawned[0].transport
        child.signal("TERM")
        reactor.spawned[0].end(signal=15)
        child.signal("KILL")
        self.assertEqual(transport.signals, ["TERM"])


class SupervisedTests(SynchronousTestCase):
    """
    L{Supervised}: a child as a service.
    """

    def setUp(self) -> None:
        self.reactor = ProcessReactor()
        self.made: list[str] = []

    def service(self, **kw: Any) -> Supervised:
        def environment() -> dict[str, str]:
            self.made.append("env")
            return {"PATH": "/bin", "PORT": "4242"}

        fields: dict[str, Any] = dict(
            name="model", command="/bin/model", args=("--port", "4242"),
            environment=environment, logPath=Path(self.mktemp()) / "model.log",
            reactor=self.reactor, url="http://127.0.0.1:4242", killTime=5.0,
        )
        fields.update(kw)
        return Supervised(**fields)

    def test_startSpawns(self) -> None:
        """
        Nothing is spawned, nor its environment made, until the service
        starts; then the child is spawned once, in its folder.
        """
        service = self.service(cwd=Path("/srv"))
        self.assertEqual((self.reactor.spawned, self.made), ([], []))
        service.startService()
        [spawned] = self.reactor.spawned
        self.assertEqual(spawned.args, ["/bin/model", "--port", "4242"])
        self.assertEqual(spawned.env, {"PATH": "/bin", "PORT": "4242"})
        self.assertEqual(spawned.path, "/srv")
        self.assertEqual(self.made, ["env"])
        self.assertTrue(service.running)

    def test_stopEscalates(self) -> None:
        """
        C{TERM} first; C{KILL} only once C{killTime} has passed; the stop
        fires when the child is gone.
        """
        service = self.service()
        service.startService()
        transport = self.reactor.spawned[0].transport
        stopped = service.stopService()
        self.assertEqual(transport.signals, ["TERM"])
        self.reactor.advance(4.9)
        self.assertEqual(transport.signals, ["TERM"])
        self.reactor.advance(0.2)
        self.assertEqual(transport.signals, ["TERM", "KILL"])
        self.assertNoResult(stopped)
        self.reactor.spawned[0].end(signal=9)
        self.successResultOf(stopped)
        self.assertFalse(service.running)

    def test_stopInTime(self) -> None:
        """
        A child that ends on C{TERM} is not killed: the C{KILL} is
        cancelled; a second stop has nothing to do.
        """
        service = self.service()
        service.startService()
        transport = self.reactor.spawned[0].transport
        stopped = service.stopService()
        self.reactor.spawned[0].end()
        self.successResultOf(stopped)
        self.assertEqual(self.reactor.getDelayedCalls(), [])
        self.successResultOf(service.stopService())
        self.assertEqual(transport.signals, ["TERM"])

    def test_stopNeverStarted(self) -> None:
        """
        Stopping a service that never started (its tree failed to start
        before it) does nothing.
        """
        service = self.service()
        self.successResultOf(service.stopService())
        self.assertEqual(self.reactor.spawned, [])

    def test_notRestarted(self) -> None:
        """
        Unlike procmon's, a child that ends is not started again, however
        long one waits: its end is news for its owner.
        """
        service = self.service()
        service.startService()
        ended = service.whenEnded()
        self.reactor.spawned[0].end(exitCode=1)
        self.assertEqual(self.successResultOf(ended), 1)
        self.reactor.advance(3600)
        self.assertEqual(len(self.reactor.spawned), 1)
        self.assertTrue(service.running)

    def test_whenHealthy(self) -> None:
        """
        Healthy once its health path answers 200, asked every tenth of a
        second.
        """
        service = self.service(healthPath="/ready")
        service.startService()
        client = HealthClient([ConnectionRefusedError(), 503, 200])
        d = Deferred.fromCoroutine(service.whenHealthy(client, 5))
        self.reactor.advance(0.1)
        self.assertNoResult(d)
        self.reactor.advance(0.1)
        self.successResultOf(d)
        self.assertEqual(client.urls, ["http://127.0.0.1:4242/ready"] * 3)

    def test_neverHealthy(self) -> None:
        """
        Not healthy in time: L{ServiceFailed}, naming the URL; the child
        is left running (its owner stops it).
        """
        service = self.service()
        service.startService()
        d = Deferred.fromCoroutine(service.whenHealthy(HealthClient(), 1))
        self.reactor.pump([0.1] * 11)
        failure = self.failureResultOf(d, ServiceFailed)
        self.assertIs(failure.value.service, service)
        self.assertEqual(str(failure.value), "http://127.0.0.1:4242/health did not answer 200 in 1 s")
        self.assertEqual(self.reactor.spawned[0].transport.signals, [])

    def test_endedBeforeHealthy(self) -> None:
        """
        A child that ends before it answers: L{ServiceFailed} at once.
        """
        service = self.service()
        service.startService()
        d = Deferred.fromCoroutine(service.whenHealthy(HealthClient(), 60))
        self.reactor.spawned[0].end(exitCode=2)
        self.reactor.advance(0.1)
        failure = self.failureResultOf(d, ServiceFailed)
        self.assertEqual(str(failure.value), "it stopped before answering its health check")


class WaitHealthyTests(SynchronousTestCase):
    """
    L{waitHealthy}: the poll under L{Supervised.whenHealthy}.
    """

    def child(self) -> ChildProcess:
        return ChildProcess(name="p", logPath=Path(self.mktemp()))

    def test_deadline(self) -> None:
        """
        Asked until the deadline, then C{False}.
        """
        clock = Clock()
        client = HealthClient()
        d = Deferred.fromCoroutine(waitHealthy(client, clock, self.child(), "u", 1))
        clock.pump([0.1] * 9)
        self.assertNoResult(d)
        clock.pump([0.1] * 2)
        self.assertIs(self.successResultOf(d), False)
        self.assertGreaterEqual(len(client.urls), 10)


class _Part(Service):
    """
    A service whose stop is a L{Deferred} the test fires.
    """

    def __init__(self, name: str, log: list[str]) -> None:
        self.name = name
        self.log = log
        self.stopping: Deferred[None] = Deferred()

    def stopService(self) -> Deferred[None]:
        Service.stopService(self)
        self.log.append(self.name)
        return self.stopping


class InTurnTests(SynchronousTestCase):
    """
    L{InTurn}: children stop one at a time, the last added first.
    """

    def test_inTurn(self) -> None:
        """
        The next child is asked to stop only once the one after it has
        stopped; the tree's stop fires after the first added has.
        """
        log: list[str] = []
        tree = InTurn()
        parts = [_Part(name, log) for name in ("logs", "gardend", "model", "vehicle")]
        for part in parts:
            part.setServiceParent(tree)
        tree.startService()
        stopped = tree.stopService()
        self.assertFalse(tree.running)
        for count, part in enumerate(reversed(parts), 1):
            self.assertEqual(log, ["vehicle", "model", "gardend", "logs"][:count])
            self.assertNoResult(stopped)
            part.stopping.callback(None)
        self.successResultOf(stopped)

    def test_aFailedStopDoesNotStopTheTurn(self) -> None:
        """
        A child whose stop fails is logged, and the rest still stop.
        """
        log: list[str] = []
        tree = InTurn()
        first, second = _Part("first", log), _Part("second", log)
        first.setServiceParent(tree)
        second.setServiceParent(tree)
        tree.startService()
        stopped = tree.stopService()
        second.stopping.errback(RuntimeError("stuck"))
        first.stopping.callback(None)
        self.successResultOf(stopped)
        self.assertEqual(log, ["second", "first"])
        self.assertEqual(len(self.flushLoggedErrors(RuntimeError)), 1)
