# -*- test-case-name: tests.unit.test_web,tests.unit.test_chimes -*-
"""
The drive step: every rule of a request on sessions, in one place.  The web
room authenticates and parses; L{Drive} then replays (L{Replayed}), applies
the rules (rights, the lease, delegation, public turns, the agent profile),
accepts (the session's one durable step) and returns an answer
C{{"type", "value"}} that the web room wraps in a frame.  The verbs below
(L{claim}, L{release}, L{submitCommand}, L{chime}, ...) are the rules of
one session; L{Drive} joins them to the host's parts, handed down as
interfaces (L{PublicTurns}, L{AgentRules}, L{BodyRules}); who follows a
session's life is told by the session itself (L{Observers}).
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any, Callable, Protocol

from attrs import define
from twisted.logger import Logger

from vehicle.errors import VehicleError
from vehicle.session._registry import Registry
from vehicle.session._session import Session, normalizeTitle
from vehicle.session._values import (
    LEASED_COMMANDS,
    OPEN_STATUSES,
    TEXT_COMMANDS,
    WRITER_ROLES,
    Caller,
    SessionMeta,
    isoTimestamp,
)


Answer = dict[str, Any]

_log = Logger()


def answer(frameType: str, value: Any) -> Answer:
    return {"type": frameType, "value": value}


def createSession(
    registry: Registry,
    caller: Caller,
    request: dict[str, Any],
    *,
    model: str,
    maxTurns: int,
    maxCostUsd: float,
    isolation: str | None = None,
    makeFolders: Any = None,
    funding: str | None = None,
    graphs: tuple[str, ...] = (),
) -> Answer:
    """
    A new session on the caller's bound graph.  The caller has already
    checked the replay, the graph and the model.
    """
    assert caller.graphId is not None
    budget = request.get("budget") or {}
    profile = request.get("profile", "chat")
    meta = SessionMeta(
        sessionId=registry.newSessionId(),
        graphId=caller.graphId,
        principal=caller.principal,
        role=caller.role,
        profile=profile,
        model=model,
        createdAt=registry.clock.seconds(),
        # A public conversation's budget is the host's, whatever it asks.
        maxTurns=maxTurns if funding else int(budget.get("maxTurns", maxTurns)),
        maxCostUsd=maxCostUsd if funding else float(budget.get("maxCostUsd", maxCostUsd)),
        isolation=isolation if profile == "agent" else None,
        funding=funding,
        graphs=graphs,
    )
    claim = request.get("claim", True)

    def frameFor(session: Session) -> Answer:
        session.delegatedToken = caller.delegatedToken
        return answer(
            "session.created",
            {
                "session": session.summary(),
                "clientId": caller.clientId,
                "holdsLease": bool(claim),
            },
        )

    _, result = registry.create(
        caller,
        meta,
        title=request.get("title"),
        claim=claim,
        ttlMs=request.get("ttlMs"),
        makeFolders=makeFolders if profile == "agent" else None,
        requestId=request["requestId"],
        request=request,
        frameFor=frameFor,
    )
    return result


def requireGraphPath(session: Session, caller: Caller, verb: str) -> None:
    """
    Without the graph in the path the host does not know the caller's role
    on it (only their grant's highest role): no driving or branching so.

    @raise VehicleError: C{access_reduced}.
    """
    if caller.graphId is None:
        raise VehicleError(
            "access_reduced",
            f"{verb} a session through its graph's path (/g/<graph>/...), where your role "
            "on that graph is known",
            {"graphId": session.meta.graphId},
        )


def checkDriver(session: Session, caller: Caller) -> None:
    """
    May this caller drive the session at all (its role now)?

    @raise VehicleError: C{access_reduced}.
    """
    requireGraphPath(session, caller, "drive")
    if session.meta.access == "write" and caller.role not in WRITER_ROLES:
        raise VehicleError(
            "access_reduced",
            "your role on this graph now only reads; this session writes",
            {"role": caller.role},
        )
    if session.meta.profile == "agent" and caller.role != "owner":
        raise VehicleError(
            "access_reduced",
            "an agent session is driven only by the graph's owner",
            {"role": caller.role},
        )


def claim(session: Session, caller: Caller, request: dict[str, Any], defaultTtlMs: int) -> Answer:
    value, effects = session.leases.claimEffects(
        caller, int(request.get("ttlMs", defaultTtlMs)), bool(request.get("takeover"))
    )
    result = answer("driver.claimed", value)
    result["value"]["session"] = session.summary(ahead=len(effects))
    session.commit("claim", caller, request["requestId"], request, result, effects)
    return result


def release(session: Session, caller: Caller, request: dict[str, Any]) -> Answer:
    effects = session.leases.releaseEffects(caller)
    result = answer("driver.released", {"lease": None, "session": session.summary(ahead=len(effects))})
    session.commit("release", caller, request["requestId"], request, result, effects)
    return result


def rename(session: Session, caller: Caller, request: dict[str, Any]) -> Answer:
    """
    Rename: the event is the step (with the request's record when it has a
    C{requestId}); C{meta.json} follows, and is put right at start should
    the host be cut between the two.
    """
    session.title = normalizeTitle(request["title"])
    result = answer("session.renamed", {"session": session.summary(1)})
    session.commit(
        "rename", caller, request.get("requestId"), request, result,
        [("session.renamed", {"title": session.title})],
    )
    try:
        session.writeMeta()
    except OSError as e:
        # The title is durable in the log; meta.json is put right at start.
        _log.warn(
            "Session {sessionId}: meta.json could not be rewritten ({error}); "
            "the title is kept in the log", sessionId=session.sessionId, error=str(e),
        )
    session.observers.renamed(session)
    return result


def submitCommand(session: Session, caller: Caller, request: dict[str, Any]) -> Answer:
    """
    Accept one command: check rights and the lease, then hand it on.
    """
    kind = request["type"]
    if kind in LEASED_COMMANDS:
        checkDriver(session, caller)
        session.leases.require(caller)
    if kind == "cancel":
        return _cancel(session, caller, request)
    if kind == "set_room_policy":
        return _roomPolicy(session, caller, request)
    if kind in ("accept_chime", "reject_chime"):
        return _resolveChime(session, caller, request)
    return session.book.accept(
        caller, request, lambda command: answer("command.accepted", {"command": dict(command)})
    )


def chime(
    session: Session, caller: Caller, request: dict[str, Any], immediate: bool = True
) -> Answer:
    """
    A collaborator's attributed message, as the room's policy says:
    refused (C{observe}, C{mute}), held for the driver (C{suggest}), or
    submitted at once under the driver's lease (C{co-drive}).
    """
    chimeId = "chime-" + uuid.uuid4().hex[:12]
    record: dict[str, Any] = {
        "chimeId": chimeId,
        "author": request["author"],
        "delivery": request.get("delivery", "follow_up"),
        "textBytes": len(request["text"].encode("utf-8")),
        "by": caller.holder(),
        "receivedAt": isoTimestamp(session.clock.seconds()),
    }
    policy = session.room.policy
    lease = session.currentLease()
    received = ("chime.received", {k: v for k, v in record.items() if k != "status"})
    if policy in ("observe", "mute"):
        record["status"] = "rejected"
        result = answer(
            "chime.rejected",
            {"chime": record, "reason": f"the room's policy is {policy}"},
        )
        session.commit(
            "chime", caller, request["requestId"], request, result,
            [("chime.resolved", {"chimeId": chimeId, "status": "rejected", "reason": policy})],
        )
        return result
    if policy == "co-drive" and lease is not None and immediate:
        record["status"] = "accepted"
        record["commandId"] = chimeId
        driver = Caller(
            principal=lease.principal,
            clientId=lease.clientId,
            role=session.meta.role,  # type: ignore[arg-type]
            graphId=session.meta.graphId,
        )
        commandBody = {
            "type": record["delivery"],
            "requestId": chimeId,
            "text": request["text"],
            "chimeAuthor": request["author"],
        }
        received = ("chime.received", {k: v for k, v in record.items()
                                       if k not in ("status", "commandId")})
        return session.book.accept(
            driver, commandBody,
            lambda command: answer("command.accepted", {"command": dict(command)}),
            kind="chime", requester=caller, requestBody=request,
            before=[received],
            after=[("chime.resolved", {"chimeId": chimeId, "status": "accepted",
                                       "commandId": chimeId})],
            frameOf=lambda command: answer("chime.accepted", {"chime": record, "command": dict(command)}),
        )
    record["status"] = "pending"
    result = answer("chime.accepted", {"chime": record})
    session.commit("chime", caller, request["requestId"], request, result, [received])
    session.room.hold(record, request["text"])
    return result


def _resolveChime(session: Session, caller: Caller, request: dict[str, Any]) -> Answer:
    chime = session.room.pending(request["chimeId"])
    if chime is None:
        raise VehicleError(
            "chime_not_pending",
            f"chime {request['chimeId']!r} is not pending",
            {"chimeId": request["chimeId"]},
        )
    if request["type"] == "reject_chime":
        result = answer(
            "chime.rejected",
            {"chime": {**_public(chime), "status": "rejected"}, "reason": "the driver declined it"},
        )
        session.commit(
            "policy", caller, request["requestId"], request, result,
            [("chime.resolved", {"chimeId": chime["chimeId"], "status": "rejected",
                                 "by": caller.holder()})],
        )
        session.room.resolve(chime["chimeId"], "rejected")
        return result
    commandId = request.get("commandId") or request["requestId"]
    result = session.book.accept(
        caller,
        request,
        lambda command: answer("command.accepted", {"command": dict(command)}),
        extra={"text": chime["text"], "chimeAuthor": chime["author"], "delivery": chime["delivery"]},
        after=[("chime.resolved", {"chimeId": chime["chimeId"], "status": "accepted",
                                   "commandId": commandId, "by": caller.holder()})],
    )
    session.room.resolve(chime["chimeId"], "accepted")
    return result


def _public(chime: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in chime.items() if k != "text"}


def _cancel(session: Session, caller: Caller, request: dict[str, Any]) -> Answer:
    target = session.commands.get(request["targetCommandId"])
    if target is None or target["status"] not in ("accepted", "queued") or "text" not in target:
        raise VehicleError(
            "not_cancellable",
            f"command {request['targetCommandId']!r} is not waiting in the queue",
            {"targetCommandId": request["targetCommandId"],
             "status": target["status"] if target else None},
        )
    result = session.book.accept(
        caller,
        request,
        lambda command: answer(
            "command.cancelled", {"command": dict(command), "cancelled": request["targetCommandId"]}
        ),
    )
    if session.conductor is None:
        # Nothing was delivered anywhere: taking it out is just bookkeeping.
        session.setStatus(target["commandId"], "cancelled", reason="cancelled")
        session.setStatus(request.get("commandId") or request["requestId"], "completed")
    return result


def _roomPolicy(session: Session, caller: Caller, request: dict[str, Any]) -> Answer:
    result = answer("room.policy", {"policy": request["policy"]})
    session.commit(
        "policy", caller, request["requestId"], request, result,
        [("room.policy", {"policy": request["policy"], "by": caller.holder()})],
    )
    session.room.policy = request["policy"]
    return result


def openWork(session: Session) -> list[dict[str, Any]]:
    """
    What stops a delete: the open commands (and a run under way).
    """
    return [
        {"commandId": c["commandId"], "type": c["type"], "status": c["status"]}
        for c in session.commands.values()
        if c["status"] in OPEN_STATUSES
    ]


# -- the drive step ------------------------------------------------------


class Replayed(Exception):
    """
    A request already answered: the web room answers its frame again
    (C{replayed: true}).
    """

    def __init__(self, result: Answer) -> None:
        super().__init__(result["type"])
        self.result = result


def replay(session: Session, request: dict[str, Any], route: str) -> None:
    """
    The replay step of a session's request, once for every verb.

    @raise Replayed: for a request already answered.
    @raise VehicleError: C{request_id_conflict} for its id with another body.
    """
    if "requestId" in request:
        found = session.replay(request["requestId"], request, route)
        if found is not None:
            raise Replayed(found)


class PublicTurns(Protocol):
    """
    What public mode says in a request (L{vehicle.public.Public}).
    """

    async def chooseDoor(self, caller: Caller, request: dict[str, Any]) -> dict[str, Any]: ...

    async def reserveTurn(self, session: Session, caller: Caller, request: dict[str, Any]) -> Any: ...

    async def voidTurn(self, session: Session, reservation: Any) -> None: ...

    def rememberKey(self, session: Session, caller: Caller) -> None: ...


class AgentRules(Protocol):
    """
    What the agent profile says in a request (L{vehicle.agent.AgentProfile}).
    """

    async def checkCreate(self, caller: Caller, request: dict[str, Any]) -> str: ...

    def makeFolders(self, sessionId: str, sessionDir: Path) -> dict[str, Any]: ...

    def recordFolders(self, sessionId: str, sessionDir: Path) -> dict[str, Any]: ...

    async def precheck(self, session: Session) -> None: ...


class BodyRules(Protocol):
    """
    What the body room does for a request: a branch made from pi's file,
    a body let go before a delete.
    """

    async def branch(self, source: Session, caller: Caller, request: dict[str, Any]) -> Answer: ...

    async def dispose(self, session: Session) -> None: ...


@define(eq=False)
class Drive:
    """
    Every rule of a request, once each, in the order trust (the web room)
    → parse (the web room) → replay → rules → accept → answer.
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

    async def create(self, caller: Caller, request: dict[str, Any]) -> Answer:
        if caller.graphId is None:
            raise VehicleError(
                "graph_required",
                "create a session through a graph's path (/g/<graph>/sessions)",
            )
        if "graphId" in request and request["graphId"] != caller.graphId:
            raise VehicleError(
                "graph_mismatch",
                "graphId names another graph than the path this request came through",
                {"graphId": caller.graphId},
            )
        self._replayCreation(caller, request)
        door: dict[str, Any] = {}
        if caller.public:
            door = await self._public().chooseDoor(caller, request)
            model = door["model"]
        else:
            model = self.chooseModel(request.get("model"))
        isolation = None
        if request.get("profile") == "agent":
            if caller.role != "owner":
                raise VehicleError(
                    "forbidden_profile",
                    "only the graph's owner may create an agent session",
                    {"role": caller.role},
                )
            isolation = await self.agent.checkCreate(caller, request)
            # The world may have changed while the box was probed.
            self._replayCreation(caller, request)
        result = createSession(
            self.registry,
            caller,
            request,
            model=model,
            maxTurns=door.get("maxTurns", self.maxTurns),
            maxCostUsd=door.get("maxCostUsd", self.maxCostUsd),
            isolation=isolation,
            makeFolders=self.agent.makeFolders,
            funding=door.get("funding"),
            graphs=caller.publicGraphs if caller.public else (),
        )
        if self.public is not None and caller.public:
            session = self.registry.sessions[result["value"]["session"]["sessionId"]]
            self.public.rememberKey(session, caller)
        return result

    def _replayCreation(self, caller: Caller, request: dict[str, Any]) -> None:
        found = self.registry.replayCreation(caller, request["requestId"], request)
        if found is not None:
            raise Replayed(found)

    def _public(self) -> PublicTurns:
        if self.public is None:
            raise VehicleError("not_public", "public sessions are off on this host")
        return self.public

    def claim(self, session: Session, caller: Caller, request: dict[str, Any]) -> Answer:
        replay(session, request, "claim")
        checkDriver(session, caller)
        return claim(session, caller, request, self.leaseTtlMs)

    def release(self, session: Session, caller: Caller, request: dict[str, Any]) -> Answer:
        replay(session, request, "release")
        return release(session, caller, request)

    def rename(self, session: Session, caller: Caller, request: dict[str, Any]) -> Answer:
        replay(session, request, "rename")
        return rename(session, caller, request)

    async def command(
        self, session: Session, caller: Caller, request: dict[str, Any]
    ) -> tuple[int, Answer]:
        """
        A command: a branch (made by the body room from pi's file), or one
        command accepted for the session's body.

        @return: the HTTP status and the answer.
        """
        replay(session, request, "commands")
        kind = request["type"]
        if kind in ("fork", "clone"):
            # Ownership is enough: the source is not touched.
            return 201, await self.bodies.branch(session, caller, request)
        startsBody = "text" in request or kind == "accept_chime"
        if (
            self.requireDelegation
            and (kind in TEXT_COMMANDS or kind == "accept_chime")
            and session.bodyState() != "live"
            and session.delegatedToken is None
        ):
            raise VehicleError(
                "delegation_required",
                "this session has no delegation token yet: the session's owner must "
                "send a request through its graph first",
            )
        turns = (
            self.public
            if session.meta.funding is not None and kind in TEXT_COMMANDS
            else None
        )
        reservation = None
        if turns is not None:
            checkDriver(session, caller)
            session.leases.require(caller)
            # The ledger counts the turn and holds its budget before it is
            # accepted; the world may change while it answers.
            reservation = await turns.reserveTurn(session, caller, request)
        try:
            if reservation is not None:
                session = self.find(caller, session.sessionId)
                replay(session, request, "commands")
            if startsBody and session.bodyState() == "dormant":
                # Refuse now, with the protocol's status, rather than accept a
                # command whose body cannot be made; the world may change
                # while that is looked at.
                checkDriver(session, caller)
                await self.agent.precheck(session)
                session = self.find(caller, session.sessionId)
                replay(session, request, "commands")
            result = submitCommand(session, caller, request)
        except BaseException:
            if turns is not None and reservation is not None:
                await turns.voidTurn(session, reservation)
            raise
        return 202, result

    def findForChime(self, caller: Caller, sessionId: str) -> Session:
        """
        The session a collaborator chimes into (L{Registry.findForChime});
        a public conversation takes no chimes.
        """
        session = self.registry.findForChime(caller, sessionId)
        if session.meta.funding is not None or caller.public:
            raise VehicleError("chimes_closed", "a public conversation takes no chimes")
        return session

    def chime(self, session: Session, caller: Caller, request: dict[str, Any]) -> Answer:
        replay(session, request, "chimes")
        # Under co-drive a chime becomes a command at once, unless that would
        # start a body that may not start now (no delegation token): then it
        # waits for the driver, as under suggest.
        immediate = not (
            self.requireDelegation
            and session.delegatedToken is None
            and session.bodyState() != "live"
        )
        return chime(session, caller, request, immediate)

    async def delete(self, session: Session, caller: Caller) -> Answer:
        """
        Delete: refused while anything runs; the body is let go first, then
        the session is moved to the trash.
        """
        sessionId = session.sessionId
        refuseIfRunning(session)
        await self.bodies.dispose(session)
        session = self.find(caller, sessionId)  # still ours, still there
        refuseIfRunning(session)
        parts = self.registry.observers.deleting(session)
        trashedAs = self.registry.maker.delete(caller, session)
        return answer("session.deleted", {"sessionId": sessionId, "trashedAs": trashedAs, **parts})


def refuseIfRunning(session: Session) -> None:
    """
    @raise VehicleError: C{session_running} while a run or a command is
        under way.
    """
    work = openWork(session)
    if work or session.running():
        raise VehicleError(
            "session_running",
            "a run or a command is still under way: abort first",
            {"open": work},
        )
