"""
Request bodies for property tests: valid ones drawn from the protocol's
request schemas (C{protocol/schemas/*.request.schema.json}), and the same
bodies mutated the ways hostile clients mutate them (wrong types, extra
fields, huge strings and numbers, deep nesting, odd Unicode, broken
encodings).

A small generator of its own covers the keywords those schemas use
(C{hypothesis-jsonschema} does not run on this Hypothesis).  Bodies are
bytes: some mutations (a number of thousands of digits, bytes that are not
UTF-8) cannot be written by C{json.dumps}.
"""

from __future__ import annotations

import json
import os
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from tests.support.schemas import schemas


#: A profile for long runs: C{HYPOTHESIS_PROFILE=vehicle-thorough}.
settings.register_profile("vehicle-thorough", max_examples=2000)


def examples(default: int = 20) -> settings:
    """
    The property tests' settings: a modest count by default (the suite
    stays fast), raised by C{VEHICLE_FUZZ_EXAMPLES} or by
    C{HYPOTHESIS_PROFILE=vehicle-thorough}; any other profile (CI's)
    lends its other settings.
    """
    profile = os.environ.get("HYPOTHESIS_PROFILE")
    parent = settings.get_profile(profile) if profile else settings.default
    count = os.environ.get("VEHICLE_FUZZ_EXAMPLES")
    return settings(
        parent,
        # CI's profile keeps its other settings (derandomized) but not its
        # count: only our own profiles, or the variable, raise it.
        max_examples=int(count) if count else (
            parent.max_examples if (profile or "").startswith("vehicle-") else default
        ),
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )


def requestSchema(name: str) -> dict[str, Any]:
    return schemas()[f"{name}.request.schema.json"]


def valid(schema: dict[str, Any], root: dict[str, Any] | None = None) -> st.SearchStrategy[Any]:
    """
    Values valid against C{schema} (the subset of JSON Schema the request
    schemas use).
    """
    root = root if root is not None else schema
    if "$ref" in schema:
        ref = schema["$ref"]
        assert ref.startswith("#/$defs/"), ref
        return valid(root["$defs"][ref[len("#/$defs/"):]], root)
    if "const" in schema:
        return st.just(schema["const"])
    if "enum" in schema and "allOf" not in schema:
        return st.sampled_from(schema["enum"])
    if "allOf" in schema:
        # One branch of a discriminated union (if type == X then ...).
        branches = []
        for part in schema["allOf"]:
            kind = part["if"]["properties"]["type"]["const"]
            branches.append(_withType(valid(part["then"], root), kind))
        return st.one_of(branches)
    types = schema.get("type")
    if isinstance(types, list):
        return st.one_of([valid({**schema, "type": t}, root) for t in types])
    if types == "object":
        return _object(schema, root)
    if types == "string":
        return _string(schema)
    if types == "integer":
        low = schema.get("minimum")
        if "exclusiveMinimum" in schema:
            low = schema["exclusiveMinimum"] + 1
        return st.integers(min_value=low, max_value=schema.get("maximum"))
    if types == "number":
        return st.floats(
            min_value=schema.get("minimum", schema.get("exclusiveMinimum")),
            max_value=schema.get("maximum"),
            exclude_min="exclusiveMinimum" in schema,
            allow_nan=False,
            allow_infinity=False,
        )
    if types == "boolean":
        return st.booleans()
    if types == "null":
        return st.none()
    if types == "array":
        return st.lists(
            valid(schema.get("items", {}), root),
            min_size=schema.get("minItems", 0),
            max_size=min(schema.get("maxItems", 4), 4),
        )
    return st.just("anything")


def _withType(strategy: st.SearchStrategy[Any], kind: str) -> st.SearchStrategy[Any]:
    return strategy.map(lambda body: {**body, "type": kind})


def _object(schema: dict[str, Any], root: dict[str, Any]) -> st.SearchStrategy[dict[str, Any]]:
    properties = schema.get("properties", {})
    required = set(schema.get("required", []))
    fixed = {name: valid(sub, root) for name, sub in properties.items() if name in required}
    optional = {name: valid(sub, root) for name, sub in properties.items() if name not in required}
    return st.fixed_dictionaries(fixed, optional=optional)


