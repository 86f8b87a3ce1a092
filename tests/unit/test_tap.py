"""
Tests for L{vehicle._tap}: C{twistd vehicle}'s options (the refusals, the
defaults gardend relies on, the scrubbed environment), the service tree
L{makeService} builds, and the plugin's discovery.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from twisted.application.internet import StreamServerEndpointService
from twisted.application.service import IServiceMaker, MultiService
from twisted.internet.testing import MemoryReactorClock
from twisted.plugin import getPlugins
from twisted.trial.unittest import SynchronousTestCase

from vehicle import _tap


SECRET = "tap-secret-0123"


class OptionsTests(SynchronousTestCase):
    """
    L{_tap.Options} reads the command line and gardend's environment.
    """

    def options(self, argv: list[str], **env: str) -> _tap.Options:
        environ = {"MNEMOSYNE_INTERNAL_SERVICE_SECRET": SECRET, **env}
        environ = {k: v for k, v in environ.items() if v is not None}
        self.environ = environ
        self.patch(os, "environ", environ)
        options = _tap.Options()
        options.parseOptions(argv)
        return options

    def refused(self, argv: list[str], **env: Any) -> str:
        error = self.assertRaises(_tap.SettingsRefused, self.options, argv, **env)
        message = str(error)
        self.assertNotIn("\n", message)
        self.assertTrue(message.strip())
        return message

    def test_refusesWithoutSecret(self) -> None:
        """
        Without C{MNEMOSYNE_INTERNAL_SERVICE_SECRET} (or with it empty), one
        line names it.
        """
        for value in (None, ""):
            message = self.refused(["--listen", "tcp:0:interface=127.0.0.1", "--data-dir", "d"],
                                   MNEMOSYNE_INTERNAL_SERVICE_SECRET=value)
            self.assertIn("MNEMOSYNE_INTERNAL_SERVICE_SECRET", message)

    def test_refusesBeyondLoopback(self) -> None:
        """
        An endpoint that is not loopback (an explicit address, none at all,
        a wildcard, another kind) is refused in one line naming it.
        """
        for listen in ("tcp:8080:interface=0.0.0.0", "tcp:8080", "tcp:8080:interface=10.0.0.5",
                       "tcp6:8080:interface=\\:\\:", "ssl:8443:interface=127.0.0.1"):
            message = self.refused(["--listen", listen, "--data-dir", "d"])
            self.assertIn("--listen", message)
            self.assertIn("loopback", message)
        message = self.refused(["--data-dir", "d"], PORT="8080", GARDEN_SERVICE_HOST="0.0.0.0")
        self.assertIn("loopback", message)

    def test_loopbackAccepted(self) -> None:
        """
        127.0.0.0/8, C{::1}, C{localhost} and unix sockets are accepted.
        """
        for listen in ("tcp:0:interface=127.0.0.1", "tcp:0:interface=127.0.0.2",
                       "tcp6:0:interface=\\:\\:1", "tcp:0:interface=localhost", "unix:/tmp/v.sock"):
            self.assertEqual(self.options(["--listen", listen, "--data-dir", "d"])["settings"].listen,
                             listen)

    def test_defaultsFromGardend(self) -> None:
        """
        Without C{--listen}, C{tcp:$PORT:interface=$GARDEN_SERVICE_HOST}
        (host 127.0.0.1 by default); without C{--data-dir},
        C{$VEHICLE_DATA_DIR}, else C{$DATA_DIR}.
        """
        settings = self.options([], PORT="4567", VEHICLE_DATA_DIR="/v", DATA_DIR="/d")["settings"]
        self.assertEqual(settings.listen, "tcp:4567:interface=127.0.0.1")
        self.assertEqual(settings.dataDir, Path("/v"))
        self.assertEqual(settings.leaseTtlMs, 30 * 60 * 1000)
        settings = self.options([], PORT="4567", GARDEN_SERVICE_HOST="::1", DATA_DIR="/d")["settings"]
        self.assertEqual(settings.listen, "tcp:4567:interface=\\:\\:1")
        self.assertEqual(settings.dataDir, Path("/d"))

    def test_commandLineWins(self) -> None:
        """
        C{--listen} and C{--data-dir} win over the environment; a relative
        data dir is made absolute.
        """
        settings = self.options(["--listen", "tcp:1:interface=127.0.0.1", "--data-dir", "rel"],
                                PORT="4567", VEHICLE_DATA_DIR="/v")["settings"]
        self.assertEqual(settings.listen, "tcp:1:interface=127.0.0.1")
        self.assertEqual(settings.dataDir, Path("rel").absolute())

    def test_refusesWithoutPortOrDataDir(self) -> None:
        """
        Nowhere to listen, or no data dir, is refused in one line.
        """
        self.assertIn("PORT", self.refused(["--data-dir", "d"]))
        self.assertIn("DATA_DIR", self.refused(["--listen", "tcp:0:interface=127.0.0.1"]))

    def test_dropsGardendsToken(self) -> None:
        """
        C{MNEMOSYNE_MCP_ACCESS_TOKEN} is removed from the host's environment
        at start; the rest stays.
        """
        self.options(["--listen", "tcp:0:interface=127.0.0.1", "--data-dir", "d"],
                     MNEMOSYNE_MCP_ACCESS_TOKEN="gardend-token", KEEP="1")
        self.assertNotIn("MNEMOSYNE_MCP_ACCESS_TOKEN", self.environ)
        self.assertEqual(self.environ["KEEP"], "1")

    def test_secretNotInRepr(self) -> None:
        """
        The secret is kept, and never shown in the settings' repr.
        """
        settings = self.options(["--listen", "tcp:0:interface=127.0.0.1", "--data-dir", "d"])["settings"]
        self.assertEqual(settings.secret, SECRET)
        self.assertNotIn(SECRET, repr(settings))


class MakeServiceTests(SynchronousTestCase):
    """
    L{_tap.makeService} builds the host's service tree.
    """

    def test_multiService(self) -> None:
        """
        It returns a L{MultiService} holding the host and the listening
        endpoint; starting listens on the loopback endpoint and loads the
        sessions on disk; stopping stops listening.
        """
        root = Path(self.mktemp())
        self.patch(os, "environ", {"MNEMOSYNE_INTERNAL_SERVICE_SECRET": SECRET})
        options = _tap.Options()
        options.parseOptions(["--listen", "tcp:4321:interface=127.0.0.1", "--data-dir", str(root)])
        reactor = MemoryReactorClock()
        service = _tap.makeService(options, reactor)
        self.assertIsInstance(service, MultiService)
        children = list(service)
        self.assertTrue(any(isinstance(c, _tap.HostService) for c in children), children)
        self.assertTrue(any(isinstance(c, StreamServerEndpointService) for c in children), children)
        service.startService()
        self.assertEqual([(port, interface) for port, _, _, interface in reactor.tcpServers],
                         [(4321, "127.0.0.1")])
        for name in ("sessions", "trash", "workspaces"):
            self.assertTrue((root / name).is_dir(), name)
        d = service.stopService()
        self.successResultOf(d)
        self.assertFalse(service.running)


    def test_heapSettledOnceRunning(self) -> None:
        """
        Once the reactor runs (the services started), what the host made to
        start is collected, then frozen out of the collector's passes;
        not before.
        """
        import gc

        done: list[str] = []
        self.patch(gc, "collect", lambda: done.append("collect"))
        self.patch(gc, "freeze", lambda: done.append("freeze"))
        self.patch(gc, "get_threshold", lambda: (700, 10, 10))
        self.patch(gc, "set_threshold", lambda *t: done.append(f"threshold {t}"))
        self.patch(os, "environ", {"MNEMOSYNE_INTERNAL_SERVICE_SECRET": SECRET})
        options = _tap.Options()
        options.parseOptions(["--listen", "tcp:4321:interface=127.0.0.1",
                              "--data-dir", self.mktemp()])
        reactor = MemoryReactorClock()
        service = _tap.makeService(options, reactor)
        service.startService()
        self.addCleanup(service.stopService)
        self.assertEqual(done, [])
        for hook, args, kw in reactor.whenRunningHooks:
            hook(*args, **kw)
        self.assertEqual(done, ["collect", "freeze", f"threshold {(_tap.YOUNG_PASS, 10, 10)}"])
        self.assertGreater(_tap.YOUNG_PASS, 700)


class PluginTests(SynchronousTestCase):
    """
    twistd finds the plugin.
    """

    def test_discovered(self) -> None:
        """
        C{getPlugins(IServiceMaker)} yields C{vehicle}, whose options and
        service come from L{vehicle._tap}.
        """
        makers = {p.tapname: p for p in getPlugins(IServiceMaker)}
        self.assertIn("vehicle", makers)
        maker = makers["vehicle"]
        self.assertIs(maker.options, _tap.Options)
        self.assertTrue(maker.description)
