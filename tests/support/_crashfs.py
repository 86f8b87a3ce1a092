"""
A file layer for crash tests, put under the store in place of the real one
(L{vehicle.store._files.useFiles}), with C{os.fsync} routed through it too
(pi's own session file is synced with C{os.fsync} directly).

It counts the syncs and, armed with C{k}, lets the k-th sync happen and
then stops the host: that sync raises L{Crash}, and so does every later
call, as if the process had been killed right after it.  L{CrashFiles.kill}
then closes every descriptor the dead host held.

In C{power} mode it also keeps an image of what was made durable, in the
manner of SQLite's crash-test file system: a file's content is durable
when the file was synced, an entry of a directory (a file created, renamed
or removed) when that directory was synced.  At the kill the data
directory is put back to that image: every write, rename, create or unlink
not made durable is lost.  What existed when the layer was armed counts as
durable.

It can also fail an operation with an C{OSError} (C{ENOSPC}, C{EIO}), once
or from some call on, on any file or on one file only; and it can hold
every sync until a test lets it go (a slow disk, for the group writer's
thread: L{CrashFiles.holdSyncs}).
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
import threading
from pathlib import Path
from typing import Any, Callable

from vehicle.store._files import OsFiles, useFiles


class Crash(BaseException):
    """
    The host was killed here (a C{BaseException}, so no C{except Exception}
    of the host's carries on after it).
    """


_realFsync = os.fsync


class Hold:
    """
    Syncs held (L{CrashFiles.holdSyncs}): each waits until L{release}.

    @ivar entered: set once a sync is waiting (it is on another thread).
    """

    def __init__(self) -> None:
        self.entered = threading.Event()
        self._gate = threading.Event()

    def wait(self) -> None:
        self.entered.set()
        if not self._gate.wait(timeout=30):
            raise OSError(errno.ETIMEDOUT, "a held sync was never released")

    def release(self) -> None:
        self._gate.set()


class CrashFiles:
    """
    See the module.

    @ivar syncs: the syncs counted since L{arm}.
    @ivar crashed: the host was killed.
    """

    def __init__(self, root: Path, mode: str = "kill", renames: str = "either") -> None:
        assert mode in ("kill", "power")
        assert renames in ("either", "both")
        self.root = Path(root).resolve()
        self.mode = mode
        #: When a rename between two directories is durable in C{power}
        #: mode: once C{either} of them is synced (a journaling file system),
        #: or, the strict POSIX reading, each name only once its own
        #: directory is (C{both}: sync the target alone and the entry is
        #: in both places after the cut, the source alone and it is in
        #: neither).
        self.renames = renames
        self.real = OsFiles()
        self.syncs = 0
        self.crashAt: int | None = None
        self.crashed = False
        self.open_fds: set[int] = set()
        #: (operation name, from the n-th such call, errno, times, the
        #: file's name or None for any): injected failures.
        self.failures: list[list[Any]] = []
        #: Syncs wait here, when held.
        self.held: Hold | None = None
        self._calls: dict[str, int] = {}
        self._dirs: dict[int, dict[str, tuple[int, str, Any]]] = {}
        self._data: dict[int, bytes] = {}
        self._rootInode = 0
        self._previous: Any = None

    # -- installing -------------------------------------------------------

    def install(self, patch: Callable[[Any, str, Any], None]) -> None:
        """
        Put this layer under the store and C{os.fsync} through it, until
        the test ends (C{patch} is the test case's C{patch}).
        """
        self._previous = useFiles(self)
        patch(os, "fsync", self._osFsync)

    def uninstall(self) -> None:
        if self._previous is not None:
            useFiles(self._previous)
            self._previous = None

    def arm(self, k: int | None) -> None:
        """
        Start counting syncs from now; kill the host after the C{k}-th
        (never, with L{None}).  In C{power} mode, what is on disk now is
        taken as durable.
        """
        self.syncs = 0
        self.crashAt = k
        self.crashed = False
        if self.mode == "power":
            self._snapshot()

    def fail(self, operation: str, error: int = errno.ENOSPC, after: int = 0,
             times: int | None = 1, path: Path | None = None) -> None:
        """
        Fail the C{operation} (C{write}, C{fsync}, C{replace}, ...) with
        C{error}, from its C{after}-th next call on, C{times} times (every
        time with L{None}); with C{path}, only on that file (a write or a
        sync: its descriptor's file).
        """
        self._calls[operation] = 0
        self.failures.append([operation, after, error, times, path])

    def holdSyncs(self) -> Hold:
        """
        From now on every sync waits until the returned L{Hold} is
        released (on the thread that syncs: the group writer's).
        """
        self.held = Hold()
        return self.held

    # -- the layer --------------------------------------------------------

    def _check(self, operation: str, fd: int | None = None) -> None:
        if self.crashed:
            raise Crash(f"{operation} after the host was killed")
        count = self._calls.get(operation)
        if count is None:
            return
        self._calls[operation] = count + 1
        for failure in self.failures:
            name, after, code, times, path = failure
            if path is not None and (fd is None or not self._isFile(fd, path)):
                continue
            if name == operation and count >= after and (times is None or times > 0):
                if times is not None:
                    failure[3] = times - 1
                raise OSError(code, os.strerror(code))

    def open(self, path: Any, flags: int, mode: int = 0o777) -> int:
        self._check("open")
        fd = self.real.open(path, flags, mode)
        self.open_fds.add(fd)
        return fd

    def close(self, fd: int) -> None:
        self.open_fds.discard(fd)
        if self.crashed:
            raise Crash("close after the host was killed")
        self.real.close(fd)

    def write(self, fd: int, data: Any) -> int:
        self._check("write", fd)
        return self.real.write(fd, data)

    def fsync(self, fd: int) -> None:
        if self.held is not None:
            self.held.wait()
        self._check("fsync", fd)
        self.real.fsync(fd)  # through os.fsync, so through _osFsync

    def ftruncate(self, fd: int, size: int) -> None:
        self._check("ftruncate")
        self.real.ftruncate(fd, size)

    def fchmod(self, fd: int, mode: int) -> None:
        self._check("fchmod")
        self.real.fchmod(fd, mode)

    def replace(self, source: Any, target: Any) -> None:
        self._check("replace")
        self.real.replace(source, target)

    def rename(self, source: Any, target: Any) -> None:
        self._check("rename")
        self.real.rename(source, target)

    def mkdir(self, path: Any, mode: int = 0o700) -> None:
        self._check("mkdir")
        self.real.mkdir(path, mode)

    def rmdir(self, path: Any) -> None:
        self._check("rmdir")
        self.real.rmdir(path)

    def unlink(self, path: Any) -> None:
        self._check("unlink")
        self.real.unlink(path)

    def _osFsync(self, fd: int) -> None:
        """
        Every sync of the process: counted, and, in C{power} mode, what it
        made durable is kept in the image.
        """
        if self.crashed:
            raise Crash("fsync after the host was killed")
        _realFsync(fd)
        if not self._under(fd):
            return
        if self.mode == "power":
            self._remember(fd)
        self.syncs += 1
        if self.crashAt is not None and self.syncs >= self.crashAt:
            self.crashed = True
            raise Crash(f"killed after sync {self.syncs}")

    @staticmethod
    def _isFile(fd: int, path: Path) -> bool:
        try:
            return os.readlink(f"/proc/self/fd/{fd}") == str(Path(path).resolve())
        except OSError:
            return False

    def _under(self, fd: int) -> bool:
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            return True
        return target == str(self.root) or target.startswith(str(self.root) + os.sep)

    # -- the durable image ------------------------------------------------

    def _snapshot(self) -> None:
        self._dirs.clear()
        self._data.clear()
        self._rootInode = os.stat(self.root).st_ino
        for directory, dirs, names in os.walk(self.root):
            fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
            try:
                self._remember(fd, withData=True)
            finally:
                os.close(fd)

    def _remember(self, fd: int, withData: bool = False) -> None:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            entries: dict[str, tuple[int, str, Any]] = {}
            for name in os.listdir(fd):
                child = os.stat(name, dir_fd=fd, follow_symlinks=False)
                if stat.S_ISDIR(child.st_mode):
                    entries[name] = (child.st_ino, "dir", None)
                elif stat.S_ISLNK(child.st_mode):
                    entries[name] = (child.st_ino, "link", os.readlink(name, dir_fd=fd))
                elif stat.S_ISREG(child.st_mode):
                    entries[name] = (child.st_ino, "file", None)
                    if withData:
                        with open(os.open(name, os.O_RDONLY, dir_fd=fd), "rb", closefd=True) as f:
                            self._data[child.st_ino] = f.read()
            if not withData and self.renames == "either":
                self._commitRenames(st.st_ino, entries)
            self._dirs[st.st_ino] = entries
        elif stat.S_ISREG(st.st_mode):
            with open(f"/proc/self/fd/{fd}", "rb") as f:
                self._data[st.st_ino] = f.read()

    def _commitRenames(self, inode: int, entries: dict[str, tuple[int, str, Any]]) -> None:
        """
        A rename is one step of the journal, made durable by syncing either
        of its directories (as ext4, XFS and APFS do): never both names,
        never neither once one side is synced.
        """
        here = {child for child, _, _ in entries.values()}
        for other, listing in self._dirs.items():
            if other != inode:
                for name in [n for n, (child, _, _) in listing.items() if child in here]:
                    del listing[name]
        gone = {child: (kind, target) for child, kind, target in self._dirs.get(inode, {}).values()
                if child not in here}
        if not gone:
            return
        for directory, dirs, names in os.walk(self.root):
            parent = os.stat(directory).st_ino
            if parent == inode or parent not in self._dirs:
                continue
            for name in dirs + names:
                child = os.stat(os.path.join(directory, name), follow_symlinks=False).st_ino
                if child in gone:
                    self._dirs[parent][name] = (child, *gone[child])

    def kill(self) -> None:
        """
        The host is dead: close what it held open; in C{power} mode, put
        the data directory back to what was durable.
        """
        self.crashed = True
        for fd in list(self.open_fds):
            try:
                os.close(fd)
            except OSError:
                pass
        self.open_fds.clear()
        if self.mode == "power":
            rebuilt = self.root.with_name(self.root.name + ".durable")
            shutil.rmtree(rebuilt, ignore_errors=True)
            os.mkdir(rebuilt, 0o700)
            self._materialize(self._rootInode, rebuilt)
            lost = self.root.with_name(self.root.name + ".lost")
            os.rename(self.root, lost)
            os.rename(rebuilt, self.root)
            shutil.rmtree(lost)

    def revive(self) -> None:
        """
        A new host starts on the same disk: the layer works again, unarmed.
        """
        self.crashed = False
        self.crashAt = None
        self.failures.clear()
        self._calls.clear()

    def _materialize(self, inode: int, path: Path) -> None:
        for name, (child, kind, target) in self._dirs.get(inode, {}).items():
            full = path / name
            if kind == "dir":
                os.mkdir(full, 0o700)
                self._materialize(child, full)
            elif kind == "link":
                os.symlink(target, full)
            else:
                fd = os.open(full, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with open(fd, "wb") as f:
                    f.write(self._data.get(child, b""))
