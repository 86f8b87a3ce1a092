# -*- test-case-name: tests.unit.test_gardend -*-
"""
gardend's document tools as the stand-in offers them: their catalog (name,
description, scope, arguments) and what each does over the L{FolderStore}.
Who may call which, on which graph, is the endpoint's
(L{vehicle_local.standin._mcp.MCPEndpoint}).
"""

from __future__ import annotations

import json
from typing import Any, Callable, Mapping, Optional

from attrs import define, frozen

from vehicle_local.standin._store import FolderStore, ToolError, checkId


READ = "documents.read"
WRITE = "documents.write"


def _s(description: str, **extra: Any) -> dict[str, Any]:
    return {"type": "string", "description": description, **extra}


def _n(description: str) -> dict[str, Any]:
    return {"type": "number", "description": description}


_GRAPH = _s("The graph (bound by a delegation token; may be omitted then).")


@frozen(kw_only=True)
class ToolSpec:
    """
    One tool of the catalog: its scope and input schema.

    @ivar graphArgument: the casing this tool documents for its graph.
    """

    name: str
    description: str
    scope: str
    properties: Mapping[str, Any]
    required: tuple[str, ...] = ()
    graphArgument: str = "graphId"

    def listing(self, bound: bool, reads: tuple[str, ...] = ()) -> dict[str, Any]:
        """
        The C{tools/list} entry; with C{bound} (a delegation token) the graph
        argument is not offered, since the token names the graph, unless the
        token also C{reads} other graphs: then it is offered, optional, as
        one of the graphs the token reaches.
        """
        properties = dict(self.properties)
        required = list(self.required)
        if bound:
            properties.pop(self.graphArgument, None)
            required = [r for r in required if r != self.graphArgument]
            if reads and self.scope == READ:
                properties[self.graphArgument] = _s(
                    "The graph to read (default: the conversation's own).",
                    enum=list(reads),
                )
        schema: dict[str, Any] = {"type": "object", "properties": properties}
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
        description="Documents whose title or text contains the query.",
        scope=READ,
        properties={"graphId": _GRAPH, "query": _s("Text to find.")},
        required=("query",),
    ),
    ToolSpec(
        name="create_folder",
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


def _text(args: Mapping[str, Any], *names: str, required: bool = True) -> Optional[str]:
    for name in names:
        value = args.get(name)
        if value is not None:
            if not isinstance(value, str):
                raise ToolError("invalid_argument", f"{name} must be a string")
            return value
    if required:
        raise ToolError("invalid_argument", f"{names[0]} is required")
    return None


def _number(args: Mapping[str, Any], name: str) -> Optional[int]:
    value = args.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ToolError("invalid_argument", f"{name} must be a number")
    return int(value)


def _summary(document: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in document.items() if k != "content"}


@define
class DocumentTools:
    """
    The tools over one store; each (C{_tool_<name>}) returns C{(envelope,
    audit fields)}.  The stand-in's endpoint is a L{DocumentTools} with the
    protocol in front, so that a variant endpoint (the tests' second
    stand-in) overrides a single tool as a method.
    """

    store: FolderStore

    def run(
        self, name: str, graphId: str, args: Mapping[str, Any]
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """
        Run the tool C{name} (one of L{TOOLS}) on C{graphId}.

        @raise ToolError: the tool's refusal.
        """
        handler: Callable[[str, Mapping[str, Any]], tuple[dict[str, Any], dict[str, Any]]]
        handler = getattr(self, "_tool_" + name)
        return handler(graphId, args)

    def _tool_read_document(self, graphId: str, args: Mapping[str, Any]) -> Any:
        document = self.store.requireDocument(
            graphId, _text(args, "documentId", "document_id")
        )
        form = _text(args, "format", required=False) or "markdown"
        out = _summary(document)
        if form == "ids_only":
            return {"ok": True, "document": {"id": document["id"]}}, {}
        if form not in ("markdown", "xml", "json"):
            raise ToolError(
                "invalid_argument", "format must be markdown, xml, json or ids_only"
            )
        content: str = document["content"]
        offset = _number(args, "offset") or 0
        maxChars = _number(args, "maxChars")
        sliced = (
            content[offset:]
            if maxChars is None
            else content[offset : offset + maxChars]
        )
        out["content"] = sliced
        out["totalChars"] = len(content)
        return {"ok": True, "document": out}, {}

    def _tool_list_documents(self, graphId: str, args: Mapping[str, Any]) -> Any:
        documents = [_summary(d) for d in self.store.documents(graphId)]
        cursor = _text(args, "cursor", required=False)
        start = int(cursor) if cursor and cursor.isdigit() else 0
        limit = _number(args, "limit") or 100
        page = documents[start : start + limit]
        nextCursor = str(start + limit) if start + limit < len(documents) else None
        return {"ok": True, "documents": page, "nextCursor": nextCursor}, {}

    def _tool_get_workspace(self, graphId: str, args: Mapping[str, Any]) -> Any:
        folders = self.store.folders(graphId)
        foldersOnly = bool(args.get("foldersOnly"))
        documents = [] if foldersOnly else self.store.documents(graphId)
        depth = _number(args, "depth")
        top = _text(args, "folderId", required=False)
        if (
            top is not None
            and self.store.folder(graphId, checkId(top, "folderId")) is None
        ):
            raise ToolError("not_found", f"no folder {top!r} in graph {graphId!r}")

        def node(folder: Mapping[str, Any], level: int) -> dict[str, Any]:
            out = dict(folder)
            out["documents"] = [
                _summary(d) for d in documents if d["parentId"] == folder["id"]
            ]
            if depth is None or level < depth:
                out["folders"] = [
                    node(f, level + 1) for f in folders if f["parentId"] == folder["id"]
                ]
            return out

        return {
            "ok": True,
            "graphId": graphId,
            "folders": [node(f, 1) for f in folders if f["parentId"] == top],
            "documents": [_summary(d) for d in documents if d["parentId"] == top],
        }, {}

    def _tool_search_documents(self, graphId: str, args: Mapping[str, Any]) -> Any:
        query = _text(args, "query") or ""
        needle = query.lower()
        results = []
        for document in self.store.documents(graphId):
            content: str = document["content"]
            at = content.lower().find(needle)
            if at < 0 and needle not in document["title"].lower():
                continue
            snippet = content[max(0, at - 40) : at + len(query) + 40] if at >= 0 else ""
            results.append(
                {"id": document["id"], "title": document["title"], "snippet": snippet}
            )
        return {"ok": True, "results": results}, {}

    def _tool_create_folder(self, graphId: str, args: Mapping[str, Any]) -> Any:
        folder = self.store.createFolder(
            graphId,
            name=_text(args, "name") or "",
            folderId=_text(args, "folderId", required=False),
            parentId=_text(args, "parentId", required=False),
            section=_text(args, "section", required=False) or "documents",
            order=_number(args, "order"),
        )
        return {"ok": True, "folder": folder}, {"folderId": folder["id"]}

    def _tool_create_document(self, graphId: str, args: Mapping[str, Any]) -> Any:
        document = self.store.createDocument(
            graphId,
            title=_text(args, "title") or "",
            documentId=_text(args, "documentId", required=False),
            parentId=_text(args, "parentId", required=False),
            order=_number(args, "order"),
        )
        return {"ok": True, "document": _summary(document)}, {
            "documentId": document["id"]
        }

    def _tool_write_document(self, graphId: str, args: Mapping[str, Any]) -> Any:
        documentId = _text(args, "documentId", "document_id") or ""
        hasContent = args.get("content") is not None
        hasTiptap = args.get("tiptapJson") is not None
        if hasContent == hasTiptap:
            raise ToolError(
                "invalid_argument", "give exactly one of content and tiptapJson"
            )
        form = _text(args, "format", required=False) or "auto"
        if form not in ("auto", "plain", "markdown", "html", "xml"):
            raise ToolError(
                "invalid_argument", "format must be auto, plain, markdown, html or xml"
            )
        if hasTiptap:
            content, form = json.dumps(args["tiptapJson"]), "tiptap"
        else:
            content = _text(args, "content") or ""
            form = "markdown" if form == "auto" else form
        document = self.store.writeDocument(
            graphId,
            documentId,
            content,
            format=form,
            title=_text(args, "title", required=False),
            expectedRevision=_number(args, "expectedRevision"),
        )
        return {"ok": True, "document": _summary(document)}, {"documentId": documentId}

    def _tool_rename(self, graphId: str, args: Mapping[str, Any]) -> Any:
        entityType = _text(args, "entity_type", "entityType") or ""
        entityId = _text(args, "entity_id", "entityId", required=entityType != "graph")
        newName = _text(args, "new_name", "newName") or ""
        renamed = self.store.rename(graphId, entityType, entityId, newName)
        key = "documentId" if entityType == "document" else "folderId"
        return {"ok": True, entityType: _summary(renamed)}, {key: entityId}

    def _tool_create_wires(self, graphId: str, args: Mapping[str, Any]) -> Any:
        raw = args.get("wires")
        if raw is None:
            raw = [args]
        if (
            not isinstance(raw, list)
            or not raw
            or not all(isinstance(w, dict) for w in raw)
        ):
            raise ToolError(
                "invalid_argument", "wires must be a non-empty list of objects"
            )
        triples = [
            (
                _text(w, "sourceDocumentId", "source_document_id"),
                _text(w, "targetDocumentId", "target_document_id"),
                _text(w, "predicate"),
            )
            for w in raw
        ]
        wires = self.store.createWires(graphId, triples)
        return {"ok": True, "wires": wires}, {"documentId": triples[0][0]}
