# -*- test-case-name: tests.test_session -*-
"""
The verbs on sessions, in one place: create, claim, release, rename and the
commands.  Each checks the caller's rights and the lease, consults and keeps
the idempotency record, and returns an answer C{{"type", "value"}} that the
web room wraps in a frame.
"""

from __future__ import annotations

import uuid
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
    isoTimestamp,
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
    funding: str | None = None,
    graphs: tuple[str, ...] = (),
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
        # A public conversation's budget is the host's, whatever it asks.
        maxTurns=maxTurns if funding else int(budget.get("maxTurns", maxTurns)),
        maxCostUsd=maxCostUsd if funding else float(budget.get("maxCostUsd", maxCostUsd)),
        isolation=isolation if profile == "agent" else None,
        funding=funding,
        graphs=graphs,
    )
    claim = body.get("claim", True)

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
        title=body.get("title"),
        claim=claim,
        ttlMs=body.get("ttlMs"),
        makeFolders=makeFolders if profile == "agent" else None,
        requestId=body["requestId"],
        body=body,
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


def claim(session: Session, caller: Caller, body: dict[str, Any], defaultTtlMs: int) -> Answer:
    value, effects = session.leases.claimEffects(
        caller, int(body.get("ttlMs", defaultTtlMs)), bool(body.get("takeover"))
    )
    result = answer("driver.claimed", value)
    result["value"]["session"] = session.summary(ahead=len(effects))
    session.commit("claim", caller, body["requestId"], body, result, effects)
    return result


def release(session: Session, caller: Caller, body: dict[str, Any]) -> Answer:
    effects = session.leases.releaseEffects(caller)
    result = answer("driver.released", {"lease": None, "session": session.summary(ahead=len(effects))})
    session.commit("release", caller, body["requestId"], body, result, effects)
    return result


def rename(session: Session, caller: Caller, body: dict[str, Any]) -> Answer:
    return session.rename(
        caller, body, lambda ahead: answer("session.renamed", {"session": session.summary(ahead)})
    )


def submitCommand(session: Session, caller: Caller, body: dict[str, Any]) -> Answer:
    """
    Accept one command: check rights and the lease, then hand it on.
    """
    kind = body["type"]
    if kind in LEASED_COMMANDS:
        checkDriver(session, caller)
        session.requireLease(caller)
    if kind == "cancel":
        return _cancel(session, caller, body)
    if kind == "set_room_policy":
        return _roomPolicy(session, caller, body)
    if kind in ("accept_chime", "reject_chime"):
        return _resolveChime(session, caller, body)
    return session.acceptCommand(
        caller, body, lambda command: answer("command.accepted", {"command": dict(command)})
    )


def chime(
    session: Session, caller: Caller, body: dict[str, Any], immediate: bool = True
) -> Answer:
    """
    A collaborator's attributed message, as the room's policy says:
    refused (C{observe}, C{mute}), held for the driver (C{suggest}), or
    submitted at once under the driver's lease (C{co-drive}).
    """
    chimeId = "chime-" + uuid.uuid4().hex[:12]
    record: dict[str, Any] = {
        "chimeId": chimeId,
        "author": body["author"],
        "delivery": body.get("delivery", "follow_up"),
        "textBytes": len(body["text"].encode("utf-8")),
        "by": caller.holder(),
        "receivedAt": isoTimestamp(session.clock.seconds()),
    }
    policy = session.roomPolicy
    lease = session.currentLease()
    received = ("chime.received", {k: v for k, v in record.items() if k != "status"})
    if policy in ("observe", "mute"):
        record["status"] = "rejected"
        result = answer(
            "chime.rejected",
            {"chime": record, "reason": f"the room's policy is {policy}"},
        )
        session.commit(
            "chime", caller, body["requestId"], body, result,
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
            "text": body["text"],
            "chimeAuthor": body["author"],
        }
        received = ("chime.received", {k: v for k, v in record.items()
                                       if k not in ("status", "commandId")})
        return session.acceptCommand(
            driver, commandBody,
            lambda command: answer("command.accepted", {"command": dict(command)}),
            kind="chime", requester=caller, requestBody=body,
            before=[received],
            after=[("chime.resolved", {"chimeId": chimeId, "status": "accepted",
                                       "commandId": chimeId})],
            frameOf=lambda command: answer("chime.accepted", {"chime": record, "command": dict(command)}),
        )
    record["status"] = "pending"
    result = answer("chime.accepted", {"chime": record})
    session.commit("chime", caller, body["requestId"], body, result, [received])
    session.chimes[chimeId] = {**record, "text": body["text"]}
    return result


def _resolveChime(session: Session, caller: Caller, body: dict[str, Any]) -> Answer:
    chime = session.chimes.get(body["chimeId"])
    if chime is None or chime.get("status") != "pending":
        raise VehicleError(
            "chime_not_pending",
            f"chime {body['chimeId']!r} is not pending",
            {"chimeId": body["chimeId"]},
        )
    if body["type"] == "reject_chime":
        result = answer(
            "chime.rejected",
            {"chime": {**_public(chime), "status": "rejected"}, "reason": "the driver declined it"},
        )
        session.commit(
            "policy", caller, body["requestId"], body, result,
            [("chime.resolved", {"chimeId": chime["chimeId"], "status": "rejected",
                                 "by": caller.holder()})],
        )
        chime["status"] = "rejected"
        return result
    commandId = body.get("commandId") or body["requestId"]
    result = session.acceptCommand(
        caller,
        body,
        lambda command: answer("command.accepted", {"command": dict(command)}),
        extra={"text": chime["text"], "chimeAuthor": chime["author"], "delivery": chime["delivery"]},
        after=[("chime.resolved", {"chimeId": chime["chimeId"], "status": "accepted",
                                   "commandId": commandId, "by": caller.holder()})],
    )
    chime["status"] = "accepted"
    return result


def _public(chime: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in chime.items() if k != "text"}


def _cancel(session: Session, caller: Caller, body: dict[str, Any]) -> Answer:
    target = session.commands.get(body["targetCommandId"])
    if target is None or target["status"] not in ("accepted", "queued") or "text" not in target:
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
    result = answer("room.policy", {"policy": body["policy"]})
    session.commit(
        "policy", caller, body["requestId"], body, result,
        [("room.policy", {"policy": body["policy"], "by": caller.holder()})],
    )
    session.roomPolicy = body["policy"]
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
