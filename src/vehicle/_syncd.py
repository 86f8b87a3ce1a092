# -*- test-case-name: tests.unit.test_syncd -*-
"""
The part of group commit that runs anywhere: a batch's lines written and
synced phase by phase (L{runPhases}), the chains that break when one fails,
and the sync helper, a process of its own that does exactly that for the
host (L{serve}, L{main}).

This module imports nothing but the standard library: the helper runs it
with C{python -I -S}, so that it starts in a few milliseconds, holds a few
megabytes, and sees nothing of the host's environment.  The host's side of
the helper is L{vehicle.store._syncer}; the writer that decides what goes
in a batch is L{vehicle.store._writer}.

Why a process: the writer's thread, which makes the syncs, takes the
interpreter's lock back after each of its system calls, and every time the
reactor's thread lets the lock go (each of its own system calls) it has to
wake the writer's.  A process has a lock of its own.

The wire, both ways, is frames: a 4-byte big-endian length, then a
C{marshal}led tuple (both ends are the same interpreter, and the helper
trusts nothing it did not get from its parent).  The host sends:

  - C{("open", key)}, with one descriptor passed beside the bytes (at or
    before the frame's first byte): the helper keeps it under C{key} (the
    host's own number for it), closing the one it kept there before;
  - C{("forget", keys)}: the helper closes what it keeps under C{keys}
    (logs the host has closed since);
  - C{("batch", chains, steps, logs)}: C{chains} maps a chain's number in
    the batch to the index it is broken at (or L{None}); C{steps} is a list
    of C{(index, chain, lines)}, each line C{(key, phase, data)}; C{logs}
    maps each key to C{(size, refusal)}: the log's size as the host knows
    it (a failed write is cut back to it) and, when the log takes no line
    (closed, or failed before), the error to raise.

For each batch the helper answers C{("done", failures, logs)}: the new
failure of each step that had one (C{index: error}), and for each log
C{(bytes written, lines written, seconds syncing or None when it was
not synced, error or None)}.  An
error is C{(kind, args)}, kind C{"os"} or C{"value"}.
"""

from __future__ import annotations

import marshal
import os
import signal
import socket
import struct
import sys
import time
from collections import deque
from typing import Any, Callable, Iterable, Protocol, Sequence, TypeVar


_FULLFSYNC: int | None
try:
    import fcntl
except ImportError:  # pragma: no cover - not a POSIX system
    _FULLFSYNC = None
else:
    #: macOS's full sync (its C{fsync} reaches only the drive's cache);
    #: L{None} where the system has none (Linux, whose C{fsync} is the
    #: full one).
    _FULLFSYNC = getattr(fcntl, "F_FULLFSYNC", None)


def fsyncFully(fd: int) -> None:
    """
    Make what was written to C{fd} durable: C{F_FULLFSYNC} where the
    system has it (macOS), else (or when the file system refuses it)
    C{fsync}.
    """
    if _FULLFSYNC is not None:
        try:
            fcntl.fcntl(fd, _FULLFSYNC)
            return
        except OSError:
            # Not every file system takes it: the plain sync then.
            pass
    os.fsync(fd)


class Appends(Protocol):
    """
    The file calls a whole append makes (L{appendWhole}).
    """

    def write(self, fd: int, data: bytes | memoryview) -> int: ...
    def ftruncate(self, fd: int, size: int) -> None: ...


class Ops(Appends, Protocol):
    """
    The file calls a batch makes (the store's file layer has them all).
    """

    def fsync(self, fd: int) -> None: ...
    def close(self, fd: int) -> None: ...


class OsOps:
    """
    The real file calls, the sync the full one.
    """

    def write(self, fd: int, data: bytes | memoryview) -> int:
        return os.write(fd, data)

    def fsync(self, fd: int) -> None:
        fsyncFully(fd)

    def ftruncate(self, fd: int, size: int) -> None:
        os.ftruncate(fd, size)

    def close(self, fd: int) -> None:
        os.close(fd)


def appendWhole(ops: Appends, fd: int, data: bytes, size: int) -> None:
    """
    Write C{data} whole at the end of C{fd} (opened to append), however
    many C{write}s it takes; when one fails, cut the file back to C{size}
    (its length before) so no part of C{data} is left for the next line to
    follow, and raise what failed.
    """
    view = memoryview(data)
    try:
        while view:
            written = ops.write(fd, view)
            view = view[written:]
    except BaseException:
        try:
            ops.ftruncate(fd, size)
        except OSError:
            pass
        raise


