# -*- test-case-name: tests.unit.test_store -*-
"""
Whole-file rewrites that a crash cannot tear, and the fsync helpers they use.

A file is replaced by writing a temporary file beside it, syncing it, renaming
it over the old one and syncing the directory, so a reader sees either the old
content or the new one, never a mixture.
"""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path
from vehicle.protocol import JSON, loads
from vehicle.store._files import CREATE, files


def fullSync(fd: int) -> None:
    """
    Make the data written to C{fd} durable, through the file layer (see
    L{vehicle.store._files.OsFiles.fsync}: C{F_FULLFSYNC} on macOS).

    @param fd: an open file descriptor.
    @raise OSError: when the sync fails; the caller must not retry and
        assume success (the kernel may have dropped the dirty pages).
    """
    files().fsync(fd)


def fsyncDirectory(path: Path) -> None:
    """
    Sync the directory C{path}, so that entries created, renamed or removed
    in it survive a crash.

    @param path: an existing directory.
    """
    _syncPath(path, os.O_DIRECTORY)


def _syncPath(path: Path, flags: int) -> None:
    """
    Open C{path} read-only with C{flags}, sync it, close it.
    """
    layer = files()
    # Read-only (O_RDONLY is 0); close-on-exec, as every descriptor
    # os.open makes (PEP 446).
    fd = layer.open(path, flags)
    try:
        layer.fsync(fd)
    finally:
        layer.close(fd)


def makeDirs(path: Path) -> None:
    """
    Make the directory C{path} and its missing parents, each exactly 0700
    and durably (its parent synced after it is made).

    @raise FileExistsError: when C{path} or a parent is a file.
    """
    if not path.is_dir():
        makeDirs(path.parent)
        files().mkdir(path, 0o700)
        fsyncDirectory(path.parent)


def writeAll(fd: int, data: bytes) -> None:
    """
    Write all of C{data} to C{fd}, looping over partial writes.

    @param fd: an open file descriptor.
    @param data: the bytes to write.
    """
    layer = files()
    view = memoryview(data)
    while view:
        written = layer.write(fd, view)
        view = view[written:]


def _createTemp(path: Path, mode: int) -> tuple[Path, int]:
    """
    Create a temporary file beside C{path}, C{.<name>.<12 hex digits>.tmp},
    exclusively (never one that is there already, a link included), open for
    writing; try another name on a collision.

    @return: its path and descriptor.
    """
    while True:
        temp = path.parent / f".{path.name}.{secrets.token_hex(6)}.tmp"
        try:
            return temp, files().open(temp, CREATE, mode)
        except FileExistsError:
            pass


def writeAtomic(path: Path, data: bytes, mode: int = 0o600, *, durable: bool = True) -> None:
    """
    Replace the file at C{path} with C{data}, atomically and durably.

    A temporary file is created beside C{path} (C{O_EXCL}, so it is ours
    alone), written, synced, renamed over C{path} with C{os.replace}, and the
    directory is synced. Should anything fail before the rename, the
    temporary file is removed and C{path} is untouched.  A temporary file a
    killed host left behind (C{.<name>.<hex>.tmp}) is removed at start (see
    L{vehicle.store.DataDir.sweep}).

    @param path: the file to replace; its directory must exist.
    @param data: the file's new content.
    @param mode: the new file's permission bits (exactly, whatever the umask).
    @param durable: C{False} in a folder nobody reads until it is synced
        whole (a session's folder built aside): atomic, nothing synced; the
        file and its folder are synced later (L{syncFile}).
    """
    layer = files()
    path = Path(path)
    temp, fd = _createTemp(path, mode)
    try:
        try:
            layer.fchmod(fd, mode)
            writeAll(fd, data)
            if durable:
                layer.fsync(fd)
        finally:
            layer.close(fd)
        layer.replace(temp, path)
    except BaseException:
        try:
            layer.unlink(temp)
        except BaseException:
            pass
        raise
    if durable:
        fsyncDirectory(path.parent)


def syncFile(path: Path) -> None:
    """
    Sync the file at C{path} (written earlier without a sync); its entry in
    its folder is the folder's sync's.
    """
    _syncPath(path, os.O_RDONLY)


def dumpJson(obj: object) -> bytes:
    """
    Serialize C{obj} as indented UTF-8 JSON with a trailing newline.

    Non-ASCII text is kept readable; a string that cannot be UTF-8 (a lone
    surrogate) makes the whole document fall back to ASCII escapes.

    @raise ValueError: for NaN or infinite floats, which are not JSON.
    @raise TypeError: for values JSON cannot represent.
    """
    try:
        text = json.dumps(obj, ensure_ascii=False, indent=2, allow_nan=False)
        return (text + "\n").encode("utf-8")
    except UnicodeEncodeError:
        # The same document (NaN was refused above), all ASCII escapes.
        text = json.dumps(obj, indent=2)
        return (text + "\n").encode("ascii")


def writeJsonAtomic(path: Path, obj: object, mode: int = 0o600, *, durable: bool = True) -> None:
    """
    Replace the file at C{path} with C{obj} as UTF-8 JSON (see L{writeAtomic}).

    @param path: the file to replace; its directory must exist.
    @param obj: a JSON-able value.
    @param mode: the new file's permission bits.
    @param durable: see L{writeAtomic}.
    """
    writeAtomic(path, dumpJson(obj), mode, durable=durable)


def readJson(path: Path) -> JSON:
    """
    Read the UTF-8 JSON document at C{path}.

    @raise OSError: when the file cannot be read (C{FileNotFoundError} when
        it is missing).
    @raise ValueError: when it is not UTF-8 JSON.
    """
    with open(path, "rb") as f:
        data = f.read()
    return loads(data.decode("utf-8"))
