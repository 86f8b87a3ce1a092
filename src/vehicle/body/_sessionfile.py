# -*- test-case-name: tests.unit.test_sessionfile -*-
"""
Reading and branching pi's session files (JSONL, version 3) without pi.

Owns the active-branch rule (the leaf is the last entry in the file), the
transcript the host shows for a session, and fork/clone as a pure file copy.
"""

from __future__ import annotations

import json
import os
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterable, Literal, Mapping, Sequence

from attrs import field, frozen

from vehicle.body._pimessage import PiMessage, ToolCall
from vehicle.errors import VehicleError
from vehicle.protocol import JSONObject, loads, textOf
from vehicle.session import isoTimestamp


#: The cap on a text field the host shows (transcript items, events), in
#: UTF-8 bytes.
MAX_TEXT_BYTES = 16384


def capText(text: str, maxBytes: int = MAX_TEXT_BYTES) -> tuple[str, bool]:
    """
    Cut C{text} to at most C{maxBytes} UTF-8 bytes without splitting a
    character.

    @param text: any string (lone surrogates are tolerated).
    @param maxBytes: the limit in UTF-8 bytes.
    @return: the (possibly shortened) text and whether it was cut.
    """
    if len(text) * 4 <= maxBytes:
        return text, False
    encoded = text.encode("utf-8", "surrogatepass")
    if len(encoded) <= maxBytes:
        return text, False
    cut = maxBytes
    # The first byte left out must not be the continuation of a character
    # that started inside the kept part.
    while cut > 0 and (encoded[cut] & 0xC0) == 0x80:
        cut -= 1
    return encoded[:cut].decode("utf-8", "surrogatepass"), True


class NothingToFork(VehicleError):
    """
    A fork named an entry that is not a user message on the active branch.

    It is the protocol's C{nothing_to_fork} refusal, so the web layer renders
    it as is.

    @ivar entryId: the entry asked for.
    """

    def __init__(self, entryId: str) -> None:
        super().__init__(
            "nothing_to_fork",
            "That entry is not a message of yours in this conversation.",
            {"entryId": entryId},
        )

    @property
    def entryId(self) -> str:
        assert self.details is not None
        return str(self.details["entryId"])


#: A transcript item's role: what the host shows of a conversation.
TranscriptRole = Literal["user", "assistant", "toolResult"]


@frozen(kw_only=True)
class Entry:
    """
    One entry of a session file (every record after the header), read once.

    @ivar id: its id (8 hex digits), L{None} for a record without one.
    @ivar parentId: the entry it follows on its branch.
    @ivar type: C{message}, C{label}, C{model_change}, C{custom}, ...
    @ivar timestamp: when pi appended it (ISO 8601).
    @ivar message: for a C{message} entry, its message.
    @ivar record: the record as pi wrote it, which a branch copies whole.
    """

    id: str | None
    parentId: str | None
    type: str | None
    timestamp: str | None
    message: PiMessage | None
    record: JSONObject = field(repr=False)

    @classmethod
    def fromJSON(cls, record: JSONObject) -> Entry:
        """
        Read one record of a session file.
        """
        kind = textOf(record.get("type"))
        message = record.get("message")
        return cls(
            id=textOf(record.get("id")),
            parentId=textOf(record.get("parentId")),
            type=kind,
            timestamp=textOf(record.get("timestamp")),
            message=(
                PiMessage.fromJSON(message)
                if kind == "message" and isinstance(message, dict)
                else None
            ),
            record=record,
        )


@frozen(kw_only=True)
class TranscriptItem:
    """
    One message of a conversation as the host shows it (the snapshot's
    C{transcript}, the mirror's document).

    @ivar text: the message's text, capped.
    @ivar truncated: whether the text was cut.
    @ivar toolCalls: an assistant message's tool calls.
    @ivar thinking: what an assistant message's model thought before it
        answered (its thinking parts joined), capped; C{""} when none.
    @ivar toolName: a tool result's tool.
    @ivar isError: whether a tool result is a failure.
    @ivar timestamp: when pi appended the entry.
    """

    entryId: str
    role: TranscriptRole
    text: str
    truncated: bool = False
    toolCalls: tuple[ToolCall, ...] = ()
    thinking: str = ""
    toolName: str | None = None
    isError: bool = False
    timestamp: str | None = None

    def toJSON(self) -> JSONObject:
        """
        The item on the wire: C{{"entryId", "role", "text"}}, then
        C{"truncated": true} when cut, C{"toolCalls"} (and C{"thinking"}
        when it thought aloud) for an assistant message, C{"toolName"} and
        C{"isError"} for a tool result, and the C{"timestamp"}.
        """
        item: JSONObject = {"entryId": self.entryId, "role": self.role, "text": self.text}
        if self.truncated:
            item["truncated"] = True
        if self.role == "assistant":
            item["toolCalls"] = [call.toJSON() for call in self.toolCalls]
            if self.thinking:
                item["thinking"] = self.thinking
        elif self.role == "toolResult":
            item["toolName"] = self.toolName
            item["isError"] = self.isError
        if self.timestamp is not None:
            item["timestamp"] = self.timestamp
        return item