class WholeAppends:
    """
    A log's appends, each whole at its end or not at all, and its syncs,
    with what both depend on: the descriptor, the size written so far,
    and the failure after which it refuses more.  The host's log
    (L{vehicle.store._jsonl.JsonlLog}) and the helper's view of it for one
    batch (L{_Log}) are both this.
    """

    _fd: int | None
    _size: int
    _failure: BaseException | None

    def refusal(self) -> OSError | ValueError | None:
        """
        What an append would raise before writing anything, or L{None}.
        """
        raise NotImplementedError()

    def _append(self, ops: Appends, lines: tuple[bytes, ...]) -> int:
        """
        Write C{lines} whole with one C{write} (L{appendWhole}); a failure
        is kept, and the log refuses more.

        @return: the bytes written.
        """
        refusal = self.refusal()
        if refusal is not None:
            raise refusal
        assert self._fd is not None
        data = b"".join(lines)
        try:
            appendWhole(ops, self._fd, data, self._size)
        except BaseException as e:
            self._failure = e
            raise
        self._size += len(data)
        return len(data)

    def _timedSync(self, fsync: Callable[[int], None], now: Callable[[], float]) -> float:
        """
        Sync the open log with C{fsync}; a failure is kept, and the log
        refuses more (a failed sync must not be retried as if it had
        worked).

        @return: the seconds it took, by C{now}.
        """
        assert self._fd is not None
        began = now()
        try:
            fsync(self._fd)
        except BaseException as e:
            self._failure = e
            raise
        return now() - began


# -- chains and phases ------------------------------------------------------


class Chain:
    """
    The logs of one owner (a session's two) whose lines follow one another.

    @ivar brokenAt: the number of the first step of the chain that failed:
        it and every later step of the chain are refused.
    @ivar failure: what broke it.
    """

    __slots__ = ("brokenAt", "failure")

    def __init__(self, brokenAt: int | None = None, failure: BaseException | None = None) -> None:
        self.brokenAt = brokenAt
        self.failure = failure

    def __repr__(self) -> str:
        return f"Chain(brokenAt={self.brokenAt!r}, failure={self.failure!r})"


class StepMarks:
    """
    What a step of a batch knows of itself: its number, its chain, and its
    failure (mixed into the writer's steps and the helper's).
    """

    index: int
    chain: Chain
    failure: BaseException | None

    def refused(self) -> bool:
        """
        Has this step failed, or is its chain broken at it or before it?
        """
        if self.failure is None:
            chain = self.chain
            if chain.brokenAt is not None and self.index >= chain.brokenAt:
                self.failure = chain.failure
        return self.failure is not None

    def fail(self, error: BaseException) -> None:
        """
        This step's lines are not durable: it fails, and breaks its chain.
        """
        if self.failure is None:
            self.failure = error
        chain = self.chain
        if chain.brokenAt is None or self.index < chain.brokenAt:
            chain.brokenAt, chain.failure = self.index, error


class PhaseLog(Protocol):
    """
    A log a batch writes to: C{write} its lines whole, then C{sync}.
    """

    def write(self, *lines: bytes) -> None: ...
    def sync(self) -> None: ...


class PhaseLine(Protocol):
    @property
    def log(self) -> PhaseLog: ...
    @property
    def data(self) -> bytes: ...
    @property
    def phase(self) -> int: ...


class PhaseStep(Protocol):
    @property
    def lines(self) -> Sequence[PhaseLine]: ...
    def refused(self) -> bool: ...
    def fail(self, error: BaseException) -> None: ...


class _Phased(Protocol):
    @property
    def phase(self) -> int: ...


X = TypeVar("X")
Y = TypeVar("Y", bound=_Phased)


def inPhases(lines: Iterable[tuple[X, Y]]) -> list[list[tuple[X, Y]]]:
    """
    C{lines} (each with what it belongs to) by phase, the phases in order,
    each keeping the order the lines came in.
    """
    phases: dict[int, list[tuple[X, Y]]] = {}
    for owner, line in lines:
        phases.setdefault(line.phase, []).append((owner, line))
    return [phases[phase] for phase in sorted(phases)]


