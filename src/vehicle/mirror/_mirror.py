# -*- test-case-name: tests.live.test_mirror -*-
"""
The mirror's state machine: after each settled run and each rename, one
session's conversation is written to its Garden document as the person
(through C{/mcp} with the session's delegation token), one write at a time
per session, its state kept in C{mirror.json} beside the session.  What a
pass writes is the document writer's (L{vehicle.mirror._document}).
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any, Callable, ClassVar, Protocol

from attrs import define, field
from twisted.internet.defer import Deferred, succeed
from twisted.logger import Logger

from vehicle._http import httpClient
from vehicle._reactors import IClientReactor
from vehicle._threads import threadRunner
from vehicle.metrics import Metrics, unserved
from vehicle.mirror._document import DocumentWriter, Rendered, ToolCalls, renderSession
from vehicle.mirror._mcp import MCPClient, MirrorError
from vehicle.mirror._record import (
    MIRROR_FILE,
    REASON_NO_ENDPOINT,
    REASON_NO_TOKEN,
    REASON_NOTHING_YET,
    REASON_OFF,
    REASON_VIEWER,
    MirrorRecord,
)
from vehicle.mirror._render import documentIdFor
from vehicle.protocol import JSONObject, MirrorStage, MirrorState
from vehicle.session import SessionMeta, isoTimestamp
from vehicle.store import readJson, writeJsonAtomic


class MirroredSession(Protocol):
    """
    What the mirror touches of a session (L{vehicle.session.Session}).
    """

    @property
    def meta(self) -> SessionMeta: ...

    @property
    def directory(self) -> Path: ...

    @property
    def title(self) -> str | None: ...

    @property
    def delegatedToken(self) -> str | None: ...

    @property
    def deleted(self) -> bool: ...

    def emit(self, eventType: str, data: JSONObject | None = None) -> object: ...


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

    reactor: IClientReactor = field(kw_only=True)
    mcpUrl: str | None = field(kw_only=True)
    enabled: bool = field(kw_only=True)
    #: The client for MCP (default: one that reaches IP addresses without a
    #: name lookup, made on first use): treq's, or a fake of its C{post}.
    http: Any = field(default=None, kw_only=True)
    #: Where each pass's write, or failure, is counted.
    metrics: Metrics = field(factory=unserved, kw_only=True)
    _records: dict[str, MirrorRecord] = field(factory=dict, init=False)
    _writer: DocumentWriter = field(factory=DocumentWriter, init=False)
    _read: Callable[..., Deferred[Rendered | None]] = field(init=False)

    def __attrs_post_init__(self) -> None:
        # pi's file is read in the reactor's thread pool (inline on a
        # test's memory reactor).
        self._read = partial(threadRunner(self.reactor), renderSession)

    # -- the host's interface ----------------------------------------------

    def attach(self, session: MirroredSession) -> None:
        """
        Start keeping a session: load its C{mirror.json} when present.
        Attaching a session already kept changes nothing.
        """
        if session.meta.sessionId in self._records:
            return
        record = MirrorRecord()
        path = session.directory / MIRROR_FILE
        try:
            record = MirrorRecord.fromJSON(readJson(path))
        except FileNotFoundError:
            pass
        except (OSError, ValueError):
            self._log.failure(
                "Unreadable {file} of {sessionId}; starting afresh",
                file=MIRROR_FILE,
                sessionId=session.meta.sessionId,
            )
        self._records[session.meta.sessionId] = record

    def afterSettle(self, session: MirroredSession) -> Deferred[MirrorState]:
        """
        A run settled: bring the document up to date.

        @return: a L{Deferred} that fires with L{state} once the pass that
            covers this call is done; it never fails.
        """
        return self._schedule(session)

    def afterRename(self, session: MirroredSession) -> Deferred[MirrorState]:
        """
        The session was renamed: retitle the document (C{rename}), if it
        exists; else write it.

        @return: as L{afterSettle}.
        """
        return self._schedule(session)

    def state(self, session: MirroredSession) -> MirrorState:
        """
        The snapshot's C{mirror}.
        """
        refusal = self._refusal(session)
        if refusal is not None:
            state, reason = refusal
            return MirrorState(state=state, reason=reason)
        record = self._record(session)
        why = record.reason
        if (
            record.state in ("pending", "failed")
            and session.delegatedToken is None
        ):
            why = REASON_NO_TOKEN
        return MirrorState(
            state=record.state,
            documentId=record.documentId,
            folder=record.folder,
            reason=why,
            writtenAt=record.writtenAt,
            error=record.error,
        )

    def deleteInfo(self, session: MirroredSession) -> dict[str, str] | None:
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

    def forget(self, session: MirroredSession) -> None:
        """
        Drop a session's in-memory record (after it was deleted).
        """
        self._records.pop(session.meta.sessionId, None)

    # -- the queue ------------------------------------------------------------

    def _refusal(self, session: MirroredSession) -> tuple[MirrorStage, str] | None:
        if not self.enabled:
            return "off", REASON_OFF
        if not self.mcpUrl:
            return "off", REASON_NO_ENDPOINT
        if session.meta.role == "viewer":
            return "skipped", REASON_VIEWER
        return None

    def _record(self, session: MirroredSession) -> MirrorRecord:
        record = self._records.get(session.meta.sessionId)
        if record is None:
            self.attach(session)
            record = self._records[session.meta.sessionId]
        return record

    def _schedule(self, session: MirroredSession) -> Deferred[MirrorState]:
        if self._refusal(session) is not None:
            return succeed(self.state(session))
        record = self._record(session)
        waiter: Deferred[MirrorState] = Deferred()
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

    async def _drain(self, session: MirroredSession, record: MirrorRecord) -> None:
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

    async def _pass(self, session: MirroredSession, record: MirrorRecord) -> None:
        if session.deleted:
            return
        meta = session.meta
        rendered: Rendered | None = await self._read(
            session.directory / "pi",
            sessionId=meta.sessionId,
            model=meta.model,
            createdAt=meta.createdSeconds,
            person=meta.principal,
            title=session.title,
            parent=meta.parent,
        )
        if session.deleted:
            return
        if rendered is None:
            if not record.created:
                self._pending(session, record, REASON_NOTHING_YET)
            return
        documentId = documentIdFor(meta.sessionId)
        needWrite = not record.created or rendered.contentHash != record.contentHash
        needRename = rendered.title != record.title
        needWire = meta.parent is not None and not record.wired
        if not (needWrite or needRename or needWire):
            if record.state != "written":
                self._written(session, record, created=None)
            return
        token = session.delegatedToken
        if not token:
            record.error = None
            self._pending(session, record, REASON_NO_TOKEN)
            return
        if record.client is None:
            if self.http is None:
                self.http = httpClient(self.reactor)
            record.client = MCPClient(url=self.mcpUrl or "", reactor=self.reactor, http=self.http)
        call = ToolCalls(
            record.client, token, meta.graphId,
            wanted=lambda: not session.deleted,
        )
        try:
            created = await self._writer.write(
                call, record, rendered, documentId,
                meta.parent.sessionId if needWire and meta.parent is not None else None,
                lambda: self._persist(session, record),
            )
        except MirrorError as e:
            if e.code == "deleted":
                return
            self._fail(session, record, e.message)
            return
        self._written(session, record, created=created)
        self.metrics.mirrorWrote(True)

    # -- state --------------------------------------------------------------

    def _written(
        self, session: MirroredSession, record: MirrorRecord, created: bool | None
    ) -> None:
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

    def _fail(self, session: MirroredSession, record: MirrorRecord, message: str) -> None:
        self.metrics.mirrorWrote(False)
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

    def _pending(self, session: MirroredSession, record: MirrorRecord, reason: str) -> None:
        record.state = "pending"
        record.reason = reason
        self._persist(session, record)

    def _persist(self, session: MirroredSession, record: MirrorRecord) -> None:
        """
        Rewrite C{mirror.json} (small; synchronous like C{meta.json}).
        """
        if session.deleted:
            return
        try:
            writeJsonAtomic(session.directory / MIRROR_FILE, record.persisted())
        except OSError:
            self._log.failure(
                "Could not write {file} of {sessionId}",
                file=MIRROR_FILE,
                sessionId=session.meta.sessionId,
            )

    def _emit(self, session: MirroredSession, eventType: str, data: JSONObject) -> None:
        if session.deleted:
            return
        try:
            session.emit(eventType, data)
        except Exception:
            self._log.failure(
                "Could not record {eventType} for {sessionId}",
                eventType=eventType,
                sessionId=session.meta.sessionId,
            )
