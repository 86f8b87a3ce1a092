"""
One host per data directory: the lock C{twistd vehicle} takes at start.
"""

from __future__ import annotations

import fcntl
import os
import stat
from pathlib import Path

from twisted.internet.testing import MemoryReactorClock
from twisted.trial.unittest import SynchronousTestCase

from vehicle import _tap
from vehicle.store._lock import DataDirLock, DataDirLocked
from tests.support._hints import assertAnnotationsResolve

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


    def test_modesWhateverUmask(self) -> None:
        """
        A missing data dir is made private (0700), parents and all, and the
        lock file is 0600, with no umask to narrow them.
        """
        self.addCleanup(os.umask, os.umask(0))
        root = Path(self.mktemp()) / "deeper" / "data"
        lock = DataDirLock(root)
        lock.acquire()
        self.addCleanup(lock.release)
        self.assertEqual(stat.S_IMODE(root.stat().st_mode), 0o700)
        self.assertEqual(stat.S_IMODE((root / "vehicle.lock").stat().st_mode), 0o600)

    def test_closeOnExec(self) -> None:
        """
        The lock's descriptor is not inherited by a child (a pi body must
        never hold the data dir).
        """
        lock = DataDirLock(Path(self.mktemp()))
        lock.acquire()
        self.addCleanup(lock.release)
        assert lock._fd is not None
        self.assertFalse(os.get_inheritable(lock._fd))
        self.assertTrue(fcntl.fcntl(lock._fd, fcntl.F_GETFD) & fcntl.FD_CLOEXEC)

    def test_refusedLeavesNoDescriptor(self) -> None:
        """
        A refused taker closes the descriptor it opened.
        """
        root = Path(self.mktemp())
        first = DataDirLock(root)
        first.acquire()
        self.addCleanup(first.release)

        def onTheLock() -> list[str]:
            # Descriptors on the lock file only: other work in this process
            # (a pool's threads) opens and closes its own meanwhile.
            found = []
            for fd in os.listdir("/proc/self/fd"):
                try:
                    if os.readlink(f"/proc/self/fd/{fd}") == str(first.path.resolve()):
                        found.append(fd)
                except OSError:
                    pass
            return sorted(found)

        before = onTheLock()
        self.assertEqual(len(before), 1)
        for _ in range(3):
            self.assertRaises(DataDirLocked, DataDirLock(root).acquire)
        self.assertEqual(onTheLock(), before)

    def test_holderUnsaid(self) -> None:
        """
        When the lock file does not hold a pid, the refusal says another
        process holds it.
        """
        root = Path(self.mktemp())
        first = DataDirLock(root)
        first.acquire()
        self.addCleanup(first.release)
        (root / "vehicle.lock").write_text("starting\n")
        with self.assertRaises(DataDirLocked) as caught:
            DataDirLock(root).acquire()
        self.assertIsNone(caught.exception.pid)
        self.assertIn("is in use by another process (", str(caught.exception))

    def test_deadHolderWaitedFor(self) -> None:
        """
        A lock held with the pid of a process no longer alive in it (a
        killed host's sync helper finishing its batch) is waited for, up to
        C{waitForTheDead}; then refused, naming that pid.
        """
        root = Path(self.mktemp())
        first = DataDirLock(root)
        first.acquire()
        self.addCleanup(first.release)
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        os.waitpid(pid, 0)
        (root / "vehicle.lock").write_text(f"{pid}\n")
        second = DataDirLock(root)
        second.waitForTheDead = 0.05
        tries: list[int] = []
        real = fcntl.flock
        self.patch(fcntl, "flock", lambda fd, op: (tries.append(op), real(fd, op))[1])
        with self.assertRaises(DataDirLocked) as caught:
            second.acquire()
        self.assertEqual(caught.exception.pid, pid)
        self.assertGreater(len(tries), 1)
        self.assertFalse(second.held)

    def test_stamp(self) -> None:
        """
        L{DataDirLock.stamp} writes the current pid again over whatever the
        file holds (a longer text included); without the lock it writes
        nothing; releasing twice is harmless.
        """
        root = Path(self.mktemp())
        lock = DataDirLock(root)
        lock.acquire()
        (root / "vehicle.lock").write_text("12345678901234567890\n")
        lock.stamp()
        self.assertEqual((root / "vehicle.lock").read_text(), f"{os.getpid()}\n")
        lock.release()
        self.assertFalse(lock.held)
        (root / "vehicle.lock").write_text("gone\n")
        lock.stamp()
        lock.release()
        self.assertEqual((root / "vehicle.lock").read_text(), "gone\n")


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


class AnnotationTests(SynchronousTestCase):
    """
    The lock's annotations resolve to types (what mypy reads).
    """

    def test_resolve(self) -> None:
        from vehicle.store import _lock

        assertAnnotationsResolve(self, _lock)


class AliveTests(SynchronousTestCase):
    """
    L{vehicle._pids.alive}.
    """

    def test_alive(self) -> None:
        """
        This process is alive; one reaped is not; one not ours to signal is.
        """
        from vehicle._pids import alive

        self.assertTrue(alive(os.getpid()))
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        os.waitpid(pid, 0)
        self.assertFalse(alive(pid))
        self.patch(os, "kill", lambda pid, sig: (_ for _ in ()).throw(PermissionError()))
        self.assertTrue(alive(1))
