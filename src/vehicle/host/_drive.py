# -*- test-case-name: tests.unit.test_web,tests.unit.test_chimes -*-
"""
The host's rules of a request, above the sessions: which session (the
caller's, or C{not_found}), idempotency (a request already answered
replays), and what the host's other packages say (a delegation token, public
turns, the agent profile, a branch made by the body package).  The web package
authenticates and parses; L{Drive} applies these rules and hands the
request to the session's own verb, which returns its answer as sent, once
the request is durable.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Protocol

from attrs import define
from twisted.python.failure import Failure

from vehicle.errors import VehicleError
from vehicle.public import Reservation
from vehicle.protocol import (
    JSON,
    JSONObject,
    TEXT_COMMANDS,
    Answer,
    ChimeRequest,
    ClaimRequest,
    CommandRequest,
    CommandType,
    CreateRequest,
    Door,
    ReleaseRequest,
    RenameRequest,
    RunBudget,
    SessionCreated,
    SessionDeleted,
)
from vehicle.session import Caller, FolderRecord, Registry, Session, SessionMeta, isoTimestamp
from vehicle.store import raiseAtOnce


class Replayed(Exception):
    """
    A request already answered: the web package sends its answer again
    (C{replayed: true}).
    """

    def __init__(self, sent: JSONObject) -> None:
        super().__init__(sent.get("type"))
        self.sent = sent


def replay(session: Session, requestId: str, raw: JSONObject, route: str) -> None:
    """
    The replay step of a session's request, once for every verb.

    @raise Replayed: for a request already answered.
    @raise VehicleError: C{request_id_conflict} for its id with another payload.
    """
    found = session.replay(requestId, raw, route)
    if found is not None:
        raise Replayed(found)


class PublicTurns(Protocol):
    """
    What public mode says in a request (L{vehicle.public.Public}).
    """

    async def chooseDoor(self, caller: Caller, request: CreateRequest) -> Door: ...

    async def reserveTurn(
        self, session: Session, caller: Caller, request: CommandRequest
    ) -> Reservation: ...

    async def voidTurn(self, session: Session, reservation: Reservation) -> None: ...

    def rememberKey(self, session: Session, caller: Caller) -> None: ...


class AgentRules(Protocol):
    """
    What the agent profile says in a request (L{vehicle.agent.AgentProfile}).
    """

    async def checkCreate(self, caller: Caller, request: CreateRequest, model: str) -> str: ...

    def makeFolders(self, sessionId: str, sessionDir: Path) -> dict[str, FolderRecord]: ...

    def reserveSpare(self, model: str, tier: str) -> str | None: ...

    def unreserve(self, sessionId: str) -> None: ...

    async def precheck(self, session: Session) -> None: ...


class BodyRules(Protocol):
    """
    What the body package does for a request: a branch made from pi's file,
    a body let go before a delete.
    """

    async def branch(
        self, source: Session, caller: Caller, request: CommandRequest
    ) -> JSONObject: ...

    async def dispose(self, session: Session) -> None: ...

    def reserveSpare(self, model: str) -> str | None: ...

    def unreserve(self, sessionId: str) -> None: ...

    def makeFolders(self, sessionId: str, sessionDir: Path) -> dict[str, FolderRecord]: ...


def _unreserved(failure: Failure, rules: AgentRules | BodyRules, reserved: str) -> Failure:
    """
    A create refused after its spare was reserved: the spare is let go.
    """
    rules.unreserve(reserved)
    return failure


def refuseIfRunning(session: Session) -> None:
    """
    @raise VehicleError: C{session_running} while a run or a command is
        under way.
    """
    work: list[JSON] = [
        {"commandId": c.commandId, "type": c.type.value, "status": c.status.value}
        for c in session.openCommands()
    ]
    if work or session.running():
        raise VehicleError(
            "session_running",
            "a run or a command is still under way: abort first",
            {"open": work},
        )


@define(eq=False)
class Drive:
    """
    The host's rules of every request, once each, in the order trust (the
    web package) → parse (the web package) → which session → replay → rules →
    the session's verb.
    """

    registry: Registry
    chooseModel: Callable[[str | None], str]
    agent: AgentRules
    bodies: BodyRules
    maxTurns: int = 12
    maxCostUsd: float = 0.25
    leaseTtlMs: int = 30 * 60 * 1000
    #: Graph tools exist (an MCP URL is configured): bodies need a token.
    requireDelegation: bool = False
    public: PublicTurns | None = None

    def find(self, caller: Caller, sessionId: str) -> Session:
        """
        The caller's session (or C{not_found}); the caller's newest
        delegation token and own key are kept in its memory.
        """
        session = self.registry.find(caller, sessionId)
        if caller.delegatedToken is not None and caller.graphId == session.meta.graphId:
            session.delegatedToken = caller.delegatedToken
        if self.public is not None and session.meta.funding == "byok":
            self.public.rememberKey(session, caller)
        return session

    # -- a new session ----------------------------------------------------------

    async def create(self, caller: Caller, request: CreateRequest) -> JSONObject:
        if caller.graphId is None:
            raise VehicleError(
                "graph_required",
                "create a session through a graph's path (/g/<graph>/sessions)",
            )
        if request.graphId is not None and request.graphId != caller.graphId:
            raise VehicleError(
                "graph_mismatch",
                "graphId names another graph than the path this request came through",
                {"graphId": caller.graphId},
            )
        await self._replaySettled(caller, request)
        door = await self._public().chooseDoor(caller, request) if caller.public else None
        model = door.model if door is not None else self.chooseModel(request.model)
        isolation = None
        if request.chosenProfile == "agent":
            if caller.role != "owner":
                raise VehicleError(
                    "forbidden_profile",
                    "only the graph's owner may create an agent session",
                    {"role": caller.role},
                )
            isolation = await self.agent.checkCreate(caller, request, model)
            # The world may have changed while the box was probed.
            await self._replaySettled(caller, request)
        # A warm body is made for a session id of its own: the session
        # takes that id, and its folders.
        rules: AgentRules | BodyRules = self.bodies
        if request.chosenProfile == "agent":
            rules = self.agent
            reserved = self.agent.reserveSpare(model, isolation) if isolation is not None else None
        else:
            reserved = self.bodies.reserveSpare(model)
        try:
            made = self.registry.maker.create(
                caller,
                self._meta(caller, request, model, door, isolation, reserved),
                requestId=request.requestId,
                raw=request.raw,
                answerFor=lambda made: self._created(made, caller, request),
                title=request.title,
                claim=request.claims,
                ttlMs=request.ttlMs,
                makeFolders=(
                    rules.makeFolders
                    if request.chosenProfile == "agent" or reserved is not None else None
                ),
            )
        except BaseException:
            if reserved is not None:
                rules.unreserve(reserved)
            raise
        if reserved is not None:
            made.addErrback(_unreserved, rules, reserved)
        # The create goes on if its caller goes away (a retry replays it).
        session, sent = await raiseAtOnce(made)
        if self.public is not None and caller.public:
            self.public.rememberKey(session, caller)
        return sent

    def _meta(
        self, caller: Caller, request: CreateRequest, model: str, door: Door | None,
        isolation: str | None, sessionId: str | None = None,
    ) -> SessionMeta:
        """
        What the new session is fixed to (its id, when one is reserved for
        it): a public conversation's budget is the host's, whatever it asks.
        """
        assert caller.graphId is not None
        asked = request.budget
        if door is not None:
            budget = door.budget
        else:
            budget = RunBudget(
                maxTurns=asked.maxTurns if asked and asked.maxTurns is not None else self.maxTurns,
                maxCostUsd=(
                    asked.maxCostUsd if asked and asked.maxCostUsd is not None
                    else self.maxCostUsd
                ),
            )
        return SessionMeta(
            sessionId=sessionId or self.registry.newSessionId(),
            graphId=caller.graphId,
            principal=caller.principal,
            role=caller.role,
            profile=request.chosenProfile,
            model=model,
            createdAt=isoTimestamp(self.registry.clock.seconds()),
            budget=budget,
            isolation=isolation if request.chosenProfile == "agent" else None,
            funding=door.funding if door is not None else None,
            graphs=caller.publicGraphs if caller.public and caller.publicGraphs else None,
        )

    @staticmethod
    def _created(session: Session, caller: Caller, request: CreateRequest) -> Answer:
        session.delegatedToken = caller.delegatedToken
        return Answer(type="session.created", value=SessionCreated(
            session=session.summary(), clientId=caller.clientId, holdsLease=request.claims,
        ))

    async def _replaySettled(self, caller: Caller, request: CreateRequest) -> None:
        """
        L{_replayCreation}, once the same create under way (if any) has
        been served or refused.
        """
        waiting = self.registry.creationUnderWay(caller, request.requestId)
        while waiting is not None:
            await waiting
            waiting = self.registry.creationUnderWay(caller, request.requestId)
        self._replayCreation(caller, request)

    def _replayCreation(self, caller: Caller, request: CreateRequest) -> None:
        found = self.registry.replayCreation(caller, request.requestId, request.raw)
        if found is not None:
            raise Replayed(found)

    def _public(self) -> PublicTurns:
        if self.public is None:
            raise VehicleError("not_public", "public sessions are off on this host")
        return self.public

    # -- one session's verbs --------------------------------------------------------

    async def settledReplay(
        self, caller: Caller, session: Session, requestId: str, raw: JSONObject, route: str,
        chime: bool = False,
    ) -> Session:
        """
        The replay step (L{replay}), after the same request sent before has
        settled: a retry that comes while the first is being made durable
        waits for it, then replays it (or, refused, is taken afresh).  The
        session is found again after a wait (C{chime}: as a chime finds it).

        @return: the session, to take the request.
        @raise Replayed: for a request already answered.
        """
        waiting = session.answering(requestId)
        while waiting is not None:
            await waiting
            sessionId = session.sessionId
            session = (self.findForChime(caller, sessionId) if chime
                       else self.find(caller, sessionId))
            waiting = session.answering(requestId)
        replay(session, requestId, raw, route)
        return session

    async def claim(self, session: Session, caller: Caller, request: ClaimRequest) -> JSONObject:
        session = await self.settledReplay(caller, session, request.requestId, request.raw, "claim")
        return await session.claim(caller, request, self.leaseTtlMs)

    async def release(
        self, session: Session, caller: Caller, request: ReleaseRequest
    ) -> JSONObject:
        session = await self.settledReplay(
            caller, session, request.requestId, request.raw, "release"
        )
        return await session.release(caller, request.requestId, request.raw)

    async def rename(self, session: Session, caller: Caller, request: RenameRequest) -> JSONObject:
        if request.requestId is not None:
            session = await self.settledReplay(
                caller, session, request.requestId, request.raw, "rename"
            )
        return await session.rename(caller, request)

    async def command(
        self, session: Session, caller: Caller, request: CommandRequest
    ) -> tuple[int, JSONObject]:
        """
        A command: a branch (made by the body package from pi's file), or one
        command accepted for the session's body.

        @return: the HTTP status and the answer as sent.
        """
        session = await self.settledReplay(
            caller, session, request.requestId, request.raw, "commands"
        )
        kind = request.type
        if kind.branches:
            # Ownership is enough: the source is not touched.
            return 201, await self.bodies.branch(session, caller, request)
        startsBody = request.text is not None or kind == CommandType.acceptChime
        self._checkDelegation(session, kind)
        turns = (
            self.public
            if session.meta.funding is not None and kind in TEXT_COMMANDS
            else None
        )
        reservation: Reservation | None = None
        if turns is not None:
            session.meta.checkDriver(caller)
            session.requireLease(caller)
            # The ledger counts the turn and holds its budget before it is
            # accepted; the world may change while it answers.
            reservation = await turns.reserveTurn(session, caller, request)
        try:
            if reservation is not None:
                session = await self._replayAgain(caller, session, request)
            if startsBody and session.bodyState() == "dormant":
                # Refuse now, with the protocol's status, rather than accept a
                # command whose body cannot be made; the world may change
                # while that is looked at.
                session.meta.checkDriver(caller)
                await self.agent.precheck(session)
                session = await self._replayAgain(caller, session, request)
            sent = await session.command(caller, request)
        except BaseException:
            if turns is not None and reservation is not None:
                await turns.voidTurn(session, reservation)
            raise
        return 202, sent

    def _checkDelegation(self, session: Session, kind: CommandType) -> None:
        """
        @raise VehicleError: C{delegation_required}: a command that needs
            the owner's delegation token (to start a body, or to speak to
            one) and none came yet.
        """
        if (
            self.requireDelegation
            and (kind in TEXT_COMMANDS or kind == CommandType.acceptChime)
            and session.bodyState() != "live"
            and session.delegatedToken is None
        ):
            raise VehicleError(
                "delegation_required",
                "this session has no delegation token yet: the session's owner must "
                "send a request through its graph first",
            )

    async def _replayAgain(
        self, caller: Caller, session: Session, request: CommandRequest
    ) -> Session:
        """
        After a wait (the ledger, a body's precheck) the world may have
        changed: the session is found again, and the request replayed if
        it was answered meanwhile (L{settledReplay}).
        """
        return await self.settledReplay(
            caller, self.find(caller, session.sessionId), request.requestId,
            request.raw, "commands",
        )

    def findForChime(self, caller: Caller, sessionId: str) -> Session:
        """
        The session a collaborator chimes into (L{Registry.findForChime});
        a public conversation takes no chimes.
        """
        session = self.registry.findForChime(caller, sessionId)
        if session.meta.funding is not None or caller.public:
            raise VehicleError("chimes_closed", "a public conversation takes no chimes")
        return session

    async def chime(self, session: Session, caller: Caller, request: ChimeRequest) -> JSONObject:
        session = await self.settledReplay(
            caller, session, request.requestId, request.raw, "chimes", chime=True
        )
        # Under co-drive a chime becomes a command at once, unless that would
        # start a body that may not start now (no delegation token): then it
        # waits for the driver, as under suggest.
        immediate = not (
            self.requireDelegation
            and session.delegatedToken is None
            and session.bodyState() != "live"
        )
        return await session.chime(caller, request, immediate)

    async def delete(self, session: Session, caller: Caller) -> SessionDeleted:
        """
        Delete: refused while anything runs; the body is let go first, then
        the session is moved to the trash.
        """
        sessionId = session.sessionId
        refuseIfRunning(session)
        await self.bodies.dispose(session)
        session = self.find(caller, sessionId)  # still ours, still there
        refuseIfRunning(session)
        return await self.registry.delete(caller, session)
