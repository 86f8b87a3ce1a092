# -*- test-case-name: tests.unit.test_gardend -*-
"""
gardend's document tools as the stand-in offers them: their catalog (name,
description, scope, arguments) and what each does over the L{FolderStore}.
Who may call which, on which graph, is the endpoint's
(L{vehicle_local.standin._mcp.MCPEndpoint}).
"""

from __future__ import annotations

import json
from typing import Callable, Mapping, Optional, Union

from attrs import define, frozen

from vehicle.protocol import JSON, JSONObject, toObject
from vehicle_local.standin._store import (
    Audited,
    Document,
    Folder,
    FolderStore,
    ToolError,
    checkId,
)


READ = "documents.read"
WRITE = "documents.write"


def _s(description: str, **extra: JSON) -> JSONObject:
    return {"type": "string", "description": description, **extra}


def _n(description: str) -> JSONObject:
    return {"type": "number", "description": description}


_GRAPH = _s("The graph (bound by a delegation token; may be omitted then).")


# Reading a tool's arguments (JSON, as the caller sent them): each tool's
# once, into its value, before it runs.


def _text(args: JSONObject, *names: str) -> Optional[str]:
    """
    The first of C{names} that C{args} gives (a string), or L{None}.
    """
    for name in names:
        value = args.get(name)
        if value is not None:
            if not isinstance(value, str):
                raise ToolError("invalid_argument", f"{name} must be a string")
            return value
    return None


def _required(args: JSONObject, *names: str) -> str:
    """
    The first of C{names} that C{args} gives (a string); one is required.
    """
    value = _text(args, *names)
    if value is None:
        raise ToolError("invalid_argument", f"{names[0]} is required")
    return value


def _number(args: JSONObject, name: str) -> Optional[int]:
    value = args.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ToolError("invalid_argument", f"{name} must be a number")
    return int(value)


#: What a tool answers: its envelope, and what its write is audited by.
ToolResult = tuple[JSONObject, Audited]


@frozen(kw_only=True)
class ReadDocument:
    """
    C{read_document}'s arguments.
    """

    documentId: str
    format: str
    offset: int
    maxChars: Optional[int]

    @classmethod
    def parse(cls, args: JSONObject) -> ReadDocument:
        return cls(
            documentId=_required(args, "documentId", "document_id"),
            format=_text(args, "format") or "markdown",
            offset=_number(args, "offset") or 0,
            maxChars=_number(args, "maxChars"),
        )


@frozen(kw_only=True)
class ListDocuments:
    """
    C{list_documents}'s arguments.
    """

    cursor: Optional[str]
    limit: int

    @classmethod
    def parse(cls, args: JSONObject) -> ListDocuments:
        return cls(cursor=_text(args, "cursor"), limit=_number(args, "limit") or 100)


@frozen(kw_only=True)
class GetWorkspace:
    """
    C{get_workspace}'s arguments.
    """

    foldersOnly: bool
    depth: Optional[int]
    folderId: Optional[str]

    @classmethod
    def parse(cls, args: JSONObject) -> GetWorkspace:
        return cls(
            foldersOnly=bool(args.get("foldersOnly")),
            depth=_number(args, "depth"),
            folderId=_text(args, "folderId"),
        )


@frozen(kw_only=True)
class SearchDocuments:
    """
    C{search_documents}'s arguments.
    """

    query: str

    @classmethod
    def parse(cls, args: JSONObject) -> SearchDocuments:
        return cls(query=_required(args, "query"))


@frozen(kw_only=True)
class CreateFolder:
    """
    C{create_folder}'s arguments.
    """

    name: str
    folderId: Optional[str]
    parentId: Optional[str]
    section: str
    order: Optional[int]

    @classmethod
    def parse(cls, args: JSONObject) -> CreateFolder:
        return cls(
            name=_required(args, "name"),
            folderId=_text(args, "folderId"),
            parentId=_text(args, "parentId"),
            section=_text(args, "section") or "documents",
            order=_number(args, "order"),
        )


@frozen(kw_only=True)
class CreateDocument:
    """
    C{create_document}'s arguments.
    """

    title: str
    documentId: Optional[str]
    parentId: Optional[str]
    order: Optional[int]

    @classmethod
    def parse(cls, args: JSONObject) -> CreateDocument:
        return cls(
            title=_required(args, "title"),
            documentId=_text(args, "documentId"),
            parentId=_text(args, "parentId"),
            order=_number(args, "order"),
        )


