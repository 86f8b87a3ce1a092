# -*- test-case-name: tests.unit.test_gardend -*-
"""
The stand-in's workspace: folders, documents and wires of each graph as JSON
files under a root directory, written atomically, plus gardend's audit log.

Layout: C{<root>/graphs/<graph>/folders/<id>.json},
C{<root>/graphs/<graph>/documents/<id>.json},
C{<root>/graphs/<graph>/wires.jsonl} and C{<root>/audit.jsonl}.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable, Optional

from attrs import frozen
from twisted.internet.interfaces import IReactorTime

_ID = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.:-]{0,199}$")

#: The wire predicates the stand-in knows (gardend's built-ins include these).
PREDICATES = frozenset(
    {
        "divergesFrom",
        "references",
        "relatedTo",
        "derivedFrom",
        "partOf",
        "supports",
        "contradicts",
    }
)

SECTIONS = ("documents", "artifacts")


class ToolError(Exception):
    """
    A refusal with one of gardend's envelope codes (C{not_found},
    C{already_exists}, C{invalid_argument}, C{revision_conflict}, ...).
    """

    def __init__(self, code: str, message: str) -> None:
        super().__init__(code, message)
        self.code = code
        self.message = message


def checkId(value: Any, what: str) -> str:
    """
    C{value} if it is a usable id, else L{ToolError} C{invalid_argument}.
    """
    if not isinstance(value, str) or not _ID.match(value):
        raise ToolError(
            "invalid_argument",
            f"{what} must be an id of letters, digits, '_', '.', ':' or '-'",
        )
    return value


def writeAtomically(path: Path, data: bytes) -> None:
    """
    Replace C{path} with C{data}: a temporary file beside it, flushed and
    fsynced, renamed over it.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(
        dir=path.parent, prefix="." + path.name, suffix=".tmp"
    )
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temporary, path)
    except BaseException:
        try:
            os.unlink(temporary)
        except OSError:
            pass
        raise


