"""
Tests for C{protocol/schemas/} and the helper in L{tests.support.schemas}: the
schemas are valid, agree with the host's own tables, and the helper
refuses what the protocol does not allow.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator
from twisted.trial.unittest import SynchronousTestCase

from vehicle.errors import STATUS
from vehicle.protocol import EPHEMERAL_TYPES, EVENT_TYPES
from vehicle.web import _frames

from tests.support.schemas import (
    SCHEMAS,
    assertValidEvent,
    assertValidFrame,
    problems,
    registry,
    schemas,
)


SPEC = Path("/work/shared/spec/vehicle-ride-protocol-v2.md")
TS = "2026-10-13T12:00:00.000Z"
HOLDER = {"principal": "alice", "clientId": "tab-1"}
LEASE = {**HOLDER, "ttlMs": 1000, "claimedAt": TS, "expiresAt": TS}
SUMMARY = {
    "sessionId": "s1",
    "graphId": "g1",
    "principal": "alice",
    "role": "owner",
    "profile": "chat",
    "model": "scripted/echo-1",
    "createdAt": TS,
    "budget": {"maxTurns": 12, "maxCostUsd": 0.25},
    "parent": None,
    "title": None,
    "preview": None,
    "access": "write",
    "updatedAt": TS,
    "cursor": 2,
    "status": "idle",
    "body": "dormant",
    "lease": LEASE,
    "roomPolicy": "suggest",
}


def frame(kind: str, value: Any, **extra: Any) -> dict[str, Any]:
    return {"protocol": "sophia.vehicle-ride.v2", "type": kind, "requestId": "r1",
            "value": value, **extra}


def event(kind: str, data: dict[str, Any], seq: int | None = 1) -> dict[str, Any]:
    out = {"type": kind, "timestamp": TS, "sessionId": "s1", "data": data}
    if seq is not None:
        out["seq"] = seq
    return out


def _refs(node: Any) -> list[str]:
    if isinstance(node, dict):
        found = [node["$ref"]] if "$ref" in node else []
        return found + [r for v in node.values() for r in _refs(v)]
    if isinstance(node, list):
        return [r for v in node for r in _refs(v)]
    return []


#: A capsule as the host makes one (the smallest: nothing said yet).
CAPSULE = {
    "format": "sophia.vehicle-session-capsule.v2",
    "identity": {"sessionId": "s1", "graphId": "g1", "profile": "chat", "access": "write",
                 "model": "scripted/echo-1", "parent": None},
    "posture": {"status": "idle", "body": "dormant", "cursor": 2,
                "leaseHolder": {"principal": "alice", "clientId": "alice"},
                "budget": {"maxTurns": 12, "maxCostUsd": 0.25}},
    "commands": {"counts": {}, "last": []},
    "milestones": [{"seq": 1, "type": "session.created"}],
    "transcript": [],
    "authority": {"mutations": False},
}


class SchemaFilesTests(SynchronousTestCase):
    """
    The schema files themselves.
    """

    def test_metaschema(self) -> None:
        """
        Every file is a valid draft 2020-12 schema with an C{$id} naming it.
        """
        self.assertTrue(len(schemas()) >= 12)
        for name, schema in schemas().items():
            Draft202012Validator.check_schema(schema)
            self.assertTrue(schema["$id"].endswith("/" + name), name)

    def test_refsResolve(self) -> None:
        """
        Every C{$ref} in every file resolves through the registry.
        """
        for name, schema in schemas().items():
            resolver = registry().resolver(base_uri=schema["$id"])
            for ref in _refs(schema):
                resolver.lookup(ref)  # raises when it does not resolve

    def test_requestSchemasAreTheHostsOwn(self) -> None:
        """
        The request schemas published in C{protocol/schemas/} are the very
        files the host validates against.
        """
        published = sorted(p.name for p in SCHEMAS.glob("*.request.schema.json"))
        used = sorted(p.name for p in _frames.SCHEMAS.glob("*.request.schema.json"))
        self.assertEqual(published, used)
        for name in published:
            self.assertEqual(
                json.loads((SCHEMAS / name).read_text()),
                json.loads((_frames.SCHEMAS / name).read_text()),
                name,
            )

    def test_frameTypesCoverTheSpec(self) -> None:
        """
        C{frame.schema.json} knows every frame type the spec lists (but
        C{error}, which has its own schema).
        """
        if not SPEC.exists():
            raise self.skipTest(f"{SPEC} is not here")
        text = SPEC.read_text()
        listed = text.split("A replayed request carries")[1].split("| error code")[0]
        types = set(re.findall(r"`([a-z.]+)`", listed)) - {"error"}
        self.assertGreater(len(types), 15)
        known = set(schemas()["frame.schema.json"]["properties"]["type"]["enum"])
        self.assertEqual(types - known, set())

    def test_eventTypesAreTheHostsOwn(self) -> None:
        """
        C{event.schema.json} has exactly the host's event types, each with a
        C{data} shape.
        """
        schema = schemas()["event.schema.json"]
        self.assertEqual(set(schema["properties"]["type"]["enum"]), EVENT_TYPES | EPHEMERAL_TYPES)
        self.assertEqual(set(schema["$defs"]), EVENT_TYPES | EPHEMERAL_TYPES)

    def test_eventTypesCoverTheSpec(self) -> None:
        """
        The host's event types are the ones the spec's "Watch" section names.
        """
        if not SPEC.exists():
            raise self.skipTest(f"{SPEC} is not here")
        watch = SPEC.read_text().split("Event types (payloads")[1].split("## Capsule")[0]
        named = set(re.findall(r"`([a-z]+\.[a-z_.]+)`", watch))
        self.assertGreater(len(named), 40)
        self.assertEqual(named, set(EVENT_TYPES))

    def test_errorCodesAreTheTable(self) -> None:
        """
        The error frame's codes are exactly L{vehicle.errors.STATUS}.
        """
        codes = schemas()["error.schema.json"]["properties"]["code"]["enum"]
        self.assertEqual(set(codes), set(STATUS))


class HelperAcceptsTests(SynchronousTestCase):
    """
    The helper passes what the protocol allows.
    """

    def test_frames(self) -> None:
        """
        Frames of each type the core answers, and a replayed one.
        """
        assertValidFrame(self, frame("session.created",
                                     {"session": SUMMARY, "clientId": "tab-1", "holdsLease": True}))
        assertValidFrame(self, frame("session.created",
                                     {"session": SUMMARY, "clientId": "tab-1", "holdsLease": True},
                                     replayed=True))
        assertValidFrame(self, frame("session.list", {"sessions": [SUMMARY]}))
        assertValidFrame(self, frame("driver.claimed",
                                     {"lease": LEASE, "tookOverFrom": HOLDER, "session": SUMMARY}))
        assertValidFrame(self, frame("driver.released",
                                     {"lease": None, "session": {**SUMMARY, "lease": None}}))
        assertValidFrame(self, frame("session.deleted", {"sessionId": "s1", "trashedAs": "s1-2"}))
        assertValidFrame(self, frame("watch.completed", {
            "events": [event("lease.claimed", {**HOLDER, "ttlMs": 5})], "cursor": 1, "more": False}))
        assertValidFrame(self, frame("session.capsule", CAPSULE))

    def test_errors(self) -> None:
        """
        Error frames, with and without details.
        """
        assertValidFrame(self, {"protocol": "sophia.vehicle-ride.v2", "type": "error",
                                "requestId": None, "code": "not_found",
                                "message": "no such session", "details": None})
        assertValidFrame(self, {"protocol": "sophia.vehicle-ride.v2", "type": "error",
                                "requestId": "r", "code": "lease_held", "message": "held",
                                "details": {"holder": LEASE, "canTakeOver": True}})

    def test_events(self) -> None:
        """
        Durable events with their data, an SSE event (with C{protocol}) and an
        ephemeral delta (no C{seq}).
        """
        assertValidEvent(self, event("lease.revoked", {**HOLDER, "by": HOLDER, "reason": "takeover"}))
        assertValidEvent(self, {**event("session.renamed", {"title": None}),
                                "protocol": "sophia.vehicle-ride.v2"})
        assertValidEvent(self, event("message.delta", {"runId": "run-1", "text": "hi"}, seq=None))
        assertValidEvent(self, event("run.started", {"runId": "run-1", "tools": []}))


class HelperRefusesTests(SynchronousTestCase):
    """
    The helper fails a test for each way a frame or event can be wrong.
    """

    def assertRefused(self, check: Any, instance: Any) -> None:
        self.assertRaises(self.failureException, check, self, instance)

    def test_frameEnvelope(self) -> None:
        """
        A frame without C{protocol}, with an unknown type, a stray field, or
        C{replayed: false} is refused.
        """
        good = frame("session.list", {"sessions": []})
        assertValidFrame(self, good)
        self.assertRefused(assertValidFrame, {k: v for k, v in good.items() if k != "protocol"})
        self.assertRefused(assertValidFrame, {**good, "type": "session.bogus"})
        self.assertRefused(assertValidFrame, {**good, "extra": 1})
        self.assertRefused(assertValidFrame, {**good, "replayed": False})
        self.assertRefused(assertValidFrame, [good])

    def test_frameValueByType(self) -> None:
        """
        The value is checked against its type's shape: a summary missing a
        field, a title that is not normalized, a bad lease.
        """
        value = {"session": SUMMARY, "clientId": "c", "holdsLease": True}
        assertValidFrame(self, frame("session.created", value))
        missing = {k: v for k, v in SUMMARY.items() if k != "cursor"}
        self.assertRefused(assertValidFrame, frame("session.created", {**value, "session": missing}))
        self.assertRefused(assertValidFrame, frame(
            "session.renamed", {"session": {**SUMMARY, "title": " padded "}}))
        self.assertRefused(assertValidFrame, frame(
            "session.renamed", {"session": {**SUMMARY, "title": "x" * 201}}))
        self.assertRefused(assertValidFrame, frame(
            "driver.claimed", {"lease": {**LEASE, "ttlMs": 0}, "tookOverFrom": None,
                               "session": SUMMARY}))
        self.assertRefused(assertValidFrame, frame(
            "watch.completed", {"events": [event("lease.claimed", {})], "cursor": 1, "more": False}))

    def test_errorFrame(self) -> None:
        """
        An unknown code, a missing message, or C{lease_held} without its
        holder is refused.
        """
        base = {"protocol": "sophia.vehicle-ride.v2", "type": "error", "requestId": None,
                "code": "not_found", "message": "no", "details": None}
        self.assertRefused(assertValidFrame, {**base, "code": "oops"})
        self.assertRefused(assertValidFrame, {k: v for k, v in base.items() if k != "message"})
        self.assertRefused(assertValidFrame, {**base, "code": "lease_held", "details": {}})
        self.assertRefused(assertValidFrame, {**base, "code": "session_running", "details": {}})

    def test_events(self) -> None:
        """
        A durable event without C{seq}, a delta with one, an unknown type,
        a bad timestamp or a wrong data shape is refused.
        """
        good = event("lease.expired", {**HOLDER, "reason": "ttl"})
        assertValidEvent(self, good)
        self.assertRefused(assertValidEvent, {k: v for k, v in good.items() if k != "seq"})
        self.assertRefused(assertValidEvent, event("message.delta", {}, seq=3))
        self.assertRefused(assertValidEvent, {**good, "type": "lease.bogus"})
        self.assertRefused(assertValidEvent, {**good, "timestamp": "yesterday"})
        self.assertRefused(assertValidEvent, {**good, "data": {**HOLDER, "reason": "takeover"}})
        self.assertRefused(assertValidEvent, event("session.deleted", {"trashedAs": "x"}))
        self.assertRefused(assertValidEvent, event("command.completed",
                                                   {"commandId": "c", "status": "failed"}))

    def test_problemsNamesThePlace(self) -> None:
        """
        The helper's message names where the instance is wrong.
        """
        found = problems("frame", frame("session.list", {"sessions": [{**SUMMARY, "cursor": -1}]}))
        self.assertTrue(any("sessions/0/cursor" in line for line in found), found)
