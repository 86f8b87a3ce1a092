"""
The C{vehicle} console script itself: C{--version}, and usage errors as
one line.
"""

from __future__ import annotations

import json
from pathlib import Path

from twisted.trial.unittest import SynchronousTestCase

import vehicle
from vehicle._cli import PI_PACKAGE, RUNTIME_PI, pinnedPiVersion, versionText


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
