"""
Tests for L{vehicle.store}: atomic rewrites, the JSONL log and its repair,
the data directory's layout and the trash.
"""

from __future__ import annotations

import errno
import json
import os
import stat
from pathlib import Path
from typing import Any, Callable

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from twisted.logger import LogLevel, capturedLogs
from twisted.trial.unittest import SynchronousTestCase

from vehicle.store import (
    CorruptLog,
    DataDir,
    JsonlLog,
    OsFiles,
    fsyncDirectory,
    readJson,
    writeAtomic,
    useFiles,
    writeJsonAtomic,
)
from vehicle.store import _jsonl


#: Under scripts/mutate (once per mutant) fewer examples, the same ones
#: each time, so that a mutant's fate does not depend on the draw.
_hypothesisSettings = settings(
    max_examples=12 if os.environ.get("VEHICLE_MUTATE") else 50,
    derandomize=bool(os.environ.get("VEHICLE_MUTATE")),
    database=None if os.environ.get("VEHICLE_MUTATE") else settings().database,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)

#: Text with the characters that could break a line-based format.
_awkwardText = st.text(
    alphabet=st.one_of(
        st.sampled_from(
            ["\n", "\r", "\u2028", "\u2029", "\0", "\U0001f404", '"', "\\"]
        ),
        st.characters(codec="utf-8"),
    ),
    max_size=20,
)

_jsonValues = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | _awkwardText,
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(_awkwardText, children, max_size=4),
    max_leaves=10,
)

_records = st.lists(st.dictionaries(_awkwardText, _jsonValues, max_size=5), max_size=12)


def _tempDir(case: SynchronousTestCase) -> Path:
    path = Path(case.mktemp())
    path.mkdir(parents=True)
    return path


def _writeRecords(
    path: Path, records: list[dict[str, Any]], seqField: str | None = None
) -> None:
    log, _ = JsonlLog.open(path, seqField=seqField)
    try:
        for record in records:
            log.append(record)
    finally:
        log.close()


class AtomicTests(SynchronousTestCase):
    """
    Tests for L{writeAtomic}, L{writeJsonAtomic}, L{readJson} and
    L{fsyncDirectory}.
    """

    def test_replacesWhole(self) -> None:
        """
        L{writeAtomic} replaces a longer file's whole content with the new
        bytes and leaves no temporary file behind.
        """
        directory = _tempDir(self)
        target = directory / "meta.json"
        target.write_bytes(b"x" * 1000)
        writeAtomic(target, b"short")
        self.assertEqual(target.read_bytes(), b"short")
        self.assertEqual(sorted(os.listdir(directory)), ["meta.json"])

    def test_createsWithMode(self) -> None:
        """
        L{writeAtomic} creates a missing file with exactly the mode asked
        for, 0600 by default.
        """
        directory = _tempDir(self)
        writeAtomic(directory / "a", b"1")
        writeAtomic(directory / "b", b"2", mode=0o640)
        self.assertEqual(stat.S_IMODE(os.stat(directory / "a").st_mode), 0o600)
        self.assertEqual(stat.S_IMODE(os.stat(directory / "b").st_mode), 0o640)

    def test_failureLeavesOldFile(self) -> None:
        """
        When the write fails before the rename, the old file is untouched and
        the temporary file is removed.
        """
        directory = _tempDir(self)
        target = directory / "meta.json"
        target.write_bytes(b"old")

        def failingWrite(fd: int, data: Any) -> int:
            raise OSError(errno.ENOSPC, "full")

        self.patch(os, "write", failingWrite)
        self.assertRaises(OSError, writeAtomic, target, b"new")
        self.assertEqual(target.read_bytes(), b"old")
        self.assertEqual(os.listdir(directory), ["meta.json"])

    def test_jsonRoundTrip(self) -> None:
        """
        L{writeJsonAtomic} writes UTF-8 JSON ending in a newline, which
        L{readJson} reads back equal.
        """
        directory = _tempDir(self)
        target = directory / "meta.json"
        value = {"title": "Vaca \u00e9 \U0001f404", "n": [1, 2.5, None, True]}
        writeJsonAtomic(target, value)
        raw = target.read_bytes()
        self.assertTrue(raw.endswith(b"}\n"))
        self.assertIn("\U0001f404".encode("utf-8"), raw)
        self.assertEqual(readJson(target), value)

    def test_jsonLoneSurrogate(self) -> None:
        """
        A lone surrogate, which UTF-8 cannot hold, is written escaped rather
        than failing, and reads back equal.
        """
        directory = _tempDir(self)
        target = directory / "meta.json"
        value = {"title": "a\ud800b"}
        writeJsonAtomic(target, value)
        self.assertEqual(readJson(target), value)

    def test_jsonRefusesNaN(self) -> None:
        """
        NaN is not JSON: L{writeJsonAtomic} refuses it and writes nothing.
        """
        directory = _tempDir(self)
        nan = {"a": float("nan")}
        self.assertRaises(ValueError, writeJsonAtomic, directory / "x", nan)
        self.assertEqual(os.listdir(directory), [])

    def test_readJsonMissing(self) -> None:
        """
        L{readJson} of a missing file raises L{FileNotFoundError}.
        """
        self.assertRaises(FileNotFoundError, readJson, _tempDir(self) / "nope")

    def test_fsyncDirectory(self) -> None:
        """
        L{fsyncDirectory} syncs an existing directory and raises for a
        missing one.
        """
        directory = _tempDir(self)
        fsyncDirectory(directory)
        self.assertRaises(FileNotFoundError, fsyncDirectory, directory / "nope")


