"""
One host per data directory: the lock C{twistd vehicle} takes at start.
"""

from __future__ import annotations

import os
from pathlib import Path

from twisted.internet.testing import MemoryReactorClock
from twisted.trial.unittest import SynchronousTestCase

from vehicle import _tap
from vehicle.store._lock import DataDirLock, DataDirLocked

SECRET = "s" * 32


class DataDirLockTests(SynchronousTestCase):
    def test_heldThenRefusedThenFree(self) -> None:
        """
        The holder's pid is in the file; a second taker is refused with
        that pid; once let go, it can be taken again.
        """
        root = Path(self.mktemp())
        first = DataDirLock(root)
        first.acquire()
        self.addCleanup(first.release)
        self.assertTrue(first.held)
        self.assertEqual((root / "vehicle.lock").read_text(), f"{os.getpid()}\n")
        self.assertEqual((root / "vehicle.lock").stat().st_mode & 0o777, 0o600)
        second = DataDirLock(root)
        with self.assertRaises(DataDirLocked) as caught:
            second.acquire()
        self.assertEqual(caught.exception.pid, os.getpid())
        self.assertIn(f"in use by pid {os.getpid()}", str(caught.exception))
        self.assertFalse(second.held)
        first.release()
        second.acquire()
        self.addCleanup(second.release)
        self.assertTrue(second.held)

    def test_staleFileIsNoLock(self) -> None:
        """
        A lock file a dead host left (its pid still written) is taken over.
        """
        root = Path(self.mktemp())
        root.mkdir()
        (root / "vehicle.lock").write_text("999999\n")
        lock = DataDirLock(root)
        lock.acquire()
        self.addCleanup(lock.release)
        self.assertEqual((root / "vehicle.lock").read_text(), f"{os.getpid()}\n")


class MakeServiceLockTests(SynchronousTestCase):
    def options(self, root: Path) -> _tap.Options:
        self.patch(os, "environ", {"MNEMOSYNE_INTERNAL_SERVICE_SECRET": SECRET})
        options = _tap.Options()
        options.parseOptions(["--listen", "tcp:0:interface=127.0.0.1", "--data-dir", str(root)])
        return options

    def test_secondHostRefused(self) -> None:
        """
        A second service tree on a held data dir is refused in one line
        naming the holder; stopping the first frees it.
        """
        root = Path(self.mktemp())
        first = _tap.makeService(self.options(root), MemoryReactorClock())
        first.startService()
        with self.assertRaises(_tap.SettingsRefused) as caught:
            _tap.makeService(self.options(root), MemoryReactorClock())
        self.assertEqual(
            str(caught.exception),
            f"vehicle: the data dir {root.absolute()} is in use by pid {os.getpid()} "
            f"({root.absolute() / 'vehicle.lock'} is locked)",
        )
        self.successResultOf(first.stopService())
        again = _tap.makeService(self.options(root), MemoryReactorClock())
        again.startService()
        self.successResultOf(again.stopService())
