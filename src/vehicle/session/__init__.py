"""
The session room: the aggregate and its parts (the journal, the lease, the
command state machine, the room), the registry of sessions and its maker,
and the drive step.
"""

from vehicle.session._command import Command, preview as previewOf
from vehicle.session._capsule import makeCapsule
from vehicle.session._drive import (
    AgentRules,
    BodyRules,
    Drive,
    PublicTurns,
    Replayed,
    answer,
    requireGraphPath,
)
from vehicle.session._journal import Journal
from vehicle.session._lineage import branchEffects
from vehicle.session._maker import Maker
from vehicle.session._observers import Observers, SessionObserver
from vehicle.session._registry import Registry, notFound
from vehicle.session._requests import fingerprint, storageError
from vehicle.session._session import (
    MAX_WAIT_MS,
    WATCH_LIMIT,
    IConductor,
    Session,
    normalizeTitle,
)
from vehicle.session._values import (
    COMMAND_TYPES,
    EPHEMERAL_TYPES,
    EVENT_TYPES,
    FINAL_STATUSES,
    LEASED_COMMANDS,
    OPEN_STATUSES,
    ROLES,
    TEXT_COMMANDS,
    Caller,
    Lease,
    SessionMeta,
    isoTimestamp,
)


__all__ = [
    "COMMAND_TYPES",
    "EPHEMERAL_TYPES",
    "EVENT_TYPES",
    "IConductor",
    "LEASED_COMMANDS",
    "MAX_WAIT_MS",
    "TEXT_COMMANDS",
    "WATCH_LIMIT",
    "Caller",
    "Command",
    "Journal",
    "Lease",
    "Maker",
    "Registry",
    "Session",
    "SessionMeta",
    "fingerprint",
    "isoTimestamp",
    "normalizeTitle",
    "notFound",
    "answer",
    "requireGraphPath",
    "previewOf",
    "branchEffects",
    "storageError",
    "FINAL_STATUSES",
    "OPEN_STATUSES",
    "ROLES",
    "AgentRules",
    "BodyRules",
    "Drive",
    "PublicTurns",
    "Replayed",
    "SessionObserver",
    "Observers",
    "makeCapsule",
]
