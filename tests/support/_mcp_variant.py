"""
A second MCP stand-in, for tests only: the stand-in's tools over the same
store, answered in other shapes and other words, as another gardend (or a
later one) might.  The host must depend on ids and on reading, never on one
answer's nesting or one refusal's wording (issue 10, section 4).

What differs from L{vehicle_local.standin._mcp.MCPEndpoint}:
  - C{get_workspace} wraps its tree (C{data.workspace.tree.nodes}), names a
    folder's id C{folderId} and its name C{label}, nests folders under
    C{nodes} and documents under C{docs} (with C{documentId});
  - C{create_folder} refuses an existing id with a JSON-RPC error (code
    -32000, "Folder ID is in use"), not a tool envelope;
  - C{create_document} refuses an existing id as C{CONFLICT}, "Document ID
    taken";
  - every other C{not_found} is a tool error whose text is not JSON
    ("Resource missing: ...");
  - C{read_document} knows no C{ids_only} format ("Unsupported format");
  - with C{listAll}, C{tools/list} offers every tool to every token, the
    writer tools to a viewer too (the calls are still refused); with
    C{dropMeta}, its entries carry no C{_meta} (no scopes);
  - with C{resources}, it offers every graph's documents as MCP resources,
    whatever graph the token is bound to (pi's resource tools reach them).
"""

from __future__ import annotations

import json
from typing import Any, Mapping

from attrs import define, field

from vehicle_local.standin import StandIn
from vehicle_local.standin._delegation import Delegation
from vehicle_local.standin._mcp import CATALOG, MCPEndpoint, ToolSpec, _reachable
from vehicle_local.standin._store import ToolError
from vehicle_local.standin._tools import GetWorkspace, ReadDocument, ToolResult


_RESOURCE_METHODS = ("resources/list", "resources/read", "resources/templates/list")


def _reshape(folder: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "kind": "folder",
        "folderId": folder["id"],
        "label": folder.get("name"),
        "nodes": [_reshape(f) for f in folder.get("folders") or []],
        "docs": [
            {"documentId": d["id"], "label": d.get("title")}
            for d in folder.get("documents") or []
        ],
    }


def _refusal(result: Mapping[str, Any]) -> dict[str, Any] | None:
    """
    The stand-in's refusal envelope in a tool result, if it is one.
    """
    if not result.get("isError"):
        return None
    try:
        envelope = json.loads(result["content"][0]["text"])
    except (KeyError, IndexError, ValueError):
        return None
    error = envelope.get("error")
    return error if isinstance(error, dict) else None


def _text(text: str, isError: bool = True) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}], "isError": isError}


@define
class VariantEndpoint(MCPEndpoint):
    """
    The stand-in's C{/mcp} in other shapes and words.
    """

    listAll: bool = False
    #: List the tools without their C{_meta} (so without scopes).
    dropMeta: bool = False
    #: Offer every graph's documents as MCP resources (a server that does
    #: not fence its resources by graph), and record each read.
    resources: bool = False
    resourceReads: list[str] = field(factory=list)

    def _dispatch(self, caller: Delegation, message: Mapping[str, Any]) -> dict[str, Any]:
        params = message.get("params") or {}
        method = message.get("method")
        if method == "tools/list" and self.listAll:
            answer: dict[str, Any] = {
                "result": {
                    "tools": [
                        tool.listing(bound=caller.graphId is not None, reads=_reachable(caller))
                        for tool in CATALOG
                    ]
                }
            }
        elif self.resources and method in _RESOURCE_METHODS:
            return self._resource(method, params)
        else:
            answer = super()._dispatch(caller, message)
        if method == "tools/list" and self.dropMeta and "result" in answer:
            for tool in answer["result"]["tools"]:
                tool.pop("_meta", None)
        if method == "initialize" and "result" in answer:
            answer["result"]["serverInfo"] = {"name": "gardend-variant", "version": "9.0.0"}
            if self.resources:
                answer["result"]["capabilities"]["resources"] = {}
        if method == "tools/call" and params.get("name") == "create_folder":
            error = _refusal(answer.get("result") or {})
            if error is not None and error.get("code") == "already_exists":
                return {"error": {"code": -32000, "message": "Folder ID is in use"}}
        return answer

    def _resource(self, method: str, params: Mapping[str, Any]) -> dict[str, Any]:
        if method == "resources/templates/list":
            return {"result": {"resourceTemplates": []}}
        documents = [
            (graphId, document)
            for graphId in sorted(self.config.knownGraphs())
            for document in self.store.documents(graphId)
        ]
        if method == "resources/list":
            return {
                "result": {
                    "resources": [
                        {"uri": f"garden://{g}/{d.id}", "name": d.title,
                         "mimeType": "text/markdown"}
                        for g, d in documents
                    ]
                }
            }
        uri = params.get("uri")
        self.resourceReads.append(str(uri))
        for g, d in documents:
            if uri == f"garden://{g}/{d.id}":
                return {"result": {"contents": [
                    {"uri": uri, "mimeType": "text/markdown", "text": d.content}
                ]}}
        return {"error": {"code": -32002, "message": f"Resource not found: {uri}"}}

    def _call(
        self, caller: Delegation, tool: ToolSpec, arguments: Mapping[str, Any]
    ) -> dict[str, Any]:
        result = super()._call(caller, tool, arguments)
        error = _refusal(result)
        if error is None:
            return result
        if error.get("code") == "already_exists" and tool.name == "create_document":
            envelope = {"ok": False, "error": {"code": "CONFLICT", "message": "Document ID taken"}}
            return _text(json.dumps(envelope))
        if error.get("code") == "not_found":
            return _text(f"Resource missing: {error.get('message')}")
        return result

    def _tool_read_document(self, graphId: str, args: ReadDocument) -> ToolResult:
        if args.format == "ids_only":
            raise ToolError("bad_request", "Unsupported format")
        return super()._tool_read_document(graphId, args)

    def _tool_get_workspace(self, graphId: str, args: GetWorkspace) -> ToolResult:
        envelope, audited = super()._tool_get_workspace(graphId, args)
        return {
            "ok": True,
            "data": {
                "workspace": {
                    "graph": graphId,
                    "tree": {
                        "nodes": [_reshape(f) for f in envelope["folders"]],
                        "docs": [{"documentId": d["id"]} for d in envelope["documents"]],
                    },
                }
            },
        }, audited


def useVariant(
    standIn: StandIn, listAll: bool = False, dropMeta: bool = False, resources: bool = False
) -> VariantEndpoint:
    """
    Put a L{VariantEndpoint} over C{standIn}'s store in place of its C{/mcp}.
    """
    variant = VariantEndpoint(
        config=standIn.config,
        store=standIn.store,
        delegations=standIn.delegations,
        listAll=listAll,
        dropMeta=dropMeta,
        resources=resources,
    )
    standIn.mcp = variant
    standIn.gateway.mcp = variant
    return variant