def runPhases(steps: Sequence[PhaseStep]) -> None:
    """
    Make the steps' lines durable, phase by phase: write each log's lines
    of the phase with one C{write}, in the order the steps came, then sync
    each log written once.  A step whose line could not be written or
    synced fails (L{StepMarks.fail}), breaking its chain: no later line of
    its chain is written.
    """
    for phase in inPhases((step, line) for step in steps for line in step.lines):
        byLog: dict[PhaseLog, list[tuple[PhaseStep, PhaseLine]]] = {}
        for step, line in phase:
            byLog.setdefault(line.log, []).append((step, line))
        touched: dict[PhaseLog, list[PhaseStep]] = {}
        for log, taken in byLog.items():
            # Asked here, log by log: a write that failed before this one
            # may have broken the chain of a step with a line here.
            taken = [(step, line) for step, line in taken if not step.refused()]
            if not taken:
                continue
            try:
                log.write(*(line.data for _, line in taken))
            except (OSError, ValueError) as e:
                for step, _ in taken:
                    step.fail(e)
                continue
            touched[log] = [step for step, _ in taken]
        for log, written in touched.items():
            try:
                log.sync()
            except (OSError, ValueError) as e:
                # Every line written to it since its last sync is in doubt.
                for step in written:
                    step.fail(e)


# -- the wire -----------------------------------------------------------------

_LENGTH = struct.Struct("!I")

#: The longest frame either end takes (a batch is a few hundred KiB at most).
MAX_FRAME = 1 << 30

Error = tuple[str, tuple[Any, ...]]


def frame(message: tuple[Any, ...]) -> bytes:
    """
    C{message} as one frame.
    """
    body = marshal.dumps(message)
    return _LENGTH.pack(len(body)) + body


def takeFrames(buffer: bytearray) -> list[tuple[Any, ...]]:
    """
    The whole frames at the start of C{buffer}, taken out of it.

    @raise ValueError: a frame over L{MAX_FRAME}, or one that is not a
        C{marshal}led tuple.
    """
    messages: list[tuple[Any, ...]] = []
    at = 0
    while len(buffer) - at >= 4:
        (length,) = _LENGTH.unpack_from(buffer, at)
        if length > MAX_FRAME:
            raise ValueError(f"a frame of {length} bytes")
        if len(buffer) - at - 4 < length:
            break
        message = marshal.loads(bytes(buffer[at + 4:at + 4 + length]))
        if not isinstance(message, tuple) or not message:
            raise ValueError("a frame that is not a message")
        messages.append(message)
        at += 4 + length
    del buffer[:at]
    return messages


def errorOf(error: BaseException) -> Error:
    """
    C{error} for the wire: an C{OSError} or a C{ValueError} by its
    arguments (as C{str}s and C{int}s).
    """
    kind = "value" if isinstance(error, ValueError) else "os"
    return kind, tuple(a if isinstance(a, int) else str(a) for a in error.args)


def errorFrom(error: Error) -> OSError | ValueError:
    """
    The exception an L{errorOf} stands for.
    """
    kind, args = error
    return ValueError(*args) if kind == "value" else OSError(*args)


# -- the helper ----------------------------------------------------------------


class _Log(WholeAppends):
    """
    A log as the helper sees it for one batch: a descriptor, the size the
    host knows, and what it did with them.
    """

    def __init__(self, ops: Ops, fd: int | None, size: int, refused: OSError | ValueError | None,
                 now: Callable[[], float] = time.monotonic) -> None:
        self.ops = ops
        self.now = now
        self._fd = fd
        self._size = size
        self._refused = refused
        self._failure = None
        self.written = 0
        self.lines = 0
        self.syncing: float | None = None

    def refusal(self) -> OSError | ValueError | None:
        if self._refused is None and self._failure is not None:
            return OSError(f"an earlier write failed ({self._failure!r}); open the log afresh")
        return self._refused

    def write(self, *lines: bytes) -> None:
        self.written += self._append(self.ops, lines)
        self.lines += len(lines)

    def sync(self) -> None:
        self.syncing = (self.syncing or 0.0) + self._timedSync(self.ops.fsync, self.now)

    def report(self) -> tuple[int, int, float | None, Error | None]:
        failure = None if self._failure is None else errorOf(self._failure)
        return self.written, self.lines, self.syncing, failure


class _Line:
    __slots__ = ("log", "data", "phase")

    def __init__(self, log: _Log, data: bytes, phase: int) -> None:
        self.log, self.data, self.phase = log, data, phase


class _Step(StepMarks):
    __slots__ = ("index", "chain", "failure", "lines")

    def __init__(self, index: int, chain: Chain, lines: list[_Line]) -> None:
        self.index, self.chain, self.lines = index, chain, lines
        self.failure: BaseException | None = None


