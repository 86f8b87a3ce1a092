# -*- test-case-name: tests.unit.test_store -*-
"""
The append-only JSONL log: one JSON object per line, one C{write} per record.

Opening a log reads it whole, repairs a torn tail (keeping a C{.broken} copy
of the original) and refuses anything damaged before the tail, or a gap in its
sequence numbers, with L{CorruptLog}.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import ClassVar, Protocol

from attrs import define
from twisted.logger import Logger

from vehicle._syncd import WholeAppends
from vehicle.protocol import JSONObject, intOf
from vehicle.store._atomic import fsyncDirectory, fullSync
from vehicle.store._files import CREATE, files


def _write(fd: int, data: bytes | memoryview) -> int:
    """
    One C{write} through the file layer (tests replace this to inject
    short writes and I/O errors).
    """
    return files().write(fd, data)


#: Another indirection the tests replace.
_sync = fullSync


class _Layer:
    """
    The file layer as a log appends and syncs through it: its writes by
    L{_write} and its syncs by L{_sync}, looked up at each call (tests
    replace them).
    """

    def write(self, fd: int, data: bytes | memoryview) -> int:
        return _write(fd, data)

    def fsync(self, fd: int) -> None:
        _sync(fd)

    def ftruncate(self, fd: int, size: int) -> None:
        files().ftruncate(fd, size)


_layer = _Layer()

_APPEND = os.O_WRONLY | os.O_APPEND

#: The mode of a log and of its C{.broken} copy, whatever the umask.
_MODE = 0o600


class LogObserver(Protocol):
    """
    Who is told of every log's writes (the host's metrics): the one place
    they are seen is L{JsonlLog.append} and L{JsonlLog.sync}.
    """

    def appended(self, log: str, records: int) -> None:
        """
        C{records} records were appended to C{log} (the file's stem:
        C{events}), with one write.
        """

    def synced(self, log: str, seconds: float) -> None:
        """
        One fsync of C{log} took C{seconds}.
        """


class _Unobserved:
    def appended(self, log: str, records: int) -> None:
        pass

    def synced(self, log: str, seconds: float) -> None:
        pass


_observer: LogObserver = _Unobserved()


def observeLogs(observer: LogObserver | None) -> LogObserver:
    """
    Tell C{observer} of every record appended to a log and every fsync of
    one, in this process, from now on (L{None}: nobody); the observer it
    replaces is returned (a test puts it back).
    """
    global _observer
    previous, _observer = _observer, observer if observer is not None else _Unobserved()
    return previous


class CorruptLog(Exception):
    """
    A log is damaged before its tail, or its sequence numbers have a gap or a
    duplicate: it cannot be repaired without losing a record, so it is refused.

    @ivar path: the log's path.
    @ivar lineNumber: the 1-based number of the first bad line.
    @ivar offset: the byte offset where that line starts.
    @ivar reason: what is wrong with it, in a few words.
    """

    def __init__(self, path: Path, lineNumber: int, offset: int, reason: str) -> None:
        super().__init__(path, lineNumber, offset, reason)
        self.path = path
        self.lineNumber = lineNumber
        self.offset = offset
        self.reason = reason

    def __str__(self) -> str:
        return (
            f"{self.path}: line {self.lineNumber} (offset {self.offset}): "
            f"{self.reason}"
        )


def _parseLine(body: bytes) -> tuple[JSONObject | None, str]:
    """
    Parse one line (without its newline) into a record.

    @return: C{(record, "")}, or C{(None, why)} when the line is not a
        record.
    """
    if b"\0" in body:
        return None, "contains NUL bytes"
    try:
        value = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return None, "not valid JSON"
    if not isinstance(value, dict):
        return None, "not a JSON object"
    return value, ""


#: The encoder of a line, made once (C{json.dumps} makes one per call),
#: without the walk for cycles (see L{vehicle.errors._COMPACT}).
_LINE = json.JSONEncoder(separators=(",", ":"), allow_nan=False, check_circular=False)


def encodeLine(record: JSONObject) -> bytes:
    """
    A record as its line: compact JSON, ASCII-escaped, so no newline (nor
    anything a reader might take for one) is ever inside it, and the
    newline that ends it.

    @raise ValueError: the record holds NaN or an infinity.
    """
    return (_LINE.encode(record) + "\n").encode("ascii")


#: How much of a log L{_brokenCopy} reads at a time.
_CHUNK = 65536


def _createBroken(path: Path) -> tuple[Path, int]:
    """
    Create the first free of C{<name>.broken}, C{.broken.1}, C{.broken.2},
    ... beside C{path}; return its path and a descriptor open for writing.
    """
    candidate = path.with_name(path.name + ".broken")
    n = 0
    while True:
        try:
            return candidate, files().open(candidate, CREATE, _MODE)
        except FileExistsError:
            n += 1
            candidate = path.with_name(f"{path.name}.broken.{n}")


def _brokenCopy(path: Path) -> Path:
    """
    Copy the file at C{path} to a fresh C{<name>.broken} (or C{.broken.1},
    C{.broken.2}, ...) beside it, durably, and return the copy's path.
    """
    candidate, fd = _createBroken(path)
    try:
        with open(path, "rb") as source:
            chunk = source.read(_CHUNK)
            while chunk:
                view = memoryview(chunk)
                while view:
                    view = view[_write(fd, view):]
                chunk = source.read(_CHUNK)
        files().fchmod(fd, _MODE)
        _sync(fd)
    finally:
        files().close(fd)
    fsyncDirectory(path.parent)
    return candidate


@define(eq=False)
class JsonlLog(WholeAppends):
    """
    An append-only JSONL file, open for appending.

    Get one with L{JsonlLog.open}. Each L{append} writes one record as one
    line with one C{write} on an C{O_APPEND} descriptor, then syncs it, so a
    record that L{append} returned for survives a crash of the process (and,
    when synced, of the machine). The log keeps no copy of its records.

    After a failed write or sync the log refuses further appends: the owner
    should open it afresh (which repairs whatever the failure left).

    @ivar lastSeq: with a C{seqField}, the last sequence number in the log
        (0 when empty); L{append} requires the next one.
    """

    _log: ClassVar[Logger] = Logger()

    _path: Path
    _fd: int | None
    _size: int
    seqField: str | None
    lastSeq: int
    _failure: BaseException | None = None

    @classmethod
    def open(
        cls, path: Path, *, seqField: str | None = None, syncFolder: bool = True
    ) -> tuple[JsonlLog, list[JSONObject]]:
        """
        Open the log at C{path} for appending, creating it if missing, and
        read back its records.

        A torn tail (a last line with no newline, or one that is not a JSON
        object, or holds NUL bytes) is repaired: the original file is copied
        to C{<name>.broken} (or C{.broken.1}, ...) and the log is truncated to
        the end of its last good record and synced.

        @param path: the log's path; its directory must exist.
        @param seqField: if given, every record must carry this integer field,
            counting 1, 2, 3, ... in order.
        @param syncFolder: C{False} in a folder nobody reads until it is
            synced whole (a session's folder built aside): a new log's
            entry is left to that folder's sync.
        @return: the open log and its records, in order.
        @raise CorruptLog: when a line before the tail is bad, or a sequence
            number is missing, out of order, repeated or skipped.
        """
        path = Path(path)
        layer = files()
        try:
            fd = layer.open(path, CREATE | os.O_APPEND, _MODE)
        except FileExistsError:
            fd = layer.open(path, _APPEND)
        else:
            try:
                layer.fchmod(fd, _MODE)
                if syncFolder:
                    fsyncDirectory(path.parent)
            except BaseException:
                layer.close(fd)
                raise
        try:
            records, goodOffset, size, lastSeq, torn = _readLog(path, seqField)
            if torn is not None:
                broken = _brokenCopy(path)
                layer.ftruncate(fd, goodOffset)
                _sync(fd)
                cls._log.warn(
                    "Repaired the torn tail of {path}: {reason} at offset {offset}; "
                    "dropped {dropped} bytes, the original is kept as {broken}",
                    path=str(path),
                    reason=torn,
                    offset=goodOffset,
                    dropped=size - goodOffset,
                    broken=str(broken),
                )
        except BaseException:
            layer.close(fd)
            raise
        return cls(path, fd, goodOffset, seqField, lastSeq), records

    @property
    def failed(self) -> bool:
        """
        Did a write or sync fail?  Then the log takes no more appends: open
        it afresh.
        """
        return self._failure is not None

    @property
    def closed(self) -> bool:
        """
        Is its descriptor closed?
        """
        return self._fd is None

    @property
    def path(self) -> Path:
        """
        The file this log appends to.
        """
        return self._path

    def append(self, record: JSONObject, *, sync: bool = True) -> None:
        """
        Append C{record} as one line and, when C{sync}, make it durable
        (L{line}, then L{write}, then L{sync}).

        @param record: a JSON-able dict; with a C{seqField}, it must carry
            C{lastSeq + 1} in that field.
        @param sync: sync the file before returning. Without it the record
            survives a crash of the process but not of the machine, until
            the next synced append or L{sync}.
        @raise ValueError: when the record is not JSON-able (NaN, infinity)
            or has the wrong sequence number, or the log is closed.
        @raise OSError: when writing or syncing fails; the log then refuses
            further appends.
        """
        self.write(self.line(record))
        if sync:
            self.sync()

    def line(self, record: JSONObject) -> bytes:
        """
        The line that appends C{record}, its sequence number taken: the
        next line must carry the one after it.  Nothing is written (a group
        writer writes it later, with L{write}, in the order lines were
        taken).

        @raise ValueError: when the record is not JSON-able (NaN, infinity)
            or has the wrong sequence number.
        """
        if self.seqField is not None:
            seq = intOf(record.get(self.seqField))
            if seq is None or seq != self.lastSeq + 1:
                raise ValueError(
                    f"{self._path}: {self.seqField} must be {self.lastSeq + 1}, "
                    f"not {record.get(self.seqField)!r}"
                )
            data = encodeLine(record)
            self.lastSeq = seq
            return data
        return encodeLine(record)

    def write(self, *lines: bytes) -> None:
        """
        Write C{lines} made by L{line} (in the order they were made), whole,
        with one C{write} (a writer thread that writes a batch line by line
        hands the interpreter's lock back and forth with the reactor's at
        every line) and no sync: a failed write leaves no part of any of
        them behind.

        @raise ValueError: the log is closed.
        @raise OSError: when writing fails, or an earlier write or sync
            did; the log then refuses further appends.
        """
        self._append(_layer, lines)
        _observer.appended(self._path.stem, len(lines))

    def sync(self) -> None:
        """
        Make every record appended so far durable.

        @raise OSError: when the sync fails; the log then refuses further
            appends (a failed fsync must not be retried as if it had worked).
        """
        if self._fd is None:
            raise ValueError(f"{self._path}: the log is closed")
        _observer.synced(self._path.stem, self._timedSync(_layer.fsync, time.monotonic))

    @property
    def fd(self) -> int | None:
        """
        Its descriptor (L{None} once closed), for the sync helper to hold.
        """
        return self._fd

    @property
    def size(self) -> int:
        """
        Its length as far as this log wrote it.
        """
        return self._size

    def refusal(self) -> OSError | ValueError | None:
        """
        What L{write} would raise before writing anything, or L{None}.
        """
        if self._fd is None:
            return ValueError(f"{self._path}: the log is closed")
        if self._failure is not None:
            return OSError(
                f"{self._path}: an earlier write failed ({self._failure!r}); "
                "open the log afresh"
            )
        return None

    def wroteElsewhere(self, written: int, lines: int, syncing: float | None,
                       failure: BaseException | None) -> None:
        """
        Another process wrote (and synced) for this log (the sync helper,
        L{vehicle.store._syncer}): C{written} bytes in C{lines} lines,
        C{syncing} seconds syncing (L{None}: no sync), and C{failure} (a
        write or sync that failed: the log refuses more, as after its own).
        """
        self._size += written
        if lines:
            _observer.appended(self._path.stem, lines)
        if syncing is not None:
            _observer.synced(self._path.stem, syncing)
        if failure is not None:
            self._failure = failure

    def close(self) -> None:
        """
        Close the log's file descriptor; closing twice is harmless.
        """
        if self._fd is not None:
            fd, self._fd = self._fd, None
            files().close(fd)

    def reopen(self, newPath: Path) -> None:
        """
        Go on appending at C{newPath}, the same log after its directory was
        moved (to the trash).

        @param newPath: where the log now is; it must exist.
        """
        newPath = Path(newPath)
        fd = files().open(newPath, _APPEND)
        self.close()
        self._fd = fd
        self._path = newPath
        self._size = os.fstat(fd).st_size


def _readLog(
    path: Path, seqField: str | None
) -> tuple[list[JSONObject], int, int, int, str | None]:
    """
    Read every record of the log at C{path}.

    @return: C{(records, goodOffset, size, lastSeq, tornReason)}: the end of
        the last good record, the file's size, the last sequence number and
        why the tail (if any) was dropped.
    @raise CorruptLog: see L{JsonlLog.open}.
    """
    records: list[JSONObject] = []
    offset = 0
    lastSeq = 0
    bad: tuple[int, int, str] | None = None
    lineNumber = 0
    with open(path, "rb") as f:
        for raw in f:
            lineNumber += 1
            if bad is not None:
                if raw.endswith(b"\n"):
                    # The bad line is followed by another whole line: it is
                    # not a torn tail but damage in the middle.
                    raise CorruptLog(path, *bad)
                # Else this is the last line, torn too: dropped with it.
            elif not raw.endswith(b"\n"):
                # Only the last line can lack its newline.
                bad = (lineNumber, offset, "last line has no newline")
            else:
                record, why = _parseLine(raw[:-1])
                if record is None:
                    bad = (lineNumber, offset, why)
                else:
                    if seqField is not None:
                        lastSeq = _nextSeq(path, lineNumber, offset, seqField, record, lastSeq)
                    records.append(record)
                    offset += len(raw)
        size = f.seek(0, os.SEEK_END)
    return records, offset, size, lastSeq, (bad[2] if bad is not None else None)



def _nextSeq(
    path: Path, lineNumber: int, offset: int, seqField: str,
    record: JSONObject, lastSeq: int,
) -> int:
    """
    The sequence number of C{record}, which must follow C{lastSeq}.

    @raise CorruptLog: when it does not.
    """
    seq = intOf(record.get(seqField))
    if seq is None:
        raise CorruptLog(path, lineNumber, offset, f"no integer {seqField!r}")
    if seq != lastSeq + 1:
        kind = "duplicate or out of order" if seq <= lastSeq else "gap"
        raise CorruptLog(
            path, lineNumber, offset, f"{seqField} {seq} after {lastSeq} ({kind})"
        )
    return seq
