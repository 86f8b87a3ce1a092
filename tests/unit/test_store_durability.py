"""
More tests for L{vehicle.store}, written from its mutants (see
C{scripts/mutate}): each asserts a behaviour of the store that a changed
line would break (modes under an odd umask, the flags of an C{open}, every
descriptor closed, the syncs a power cut needs, the order of the steps).
"""

from __future__ import annotations

import fcntl
import os
import stat
from pathlib import Path
from typing import Any

from twisted.trial.unittest import SynchronousTestCase

from vehicle.store import OsFiles, files, removeTree, useFiles
from vehicle.store import _files


def _tempDir(case: SynchronousTestCase) -> Path:
    path = Path(case.mktemp()).absolute()
    path.mkdir(parents=True)
    return path


def _umask(case: SynchronousTestCase, mask: int) -> None:
    """
    Run the rest of C{case} under the umask C{mask}.
    """
    case.addCleanup(os.umask, os.umask(mask))


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


class _Recorder(OsFiles):
    """
    The real layer, noting every call that changes the disk.
    """

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def open(self, path: Any, flags: int, mode: int = 0o777) -> int:
        fd = super().open(path, flags, mode)
        self.calls.append(("open", str(path), flags, fd))
        return fd

    def close(self, fd: int) -> None:
        self.calls.append(("close", fd))
        super().close(fd)

    def fsync(self, fd: int) -> None:
        self.calls.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
        super().fsync(fd)

    def unlink(self, path: Any) -> None:
        self.calls.append(("unlink", str(path)))
        super().unlink(path)

    def rmdir(self, path: Any) -> None:
        self.calls.append(("rmdir", str(path)))
        super().rmdir(path)


def _record(case: SynchronousTestCase) -> _Recorder:
    recorder = _Recorder()
    case.addCleanup(useFiles, useFiles(recorder))
    return recorder


class OsFilesTests(SynchronousTestCase):
    """
    The real file layer: exact modes, and the full sync where the system
    has one.
    """

    def test_mkdirModeWhateverUmask(self) -> None:
        """
        C{mkdir} makes a directory of exactly the mode asked for (0700 when
        none is), whatever the umask.
        """
        directory = _tempDir(self)
        _umask(self, 0o077)
        OsFiles().mkdir(directory / "a")
        OsFiles().mkdir(directory / "b", 0o755)
        _umask(self, 0o777)
        OsFiles().mkdir(directory / "c")
        self.assertEqual(
            [_mode(directory / n) for n in "abc"], [0o700, 0o755, 0o700]
        )

    def test_openDefaultMode(self) -> None:
        """
        C{open} creates with mode 0777 less the umask when no mode is given,
        as C{os.open} does.
        """
        directory = _tempDir(self)
        _umask(self, 0)
        fd = OsFiles().open(directory / "f", os.O_WRONLY | os.O_CREAT)
        os.close(fd)
        self.assertEqual(_mode(directory / "f"), 0o777)

    def test_plainFsync(self) -> None:
        """
        Where there is no full sync (Linux), C{fsync} is C{os.fsync}.
        """
        self.assertEqual(_files._FULLFSYNC, getattr(fcntl, "F_FULLFSYNC", None))
        synced: list[int] = []
        self.patch(_files, "_FULLFSYNC", None)
        self.patch(os, "fsync", synced.append)
        self.patch(fcntl, "fcntl", lambda *a: self.fail(f"fcntl{a}"))
        OsFiles().fsync(7)
        self.assertEqual(synced, [7])

    def test_fullFsync(self) -> None:
        """
        Where there is one (macOS), C{fsync} is the full sync, and the plain
        one only when the file system refuses it.
        """
        synced: list[int] = []
        calls: list[tuple[int, int]] = []
        refuse: list[bool] = [False]

        def fakeFcntl(fd: int, command: int) -> int:
            calls.append((fd, command))
            if refuse[0]:
                raise OSError(25, "Inappropriate ioctl for device")
            return 0

        self.patch(_files, "_FULLFSYNC", 51)
        self.patch(os, "fsync", synced.append)
        self.patch(fcntl, "fcntl", fakeFcntl)
        OsFiles().fsync(7)
        self.assertEqual((calls, synced), ([(7, 51)], []))
        refuse[0] = True
        OsFiles().fsync(8)
        self.assertEqual((calls, synced), ([(7, 51), (8, 51)], [8]))

    def test_useFiles(self) -> None:
        """
        L{useFiles} puts a layer under the store and gives back the one it
        replaced.
        """
        first = _Recorder()
        second = _Recorder()
        original = useFiles(first)
        self.addCleanup(useFiles, original)
        self.assertIsInstance(original, OsFiles)
        self.assertIs(files(), first)
        self.assertIs(useFiles(second), first)
        self.assertIs(files(), second)


class RemoveTreeTests(SynchronousTestCase):
    """
    L{removeTree} removes a tree through the file layer and never follows
    a link out of it.
    """

    def test_removesAllNotFollowingLinks(self) -> None:
        base = _tempDir(self)
        outside = base / "outside"
        (outside / "inner").mkdir(parents=True)
        (outside / "keep.txt").write_text("keep")
        (outside / "inner" / "deep.txt").write_text("deep")
        tree = base / "tree"
        (tree / "a" / "b").mkdir(parents=True)
        (tree / "a" / "b" / "c.txt").write_text("c")
        (tree / "a" / "d.txt").write_text("d")
        (tree / "top.txt").write_text("t")
        (tree / "dirlink").symlink_to(outside)
        (tree / "a" / "filelink").symlink_to(outside / "keep.txt")
        (tree / "dangling").symlink_to(base / "nothing")
        recorder = _record(self)
        self.assertEqual(sorted(os.listdir(tree / "dirlink")), ["inner", "keep.txt"])
        removeTree(tree)
        self.assertFalse(os.path.lexists(tree))
        self.assertEqual(sorted(os.listdir(base)), ["outside"])
        self.assertEqual((outside / "keep.txt").read_text(), "keep")
        self.assertEqual((outside / "inner" / "deep.txt").read_text(), "deep")
        removed = sorted(os.path.relpath(c[1], tree) for c in recorder.calls)
        self.assertEqual(
            removed,
            [".", "a", "a/b", "a/b/c.txt", "a/d.txt", "a/filelink", "dangling",
             "dirlink", "top.txt"],
        )
        kinds = {os.path.relpath(c[1], tree): c[0] for c in recorder.calls}
        self.assertEqual(kinds["dirlink"], "unlink")
        self.assertEqual(kinds["a/b"], "rmdir")
