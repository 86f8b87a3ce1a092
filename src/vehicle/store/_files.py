# -*- test-case-name: tests.unit.test_crash -*-
"""
The file layer under the store: every call the store makes that changes
the disk (open, write, fsync, rename, mkdir, unlink, ...) goes through one
object, L{files}, so a test can put another layer in its place: one that
counts the syncs and stops the host at the k-th, one that keeps only what
was made durable (a power cut), one that fails with C{ENOSPC} or C{EIO}.

The real layer is a thin veneer over C{os}; it looks each function up at
call time, so a test that patches C{os.write} still reaches it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Protocol, TypeAlias

from vehicle._syncd import OsOps


#: A path as C{os} takes it.
StrPath: TypeAlias = "str | os.PathLike[str]"


class Files(Protocol):
    """
    What the store asks of the file system.  Paths are L{Path} or C{str}.
    The default C{mode} is C{0o777} for C{open} (as C{os.open}), C{0o700}
    for C{mkdir} (exactly, whatever the umask).
    """

    def open(self, path: StrPath, flags: int, mode: int = ...) -> int: ...
    def write(self, fd: int, data: bytes | memoryview) -> int: ...
    def fsync(self, fd: int) -> None: ...
    def ftruncate(self, fd: int, size: int) -> None: ...
    def fchmod(self, fd: int, mode: int) -> None: ...
    def close(self, fd: int) -> None: ...
    def replace(self, source: StrPath, target: StrPath) -> None: ...
    def rename(self, source: StrPath, target: StrPath) -> None: ...
    def mkdir(self, path: StrPath, mode: int = ...) -> None: ...
    def rmdir(self, path: StrPath) -> None: ...
    def unlink(self, path: StrPath) -> None: ...


#: How the store creates a file: for writing, and never one already there
#: (nor through a link put in its place).  Every descriptor the store opens
#: is close-on-exec without asking: C{os.open} makes them so (PEP 446).
CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL

class OsFiles(OsOps):
    """
    The real file system.  C{fsync} is the full one: C{F_FULLFSYNC} on
    macOS, where C{fsync} reaches only the drive's cache.
    """

    def open(self, path: StrPath, flags: int, mode: int = 0o777) -> int:
        return os.open(path, flags, mode)

    def fchmod(self, fd: int, mode: int) -> None:
        os.fchmod(fd, mode)

    def replace(self, source: StrPath, target: StrPath) -> None:
        os.replace(source, target)

    def rename(self, source: StrPath, target: StrPath) -> None:
        os.rename(source, target)

    def mkdir(self, path: StrPath, mode: int = 0o700) -> None:
        os.mkdir(path, mode)
        # Exactly this mode, whatever the umask.
        os.chmod(path, mode)

    def rmdir(self, path: StrPath) -> None:
        os.rmdir(path)

    def unlink(self, path: StrPath) -> None:
        os.unlink(path)


_current: Files = OsFiles()


def files() -> Files:
    """
    The file layer the store uses now.
    """
    return _current


def useFiles(layer: Files) -> Files:
    """
    Put C{layer} under the store; return the one it replaces (a test puts
    that back when it is done).
    """
    global _current
    previous, _current = _current, layer
    return previous


def removeTree(path: Path) -> None:
    """
    Remove the directory C{path} and everything in it, through the file
    layer, never following a link.  Used only at start, for what a cut
    request left half made (never for anything acknowledged).
    """
    layer = files()
    for root, dirs, names, rootFd in os.fwalk(path, topdown=False, follow_symlinks=False):
        for name in names:
            layer.unlink(os.path.join(root, name))
        for name in dirs:
            full = os.path.join(root, name)
            if os.path.islink(full):
                layer.unlink(full)
            else:
                layer.rmdir(full)
    layer.rmdir(path)