@frozen(kw_only=True)
class WriteDocument:
    """
    C{write_document}'s arguments.

    @ivar content: the new text, or the C{tiptapJson} given, as JSON text.
    @ivar format: the content's: C{tiptap} for C{tiptapJson}, markdown for
        C{auto}.
    """

    documentId: str
    content: str
    format: str
    title: Optional[str]
    expectedRevision: Optional[int]

    @classmethod
    def parse(cls, args: JSONObject) -> WriteDocument:
        documentId = _required(args, "documentId", "document_id")
        tiptap = args.get("tiptapJson")
        if (args.get("content") is not None) == (tiptap is not None):
            raise ToolError(
                "invalid_argument", "give exactly one of content and tiptapJson"
            )
        form = _text(args, "format") or "auto"
        if form not in ("auto", "plain", "markdown", "html", "xml"):
            raise ToolError(
                "invalid_argument", "format must be auto, plain, markdown, html or xml"
            )
        if tiptap is not None:
            content, form = json.dumps(tiptap), "tiptap"
        else:
            content = _required(args, "content")
            form = "markdown" if form == "auto" else form
        return cls(
            documentId=documentId,
            content=content,
            format=form,
            title=_text(args, "title"),
            expectedRevision=_number(args, "expectedRevision"),
        )


@frozen(kw_only=True)
class Rename:
    """
    C{rename}'s arguments.
    """

    entityType: str
    entityId: Optional[str]
    newName: str

    @classmethod
    def parse(cls, args: JSONObject) -> Rename:
        entityType = _required(args, "entity_type", "entityType")
        entityId = _text(args, "entity_id", "entityId")
        if entityId is None and entityType != "graph":
            raise ToolError("invalid_argument", "entity_id is required")
        return cls(
            entityType=entityType,
            entityId=entityId,
            newName=_required(args, "new_name", "newName"),
        )


@frozen(kw_only=True)
class CreateWires:
    """
    C{create_wires}' arguments.

    @ivar wires: (source, target, predicate) of each wire, one at least.
    """

    wires: tuple[tuple[str, str, str], ...]

    @classmethod
    def parse(cls, args: JSONObject) -> CreateWires:
        raw = args.get("wires")
        given: list[JSON] = [args] if raw is None else raw if isinstance(raw, list) else []
        objects = [w for w in given if isinstance(w, dict)]
        if not objects or len(objects) != len(given):
            raise ToolError(
                "invalid_argument", "wires must be a non-empty list of objects"
            )
        return cls(wires=tuple(
            (
                _required(w, "sourceDocumentId", "source_document_id"),
                _required(w, "targetDocumentId", "target_document_id"),
                _required(w, "predicate"),
            )
            for w in objects
        ))


#: A tool's arguments, read.
ToolCall = Union[
    ReadDocument, ListDocuments, GetWorkspace, SearchDocuments, CreateFolder, CreateDocument,
    WriteDocument, Rename, CreateWires,
]


@frozen(kw_only=True)
class ToolSpec:
    """
    One tool of the catalog: its scope and input schema.

    @ivar graphArgument: the casing this tool documents for its graph.
    """

    name: str
    description: str
    scope: str
    properties: Mapping[str, JSON]
    arguments: Callable[[JSONObject], ToolCall]
    required: tuple[str, ...] = ()
    graphArgument: str = "graphId"

    def listing(self, bound: bool, reads: tuple[str, ...] = ()) -> JSONObject:
        """
        The C{tools/list} entry; with C{bound} (a delegation token) the graph
        argument is not offered, since the token names the graph, unless the
        token also C{reads} other graphs: then it is offered, optional, as
        one of the graphs the token reaches.
        """
        properties: JSONObject = dict(self.properties)
        required: list[JSON] = list(self.required)
        if bound:
            properties.pop(self.graphArgument, None)
            required = [r for r in required if r != self.graphArgument]
            if reads and self.scope == READ:
                properties[self.graphArgument] = _s(
                    "The graph to read (default: the conversation's own).",
                    enum=list(reads),
                )
        schema: JSONObject = {"type": "object", "properties": properties}
        if required:
            schema["required"] = required
        return {
            "name": self.name,
            "description": self.description,
            "inputSchema": schema,
            "_meta": {"sophia": {"local": {"requiredScopes": [self.scope]}}},
        }


