# -*- test-case-name: tests.unit.test_box -*-
"""
The body's own folders seen from the host: that they are still the folders
the box was made with (L{FolderIdentity}, for C{body_tampered}), and the
snapshot copy of a workspace for fork and clone (L{copyTree}).

Both do synchronous filesystem work; callers run L{copyTree} in a thread.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
from pathlib import Path

from attrs import field, frozen

from vehicle.box._spec import BoxSpecError
from vehicle.store import fsyncDirectory, fullSync


@frozen(kw_only=True)
class FolderIdentity:
    """
    A folder as it was when recorded: its path and its C{(device, inode)}.

    A body can rename its own workspace away and put a symlink, or another
    folder, in its place; the next box would then bind whatever that points
    at. Recording the identity when the folder is made and verifying it
    before each box is built catches that.
    """

    path: Path = field(converter=Path)
    device: int
    inode: int

    @classmethod
    def record(cls, path: Path | str) -> FolderIdentity:
        """
        Record the identity of the directory at C{path} (not following a
        symlink).

        @raise BoxSpecError: when C{path} is missing, a symlink, or not a
            directory.
        """
        path = Path(path)
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            raise BoxSpecError(f"{path} does not exist") from None
        if stat.S_ISLNK(st.st_mode):
            raise BoxSpecError(f"{path} is a symlink")
        if not stat.S_ISDIR(st.st_mode):
            raise BoxSpecError(f"{path} is not a directory")
        return cls(path=path, device=st.st_dev, inode=st.st_ino)

    def verify(self) -> str | None:
        """
        Check that C{path} is still the same real directory.

        @return: C{None} if it is; otherwise a sentence saying what changed.
        """
        try:
            st = os.lstat(self.path)
        except FileNotFoundError:
            return f"{self.path} is gone."
        except OSError as e:
            return f"{self.path} cannot be examined: {e.strerror}."
        if stat.S_ISLNK(st.st_mode):
            return f"{self.path} has been replaced by a symlink."
        if not stat.S_ISDIR(st.st_mode):
            return f"{self.path} is no longer a directory."
        if (st.st_dev, st.st_ino) != (self.device, self.inode):
            return f"{self.path} has been replaced by another directory."
        return None


#: Modes are copied without setuid, setgid and sticky bits: the host runs as
#: root, so a setuid file made in a box must not become a setuid-root file in
#: a fresh workspace.
_MODE_MASK = 0o777

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
_WRITE_FLAGS = (
    os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
)


def _copyFile(name: str, srcDir: int, dstDir: int) -> None:
    """
    Copy one regular file by name between two open directories; skip it if
    it turned into something else since it was listed.
    """
    try:
        src = os.open(name, _READ_FLAGS, dir_fd=srcDir)
    except OSError:
        # Swapped for a symlink (ELOOP), removed, or unreadable since the
        # listing: a snapshot of a live folder can only skip it.
        return
    try:
        st = os.fstat(src)
        if not stat.S_ISREG(st.st_mode):
            return
        dst = os.open(name, _WRITE_FLAGS, 0o600, dir_fd=dstDir)
        try:
            while True:
                chunk = os.read(src, 1 << 20)
                if not chunk:
                    break
                view = memoryview(chunk)
                while view:
                    view = view[os.write(dst, view) :]
            os.fchmod(dst, st.st_mode & _MODE_MASK)
            os.utime(dst, ns=(st.st_atime_ns, st.st_mtime_ns))
            # The branch is announced once the copy returns: what it holds
            # must outlive a power cut from then on.
            fullSync(dst)
        finally:
            os.close(dst)
    finally:
        os.close(src)


def _copyDirectory(srcDir: int, dstDir: int) -> None:
    """
    Copy the entries of one open directory into another, depth first,
    through directory descriptors only, so no path component in the source
    is ever followed through a symlink.
    """
    with os.scandir(srcDir) as listing:
        names = sorted(entry.name for entry in listing)
    for name in names:
        try:
            st = os.stat(name, dir_fd=srcDir, follow_symlinks=False)
        except FileNotFoundError:
            continue
        if stat.S_ISLNK(st.st_mode):
            target = os.readlink(name, dir_fd=srcDir)
            os.symlink(target, name, dir_fd=dstDir)
        elif stat.S_ISREG(st.st_mode):
            _copyFile(name, srcDir, dstDir)
        elif stat.S_ISDIR(st.st_mode):
            try:
                childSrc = os.open(name, _DIR_FLAGS, dir_fd=srcDir)
            except OSError:
                continue
            try:
                os.mkdir(name, 0o700, dir_fd=dstDir)
                childDst = os.open(name, _DIR_FLAGS, dir_fd=dstDir)
                try:
                    _copyDirectory(childSrc, childDst)
                    childSt = os.fstat(childSrc)
                    os.fchmod(childDst, childSt.st_mode & _MODE_MASK)
                    os.utime(
                        childDst, ns=(childSt.st_atime_ns, childSt.st_mtime_ns)
                    )
                    fullSync(childDst)
                finally:
                    os.close(childDst)
            finally:
                os.close(childSrc)
        # fifos, sockets and devices are not part of a snapshot.


def copyTree(src: Path, dst: Path) -> None:
    """
    Copy the workspace at C{src} to the new folder C{dst}, for fork or clone.

    Regular files are copied with their content, permission bits and
    times; directories likewise; symlinks are copied as links (their target
    text, never followed, dangling or pointing outside alike); hard links
    become separate files; fifos, sockets and devices are skipped. Setuid,
    setgid and sticky bits are dropped. The source is read through
    directory descriptors and C{O_NOFOLLOW}, so a body that swaps a folder
    for a symlink while the copy runs cannot make it read outside C{src}.

    @param src: an existing directory, not a symlink.
    @param dst: a path that does not exist yet; its parent is created if
        needed. On failure nothing is left at C{dst}. On return every file
        and folder of the copy, and its name in the parent, has been
        synced to disk.
    @raise FileExistsError: when C{dst} exists.
    @raise BoxSpecError: when C{src} is missing, a symlink or not a folder.
    @raise OSError: for any other failure to read or write.
    """
    src = Path(src)
    dst = Path(dst)
    if os.path.lexists(dst):
        raise FileExistsError(errno.EEXIST, f"{dst} exists", str(dst))
    identity = FolderIdentity.record(src)
    dst.parent.mkdir(parents=True, exist_ok=True)
    srcFd = os.open(src, _DIR_FLAGS)
    try:
        st = os.fstat(srcFd)
        if (st.st_dev, st.st_ino) != (identity.device, identity.inode):
            raise BoxSpecError(f"{src} changed while the copy began")
        os.mkdir(dst, 0o700)
        try:
            dstFd = os.open(dst, _DIR_FLAGS)
            try:
                _copyDirectory(srcFd, dstFd)
                os.fchmod(dstFd, st.st_mode & _MODE_MASK)
                os.utime(dstFd, ns=(st.st_atime_ns, st.st_mtime_ns))
                fullSync(dstFd)
            finally:
                os.close(dstFd)
            fsyncDirectory(dst.parent)
        except BaseException:
            _removePartial(dst)
            raise
    finally:
        os.close(srcFd)


def _removePartial(dst: Path) -> None:
    """
    Remove a half-made copy, opening up any read-only folder in it first.
    """
    for root, dirs, _ in os.walk(dst):
        for name in dirs:
            path = os.path.join(root, name)
            if not os.path.islink(path):
                os.chmod(path, 0o700)
    shutil.rmtree(dst)