class _Earlier(Exception):
    """
    A chain the host knew broken before the batch: the host fails its
    steps itself.
    """


class Helper:
    """
    The helper's state: the descriptors it keeps, by the host's key.

    @ivar now: its clock, for the time its syncs take.
    """

    def __init__(self, ops: Ops, now: Callable[[], float] = time.monotonic) -> None:
        self.ops = ops
        self.now = now
        self.fds: dict[int, int] = {}

    def handle(self, message: tuple[Any, ...], passed: deque[int]) -> tuple[Any, ...] | None:
        """
        Do what C{message} asks (see the module); its answer, if it has one.

        @param passed: the descriptors received and not yet taken.
        @raise ValueError: a message the helper does not know, or an
            C{open} with no descriptor beside it.
        """
        kind = message[0]
        if kind == "open":
            if not passed:
                raise ValueError("an open with no descriptor")
            self.keep(message[1], passed.popleft())
            return None
        if kind == "forget":
            for key in message[1]:
                self.drop(key)
            return None
        if kind == "batch":
            return self.batch(*message[1:])
        raise ValueError(f"an unknown message {kind!r}")

    def keep(self, key: int, fd: int) -> None:
        self.drop(key)
        self.fds[key] = fd

    def drop(self, key: int) -> None:
        """
        Close the descriptor kept under C{key}, if any.
        """
        fd = self.fds.pop(key, None)
        if fd is not None:
            self.ops.close(fd)

    def batch(self, chains: dict[int, int | None],
              steps: list[tuple[int, int, tuple[tuple[int, int, bytes], ...]]],
              logs: dict[int, tuple[int, Error | None]]) -> tuple[Any, ...]:
        earlier = _Earlier()
        ours = {n: Chain(at, None if at is None else earlier) for n, at in chains.items()}
        theirs = {
            key: _Log(self.ops, self.fds.get(key), size,
                      None if refusal is None else errorFrom(refusal), self.now)
            for key, (size, refusal) in logs.items()
        }
        taken = [
            _Step(index, ours[chain], [_Line(theirs[key], data, phase) for key, phase, data in lines])
            for index, chain, lines in steps
        ]
        runPhases(taken)
        failures = {
            step.index: errorOf(step.failure) for step in taken
            if step.failure is not None and step.failure is not earlier
        }
        return "done", failures, {key: log.report() for key, log in theirs.items()}


#: The most descriptors one read takes (the host passes one at a time).
MAX_FDS = 64

_FD = struct.Struct("i")


def serve(sock: socket.socket, ops: Ops) -> None:
    """
    Answer the host on C{sock} until it closes its end (the host ended):
    the batch in hand is finished first.  Every descriptor it was passed
    is closed when it returns or raises.

    @raise ValueError: the host sent what no host sends, or more
        descriptors at once than L{MAX_FDS} (the helper ends, and the host
        fails the batch it had sent).
    """
    helper = Helper(ops)
    buffer = bytearray()
    passed: deque[int] = deque()
    space = socket.CMSG_SPACE(MAX_FDS * _FD.size)
    try:
        while True:
            data, ancillary, flags, _ = sock.recvmsg(1 << 16, space)
            for level, kind, payload in ancillary:
                if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                    # Whole descriptors only: a cut keeps those that fit.
                    passed.extend(fd for (fd,) in _FD.iter_unpack(payload))
            if flags & socket.MSG_CTRUNC:
                raise ValueError("descriptors were lost on the way")
            if not data:
                return
            buffer += data
            for message in takeFrames(buffer):
                answer = helper.handle(message, passed)
                if answer is not None:
                    sock.sendall(frame(answer))
    finally:
        for fd in [*passed, *helper.fds.values()]:
            ops.close(fd)


#: The signals the helper does not die of: a Ctrl-C at the terminal, a
#: service manager's stop and a closed terminal reach every process of the
#: host's group at once, and the helper must finish the batches the host
#: still hands it while it stops; it ends when the host closes its end.
IGNORED = ("SIGINT", "SIGTERM", "SIGHUP")


def main() -> None:
    """
    The helper process: its socket to the host is descriptor 3 (any other
    it was given, the data directory's lock, it holds and never touches).
    """
    for name in IGNORED:
        signal.signal(getattr(signal, name), signal.SIG_IGN)
    serve(socket.socket(fileno=3), OsOps())
    sys.exit(0)


if __name__ == "__main__":
    main()
