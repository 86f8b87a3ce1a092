# -*- test-case-name: tests.unit.test_conductor,tests.unit.test_mirror_render -*-
"""
The text the model sees for a command (L{renderText}), never the session's
record, and the person's words read back from it (L{stripContextNote}).
"""

from __future__ import annotations

from vehicle.protocol import Command


#: The note pi-sophia adds for what the person had open (ids only).
CONTEXT_NOTE_PREFIX = "\n\n[open in Garden: "


def renderText(command: Command) -> str:
    """
    The text the model sees for a command: the person's words, then one
    note of the ids they had open, or a collaborator's attribution.
    """
    text = command.text or ""
    author = command.chimeAuthor
    if author:
        text = f"[{author} collaborator]\n{text}"
    refs = command.contextRefs
    if refs:
        text += CONTEXT_NOTE_PREFIX + ", ".join(refs) + "]"
    return text


def stripContextNote(text: str) -> str:
    """
    The person's words without the note of what they had open.
    """
    at = text.rfind(CONTEXT_NOTE_PREFIX)
    if at >= 0 and text.endswith("]"):
        return text[:at]
    return text
