# -*- test-case-name: tests.test_session -*-
"""
The verbs on sessions, in one place: create, claim, release, rename and the
commands.  Each checks the caller's rights and the lease, consults and keeps
the idempotency record, and returns an answer C{{"type", "value"}} that the
web room wraps in a frame.
"""

from __future__ import annotations

from typing import Any

from vehicle.errors import VehicleError
from vehicle.session._registry import Registry
from vehicle.session._session import Session
from vehicle.session._values import (
    LEASED_COMMANDS,
    OPEN_STATUSES,
    WRITER_ROLES,
    Caller,
    SessionMeta,
)


Answer = dict[str, Any]


def answer(frameType: str, value: Any) -> Answer:
    return {"type": frameType, "value": value}


def createSession(
    registry: Registry,
    caller: Caller,
    body: dict[str, Any],
    *,
    model: str,
    maxTurns: int,
    maxCostUsd: float,
    isolation: str | None = None,
    makeFolders: Any = None,
) -> Answer:
    """
    A new session on the caller's bound graph.  The caller has already
    checked the replay, the graph and the model.
    """
    assert caller.graphId is not None
    budget = body.get("budget") or {}
    profile = body.get("profile", "chat")
    meta = SessionMeta(
        sessionId=registry.newSessionId(),
        graphId=caller.graphId,
        principal=caller.principal,
        role=caller.role,
        profile=profile,
        model=model,
        createdAt=registry.clock.seconds(),
        maxTurns=int(budget.get("maxTurns", maxTurns)),
        maxCostUsd=float(budget.get("maxCostUsd", maxCostUsd)),
        isolation=isolation if profile == "agent" else None,
    )
    claim = body.get("claim", True)
    session = registry.create(
        caller,
        meta,
        title=body.get("title"),
        claim=claim,
        ttlMs=body.get("ttlMs"),
        makeFolders=makeFolders if profile == "agent" else None,
    )
    session.delegatedToken = caller.delegatedToken
    result = answer(
        "session.created",
        {
            "session": session.summary(),
            "clientId": caller.clientId,
            "holdsLease": bool(claim),
        },
    )
    registry.rememberCreation(session, caller, body["requestId"], body, result)
    return result


def checkDriver(session: Session, caller: Caller) -> None:
    """
    May this caller drive the session at all (its role now)?

    @raise VehicleError: C{access_reduced}.
    """
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


def claim(session: Session, caller: Caller, body: dict[str, Any], defaultTtlMs: int) -> Answer:
    result = answer(
        "driver.claimed",
        session.claim(caller, body.get("ttlMs", defaultTtlMs), bool(body.get("takeover"))),
    )
    result["value"]["session"] = session.summary()
    session.remember("claim", caller, body["requestId"], body, result)
    return result


def release(session: Session, caller: Caller, body: dict[str, Any]) -> Answer:
    session.release(caller)
    result = answer("driver.released", {"lease": None, "session": session.summary()})
    session.remember("release", caller, body["requestId"], body, result)
    return result


def rename(session: Session, caller: Caller, body: dict[str, Any]) -> Answer:
    session.rename(body["title"])
    result = answer("session.renamed", {"session": session.summary()})
    if "requestId" in body:
        session.remember("rename", caller, body["requestId"], body, result)
    return result


def submitCommand(session: Session, caller: Caller, body: dict[str, Any]) -> Answer:
    """
    Accept one command: check rights and the lease, then hand it on.
    """
    kind = body["type"]
    if kind in LEASED_COMMANDS:
        checkDriver(session, caller)
        session.requireLease(caller)
    commandId = body.get("commandId") or body["requestId"]
    if commandId in session.commands:
        raise VehicleError(
            "command_exists",
            f"a command with id {commandId!r} already exists in this session",
            {"commandId": commandId},
        )
    if kind == "cancel":
        return _cancel(session, caller, body)
    if kind == "set_room_policy":
        return _roomPolicy(session, caller, body)
    if kind in ("accept_chime", "reject_chime"):
        chime = session.chimes.get(body["chimeId"])
        if chime is None or chime.get("status") != "pending":
            raise VehicleError(
                "chime_not_pending",
                f"chime {body['chimeId']!r} is not pending",
                {"chimeId": body["chimeId"]},
            )
    return session.acceptCommand(
        caller, body, lambda command: answer("command.accepted", {"command": dict(command)})
    )


def _cancel(session: Session, caller: Caller, body: dict[str, Any]) -> Answer:
    target = session.commands.get(body["targetCommandId"])
    if target is None or target["status"] not in ("accepted", "queued") or target["type"] not in (
        "prompt", "follow_up", "steer"
    ):
        raise VehicleError(
            "not_cancellable",
            f"command {body['targetCommandId']!r} is not waiting in the queue",
            {"targetCommandId": body["targetCommandId"],
             "status": target["status"] if target else None},
        )
    result = session.acceptCommand(
        caller,
        body,
        lambda command: answer(
            "command.cancelled", {"command": dict(command), "cancelled": body["targetCommandId"]}
        ),
    )
    if session.conductor is None:
        # Nothing was delivered anywhere: taking it out is just bookkeeping.
        session.setStatus(target["commandId"], "cancelled", reason="cancelled")
        session.setStatus(body.get("commandId") or body["requestId"], "completed")
    return result


def _roomPolicy(session: Session, caller: Caller, body: dict[str, Any]) -> Answer:
    session.roomPolicy = body["policy"]
    result = answer("room.policy", {"policy": body["policy"]})
    session.remember("policy", caller, body["requestId"], body, result)
    session.emit("room.policy", {"policy": body["policy"], "by": caller.holder()})
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
