"""
What a prompt says to the scripted model (C{vehicle_local.model}): L{bashMarker}
asks it for one C{bash} tool call.
"""

from __future__ import annotations

import json


def bashMarker(command: str) -> str:
    """
    The marker in a prompt's text that makes the scripted model call
    C{bash} with C{command}.
    """
    return "[[TOOL:bash " + json.dumps({"command": command}) + "]]"


def writeMarker(path: str, content: str) -> str:
    """
    The marker that makes the scripted model call C{write} to put
    C{content} at C{path}.
    """
    return "[[TOOL:write " + json.dumps({"path": path, "content": content}) + "]]"
