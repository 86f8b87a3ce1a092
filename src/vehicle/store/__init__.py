# -*- test-case-name: tests.unit.test_store -*-
"""
Durable files: the append-only JSONL log (sequence numbers, torn-tail repair),
atomic whole-file rewrites, the data directory's layout and the trash, all
through one file layer a test can replace (L{useFiles}); the data
directory's one writer, which makes appends durable in batches (group
commit, L{GroupWriter}).

This package knows nothing of what sessions mean; it only keeps their bytes.
"""

from vehicle.store._atomic import (
    fsyncDirectory,
    fullSync,
    readJson,
    syncFile,
    writeAtomic,
    writeJsonAtomic,
)
from vehicle.store._files import Files, OsFiles, files, removeTree, useFiles
from vehicle.store._jsonl import CorruptLog, JsonlLog, LogObserver, observeLogs
from vehicle.store._layout import DataDir
from vehicle.store._lock import DataDirLock, DataDirLocked
from vehicle._syncd import Chain
from vehicle.store._writer import (
    After,
    GroupWriter,
    Line,
    raiseAtOnce,
    runAtOnce,
    writeAtOnce,
)
from vehicle.store._syncer import writerFor


__all__ = [
    "CorruptLog",
    "DataDir",
    "Files",
    "JsonlLog",
    "LogObserver",
    "observeLogs",
    "OsFiles",
    "files",
    "fsyncDirectory",
    "fullSync",
    "readJson",
    "syncFile",
    "useFiles",
    "writeAtomic",
    "writeJsonAtomic",
    "removeTree",
    "DataDirLock",
    "DataDirLocked",
    "After",
    "Chain",
    "GroupWriter",
    "Line",
    "raiseAtOnce",
    "runAtOnce",
    "writeAtOnce",
    "writerFor",
]
