"""
A body's folders: the host never follows what an agent left in its pi
folder.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from twisted.trial.unittest import SynchronousTestCase

from vehicle.body import _spawner
from vehicle.body._spawner import (
    RACY_SECONDS,
    BodyPaths,
    NewestSessionFile,
    latestSessionFile,
    newestSessionFile,
)
from vehicle.body._sessionfile import readSession


class BodyPathsTests(SynchronousTestCase):
    """
    L{BodyPaths.prepare} and L{latestSessionFile} on a pi folder a body could
    write.
    """

    def setUp(self) -> None:
        self.root = Path(self.mktemp()).absolute()
        self.session = self.root / "sessions" / "s1"
        self.outside = self.root / "outside"
        self.outside.mkdir(parents=True)
        (self.outside / "mcp.json").write_text("keep me")
        (self.outside / "settings.json").write_text("mine")
        self.paths = BodyPaths.forSession(self.session)
        self.paths.prepare()

    def test_agentDirLinkReplaced(self) -> None:
        """
        An agent dir replaced by a link to a host folder: the next prepare
        removes the link (not what it points at) and makes a real folder;
        the host's files are untouched.
        """
        for folder in (self.paths.agentDir, self.paths.home):
            for child in folder.iterdir():
                child.unlink()
            folder.rmdir()
            os.symlink(self.outside, folder)
        self.paths.prepare()
        self.assertFalse(self.paths.agentDir.is_symlink())
        self.assertTrue(self.paths.agentDir.is_dir())
        self.assertFalse(self.paths.home.is_symlink())
        self.assertEqual((self.outside / "mcp.json").read_text(), "keep me")
        self.assertEqual((self.outside / "settings.json").read_text(), "mine")
        self.assertTrue((self.paths.agentDir / "settings.json").exists())

    def test_plantedSessionFileIgnored(self) -> None:
        """
        A newest C{*.jsonl} that is a link to a host file is never taken for
        the conversation, and reading through a link is refused.
        """
        real = self.paths.piDir / "2026-01-01T00-00-00-000Z_a.jsonl"
        real.write_text('{"type":"session","version":3,"id":"a"}\n')
        old = time.time() - 3600
        os.utime(real, (old, old))
        secret = self.outside / "secret.jsonl"
        secret.write_text('{"type":"session","version":3,"id":"stolen"}\n')
        planted = self.paths.piDir / "zz.jsonl"
        os.symlink(secret, planted)
        self.assertEqual(latestSessionFile(self.paths.piDir), real)
        self.assertRaises(OSError, readSession, planted)


class NewestSessionFileTests(SynchronousTestCase):
    """
    L{newestSessionFile}: pi's conversation file in a folder, found in one
    pass over it.
    """

    def setUp(self) -> None:
        self.piDir = Path(self.mktemp()).absolute()
        self.piDir.mkdir()

    def file(self, name: str, age: float) -> Path:
        path = self.piDir / name
        path.write_text('{"type":"session","version":3,"id":"a"}\n')
        when = time.time() - age
        os.utime(path, (when, when))
        return path

    def test_newestByTimeThenName(self) -> None:
        """
        The newest C{.jsonl} file by its time, by its name between two of
        the same time; its status is the file's own.
        """
        self.file("b.jsonl", 100)
        newer = self.file("a.jsonl", 10)
        self.file("c.jsonl", 50)
        found = newestSessionFile(self.piDir)
        assert found is not None
        self.assertEqual(found[0], newer)
        self.assertEqual(found[1].st_ino, os.lstat(newer).st_ino)
        self.assertEqual(found[1].st_size, os.lstat(newer).st_size)
        same = os.lstat(newer).st_mtime_ns
        later = self.piDir / "z.jsonl"
        later.write_text("")
        os.utime(later, ns=(same, same))
        self.assertEqual(latestSessionFile(self.piDir), later)

    def test_onlyRegularJsonlFiles(self) -> None:
        """
        Names not ending in C{.jsonl}, folders and links are passed over,
        however new.
        """
        kept = self.file("kept.jsonl", 100)
        self.file("notes.json", 0)
        self.file("x.jsonl.tmp", 0)
        (self.piDir / "folder.jsonl").mkdir()
        os.symlink(kept, self.piDir / "link.jsonl")
        self.assertEqual(latestSessionFile(self.piDir), kept)

    def test_noneWithoutAFile(self) -> None:
        """
        An empty folder, a missing one and a file in the folder's place
        hold no conversation.
        """
        self.assertIsNone(newestSessionFile(self.piDir))
        self.assertIsNone(latestSessionFile(self.piDir / "missing"))
        self.piDir.rmdir()
        self.piDir.write_text("")
        self.assertIsNone(newestSessionFile(self.piDir))


class KeptNewestSessionFileTests(SynchronousTestCase):
    """
    L{NewestSessionFile}: the same answers as L{newestSessionFile}, the
    folder read again only when its own status says it may have changed.
    """

    def setUp(self) -> None:
        self.piDir = Path(self.mktemp()).absolute()
        self.piDir.mkdir()
        self.scans: list[Path] = []
        real = _spawner._scan

        def scan(piDir: Path) -> Any:
            self.scans.append(piDir)
            return real(piDir)

        self.patch(_spawner, "_scan", scan)
        self.real = real
        self.newest = NewestSessionFile()

    def quiet(self, age: float = 60.0) -> None:
        """
        The folder last changed C{age} seconds ago.
        """
        when = time.time() - age
        os.utime(self.piDir, (when, when))
        # Its own time set, its status (ctime) changed now: as old as that.
        self.patch(self.newest, "now", lambda: time.time() + age)

    def check(self) -> tuple[Path, os.stat_result] | None:
        found = self.newest(self.piDir)
        expected = self.real(self.piDir)[0]  # newestSessionFile's, not counted
        self.assertEqual(None if found is None else (found[0], found[1].st_size),
                         None if expected is None else (expected[0], expected[1].st_size))
        return found

    def test_keptWhileQuiet(self) -> None:
        """
        A quiet folder with one conversation file is read once; the file's
        own status is taken anew each time (pi appends to it).
        """
        path = self.piDir / "a.jsonl"
        path.write_text("{}\n")
        self.quiet()
        self.check()
        with path.open("a") as f:
            f.write("{}\n")
        found = self.check()
        assert found is not None
        self.assertEqual(found[1].st_size, 6)
        self.assertEqual(len(self.scans), 1)

    def test_emptyKeptWhileQuiet(self) -> None:
        """
        A quiet folder with no conversation file is read once.
        """
        self.quiet()
        self.assertIsNone(self.check())
        self.assertIsNone(self.check())
        self.assertEqual(len(self.scans), 1)

    def test_anEntryAddedOrRemoved(self) -> None:
        """
        A file added (pi's first, or a new conversation) or removed changes
        the folder's time: it is read again and the newest found.
        """
        self.quiet()
        self.assertIsNone(self.check())
        first = self.piDir / "a.jsonl"
        first.write_text("{}\n")
        self.assertEqual(self.check()[0], first)  # type: ignore[index]
        self.quiet()
        self.check()
        os.unlink(first)
        self.assertIsNone(self.check())
        self.assertEqual(len(self.scans), 4)

    def test_racyFolderReadAgain(self) -> None:
        """
        A folder that changed less than L{RACY_SECONDS} before it was read
        is read again each time: a change in the same tick of the file
        system's clock would leave its time as it was.
        """
        (self.piDir / "a.jsonl").write_text("{}\n")
        self.check()
        self.check()
        self.quiet(RACY_SECONDS / 2)
        self.check()
        self.check()
        self.assertEqual(len(self.scans), 4)

    def test_severalFilesReadAgain(self) -> None:
        """
        With two conversation files the folder is read each time: pi
        writing to the older one makes it the newest, the folder unchanged.
        """
        older, newer = self.piDir / "a.jsonl", self.piDir / "b.jsonl"
        older.write_text("{}\n")
        newer.write_text("{}\n")
        when = time.time() - 30
        os.utime(older, (when, when))
        self.quiet()
        self.assertEqual(self.check()[0], newer)  # type: ignore[index]
        with older.open("a") as f:
            f.write("{}\n")
        self.assertEqual(self.check()[0], older)  # type: ignore[index]
        self.assertEqual(len(self.scans), 2)

    def test_replacedByALinkNeverFollowed(self) -> None:
        """
        A body that puts a link in its file's place and sets its folder's
        time back is not followed: setting the time changes the folder's
        status, and the kept file is taken only while it is a regular file.
        """
        path = self.piDir / "a.jsonl"
        path.write_text("{}\n")
        self.quiet()
        self.check()
        elsewhere = Path(self.mktemp()).absolute()
        elsewhere.write_text("secret\n")
        before = os.stat(self.piDir)
        os.unlink(path)
        os.symlink(elsewhere, path)
        os.utime(self.piDir, ns=(before.st_atime_ns, before.st_mtime_ns))
        self.assertIsNone(self.check())
        # Even were the folder's status the same, the link is passed over.
        now = os.stat(self.piDir)
        self.newest._folder = (str(self.piDir), now.st_dev, now.st_ino, now.st_mtime_ns,
                               now.st_ctime_ns)
        self.newest._file = path
        self.assertIsNone(self.check())

    def test_folderGone(self) -> None:
        """
        No folder (or a file in its place): no conversation, and nothing
        kept.
        """
        self.quiet()
        self.check()
        self.piDir.rmdir()
        self.assertIsNone(self.check())
        self.piDir.write_text("")
        self.assertIsNone(self.check())
