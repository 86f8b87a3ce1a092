"""
The reactor thread's shortcuts change nothing but time: the compiled
schema validator never takes a body C{jsonschema} refuses (so every
refusal still names the field and the message C{jsonschema} gives);
parsing a body with its decoder made once, its depth scanned only when it
could be too deep and its strings walked only when it holds an escape,
answers what the full path answers; the encoders made once write the bytes
C{json.dumps} writes; a timestamp's second made once a second is the text
C{datetime} gives.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import math
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from twisted.trial.unittest import SynchronousTestCase

from vehicle.errors import VehicleError, encode
from vehicle.protocol import dumps
from vehicle.session import _values
from vehicle.session._requests import fingerprint
from vehicle.session._values import isoTimestamp
from vehicle.store._jsonl import encodeLine
from vehicle.web import _frames
from vehicle.web._frames import parsePayload

from tests.support.harness import COMMAND_EXAMPLES
from tests.support.spies import spyOn


#: A valid body of each request schema, and what varies in them.
VALID: dict[str, list[dict[str, Any]]] = {
    "command.request": [{"requestId": "r1", "type": kind, **body}
                        for kind, (body, _) in COMMAND_EXAMPLES.items()],
    "rename.request": [{"title": "a title"}, {"requestId": "r", "title": None}],
    "claim.request": [{"requestId": "r1"}, {"requestId": "r1", "ttlMs": 60000, "takeover": True}],
    "release.request": [{"requestId": "r1"}],
    "chime.request": [{"requestId": "c1", "author": "Bob", "text": "look", "delivery": "steer"}],
    "create.request": [{"requestId": "x"}, {"requestId": "x", "title": "t", "claim": False,
                                            "budget": {"maxTurns": 3, "maxCostUsd": 0.5}}],
    "grant.request": [{"principal": "bea", "amountUsd": 5, "source": "operator",
                       "idempotencyKey": "k1"}],
}

_TEXTS = st.one_of(
    st.text(max_size=12),
    st.sampled_from(["", " ", "a\n", "Bob\n", "\x1c", "a b", "x" * 201, "\u2028", "ok",
                     "prompt", "steer", "co-drive", "observe", "r1", "s" + "0" * 32]),
)
_SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70),
                     st.floats(allow_nan=False, allow_infinity=False), _TEXTS)
_VALUES = st.recursive(_SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(_TEXTS, inner, max_size=3)), max_leaves=6)
_KEYS = st.sampled_from(["requestId", "type", "text", "title", "policy", "ttlMs", "takeover",
                         "author", "delivery", "chimeId", "targetCommandId", "entryId",
                         "contextRefs", "claim", "budget", "maxTurns", "maxCostUsd", "profile",
                         "model", "principal", "amountUsd", "note", "extra"])


@st.composite
def _bodies(draw: Any) -> tuple[str, Any]:
    """
    A schema's name and a body near its valid ones: fields dropped,
    changed or added.
    """
    name = draw(st.sampled_from(sorted(VALID)))
    body = dict(draw(st.sampled_from(VALID[name])))
    for _ in range(draw(st.integers(0, 3))):
        key = draw(_KEYS)
        if draw(st.booleans()) and body:
            body.pop(draw(st.sampled_from(sorted(body))), None)
        else:
            body[key] = draw(_VALUES)
    return name, body


class CompiledValidatorTests(SynchronousTestCase):
    """
    The compiled validator is a shortcut for what C{jsonschema} accepts.
    """

    def test_validExamples(self) -> None:
        """
        Each valid example is valid to both, so the shortcut is taken.
        """
        for name, payloads in VALID.items():
            for payload in payloads:
                self.assertTrue(_frames.compiled(name).is_valid(payload), (name, payload))
                self.assertTrue(_frames.validator(name).is_valid(payload), (name, payload))
                self.assertIs(_frames.validate(name, payload), payload)

    @settings(max_examples=400, deadline=None, derandomize=True)
    @given(_bodies())
    def test_neverTakesWhatJsonschemaRefuses(self, case: tuple[str, Any]) -> None:
        """
        Whatever the body, the compiled validator takes it only if
        C{jsonschema} does; a refusal is C{jsonschema}'s.
        """
        name, payload = case
        if _frames.compiled(name).is_valid(payload):
            self.assertTrue(_frames.validator(name).is_valid(payload), (name, payload))

    def test_refusalIsJsonschemas(self) -> None:
        """
        A refused body's frame names the field and message C{jsonschema}'s
        first error gives.
        """
        error = self.assertRaises(VehicleError, _frames.validate, "rename.request",
                                  {"title": 5})
        self.assertEqual((error.code, error.details), ("invalid_request", {"field": "title"}))
        self.assertEqual(error.message, "title: 5 is not of type 'string', 'null'")

    def test_jsonschemaHasTheLastWord(self) -> None:
        """
        A body the compiled one refuses but C{jsonschema} takes (its C{$}
        before a last newline) is taken.
        """
        payload = {"requestId": "c1", "author": "Bob\n", "text": "look"}
        self.assertFalse(_frames.compiled("chime.request").is_valid(payload))
        self.assertIs(_frames.validate("chime.request", payload), payload)


def _reference(raw: bytes) -> Any:
    """
    The body parsed the long way: C{json.loads} with the bounds, the depth
    always scanned, the strings always walked.
    """
    text = raw.decode("utf-8")
    if _frames._depth(text) > _frames.MAX_DEPTH:
        raise _frames._tooDeep()
    try:
        parsed = json.loads(text, parse_constant=_frames._refuseConstant,
                            parse_int=_frames._boundedInt, parse_float=_frames._boundedFloat)
    except RecursionError:
        raise _frames._tooDeep()
    except ValueError as e:
        raise VehicleError("invalid_json", f"the body is not JSON: {_frames._short(str(e))}")
    _frames._checkValue(parsed)
    return parsed


def _outcome(parse: Any, raw: bytes) -> Any:
    try:
        return ("parsed", parse(raw))
    except VehicleError as e:
        return ("refused", e.code, e.message, e.details)


_PIECES = st.sampled_from([
    "{", "}", "[", "]", ",", ":", '"a"', '"\\ud800"', '"\\u00e9"', '"\\n"', "1", "-0", "1e999",
    "1" * 40, "1.5", "NaN", "Infinity", "true", "null", " ", "\ufeff", '"é"', '{"requestId":"r"}',
])


class ParseTests(SynchronousTestCase):
    """
    L{parsePayload}'s shortcuts answer what the long way answers.
    """

    @settings(max_examples=500, deadline=None, derandomize=True)
    @given(st.lists(_PIECES, max_size=40))
    def test_sameAnswer(self, pieces: list[str]) -> None:
        """
        Bodies made of JSON's pieces, well formed or not: the same value,
        or the same refusal.
        """
        raw = "".join(pieces).encode("utf-8")
        if not raw.strip():
            return
        self.assertEqual(_outcome(parsePayload, raw), _outcome(_reference, raw))

    def test_deepAndEscaped(self) -> None:
        """
        Too deep is refused past the bracket count; a lone surrogate behind
        an escape is refused; a byte order mark is refused as C{json.loads}
        refuses it.
        """
        for raw in [b"[" * 17 + b"]" * 17, b'{"a": "\\ud800"}', "\ufeff{}".encode(),
                    b'["' + b"[" * 40 + b'"]', b'{"n": ' + b"1" * 40 + b"}"]:
            self.assertEqual(_outcome(parsePayload, raw), _outcome(_reference, raw), raw)


class EncoderTests(SynchronousTestCase):
    """
    The encoders made once write what C{json.dumps} writes.
    """

    @settings(max_examples=300, deadline=None, derandomize=True)
    @given(_VALUES)
    def test_sameBytes(self, value: Any) -> None:
        """
        A frame, a log's line: byte for byte.
        """
        compact = json.dumps(value, separators=(",", ":")).encode("utf-8")
        self.assertEqual(encode(value), compact)
        self.assertEqual(dumps(value), compact)
        if isinstance(value, dict):
            line = json.dumps(value, separators=(",", ":"), allow_nan=False) + "\n"
            self.assertEqual(encodeLine(value), line.encode("ascii"))
        canonical = json.dumps(value, sort_keys=True, separators=(",", ":")).encode("utf-8")
        self.assertEqual(fingerprint(value), hashlib.sha256(canonical).hexdigest())

    def test_noWalkForCycles(self) -> None:
        """
        The encoders made once skip C{json}'s walk for cycles (a fifth of
        an encoding): what they encode is a tree, parsed or built by the
        host.
        """
        from vehicle.errors import _COMPACT
        from vehicle.session._requests import _CANONICAL
        from vehicle.store._jsonl import _LINE

        self.assertEqual([e.check_circular for e in (_COMPACT, _CANONICAL, _LINE)],
                         [False, False, False])

    def test_nanRefusedInALine(self) -> None:
        """
        A line never holds NaN; a frame writes it as C{json.dumps} does.
        """
        self.assertRaises(ValueError, encodeLine, {"x": math.nan})
        self.assertEqual(encode({"x": math.nan}), b'{"x":NaN}')


def _datetimeText(seconds: float) -> str:
    moment = datetime.datetime.fromtimestamp(seconds, tz=datetime.timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


class TimestampTests(SynchronousTestCase):
    """
    L{isoTimestamp} with its second made once a second.
    """

    @settings(max_examples=1000, deadline=None, derandomize=True)
    @given(st.one_of(
        st.floats(min_value=-2e9, max_value=4e9),
        st.builds(lambda whole, edge: whole + edge, st.integers(-2_000_000_000, 4_000_000_000),
                  st.sampled_from([0.0, 0.0005, 0.9995, 0.9999995, 5e-7, 0.4999995, 1 - 1e-9])),
    ))
    def test_datetimesText(self, seconds: float) -> None:
        """
        The same text as C{datetime.fromtimestamp}'s, second after second,
        rounding included.
        """
        self.assertEqual(isoTimestamp(seconds), _datetimeText(seconds))
        self.assertEqual(isoTimestamp(seconds + 1.0), _datetimeText(seconds + 1.0))

    def test_fewSecondsInTurn(self) -> None:
        """
        Timestamps of a few seconds in turn (a request's: now, its lease's
        claim and expiry) make each second's text once; past
        L{_values.SECONDS_KEPT} seconds, the kept ones are let go and the
        text is still C{datetime}'s.
        """
        made = spyOn(self, _values, "_secondText")
        self.patch(_values, "_seconds", {})
        start = 1_796_000_000.25
        for n in range(50):
            for seconds in (start + n / 100, start - 3600, start + 300.5):
                self.assertEqual(isoTimestamp(seconds), _datetimeText(seconds))
        self.assertEqual(sorted(made), [start - 3600 - 0.25, start - 0.25, start + 300 - 0.25])
        many = [start + 10 * n for n in range(_values.SECONDS_KEPT * 2 + 1)]
        for seconds in many + many[:3]:
            self.assertEqual(isoTimestamp(seconds), _datetimeText(seconds))
        self.assertLessEqual(len(_values._seconds), _values.SECONDS_KEPT)
