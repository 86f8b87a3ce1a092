"""
The gardend manifest (C{services/vehicle/service.json}): parsed and resolved
as gardend does, the environment it injects, the supervised child, and the
stand-in starting the real host from the project's own manifest.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from twisted.internet.defer import Deferred, succeed
from twisted.internet.error import ProcessDone, ProcessTerminated
from twisted.internet.task import Clock
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase

from vehicle_local.standin import ChildProcess, Manifest, ManifestError, describeStatus, waitHealthy
from vehicle_local.standin._manifest import INJECTED

from tests.support._localrun import REPO
from tests.support.manifest import MANIFEST, writeManifest


class ManifestTests(SynchronousTestCase):
    def test_theProjectsManifest(self) -> None:
        """
        The shipped manifest starts C{twistd vehicle} from the repository's
        C{.venv}, in the repository, checked at C{/health}, with the seed's
        flags.
        """
        manifest = Manifest.fromPath(MANIFEST)
        self.assertEqual(manifest.serviceId, "vehicle")
        self.assertEqual(manifest.command, str(REPO / ".venv" / "bin" / "twistd"))
        self.assertEqual(manifest.workingDir, REPO)
        self.assertEqual(manifest.args[-1], "vehicle")
        self.assertIn("--pidfile=", manifest.args)
        self.assertEqual((manifest.healthPath, manifest.proxyMount),
                         ("/health", "/services/vehicle"))
        self.assertTrue(manifest.delegateCaller)
        self.assertTrue(manifest.acceptsModelKey)
        self.assertFalse({name for name, _ in manifest.env} & set(INJECTED))

    def test_relativePaths(self) -> None:
        """
        A command with a path separator and the working dir resolve against
        the manifest's folder; a bare command is left for C{PATH}; an
        absolute one stays.
        """
        tmp = Path(self.mktemp()).absolute()
        path = writeManifest(tmp)
        manifest = Manifest.fromPath(path)
        self.assertEqual(manifest.command, str(path.parent / "bin" / "run"))
        self.assertEqual(manifest.workingDir, path.parent.parent)
        self.assertEqual(Manifest.fromPath(writeManifest(tmp, command="node")).command, "node")
        self.assertEqual(Manifest.fromPath(writeManifest(tmp, command="/bin/true")).command, "/bin/true")

    def test_malformed(self) -> None:
        tmp = Path(self.mktemp()).absolute()
        cases = {
            "serviceId": dict(serviceId=None),
            "args": dict(args="-n"),
            "env[0]": dict(env=[{"name": "A"}]),
            "healthPath must start with /": dict(healthPath="health"),
            "delegateCaller": dict(delegateCaller="yes"),
        }
        for words, fields in cases.items():
            with self.assertRaises(ManifestError) as caught:
                Manifest.fromPath(writeManifest(tmp, **fields))
            self.assertIn(words, str(caught.exception))
        with self.assertRaises(ManifestError) as caught:
            Manifest.fromPath(tmp / "nowhere.json")
        self.assertIn("cannot read", str(caught.exception))
        path = writeManifest(tmp)
        path.write_text("[1]")
        self.assertRaises(ManifestError, Manifest.fromPath, path)

    def test_injectedWins(self) -> None:
        """
        The operator's variables, then the manifest's, then gardend's: the
        manifest cannot override what gardend injects.
        """
        tmp = Path(self.mktemp()).absolute()
        manifest = Manifest.fromPath(writeManifest(tmp, env=[
            {"name": "A", "value": "manifest"}, {"name": "PORT", "value": "1"},
            {"name": "DATA_DIR", "value": "/elsewhere"}]))
        env = manifest.environment(
            {"A": "base", "B": "base", "PORT": "2"}, {"PORT": "4242", "DATA_DIR": "/data"}
        )
        self.assertEqual(env, {"A": "manifest", "B": "base", "PORT": "4242", "DATA_DIR": "/data"})
        self.assertRaises(ManifestError, manifest.environment, {}, {"HOME": "/"})

    def test_onlyVehicleAtItsMount(self) -> None:
        tmp = Path(self.mktemp()).absolute()
        manifest = Manifest.fromPath(writeManifest(tmp, delegateCaller=True))
        service = manifest.serviceConfig("http://127.0.0.1:1", "s")
        self.assertEqual((service.delegateCaller, service.acceptsModelKey), (True, False))
        for fields in (dict(serviceId="other"), dict(proxyMount="/services/other")):
            other = Manifest.fromPath(writeManifest(tmp, **fields))
            self.assertRaises(ManifestError, other.serviceConfig, "http://127.0.0.1:1", "s")


class _FakeTransport:
    def __init__(self) -> None:
        self.signals: list[str] = []
        self.stdinClosed = False

    def signalProcess(self, name: str) -> None:
        self.signals.append(name)

    def closeStdin(self) -> None:
        self.stdinClosed = True


class ChildProcessTests(SynchronousTestCase):
    def child(self, **kw: Any) -> tuple[ChildProcess, _FakeTransport, Clock]:
        clock = Clock()
        log = Path(self.mktemp())
        log.parent.mkdir(parents=True, exist_ok=True)
        child = ChildProcess(name="part", logPath=log, clock=clock, **kw)
        transport = _FakeTransport()
        child.makeConnection(transport)  # type: ignore[arg-type]
        return child, transport, clock

    def test_linesLoggedAndEchoed(self) -> None:
        """
        Output goes to the log; whole lines are echoed with the part's
        name; the last ones are kept, the partial one included.
        """
        seen: list[tuple[str, str]] = []
        child, transport, _ = self.child(echo=lambda n, l: seen.append((n, l)), tailLines=2)
        self.assertTrue(transport.stdinClosed)
        child._log = open(child.logPath, "ab", buffering=0)
        child.childDataReceived(1, b"one\ntw")
        child.childDataReceived(2, b"o\r\nthree\nfou")
        self.assertEqual(seen, [("part", "one"), ("part", "two"), ("part", "three")])
        self.assertEqual(child.lastLines(), ["two", "three", "fou"])
        child.processEnded(Failure(ProcessDone(0)))
        self.assertEqual(child.logPath.read_bytes(), b"one\ntwo\r\nthree\nfou")

    def test_exitStatus(self) -> None:
        for reason, status in ((ProcessDone(0), 0),
                               (ProcessTerminated(exitCode=3), 3),
                               (ProcessTerminated(signal=9), -9)):
            child, _, _ = self.child()
            child.processEnded(Failure(reason))
            self.assertEqual(self.successResultOf(child.ended), status)
            self.assertFalse(child.running)
        self.assertEqual(describeStatus(-9), "killed by SIGKILL")
        self.assertEqual(describeStatus(1), "exit status 1")

    def test_stopEscalates(self) -> None:
        """
        C{TERM} first; C{KILL} only if it is still there after the grace.
        """
        child, transport, clock = self.child()
        d = child.stop(graceSeconds=5)
        self.assertEqual(transport.signals, ["TERM"])
        clock.advance(4.9)
        self.assertEqual(transport.signals, ["TERM"])
        clock.advance(0.2)
        self.assertEqual(transport.signals, ["TERM", "KILL"])
        self.assertNoResult(d)
        child.processEnded(Failure(ProcessTerminated(signal=9)))
        self.assertEqual(self.successResultOf(d), -9)

    def test_stopInTime(self) -> None:
        child, transport, clock = self.child()
        d = child.stop(graceSeconds=5)
        child.processEnded(Failure(ProcessDone(0)))
        self.assertEqual(self.successResultOf(d), 0)
        self.assertEqual(clock.getDelayedCalls(), [])
        self.assertEqual(self.successResultOf(child.stop()), 0)
        self.assertEqual(transport.signals, ["TERM"])


class _Response:
    def __init__(self, code: int) -> None:
        self.code = code

    def content(self) -> Deferred:
        return succeed(b"")


class _Client:
    def __init__(self, answers: list[Any]) -> None:
        self.answers = answers
        self.urls: list[str] = []

    def get(self, url: str, timeout: float) -> Deferred:
        self.urls.append(url)
        answer = self.answers.pop(0) if self.answers else 503
        if isinstance(answer, Exception):
            from twisted.internet.defer import fail

            return fail(answer)
        return succeed(_Response(answer))


class WaitHealthyTests(SynchronousTestCase):
    def child(self, clock: Clock) -> ChildProcess:
        return ChildProcess(name="p", logPath=Path(self.mktemp()), clock=clock)

    def test_untilOk(self) -> None:
        clock = Clock()
        client = _Client([ConnectionRefusedError(), 503, 200])
        d = Deferred.fromCoroutine(waitHealthy(client, clock, self.child(clock), "http://h/health", 5))
        clock.advance(0.1)
        clock.advance(0.1)
        self.assertIs(self.successResultOf(d), True)
        self.assertEqual(client.urls, ["http://h/health"] * 3)

    def test_deadline(self) -> None:
        clock = Clock()
        d = Deferred.fromCoroutine(waitHealthy(_Client([]), clock, self.child(clock), "u", 1))
        for _ in range(11):
            clock.advance(0.1)
        self.assertIs(self.successResultOf(d), False)

    def test_childEnded(self) -> None:
        clock = Clock()
        child = self.child(clock)
        d = Deferred.fromCoroutine(waitHealthy(_Client([]), clock, child, "u", 60))
        child.processEnded(Failure(ProcessTerminated(exitCode=1)))
        clock.advance(0.1)
        self.assertIs(self.successResultOf(d), False)
