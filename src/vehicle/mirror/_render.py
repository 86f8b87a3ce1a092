# -*- test-case-name: tests.unit.test_mirror_render -*-
"""
The conversation document, as markdown: pure functions from a session's
meta, title and transcript to the mirror document's id, title and content.
No I/O; the title is kept out of the content, so a rename alone is a rename.
"""

from __future__ import annotations

import re
from datetime import datetime, timezone
from typing import Sequence

from vehicle.body import TranscriptItem, stripContextNote
from vehicle.protocol import Parent


#: The mirror's places in the graph (spec, "The mirror").
AGENT_FOLDER_ID = "agent-scratchpad"
AGENT_FOLDER_NAME = "_sophia"
CONVERSATIONS_FOLDER_ID = "sophia-conversations"
CONVERSATIONS_FOLDER_NAME = "Conversations"
DOCUMENT_PREFIX = "sophia-conversation-"

#: How the assistant is named in the document.
ASSISTANT = "Sophia"
#: The longest title made from a first question, in characters.
TITLE_CHARS = 80
UNTITLED = "Untitled conversation"

_COLLABORATOR = re.compile(r"^\[(?P<author>[^\]\n]{1,200}) collaborator\]\n")
_MARKDOWN_SPECIAL = re.compile(r"([\\`*_\[\]<>#|~])")


def documentIdFor(sessionId: str) -> str:
    """
    The mirror document's id for a session.
    """
    return DOCUMENT_PREFIX + sessionId


def personWords(text: str) -> tuple[str | None, str]:
    """
    Split a user message as pi has it into who wrote it (a collaborator's
    name from a chime's attribution, else L{None}) and their words as they
    wrote them (without the note of what they had open).
    """
    author = None
    match = _COLLABORATOR.match(text)
    if match is not None:
        author = match.group("author")
        text = text[match.end() :]
    return author, stripContextNote(text)


def shorten(text: str, limit: int = TITLE_CHARS) -> str:
    """
    C{text} on one line (whitespace runs become one space), at most
    C{limit} characters, cut at a word where one is near and marked with an
    ellipsis.
    """
    line = " ".join(text.split())
    if len(line) <= limit:
        return line
    cut = line[: limit - 1]
    space = cut.rfind(" ")
    if space >= limit // 2:
        cut = cut[:space]
    return cut.rstrip() + "\u2026"


def divergenceIndex(transcript: Sequence[TranscriptItem], createdAt: float) -> int:
    """
    How many leading items of a branch's transcript it inherited from its
    parent: a branch's file keeps the copied entries' timestamps, which are
    all older than the branch itself.

    @param createdAt: when the branch was made (POSIX seconds).
    """
    for index, item in enumerate(transcript):
        when = _parse(item.timestamp)
        if when is None or when >= createdAt:
            return index
    return len(transcript)


def firstQuestion(transcript: Sequence[TranscriptItem], start: int = 0) -> str | None:
    """
    The first user message at or after C{start} (else the first at all),
    as the person wrote it, shortened for a title; L{None} when nobody has
    said anything yet.
    """
    users = [(index, item) for index, item in enumerate(transcript) if item.role == "user"]
    chosen = next((item for index, item in users if index >= start), None)
    if chosen is None and users:
        chosen = users[0][1]
    if chosen is None:
        return None
    words = shorten(personWords(chosen.text)[1])
    return words or None


def documentTitle(
    title: str | None,
    transcript: Sequence[TranscriptItem],
    divergeAt: int = 0,
) -> str:
    """
    The document's title: the session's title, else its first question (for
    a fork, its own first message once it has one), else L{UNTITLED}.
    """
    if title and title.strip():
        return title.strip()
    return firstQuestion(transcript, divergeAt) or UNTITLED


def utc(seconds: float, withSeconds: bool = True) -> str:
    """
    C{2026-11-30 07:00:50 UTC}.
    """
    moment = datetime.fromtimestamp(seconds, timezone.utc)
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC" if withSeconds else "%Y-%m-%d %H:%M UTC")


def _parse(timestamp: str | None) -> float | None:
    if timestamp is None:
        return None
    try:
        moment = datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return moment.timestamp()


def _escape(text: str) -> str:
    return _MARKDOWN_SPECIAL.sub(r"\\\1", " ".join(text.split()))


def _who(name: str, timestamp: str | None) -> str:
    line = f"**{_escape(name)}**"
    when = _parse(timestamp)
    if when is not None:
        line += f" \u00b7 {utc(when)}"
    return line


def _chip(name: str | None, failed: bool) -> str:
    label = " ".join((name or "tool").replace("`", "'").split()) or "tool"
    return f"`\u2699 {label}{' (failed)' if failed else ''}`"


