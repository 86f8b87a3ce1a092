"""
The session package: a conversation, its own owner (L{Session}: its verbs and
its private parts, the journal, the lease, the command state machine, the
room and its chimes, the watchers), the registry of sessions and its maker,
and who follows sessions' lives (L{Observers}).
"""

from vehicle.session._capsule import makeCapsule
from vehicle.session._eventlog import Entry
from vehicle.session._interfaces import IConductor, RunSettled
from vehicle.session._maker import FolderMaker, Maker, movedFolders
from vehicle.session._observers import Observers, SessionObserver
from vehicle.session._registry import Registry, notFound
from vehicle.session._requests import fingerprint, storageError
from vehicle.session._session import Session, normalizeTitle
from vehicle.session._watchers import MAX_WAIT_MS, WATCH_LIMIT, Feed
from vehicle.session._command import preview as previewOf
from vehicle.session._values import (
    CALLER_KINDS,
    ROLES,
    Caller,
    CallerKind,
    FolderRecord,
    Lease,
    SessionMeta,
    isoTimestamp,
    parseTimestamp,
)


__all__ = [
    "CALLER_KINDS",
    "MAX_WAIT_MS",
    "ROLES",
    "WATCH_LIMIT",
    "Caller",
    "CallerKind",
    "Entry",
    "Feed",
    "FolderMaker",
    "FolderRecord",
    "IConductor",
    "Lease",
    "Maker",
    "Observers",
    "Registry",
    "RunSettled",
    "Session",
    "SessionMeta",
    "SessionObserver",
    "fingerprint",
    "isoTimestamp",
    "makeCapsule",
    "movedFolders",
    "normalizeTitle",
    "notFound",
    "parseTimestamp",
    "previewOf",
    "storageError",
]
