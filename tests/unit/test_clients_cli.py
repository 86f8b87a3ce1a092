"""
The C{vehicle} console script itself: C{--version}, and usage errors as
one line.
"""

from __future__ import annotations

import json
from pathlib import Path

from twisted.trial.unittest import SynchronousTestCase, TestCase

import vehicle
from vehicle._cli import PI_PACKAGE, RUNTIME_PI, pinnedPiVersion, versionText
from vehicle.settings import defaultPiRoot

from tests.support._clients import runClient


def _folder(testCase: SynchronousTestCase) -> Path:
    path = Path(testCase.mktemp())
    path.mkdir(parents=True)
    return path


class VersionTextTests(SynchronousTestCase):
    """
    L{versionText}: vehicle's version, and pi's with where it was read.
    """

    def installPi(self, version: str) -> Path:
        root = _folder(self)
        package = root.joinpath(*PI_PACKAGE)
        package.mkdir(parents=True)
        (package / "package.json").write_text(json.dumps({"name": "x", "version": version}))
        return root

    def pin(self, version: str, lock: bool = True) -> Path:
        runtime = _folder(self)
        name = "/".join(PI_PACKAGE[1:])
        (runtime / "package.json").write_text(json.dumps({"dependencies": {name: version}}))
        if lock:
            (runtime / "package-lock.json").write_text(json.dumps(
                {"packages": {"/".join(PI_PACKAGE): {"version": version}}}))
        return runtime

    def test_installed(self) -> None:
        """
        The installed pi's version, and where it is installed.
        """
        root = self.installPi("1.6.0")
        self.assertEqual(
            versionText(root, self.pin("1.6.0")).split("\n"),
            [f"vehicle {vehicle.__version__.public()}", f"pi 1.6.0 (installed in {root})"],
        )

    def test_installedIsNotThePin(self) -> None:
        """
        An installed pi other than the pinned one says so.
        """
        root = self.installPi("1.5.0")
        runtime = self.pin("1.6.0")
        line = versionText(root, runtime).split("\n")[1]
        self.assertEqual(line, f"pi 1.5.0 (installed in {root}); {runtime / 'package-lock.json'}"
                               " pins 1.6.0: run scripts/setup")

    def test_notInstalled(self) -> None:
        """
        Without an installed pi, the pin's version, from the lock file, else
        from package.json, saying it is not installed.
        """
        empty = _folder(self)
        runtime = self.pin("1.6.0")
        self.assertEqual(
            versionText(empty, runtime).split("\n")[1],
            f"pi 1.6.0 (pinned in {runtime / 'package-lock.json'}; not installed in {empty}: "
            "run scripts/setup)",
        )
        runtime = self.pin("1.6.1", lock=False)
        self.assertIn(f"pi 1.6.1 (pinned in {runtime / 'package.json'}",
                      versionText(empty, runtime))
        self.assertIn("pi unknown", versionText(empty, _folder(self)))

    def test_thisTreesPin(self) -> None:
        """
        This source tree's pin is read from runtime/pi.
        """
        pinned = pinnedPiVersion()
        self.assertIsNotNone(pinned)
        assert pinned is not None
        self.assertEqual(pinned[1], str(RUNTIME_PI / "package-lock.json"))


class ConsoleScriptTests(TestCase):
    """
    C{.venv/bin/vehicle}, as a person runs it.
    """

    timeout = 60

    async def test_version(self) -> None:
        """
        C{vehicle --version}: two lines, exit 0; pi's version is the one
        installed in the venv (or the pin's, said so, when it is not).
        """
        client = await runClient(self, "--version")
        self.assertEqual(client.ended.result, 0, client.errorText)
        self.assertEqual(client.errorText, "")
        first, second = client.lines
        self.assertEqual(first, f"vehicle {vehicle.__version__.public()}")
        package = defaultPiRoot().joinpath(*PI_PACKAGE, "package.json")
        if package.exists():
            version = json.loads(package.read_text())["version"]
            self.assertEqual(second, f"pi {version} (installed in {defaultPiRoot()})")
        else:
            self.assertIn("not installed", second)

    async def test_usageIsOneLine(self) -> None:
        """
        A usage error is one line naming the subcommand and its --help,
        exit 2.
        """
        client = await runClient(self, "tail", "--gardend", "http://127.0.0.1:1", "--graph", "g")
        self.assertEqual(client.ended.result, 2)
        self.assertEqual(client.errorLines, [
            "vehicle tail: give exactly one of --session and --all (see vehicle tail --help)"])
        client = await runClient(self)
        self.assertEqual(client.ended.result, 2)
        self.assertEqual(len(client.errorLines), 1, client.errorText)