CATALOG: tuple[ToolSpec, ...] = (
    ToolSpec(
        name="read_document",
        arguments=ReadDocument.parse,
        description="Read one document.",
        scope=READ,
        properties={
            "graphId": _GRAPH,
            "documentId": _s("The document."),
            "format": _s(
                "How to render it.", enum=["markdown", "xml", "json", "ids_only"]
            ),
            "offset": _n("First character to return."),
            "maxChars": _n("Most characters to return."),
        },
        required=("graphId", "documentId"),
    ),
    ToolSpec(
        name="list_documents",
        arguments=ListDocuments.parse,
        description="List the graph's documents (not those in the Trash).",
        scope=READ,
        properties={
            "graphId": _GRAPH,
            "cursor": _s("From a previous page."),
            "limit": _n("Page size."),
        },
        required=("graphId",),
    ),
    ToolSpec(
        name="get_workspace",
        arguments=GetWorkspace.parse,
        description="The graph's folder tree and its documents.",
        scope=READ,
        properties={
            "graphId": _GRAPH,
            "depth": _n("How deep to descend."),
            "folderId": _s("Start at this folder."),
            "foldersOnly": {"type": "boolean"},
        },
        required=("graphId",),
    ),
    ToolSpec(
        name="search_documents",
        arguments=SearchDocuments.parse,
        description="Documents whose title or text contains the query.",
        scope=READ,
        properties={"graphId": _GRAPH, "query": _s("Text to find.")},
        required=("query",),
    ),
    ToolSpec(
        name="create_folder",
        arguments=CreateFolder.parse,
        description="Make a folder.",
        scope=WRITE,
        properties={
            "graphId": _GRAPH,
            "name": _s("Its name."),
            "folderId": _s("Its id (generated when absent)."),
            "parentId": _s("The folder it sits in."),
            "section": _s("Where it shows.", enum=["documents", "artifacts"]),
            "order": _n("Its place among its siblings."),
        },
        required=("graphId", "name"),
    ),
    ToolSpec(
        name="create_document",
        arguments=CreateDocument.parse,
        description="Make an empty document.",
        scope=WRITE,
        properties={
            "graphId": _GRAPH,
            "title": _s("Its title."),
            "documentId": _s("Its id (generated when absent)."),
            "parentId": _s("The folder it sits in."),
            "order": _n("Its place among its siblings."),
        },
        required=("graphId", "title"),
    ),
    ToolSpec(
        name="write_document",
        arguments=WriteDocument.parse,
        description="Replace a document's content.",
        scope=WRITE,
        properties={
            "graphId": _GRAPH,
            "graph_id": _s("Alias of graphId."),
            "documentId": _s("The document."),
            "document_id": _s("Alias of documentId."),
            "content": _s("The new text (or give tiptapJson)."),
            "tiptapJson": {"type": "object"},
            "format": _s(
                "The content's format.",
                enum=["auto", "plain", "markdown", "html", "xml"],
            ),
            "title": _s("A new title."),
            "expectedRevision": _n("Refuse unless the document is at this revision."),
        },
    ),
    ToolSpec(
        name="rename",
        arguments=Rename.parse,
        description="Rename a document or folder.",
        scope=WRITE,
        properties={
            "graph_id": _GRAPH,
            "entity_type": _s("What to rename.", enum=["graph", "document", "folder"]),
            "entity_id": _s("Its id."),
            "new_name": _s("The new name."),
        },
        required=("graph_id", "entity_type", "new_name"),
        graphArgument="graph_id",
    ),
    ToolSpec(
        name="create_wires",
        arguments=CreateWires.parse,
        description="Wire one document to another.",
        scope=WRITE,
        properties={
            "graphId": _GRAPH,
            "sourceDocumentId": _s("The wire's source."),
            "targetDocumentId": _s("The wire's target."),
            "predicate": _s("The relation, e.g. divergesFrom."),
            "wires": {"type": "array", "items": {"type": "object"}},
        },
    ),
)


TOOLS: Mapping[str, ToolSpec] = {tool.name: tool for tool in CATALOG}


