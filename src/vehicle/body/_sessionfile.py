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
from typing import Any, Iterable, Mapping, Sequence

from attrs import field, frozen

from vehicle.errors import VehicleError
from vehicle.session import isoTimestamp


#: The cap on a text field the host shows (transcript items, events), in
#: UTF-8 bytes.
MAX_TEXT_BYTES = 16384

_TRANSCRIPT_ROLES = frozenset({"user", "assistant", "toolResult"})


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


def messageText(message: Mapping[str, Any]) -> str:
    """
    The visible text of a pi message: its C{text} parts joined by newlines.

    Thinking, images and tool calls are left out; C{content} may also be a
    plain string (user messages).
    """
    content = message.get("content")
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    return "\n".join(
        part["text"]
        for part in content
        if isinstance(part, dict)
        and part.get("type") == "text"
        and isinstance(part.get("text"), str)
    )


def messageToolCalls(message: Mapping[str, Any]) -> list[dict[str, Any]]:
    """
    The tool calls of an assistant message as C{[{"id", "name"}]}, without
    their arguments.
    """
    content = message.get("content")
    if not isinstance(content, list):
        return []
    return [
        {"id": part.get("id"), "name": part.get("name")}
        for part in content
        if isinstance(part, dict) and part.get("type") == "toolCall"
    ]


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


@frozen
class SessionFile:
    """
    One pi session file as read.

    @ivar header: the C{{"type": "session", ...}} first line, or an empty
        mapping when the file has none.
    @ivar entries: every other parsed record, in file order.
    @ivar skippedLines: lines that were not JSON objects (a torn last line,
        for one).
    """

    header: Mapping[str, Any]
    entries: Sequence[dict[str, Any]]
    skippedLines: int = 0
    _byId: Mapping[str, dict[str, Any]] = field(init=False, eq=False, repr=False)

    def __attrs_post_init__(self) -> None:
        byId = {
            e["id"]: e for e in self.entries if isinstance(e.get("id"), str)
        }
        object.__setattr__(self, "_byId", byId)

    def activeBranch(self) -> list[dict[str, Any]]:
        """
        The entries from the root to the leaf, the leaf being the last entry
        (with an id) in file order, as pi decides when it loads the file.
        """
        leaf = None
        for entry in reversed(self.entries):
            if isinstance(entry.get("id"), str):
                leaf = entry
                break
        chain: list[dict[str, Any]] = []
        seen: set[str] = set()
        while leaf is not None and leaf["id"] not in seen:
            seen.add(leaf["id"])
            chain.append(leaf)
            parentId = leaf.get("parentId")
            leaf = self._byId.get(parentId) if isinstance(parentId, str) else None
        chain.reverse()
        return chain

    def _messages(self) -> Iterable[tuple[dict[str, Any], dict[str, Any]]]:
        for entry in self.activeBranch():
            message = entry.get("message")
            if entry.get("type") == "message" and isinstance(message, dict):
                yield entry, message

    def transcript(self, maxText: int = MAX_TEXT_BYTES) -> list[dict[str, Any]]:
        """
        The conversation on the active branch, as the host shows it.

        @param maxText: the cap on each item's C{text}, in UTF-8 bytes.
        @return: items C{{"entryId", "role", "text", "timestamp"}} plus
            C{"toolCalls": [{"id", "name"}]} for an assistant message,
            C{"toolName"} and C{"isError"} for a tool result, and
            C{"truncated": True} when the text was cut. System messages and
            entries that are not messages are left out.
        """
        items = []
        for entry, message in self._messages():
            role = message.get("role")
            if role not in _TRANSCRIPT_ROLES:
                continue
            text, truncated = capText(messageText(message), maxText)
            item: dict[str, Any] = {
                "entryId": entry["id"],
                "role": role,
                "text": text,
            }
            if truncated:
                item["truncated"] = True
            if role == "assistant":
                item["toolCalls"] = messageToolCalls(message)
            elif role == "toolResult":
                item["toolName"] = message.get("toolName")
                item["isError"] = bool(message.get("isError", False))
            if "timestamp" in entry:
                item["timestamp"] = entry["timestamp"]
            items.append(item)
        return items

    def forkPoints(self) -> list[dict[str, str]]:
        """
        The user messages on the active branch, C{[{"entryId", "text"}]}, as
        pi's C{get_fork_messages} lists them (full text).
        """
        return [
            {"entryId": entry["id"], "text": messageText(message)}
            for entry, message in self._messages()
            if message.get("role") == "user"
        ]

    def firstUserText(self) -> str | None:
        """
        The text of the first user message on the active branch, if any.
        """
        for _, message in self._messages():
            if message.get("role") == "user":
                return messageText(message)
        return None


def parseSession(data: bytes) -> SessionFile:
    """
    Parse the bytes of a session file; see L{readSession}.
    """
    header: Mapping[str, Any] = {}
    entries: list[dict[str, Any]] = []
    skipped = 0
    first = True
    # LF only: raw U+2028/U+2029 occur inside JSON strings.
    for raw in data.split(b"\n"):
        if not raw.strip():
            continue
        try:
            record = json.loads(raw)
        except ValueError:
            skipped += 1
            continue
        if not isinstance(record, dict):
            skipped += 1
            continue
        if first and record.get("type") == "session":
            header = record
        else:
            entries.append(record)
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


def _line(record: Mapping[str, Any]) -> bytes:
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
    destDir = Path(destDir)
    session = readSession(source)
    branch = session.activeBranch()
    selectedText = None
    if entryId is not None:
        for index, entry in enumerate(branch):
            message = entry.get("message")
            if (
                entry.get("id") == entryId
                and entry.get("type") == "message"
                and isinstance(message, dict)
                and message.get("role") == "user"
            ):
                selectedText = messageText(message)
                branch = branch[:index]
                break
        else:
            raise NothingToFork(entryId)

    timestamp = isoTimestamp(_seconds(now))
    header = {
        "type": "session",
        "version": 3,
        "id": newSessionId,
        "timestamp": timestamp,
        "cwd": cwd if cwd is not None else session.header.get("cwd"),
        "parentSession": str(source),
    }
    lines = [_line(header)]
    parentId = None
    for entry in branch:
        if entry.get("type") == "label":
            continue
        copied = dict(entry)
        copied["parentId"] = parentId
        parentId = copied["id"]
        lines.append(_line(copied))

    name = timestamp.replace(":", "-").replace(".", "-") + f"_{newSessionId}.jsonl"
    destDir.mkdir(parents=True, exist_ok=True)
    path = destDir / name
    if path.exists():
        raise FileExistsError(str(path))
    _writeAtomically(path, b"".join(lines))
    return BranchResult(path=path, selectedText=selectedText)
