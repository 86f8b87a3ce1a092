# -*- test-case-name: tests.live.test_mirror -*-
"""
The mirror: each session's conversation written to a Garden document in its
graph, as the person, through gardend's MCP tools. A small MCP client, the
conversation's renderer, the document writer and the per-session state
machine.
"""

from vehicle.mirror._mcp import MCPClient, MirrorError
from vehicle.mirror._mirror import Mirror
from vehicle.mirror._document import renderSession
from vehicle.mirror._record import MIRROR_FILE
from vehicle.mirror._render import (
    AGENT_FOLDER_ID,
    CONVERSATIONS_FOLDER_ID,
    documentIdFor,
    documentTitle,
    renderConversation,
)


__all__ = [
    "AGENT_FOLDER_ID",
    "CONVERSATIONS_FOLDER_ID",
    "MCPClient",
    "MIRROR_FILE",
    "Mirror",
    "MirrorError",
    "documentIdFor",
    "documentTitle",
    "renderConversation",
    "renderSession",
]
