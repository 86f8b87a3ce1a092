# -*- test-case-name: tests.unit.test_web -*-
"""
Frames: every answer is one JSON object naming the protocol, its type and
the request it answers; refusals are the error frame.  Also the request
body schemas of C{protocol/schemas/} and the check of a body against them.

The schemas are the truth, read by two validators: a compiled one
(C{jsonschema-rs}) says at once whether a body is valid, and only a body
it refuses is read again by C{jsonschema}, whose first error names the
field and the message of the refusal (and whose word is final: a body the
compiled one refuses but C{jsonschema} takes is taken).
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from itertools import accumulate
from pathlib import Path
from typing import cast

import jsonschema_rs
from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError

from vehicle import PROTOCOL
from vehicle.errors import VehicleError, encode
from vehicle.protocol import JSON, JSONObject


SCHEMAS = Path(__file__).parent.parent / "_schemas"

#: The largest request body (spec: 1 MiB) and the largest command text.
MAX_BODY_BYTES = 1024 * 1024
MAX_TEXT_BYTES = 64 * 1024


def frame(
    frameType: str, requestId: str | None, value: JSON, *, replayed: bool = False
) -> JSONObject:
    """
    The frame of an answer (spec, "Frames").
    """
    out: JSONObject = {
        "protocol": PROTOCOL,
        "type": frameType,
        "requestId": requestId,
        "value": value,
    }
    if replayed:
        out["replayed"] = True
    return out


#: Stands for a list whose items are already encoded (L{encodedFrame}): a
#: string no frame can hold otherwise (JSON escapes its NUL characters).
_ITEMS = "\0items\0"


def encodedFrame(frameType: str, value: JSONObject, key: str, items: list[bytes]) -> bytes:
    """
    The bytes L{vehicle.errors.encode} makes of a frame whose C{value[key]}
    is a list, from that list's items already encoded (each once, for
    every reader): the frame around them is encoded alone.
    """
    around = encode(frame(frameType, None, {**value, key: _ITEMS}))
    before, marker, after = around.partition(encode(_ITEMS))
    assert marker, "the frame holds its list"
    return b"".join((before, b"[", b",".join(items), b"]", after))


@lru_cache(maxsize=None)
def validator(name: str) -> Draft202012Validator:
    """
    The schema C{name}'s validator that says why a body is refused.
    """
    schema = json.loads((SCHEMAS / f"{name}.schema.json").read_text("utf-8"))
    return Draft202012Validator(schema)


@lru_cache(maxsize=None)
def compiled(name: str) -> jsonschema_rs.Validator:
    """
    The schema C{name}'s compiled validator, which only says whether a body
    is valid (formats are not checked, as C{jsonschema} does not).
    """
    return jsonschema_rs.validator_for(validator(name).schema, validate_formats=False)


#: The deepest nesting a body may have (the schemas need 3); the longest
#: number, in characters, it may hold.  Both are checked while parsing,
#: before any schema sees the body, so that nothing downstream (the
#: validator, its messages, a log line) recurses or works without bound.
MAX_DEPTH = 16
MAX_NUMBER_CHARS = 32

#: Media types a body may be sent as (with any parameters).
_JSON_TYPES = ("application/json",)


def mediaType(raw: bytes | str | None) -> str | None:
    """
    The media type of a C{Content-Type} or C{Accept} item, lower case,
    without its parameters (media types are case-insensitive, RFC 9110
    8.3.1).
    """
    if raw is None:
        return None
    text = raw.decode("latin-1") if isinstance(raw, bytes) else raw
    return text.split(";", 1)[0].strip().lower() or None


def parsePayload(raw: bytes, contentType: bytes | str | None = None) -> JSON:
    """
    Decode a request body as JSON: sent as JSON (C{application/json}, any
    C{+json} type, or no C{Content-Type} at all), UTF-8, no deeper than
    L{MAX_DEPTH}, no number longer than L{MAX_NUMBER_CHARS}.

    @raise VehicleError: C{invalid_json} (not JSON) or C{invalid_request}
        (JSON beyond the bounds).
    """
    kind = mediaType(contentType)
    if kind is not None and kind not in _JSON_TYPES and not kind.endswith("+json"):
        raise VehicleError(
            "invalid_json",
            f"the body must be JSON (Content-Type: application/json), not {kind[:80]}",
            {"contentType": kind[:80]},
        )
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise VehicleError("invalid_json", "the body is not UTF-8")
    if not text.strip():
        raise VehicleError("invalid_json", "the body is empty: a JSON object is required")
    # Each bracket opens one level at most: few brackets, no deeper scan.
    if text.count("{") + text.count("[") > MAX_DEPTH and _depth(text) > MAX_DEPTH:
        raise _tooDeep()
    try:
        if text.startswith("\ufeff"):
            # What json.loads says of it (the decoder alone does not look).
            raise json.JSONDecodeError("Unexpected UTF-8 BOM (decode using utf-8-sig)", text, 0)
        parsed = _DECODER.decode(text)
    except RecursionError:
        raise _tooDeep()
    except ValueError as e:
        raise VehicleError("invalid_json", f"the body is not JSON: {_short(str(e))}")
    if "\\u" in text:
        # A lone surrogate can only come from an escape.
        _checkValue(parsed)
    return cast(JSON, parsed)


def _refuseConstant(name: str) -> JSON:
    raise ValueError(f"{name} is not a JSON number")


def _tooLong(text: str) -> VehicleError:
    return VehicleError(
        "invalid_request",
        f"a number in the body is longer than {MAX_NUMBER_CHARS} characters",
        {"limit": MAX_NUMBER_CHARS},
    )


def _boundedInt(text: str) -> int:
    if len(text) > MAX_NUMBER_CHARS:
        raise _tooLong(text)
    return int(text)


def _boundedFloat(text: str) -> float:
    if len(text) > MAX_NUMBER_CHARS:
        raise _tooLong(text)
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise VehicleError(
            "invalid_request", "a number in the body is too large", {"limit": MAX_NUMBER_CHARS}
        )
    return value


def _tooDeep() -> VehicleError:
    return VehicleError(
        "invalid_request",
        f"the body is nested more than {MAX_DEPTH} deep",
        {"limit": MAX_DEPTH},
    )


#: The body's decoder, made once (C{json.loads} makes one per call): no
#: NaN or infinity, no number longer than L{MAX_NUMBER_CHARS}.
_DECODER = json.JSONDecoder(
    parse_constant=_refuseConstant, parse_int=_boundedInt, parse_float=_boundedFloat
)

#: A JSON string (its escapes included), and the brackets that nest.
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")


def _depth(text: str) -> int:
    """
    How deep the JSON text C{text} nests, read without parsing it (so that
    no parser recurses first): its brackets outside strings.
    """
    brackets = _NOT_BRACKET.sub("", _STRING.sub("", text))
    deepest = 0
    for depth in accumulate(1 if mark in "[{" else -1 for mark in brackets):
        if depth > deepest:
            deepest = depth
    return deepest


def _checkValue(value: JSON) -> None:
    """
    Refuse lone surrogates (C{"\\ud800"}): they are not Unicode text.
    """
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                raise VehicleError("invalid_json", "the body holds a string that is not valid Unicode")
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


def validate(name: str, payload: JSON) -> JSONObject:
    """
    Check C{payload} against the request schema C{name}; the refusal names the
    first field at fault.

    @raise VehicleError: C{invalid_request}.
    """
    if not isinstance(payload, dict):
        raise VehicleError("invalid_request", "the body must be a JSON object")
    if "requestId" not in payload and "requestId" in (
        validator(name).schema.get("required") or []
    ):
        raise VehicleError(
            "invalid_request", "requestId is required", {"field": "requestId"}
        )
    text = payload.get("text")
    if isinstance(text, str) and len(text.encode("utf-8")) > MAX_TEXT_BYTES:
        raise VehicleError(
            "body_too_large",
            f"text is longer than {MAX_TEXT_BYTES} bytes",
            {"field": "text", "limit": MAX_TEXT_BYTES},
        )
    if compiled(name).is_valid(payload):
        return payload
    errors = sorted(validator(name).iter_errors(payload), key=_errorOrder)
    if errors:
        raise _describe(errors[0], payload)
    return payload


def _errorOrder(error: ValidationError) -> tuple[int, int]:
    # Unknown command types and unknown fields first, then the deepest.
    return (0 if error.validator in ("enum", "additionalProperties") else 1, -len(error.path))


def _describe(error: ValidationError, payload: JSONObject) -> VehicleError:
    # The most specific error inside if/then and $ref chains.
    while error.context:
        error = sorted(error.context, key=_errorOrder)[0]
    path = [str(p) for p in error.absolute_path]
    if error.validator == "additionalProperties":
        extra = sorted(set(error.instance) - set(error.schema.get("properties", {})))
        name = ".".join(path + [extra[0]]) if extra else ".".join(path)
        return VehicleError(
            "invalid_request", f"unknown field {name!r}", {"field": name}
        )
    if error.validator == "required":
        missing = error.message.split("'")[1] if "'" in error.message else "?"
        name = ".".join(path + [missing])
        return VehicleError("invalid_request", f"{name} is required", {"field": name})
    name = ".".join(path) or "body"
    return VehicleError(
        "invalid_request", f"{name}: {_short(error.message)}", {"field": name}
    )


def _short(message: str, limit: int = 200) -> str:
    return message if len(message) <= limit else message[: limit - 1] + "…"