def fullAfter(size: int) -> Callable[[int, Any], int]:
    """
    A C{write} on a disk that fills: a write of more than C{size} bytes
    writes its first C{size}, any other fails with C{ENOSPC}.
    """
    realWrite = _jsonl._write

    def fullDisk(fd: int, data: Any) -> int:
        if len(data) > size:
            return realWrite(fd, bytes(data)[:size])
        raise OSError(errno.ENOSPC, "No space left on device")

    return fullDisk


class JsonlLogTests(SynchronousTestCase):
    """
    Tests for L{JsonlLog}.
    """

    def setUp(self) -> None:
        self.directory = _tempDir(self)
        self.path = self.directory / "events.jsonl"

    def _open(
        self, seqField: str | None = None
    ) -> tuple[JsonlLog, list[dict[str, Any]]]:
        log, records = JsonlLog.open(self.path, seqField=seqField)
        self.addCleanup(log.close)
        return log, records

    def _seqRecords(self, start: int, stop: int) -> list[dict[str, Any]]:
        return [
            {"seq": n, "type": "x", "data": "payload " * 3} for n in range(start, stop)
        ]

    def test_createsEmpty(self) -> None:
        """
        Opening a missing log creates an empty file (mode 0600) and reads no
        records.
        """
        log, records = self._open()
        self.assertEqual(records, [])
        self.assertEqual(log.path, self.path)
        self.assertEqual(self.path.read_bytes(), b"")
        self.assertEqual(stat.S_IMODE(os.stat(self.path).st_mode), 0o600)

    def test_appendFormat(self) -> None:
        """
        A record is written as compact, ASCII-escaped JSON and a newline.
        """
        log, _ = self._open()
        log.append({"a": 1, "b": "\u2028\n\U0001f404"})
        self.assertEqual(
            self.path.read_bytes(), b'{"a":1,"b":"\\u2028\\n\\ud83d\\udc04"}\n'
        )

    def test_roundTrip(self) -> None:
        """
        Records appended are read back, in order, when the log is opened
        again; appending then goes on after them.
        """
        log, _ = self._open()
        log.append({"n": 1})
        log.append({"n": 2}, sync=False)
        log.sync()
        log.close()
        log, records = self._open()
        self.assertEqual(records, [{"n": 1}, {"n": 2}])
        log.append({"n": 3})
        log.close()
        self.assertEqual(self._open()[1], [{"n": 1}, {"n": 2}, {"n": 3}])

    def test_truncatedLastRecord(self) -> None:
        """
        After ten records, with the last cut short: nine are recovered, the
        original is kept as C{.broken}, the file is truncated to the ninth
        record's end, and ten more appended make nineteen read back.
        """
        _writeRecords(self.path, self._seqRecords(1, 11), "seq")
        original = self.path.read_bytes()
        self.path.write_bytes(original[:-7])
        with capturedLogs() as events:
            log, records = self._open("seq")
        self.assertEqual(records, self._seqRecords(1, 10))
        self.assertEqual(log.lastSeq, 9)
        broken = self.directory / "events.jsonl.broken"
        self.assertEqual(broken.read_bytes(), original[:-7])
        self.assertEqual(
            self.path.read_bytes(), b"".join(original.splitlines(True)[:9])
        )
        self.assertEqual([e["log_level"] for e in events], [LogLevel.warn])
        self.assertEqual(events[0]["broken"], str(broken))
        for record in self._seqRecords(10, 20):
            log.append(record)
        log.close()
        self.assertEqual(self._open("seq")[1], self._seqRecords(1, 20))

    def test_missingLastNewline(self) -> None:
        """
        A last line that is whole JSON but lacks its newline is a torn write
        and is dropped.
        """
        _writeRecords(self.path, [{"n": 1}, {"n": 2}])
        self.path.write_bytes(self.path.read_bytes()[:-1])
        log, records = self._open()
        self.assertEqual(records, [{"n": 1}])
        self.assertEqual(self.path.read_bytes(), b'{"n":1}\n')

    def test_badLastLine(self) -> None:
        """
        A last line that ends in a newline but is half JSON, or JSON that is
        not an object, is the torn tail.
        """
        for tail in [b'{"n":\n', b"[1,2]\n", b"\n", b"\xff\xfe\n"]:
            self.path.write_bytes(b'{"n":1}\n' + tail)
            log, records = JsonlLog.open(self.path)
            log.close()
            self.assertEqual(records, [{"n": 1}], tail)
            self.assertEqual(self.path.read_bytes(), b'{"n":1}\n')

    def test_nulTail(self) -> None:
        """
        NUL bytes after the last record (the file grew before its content
        landed) are the torn tail, with or without a newline.
        """
        for tail, reason in [
            (b"\0" * 100, "last line has no newline"),
            (b'{"n":2\0}\n', "contains NUL bytes"),
            (b"\0\0\0\0\n", "contains NUL bytes"),
        ]:
            self.path.write_bytes(b'{"n":1}\n' + tail)
            with capturedLogs() as events:
                log, records = JsonlLog.open(self.path)
            log.close()
            self.assertEqual(records, [{"n": 1}], tail)
            self.assertEqual(self.path.read_bytes(), b'{"n":1}\n')
            self.assertEqual(events[0]["reason"], reason)
            self.assertEqual(events[0]["offset"], 8)

    def test_zeroedEnd(self) -> None:
        """
        Zeroing the last 512 bytes of a log of fifty records recovers exactly
        the records that end before the zeroed region (etcd's repair test).
        """
        records = self._seqRecords(1, 51)
        _writeRecords(self.path, records, "seq")
        data = bytearray(self.path.read_bytes())
        start = len(data) - 512
        data[start:] = b"\0" * 512
        self.path.write_bytes(bytes(data))
        lineEnds = []
        offset = 0
        for record in records:
            offset += len(json.dumps(record, separators=(",", ":"))) + 1
            lineEnds.append(offset)
        survivors = sum(1 for end in lineEnds if end <= start)
        self.assertTrue(0 < survivors < 50)
        log, recovered = self._open("seq")
        self.assertEqual(recovered, records[:survivors])
        self.assertEqual(log.lastSeq, survivors)

    def test_brokenSuffixes(self) -> None:
        """
        When C{.broken} is taken, the copy goes to C{.broken.1}, then
        C{.broken.2}.
        """
        for n, name in enumerate(
            ["events.jsonl.broken", "events.jsonl.broken.1", "events.jsonl.broken.2"]
        ):
            content = b'{"n":1}\n{"torn":' + str(n).encode()
            self.path.write_bytes(content)
            log, records = JsonlLog.open(self.path)
            log.close()
            self.assertEqual(records, [{"n": 1}])
            self.assertEqual((self.directory / name).read_bytes(), content)

    def test_cleanLogNoBroken(self) -> None:
        """
        Opening a sound log makes no C{.broken} copy and changes nothing.
        """
        _writeRecords(self.path, [{"n": 1}])
        self._open()
        self.assertEqual(os.listdir(self.directory), ["events.jsonl"])
        self.assertEqual(self.path.read_bytes(), b'{"n":1}\n')

    def test_corruptMiddle(self) -> None:
        """
        A bad record followed by a good one cannot be a torn write: opening
        raises L{CorruptLog} naming the line, and the file is left as it was.
        """
        for bad in [b'{"n":\n', b"\0\0\0\0\0\0\0\n", b"[]\n", b"\n"]:
            content = b'{"n":1}\n' + bad + b'{"n":3}\n'
            self.path.write_bytes(content)
            error = self.assertRaises(CorruptLog, JsonlLog.open, self.path)
            self.assertEqual((error.lineNumber, error.offset), (2, 8), bad)
            self.assertEqual(self.path.read_bytes(), content)
        self.assertEqual(os.listdir(self.directory), ["events.jsonl"])

    def test_twoBadAtEnd(self) -> None:
        """
        Two bad lines at the end are more than one torn write: refused.
        """
        self.path.write_bytes(b'{"n":1}\n{"n"\n{"n"\n')
        self.assertRaises(CorruptLog, JsonlLog.open, self.path)

    def test_zeroedMiddle(self) -> None:
        """
        Zeroed bytes inside a middle record (its newline included) are
        refused, not skipped.
        """
        records = self._seqRecords(1, 11)
        _writeRecords(self.path, records, "seq")
        data = bytearray(self.path.read_bytes())
        lineStart = sum(len(line) for line in bytes(data).splitlines(True)[:4])
        data[lineStart + 5 : lineStart + 60] = b"\0" * 55
        self.path.write_bytes(bytes(data))
        error = self.assertRaises(CorruptLog, JsonlLog.open, self.path, seqField="seq")
        self.assertEqual(error.lineNumber, 5)
        self.assertIn("events.jsonl", str(error))

    def test_seqGap(self) -> None:
        """
        With a C{seqField}, a gap in the sequence is refused.
        """
        _writeRecords(self.path, [{"seq": 1}, {"seq": 3}, {"seq": 4}])
        error = self.assertRaises(CorruptLog, JsonlLog.open, self.path, seqField="seq")
        self.assertEqual(error.lineNumber, 2)
        self.assertIn("gap", error.reason)

    def test_seqDuplicate(self) -> None:
        """
        With a C{seqField}, a repeated sequence number is refused, also when
        it is the last whole line.
        """
        _writeRecords(self.path, [{"seq": 1}, {"seq": 2}, {"seq": 2}])
        error = self.assertRaises(CorruptLog, JsonlLog.open, self.path, seqField="seq")
        self.assertEqual(error.lineNumber, 3)
        self.assertIn("duplicate", error.reason)

    def test_seqMustStartAtOne(self) -> None:
        """
        The sequence starts at 1, and every record carries an integer (not a
        boolean, not a string).
        """
        cases: list[list[dict[str, Any]]] = [
            [{"seq": 2}],
            [{"seq": 0}],
            [{"seq": True}],
            [{"seq": "1"}],
            [{}],
        ]
        for records in cases:
            self.path.write_bytes(b"")
            _writeRecords(self.path, records)
            self.assertRaises(CorruptLog, JsonlLog.open, self.path, seqField="seq")

    def test_seqProblemInTornTail(self) -> None:
        """
        A wrong sequence number in the torn tail is not checked: the tail is
        dropped.
        """
        self.path.write_bytes(b'{"seq":1}\n{"seq":1}')
        log, records = self._open("seq")
        self.assertEqual(records, [{"seq": 1}])
        self.assertEqual(log.lastSeq, 1)

    def test_appendChecksSeq(self) -> None:
        """
        With a C{seqField}, L{JsonlLog.append} requires the next number and
        writes nothing otherwise.
        """
        log, _ = self._open("seq")
        log.append({"seq": 1})
        self.assertRaises(ValueError, log.append, {"seq": 3})
        self.assertRaises(ValueError, log.append, {"seq": 1})
        self.assertRaises(ValueError, log.append, {"type": "x"})
        log.append({"seq": 2})
        self.assertEqual(self.path.read_bytes(), b'{"seq":1}\n{"seq":2}\n')
        self.assertEqual(log.lastSeq, 2)

    def test_appendRefusesNaN(self) -> None:
        """
        NaN is not JSON; appending it raises and writes nothing.
        """
        log, _ = self._open()
        self.assertRaises(ValueError, log.append, {"x": float("nan")})
        self.assertEqual(self.path.read_bytes(), b"")

    def test_oneWritePerRecord(self) -> None:
        """
        Each record reaches the file in a single write of its whole line.
        """
        writes: list[bytes] = []
        realWrite = _jsonl._write

        def recordingWrite(fd: int, data: Any) -> int:
            writes.append(bytes(data))
            return realWrite(fd, data)

        self.patch(_jsonl, "_write", recordingWrite)
        log, _ = self._open()
        log.append({"a": "b" * 10000})
        log.append({"c": 1})
        self.assertEqual(writes, [b'{"a":"' + b"b" * 10000 + b'"}\n', b'{"c":1}\n'])

    def test_linesInOneWrite(self) -> None:
        """
        Lines written together (a batch's, by the group writer) reach the
        file in one write, in their order, counted as as many records.
        """
        writes: list[bytes] = []
        realWrite = _jsonl._write

        def recordingWrite(fd: int, data: Any) -> int:
            writes.append(bytes(data))
            return realWrite(fd, data)

        counted: list[tuple[str, int]] = []

        class Counting:
            def appended(self, log: str, records: int = 1) -> None:
                counted.append((log, records))

            def synced(self, log: str, seconds: float) -> None:
                pass

        self.addCleanup(_jsonl.observeLogs, _jsonl.observeLogs(Counting()))
        self.patch(_jsonl, "_write", recordingWrite)
        log, _ = self._open()
        log.write(*(log.line({"n": n}) for n in (1, 2, 3)))
        self.assertEqual(writes, [b'{"n":1}\n{"n":2}\n{"n":3}\n'])
        self.assertEqual(counted, [(self.path.stem, 3)])
        log.close()
        self.assertEqual(self._open()[1], [{"n": 1}, {"n": 2}, {"n": 3}])

    def test_linesWrittenWholeOrNotAtAll(self) -> None:
        """
        A write of several lines that fails midway leaves none of them.
        """
        log, _ = self._open()
        log.append({"n": 1})
        self.patch(_jsonl, "_write", fullAfter(10))
        lines = [log.line({"n": n}) for n in (2, 3)]
        self.assertRaises(OSError, log.write, *lines)
        self.assertEqual(self.path.read_bytes(), b'{"n":1}\n')

    def test_partialWrites(self) -> None:
        """
        Short writes are continued until the whole line is written.
        """
        realWrite = _jsonl._write

        def shortWrite(fd: int, data: Any) -> int:
            return realWrite(fd, bytes(data)[:3])

        self.patch(_jsonl, "_write", shortWrite)
        log, _ = self._open()
        log.append({"a": "hello"})
        log.append({"b": 2})
        self.assertEqual(self.path.read_bytes(), b'{"a":"hello"}\n{"b":2}\n')

    def test_writeFailure(self) -> None:
        """
        A write that fails midway (a full disk) leaves no partial line, and
        the log refuses further appends; reopening finds the earlier records.
        """
        log, _ = self._open()
        log.append({"n": 1})
        log.append({"n": 2})
        self.assertFalse(log.failed)
        realWrite = _jsonl._write
        self.patch(_jsonl, "_write", fullAfter(4))
        error = self.assertRaises(OSError, log.append, {"n": 3})
        self.assertEqual(error.errno, errno.ENOSPC)
        self.assertTrue(log.failed)
        self.assertEqual(self.path.read_bytes(), b'{"n":1}\n{"n":2}\n')
        self.patch(_jsonl, "_write", realWrite)
        self.assertRaises(OSError, log.append, {"n": 4})
        log.close()
        self.assertEqual(self._open()[1], [{"n": 1}, {"n": 2}])

    def test_syncFailure(self) -> None:
        """
        A failed fsync is not retried as if it had worked: the append raises
        and the log refuses further appends.
        """
        log, _ = self._open()

        def failingSync(fd: int) -> None:
            raise OSError(errno.EIO, "I/O error")

        self.patch(_jsonl, "_sync", failingSync)
        self.assertRaises(OSError, log.append, {"n": 1})
        self.patch(_jsonl, "_sync", lambda fd: None)
        self.assertRaises(OSError, log.append, {"n": 2})

    def test_noSyncSkipsFsync(self) -> None:
        """
        C{sync=False} writes the record without syncing; L{JsonlLog.sync}
        syncs.
        """
        syncs: list[int] = []
        self.patch(_jsonl, "_sync", syncs.append)
        log, _ = self._open()
        log.append({"n": 1}, sync=False)
        self.assertEqual(syncs, [])
        log.append({"n": 2})
        self.assertEqual(len(syncs), 1)
        log.sync()
        self.assertEqual(len(syncs), 2)

    def test_closed(self) -> None:
        """
        After L{JsonlLog.close} (twice is harmless), appending raises;
        L{JsonlLog.closed} says so.
        """
        log, _ = self._open()
        self.assertIs(log.closed, False)
        log.close()
        self.assertIs(log.closed, True)
        log.close()
        self.assertRaises(ValueError, log.append, {"n": 1})

    def _observedLog(self) -> tuple[JsonlLog, list[tuple[str, str, float]]]:
        """
        An events log, open, and what the logs' observer is told meanwhile.
        """
        from vehicle.store import observeLogs

        seen: list[tuple[str, str, float]] = []

        class Observer:
            def appended(self, log: str, records: int) -> None:
                seen.append(("appended", log, records))

            def synced(self, log: str, seconds: float) -> None:
                seen.append(("synced", log, seconds))

        self.addCleanup(observeLogs, observeLogs(Observer()))
        log, _ = JsonlLog.open(self.directory / "events.jsonl", seqField="seq")
        self.addCleanup(log.close)
        return log, seen

    def test_observed(self) -> None:
        """
        The logs' observer is told of each write (its log's name and how
        many records it carried) and each fsync, timed from before it to
        after it on the monotonic clock.
        """
        from vehicle.store import _jsonl

        log, seen = self._observedLog()
        log.write(log.line({"seq": 1}), log.line({"seq": 2}))
        times = iter([1.0, 3.5])
        self.patch(_jsonl.time, "monotonic", lambda: next(times))
        log.sync()
        self.assertEqual(seen, [("appended", "events", 2), ("synced", "events", 2.5)])

    def test_wroteElsewhere(self) -> None:
        """
        What another process (the sync helper) wrote for a log, told back:
        the log's size follows, the observer is told of the records and the
        sync it made (not of none), and a failure makes the log refuse more.
        The descriptor it wrote through is the log's own, while it is open.
        """
        log, seen = self._observedLog()
        fd = log.fd
        assert isinstance(fd, int)
        line = log.line({"seq": 1})
        os.write(fd, line)
        log.wroteElsewhere(len(line), 1, 0.25, None)
        log.wroteElsewhere(0, 0, None, None)
        self.assertEqual((log.size, seen), (len(line), [("appended", "events", 1),
                                                        ("synced", "events", 0.25)]))
        self.assertIsNone(log.refusal())
        log.wroteElsewhere(0, 0, None, OSError(5, "io"))
        self.assertEqual(len(seen), 2)
        self.assertIsInstance(log.refusal(), OSError)
        self.assertRaises(OSError, log.write, log.line({"seq": 2}))
        log.close()
        self.assertIsNone(log.fd)

    def test_reopenAfterMove(self) -> None:
        """
        After the log's directory is moved, L{JsonlLog.reopen} makes appends
        go to the moved file.
        """
        sessionDir = self.directory / "s1"
        sessionDir.mkdir()
        log, _ = JsonlLog.open(sessionDir / "events.jsonl", seqField="seq")
        self.addCleanup(log.close)
        log.append({"seq": 1})
        moved = self.directory / "trash-s1"
        os.rename(sessionDir, moved)
        log.reopen(moved / "events.jsonl")
        self.assertEqual(log.path, moved / "events.jsonl")
        log.append({"seq": 2, "type": "session.deleted"})
        self.assertEqual(
            (moved / "events.jsonl").read_bytes(),
            b'{"seq":1}\n{"seq":2,"type":"session.deleted"}\n',
        )
        self.assertFalse(sessionDir.exists())

    @_hypothesisSettings
    @given(records=_records)
    def test_roundTripProperty(self, records: list[dict[str, Any]]) -> None:
        """
        Any list of JSON-able dicts, with newlines, line and paragraph
        separators, NULs and emoji in their strings, is read back equal after
        appending and reopening, one line per record.
        """
        path = _tempDir(self) / "log.jsonl"
        _writeRecords(path, records)
        self.assertEqual(path.read_bytes().count(b"\n"), len(records))
        log, readBack = JsonlLog.open(path)
        log.close()
        self.assertEqual(readBack, records)
        self.assertFalse(path.with_name("log.jsonl.broken").exists())

    @_hypothesisSettings
    @given(records=_records, data=st.data())
    def test_truncationProperty(self, records: list[dict[str, Any]], data: Any) -> None:
        """
        Cutting the file at any point, opening recovers exactly the records
        whose whole line survived, truncates the file to them, and keeps a
        C{.broken} copy only when a partial line was cut off.
        """
        directory = _tempDir(self)
        path = directory / "log.jsonl"
        for n, record in enumerate(records, 1):
            record["seq"] = n
        _writeRecords(path, records, "seq")
        content = path.read_bytes()
        cut = data.draw(st.integers(min_value=0, max_value=len(content)), label="cut")
        path.write_bytes(content[:cut])
        lines = content.splitlines(True)
        survivors = 0
        end = 0
        for line in lines:
            if end + len(line) > cut:
                break
            end += len(line)
            survivors += 1
        log, readBack = JsonlLog.open(path, seqField="seq")
        log.close()
        self.assertEqual(readBack, records[:survivors])
        self.assertEqual(log.lastSeq, survivors)
        self.assertEqual(path.read_bytes(), content[:end])
        self.assertEqual(
            (directory / "log.jsonl.broken").exists(), end < cut
        )


