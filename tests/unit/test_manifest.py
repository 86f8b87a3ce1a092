"""
The gardend manifest (C{services/vehicle/service.json}): parsed and resolved
as gardend does, the environment it injects, and the service the stand-in
makes of it (the supervised child itself: L{tests.unit.test_supervise}).
"""

from __future__ import annotations

from pathlib import Path

from twisted.internet.defer import Deferred
from twisted.trial.unittest import SynchronousTestCase

from vehicle_local import ServiceFailed
from vehicle_local.standin import Manifest, ManifestError, StandIn
from vehicle_local.standin._manifest import INJECTED

from tests.support._localrun import REPO
from tests.support.gardend import SECRET, makeConfig
from tests.support.manifest import MANIFEST, writeManifest
from tests.support.processes import HealthClient, ProcessReactor


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


class ServiceForTests(SynchronousTestCase):
    """
    L{StandIn.serviceFor} and L{StandIn.launch}: the service gardend would
    start from a manifest, as a supervised child, fronted once healthy.
    """

    def setUp(self) -> None:
        self.tmp = Path(self.mktemp()).absolute()
        self.reactor = ProcessReactor()
        self.http = HealthClient()
        self.standIn = StandIn(root=self.tmp / "gardend", config=makeConfig(),
                               reactor=self.reactor, http=self.http)
        self.standIn.listen(port=8711)
        self.manifest = Manifest.fromPath(writeManifest(self.tmp, healthPath="/ready"))

    def test_asGardendStartsIt(self) -> None:
        """
        The manifest's command, arguments and folder; gardend's variables
        over the operator's and the manifest's, made as it starts (the data
        dir with them); its health at its own port.
        """
        service = self.standIn.serviceFor(
            self.manifest, dataDir=self.tmp / "data", logPath=self.tmp / "logs" / "host.log",
            baseEnv={"PATH": "/bin", "PORT": "1"},
        )
        self.assertEqual(service.name, "vehicle")
        self.assertFalse((self.tmp / "data").exists())
        service.startService()
        [spawned] = self.reactor.spawned
        self.assertEqual(spawned.args, [self.manifest.command, "-x"])
        self.assertEqual(spawned.path, str(self.manifest.workingDir))
        env = dict(spawned.env or {})
        self.assertEqual(set(INJECTED) - set(env), set())
        self.assertEqual(env["A"], "1")
        self.assertEqual(env["PATH"], "/bin")
        self.assertEqual(env["DATA_DIR"], str(self.tmp / "data"))
        self.assertEqual(env["MNEMOSYNE_MCP_URL"], "http://127.0.0.1:8711/mcp")
        self.assertEqual(env["GARDEN_LOOPBACK_API_URL"], "http://127.0.0.1:8711")
        self.assertEqual(env["MNEMOSYNE_INTERNAL_SERVICE_SECRET"], SECRET)
        self.assertNotEqual(env["PORT"], "1")
        self.assertEqual(service.url, f"http://127.0.0.1:{env['PORT']}")
        self.assertEqual(service.healthPath, "/ready")
        self.assertTrue((self.tmp / "data").is_dir())

    def test_launchFronts(self) -> None:
        """
        Once its health path answers 200, the gateway forwards to it.
        """
        self.http.answers = [503, 200]
        d = Deferred.fromCoroutine(self.standIn.launch(
            self.manifest, dataDir=self.tmp / "data", logPath=self.tmp / "host.log",
            baseEnv={"PATH": "/bin"}))
        self.assertNoResult(d)
        self.reactor.advance(0.1)
        service = self.successResultOf(d)
        self.assertEqual(self.standIn.gateway.serviceUrl, service.url)
        self.assertEqual(self.http.urls, [f"{service.url}/ready"] * 2)

    def test_launchFailsAndStops(self) -> None:
        """
        A service that stays unhealthy is stopped (C{TERM}) and the launch
        fails with L{ServiceFailed}; the gateway is not pointed at it.
        """
        before = self.standIn.gateway.serviceUrl
        d = Deferred.fromCoroutine(self.standIn.launch(
            self.manifest, dataDir=self.tmp / "data", logPath=self.tmp / "host.log",
            baseEnv={"PATH": "/bin"}, healthSeconds=1))
        self.reactor.pump([0.1] * 11)
        [spawned] = self.reactor.spawned
        self.assertEqual(spawned.transport.signals, ["TERM"])
        self.assertNoResult(d)
        spawned.end(signal=15)
        self.failureResultOf(d, ServiceFailed)
        self.assertEqual(self.standIn.gateway.serviceUrl, before)
