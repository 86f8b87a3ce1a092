"""
Tests for L{vehicle_local}'s local run as a service tree
(L{makeLocalRun}, L{LocalRun}, L{LogFile}, L{runLocally}) over a fake
process reactor: the parts and their order, the banner once every part is
healthy, a stop down the tree (the host first, each part once the one
after it is gone, the log files closed), a part that dies, a busy port.
The same run for real, from a clean clone: L{tests.live.test_local}.
"""

from __future__ import annotations

import io
import json
import os
import sys
from pathlib import Path
from typing import Any

from twisted.internet.defer import Deferred
from twisted.internet.error import CannotListenError
from twisted.logger import Logger, LogPublisher
from twisted.trial.unittest import SynchronousTestCase

from vehicle_local import LocalRun, LocalRunFailed, LogFile, Options, makeLocalRun, runLocally

from tests.support.manifest import MANIFEST
from tests.support.processes import HealthClient, ProcessReactor, SpawnedProcess


def openUnder(folder: Path) -> list[str]:
    """
    The files under C{folder} this process holds open.
    """
    found = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(str(folder) + os.sep):
            found.append(target)
    return found


class BusyReactor(ProcessReactor):
    """
    A reactor where every TCP port is taken.
    """

    def listenTCP(self, port: int, factory: Any, backlog: int = 50, interface: str = "") -> Any:
        raise CannotListenError(interface, port, OSError("Address already in use"))