class DataDirTests(SynchronousTestCase):
    """
    Tests for L{DataDir}.
    """

    def setUp(self) -> None:
        self.root = Path(self.mktemp())
        self.data = DataDir(self.root)
        self.data.ensure()

    def _session(self, sessionId: str, meta: bool = True) -> Path:
        directory = self.data.sessionDir(sessionId)
        directory.mkdir()
        if meta:
            writeJsonAtomic(directory / "meta.json", {"sessionId": sessionId})
        (directory / "events.jsonl").write_bytes(b'{"seq":1}\n')
        return directory

    def test_ensure(self) -> None:
        """
        L{DataDir.ensure} creates the four directories, mode 0700, and may be
        called again.
        """
        self.data.ensure()
        for directory in (
            self.data.sessions,
            self.data.trash,
            self.data.workspaces,
            self.data.public,
        ):
            self.assertTrue(directory.is_dir())
            self.assertEqual(directory.parent, self.root)
            self.assertEqual(stat.S_IMODE(os.stat(directory).st_mode), 0o700)
        self.assertEqual(
            sorted(os.listdir(self.root)), ["public", "sessions", "trash", "workspaces"]
        )

    def test_paths(self) -> None:
        """
        A session's directory and workspace are under C{sessions/} and
        C{workspaces/}; a string root is accepted.
        """
        data = DataDir(str(self.root))
        self.assertEqual(data.sessionDir("abc"), self.root / "sessions" / "abc")
        self.assertEqual(data.workspaceDir("abc"), self.root / "workspaces" / "abc")
        self.assertEqual(data.trashDir("abc-2"), self.root / "trash" / "abc-2")

    def test_validSessionId(self) -> None:
        """
        Only 1 to 80 of C{[A-Za-z0-9_-]} make a session id; nothing that
        could escape its directory.
        """
        for good in ["a", "abc-DEF_123", "x" * 80]:
            self.assertTrue(DataDir.validSessionId(good), good)
        bad: object
        for bad in ["", ".", "..", "a/b", "a\n", "x" * 81, "é", "a b", "../x", None]:
            self.assertFalse(DataDir.validSessionId(bad), bad)
        self.assertFalse(DataDir.validSessionId(5))

    def test_invalidIdRefused(self) -> None:
        """
        Paths are never built from an invalid id.
        """
        self.assertRaises(ValueError, self.data.sessionDir, "../etc")
        self.assertRaises(ValueError, self.data.workspaceDir, "..")
        self.assertRaises(ValueError, self.data.trashDir, "a/b")
        self.assertRaises(ValueError, self.data.moveToTrash, "../x", {})

    def test_listSessionIds(self) -> None:
        """
        Listed are the directories under C{sessions/} that hold a
        C{meta.json} and have a valid name, sorted.
        """
        self._session("b")
        self._session("a")
        self._session("nometa", meta=False)
        (self.data.sessions / "file").write_bytes(b"")
        (self.data.sessions / ".hidden").mkdir()
        (self.data.sessions / ".hidden" / "meta.json").write_bytes(b"{}")
        self.assertEqual(self.data.listSessionIds(), ["a", "b"])

    def test_listMissing(self) -> None:
        """
        Before L{DataDir.ensure}, there are no sessions.
        """
        self.assertEqual(DataDir(Path(self.mktemp())).listSessionIds(), [])

    def test_moveToTrash(self) -> None:
        """
        The session's directory moves, whole, to C{trash/<id>}, with a
        C{deleted.json} that adds C{trashedAs}; it is no longer listed.
        """
        self._session("abc")
        name = self.data.moveToTrash("abc", {"sessionId": "abc", "by": "client-1"})
        self.assertEqual(name, "abc")
        trashed = self.data.trashDir(name)
        self.assertFalse(self.data.sessionDir("abc").exists())
        self.assertEqual(
            sorted(os.listdir(trashed)), ["deleted.json", "events.jsonl", "meta.json"]
        )
        self.assertEqual((trashed / "events.jsonl").read_bytes(), b'{"seq":1}\n')
        self.assertEqual(
            readJson(trashed / "deleted.json"),
            {"sessionId": "abc", "by": "client-1", "trashedAs": "abc"},
        )
        self.assertEqual(self.data.listSessionIds(), [])

    def test_moveToTrashSuffixes(self) -> None:
        """
        When C{trash/<id>} is taken, the next free of C{<id>-2}, C{<id>-3},
        ... is used and nothing already in the trash is touched.
        """
        names = []
        for n in range(3):
            self._session("abc")
            (self.data.sessionDir("abc") / "n").write_bytes(str(n).encode())
            names.append(self.data.moveToTrash("abc", {}))
        self.assertEqual(names, ["abc", "abc-2", "abc-3"])
        for n, name in enumerate(names):
            trashed = self.data.trashDir(name)
            self.assertEqual((trashed / "n").read_bytes(), str(n).encode())
            self.assertEqual(readJson(trashed / "deleted.json"), {"trashedAs": name})

    def test_moveToTrashEmptyNameTaken(self) -> None:
        """
        Even an empty directory already at C{trash/<id>} is not replaced.
        """
        (self.data.trash / "abc").mkdir()
        self._session("abc")
        self.assertEqual(self.data.moveToTrash("abc", {}), "abc-2")
        self.assertEqual(os.listdir(self.data.trash / "abc"), [])

    def test_moveToTrashWorkspace(self) -> None:
        """
        An agent session's workspace moves into its trash directory as
        C{workspace/}.
        """
        self._session("agent1")
        workspace = self.data.workspaceDir("agent1")
        workspace.mkdir()
        (workspace / "notes.txt").write_bytes(b"cows")
        name = self.data.moveToTrash("agent1", {})
        self.assertFalse(workspace.exists())
        self.assertEqual(
            (self.data.trashDir(name) / "workspace" / "notes.txt").read_bytes(), b"cows"
        )

    def test_moveToTrashMissing(self) -> None:
        """
        Trashing a session with no directory raises and leaves the trash
        empty.
        """
        self.assertRaises(FileNotFoundError, self.data.moveToTrash, "ghost", {})
        self.assertEqual(os.listdir(self.data.trash), [])

    def test_moveToTrashRenameFails(self) -> None:
        """
        When the rename fails, the session stays where it was and the
        reserved trash name is given back.
        """
        self._session("abc")

        def failingRename(source: Any, target: Any) -> None:
            raise OSError(errno.EXDEV, "Invalid cross-device link")

        self.patch(os, "rename", failingRename)
        self.assertRaises(OSError, self.data.moveToTrash, "abc", {})
        self.assertTrue((self.data.sessionDir("abc") / "meta.json").exists())
        self.assertEqual(os.listdir(self.data.trash), [])


