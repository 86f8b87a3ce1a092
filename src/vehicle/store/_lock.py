# -*- test-case-name: tests.unit.test_datalock -*-
"""
The data directory's lock: one host per data directory.  The host takes an
exclusive C{flock} on C{vehicle.lock} at start and holds it for its life;
the file names the holder's pid, so a second host can say who it is.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

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

    def __init__(self, root: Path | str) -> None:
        self.path = Path(root) / LOCK_NAME
        self._fd: int | None = None

    def acquire(self) -> None:
        """
        Take the lock without waiting and write this process's pid in it.

        @raise DataDirLocked: when another process holds it.
        """
        # Made here when missing (the lock is taken before the data dir is
        # laid out): private and durable like the rest of it.
        makeDirs(self.path.parent)
        # Close-on-exec, as every descriptor os.open makes (PEP 446): a
        # child never holds the lock.
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            try:
                text = os.pread(fd, 64, 0).decode("ascii", "replace").strip()
            finally:
                os.close(fd)
            raise DataDirLocked(self.path, int(text) if text.isdigit() else None)
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
