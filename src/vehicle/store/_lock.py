# -*- test-case-name: tests.unit.test_datalock -*-
"""
The data directory's lock: one host per data directory.  The host takes an
exclusive C{flock} on C{vehicle.lock} at start and holds it for its life;
the file names the holder's pid, so a second host can say who it is.

The host's sync helper (L{vehicle.store._syncer}) holds the same lock, and
outlives a host that was killed by the batch it had in hand: a host that
finds the lock held by a pid no longer alive waits for it a little
(L{DataDirLock.acquire}).
"""

from __future__ import annotations

import fcntl
import os
import select
import time
from pathlib import Path

from vehicle._pids import alive
from vehicle.store._atomic import makeDirs

#: The lock file's name inside the data directory.
LOCK_NAME = "vehicle.lock"


class DataDirLocked(Exception):
    """
    Another process holds the data directory.

    @ivar pid: the holder's pid as its lock file says (L{None} when unsaid).
    """

    def __init__(self, path: Path, pid: int | None) -> None:
        holder = f"pid {pid}" if pid is not None else "another process"
        super().__init__(f"the data dir {path.parent} is in use by {holder} ({path} is locked)")
        self.pid = pid


class DataDirLock:
    """
    An exclusive lock on a data directory, held until L{release} or exit.
    """

    #: How long a lock held by a pid no longer alive is waited for (the
    #: sync helper of a killed host, finishing its batch), in seconds.
    waitForTheDead = 10.0

    def __init__(self, root: Path | str) -> None:
        self.path = Path(root) / LOCK_NAME
        self._fd: int | None = None

    def acquire(self) -> None:
        """
        Take the lock and write this process's pid in it; without waiting,
        unless its holder (as the file names it) is no longer alive: then
        for up to L{waitForTheDead} seconds (the start, before the reactor
        runs).

        @raise DataDirLocked: when another process holds it.
        """
        # Made here when missing (the lock is taken before the data dir is
        # laid out): private and durable like the rest of it.
        makeDirs(self.path.parent)
        # Close-on-exec, as every descriptor os.open makes (PEP 446): a
        # child never holds the lock.
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        deadline = time.monotonic() + self.waitForTheDead
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                text = os.pread(fd, 64, 0).decode("ascii", "replace").strip()
                pid = int(text) if text.isdigit() else None
                if pid is None or alive(pid) or time.monotonic() >= deadline:
                    os.close(fd)
                    raise DataDirLocked(self.path, pid)
                # A killed host's helper finishing its batch.
                select.select([], [], [], 0.02)
        self._fd = fd
        self.stamp()

    def stamp(self) -> None:
        """
        Write the current pid (again: after a fork, the child holds it).
        """
        if self._fd is None:
            return
        # Not synced: the pid matters only while its process lives and
        # holds the lock, which no power cut outlasts.
        data = f"{os.getpid()}\n".encode("ascii")
        os.pwrite(self._fd, data, 0)
        os.ftruncate(self._fd, len(data))

    def fileno(self) -> int | None:
        """
        The lock's descriptor while it is held (a child given it holds the
        lock as long as it keeps it).
        """
        return self._fd

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        """
        Let the lock go (the file stays; its content no longer counts).
        """
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)