class PowerCutTests(SynchronousTestCase):
    """
    What the store says is durable survives a simulated power cut (the
    file layer of L{tests.support._crashfs} in C{power} mode: a file's data is kept
    only once it was synced, a directory's entries only once the directory
    was).  Each test fails should a sync the store relies on be dropped.
    """

    def setUp(self) -> None:
        from tests.support._crashfs import CrashFiles

        self.root = _tempDir(self)
        self.files = CrashFiles(self.root, "power")
        self.files.install(self.patch)
        self.addCleanup(self.files.uninstall)

    def cut(self) -> None:
        """
        Cut the power now, and come back.
        """
        self.files.kill()
        self.files.revive()

    def test_append(self) -> None:
        """
        A record L{JsonlLog.append} returned for is there after the cut,
        in a log it created.
        """
        self.files.arm(None)
        log, _ = JsonlLog.open(self.root / "log.jsonl", seqField="seq")
        log.append({"seq": 1, "x": "kept"})
        log.close()
        self.cut()
        log, records = JsonlLog.open(self.root / "log.jsonl", seqField="seq")
        log.close()
        self.assertEqual(records, [{"seq": 1, "x": "kept"}])

    def test_unsyncedAppendIsLost(self) -> None:
        """
        The model itself: an append without its sync is lost at the cut
        (so the tests above prove the syncs, not the page cache).
        """
        log, _ = JsonlLog.open(self.root / "log.jsonl", seqField="seq")
        self.files.arm(None)
        log.append({"seq": 1}, sync=False)
        log.close()
        self.cut()
        log, records = JsonlLog.open(self.root / "log.jsonl", seqField="seq")
        log.close()
        self.assertEqual(records, [])

    def test_writeAtomic(self) -> None:
        """
        After L{writeAtomic} returns, the new content is there after the
        cut, under its name, with no temporary file beside it.
        """
        (self.root / "meta.json").write_bytes(b"old")
        self.files.arm(None)
        writeAtomic(self.root / "meta.json", b"new")
        self.cut()
        self.assertEqual((self.root / "meta.json").read_bytes(), b"new")
        self.assertEqual(os.listdir(self.root), ["meta.json"])

    def test_writeAtomicNewFile(self) -> None:
        """
        A file L{writeAtomic} created is there after the cut.
        """
        self.files.arm(None)
        writeJsonAtomic(self.root / "deleted.json", {"a": 1})
        self.cut()
        self.assertEqual(readJson(self.root / "deleted.json"), {"a": 1})

    def test_tornTailRepair(self) -> None:
        """
        The repair of a torn tail is durable: after the cut the log is
        still cut at its last good record, and the C{.broken} copy holds
        the original.
        """
        path = self.root / "log.jsonl"
        original = b'{"seq":1}\n{"seq":2,"x":"to'
        path.write_bytes(original)
        self.files.arm(None)
        log, _ = JsonlLog.open(path, seqField="seq")
        log.close()
        self.cut()
        self.assertEqual(path.read_bytes(), b'{"seq":1}\n')
        self.assertEqual((self.root / "log.jsonl.broken").read_bytes(), original)

    def test_trash(self) -> None:
        """
        A session moved to the trash is there after the cut, with its
        C{deleted.json} and its workspace, and gone from C{sessions/}.
        """
        data = DataDir(self.root / "data")
        data.ensure()
        (data.sessionDir("abc")).mkdir()
        (data.sessionDir("abc") / "meta.json").write_text("{}")
        data.workspaceDir("abc").mkdir()
        self.files.arm(None)
        name = data.moveToTrash("abc", {"sessionId": "abc"})
        self.cut()
        self.assertEqual(os.listdir(data.sessions), [])
        self.assertEqual(os.listdir(data.workspaces), [])
        self.assertEqual(sorted(os.listdir(data.trashDir(name))),
                         ["deleted.json", "meta.json", "workspace"])
        self.assertEqual(readJson(data.trashDir(name) / "deleted.json")["trashedAs"], name)

    def test_publish(self) -> None:
        """
        A session folder built aside and published is in place after the
        cut, with what was synced in it.
        """
        data = DataDir(self.root / "data")
        data.ensure()
        self.files.arm(None)
        os.mkdir(data.buildingDir("abc"))
        writeAtomic(data.buildingDir("abc") / "meta.json", b"{}")
        data.publish("abc")
        self.cut()
        self.assertEqual(os.listdir(data.sessions), ["abc"])
        self.assertEqual((data.sessionDir("abc") / "meta.json").read_bytes(), b"{}")