@define
class DocumentTools:
    """
    The tools over one store; each (C{_tool_<name>}) takes its arguments
    read (its L{ToolCall}) and returns C{(envelope, audited)}.  The
    stand-in's endpoint is a L{DocumentTools} with the protocol in front,
    so that a variant endpoint (the tests' second stand-in) overrides a
    single tool as a method.
    """

    store: FolderStore

    def run(self, name: str, graphId: str, args: JSONObject) -> ToolResult:
        """
        Run the tool C{name} (one of L{TOOLS}) on C{graphId}.

        @raise ToolError: the tool's refusal (its arguments' first).
        """
        call = TOOLS[name].arguments(args)
        if isinstance(call, ReadDocument):
            return self._tool_read_document(graphId, call)
        if isinstance(call, ListDocuments):
            return self._tool_list_documents(graphId, call)
        if isinstance(call, GetWorkspace):
            return self._tool_get_workspace(graphId, call)
        if isinstance(call, SearchDocuments):
            return self._tool_search_documents(graphId, call)
        if isinstance(call, CreateFolder):
            return self._tool_create_folder(graphId, call)
        if isinstance(call, CreateDocument):
            return self._tool_create_document(graphId, call)
        if isinstance(call, WriteDocument):
            return self._tool_write_document(graphId, call)
        if isinstance(call, Rename):
            return self._tool_rename(graphId, call)
        return self._tool_create_wires(graphId, call)

    def _tool_read_document(self, graphId: str, args: ReadDocument) -> ToolResult:
        document = self.store.requireDocument(graphId, args.documentId)
        if args.format == "ids_only":
            return {"ok": True, "document": {"id": document.id}}, Audited()
        if args.format not in ("markdown", "xml", "json"):
            raise ToolError(
                "invalid_argument", "format must be markdown, xml, json or ids_only"
            )
        content, offset = document.content, args.offset
        sliced = (
            content[offset:]
            if args.maxChars is None
            else content[offset : offset + args.maxChars]
        )
        out = document.summary()
        out["content"] = sliced
        out["totalChars"] = len(content)
        return {"ok": True, "document": out}, Audited()

    def _tool_list_documents(self, graphId: str, args: ListDocuments) -> ToolResult:
        documents: list[JSON] = [d.summary() for d in self.store.documents(graphId)]
        cursor, limit = args.cursor, args.limit
        start = int(cursor) if cursor and cursor.isdigit() else 0
        page = documents[start : start + limit]
        nextCursor = str(start + limit) if start + limit < len(documents) else None
        return {"ok": True, "documents": page, "nextCursor": nextCursor}, Audited()

    def _tool_get_workspace(self, graphId: str, args: GetWorkspace) -> ToolResult:
        folders = self.store.folders(graphId)
        documents = [] if args.foldersOnly else self.store.documents(graphId)
        depth, top = args.depth, args.folderId
        if (
            top is not None
            and self.store.folder(graphId, checkId(top, "folderId")) is None
        ):
            raise ToolError("not_found", f"no folder {top!r} in graph {graphId!r}")

        def inside(parentId: Optional[str]) -> list[JSON]:
            return [d.summary() for d in documents if d.parentId == parentId]

        def node(folder: Folder, level: int) -> JSONObject:
            out = toObject(folder)
            out["documents"] = inside(folder.id)
            if depth is None or level < depth:
                out["folders"] = [
                    node(f, level + 1) for f in folders if f.parentId == folder.id
                ]
            return out

        return {
            "ok": True,
            "graphId": graphId,
            "folders": [node(f, 1) for f in folders if f.parentId == top],
            "documents": inside(top),
        }, Audited()

    def _tool_search_documents(self, graphId: str, args: SearchDocuments) -> ToolResult:
        query = args.query
        needle = query.lower()
        results: list[JSON] = []
        for document in self.store.documents(graphId):
            content = document.content
            at = content.lower().find(needle)
            if at < 0 and needle not in document.title.lower():
                continue
            snippet = content[max(0, at - 40) : at + len(query) + 40] if at >= 0 else ""
            results.append({"id": document.id, "title": document.title, "snippet": snippet})
        return {"ok": True, "results": results}, Audited()

    def _tool_create_folder(self, graphId: str, args: CreateFolder) -> ToolResult:
        folder = self.store.createFolder(
            graphId,
            name=args.name,
            folderId=args.folderId,
            parentId=args.parentId,
            section=args.section,
            order=args.order,
        )
        return {"ok": True, "folder": toObject(folder)}, Audited(folderId=folder.id)

    def _tool_create_document(self, graphId: str, args: CreateDocument) -> ToolResult:
        document = self.store.createDocument(
            graphId,
            title=args.title,
            documentId=args.documentId,
            parentId=args.parentId,
            order=args.order,
        )
        return {"ok": True, "document": document.summary()}, Audited(documentId=document.id)

    def _tool_write_document(self, graphId: str, args: WriteDocument) -> ToolResult:
        document = self.store.writeDocument(
            graphId,
            args.documentId,
            args.content,
            format=args.format,
            title=args.title,
            expectedRevision=args.expectedRevision,
        )
        return {"ok": True, "document": document.summary()}, Audited(documentId=args.documentId)

    def _tool_rename(self, graphId: str, args: Rename) -> ToolResult:
        renamed = self.store.rename(graphId, args.entityType, args.entityId, args.newName)
        if isinstance(renamed, Document):
            return {"ok": True, "document": renamed.summary()}, Audited(documentId=renamed.id)
        return {"ok": True, "folder": toObject(renamed)}, Audited(folderId=renamed.id)

    def _tool_create_wires(self, graphId: str, args: CreateWires) -> ToolResult:
        wires = self.store.createWires(graphId, args.wires)
        return (
            {"ok": True, "wires": [toObject(w) for w in wires]},
            Audited(documentId=args.wires[0][0]),
        )