@frozen(kw_only=True)
class ForkPoint:
    """
    A user message a fork may be cut at, as pi's C{get_fork_messages}
    lists it (its full text).
    """

    entryId: str
    text: str


def _transcriptRole(role: str | None) -> TranscriptRole | None:
    if role == "user":
        return "user"
    if role == "assistant":
        return "assistant"
    if role == "toolResult":
        return "toolResult"
    return None


@frozen
class SessionFile:
    """
    One pi session file as read.

    @ivar header: the C{{"type": "session", ...}} first line, or an empty
        object when the file has none.
    @ivar entries: every other parsed record, in file order.
    @ivar skippedLines: lines that were not JSON objects (a torn last line,
        for one).
    """

    header: JSONObject
    entries: Sequence[Entry]
    skippedLines: int = 0
    _byId: Mapping[str, Entry] = field(init=False, eq=False, repr=False)

    def __attrs_post_init__(self) -> None:
        byId = {e.id: e for e in self.entries if e.id is not None}
        object.__setattr__(self, "_byId", byId)

    def activeBranch(self) -> list[Entry]:
        """
        The entries from the root to the leaf, the leaf being the last entry
        (with an id) in file order, as pi decides when it loads the file.
        """
        leaf = next((e for e in reversed(self.entries) if e.id is not None), None)
        chain: list[Entry] = []
        seen: set[str] = set()
        while leaf is not None and leaf.id is not None and leaf.id not in seen:
            seen.add(leaf.id)
            chain.append(leaf)
            leaf = self._byId.get(leaf.parentId) if leaf.parentId is not None else None
        chain.reverse()
        return chain

    def _messages(self) -> Iterable[tuple[str, Entry, PiMessage]]:
        for entry in self.activeBranch():
            if entry.message is not None and entry.id is not None:
                yield entry.id, entry, entry.message

    def transcript(self, maxText: int = MAX_TEXT_BYTES) -> list[TranscriptItem]:
        """
        The conversation on the active branch, as the host shows it: user
        and assistant messages and tool results (system messages and
        entries that are not messages are left out).

        @param maxText: the cap on each item's C{text}, in UTF-8 bytes.
        """
        items = []
        for entryId, entry, message in self._messages():
            role = _transcriptRole(message.role)
            if role is None:
                continue
            text, truncated = capText(message.text, maxText)
            items.append(
                TranscriptItem(
                    entryId=entryId,
                    role=role,
                    text=text,
                    truncated=truncated,
                    toolCalls=message.toolCalls if role == "assistant" else (),
                    thinking=capText(message.thinking, maxText)[0] if role == "assistant" else "",
                    toolName=message.toolName if role == "toolResult" else None,
                    isError=message.isError if role == "toolResult" else False,
                    timestamp=entry.timestamp,
                )
            )
        return items

    def forkPoints(self) -> list[ForkPoint]:
        """
        The user messages on the active branch, as pi's
        C{get_fork_messages} lists them (full text).
        """
        return [
            ForkPoint(entryId=entryId, text=message.text)
            for entryId, _, message in self._messages()
            if message.role == "user"
        ]

    def firstUserText(self) -> str | None:
        """
        The text of the first user message on the active branch, if any.
        """
        return next((point.text for point in self.forkPoints()), None)


def parseSession(data: bytes) -> SessionFile:
    """
    Parse the bytes of a session file; see L{readSession}.
    """
    header: JSONObject = {}
    entries: list[Entry] = []
    skipped = 0
    first = True
    # LF only: raw U+2028/U+2029 occur inside JSON strings.
    for raw in data.split(b"\n"):
        if not raw.strip():
            continue
        try:
            record = loads(raw)
        except ValueError:
            skipped += 1
            continue
        if not isinstance(record, dict):
            skipped += 1
            continue
        if first and record.get("type") == "session":
            header = record
        else:
            entries.append(Entry.fromJSON(record))
        first = False
    return SessionFile(header=header, entries=entries, skippedLines=skipped)


def readSession(path: Path) -> SessionFile:
    """
    Read a pi session file, ignoring lines that do not parse (a torn last
    line after a crash).

    This reads the file synchronously: call it from a thread for large files.

    @raise FileNotFoundError: pi has not written the file yet (it does so
        only once the session has a message).
    """
    # Never through a link: an agent's body may write its pi folder.
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
    with os.fdopen(fd, "rb") as f:
        return parseSession(f.read())


