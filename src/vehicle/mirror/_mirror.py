# -*- test-case-name: tests.test_mirror -*-
"""
The mirror's state machine: after each settled run and each rename, one
session's conversation is written to its Garden document as the person
(through C{/mcp} with the session's delegation token), one write at a time
per session, its state kept in C{mirror.json} beside the session.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any, Callable, ClassVar

from attrs import define, field
from twisted.internet.defer import Deferred, maybeDeferred, succeed
from twisted.internet.threads import deferToThreadPool
from twisted.logger import Logger

from vehicle._http import httpClient
from vehicle.body import latestSessionFile, readSession
from vehicle.mirror._mcp import MCPClient, MirrorError
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
from vehicle.session import isoTimestamp
from vehicle.store import readJson, writeJsonAtomic


MIRROR_FILE = "mirror.json"

#: The cap on one message's text in the document, in UTF-8 bytes (the
#: host's transcript keeps 16 KiB; the document keeps more).
MAX_MESSAGE_BYTES = 256 * 1024

STATES = ("off", "skipped", "pending", "written", "failed")

REASON_OFF = "the mirror is turned off (VEHICLE_MIRROR=off)"
REASON_NO_ENDPOINT = "the mirror is off: no MCP endpoint (MNEMOSYNE_MCP_URL)"
REASON_VIEWER = "a viewer's session is never written to the graph"
REASON_NO_TOKEN = (
    "no delegation token yet: the owner's next request on this graph brings one"
)
REASON_NOTHING_YET = "nothing has been said yet"
REASON_FIRST = "waiting for the first settled run"

#: The fields of C{mirror.json} (never the token).
_PERSISTED = (
    "state",
    "documentId",
    "folder",
    "reason",
    "writtenAt",
    "error",
    "contentHash",
    "title",
    "created",
    "wired",
)


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
    parent: dict[str, Any] | None,
) -> Rendered | None:
    """
    Read pi's newest session file in C{piDir} and render the document.

    Synchronous file I/O and CPU: the mirror calls it in the reactor's
    thread pool. Pure otherwise (it takes values, never the session).

    @return: L{None} when pi has no file yet or it has no message.
    """
    path = latestSessionFile(piDir) if piDir.is_dir() else None
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
        if parent and parent.get("kind") != "clone"
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


@define
class _Record:
    """
    One session's mirror state (persisted) and its write queue (memory).
    """

    state: str = "pending"
    documentId: str | None = None
    folder: str | None = None
    reason: str | None = REASON_FIRST
    writtenAt: str | None = None
    error: str | None = None
    contentHash: str | None = None
    title: str | None = None
    created: bool = False
    #: A create_document was sent and its answer is not known yet.
    creating: bool = False
    wired: bool = False
    client: MCPClient | None = field(default=None, repr=False)
    running: bool = False
    waiters: list[Deferred] = field(factory=list, repr=False)

    def persisted(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in _PERSISTED}

    @classmethod
    def fromJSON(cls, data: Any) -> "_Record":
        record = cls()
        if not isinstance(data, dict):
            return record
        for name in _PERSISTED:
            if name in data:
                setattr(record, name, data[name])
        if record.state not in STATES:
            record.state = "pending"
        record.created = bool(record.created)
        record.wired = bool(record.wired)
        return record


def _defaultReader(reactor: Any) -> Callable[..., Deferred]:
    """
    Run L{renderSession} in the reactor's thread pool when it has one (a
    real reactor), else inline (a test's memory reactor).
    """
    getThreadPool = getattr(reactor, "getThreadPool", None)

    def read(*args: Any, **kwargs: Any) -> Deferred:
        if getThreadPool is None:
            return maybeDeferred(renderSession, *args, **kwargs)
        return deferToThreadPool(reactor, getThreadPool(), renderSession, *args, **kwargs)

    return read


@define(eq=False)
class Mirror:
    """
    Writes each session's conversation to its Garden document.

    @ivar reactor: the clock for C{writtenAt}, the HTTP client's reactor and
        the thread pool pi's file is read in.
    @ivar mcpUrl: gardend's C{/mcp} (C{MNEMOSYNE_MCP_URL}); L{None} turns
        the mirror off.
    @ivar enabled: C{False} for C{VEHICLE_MIRROR=off}.
    @ivar http: a treq client (or the treq module), used for C{post}.
    """

    _log: ClassVar[Logger] = Logger()

    reactor: Any = field(kw_only=True)
    mcpUrl: str | None = field(kw_only=True)
    enabled: bool = field(kw_only=True)
    #: The client for MCP (default: one that reaches IP addresses without a
    #: name lookup, made on first use).
    http: Any = field(default=None, kw_only=True)
    _records: dict[str, _Record] = field(factory=dict, init=False)
    #: graphId -> the folder ids the mirror made or saw there (memory
    #: only: after a restart it reads the workspace once more).
    _folders: dict[str, set[str]] = field(factory=dict, init=False)
    _read: Callable[..., Deferred] = field(init=False)

    def __attrs_post_init__(self) -> None:
        self._read = _defaultReader(self.reactor)

    # -- the host's interface ----------------------------------------------

    def attach(self, session: Any) -> None:
        """
        Start keeping a session: load its C{mirror.json} when present.
        Attaching a session already kept changes nothing.
        """
        if session.meta.sessionId in self._records:
            return
        record = _Record()
        path = Path(session.directory) / MIRROR_FILE
        try:
            record = _Record.fromJSON(readJson(path))
        except FileNotFoundError:
            pass
        except (OSError, ValueError):
            self._log.failure(
                "Unreadable {file} of {sessionId}; starting afresh",
                file=MIRROR_FILE,
                sessionId=session.meta.sessionId,
            )
        self._records[session.meta.sessionId] = record

    def afterSettle(self, session: Any) -> Deferred:
        """
        A run settled: bring the document up to date.

        @return: a L{Deferred} that fires with L{state} once the pass that
            covers this call is done; it never fails.
        """
        return self._schedule(session)

    def afterRename(self, session: Any) -> Deferred:
        """
        The session was renamed: retitle the document (C{rename}), if it
        exists; else write it.

        @return: as L{afterSettle}.
        """
        return self._schedule(session)

    def state(self, session: Any) -> dict[str, Any]:
        """
        The snapshot's C{mirror}: C{{state, documentId, folder, reason,
        writtenAt, error}}.
        """
        refusal = self._refusal(session)
        if refusal is not None:
            state, reason = refusal
            return {
                "state": state,
                "documentId": None,
                "folder": None,
                "reason": reason,
                "writtenAt": None,
                "error": None,
            }
        record = self._record(session)
        why = record.reason
        if (
            record.state in ("pending", "failed")
            and session.delegatedToken is None
        ):
            why = REASON_NO_TOKEN
        return {
            "state": record.state,
            "documentId": record.documentId,
            "folder": record.folder,
            "reason": why,
            "writtenAt": record.writtenAt,
            "error": record.error,
        }

    def deleteInfo(self, session: Any) -> dict[str, str] | None:
        """
        C{{documentId, graphId}} for the delete answer when the session's
        document was ever made, else L{None}.
        """
        record = self._records.get(session.meta.sessionId)
        if record is None:
            self.attach(session)
            record = self._records[session.meta.sessionId]
        if not (record.created or record.creating):
            return None
        return {
            "documentId": record.documentId or documentIdFor(session.meta.sessionId),
            "graphId": session.meta.graphId,
        }

    def forget(self, session: Any) -> None:
        """
        Drop a session's in-memory record (after it was deleted).
        """
        self._records.pop(session.meta.sessionId, None)

    # -- the queue ------------------------------------------------------------

    def _refusal(self, session: Any) -> tuple[str, str] | None:
        if not self.enabled:
            return "off", REASON_OFF
        if not self.mcpUrl:
            return "off", REASON_NO_ENDPOINT
        if session.meta.role == "viewer":
            return "skipped", REASON_VIEWER
        return None

    def _record(self, session: Any) -> _Record:
        record = self._records.get(session.meta.sessionId)
        if record is None:
            self.attach(session)
            record = self._records[session.meta.sessionId]
        return record

    def _schedule(self, session: Any) -> Deferred:
        if self._refusal(session) is not None:
            return succeed(self.state(session))
        record = self._record(session)
        waiter: Deferred = Deferred()
        record.waiters.append(waiter)
        if not record.running:
            record.running = True
            Deferred.fromCoroutine(self._drain(session, record)).addErrback(
                lambda f: self._log.failure(
                    "The mirror's queue of {sessionId} broke",
                    f,
                    sessionId=session.meta.sessionId,
                )
            )
        return waiter

    async def _drain(self, session: Any, record: _Record) -> None:
        """
        One pass at a time: the calls that arrive during a pass share the
        next one.
        """
        try:
            while record.waiters:
                batch, record.waiters = record.waiters, []
                try:
                    await self._pass(session, record)
                except Exception as e:
                    self._log.failure(
                        "The mirror of {sessionId} failed unexpectedly",
                        sessionId=session.meta.sessionId,
                    )
                    self._fail(session, record, f"internal error ({e.__class__.__name__})")
                snapshot = self.state(session)
                for waiter in batch:
                    waiter.callback(snapshot)
        finally:
            record.running = False

    # -- one pass -----------------------------------------------------------

    async def _pass(self, session: Any, record: _Record) -> None:
        if getattr(session, "deleted", False):
            return
        meta = session.meta
        rendered: Rendered | None = await self._read(
            Path(session.directory) / "pi",
            sessionId=meta.sessionId,
            model=meta.model,
            createdAt=meta.createdAt,
            person=meta.principal,
            title=session.title,
            parent=meta.parent,
        )
        if getattr(session, "deleted", False):
            return
        if rendered is None:
            if not record.created:
                self._set(session, record, state="pending", reason=REASON_NOTHING_YET)
            return
        documentId = documentIdFor(meta.sessionId)
        needWrite = not record.created or rendered.contentHash != record.contentHash
        needRename = rendered.title != record.title
        needWire = bool(meta.parent and meta.parent.get("sessionId")) and not record.wired
        if not (needWrite or needRename or needWire):
            if record.state != "written":
                self._written(session, record, created=None)
            return
        token = session.delegatedToken
        if not token:
            self._set(session, record, state="pending", reason=REASON_NO_TOKEN, error=None)
            return
        if record.client is None:
            if self.http is None:
                self.http = httpClient(self.reactor)
            record.client = MCPClient(url=self.mcpUrl or "", reactor=self.reactor, http=self.http)
        call = _Caller(
            record.client, token, meta.graphId,
            wanted=lambda: not getattr(session, "deleted", False),
        )
        try:
            created = False
            if not record.created:
                await self._ensureFolders(call)
                # From here the document may exist: a delete answer names it.
                record.creating = True
                try:
                    await call(
                        "create_document",
                        title=rendered.title,
                        documentId=documentId,
                        parentId=CONVERSATIONS_FOLDER_ID,
                    )
                    created = True
                    record.title = rendered.title
                except MirrorError:
                    # Whatever the refusal says, reading tells whether the
                    # document is there: made before mirror.json said so
                    # (then it is written whole), or not made at all.
                    if not await _exists(call, documentId):
                        # Perhaps a folder the mirror knew is gone.
                        self._folders.pop(meta.graphId, None)
                        raise
                    record.title = None
                record.created = True
                record.documentId = documentId
                record.folder = CONVERSATIONS_FOLDER_ID
                record.contentHash = None
                self._persist(session, record)
            if rendered.contentHash != record.contentHash:
                arguments: dict[str, Any] = {
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
                    graphArgument="graph_id",
                )
                record.title = rendered.title
            if needWire:
                await self._wire(call, record, documentId, str(meta.parent["sessionId"]))
        except MirrorError as e:
            if e.code == "deleted":
                return
            self._fail(session, record, e.message)
            return
        self._written(session, record, created=created)

    async def _ensureFolders(self, call: "_Caller") -> None:
        """
        C{_sophia} and C{Conversations} in it, each made only when missing.
        The folders are known by id: those the mirror made or saw on the
        graph are not looked for again; the workspace is read (whatever
        its nesting) only for the others, and a refused C{create_folder}
        counts as done only when a new reading shows the folder.
        """
        known = self._folders.setdefault(call.graphId, set())
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
            arguments: dict[str, Any] = {"name": name, "folderId": folderId}
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
        self, call: "_Caller", record: _Record, documentId: str, parentSessionId: str
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

    # -- state --------------------------------------------------------------

    def _written(self, session: Any, record: _Record, created: bool | None) -> None:
        record.state = "written"
        record.reason = None
        record.error = None
        record.writtenAt = isoTimestamp(self.reactor.seconds())
        self._persist(session, record)
        if created is not None:
            self._emit(
                session,
                "mirror.written",
                {"documentId": record.documentId, "created": created},
            )

    def _fail(self, session: Any, record: _Record, message: str) -> None:
        record.state = "failed"
        record.reason = "the last write failed; it is tried again at the next settle"
        record.error = message
        self._persist(session, record)
        self._log.error(
            "Mirror of {sessionId} failed: {message}",
            sessionId=session.meta.sessionId,
            message=message,
        )
        self._emit(
            session,
            "mirror.failed",
            {
                "documentId": record.documentId or documentIdFor(session.meta.sessionId),
                "message": message,
            },
        )

    def _set(self, session: Any, record: _Record, **changes: Any) -> None:
        for name, value in changes.items():
            setattr(record, name, value)
        self._persist(session, record)

    def _persist(self, session: Any, record: _Record) -> None:
        """
        Rewrite C{mirror.json} (small; synchronous like C{meta.json}).
        """
        if getattr(session, "deleted", False):
            return
        try:
            writeJsonAtomic(Path(session.directory) / MIRROR_FILE, record.persisted())
        except OSError:
            self._log.failure(
                "Could not write {file} of {sessionId}",
                file=MIRROR_FILE,
                sessionId=session.meta.sessionId,
            )

    def _emit(self, session: Any, eventType: str, data: dict[str, Any]) -> None:
        if getattr(session, "deleted", False):
            return
        try:
            session.emit(eventType, data)
        except Exception:
            self._log.failure(
                "Could not record {eventType} for {sessionId}",
                eventType=eventType,
                sessionId=session.meta.sessionId,
            )


@define
class _Caller:
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
    wanted: Any = lambda: True

    async def __call__(
        self, tool: str, graphArgument: str = "graphId", **arguments: Any
    ) -> dict[str, Any]:
        if not self.wanted():
            raise MirrorError("the session was deleted", "deleted")
        arguments[graphArgument] = self.graphId
        return await self.client.callTool(self.token, tool, arguments)


#: The keys under which an answer names a folder's (or a document's) id.
_ID_KEYS = ("id", "folderId", "folder_id")


def _ids(answer: Any) -> set[str]:
    """
    Every id named anywhere in a C{get_workspace} answer, however it nests
    its folders (C{folders}, C{children}, C{items}, wrapped or not).  A
    document's id may come too; the mirror only asks for its folders'.
    """
    out: set[str] = set()
    stack = [answer]
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


async def _exists(call: _Caller, documentId: str) -> bool:
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
