# -*- test-case-name: tests.unit.test_digest -*-
"""
A session's digest (C{digest.json} in its folder): what listing, inspect's
summary and the lease need of a session, in brief, so that start reads a
small file per session instead of replaying every log.

It is derived, never a second truth: it names the two logs it was derived
from (each one's size and a hash of its last bytes, L{LogMark}) and counts
only while both are still exactly so.  A log written since (a host cut
before the digest was rewritten), repaired, or changed any other way makes
it stale, and the session is read back from its logs as before; a digest
missing, unreadable or of another version is the same.  The logs are
append-only, so a log's size and its last bytes say which log it is.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from attrs import frozen

from vehicle.protocol import RecordKind, RoomPolicy, fromJSON, objectOf, omitted, toObject
from vehicle.session._values import Lease
from vehicle.store import readJson, writeJsonAtomic


#: The digest's file, in the session's folder.
DIGEST_FILE = "digest.json"
#: Its shape: a digest of another version is not read.
VERSION = 1
#: How many of a log's last bytes its mark hashes.
TAIL_BYTES = 128


@frozen(kw_only=True)
class LogMark:
    """
    Which log a digest was derived from: its size, and the SHA-256 of its
    last L{TAIL_BYTES} bytes.
    """

    size: int
    tail: str


def markOf(path: Path) -> LogMark:
    """
    The mark of the log at C{path} as it is now.

    @raise OSError: it cannot be read (missing, say).
    """
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        f.seek(max(0, size - TAIL_BYTES))
        tail = f.read(TAIL_BYTES)
    return LogMark(size=size, tail=hashlib.sha256(tail).hexdigest())


@frozen(kw_only=True)
class Origin:
    """
    The request that made a session (its first record: a create, or a
    branch made from another session), in brief: enough to know a retry of
    it, and where to read the rest (L{vehicle.session._journal.Journal.originRecord}).

    @ivar fingerprint: a create's, on the route its replay checks.
    @ivar source: a branch's source session.
    """

    kind: RecordKind
    principal: str
    requestId: str
    fingerprint: str | None = omitted()
    source: str | None = omitted()


@frozen(kw_only=True)
class Digest:
    """
    A session in brief, as derived from its logs (see the module).

    @ivar lastAt: the newest event's timestamp.
    @ivar deletedAs: the trash name, when the newest event is
        C{session.deleted} (a delete start must finish).
    @ivar runs: the highest run number in the log.
    @ivar openCommands: the commands not yet final: a session with any is
        read back whole at start (they are reported interrupted).
    @ivar branches: the C{requestId}s of the branches it made.
    """

    version: int = VERSION
    events: LogMark
    commands: LogMark
    cursor: int
    lastAt: str | None
    deletedAs: str | None = omitted()
    runs: int = 0
    title: str | None
    preview: str | None
    previewInherited: bool = False
    roomPolicy: RoomPolicy
    lease: Lease | None
    openCommands: tuple[str, ...] = ()
    origin: Origin | None = omitted()
    branches: tuple[str, ...] = ()


def logsOf(directory: Path) -> tuple[Path, Path]:
    """
    A session's two logs: its events, its requests.
    """
    return directory / "events.jsonl", directory / "commands.jsonl"


def marksOf(directory: Path) -> tuple[LogMark, LogMark]:
    """
    The marks of a session's two logs as they are now.

    @raise OSError: one cannot be read.
    """
    events, commands = logsOf(directory)
    return markOf(events), markOf(commands)


def readDigest(directory: Path) -> Digest | None:
    """
    The digest in a session's folder, if there is one of this version that
    reads; L{None} otherwise (it is then derived again from the logs).
    """
    try:
        data = objectOf(readJson(directory / DIGEST_FILE))
    except (OSError, ValueError):
        return None
    if data.get("version") != VERSION:
        return None
    try:
        return fromJSON(data, Digest)
    except ValueError:
        return None


def currentDigest(directory: Path) -> Digest | None:
    """
    The digest in a session's folder when it still names the logs there
    exactly (L{readDigest}, then each log's mark); L{None} when it is
    missing or stale.
    """
    digest = readDigest(directory)
    if digest is None:
        return None
    try:
        events, commands = marksOf(directory)
    except OSError:
        return None
    if events != digest.events or commands != digest.commands:
        return None
    return digest


def digestKey(directory: Path) -> str:
    """
    The path of a session's digest, as the writer keys the work of writing
    it (L{vehicle.store.After}).
    """
    return os.path.join(directory, DIGEST_FILE)


def writeDigest(directory: Path, digest: Digest) -> None:
    """
    Write a session's digest (atomically: a cut leaves the old one or the
    new one, and either names its logs).
    """
    writeJsonAtomic(directory / DIGEST_FILE, toObject(digest))
