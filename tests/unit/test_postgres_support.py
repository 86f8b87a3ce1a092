"""
The tests of the shared ledger need a real PostgreSQL: where it cannot run
they skip, but under CI (C{CI} set), whose machine C{scripts/setup}
provisions, they fail, so that a CI run never passes by skipping them
(issue 19).
"""

from __future__ import annotations

import os
from pathlib import Path

from twisted.trial.unittest import SkipTest, SynchronousTestCase

from tests.support import postgres


ROOT = Path(__file__).parent.parent.parent


class RequirePostgresTests(SynchronousTestCase):
    """
    L{postgres.requirePostgres} skips, or fails under CI.
    """

    def setUp(self) -> None:
        self.patch(postgres, "unavailable", lambda: "initdb is not installed")

    def test_skipsOutsideCI(self) -> None:
        self.patch(os, "environ", {})
        with self.assertRaises(SkipTest):
            postgres.requirePostgres()

    def test_failsUnderCI(self) -> None:
        """
        Under CI the reason is a failure, naming what is missing.
        """
        self.patch(os, "environ", {"CI": "true"})
        with self.assertRaises(AssertionError) as caught:
            postgres.requirePostgres()
        self.assertIn("initdb is not installed", str(caught.exception))

    def test_rootWithoutAUserToRunAs(self) -> None:
        """
        Root with neither C{postgres} nor C{nobody} is a reason too (it
        fails under CI like any other), not a skip of its own.
        """
        self.patch(postgres.os, "geteuid", lambda: 0)
        self.patch(postgres.pwd, "getpwnam", _noSuchUser)
        self.assertEqual(postgres._runAs(), "")


def _noSuchUser(name: str) -> None:
    raise KeyError(name)


class ProvisionedTests(SynchronousTestCase):
    """
    CI runs the README's command, whose setup installs what these tests
    need on a clean Debian machine with root.
    """

    def test_ciRunsTheTests(self) -> None:
        self.assertIn("exec scripts/test", (ROOT / ".ci" / "run").read_text())
        self.assertIn("scripts/setup", (ROOT / "scripts" / "test").read_text())

    def test_setupInstallsPostgres(self) -> None:
        setup = (ROOT / "scripts" / "setup").read_text()
        self.assertIn("apt-get install -y -qq postgresql", setup)
        self.assertIn("prometheus_client", (ROOT / "pyproject.toml").read_text())