@frozen
class BranchResult:
    """
    The outcome of L{branchSession}.

    @ivar path: the new session file.
    @ivar selectedText: for a fork, the text of the user message forked
        before (as the person wrote it); C{None} for a clone.
    """

    path: Path
    selectedText: str | None


def _seconds(now: datetime) -> float:
    """
    C{now} as seconds since the epoch; a naive C{now} is taken as UTC.
    """
    if now.tzinfo is None:
        now = now.replace(tzinfo=timezone.utc)
    return now.timestamp()


def _line(record: JSONObject) -> bytes:
    try:
        text = json.dumps(record, ensure_ascii=False, separators=(",", ":"))
        return text.encode("utf-8") + b"\n"
    except UnicodeEncodeError:
        # A lone surrogate cannot be UTF-8; escaped JSON reads the same.
        return json.dumps(record, separators=(",", ":")).encode("ascii") + b"\n"


def _writeAtomically(path: Path, data: bytes) -> None:
    temporary = path.with_name(f".{path.name}.tmp")
    try:
        with open(temporary, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


def branchSession(
    source: Path,
    destDir: Path,
    *,
    entryId: str | None,
    newSessionId: str,
    now: datetime,
    cwd: str | None = None,
) -> BranchResult:
    """
    Fork or clone a session by copying its file, as pi's RPC C{fork} and
    C{clone} do.

    A clone (C{entryId} C{None}) copies the active branch up to its leaf. A
    fork copies it up to the parent of user message C{entryId}. Label entries
    are dropped and C{parentId}s rechained; ids and timestamps are kept. The
    new file, C{destDir/<timestamp>_<newSessionId>.jsonl}, is written
    atomically and pi resumes it with C{--session}.

    This does file I/O synchronously: call it from a thread.

    @raise NothingToFork: C{entryId} is not a user message on the active
        branch.
    @raise FileExistsError: the destination file exists already.
    """
    source = Path(source)
    session = readSession(source)
    branch, selectedText = _cut(session.activeBranch(), entryId)
    path = _newFile(
        Path(destDir), newSessionId, now,
        {"cwd": cwd if cwd is not None else session.header.get("cwd"),
         "parentSession": str(source)},
        _rechained(branch),
    )
    return BranchResult(path=path, selectedText=selectedText)


def newSessionFile(destDir: Path, *, sessionId: str, now: datetime, cwd: Path) -> Path:
    """
    A new, empty session for pi to be switched to (C{switch_session}):
    only its header, named and written as pi would name it, whose C{cwd}
    pi adopts (its tools and system prompt follow it).

    @raise FileExistsError: the file exists already.
    """
    return _newFile(destDir, sessionId, now, {"cwd": str(cwd)}, [])


def _newFile(
    destDir: Path, sessionId: str, now: datetime, fields: JSONObject, lines: list[bytes]
) -> Path:
    """
    Write C{destDir/<timestamp>_<sessionId>.jsonl} atomically: a header
    with C{fields}, then C{lines}.
    """
    timestamp = isoTimestamp(_seconds(now))
    header: JSONObject = {
        "type": "session",
        "version": 3,
        "id": sessionId,
        "timestamp": timestamp,
        **fields,
    }
    name = timestamp.replace(":", "-").replace(".", "-") + f"_{sessionId}.jsonl"
    destDir.mkdir(parents=True, exist_ok=True)
    path = destDir / name
    if path.exists():
        raise FileExistsError(str(path))
    _writeAtomically(path, b"".join([_line(header), *lines]))
    return path


def hasConversation(path: Path) -> bool:
    """
    Does the session file at C{path} hold anything beyond its header (a
    file the host wrote for a spare's hand-off may hold only that)?
    """
    with open(path, "rb") as f:
        f.readline()
        return f.readline().strip() != b""


def _cut(branch: list[Entry], entryId: str | None) -> tuple[list[Entry], str | None]:
    """
    Where a branch ends: a clone keeps the whole active branch; a fork ends
    before the user message C{entryId}, whose text it also returns.

    @raise NothingToFork: C{entryId} is not a user message on C{branch}.
    """
    if entryId is None:
        return branch, None
    for index, entry in enumerate(branch):
        message = entry.message
        if entry.id == entryId and message is not None and message.role == "user":
            return branch[:index], message.text
    raise NothingToFork(entryId)


def _rechained(branch: list[Entry]) -> list[bytes]:
    """
    The lines of C{branch} in a new file: each record as pi wrote it, but
    for its C{parentId} (the entry kept before it: labels are dropped).
    """
    lines = []
    parentId: str | None = None
    for entry in branch:
        if entry.type == "label":
            continue
        copied = dict(entry.record)
        copied["parentId"] = parentId
        parentId = entry.id
        lines.append(_line(copied))
    return lines