class LocalRunTests(SynchronousTestCase):
    """
    One local run's tree, driven by hand.
    """

    def setUp(self) -> None:
        if not os.path.isdir("/proc/self/fd"):
            self.skipTest("needs /proc to see open files")
        self.data = Path(self.mktemp()).absolute()
        self.reactor = ProcessReactor()
        self.http = HealthClient()
        self.said: list[str] = []
        self.publisher = LogPublisher()
        self.environ = {"PATH": "/bin:/usr/bin", "HOME": str(self.data)}

    def build(self, *args: str, reactor: ProcessReactor | None = None, **environ: str) -> LocalRun:
        options = Options()
        options.parseOptions(["--port", "8799", "--data-dir", str(self.data),
                              "--manifest", str(MANIFEST), *args])
        return makeLocalRun(
            options, {**self.environ, **environ}, reactor or self.reactor,
            publisher=self.publisher, python="/usr/bin/python3", http=self.http,
            say=self.said.append,
        )

    def running(self, *args: str) -> tuple[LocalRun, "Deferred[None]", SpawnedProcess, SpawnedProcess]:
        """
        A run started whose parts have both answered: the banner is out.
        """
        local = self.build(*args)
        self.http.answers = [200, 200]
        run = Deferred.fromCoroutine(local.run())
        model, host = self.reactor.spawned
        self.assertEqual(len(self.said), 1)
        return local, run, model, host

    def test_theTree(self) -> None:
        """
        The parts in the order they start: this process's log, the
        stand-in serving, the model, the host; nothing started yet; the
        key kept and C{models.json} pointing at the scripted model.
        """
        local = self.build()
        self.assertEqual([part.name for part in local], ["logs", "gardend", "model", "vehicle"])
        self.assertEqual(self.reactor.spawned, [])
        self.assertEqual(self.reactor.tcpServers, [])
        self.assertEqual((self.data / "master-key").read_text().strip(), local.master)
        models = json.loads((self.data / "models.json").read_text())
        assert local.model is not None
        self.assertEqual(models["providers"]["scripted"]["baseUrl"], local.model.url + "/v1")

    def test_bannerOnceEveryPartIsHealthy(self) -> None:
        """
        Starting listens on the port and spawns the model and the host (as
        the manifest says, with the model's settings); the banner comes
        only once both have answered, and the gateway then fronts the host.
        """
        local = self.build()
        self.http.answers = [503, 200, 503]
        run = Deferred.fromCoroutine(local.run())
        [(port, _, _, interface)] = self.reactor.tcpServers
        self.assertEqual((port, interface), (8799, "127.0.0.1"))
        model, host = self.reactor.spawned
        self.assertEqual(model.args, ["/usr/bin/python3", "-m", "vehicle_local.model", "--port",
                                      local.model.url.rsplit(":", 1)[1] if local.model else ""])
        self.assertEqual(host.args[-1], "vehicle")
        env = dict(host.env or {})
        self.assertEqual(env["VEHICLE_DEFAULT_MODEL"], "scripted/echo-1")
        self.assertEqual(env["VEHICLE_MODELS"], str(self.data / "models.json"))
        self.assertEqual(env["MNEMOSYNE_MCP_URL"], "http://127.0.0.1:8799/mcp")
        self.reactor.advance(0.1)
        self.assertEqual(self.said, [])
        self.http.answers = [200]
        self.reactor.advance(0.1)
        [banner] = self.said
        self.assertIn("URL:   http://127.0.0.1:8799/services/vehicle/g/demo", banner)
        code = local.standIn.page.login.code
        self.assertIsNotNone(code)
        self.assertIn(f"page:  http://127.0.0.1:8799/#login={code}\n", banner)
        self.assertIn(f"VEHICLE_TOKEN={local.master} .venv/bin/vehicle ride "
                      "--gardend http://127.0.0.1:8799 --graph demo --new", banner)
        self.assertEqual(local.standIn.gateway.serviceUrl, local.host.url)
        self.assertNoResult(run)

    def test_stopDownTheTree(self) -> None:
        """
        The tree's stop (what Ctrl-C brings, through the reactor's
        shutdown): the host is sent C{TERM} first, the model only once the
        host is gone; then the stand-in stops serving and every log file
        is closed; the run ends without a failure.
        """
        local, run, model, host = self.running()
        model.protocol.childDataReceived(1, b"http://127.0.0.1:1/v1\n")
        Logger(observer=self.publisher).info("the stand-in says {what}", what="hello")
        self.assertNotEqual(openUnder(self.data / "logs"), [])
        stopped = local.stopService()
        self.assertEqual((host.transport.signals, model.transport.signals), (["TERM"], []))
        host.end(signal=15)
        self.assertEqual(model.transport.signals, ["TERM"])
        self.successResultOf(run)
        self.assertNoResult(stopped)
        model.end()
        self.successResultOf(stopped)
        self.assertEqual(openUnder(self.data / "logs"), [])
        self.assertRaises(RuntimeError, lambda: local.standIn.url)
        logs = self.data / "logs"
        self.assertIn("the stand-in says hello", (logs / "gardend.log").read_text())
        self.assertEqual((logs / "model.log").read_text(), "http://127.0.0.1:1/v1\n")
        self.assertEqual(self.reactor.getDelayedCalls(), [])

    def test_aStuckPartIsKilled(self) -> None:
        """
        A part that does not end on C{TERM} is killed after its grace, and
        the rest then stop.
        """
        local, run, model, host = self.running()
        stopped = local.stopService()
        self.reactor.advance(local.host.killTime)
        self.assertEqual(host.transport.signals, ["TERM", "KILL"])
        host.end(signal=9)
        model.end()
        self.successResultOf(stopped)

    def test_aPartDies(self) -> None:
        """
        A part that ends on its own fails the run (exit 1), with its end
        and its last lines; the tree's stop then stops the rest.
        """
        local, run, model, host = self.running()
        model.protocol.childDataReceived(1, b"http://127.0.0.1:1/v1\n")
        model.end(signal=9)
        self.assertNoResult(run)
        self.reactor.advance(0.5)
        failure = self.failureResultOf(run, LocalRunFailed)
        self.assertEqual(failure.value.status, 1)
        self.assertEqual(
            str(failure.value),
            "vehicle: the scripted model stopped on its own (killed by SIGKILL). "
            f"Its last lines ({self.data / 'logs' / 'model.log'}):\n  http://127.0.0.1:1/v1",
        )
        stopped = local.stopService()
        self.assertEqual(host.transport.signals, ["TERM"])
        host.end(signal=15)
        self.successResultOf(stopped)

    def test_aPartEndsWithTheRun(self) -> None:
        """
        Ctrl-C in a terminal reaches every part at once: a part that ends
        just before the tree's stop begins ended with it, not on its own.
        """
        local, run, model, host = self.running()
        model.end()
        self.reactor.advance(0.2)
        stopped = local.stopService()
        host.end(signal=15)
        self.successResultOf(stopped)
        self.reactor.advance(0.3)
        self.successResultOf(run)

    def test_theHostDoesNotStart(self) -> None:
        """
        The host ending before it answers fails the run with its lines.
        """
        local = self.build()
        self.http.answers = [200]
        run = Deferred.fromCoroutine(local.run())
        model, host = self.reactor.spawned
        host.protocol.childDataReceived(2, b"vehicle: no such graph\n")
        host.end(exitCode=1)
        self.reactor.advance(0.1)
        self.reactor.advance(0.5)
        failure = self.failureResultOf(run, LocalRunFailed)
        self.assertIn("the host (vehicle) did not start: it stopped before answering its "
                      "health check (exit status 1)", str(failure.value))
        self.assertIn("  vehicle: no such graph", str(failure.value))
        self.assertEqual(self.said, [])

    def test_portInUse(self) -> None:
        """
        A busy port is one line naming it (exit 2); nothing is spawned, and
        the tree still stops (its log file closed).
        """
        reactor = BusyReactor()
        local = self.build(reactor=reactor)
        failure = self.failureResultOf(Deferred.fromCoroutine(local.run()), LocalRunFailed)
        self.assertEqual(
            (failure.value.status, str(failure.value)),
            (2, "vehicle: port 8799 is in use; choose another with --port"),
        )
        self.assertEqual(reactor.spawned, [])
        self.successResultOf(local.stopService())
        self.assertEqual(openUnder(self.data / "logs"), [])

    def test_verbose(self) -> None:
        """
        With C{-v}, each part's lines and the stand-in's log events are
        shown, named.
        """
        local, run, model, host = self.running("-v")
        host.protocol.childDataReceived(1, b"serving 0 sessions\n")
        Logger(observer=self.publisher).info("forwarded")
        self.assertEqual(self.said[1:], ["[vehicle] serving 0 sessions", "[gardend] forwarded"])

    def test_aRealModel(self) -> None:
        """
        With C{OPENROUTER_API_KEY}, no model is started: the host is given
        the provider and the key.
        """
        local = self.build(OPENROUTER_API_KEY="sk-or-test")
        self.assertEqual([part.name for part in local], ["logs", "gardend", "vehicle"])
        self.http.answers = [200]
        Deferred.fromCoroutine(local.run())
        [host] = self.reactor.spawned
        self.assertEqual(dict(host.env or {})["VEHICLE_DEFAULT_MODEL"],
                         "openrouter/openai/gpt-4o-mini")
        self.assertIn("with the real model openrouter/openai/gpt-4o-mini", self.said[0])

    def test_runLocally(self) -> None:
        """
        L{runLocally} has the reactor's shutdown stop the tree, and turns a
        failure into one line on standard error and the exit status.
        """
        err = io.StringIO()
        self.patch(sys, "stderr", err)
        reactor = BusyReactor()
        options = Options()
        options.parseOptions(["--port", "8799", "--data-dir", str(self.data),
                              "--manifest", str(MANIFEST)])
        d = Deferred.fromCoroutine(runLocally(
            reactor, options, self.environ, publisher=self.publisher, http=self.http,
            say=self.said.append))
        self.assertEqual(self.failureResultOf(d, SystemExit).value.code, 2)
        self.assertEqual(err.getvalue(), "vehicle: port 8799 is in use; choose another with --port\n")
        [(stop, _, _)] = reactor.triggers["before"]["shutdown"]
        self.assertEqual(stop.__name__, "stopService")

    def test_badManifest(self) -> None:
        """
        A manifest that cannot be read is one line (exit 2).
        """
        options = Options()
        options.parseOptions(["--data-dir", str(self.data), "--manifest", str(self.data / "no.json")])
        with self.assertRaises(LocalRunFailed) as caught:
            makeLocalRun(options, self.environ, self.reactor, publisher=self.publisher)
        self.assertEqual(caught.exception.status, 2)
        self.assertIn("cannot read", str(caught.exception))


class LogFileTests(SynchronousTestCase):
    """
    L{LogFile}: this process's log, while it runs.
    """

    def test_whileRunning(self) -> None:
        """
        Events are appended while it runs, without the factories' chatter;
        once stopped, the file is closed and no longer written.
        """
        path = Path(self.mktemp()).absolute() / "logs" / "gardend.log"
        publisher = LogPublisher()
        log = Logger(observer=publisher)
        service = LogFile(path=path, publisher=publisher)
        service.startService()
        log.info("one {n}", n=1)
        log.info("Starting factory {f}", f="x")
        service.stopService()
        log.info("two")
        text = path.read_text()
        self.assertIn("one 1", text)
        self.assertNotIn("factory", text)
        self.assertNotIn("two", text)
        self.assertEqual(openUnder(path.parent), [])
