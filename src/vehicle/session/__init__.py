"""
The session room: the aggregate, its lease and idempotency, the command
state machine and the registry of sessions.
"""

from vehicle.session._command import Command
from vehicle.session._registry import Registry, notFound
from vehicle.session._session import (
    MAX_WAIT_MS,
    WATCH_LIMIT,
    IConductor,
    Session,
    fingerprint,
    normalizeTitle,
)
from vehicle.session._values import (
    COMMAND_TYPES,
    EPHEMERAL_TYPES,
    EVENT_TYPES,
    LEASED_COMMANDS,
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
    "Lease",
    "Registry",
    "Session",
    "SessionMeta",
    "fingerprint",
    "isoTimestamp",
    "normalizeTitle",
    "notFound",
]