def _string(schema: dict[str, Any]) -> st.SearchStrategy[str]:
    low = schema.get("minLength", 0)
    high = min(schema.get("maxLength", 40), 40)
    if "pattern" in schema:
        return st.from_regex(schema["pattern"], fullmatch=True).filter(
            lambda s: low <= len(s) <= schema.get("maxLength", 10**9)
        )
    return st.text(min_size=low, max_size=max(low, high))


#: Values of the wrong type (or of no type the schemas take).
ODD_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=False, allow_infinity=False),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=5), st.integers(), max_size=3),
    st.text(max_size=20),
)

#: Strings people do not type: controls, lone surrogates, bidi marks,
#: combining runs, private use, NUL.
ODD_TEXT = st.one_of(
    st.sampled_from(
        [
            "\x00", "\ud800", "\udfff", "a\ud83d", "\u202e\u2066evil", "e\u0301" * 50,
            "\U0010ffff", "\ufeff", "\r\n\r\n", "\u0085\u2028\u2029", "💥" * 100, "\x7f\x1b[2J",
        ]
    ),
    st.text(alphabet=st.characters(codec=None, exclude_categories=()), max_size=30),
)


def _raw(body: Any, marker: str | None = None, rawValue: bytes | None = None) -> bytes:
    text = json.dumps(body).encode("utf-8")
    if marker is not None and rawValue is not None:
        text = text.replace(json.dumps(marker).encode(), rawValue, 1)
    return text


@st.composite
def mutated(draw: Any, base: st.SearchStrategy[dict[str, Any]]) -> bytes:
    """
    A body from C{base}, mutated once, as the bytes a client would send.
    """
    body = dict(draw(base))
    keys = sorted(body)
    kind = draw(
        st.sampled_from(
            [
                "none", "wrongType", "extraField", "dropField", "hugeString", "hugeNumber",
                "hugeFloat", "deep", "oddText", "notObject", "notUtf8", "truncated",
                "duplicateKeys",
            ]
        )
    )
    field = draw(st.sampled_from(keys)) if keys else "requestId"
    if kind == "wrongType":
        body[field] = draw(ODD_VALUES)
    elif kind == "extraField":
        body[draw(st.text(min_size=1, max_size=10))] = draw(ODD_VALUES)
    elif kind == "dropField" and keys:
        del body[field]
    elif kind == "hugeString":
        body[field] = draw(st.sampled_from(["a", "\u00e9", "💥", "\\"])) * draw(
            st.sampled_from([201, 10_001, 65_537, 300_000])
        )
    elif kind == "hugeNumber":
        digits = draw(st.integers(min_value=33, max_value=6000))
        sign = draw(st.sampled_from(["", "-"]))
        return _raw({**body, field: "@@n@@"}, "@@n@@", (sign + "9" * digits).encode())
    elif kind == "hugeFloat":
        text = draw(st.sampled_from(["1e999", "-1e999", "1" + "0" * 400 + ".5", "0." + "0" * 5000 + "1", "1E+99999"]))
        return _raw({**body, field: "@@n@@"}, "@@n@@", text.encode())
    elif kind == "deep":
        depth = draw(st.integers(min_value=2, max_value=3000))
        opener, closer = draw(st.sampled_from([("[", "]"), ('{"a":', "}")]))
        nested = (opener * depth + "1" + closer * depth).encode()
        return _raw({**body, field: "@@n@@"}, "@@n@@", nested)
    elif kind == "oddText":
        body[field] = draw(ODD_TEXT)
    elif kind == "notObject":
        return _raw(draw(ODD_VALUES))
    elif kind == "notUtf8":
        return _raw(body)[:-1] + draw(st.sampled_from([b"\xff", b"\xc3", b"\xed\xa0\x80"])) + b"}"
    elif kind == "truncated":
        raw = _raw(body)
        return raw[: draw(st.integers(min_value=0, max_value=max(0, len(raw) - 1)))]
    elif kind == "duplicateKeys":
        raw = _raw(body)
        return raw[:-1] + b',"requestId":' + json.dumps(draw(ODD_VALUES)).encode() + b"}"
    return _raw(body)
