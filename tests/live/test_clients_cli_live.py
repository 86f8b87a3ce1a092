"""
The live half of L{tests.unit.test_clients_cli}: L{ConsoleScriptTests}
(real processes, sockets or the real reactor; see that module for the rest).
"""

from __future__ import annotations

import json

from twisted.trial.unittest import TestCase

import vehicle
from vehicle._cli import PI_PACKAGE
from vehicle.settings import defaultPiRoot

from tests.support._clients import runClient


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
