"""
Tests for L{vehicle.protocol}: the protocol's values and the one codec
between them and JSON.  A value written and read back is the same value;
a field left out of the JSON while it is L{None} stays out; a request
keeps the body it was read from; a command moves only as the table says;
and what the host writes of each value is what the spec's schemas allow.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from twisted.trial.unittest import SynchronousTestCase

from vehicle.errors import VehicleError
from vehicle.protocol import (
    MOVES,
    Answer,
    Chime,
    ClaimRequest,
    Command,
    CommandAccepted,
    CommandRequest,
    CommandStatus,
    CommandType,
    CreateRequest,
    Event,
    HeldChime,
    Holder,
    RequestRecord,
    RunBudget,
    fromJSON,
    fromRequest,
    toJSON,
    toObject,
)
from vehicle.session._requests import eventOf, recordOf

from tests.support.schemas import assertValidEvent, assertValidFrame


ALICE = Holder(principal="alice", clientId="tab-1")
AT = "2026-12-01T10:00:00.000Z"


def command(**fields: Any) -> Command:
    values: dict[str, Any] = {
        "commandId": "c1", "requestId": "c1", "type": CommandType.prompt, "acceptedAt": AT,
        "updatedAt": AT, "by": ALICE, "text": "hello",
    }
    values.update(fields)
    return Command(**values)


class CommandJSONTests(SynchronousTestCase):
    """
    A command's JSON is the record the snapshot shows.
    """

    def test_shape(self) -> None:
        """
        Every required field is there (C{disposition} as null); an absent
        optional one is left out; enums travel as their strings.
        """
        out = toJSON(command())
        self.assertEqual(out, {
            "commandId": "c1", "requestId": "c1", "type": "prompt", "status": "accepted",
            "disposition": None, "acceptedAt": AT, "updatedAt": AT,
            "by": {"principal": "alice", "clientId": "tab-1"}, "text": "hello",
        })
        self.assertIs(type(out["type"]), str)
        self.assertIs(type(out["status"]), str)

    def test_roundTrip(self) -> None:
        original = command(contextRefs=("doc-1",), status=CommandStatus.failed,
                           error="no body", code="body_exited")
        self.assertEqual(fromJSON(json.loads(json.dumps(toJSON(original))), Command), original)

    def test_notACommand(self) -> None:
        """
        A record that is not a command is refused with a L{ValueError}.
        """
        for bad in ({}, {**toObject(command()), "type": "dance"},
                    {**toObject(command()), "status": 3}, {**toObject(command()), "by": "alice"}):
            self.assertRaises(ValueError, fromJSON, bad, Command)


class MoveTests(SynchronousTestCase):
    """
    The moves a command may make, in one place.
    """

    def test_settledStays(self) -> None:
        for final in (s for s in CommandStatus if s.final):
            self.assertEqual(MOVES[final], frozenset())
            self.assertIsNone(command(status=final).moved(CommandStatus.completed, AT))

    def test_openMayEnd(self) -> None:
        for status in (s for s in CommandStatus if s.open):
            for ending in (s for s in CommandStatus if s.final):
                moved = command(status=status).moved(ending, "later", reason="r")
                assert moved is not None
                self.assertEqual((moved.status, moved.updatedAt, moved.reason),
                                 (ending, "later", "r"))

    def test_noWayBackToQueued(self) -> None:
        self.assertIsNone(command(status=CommandStatus.delivered).moved(CommandStatus.queued, AT))
        self.assertIsNone(command().moved(CommandStatus.accepted, AT))

    def test_factsKept(self) -> None:
        """
        A move keeps what earlier moves said unless it says otherwise.
        """
        delivered = command().moved(CommandStatus.delivered, AT, disposition="started")
        assert delivered is not None
        done = delivered.moved(CommandStatus.completed, "later")
        assert done is not None
        self.assertEqual(done.disposition, "started")

    def test_announced(self) -> None:
        self.assertFalse(CommandStatus.queued.announced)
        self.assertFalse(CommandStatus.accepted.announced)
        self.assertTrue(CommandStatus.delivered.announced)


class RequestTests(SynchronousTestCase):
    """
    A request is read once, keeping the body it came as.
    """

    def test_keepsItsBody(self) -> None:
        body = {"type": "follow_up", "requestId": "r1", "text": "more", "contextRefs": ["d"]}
        request = fromRequest(body, CommandRequest)
        self.assertEqual(request.type, CommandType.followUp)
        self.assertEqual(request.contextRefs, ("d",))
        self.assertIs(request.raw, body)
        self.assertEqual(request.id, "r1")
        self.assertEqual(fromRequest({**body, "commandId": "c9"}, CommandRequest).id, "c9")

    def test_bodyIsNotCompared(self) -> None:
        """
        Two requests that say the same are equal, however they were sent.
        """
        one = fromRequest({"requestId": "r", "ttlMs": 5}, ClaimRequest)
        two = fromRequest({"ttlMs": 5, "requestId": "r"}, ClaimRequest)
        self.assertEqual(one, two)

    def test_defaults(self) -> None:
        create = fromRequest({"requestId": "r"}, CreateRequest)
        self.assertEqual((create.chosenProfile, create.claims), ("chat", True))
        self.assertFalse(fromRequest({"requestId": "r", "claim": False}, CreateRequest).claims)

    def test_wrongShape(self) -> None:
        """
        What the schema would have refused is refused here too, as
        C{invalid_request}, never a traceback.
        """
        for bad in ({"type": "prompt"}, {"type": "nope", "requestId": "r"},
                    {"type": "prompt", "requestId": 5}, {"type": "prompt", "requestId": "r",
                                                         "contextRefs": "d"}):
            error = self.assertRaises(VehicleError, fromRequest, bad, CommandRequest)
            self.assertEqual(error.code, "invalid_request")

    def test_numbersStayAsSent(self) -> None:
        """
        A float field sent as an integer is still that integer in JSON.
        """
        create = fromRequest({"requestId": "r", "budget": {"maxCostUsd": 1}}, CreateRequest)
        assert create.budget is not None
        self.assertEqual(json.dumps(toJSON(create.budget)), '{"maxTurns": null, "maxCostUsd": 1}')


class AnswerTests(SynchronousTestCase):
    """
    An answer is a frame's type and value; what the host sends of it is a
    frame the schemas allow.
    """

    def test_commandAccepted(self) -> None:
        sent = toObject(Answer(type="command.accepted", value=CommandAccepted(command=command())))
        self.assertEqual(sent["type"], "command.accepted")
        assertValidFrame(self, {"protocol": "sophia.vehicle-ride.v2", "requestId": "c1", **sent})

    def test_heldChime(self) -> None:
        """
        A held chime carries its words; its record does not.
        """
        held = HeldChime(chimeId="ch1", author="Bea", delivery="steer", textBytes=2, by=ALICE,
                         receivedAt=AT, status="pending", text="hi")
        self.assertEqual(toObject(held)["text"], "hi")
        record = held.record()
        self.assertIsInstance(record, Chime)
        self.assertNotIn("text", toObject(record))
        self.assertEqual(fromJSON(toObject(held), HeldChime), held)

    def test_bodyViewWithMirror(self) -> None:
        """
        L{BodyView.withMirror} is C{attrs.evolve} with the mirror: every
        other field carried over (each set here to other than its default,
        so a field added and not carried fails).
        """
        from attrs import NOTHING, evolve, fields

        from vehicle.protocol import BodyView, MirrorState, PiQueue

        view = BodyView(transcript=({"id": "m1"},), queue=PiQueue(steering=("s",)),
                        tools=("read",), stats={"tokens": 1},
                        mirror=MirrorState(state="pending", reason="waiting"))
        for f in fields(BodyView):
            self.assertNotIn(getattr(view, f.name), (f.default, NOTHING), f.name)
        mirror = MirrorState(state="written", documentId="d1")
        self.assertEqual(view.withMirror(mirror), evolve(view, mirror=mirror))


class EventTests(SynchronousTestCase):
    """
    Events as the log keeps them and watchers see them.
    """

    def test_durable(self) -> None:
        event = Event(seq=3, type="run.started", timestamp=AT, sessionId="s1",
                      data={"runId": "run-1", "tools": []})
        self.assertTrue(event.durable)
        assertValidEvent(self, toObject(event))
        self.assertEqual(eventOf(toObject(event)), event)

    def test_ephemeral(self) -> None:
        event = Event(type="message.delta", timestamp=AT, sessionId="s1",
                      data={"runId": "run-1", "text": "w"})
        self.assertFalse(event.durable)
        self.assertNotIn("seq", toObject(event))

    def test_dataNotAnObject(self) -> None:
        """
        An event whose data is not an object (an older log) reads as empty.
        """
        line = {"seq": 1, "type": "body.notice", "timestamp": AT, "sessionId": "s1",
                "data": None}
        self.assertEqual(eventOf(line).data, {})


class RecordTests(SynchronousTestCase):
    """
    A request's record, written and read back through the codec.
    """

    def test_roundTrip(self) -> None:
        record = RequestRecord(
            kind="command", requestId="r1", principal="alice", clientId="tab-1",
            fingerprint="f", at=AT, body={"type": "prompt"}, frame={"type": "x", "value": {}},
            cursor=3, effects=[("command.accepted", {"commandId": "c1"})], command=command(),
        )
        line = json.loads(json.dumps(toJSON(record)))
        self.assertEqual(line["effects"], [["command.accepted", {"commandId": "c1"}]])
        self.assertEqual(recordOf(line), record)

    def test_oddPartsLeftOut(self) -> None:
        """
        A part in a shape the host never wrote is left out; the rest counts.
        """
        line = {"kind": "command", "requestId": "r1", "principal": "a", "clientId": "b",
                "fingerprint": 7, "cursor": "3", "effects": {"x": 1},
                "command": {"what": "not a command"}, "body": None, "frame": None}
        record = recordOf(line)
        self.assertEqual(
            (record.fingerprint, record.cursor, record.effects, record.command, record.body,
             record.frame),
            (None, None, None, None, {}, {}),
        )

    def test_notARecord(self) -> None:
        self.assertRaises(ValueError, recordOf, {"kind": "dance"})


class RoundTripPropertyTests(SynchronousTestCase):
    """
    Any command survives the codec and JSON unchanged.
    """

    @given(
        st.sampled_from(list(CommandType)),
        st.sampled_from(list(CommandStatus)),
        st.one_of(st.none(), st.text()),
        st.one_of(st.none(), st.lists(st.text(), max_size=3).map(tuple)),
        st.one_of(st.none(), st.sampled_from(["started", "queued", "handled"])),
    )
    def test_command(
        self, kind: CommandType, status: CommandStatus, text: str | None,
        refs: tuple[str, ...] | None, disposition: Any,
    ) -> None:
        original = command(type=kind, status=status, text=text, contextRefs=refs,
                           disposition=disposition)
        self.assertEqual(fromJSON(json.loads(json.dumps(toJSON(original))), Command), original)

    @given(st.integers(min_value=1, max_value=1000), st.floats(min_value=0.01, max_value=1000))
    def test_budget(self, turns: int, cost: float) -> None:
        budget = RunBudget(maxTurns=turns, maxCostUsd=cost)
        self.assertEqual(fromJSON(toJSON(budget), RunBudget), budget)
