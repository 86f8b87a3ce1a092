# -*- test-case-name: tests.live.test_mirror -*-
"""
One session's mirror record: what C{mirror.json} keeps of its document
(never the token), and the write queue held in memory beside it.
"""

from __future__ import annotations

from attrs import define, field
from twisted.internet.defer import Deferred

from vehicle.mirror._mcp import MCPClient
from vehicle.protocol import MIRROR_STAGES, JSON, JSONObject, MirrorStage, MirrorState, textOf


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
    waiters: list[Deferred[MirrorState]] = field(factory=list, repr=False)

    def persisted(self) -> JSONObject:
        """
        What C{mirror.json} keeps (never the token).
        """
        return {
            "state": self.state,
            "documentId": self.documentId,
            "folder": self.folder,
            "reason": self.reason,
            "writtenAt": self.writtenAt,
            "error": self.error,
            "contentHash": self.contentHash,
            "title": self.title,
            "created": self.created,
            "wired": self.wired,
        }

    @classmethod
    def fromJSON(cls, data: JSON) -> "MirrorRecord":
        """
        The record C{mirror.json} kept (what is missing, or not what it
        should be, as a new record has it).
        """
        record = cls()
        if not isinstance(data, dict):
            return record

        def text(name: str, default: str | None) -> str | None:
            return textOf(data[name]) if name in data else default

        return cls(
            state=STATES.get(str(data.get("state", record.state)), "pending"),
            documentId=text("documentId", record.documentId),
            folder=text("folder", record.folder),
            reason=text("reason", record.reason),
            writtenAt=text("writtenAt", record.writtenAt),
            error=text("error", record.error),
            contentHash=text("contentHash", record.contentHash),
            title=text("title", record.title),
            created=bool(data.get("created", record.created)),
            wired=bool(data.get("wired", record.wired)),
        )
