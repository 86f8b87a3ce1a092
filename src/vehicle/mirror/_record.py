# -*- test-case-name: tests.live.test_mirror -*-
"""
One session's mirror record: what C{mirror.json} keeps of its document
(never the token), and the write queue held in memory beside it.
"""

from __future__ import annotations

from typing import Any

from attrs import define, field
from twisted.internet.defer import Deferred

from vehicle.mirror._mcp import MCPClient
from vehicle.protocol import MIRROR_STAGES, MirrorStage


MIRROR_FILE = "mirror.json"

STATES = MIRROR_STAGES

REASON_OFF = "the mirror is turned off (VEHICLE_MIRROR=off)"
REASON_NO_ENDPOINT = "the mirror is off: no MCP endpoint (MNEMOSYNE_MCP_URL)"
REASON_VIEWER = "a viewer's session is never written to the graph"
REASON_NO_TOKEN = (
    "no delegation token yet: the owner's next request on this graph brings one"
)
REASON_NOTHING_YET = "nothing has been said yet"
REASON_FIRST = "waiting for the first settled run"

#: The fields of C{mirror.json} (never the token).
_PERSISTED = (
    "state",
    "documentId",
    "folder",
    "reason",
    "writtenAt",
    "error",
    "contentHash",
    "title",
    "created",
    "wired",
)


@define
class MirrorRecord:
    """
    One session's mirror state (persisted) and its write queue (memory).
    """

    state: MirrorStage = "pending"
    documentId: str | None = None
    folder: str | None = None
    reason: str | None = REASON_FIRST
    writtenAt: str | None = None
    error: str | None = None
    contentHash: str | None = None
    title: str | None = None
    created: bool = False
    #: A create_document was sent and its answer is not known yet.
    creating: bool = False
    wired: bool = False
    client: MCPClient | None = field(default=None, repr=False)
    running: bool = False
    waiters: list[Deferred] = field(factory=list, repr=False)

    def persisted(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in _PERSISTED}

    @classmethod
    def fromJSON(cls, data: Any) -> "MirrorRecord":
        record = cls()
        if not isinstance(data, dict):
            return record
        for name in _PERSISTED:
            if name in data:
                setattr(record, name, data[name])
        record.state = STATES.get(str(record.state), "pending")
        record.created = bool(record.created)
        record.wired = bool(record.wired)
        return record