class _OpenRecorder(OsFiles):
    """
    The real layer, noting the flags of every C{open}.
    """

    def __init__(self) -> None:
        self.opened: list[tuple[str, int]] = []
        #: Was any descriptor opened inheritable (not close-on-exec)?
        self.inheritable: list[str] = []

    def open(self, path: Any, flags: int, mode: int = 0o777) -> int:
        self.opened.append((str(path), flags))
        fd = super().open(path, flags, mode)
        if os.get_inheritable(fd):
            self.inheritable.append(str(path))
        return fd


class OpenFlagsTests(SynchronousTestCase):
    """
    What the store opens it opens close-on-exec (a pi child or a tool
    must never inherit a descriptor of the host's), a new file exclusively
    (never one another process placed), and a directory as a directory.
    """

    def record(self) -> _OpenRecorder:
        recorder = _OpenRecorder()
        previous = useFiles(recorder)
        self.addCleanup(useFiles, previous)
        return recorder

    def test_atomicRewrite(self) -> None:
        directory = Path(self.mktemp())
        directory.mkdir()
        recorder = self.record()
        writeAtomic(directory / "meta.json", b"{}")
        temp = [f for p, f in recorder.opened if p.endswith(".tmp")]
        folder = [f for p, f in recorder.opened if p == str(directory)]
        self.assertEqual(len(temp), 1, recorder.opened)
        self.assertEqual(len(folder), 1, recorder.opened)
        for flag in (os.O_EXCL, os.O_CREAT, os.O_WRONLY):
            self.assertTrue(temp[0] & flag, f"temp file opened without {flag:#o}")
        self.assertTrue(folder[0] & os.O_DIRECTORY, "directory opened as a file")
        self.assertEqual(folder[0] & os.O_ACCMODE, os.O_RDONLY)
        self.assertEqual(recorder.inheritable, [])

    def test_logAppend(self) -> None:
        path = Path(self.mktemp())
        path.parent.mkdir(parents=True, exist_ok=True)
        recorder = self.record()
        log, _ = JsonlLog.open(path)
        log.append({"a": 1})
        log.close()
        logs = [f for p, f in recorder.opened if p == str(path)]
        self.assertTrue(logs, recorder.opened)
        self.assertEqual(recorder.inheritable, [])
