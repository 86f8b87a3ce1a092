"""
More tests for L{vehicle.store}, written from its mutants (see
C{scripts/mutate}): each asserts a behaviour of the store that a changed
line would break (modes under an odd umask, the flags of an C{open}, every
descriptor closed, the syncs a power cut needs, the order of the steps).
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import stat
from pathlib import Path
from typing import Any

from twisted.logger import capturedLogs
from twisted.trial.unittest import SynchronousTestCase

from tests.support._crashfs import Crash, CrashFiles
from vehicle.store import (
    CorruptLog,
    DataDir,
    JsonlLog,
    OsFiles,
    files,
    readJson,
    syncFile,
    fsyncDirectory,
    removeTree,
    useFiles,
    writeAtomic,
    writeJsonAtomic,
)
from vehicle import _syncd
from vehicle.store import _atomic, _files, _jsonl, _layout
from vehicle.store._atomic import makeDirs
from tests.support._hints import assertAnnotationsResolve


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
        self.assertEqual(_syncd._FULLFSYNC, getattr(fcntl, "F_FULLFSYNC", None))
        synced: list[int] = []
        self.patch(_syncd, "_FULLFSYNC", None)
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

        self.patch(_syncd, "_FULLFSYNC", 51)
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


class AtomicTests(SynchronousTestCase):
    """
    L{writeAtomic}'s temporary file, its failures and its descriptors;
    L{writeJsonAtomic}'s format; L{fsyncDirectory}.
    """

    def crashFiles(self, root: Path) -> CrashFiles:
        layer = CrashFiles(root)
        layer.install(self.patch)
        self.addCleanup(layer.uninstall)
        return layer

    def test_tempName(self) -> None:
        """
        The temporary file is C{.<name>.<12 hex digits>.tmp} (48 random
        bits) beside the target, opened for writing, created exclusively.
        """
        directory = _tempDir(self)
        recorder = _record(self)
        writeAtomic(directory / "meta.json", b"{}")
        opens = [c for c in recorder.calls if c[0] == "open"]
        self.assertEqual(len(opens), 2, opens)
        temp, flags = Path(opens[0][1]), opens[0][2]
        self.assertEqual(temp.parent, directory)
        self.assertRegex(temp.name, r"\A\.meta\.json\.[0-9a-f]{12}\.tmp\Z")
        self.assertEqual(flags & (os.O_ACCMODE | os.O_CREAT | os.O_EXCL),
                         os.O_WRONLY | os.O_CREAT | os.O_EXCL)

    def test_tempNameTaken(self) -> None:
        """
        A temporary name already there (a link to another file, a file of
        someone's) is never written through or replaced: the next name is
        tried.
        """
        directory = _tempDir(self)
        victim = directory / "victim"
        victim.write_bytes(b"victim")
        (directory / ".meta.json.aaaa.tmp").symlink_to(victim)
        (directory / ".meta.json.bbbb.tmp").write_bytes(b"other")
        names = ["aaaa", "bbbb", "cccc"]
        self.patch(_atomic.secrets, "token_hex", lambda n: names.pop(0))
        writeAtomic(directory / "meta.json", b"new")
        self.assertEqual(names, [])
        self.assertEqual((directory / "meta.json").read_bytes(), b"new")
        self.assertEqual(victim.read_bytes(), b"victim")
        self.assertEqual((directory / ".meta.json.bbbb.tmp").read_bytes(), b"other")
        self.assertEqual(os.readlink(directory / ".meta.json.aaaa.tmp"), str(victim))
        self.assertEqual(
            sorted(os.listdir(directory)),
            [".meta.json.aaaa.tmp", ".meta.json.bbbb.tmp", "meta.json", "victim"],
        )

    def test_failureKeepsItsError(self) -> None:
        """
        When the write fails and removing the temporary file fails too, the
        write's error is the one raised; no descriptor is left open.
        """
        directory = _tempDir(self)
        layer = self.crashFiles(directory)
        layer.fail("write", errno.ENOSPC)
        layer.fail("unlink", errno.EIO)
        error = self.assertRaises(OSError, writeAtomic, directory / "meta.json", b"x")
        self.assertEqual(error.errno, errno.ENOSPC)
        self.assertEqual(layer.open_fds, set())
        self.assertFalse((directory / "meta.json").exists())

    def test_syncFailureClosesAndCleans(self) -> None:
        """
        A failed sync of the temporary file: it is closed and removed, the
        target untouched, the error raised.
        """
        directory = _tempDir(self)
        (directory / "meta.json").write_bytes(b"old")
        layer = self.crashFiles(directory)
        layer.fail("fsync", errno.EIO)
        error = self.assertRaises(OSError, writeAtomic, directory / "meta.json", b"new")
        self.assertEqual(error.errno, errno.EIO)
        self.assertEqual(layer.open_fds, set())
        self.assertEqual(os.listdir(directory), ["meta.json"])
        self.assertEqual((directory / "meta.json").read_bytes(), b"old")

    def test_modesWhateverUmask(self) -> None:
        """
        L{writeAtomic} and L{writeJsonAtomic} give the file exactly its
        mode, 0600 by default, under any umask.
        """
        directory = _tempDir(self)
        _umask(self, 0)
        writeJsonAtomic(directory / "a.json", {})
        writeAtomic(directory / "b", b"")
        _umask(self, 0o777)
        writeJsonAtomic(directory / "c.json", {}, mode=0o640)
        writeAtomic(directory / "d", b"", mode=0o604)
        self.assertEqual(
            [_mode(directory / n) for n in ("a.json", "b", "c.json", "d")],
            [0o600, 0o600, 0o640, 0o604],
        )

    def test_jsonFormat(self) -> None:
        """
        JSON files are indented by two, UTF-8 when they can be, all ASCII
        escapes when a lone surrogate forbids UTF-8; NaN is refused either
        way.
        """
        directory = _tempDir(self)
        writeJsonAtomic(directory / "a.json", {"a": [1, "\u00e9"]})
        self.assertEqual(
            (directory / "a.json").read_bytes(),
            '{\n  "a": [\n    1,\n    "\u00e9"\n  ]\n}\n'.encode("utf-8"),
        )
        writeJsonAtomic(directory / "b.json", {"a": ["\ud800", "\u00e9"]})
        self.assertEqual(
            (directory / "b.json").read_bytes(),
            b'{\n  "a": [\n    "\\ud800",\n    "\\u00e9"\n  ]\n}\n',
        )
        self.assertRaises(
            ValueError, writeJsonAtomic, directory / "c.json",
            {"a": "\ud800", "b": float("nan")},
        )
        self.assertEqual(sorted(os.listdir(directory)), ["a.json", "b.json"])

    def test_fsyncDirectory(self) -> None:
        """
        L{fsyncDirectory} opens a directory as one (a file is refused) and
        closes it, also when the sync fails.
        """
        directory = _tempDir(self)
        (directory / "file").write_bytes(b"")
        self.assertRaises(NotADirectoryError, fsyncDirectory, directory / "file")
        layer = self.crashFiles(directory)
        layer.fail("fsync", errno.EIO)
        self.assertRaises(OSError, fsyncDirectory, directory)
        self.assertEqual(layer.open_fds, set())
        fsyncDirectory(directory)
        self.assertEqual(layer.open_fds, set())


class UnsyncedTests(SynchronousTestCase):
    """
    A folder nobody reads until it is synced whole (a session's folder
    built aside): its files written with no sync, then each synced once.
    """

    def test_atomicNotDurable(self) -> None:
        """
        C{durable=False}: the same atomic replace (a temporary file renamed
        over the target), and no sync of the file or its folder.
        """
        directory = _tempDir(self)
        (directory / "meta.json").write_bytes(b"old")
        recorder = _record(self)
        writeJsonAtomic(directory / "meta.json", {"a": 1}, durable=False)
        self.assertEqual(json.loads((directory / "meta.json").read_text()), {"a": 1})
        self.assertEqual([c for c in recorder.calls if c[0] == "fsync"], [])
        self.assertEqual(sorted(os.listdir(directory)), ["meta.json"])
        writeAtomic(directory / "meta.json", b"{}")
        self.assertEqual([c[1] for c in recorder.calls if c[0] == "fsync"][-1], str(directory))

    def test_syncFile(self) -> None:
        """
        L{syncFile} syncs the file, and nothing else, and closes what it
        opened.
        """
        directory = _tempDir(self)
        (directory / "meta.json").write_bytes(b"{}")
        recorder = _record(self)
        syncFile(directory / "meta.json")
        self.assertEqual([c for c in recorder.calls if c[0] == "fsync"],
                         [("fsync", str(directory / "meta.json"))])
        [(_, _, flags, fd)] = [c for c in recorder.calls if c[0] == "open"]
        self.assertEqual(flags & os.O_ACCMODE, os.O_RDONLY)
        self.assertIn(("close", fd), recorder.calls)
        self.assertRaises(FileNotFoundError, syncFile, directory / "missing.json")

    def test_newLogFolderUnsynced(self) -> None:
        """
        C{syncFolder=False}: a new log's folder is not synced, nor are its
        unsynced appends; by default the folder is synced as the log is made.
        """
        directory = _tempDir(self)
        recorder = _record(self)
        log, _ = JsonlLog.open(directory / "aside.jsonl", syncFolder=False)
        log.append({"n": 1}, sync=False)
        log.close()
        self.assertEqual([c for c in recorder.calls if c[0] == "fsync"], [])
        log, records = JsonlLog.open(directory / "aside.jsonl", syncFolder=False)
        log.close()
        self.assertEqual(records, [{"n": 1}])
        log, _ = JsonlLog.open(directory / "made.jsonl")
        log.close()
        self.assertEqual([c for c in recorder.calls if c[0] == "fsync"],
                         [("fsync", str(directory))])


class JsonlTests(SynchronousTestCase):
    """
    L{JsonlLog}: modes, descriptors, failures, the repair's report and its
    copy.
    """

    def setUp(self) -> None:
        self.directory = _tempDir(self)
        self.path = self.directory / "events.jsonl"

    def crashFiles(self) -> CrashFiles:
        layer = CrashFiles(self.directory)
        layer.install(self.patch)
        self.addCleanup(layer.uninstall)
        return layer

    def test_modesWhateverUmask(self) -> None:
        """
        A new log and a C{.broken} copy are 0600, under any umask.
        """
        _umask(self, 0)
        log, _ = JsonlLog.open(self.path)
        log.close()
        self.assertEqual(_mode(self.path), 0o600)
        _umask(self, 0o777)
        other = self.directory / "other.jsonl"
        other.write_bytes(b'{"n":1}\n{"n"')
        log, _ = JsonlLog.open(other)
        log.close()
        self.assertEqual(_mode(self.directory / "other.jsonl.broken"), 0o600)
        log, _ = JsonlLog.open(self.directory / "new.jsonl")
        log.close()
        self.assertEqual(_mode(self.directory / "new.jsonl"), 0o600)

    def test_descriptorsClosed(self) -> None:
        """
        Every descriptor a log opens is closed: by L{JsonlLog.close}, by a
        refused open, by an open whose first sync fails.
        """
        layer = self.crashFiles()
        log, _ = JsonlLog.open(self.path)
        log.append({"n": 1})
        log.reopen(self.path)
        log.close()
        self.assertEqual(layer.open_fds, set())
        self.path.write_bytes(b'{"n":1}\n[]\n{"n":3}\n')
        self.assertRaises(CorruptLog, JsonlLog.open, self.path)
        self.assertEqual(layer.open_fds, set())
        layer.fail("fchmod", errno.EIO)
        self.assertRaises(OSError, JsonlLog.open, self.directory / "b.jsonl")
        self.assertEqual(layer.open_fds, set())
        (self.directory / "c.jsonl").write_bytes(b'{"n":1}\n{"n"')
        layer.fail("write", errno.ENOSPC)
        self.assertRaises(OSError, JsonlLog.open, self.directory / "c.jsonl")
        self.assertEqual(layer.open_fds, set())

    def test_appendFailureCutFails(self) -> None:
        """
        When a write fails and cutting the log back fails too, the write's
        error is the one raised, and the log refuses more.
        """
        log, _ = JsonlLog.open(self.path)
        self.addCleanup(log.close)
        layer = self.crashFiles()
        layer.fail("write", errno.ENOSPC)
        layer.fail("ftruncate", errno.EIO)
        error = self.assertRaises(OSError, log.append, {"n": 1})
        self.assertEqual(error.errno, errno.ENOSPC)
        self.assertTrue(log.failed)

    def test_identity(self) -> None:
        """
        A log is an object of its own: equal only to itself, usable as a key.
        """
        first, _ = JsonlLog.open(self.path)
        self.addCleanup(first.close)
        second, _ = JsonlLog.open(self.path)
        self.addCleanup(second.close)
        self.assertNotEqual(first, second)
        self.assertEqual({first: 1, second: 2}[first], 1)

    def test_syncIsKeywordOnly(self) -> None:
        """
        Whether to sync, and the sequence field, are said by name, never by
        a bare positional value.
        """
        self.assertRaises(TypeError, JsonlLog.open, self.path, "seq")  # type: ignore[misc]
        log, _ = JsonlLog.open(self.path)
        self.addCleanup(log.close)
        self.assertRaises(TypeError, log.append, {"n": 1}, False)  # type: ignore[misc]
        self.assertEqual(self.path.read_bytes(), b"")

    def test_appendsAtTheEnd(self) -> None:
        """
        Every append lands at the end of the file, also when another
        descriptor of the same log (the one it was created with or not)
        wrote in between.
        """
        first, _ = JsonlLog.open(self.path)
        self.addCleanup(first.close)
        second, _ = JsonlLog.open(self.path)
        self.addCleanup(second.close)
        first.append({"n": 1})
        second.append({"n": 2})
        first.append({"n": 3})
        second.append({"n": 4})
        self.assertEqual(self.path.read_bytes(), b'{"n":1}\n{"n":2}\n{"n":3}\n{"n":4}\n')

    def test_longSequence(self) -> None:
        """
        Sequence numbers are compared as numbers, past the small ones too:
        a log of 301 records opens and takes the 302nd, and a wrong number
        is refused saying which one is due.
        """
        self.path.write_bytes(b"".join(b'{"s":%d}\n' % n for n in range(1, 302)))
        log, records = JsonlLog.open(self.path, seqField="s")
        self.addCleanup(log.close)
        self.assertEqual((len(records), log.lastSeq), (301, 301))
        error = self.assertRaises(ValueError, log.append, {"s": 304})
        self.assertEqual(str(error), f"{self.path}: s must be 302, not 304")
        log.append({"s": 302})
        self.assertEqual(log.lastSeq, 302)

    def test_syncWhenClosed(self) -> None:
        """
        L{JsonlLog.sync} of a closed log raises L{ValueError}.
        """
        log, _ = JsonlLog.open(self.path)
        log.close()
        self.assertRaises(ValueError, log.sync)

    def test_repairReport(self) -> None:
        """
        The repair's warning names the log, the reason, the offset of the
        torn tail, the bytes dropped and the copy; a sound log, however
        long, is neither repaired nor reported.
        """
        self.path.write_bytes(b'{"n":1}\n{"n":2,"x')
        with capturedLogs() as events:
            log, _ = JsonlLog.open(self.path)
        log.close()
        self.assertEqual(len(events), 1)
        self.assertEqual(
            {k: events[0][k] for k in ("path", "reason", "offset", "dropped", "broken")},
            {"path": str(self.path), "reason": "last line has no newline", "offset": 8,
             "dropped": 9, "broken": str(self.path) + ".broken"},
        )
        long = b"".join(b'{"n":%d,"pad":"%s"}\n' % (n, b"x" * 40) for n in range(1, 40))
        self.path.write_bytes(long)
        with capturedLogs() as events:
            log, records = JsonlLog.open(self.path, seqField="n")
        log.close()
        self.assertEqual((events, len(records), log.lastSeq), ([], 39, 39))
        self.assertEqual(self.path.read_bytes(), long)
        self.assertEqual(sorted(os.listdir(self.directory)),
                         ["events.jsonl", "events.jsonl.broken"])

    def test_badLineThenTornLine(self) -> None:
        """
        A bad whole line followed by a line cut short: both are the torn
        tail, the reason is the first's.
        """
        self.path.write_bytes(b'{"n":1}\n{bad\n{"n":3')
        with capturedLogs() as events:
            log, records = JsonlLog.open(self.path)
        log.close()
        self.assertEqual(records, [{"n": 1}])
        self.assertEqual(self.path.read_bytes(), b'{"n":1}\n')
        self.assertEqual((events[0]["reason"], events[0]["offset"]), ("not valid JSON", 8))

    def test_seqReasons(self) -> None:
        """
        A sequence number going back is called out of order, one missing a
        gap, one not an integer so; the error reads as one line.
        """
        for content, reason in [
            (b'{"s":1}\n{"s":2}\n{"s":3}\n{"s":1}\n', "s 1 after 3 (duplicate or out of order)"),
            (b'{"s":1}\n{"s":2}\n{"s":3}\n{"s":3}\n', "s 3 after 3 (duplicate or out of order)"),
            (b'{"s":1}\n{"s":2}\n{"s":3}\n{"s":5}\n', "s 5 after 3 (gap)"),
            (b'{"s":1}\n{"s":2}\n{"s":3}\n{"s":4.0}\n', "no integer 's'"),
        ]:
            self.path.write_bytes(content)
            error = self.assertRaises(CorruptLog, JsonlLog.open, self.path, seqField="s")
            self.assertEqual((error.lineNumber, error.offset, error.reason), (4, 24, reason))
            self.assertEqual(str(error), f"{self.path}: line 4 (offset 24): {reason}")

    def test_brokenCopyWhole(self) -> None:
        """
        The C{.broken} copy of a log larger than one read, written in short
        writes, is the whole original.
        """
        body = b"".join(b'{"n":%d,"pad":"%s"}\n' % (n, b"y" * 500) for n in range(400))
        original = body + b'{"n":'
        self.path.write_bytes(original)
        realWrite = _jsonl._write
        self.patch(_jsonl, "_write", lambda fd, data: realWrite(fd, bytes(data)[:1000]))
        log, records = JsonlLog.open(self.path)
        log.close()
        self.assertEqual(len(records), 400)
        self.assertEqual((self.directory / "events.jsonl.broken").read_bytes(), original)
        self.assertEqual(self.path.read_bytes(), body)


class LayoutTests(SynchronousTestCase):
    """
    L{DataDir}: its directories, the trash, and what start sweeps.
    """

    def setUp(self) -> None:
        self.root = _tempDir(self) / "data"
        self.data = DataDir(self.root)
        self.data.ensure()

    def session(self, sessionId: str, meta: bool = True) -> Path:
        directory = self.data.sessionDir(sessionId)
        directory.mkdir()
        if meta:
            (directory / "meta.json").write_text("{}")
        return directory

    def power(self, renames: str = "either") -> CrashFiles:
        """
        The power-cut layer under the store, armed: what is on disk now is
        durable.  With C{renames="both"}, a rename between two directories
        is durable only once both are synced.
        """
        layer = CrashFiles(self.root.parent, "power", renames)
        layer.install(self.patch)
        self.addCleanup(layer.uninstall)
        layer.arm(None)
        return layer

    def cut(self, layer: CrashFiles) -> None:
        layer.kill()
        layer.revive()

    def test_ensureModes(self) -> None:
        """
        A missing root is made with its parents, 0700 (no umask here), its
        four directories exactly 0700 under any umask; what is there is
        kept.
        """
        _umask(self, 0)
        root = _tempDir(self) / "a" / "b"
        DataDir(root).ensure()
        self.assertEqual(_mode(root), 0o700)
        _umask(self, 0o777)
        (root / "trash").rmdir()
        (root / "sessions" / "keep").mkdir()
        DataDir(root).ensure()
        for name in ("sessions", "trash", "workspaces", "public"):
            self.assertEqual(_mode(root / name), 0o700, name)
        self.assertEqual(os.listdir(root / "sessions"), ["keep"])

    def test_ensureDurable(self) -> None:
        """
        The directories L{DataDir.ensure} makes survive a power cut; when
        all are there it syncs nothing.
        """
        root = self.root.parent / "other"
        layer = self.power()
        DataDir(root).ensure()
        self.cut(layer)
        self.assertEqual(sorted(os.listdir(root)), ["public", "sessions", "trash", "workspaces"])
        layer.arm(None)
        DataDir(root).ensure()
        self.assertEqual(layer.syncs, 0)
        (root / "public").rmdir()
        layer.arm(None)
        DataDir(root).ensure()
        self.cut(layer)
        self.assertTrue((root / "public").is_dir())

    def test_listSkipsLinks(self) -> None:
        """
        A link in C{sessions/} to a folder with a C{meta.json} is not a
        session.
        """
        self.session("real")
        elsewhere = self.root / "elsewhere"
        elsewhere.mkdir()
        (elsewhere / "meta.json").write_text("{}")
        (self.data.sessions / "linked").symlink_to(elsewhere)
        self.assertEqual(self.data.listSessionIds(), ["real"])

    def test_reserveTrash(self) -> None:
        """
        A trash name is reserved as an empty directory, 0700, the trash made
        again if missing; taken names are skipped.
        """
        _umask(self, 0)
        self.data.trash.rmdir()
        self.assertEqual(self.data.reserveTrash("abc"), "abc")
        self.assertEqual(_mode(self.data.trash), 0o700)
        self.assertEqual(_mode(self.data.trash / "abc"), 0o700)
        self.assertEqual(self.data.reserveTrash("abc"), "abc-2")
        self.assertEqual(self.data.reserveTrash("abc"), "abc-3")
        self.assertEqual(self.data.emptyTrashReservations(), ["abc", "abc-2", "abc-3"])

    def test_reserveTrashDurable(self) -> None:
        """
        A trash name reserved is still reserved after a power cut.
        """
        layer = self.power()
        name = self.data.reserveTrash("abc")
        self.cut(layer)
        self.assertEqual(self.data.emptyTrashReservations(), [name])

    def test_publishWhole(self) -> None:
        """
        A session folder published is there after a power cut with every
        entry made in it, even one nothing synced before (a folder made
        with a bare C{mkdir}), and only under its id.
        """
        building = self.data.buildingDir("abc")
        layer = self.power("both")
        building.mkdir()
        writeAtomic(building / "meta.json", b"{}")
        (building / "pi").mkdir()
        self.data.publish("abc")
        self.cut(layer)
        self.assertEqual(os.listdir(self.data.sessions), ["abc"])
        self.assertEqual(sorted(os.listdir(self.data.sessionDir("abc"))), ["meta.json", "pi"])

    def test_finishTrashAgain(self) -> None:
        """
        A delete cut after the workspace went into the session's folder is
        finished by L{DataDir.finishTrash}: nothing moved twice.
        """
        directory = self.session("abc")
        workspace = self.data.workspaceDir("abc")
        workspace.mkdir()
        (workspace / "w.txt").write_text("w")
        name = self.data.reserveTrash("abc")
        os.rename(workspace, directory / "workspace")
        self.data.finishTrash("abc", name, {"sessionId": "abc"})
        trashed = self.data.trashDir(name)
        self.assertEqual(sorted(os.listdir(trashed)), ["deleted.json", "meta.json", "workspace"])
        self.assertEqual((trashed / "workspace" / "w.txt").read_text(), "w")
        self.assertEqual(os.listdir(self.data.sessions), [])

    def test_finishTrashWorkspaceBothPlaces(self) -> None:
        """
        A workspace already inside the session's folder is not replaced by
        one outside it.
        """
        directory = self.session("abc")
        (directory / "workspace").mkdir()
        (directory / "workspace" / "inner").write_text("in")
        self.data.workspaceDir("abc").mkdir()
        (self.data.workspaceDir("abc") / "outer").write_text("out")
        name = self.data.reserveTrash("abc")
        self.data.finishTrash("abc", name, {})
        self.assertEqual(os.listdir(self.data.trashDir(name) / "workspace"), ["inner"])
        self.assertEqual(os.listdir(self.data.workspaceDir("abc")), ["outer"])

    def test_moveToTrashFailures(self) -> None:
        """
        A rename refused, then the reservation's removal refused too: the
        rename's error is raised, the session is where it was.  A failure
        once the folder is in the trash keeps it there.
        """
        self.session("abc")
        layer = CrashFiles(self.root)
        layer.install(self.patch)
        self.addCleanup(layer.uninstall)
        layer.fail("rename", errno.EXDEV)
        layer.fail("rmdir", errno.EIO)
        error = self.assertRaises(OSError, self.data.moveToTrash, "abc", {})
        self.assertEqual(error.errno, errno.EXDEV)
        self.assertTrue((self.data.sessionDir("abc") / "meta.json").exists())
        self.assertEqual(os.listdir(self.data.trash), ["abc"])
        self.data.trashDir("abc").rmdir()
        # Syncs: the reservation's trash, the deleted.json file, the session
        # folder; then the trash after the rename fails.
        layer.fail("fsync", errno.EIO, after=3)
        self.assertRaises(OSError, self.data.moveToTrash, "abc", {})
        self.assertFalse(self.data.sessionDir("abc").exists())
        self.assertEqual(sorted(os.listdir(self.data.trashDir("abc"))),
                         ["deleted.json", "meta.json"])

    def test_moveToTrashDurable(self) -> None:
        """
        After L{DataDir.moveToTrash} of an agent session and a power cut,
        the session is in the trash with its workspace and nowhere else.
        """
        self.session("abc")
        self.data.workspaceDir("abc").mkdir()
        (self.data.workspaceDir("abc") / "f").write_text("f")
        layer = self.power("both")
        name = self.data.moveToTrash("abc", {"sessionId": "abc"})
        self.cut(layer)
        self.assertEqual(os.listdir(self.data.sessions), [])
        self.assertEqual(os.listdir(self.data.workspaces), [])
        self.assertEqual(sorted(os.listdir(self.data.trashDir(name))),
                         ["deleted.json", "meta.json", "workspace"])
        self.assertEqual(os.listdir(self.data.trashDir(name) / "workspace"), ["f"])

    def test_moveToTrashEverySync(self) -> None:
        """
        Cut the power at each sync of L{DataDir.moveToTrash} in turn: the
        session's folder and its workspace are each in exactly one place
        when a rename is durable once either of its directories is synced
        (a journaling file system), and never lost when each side must be
        synced (the strict reading, where a folder can even show in both).
        """
        for renames in ("either", "both"):
            k = 0
            finished = False
            while not finished:
                k += 1
                data = DataDir(_tempDir(self) / "data")
                data.ensure()
                data.sessionDir("abc").mkdir()
                (data.sessionDir("abc") / "meta.json").write_text("{}")
                data.workspaceDir("abc").mkdir()
                (data.workspaceDir("abc") / "f").write_text("f")
                layer = CrashFiles(data.root, "power", renames)
                layer.install(self.patch)
                layer.arm(k)
                try:
                    data.moveToTrash("abc", {})
                except Crash:
                    pass
                finished = not layer.crashed
                layer.kill()
                layer.revive()
                layer.uninstall()
                folders = [p for p in [data.sessionDir("abc"), *data.trash.iterdir()]
                           if (p / "meta.json").exists()]
                workspaces = [
                    p for p in [data.workspaceDir("abc"), data.sessionDir("abc") / "workspace",
                                *(t / "workspace" for t in data.trash.iterdir())]
                    if (p / "f").exists()
                ]
                where = (renames, k, folders, workspaces)
                if renames == "either" or finished:
                    self.assertEqual((len(folders), len(workspaces)), (1, 1), where)
                else:
                    self.assertTrue(folders and workspaces, where)
            self.assertEqual(k, 8, renames)

    def test_sweepBuilding(self) -> None:
        """
        Start removes a session folder left half made, not a link or a file
        of that name (nor what a link points to); it moves a session folder
        without C{meta.json} to the trash; it leaves the others.
        """
        building = self.data.buildingDir("abc")
        (building / "pi").mkdir(parents=True)
        (building / "pi" / "x").write_text("x")
        outside = self.root / "outside"
        outside.mkdir()
        (outside / "keep").write_text("k")
        (self.data.sessions / ".new-link").symlink_to(outside)
        (self.data.sessions / ".new-file").write_text("f")
        self.session("nometa", meta=False)
        (self.data.sessions / "nometa" / "events.jsonl").write_text("")
        self.session("good")
        (self.data.sessions / "bad name").mkdir()
        (self.data.trash / "nometa").mkdir()
        done = self.data.sweep()
        self.assertEqual(done, [
            f"removed the half-made session folder {building}",
            f"moved the session folder without meta.json {self.data.sessions / 'nometa'}"
            " to trash/nometa-2",
        ])
        self.assertEqual(sorted(os.listdir(self.data.sessions)),
                         [".new-file", ".new-link", "bad name", "good"])
        self.assertEqual(os.listdir(outside), ["keep"])
        self.assertEqual(os.listdir(self.data.trash / "nometa-2"), ["events.jsonl"])
        self.assertEqual(self.data.sweep(), [])

    def test_sweepASparesFolder(self) -> None:
        """
        A session folder without C{meta.json} holding only what a spare
        made for the session it waited for (an empty C{work/}, a C{pi/} of
        session files nobody spoke in) is removed at start; one where
        anything else is, or anyone spoke, goes to the trash as before.
        """
        header = '{"type":"session","version":3,"id":"x","cwd":"/w"}\n{"type":"model_change"}\n'
        for name, extra in [("spare", None), ("spoken", "message"), ("worked", "work"),
                            ("more", "file"), ("moredir", "dir"), ("notes", "text"),
                            ("fifo", "fifo"), ("linked", "link"), ("json", "json")]:
            folder = self.data.sessions / name
            (folder / "pi").mkdir(parents=True)
            (folder / "work").mkdir()
            text = header + ('{"type": "message"}\n' if extra == "message" else "")
            (folder / "pi" / "2026-12-02T00-00-00-000Z_x.jsonl").write_text(text)
            if extra == "work":
                (folder / "work" / "made.txt").write_text("x")
            if extra == "file":
                (folder / "notes").write_text("x")
            if extra == "dir":
                (folder / "logs").mkdir()
            if extra == "text":
                (folder / "pi" / "notes.txt").write_text("x")
            if extra == "json":
                (folder / "pi" / "facts.json").write_text("{}")
            if extra == "fifo":
                os.mkfifo(folder / "pi" / "2026-12-02T00-00-01-000Z_y.jsonl")
            if extra == "link":
                (folder / "work").rmdir()
                (self.root / "empty-elsewhere").mkdir()
                (folder / "work").symlink_to(self.root / "empty-elsewhere")
        done = self.data.sweep()
        self.assertIn(f"removed the folder a spare body made for a session "
                      f"{self.data.sessions / 'spare'}", done)
        self.assertEqual(os.listdir(self.data.sessions), [])
        self.assertEqual(sorted(os.listdir(self.data.trash)),
                         ["fifo", "json", "linked", "more", "moredir", "notes", "spoken",
                          "worked"])
        self.assertTrue((self.root / "empty-elsewhere").is_dir())

    def test_sweepUnreadableNotASpares(self) -> None:
        """
        A folder whose files cannot be read is not taken for a spare's: it
        goes to the trash, whole.
        """
        folder = self.data.sessions / "unread"
        (folder / "pi").mkdir(parents=True)
        (folder / "pi" / "2026-12-02T00-00-00-000Z_x.jsonl").write_text("{}\n")

        def refuse(path: Path) -> bytes:
            raise OSError(errno.EIO, "Input/output error")

        self.patch(Path, "read_bytes", refuse)
        self.data.sweep()
        self.assertEqual(os.listdir(self.data.trash), ["unread"])

    def test_sweepSparesLeftovers(self) -> None:
        """
        Start removes what spare bodies left in C{spares/} (a killed host's),
        never a link there or what it points to.
        """
        self.data.spares.mkdir()
        (self.data.spares / "spare-1" / "pi").mkdir(parents=True)
        outside = self.root / "outside-spare"
        outside.mkdir()
        (outside / "keep").write_text("k")
        (self.data.spares / "spare-link").symlink_to(outside)
        (self.data.spares / "stray").write_text("s")
        done = self.data.sweep()
        self.assertEqual(done, [f"removed the folder of a spare body {self.data.spares / 'spare-1'}"])
        self.assertEqual(sorted(os.listdir(self.data.spares)), ["spare-link", "stray"])
        self.assertEqual(os.listdir(outside), ["keep"])

    def test_sweepRenameFails(self) -> None:
        """
        When moving a session folder without C{meta.json} to the trash
        fails, the trash name reserved for it is given back and the error
        raised; should giving it back fail too, the first error is raised.
        """
        (self.session("nometa", meta=False) / "events.jsonl").write_text("")
        layer = CrashFiles(self.root)
        layer.install(self.patch)
        self.addCleanup(layer.uninstall)
        layer.fail("rename", errno.EXDEV)
        error = self.assertRaises(OSError, self.data.sweep)
        self.assertEqual(error.errno, errno.EXDEV)
        self.assertEqual(os.listdir(self.data.trash), [])
        layer.fail("rename", errno.EXDEV)
        layer.fail("rmdir", errno.EIO)
        error = self.assertRaises(OSError, self.data.sweep)
        self.assertEqual(error.errno, errno.EXDEV)
        self.assertEqual(os.listdir(self.data.trash), ["nometa"])
        self.assertEqual(os.listdir(self.data.sessions), ["nometa"])

    def test_sweepTempFiles(self) -> None:
        """
        Start removes the host's temporary files (C{.<name>.tmp} files) in
        C{public/}, in each session or trash folder and its C{pi/} and
        C{pi/agent/}; nothing else, nowhere else, never through a link.
        """
        removed = []
        kept = []
        session = self.session("abc")
        (session / "pi" / "agent" / "deeper").mkdir(parents=True)
        trashed = self.data.trash / "old"
        (trashed / "pi" / "agent").mkdir(parents=True)
        (trashed / "meta.json").write_text("{}")
        (trashed / "deleted.json").write_text("{}")
        for place in (self.data.public, session, session / "pi", session / "pi" / "agent",
                      trashed, trashed / "pi", trashed / "pi" / "agent"):
            (place / ".meta.json.0123.tmp").write_text("t")
            removed.append(place / ".meta.json.0123.tmp")
            for name in ("meta.json.tmp", ".meta.json.tmp.x", ".keep"):
                (place / name).write_text("k")
                kept.append(place / name)
            (place / ".dir.tmp").mkdir()
            kept.append(place / ".dir.tmp")
        for place in (self.root, self.data.sessions, session / "pi" / "agent" / "deeper",
                      self.data.workspaces):
            (place / ".x.tmp").write_text("k")
            kept.append(place / ".x.tmp")
        outside = self.root / "outside"
        outside.mkdir()
        (outside / ".x.tmp").write_text("k")
        kept.append(outside / ".x.tmp")
        (session / "pi" / "link").symlink_to(outside)
        os.symlink(outside, self.data.trash / "linked")
        self.assertEqual(
            sorted(self.data.sweep()), sorted(f"removed the temporary file {p}" for p in removed)
        )
        for path in removed:
            self.assertFalse(path.exists(), path)
        for path in kept:
            self.assertTrue(path.exists(), path)

    def test_sweepDurable(self) -> None:
        """
        What start removed and moved stays so after a power cut.
        """
        self.data.buildingDir("abc").mkdir()
        (self.session("nometa", meta=False) / "events.jsonl").write_text("")
        (self.session("spare", meta=False) / "pi").mkdir()
        layer = self.power("both")
        self.assertEqual(len(self.data.sweep()), 3)
        self.cut(layer)
        self.assertEqual(os.listdir(self.data.sessions), [])
        self.assertEqual(os.listdir(self.data.trash), ["nometa"])

    def test_sweepMissingDirectories(self) -> None:
        """
        Start on a data dir not laid out yet (or half) does nothing and does
        not fail.
        """
        root = _tempDir(self) / "bare"
        root.mkdir()
        self.assertEqual(DataDir(root).sweep(), [])
        self.assertEqual(DataDir(root).sweepTrash(), [])
        self.assertEqual(DataDir(root).emptyTrashReservations(), [])
        (root / "sessions").mkdir()
        DataDir(root).buildingDir("abc").mkdir()
        self.assertEqual(len(DataDir(root).sweep()), 1)
        self.assertEqual(os.listdir(root), ["sessions"])

    def test_emptyTrashReservations(self) -> None:
        """
        Empty directories in the trash are reservations; a full one, a
        file or a link is not.
        """
        for name in ("b", "a-2"):
            (self.data.trash / name).mkdir()
        (self.data.trash / "full").mkdir()
        (self.data.trash / "full" / "meta.json").write_text("{}")
        (self.data.trash / "file").write_text("")
        empty = self.root / "empty"
        empty.mkdir()
        (self.data.trash / "link").symlink_to(empty)
        self.assertEqual(self.data.emptyTrashReservations(), ["a-2", "b"])

    def test_sweepTrash(self) -> None:
        """
        Start removes empty trash reservations, writes a missing
        C{deleted.json}, and puts a workspace left outside into the newest
        trash entry of its session that has none, else removes it.
        """
        trash = self.data.trash
        (trash / "empty").mkdir()
        (trash / "link").symlink_to(self.root / "nowhere")
        (trash / "file").write_text("")
        (trash / "s1-3").mkdir()
        (trash / "s1-3" / "meta.json").write_text("{}")
        for name in ("s1", "s1-2", "s2"):
            (trash / name).mkdir()
            (trash / name / "deleted.json").write_text("{}")
        (trash / "s1" / "workspace").mkdir()
        for sessionId in ("s1", "s2", "s3", "live"):
            self.data.workspaceDir(sessionId).mkdir()
            (self.data.workspaceDir(sessionId) / "f").write_text(sessionId)
        self.session("live")
        (self.data.workspaces / "bad name").mkdir()
        done = self.data.sweepTrash()
        self.assertEqual(done, [
            f"removed the empty trash reservation {trash / 'empty'}",
            f"wrote the missing deleted.json of {trash / 's1-3'}",
            f"moved the workspace {self.data.workspaces / 's1'} into {trash / 's1-3'}",
            f"moved the workspace {self.data.workspaces / 's2'} into {trash / 's2'}",
            f"removed the workspace {self.data.workspaces / 's3'} of a session never made",
        ])
        self.assertEqual(
            readJson(trash / "s1-3" / "deleted.json"),
            {"sessionId": "s1", "trashedAs": "s1-3",
             "note": "finished at start: the host died while deleting"},
        )
        self.assertEqual((trash / "s1-3" / "workspace" / "f").read_text(), "s1")
        self.assertEqual((trash / "s2" / "workspace" / "f").read_text(), "s2")
        self.assertEqual(os.listdir(trash / "s1-2"), ["deleted.json"])
        self.assertEqual(sorted(os.listdir(self.data.workspaces)), ["bad name", "live"])
        self.assertEqual(sorted(os.listdir(trash)),
                         ["file", "link", "s1", "s1-2", "s1-3", "s2"])
        self.assertEqual(self.data.sweepTrash(), [])

    def test_sweepTrashNewest(self) -> None:
        """
        A workspace left outside goes to the newest trash entry of its
        session by number, not by spelling (C{-10} after C{-9}), and never
        to another session's.
        """
        for name in ["s1"] + [f"s1-{n}" for n in range(2, 11)] + ["t1-99999"]:
            (self.data.trash / name).mkdir()
            (self.data.trash / name / "deleted.json").write_text("{}")
        self.data.workspaceDir("s1").mkdir()
        self.data.sweepTrash()
        self.assertTrue((self.data.trash / "s1-10" / "workspace").is_dir())
        self.assertEqual(os.listdir(self.data.trash / "t1-99999"), ["deleted.json"])
        self.assertEqual(os.listdir(self.data.workspaces), [])

    def test_sweepTrashDurable(self) -> None:
        """
        What L{DataDir.sweepTrash} did stays done after a power cut.
        """
        (self.data.trash / "empty").mkdir()
        (self.data.trash / "s1").mkdir()
        (self.data.trash / "s1" / "meta.json").write_text("{}")
        self.data.workspaceDir("s1").mkdir()
        self.data.workspaceDir("s2").mkdir()
        layer = self.power("both")
        self.assertEqual(len(self.data.sweepTrash()), 4)
        self.cut(layer)
        self.assertEqual(os.listdir(self.data.trash), ["s1"])
        self.assertEqual(sorted(os.listdir(self.data.trash / "s1")),
                         ["deleted.json", "meta.json", "workspace"])
        self.assertEqual(os.listdir(self.data.workspaces), [])

    def test_idOf(self) -> None:
        """
        A trash name stands for the session id before its C{-<n>}.
        """
        for name, sessionId in [("abc", "abc"), ("abc-2", "abc"), ("abc-12", "abc"),
                                ("a-b", "a-b"), ("-2", "-2"), ("abc-", "abc-"),
                                ("a-2-3", "a-2"), ("a-x2", "a-x2")]:
            self.assertEqual(_layout._idOf(name), sessionId, name)


class MakeDirsTests(SynchronousTestCase):
    """
    L{makeDirs}: private, durable directories.
    """

    def test_privateAndDurable(self) -> None:
        """
        Each directory made is 0700 whatever the umask, and there after a
        power cut; one already there is left as it is.
        """
        base = _tempDir(self)
        (base / "open").mkdir(mode=0o755)
        os.chmod(base / "open", 0o755)
        layer = CrashFiles(base, "power")
        layer.install(self.patch)
        self.addCleanup(layer.uninstall)
        layer.arm(None)
        _umask(self, 0o777)
        makeDirs(base / "open" / "a" / "b")
        os.umask(0o022)
        self.assertEqual(
            [_mode(p) for p in (base / "open", base / "open" / "a", base / "open" / "a" / "b")],
            [0o755, 0o700, 0o700],
        )
        layer.kill()
        layer.revive()
        self.assertTrue((base / "open" / "a" / "b").is_dir())
        layer.arm(None)
        makeDirs(base / "open" / "a" / "b")
        self.assertEqual(layer.syncs, 0)

    def test_fileInTheWay(self) -> None:
        """
        A file where a directory should be is an error.
        """
        base = _tempDir(self)
        (base / "f").write_text("")
        self.assertRaises(FileExistsError, makeDirs, base / "f")
        self.assertRaises(OSError, makeDirs, base / "f" / "g")


class AnnotationTests(SynchronousTestCase):
    """
    The store's annotations resolve to types (what mypy reads; nothing else
    evaluates them under C{from __future__ import annotations}).
    """

    def test_resolve(self) -> None:
        for module in (_atomic, _files, _jsonl, _layout):
            assertAnnotationsResolve(self, module)