def branchLink(parent: Parent | None) -> str | None:
    """
    The line linking a branch's parent document (a wikilink), or L{None}
    for a session that is no branch.
    """
    if parent is None:
        return None
    target = documentIdFor(parent.sessionId)
    if parent.kind == "clone":
        return f"*Duplicated from [[{target}]]*"
    return f"*Branched from [[{target}]]*"


def renderConversation(
    *,
    model: str,
    createdAt: float,
    person: str,
    transcript: Sequence[TranscriptItem],
    parent: Parent | None = None,
    divergeAt: int = 0,
) -> str:
    """
    The document's markdown.

    A header (the model, the start), then each turn: who and when (UTC),
    the person's words as they wrote them, the replies' text and their tool
    calls as one-line chips. Tool results show only as a failed chip; usage
    and costs never show. A clone's header says what it duplicates; a
    fork's link stands before the first message it did not inherit.

    @param person: how the session's owner is named.
    @param transcript: L{vehicle.body.SessionFile.transcript}'s items.
    @param parent: C{meta.parent} (C{{sessionId, kind, entryId}}) or L{None}.
    @param divergeAt: for a fork, how many leading items it inherited
        (L{divergenceIndex}).
    """
    blocks = [f"*Model:* `{_code(model)}` \u00b7 *Started:* {utc(createdAt, False)}"]
    link = branchLink(parent)
    isFork = link is not None and parent is not None and parent.kind != "clone"
    if link is not None and not isFork:
        blocks.append(link)
    divergeAt = max(0, min(divergeAt, len(transcript))) if isFork else -1
    out = "\n\n".join(blocks)
    for turn in _turns(transcript, person, link or "", divergeAt):
        if turn:
            out += "\n\n---\n\n" + "\n\n".join(turn)
    return out + "\n"


def _turns(
    transcript: Sequence[TranscriptItem], person: str, link: str, divergeAt: int
) -> list[list[str]]:
    """
    The conversation's turns, each a list of blocks: a person's turn opens
    with who and when, then their words, and the replies that follow it
    join it (their speaker named once); a fork's C{link} is a turn of its
    own before item C{divergeAt} (C{-1}: none).
    """
    errors = _failedCalls(transcript)
    turns: list[list[str]] = []
    current: list[str] | None = None
    lastSpeaker: str | None = None
    for index, item in enumerate(transcript):
        if index == divergeAt:
            turns.append([link])
            current, lastSpeaker = None, None
        if item.role == "user":
            author, words = personWords(item.text)
            current = [_who(author or person, item.timestamp)]
            if words.strip():
                current.append(words.strip("\n") + _cut(item))
            turns.append(current)
            lastSpeaker = "user"
        elif item.role == "assistant":
            if current is None:
                current = []
                turns.append(current)
            if lastSpeaker != "assistant":
                current.append(_who(ASSISTANT, item.timestamp))
                lastSpeaker = "assistant"
            current.extend(_reply(item, errors))
    if divergeAt == len(transcript):
        turns.append([link])
    return turns


def _reply(item: TranscriptItem, errors: set[tuple[str, int]]) -> list[str]:
    """
    An assistant message's blocks: its text, and its tool calls as chips
    on one line (a failed one marked).
    """
    blocks = []
    text = item.text.strip("\n")
    if text.strip():
        blocks.append(text + _cut(item))
    chips = [
        _chip(call.name, (item.entryId, position) in errors)
        for position, call in enumerate(item.toolCalls)
    ]
    if chips:
        blocks.append(" ".join(chips))
    return blocks


def _cut(item: TranscriptItem) -> str:
    return " \u2026 *(cut)*" if item.truncated else ""


def _code(text: str) -> str:
    return " ".join(str(text).replace("`", "'").split())


def _failedCalls(transcript: Sequence[TranscriptItem]) -> set[tuple[str, int]]:
    """
    The tool calls whose result was an error, as C{(entryId, position)} of
    the assistant message that made them: results follow their message in
    call order.
    """
    out: set[tuple[str, int]] = set()
    pending: list[tuple[str, int, str | None]] = []
    for item in transcript:
        if item.role == "assistant":
            pending = [
                (item.entryId, position, call.name)
                for position, call in enumerate(item.toolCalls)
            ]
        elif item.role == "toolResult":
            match = next(
                (p for p in pending if p[2] == item.toolName),
                pending[0] if pending else None,
            )
            if match is not None:
                pending.remove(match)
                if item.isError:
                    out.add(match[:2])
        else:
            pending = []
    return out
