"""
A body's folders: the host never follows what an agent left in its pi
folder.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from twisted.trial.unittest import SynchronousTestCase

from vehicle.body._spawner import BodyPaths, latestSessionFile, newestSessionFile
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
