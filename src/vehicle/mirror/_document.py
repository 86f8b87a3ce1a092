# -*- test-case-name: tests.live.test_mirror -*-
"""
A session's document in Garden: what it holds (L{renderSession}, from pi's
file) and how one pass brings it up to date through gardend's MCP tools
(L{DocumentWriter}): the folders it lives in, made when missing and known
by id; the document made, written or retitled; a branch's wire to its
parent's document.  Whether and when a pass runs, and what it leaves in
C{mirror.json} and the log, is the mirror's (L{vehicle.mirror.Mirror}).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Callable, ClassVar

from attrs import define, field
from twisted.logger import Logger

from vehicle.body import latestSessionFile, readSession
from vehicle.mirror._mcp import MCPClient, MirrorError
from vehicle.mirror._record import MirrorRecord
from vehicle.protocol import JSON, JSONObject, Parent
from vehicle.mirror._render import (
    AGENT_FOLDER_ID,
    AGENT_FOLDER_NAME,
    CONVERSATIONS_FOLDER_ID,
    CONVERSATIONS_FOLDER_NAME,
    divergenceIndex,
    documentIdFor,
    documentTitle,
    renderConversation,
)


#: The cap on one message's text in the document, in UTF-8 bytes (the
#: host's transcript keeps 16 KiB; the document keeps more).
MAX_MESSAGE_BYTES = 256 * 1024

@define(frozen=True)
class Rendered:
    """
    What one pass found in pi's file: the document's title and content (and
    the content's digest), or nothing when pi has not written a file yet.
    """

    title: str
    content: str
    contentHash: str


def renderSession(
    piDir: Path,
    *,
    sessionId: str,
    model: str,
    createdAt: float,
    person: str,
    title: str | None,
    parent: Parent | None,
) -> Rendered | None:
    """
    Read pi's newest session file in C{piDir} and render the document.

    Synchronous file I/O and CPU: the mirror calls it in the reactor's
    thread pool. Pure otherwise (it takes values, never the session).

    @return: L{None} when pi has no file yet or it has no message.
    """
    path = latestSessionFile(piDir)
    if path is None:
        return None
    try:
        transcript = readSession(path).transcript(maxText=MAX_MESSAGE_BYTES)
    except FileNotFoundError:
        return None
    if not transcript:
        return None
    divergeAt = (
        divergenceIndex(transcript, createdAt)
        if parent is not None and parent.kind != "clone"
        else 0
    )
    content = renderConversation(
        model=model,
        createdAt=createdAt,
        person=person,
        transcript=transcript,
        parent=parent,
        divergeAt=divergeAt,
    )
    return Rendered(
        title=documentTitle(title, transcript, divergeAt),
        content=content,
        contentHash=hashlib.sha256(content.encode("utf-8", "surrogatepass")).hexdigest(),
    )


@define(eq=False)
class DocumentWriter:
    """
    Writes sessions' documents, one pass at a time per session (the mirror
    sees to that).

    @ivar folders: graphId -> the folder ids made or seen there (memory
        only: after a restart the workspace is read once more).
    """

    _log: ClassVar[Logger] = Logger()

    folders: dict[str, set[str]] = field(factory=dict)

    async def write(
        self,
        call: "ToolCalls",
        record: MirrorRecord,
        rendered: Rendered,
        documentId: str,
        parentSessionId: str | None,
        persist: Callable[[], None],
    ) -> bool:
        """
        Bring the document up to date with C{rendered}: make it (and its
        folders) when it was never made, write its content when it changed,
        else retitle it when only the title did, and wire a branch's
        document to its parent's once (C{parentSessionId}).  C{record}
        follows each step; C{persist} is called once the document exists.

        @return: whether this pass made the document.
        @raise MirrorError: a call refused (C{deleted} once the session is
            gone).
        """
        created = False
        if not record.created:
            created = await self._create(call, record, rendered.title, documentId)
            persist()
        await self._update(call, record, rendered, documentId)
        if parentSessionId is not None and not record.wired:
            await self._wire(call, record, documentId, parentSessionId)
        return created

    async def _create(
        self, call: "ToolCalls", record: MirrorRecord, title: str, documentId: str
    ) -> bool:
        """
        Make the document (and its folders).  A refusal is checked by
        reading: the document may be there already (made before
        C{mirror.json} said so), and is then written whole.

        @return: whether this call made it.
        """
        await self._ensureFolders(call)
        # From here the document may exist: a delete answer names it.
        record.creating = True
        created = False
        try:
            await call(
                "create_document",
                title=title,
                documentId=documentId,
                parentId=CONVERSATIONS_FOLDER_ID,
            )
            created = True
            record.title = title
        except MirrorError:
            # Whatever the refusal says, reading tells whether the
            # document is there: made before mirror.json said so
            # (then it is written whole), or not made at all.
            if not await _exists(call, documentId):
                # Perhaps a folder the mirror knew is gone.
                self.folders.pop(call.graphId, None)
                raise
            record.title = None
        record.created = True
        record.documentId = documentId
        record.folder = CONVERSATIONS_FOLDER_ID
        record.contentHash = None
        return created

    async def _update(
        self, call: "ToolCalls", record: MirrorRecord, rendered: Rendered, documentId: str
    ) -> None:
        """
        Write the content when it changed (with the title, if that did
        too), else retitle the document when only the title changed.
        """
        if rendered.contentHash != record.contentHash:
            arguments: JSONObject = {
                "documentId": documentId,
                "content": rendered.content,
                "format": "markdown",
            }
            if rendered.title != record.title:
                arguments["title"] = rendered.title
            try:
                await call("write_document", **arguments)
            except MirrorError:
                if not await _exists(call, documentId):
                    # Gone for good (not merely in the Trash): make it
                    # again at the next settle.
                    record.created = False
                raise
            record.contentHash = rendered.contentHash
            record.title = rendered.title
        elif rendered.title != record.title:
            await call(
                "rename",
                entity_type="document",
                entity_id=documentId,
                new_name=rendered.title,
            )
            record.title = rendered.title

    async def _ensureFolders(self, call: "ToolCalls") -> None:
        """
        C{_sophia} and C{Conversations} in it, each made only when missing.
        The folders are known by id: those the mirror made or saw on the
        graph are not looked for again; the workspace is read (whatever
        its nesting) only for the others, and a refused C{create_folder}
        counts as done only when a new reading shows the folder.
        """
        known = self.folders.setdefault(call.graphId, set())
        wanted = (
            (AGENT_FOLDER_ID, AGENT_FOLDER_NAME, None),
            (CONVERSATIONS_FOLDER_ID, CONVERSATIONS_FOLDER_NAME, AGENT_FOLDER_ID),
        )
        if all(folderId in known for folderId, _, _ in wanted):
            return
        known |= _ids(await call("get_workspace", foldersOnly=True))
        for folderId, name, parentId in wanted:
            if folderId in known:
                continue
            arguments: JSONObject = {"name": name, "folderId": folderId}
            if parentId is not None:
                arguments["parentId"] = parentId
            try:
                await call("create_folder", **arguments)
            except MirrorError as e:
                if e.code == "deleted":
                    raise
                try:
                    seen = _ids(await call("get_workspace", foldersOnly=True))
                except MirrorError as again:
                    if again.code == "deleted":
                        raise
                    raise e from None
                known |= seen
                if folderId not in known:
                    raise
            known.add(folderId)

    async def _wire(
        self, call: "ToolCalls", record: MirrorRecord, documentId: str, parentSessionId: str
    ) -> None:
        """
        The branch's C{divergesFrom} wire to its parent's document, once.
        When the parent was never mirrored there is nothing to point at yet:
        it is tried again at the next settle, and the write still counts.
        """
        target = documentIdFor(parentSessionId)
        try:
            await call(
                "create_wires",
                sourceDocumentId=documentId,
                targetDocumentId=target,
                predicate="divergesFrom",
            )
        except MirrorError:
            if await _exists(call, target):
                raise
            self._log.info(
                "No document for {parent} yet; the wire waits",
                parent=parentSessionId,
            )
            return
        record.wired = True


@define
class ToolCalls:
    """
    One pass's calls: the client, the token and the graph named in each
    call (gardend binds the graph through the token; naming the same one is
    accepted, and some tools require it).
    """

    client: MCPClient
    token: str = field(repr=False)
    graphId: str
    #: Is the session still there?  A pass stops at its next call once the
    #: session was deleted (its document is then the client's to trash).
    wanted: Callable[[], bool] = lambda: True

    async def __call__(self, tool: str, /, **arguments: JSON) -> JSONObject:
        if not self.wanted():
            raise MirrorError("the session was deleted", "deleted")
        arguments[_GRAPH_ARGUMENTS.get(tool, "graphId")] = self.graphId
        return await self.client.callTool(self.token, tool, arguments)


#: The tools that name their graph otherwise than C{graphId}.
_GRAPH_ARGUMENTS = {"rename": "graph_id"}


#: The keys under which an answer names a folder's (or a document's) id.
_ID_KEYS = ("id", "folderId", "folder_id")


def _ids(answer: JSON) -> set[str]:
    """
    Every id named anywhere in a C{get_workspace} answer, however it nests
    its folders (C{folders}, C{children}, C{items}, wrapped or not).  A
    document's id may come too; the mirror only asks for its folders'.
    """
    out: set[str] = set()
    stack: list[JSON] = [answer]
    while stack:
        node = stack.pop()
        if isinstance(node, list):
            stack.extend(node)
        elif isinstance(node, dict):
            for key, value in node.items():
                if key in _ID_KEYS and isinstance(value, str):
                    out.add(value)
                elif isinstance(value, (dict, list)):
                    stack.append(value)
    return out


async def _exists(call: ToolCalls, documentId: str) -> bool:
    """
    Can the document be read?  The answer to a refusal that may mean "it is
    already there" or "it is not there", whatever words the refusal used.
    A reading that fails says no (but a deleted session stops the pass).
    """
    for arguments in ({"format": "ids_only"}, {"maxChars": 1}):
        # The cheapest reading first; a server that knows no ids_only
        # still answers a short one.
        try:
            await call("read_document", documentId=documentId, **arguments)
        except MirrorError as e:
            if e.code == "deleted":
                raise
            continue
        return True
    return False
