# -*- test-case-name: tests.unit.test_schemas -*-
"""
The one helper every test uses to hold the host's answers to the protocol's
JSON Schemas (C{protocol/schemas/}): frames, error frames and events, each
checked against the schema of its type, C{$ref}s resolved through one
L{referencing.Registry} of every schema file.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

from vehicle.protocol import toObject


SCHEMAS = Path(__file__).parent.parent.parent / "protocol" / "schemas"
PROTOCOL = "sophia.vehicle-ride.v2"


@lru_cache(maxsize=None)
def schemas() -> dict[str, dict[str, Any]]:
    """
    Every schema file, by file name.
    """
    return {
        path.name: json.loads(path.read_text("utf-8"))
        for path in sorted(SCHEMAS.glob("*.schema.json"))
    }


@lru_cache(maxsize=None)
def registry() -> Registry:
    """
    A registry holding every schema under its C{$id}.
    """
    resources = [
        (schema["$id"], Resource.from_contents(schema, default_specification=DRAFT202012))
        for schema in schemas().values()
    ]
    return Registry().with_resources(resources).crawl()


@lru_cache(maxsize=None)
def validator(name: str) -> Draft202012Validator:
    """
    A validator for the schema file C{name} (C{"frame"}, C{"event"}, ...).
    """
    return Draft202012Validator(schemas()[f"{name}.schema.json"], registry=registry())


def problems(name: str, instance: Any) -> list[str]:
    """
    Every reason C{instance} is not valid against schema C{name}, most
    specific first, one line each (empty when it is valid).
    """
    out = []
    for error in sorted(validator(name).iter_errors(instance), key=lambda e: e.path):
        leaves = [error]
        while leaves[-1].context:
            leaves.append(min(leaves[-1].context, key=lambda e: -len(e.absolute_path)))
        leaf = leaves[-1]
        where = "/".join(str(p) for p in leaf.absolute_path) or "(root)"
        out.append(f"{where}: {leaf.message[:300]}")
    return out


def _check(testCase: Any, name: str, instance: Any, what: str) -> None:
    found = problems(name, instance)
    if found:
        text = json.dumps(instance, sort_keys=True)
        if len(text) > 2000:
            text = text[:2000] + "..."
        testCase.fail(f"{what} breaks {name}.schema.json:\n  " + "\n  ".join(found) + f"\n{text}")


def assertValidFrame(testCase: Any, frame: Any) -> None:
    """
    Fail C{testCase} unless C{frame} is a valid frame of its type: the error
    frame against C{error.schema.json}, every other against
    C{frame.schema.json} (whose value is checked by type).
    """
    if not isinstance(frame, dict):
        testCase.fail(f"a frame is a JSON object, not {frame!r}")
    if frame.get("type") == "error":
        _check(testCase, "error", frame, "error frame")
    else:
        _check(testCase, "frame", frame, f"frame {frame.get('type')!r}")
        if frame.get("type") == "watch.completed":
            for event in frame["value"]["events"]:
                assertValidEvent(testCase, event)


def assertValidEvent(testCase: Any, event: Any) -> None:
    """
    Fail C{testCase} unless C{event} is a valid event envelope whose C{data}
    has its type's shape (C{event.schema.json}).
    """
    _check(testCase, "event", event, f"event {event.get('type') if isinstance(event, dict) else event!r}")


def assertValidRequest(testCase: Any, name: str, body: Any) -> None:
    """
    Fail C{testCase} unless C{body} is valid against the request schema
    C{name} (C{"command.request"}, ...).
    """
    _check(testCase, name, body, f"request {name}")


def validEvents(testCase: Any, session: Any) -> list[dict[str, Any]]:
    """
    The events C{session}'s feed tells from now on (as objects), each held
    to C{event.schema.json} as it comes.
    """
    seen: list[dict[str, Any]] = []

    def check(event: Any) -> None:
        event = toObject(event)
        assertValidEvent(testCase, event)
        seen.append(event)

    session.feed.subscribe(check)
    return seen