def appendLine(path: Path, record: dict[str, Any]) -> None:
    """
    Append one JSON line to C{path} and fsync it.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    line = json.dumps(record, separators=(",", ":"), sort_keys=True) + "\n"
    with open(path, "ab") as f:
        f.write(line.encode("utf-8"))
        f.flush()
        os.fsync(f.fileno())


def _readLines(path: Path) -> list[dict[str, Any]]:
    try:
        text = path.read_text("utf-8")
    except FileNotFoundError:
        return []
    out = []
    for line in text.splitlines():
        if line.strip():
            try:
                out.append(json.loads(line))
            except ValueError:
                continue  # a torn last line
    return out


@frozen(kw_only=True)
class FolderStore:
    """
    The graphs' documents, folders and wires on disk, and the audit log.
    """

    root: Path
    clock: IReactorTime

    def _now(self) -> str:
        return (
            datetime.fromtimestamp(self.clock.seconds(), timezone.utc)
            .isoformat(timespec="milliseconds")
            .replace("+00:00", "Z")
        )

    def _graph(self, graphId: str) -> Path:
        return self.root / "graphs" / checkId(graphId, "graphId")

    def _load(self, path: Path) -> Optional[dict[str, Any]]:
        try:
            return json.loads(path.read_text("utf-8"))
        except FileNotFoundError:
            return None

    def _save(self, path: Path, record: dict[str, Any]) -> None:
        writeAtomically(
            path, json.dumps(record, indent=2, sort_keys=True).encode("utf-8")
        )

    def _all(self, graphId: str, kind: str) -> list[dict[str, Any]]:
        directory = self._graph(graphId) / kind
        if not directory.is_dir():
            return []
        out = []
        for path in sorted(directory.glob("*.json")):
            record = self._load(path)
            if record is not None:
                out.append(record)
        return out

    # reading

    def document(self, graphId: str, documentId: str) -> Optional[dict[str, Any]]:
        """
        The stored document, or L{None}.
        """
        return self._load(
            self._graph(graphId)
            / "documents"
            / (checkId(documentId, "documentId") + ".json")
        )

    def folder(self, graphId: str, folderId: str) -> Optional[dict[str, Any]]:
        """
        The stored folder, or L{None}.
        """
        return self._load(
            self._graph(graphId) / "folders" / (checkId(folderId, "folderId") + ".json")
        )

    def documents(
        self, graphId: str, includeTrashed: bool = False
    ) -> list[dict[str, Any]]:
        """
        Every document of the graph, by id.
        """
        return [
            d
            for d in self._all(graphId, "documents")
            if includeTrashed or not d.get("trashed")
        ]

    def folders(self, graphId: str) -> list[dict[str, Any]]:
        """
        Every folder of the graph, by id.
        """
        return self._all(graphId, "folders")

    def wires(self, graphId: str) -> list[dict[str, Any]]:
        """
        Every wire of the graph, oldest first.
        """
        return _readLines(self._graph(graphId) / "wires.jsonl")

    def audit(self) -> list[dict[str, Any]]:
        """
        The audit log, oldest first.
        """
        return _readLines(self.root / "audit.jsonl")

    def requireDocument(self, graphId: str, documentId: Any) -> dict[str, Any]:
        """
        The document, or L{ToolError} C{not_found}.
        """
        document = self.document(graphId, checkId(documentId, "documentId"))
        if document is None:
            raise ToolError(
                "not_found", f"no document {documentId!r} in graph {graphId!r}"
            )
        return document

    # writing

    def appendAudit(self, record: dict[str, Any]) -> None:
        """
        Append one record to the audit log, stamped with C{at}.
        """
        appendLine(self.root / "audit.jsonl", {"at": self._now(), **record})

    def _checkParent(self, graphId: str, parentId: Any) -> Optional[str]:
        if parentId is None:
            return None
        if self.folder(graphId, checkId(parentId, "parentId")) is None:
            raise ToolError("not_found", f"no folder {parentId!r} in graph {graphId!r}")
        return str(parentId)

    def createFolder(
        self,
        graphId: str,
        name: str,
        folderId: Optional[str] = None,
        parentId: Optional[str] = None,
        section: str = "documents",
        order: Optional[float] = None,
    ) -> dict[str, Any]:
        """
        Make a folder; C{already_exists} when C{folderId} is taken.
        """
        folderId = checkId(folderId or "folder-" + uuid.uuid4().hex[:12], "folderId")
        if section not in SECTIONS:
            raise ToolError(
                "invalid_argument", f"section must be one of {', '.join(SECTIONS)}"
            )
        if self.folder(graphId, folderId) is not None:
            raise ToolError("already_exists", f"folder {folderId!r} already exists")
        record: dict[str, Any] = {
            "id": folderId,
            "name": name,
            "parentId": self._checkParent(graphId, parentId),
            "section": section,
        }
        if order is not None:
            record["order"] = order
        self._save(self._graph(graphId) / "folders" / (folderId + ".json"), record)
        return record

    def createDocument(
        self,
        graphId: str,
        title: str,
        documentId: Optional[str] = None,
        parentId: Optional[str] = None,
        order: Optional[float] = None,
    ) -> dict[str, Any]:
        """
        Make an empty markdown document at revision 1; C{already_exists} when
        C{documentId} is taken (in the Trash too).
        """
        documentId = checkId(documentId or "doc-" + uuid.uuid4().hex[:12], "documentId")
        if self.document(graphId, documentId) is not None:
            raise ToolError("already_exists", f"document {documentId!r} already exists")
        record: dict[str, Any] = {
            "id": documentId,
            "title": title,
            "parentId": self._checkParent(graphId, parentId),
            "content": "",
            "format": "markdown",
            "revision": 1,
            "updatedAt": self._now(),
            "trashed": False,
        }
        if order is not None:
            record["order"] = order
        self._saveDocument(graphId, record)
        return record

    def _saveDocument(self, graphId: str, record: dict[str, Any]) -> None:
        self._save(
            self._graph(graphId) / "documents" / (record["id"] + ".json"), record
        )

    def writeDocument(
        self,
        graphId: str,
        documentId: str,
        content: str,
        format: str = "markdown",
        title: Optional[str] = None,
        expectedRevision: Optional[int] = None,
    ) -> dict[str, Any]:
        """
        Replace a document's content and bump its revision; a trashed
        document takes writes too.
        """
        record = self.requireDocument(graphId, documentId)
        if expectedRevision is not None and expectedRevision != record["revision"]:
            raise ToolError(
                "revision_conflict",
                f"document {documentId!r} is at revision {record['revision']}, not {expectedRevision}",
            )
        record["content"] = content
        record["format"] = format
        if title is not None:
            record["title"] = title
        record["revision"] += 1
        record["updatedAt"] = self._now()
        self._saveDocument(graphId, record)
        return record

    def rename(
        self, graphId: str, entityType: str, entityId: Any, newName: str
    ) -> dict[str, Any]:
        """
        Retitle a document or rename a folder.
        """
        if entityType == "document":
            record = self.requireDocument(graphId, entityId)
            record["title"] = newName
            record["revision"] += 1
            record["updatedAt"] = self._now()
            self._saveDocument(graphId, record)
            return record
        if entityType == "folder":
            folder = self.folder(graphId, checkId(entityId, "entity_id"))
            if folder is None:
                raise ToolError(
                    "not_found", f"no folder {entityId!r} in graph {graphId!r}"
                )
            folder["name"] = newName
            self._save(
                self._graph(graphId) / "folders" / (folder["id"] + ".json"), folder
            )
            return folder
        if entityType == "graph":
            raise ToolError("unsupported", "the stand-in does not rename graphs")
        raise ToolError(
            "invalid_argument", "entity_type must be graph, document or folder"
        )

    def createWires(
        self, graphId: str, wires: Iterable[tuple[Any, Any, Any]]
    ) -> list[dict[str, Any]]:
        """
        Add wires between existing documents; all are checked before any is
        written.
        """
        records = []
        for source, target, predicate in wires:
            self.requireDocument(graphId, source)
            self.requireDocument(graphId, target)
            if predicate not in PREDICATES:
                raise ToolError(
                    "invalid_argument",
                    f"predicate must be one of {', '.join(sorted(PREDICATES))}",
                )
            records.append(
                {
                    "id": "wire-" + uuid.uuid4().hex[:12],
                    "sourceDocumentId": source,
                    "targetDocumentId": target,
                    "predicate": predicate,
                    "createdAt": self._now(),
                }
            )
        for record in records:
            appendLine(self._graph(graphId) / "wires.jsonl", record)
        return records

    def trash(self, graphId: str, documentId: str) -> None:
        """
        Put a document in the Trash, as a person would in gardend's UI.
        """
        record = self.requireDocument(graphId, documentId)
        record["trashed"] = True
        self._saveDocument(graphId, record)
