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
from typing import Iterable, Optional, TypeVar

from attrs import evolve, frozen
from twisted.internet.interfaces import IReactorTime

from vehicle.protocol import JSON, JSONObject, fromJSON, loads, omitted, toObject

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


def checkId(value: object, what: str) -> str:
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


def appendLine(path: Path, record: JSONObject) -> None:
    """
    Append one JSON line to C{path} and fsync it.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    line = json.dumps(record, separators=(",", ":"), sort_keys=True) + "\n"
    with open(path, "ab") as f:
        f.write(line.encode("utf-8"))
        f.flush()
        os.fsync(f.fileno())


def _readLines(path: Path) -> list[JSONObject]:
    try:
        text = path.read_text("utf-8")
    except FileNotFoundError:
        return []
    out = []
    for line in text.splitlines():
        if line.strip():
            try:
                record = loads(line)
            except ValueError:
                continue  # a torn last line
            if isinstance(record, dict):
                out.append(record)
    return out


# A record's fields are its file's keys in their order there (the files are
# written with sorted keys), so that what a tool answers of a stored record
# lists them as the file does.


@frozen(kw_only=True)
class Folder:
    """
    A folder of a graph (C{folders/<id>.json}).
    """

    id: str
    name: str
    order: float | None = omitted()
    parentId: str | None
    section: str


@frozen(kw_only=True)
class Document:
    """
    A document of a graph (C{documents/<id>.json}); in the Trash when
    C{trashed}.
    """

    content: str
    format: str
    id: str
    order: float | None = omitted()
    parentId: str | None
    revision: int
    title: str
    trashed: bool
    updatedAt: str

    def summary(self) -> JSONObject:
        """
        The document as the tools list it: all but its content.
        """
        out = toObject(self)
        del out["content"]
        return out


@frozen(kw_only=True)
class Wire:
    """
    A wire between two documents of a graph (a line of C{wires.jsonl}).
    """

    id: str
    sourceDocumentId: str
    targetDocumentId: str
    predicate: str
    createdAt: str


@frozen(kw_only=True)
class Audited:
    """
    What a write is audited by: the document or folder it touched.
    """

    documentId: str | None = omitted()
    folderId: str | None = omitted()


@frozen(kw_only=True)
class AuditRecord:
    """
    A line of gardend's audit log (C{audit.jsonl}): one write, by whom,
    and through which service.
    """

    at: str
    tool: str
    graphId: str
    actor: str
    documentId: str | None = omitted()
    folderId: str | None = omitted()
    via: str | None = omitted()


_Record = TypeVar("_Record", Folder, Document)


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

    def _load(self, path: Path, kind: type[_Record]) -> Optional[_Record]:
        try:
            data: JSON = loads(path.read_text("utf-8"))
        except FileNotFoundError:
            return None
        return fromJSON(data, kind)

    def _save(self, path: Path, record: Folder | Document) -> None:
        writeAtomically(
            path, json.dumps(toObject(record), indent=2, sort_keys=True).encode("utf-8")
        )

    def _all(self, graphId: str, kind: type[_Record]) -> list[_Record]:
        directory = self._graph(graphId) / _PLACES[kind]
        if not directory.is_dir():
            return []
        out = []
        for path in sorted(directory.glob("*.json")):
            record = self._load(path, kind)
            if record is not None:
                out.append(record)
        return out

    def _documentPath(self, graphId: str, documentId: str) -> Path:
        return self._graph(graphId) / "documents" / (checkId(documentId, "documentId") + ".json")

    def _folderPath(self, graphId: str, folderId: str) -> Path:
        return self._graph(graphId) / "folders" / (checkId(folderId, "folderId") + ".json")

    # reading

    def document(self, graphId: str, documentId: str) -> Optional[Document]:
        """
        The stored document, or L{None}.
        """
        return self._load(self._documentPath(graphId, documentId), Document)

    def folder(self, graphId: str, folderId: str) -> Optional[Folder]:
        """
        The stored folder, or L{None}.
        """
        return self._load(self._folderPath(graphId, folderId), Folder)

    def documents(self, graphId: str, includeTrashed: bool = False) -> list[Document]:
        """
        Every document of the graph, by id.
        """
        return [
            d for d in self._all(graphId, Document) if includeTrashed or not d.trashed
        ]

    def folders(self, graphId: str) -> list[Folder]:
        """
        Every folder of the graph, by id.
        """
        return self._all(graphId, Folder)

    def wires(self, graphId: str) -> list[Wire]:
        """
        Every wire of the graph, oldest first.
        """
        return [fromJSON(line, Wire) for line in _readLines(self._graph(graphId) / "wires.jsonl")]

    def audit(self) -> list[JSONObject]:
        """
        The audit log, oldest first, as its lines are.
        """
        return _readLines(self.root / "audit.jsonl")

    def requireDocument(self, graphId: str, documentId: str) -> Document:
        """
        The document, or L{ToolError} C{not_found}.
        """
        document = self.document(graphId, documentId)
        if document is None:
            raise ToolError(
                "not_found", f"no document {documentId!r} in graph {graphId!r}"
            )
        return document

    # writing

    def appendAudit(
        self, tool: str, graphId: str, actor: str, audited: Audited, via: str | None
    ) -> None:
        """
        Append one record to the audit log, stamped with C{at}.
        """
        record = AuditRecord(
            at=self._now(), tool=tool, graphId=graphId, actor=actor,
            documentId=audited.documentId, folderId=audited.folderId, via=via,
        )
        appendLine(self.root / "audit.jsonl", toObject(record))

    def _checkParent(self, graphId: str, parentId: Optional[str]) -> Optional[str]:
        if parentId is None:
            return None
        if self.folder(graphId, checkId(parentId, "parentId")) is None:
            raise ToolError("not_found", f"no folder {parentId!r} in graph {graphId!r}")
        return parentId

    def createFolder(
        self,
        graphId: str,
        name: str,
        folderId: Optional[str] = None,
        parentId: Optional[str] = None,
        section: str = "documents",
        order: Optional[float] = None,
    ) -> Folder:
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
        record = Folder(
            id=folderId,
            name=name,
            parentId=self._checkParent(graphId, parentId),
            section=section,
            order=order,
        )
        self._save(self._folderPath(graphId, folderId), record)
        return record

    def createDocument(
        self,
        graphId: str,
        title: str,
        documentId: Optional[str] = None,
        parentId: Optional[str] = None,
        order: Optional[float] = None,
    ) -> Document:
        """
        Make an empty markdown document at revision 1; C{already_exists} when
        C{documentId} is taken (in the Trash too).
        """
        documentId = checkId(documentId or "doc-" + uuid.uuid4().hex[:12], "documentId")
        if self.document(graphId, documentId) is not None:
            raise ToolError("already_exists", f"document {documentId!r} already exists")
        record = Document(
            id=documentId,
            title=title,
            parentId=self._checkParent(graphId, parentId),
            content="",
            format="markdown",
            revision=1,
            updatedAt=self._now(),
            trashed=False,
            order=order,
        )
        self._saveDocument(graphId, record)
        return record

    def _saveDocument(self, graphId: str, record: Document) -> None:
        self._save(self._documentPath(graphId, record.id), record)

    def writeDocument(
        self,
        graphId: str,
        documentId: str,
        content: str,
        format: str = "markdown",
        title: Optional[str] = None,
        expectedRevision: Optional[int] = None,
    ) -> Document:
        """
        Replace a document's content and bump its revision; a trashed
        document takes writes too.
        """
        record = self.requireDocument(graphId, documentId)
        if expectedRevision is not None and expectedRevision != record.revision:
            raise ToolError(
                "revision_conflict",
                f"document {documentId!r} is at revision {record.revision}, not {expectedRevision}",
            )
        record = evolve(
            record,
            content=content,
            format=format,
            title=record.title if title is None else title,
            revision=record.revision + 1,
            updatedAt=self._now(),
        )
        self._saveDocument(graphId, record)
        return record

    def rename(
        self, graphId: str, entityType: str, entityId: Optional[str], newName: str
    ) -> Document | Folder:
        """
        Retitle a document or rename a folder.
        """
        if entityType == "document":
            document = evolve(
                self.requireDocument(graphId, checkId(entityId, "documentId")),
                title=newName,
                updatedAt=self._now(),
            )
            document = evolve(document, revision=document.revision + 1)
            self._saveDocument(graphId, document)
            return document
        if entityType == "folder":
            folder = self.folder(graphId, checkId(entityId, "entity_id"))
            if folder is None:
                raise ToolError(
                    "not_found", f"no folder {entityId!r} in graph {graphId!r}"
                )
            folder = evolve(folder, name=newName)
            self._save(self._folderPath(graphId, folder.id), folder)
            return folder
        if entityType == "graph":
            raise ToolError("unsupported", "the stand-in does not rename graphs")
        raise ToolError(
            "invalid_argument", "entity_type must be graph, document or folder"
        )

    def createWires(
        self, graphId: str, wires: Iterable[tuple[str, str, str]]
    ) -> list[Wire]:
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
                Wire(
                    id="wire-" + uuid.uuid4().hex[:12],
                    sourceDocumentId=source,
                    targetDocumentId=target,
                    predicate=predicate,
                    createdAt=self._now(),
                )
            )
        for record in records:
            appendLine(self._graph(graphId) / "wires.jsonl", toObject(record))
        return records

    def trash(self, graphId: str, documentId: str) -> None:
        """
        Put a document in the Trash, as a person would in gardend's UI.
        """
        self._saveDocument(
            graphId, evolve(self.requireDocument(graphId, documentId), trashed=True)
        )


#: The folder of each kind of record in a graph's directory.
_PLACES: dict[type, str] = {Folder: "folders", Document: "documents"}
