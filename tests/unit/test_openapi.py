"""
C{protocol/openapi.json} says what the host serves: it is valid OpenAPI 3.1,
its paths and methods are exactly the routes of the host's Klein app (both
ways), its C{$ref}s reach C{protocol/schemas/}, every example in it is valid
against its schema, its error statuses are the error table's, and the
answers the real app gives are among the ones it documents.
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any, Iterator
from urllib.parse import unquote, urldefrag, urljoin

from jsonschema import Draft202012Validator
from openapi_spec_validator import OpenAPIV31SpecValidator, validate
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012
from twisted.internet.testing import MemoryReactorClock
from twisted.trial.unittest import SynchronousTestCase

from vehicle._tap import buildHost
from vehicle.errors import STATUS
from vehicle.models import ModelCatalog
from vehicle.settings import Settings

from tests.support.harness import SECRET, Harness
from tests.support.schemas import SCHEMAS, schemas


DOCUMENT = SCHEMAS.parent / "openapi.json"
DOCUMENT_URI = DOCUMENT.absolute().as_uri()
METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")

#: Codes the error table has that no route answers as such: a method the
#: path does not take (documented once, as a component), and
#: C{not_session_owner}, which this host never sends (another principal's
#: session is C{not_found} to them: spec, "Trust").
NOT_PER_ROUTE = {"method_not_allowed", "not_session_owner"}


def load() -> dict[str, Any]:
    return json.loads(DOCUMENT.read_text("utf-8"))


# -- what the host serves ---------------------------------------------------


def _klein(resource: Any) -> Iterator[tuple[str, Any]]:
    """
    Every Klein app under C{resource}, with the path prefix it is mounted
    at: through wrappers (C{_inner}) and static children.
    """
    app = getattr(resource, "_app", None)
    if app is not None:
        yield "", app
        return
    inner = getattr(resource, "_inner", None)
    children = getattr(resource, "children", {}) or {}
    if inner is None and not children:
        raise AssertionError(
            f"the host mounts a {type(resource).__name__}, which this test cannot read "
            "routes from: teach tests/test_openapi.py about it"
        )
    if inner is not None:
        yield from _klein(inner)
    for name, child in children.items():
        for prefix, found in _klein(child):
            yield "/" + name.decode("utf-8") + prefix, found


def servedRoutes(root: Path) -> set[tuple[str, str]]:
    """
    C{(path, method)} for every route of the resource the host's site
    serves (C{buildHost(...)[0].resource()}, what C{makeService} mounts),
    the path in OpenAPI's template form.  HEAD comes with every GET
    (werkzeug) and is not listed separately.
    """
    settings = Settings(secret=SECRET, dataDir=root, listen="tcp:0:interface=127.0.0.1")
    api, _ = buildHost(settings, ModelCatalog.empty(), MemoryReactorClock())
    routes = set()
    for prefix, app in _klein(api.resource()):
        for rule in app.url_map.iter_rules():
            path = prefix + re.sub(r"<(?:[^:>]+:)?([^>]+)>", r"{\1}", rule.rule)
            for method in rule.methods or ():
                if method not in ("HEAD", "OPTIONS"):
                    routes.add((path, method.lower()))
    return routes


def documentedRoutes(doc: dict[str, Any]) -> set[tuple[str, str]]:
    return {
        (path, method)
        for path, item in doc.get("paths", {}).items()
        for method in item
        if method in METHODS
    }


def routeMismatches(doc: dict[str, Any], served: set[tuple[str, str]]) -> list[str]:
    """
    Every route served but not documented, and documented but not served.
    """
    documented = documentedRoutes(doc)
    return [f"served, not documented: {m.upper()} {p}" for p, m in sorted(served - documented)] + [
        f"documented, not served: {m.upper()} {p}" for p, m in sorted(documented - served)
    ]


# -- references and examples ---------------------------------------------------


def registry(doc: dict[str, Any]) -> Registry:
    """
    The document under its file URI, and every schema file under its file
    URI (how the document names it) and its C{$id} (how schemas name each
    other).
    """
    resources = [(DOCUMENT_URI, Resource.from_contents(doc, default_specification=DRAFT202012))]
    for name, schema in schemas().items():
        resource = Resource.from_contents(schema, default_specification=DRAFT202012)
        resources.append(((SCHEMAS / name).absolute().as_uri(), resource))
        resources.append((schema["$id"], resource))
    return Registry().with_resources(resources)


def _walk(value: Any, pointer: str = "") -> Iterator[tuple[str, Any]]:
    yield pointer, value
    if isinstance(value, dict):
        for key, child in value.items():
            escaped = str(key).replace("~", "~0").replace("/", "~1")
            yield from _walk(child, f"{pointer}/{escaped}")
    elif isinstance(value, list):
        for index, child in enumerate(value):
            yield from _walk(child, f"{pointer}/{index}")


def _resolvePointer(doc: Any, pointer: str) -> Any:
    value = doc
    for part in pointer.lstrip("/").split("/") if pointer else []:
        part = unquote(part).replace("~1", "/").replace("~0", "~")
        value = value[int(part)] if isinstance(value, list) else value[part]
    return value


def refProblems(doc: dict[str, Any]) -> list[str]:
    """
    Every C{$ref} that does not resolve: inside the document, or to a file
    of C{protocol/schemas/} (and a place in it).
    """
    problems = []
    resolver = registry(doc).resolver(base_uri=DOCUMENT_URI)
    for pointer, value in _walk(doc):
        if not (isinstance(value, dict) and isinstance(value.get("$ref"), str)):
            continue
        ref = value["$ref"]
        if ref.startswith("#"):
            try:
                _resolvePointer(doc, ref[1:])
            except (KeyError, IndexError, ValueError):
                problems.append(f"{pointer}: {ref} is not in the document")
            continue
        target, _ = urldefrag(urljoin(DOCUMENT_URI, ref))
        if not target.startswith(SCHEMAS.absolute().as_uri() + "/"):
            problems.append(f"{pointer}: {ref} is not under protocol/schemas/")
            continue
        if not Path(unquote(target[len("file://"):])).is_file():
            problems.append(f"{pointer}: {ref}: no such file in protocol/schemas/")
            continue
        try:
            resolver.lookup(ref)
        except Exception as e:  # noqa: BLE001 - any failure is the finding
            problems.append(f"{pointer}: {ref} does not resolve: {e}")
    return problems


def _follow(doc: dict[str, Any], pointer: str, value: Any) -> tuple[str, Any]:
    """
    A response or parameter that is a C{$ref} into the document: its target.
    """
    while isinstance(value, dict) and isinstance(value.get("$ref"), str) and value["$ref"].startswith("#/"):
        pointer = value["$ref"][1:]
        value = _resolvePointer(doc, pointer)
    return pointer, value


def examples(doc: dict[str, Any]) -> Iterator[tuple[str, str, str, Any]]:
    """
    C{(where, schemaPointer, mediaType, example)} for every example of a
    media type or a parameter in the document.
    """
    for pointer, value in _walk(doc):
        if not isinstance(value, dict) or "schema" not in value:
            continue
        parts = pointer.split("/")
        isMedia = len(parts) >= 2 and parts[-2] == "content"
        isParameter = "in" in value and "name" in value
        if not (isMedia or isParameter):
            continue
        media = parts[-1].replace("~1", "/") if isMedia else "parameter"
        schemaPointer = pointer + "/schema"
        if "example" in value:
            yield pointer + "/example", schemaPointer, media, value["example"]
        for name, example in (value.get("examples") or {}).items():
            _, example = _follow(doc, f"{pointer}/examples/{name}", example)
            yield f"{pointer}/examples/{name}", schemaPointer, media, example["value"]


def _validator(doc: dict[str, Any], schemaPointer: str) -> Draft202012Validator:
    return Draft202012Validator({"$ref": f"{DOCUMENT_URI}#{schemaPointer}"}, registry=registry(doc))


def _parameterValue(doc: dict[str, Any], schemaPointer: str, example: Any) -> Any:
    """
    A parameter's example as its schema reads it (query and header values
    are text on the wire; an integer parameter's example may be either).
    """
    schema = _resolvePointer(doc, schemaPointer)
    if schema.get("type") == "integer" and isinstance(example, str) and example.isdigit():
        return int(example)
    return example


def sseEvents(text: str) -> list[dict[str, Any]]:
    """
    The events of a C{text/event-stream} body: C{data} parsed as JSON,
    with C{id} and C{event}; comment lines skipped.
    """
    out = []
    for block in text.split("\n\n"):
        fields: dict[str, Any] = {}
        for line in block.split("\n"):
            if not line or line.startswith(":"):
                continue
            name, _, rest = line.partition(": ")
            fields[name] = rest
        if fields:
            out.append({**fields, "data": json.loads(fields["data"])})
    return out


def exampleProblems(doc: dict[str, Any]) -> list[str]:
    """
    Every example that is not valid against its schema; an event stream's
    events each against C{event.schema.json}, their C{id} and C{event}
    matching the data.
    """
    problems = []
    eventSchema = {"$ref": (SCHEMAS / "event.schema.json").absolute().as_uri()}
    events = Draft202012Validator(eventSchema, registry=registry(doc))
    for where, schemaPointer, media, example in examples(doc):
        if media == "parameter":
            example = _parameterValue(doc, schemaPointer, example)
        for error in _validator(doc, schemaPointer).iter_errors(example):
            problems.append(f"{where}: {'/'.join(map(str, error.absolute_path))}: {error.message[:200]}")
        if media == "text/event-stream":
            stream = sseEvents(example)
            if not stream:
                problems.append(f"{where}: no events in the stream")
            for event in stream:
                data = event["data"]
                for error in events.iter_errors(data):
                    problems.append(f"{where}: {data.get('type')}: {error.message[:200]}")
                if event.get("event") != data.get("type"):
                    problems.append(f"{where}: event {event.get('event')} carries {data.get('type')}")
                if ("id" in event) != ("seq" in data) or ("id" in event and int(event["id"]) != data["seq"]):
                    problems.append(f"{where}: id {event.get('id')} for seq {data.get('seq')}")
    return problems


def errorCodes(doc: dict[str, Any]) -> Iterator[tuple[str, int | None, list[str]]]:
    """
    C{(where, status, codes)} for every error response: the codes its
    schema narrows C{error.schema.json} to.
    """
    for pointer, value in _walk(doc):
        if not (isinstance(value, dict) and isinstance(value.get("allOf"), list)):
            continue
        refs = [part.get("$ref", "") for part in value["allOf"] if isinstance(part, dict)]
        if not any(ref.endswith("error.schema.json") for ref in refs):
            continue
        for part in value["allOf"]:
            code = (part.get("properties") or {}).get("code") if isinstance(part, dict) else None
            if code is None:
                continue
            codes = code.get("enum") or [code.get("const")]
            match = re.search(r"/responses/(\d{3})/", pointer)
            yield pointer, int(match.group(1)) if match else None, codes


# -- the tests ----------------------------------------------------------------


class DocumentTests(SynchronousTestCase):
    """
    The document itself.
    """

    def test_validOpenAPI31(self) -> None:
        """
        It is an OpenAPI 3.1 document (openapi-spec-validator, 3.1 rules).
        """
        doc = load()
        self.assertTrue(doc["openapi"].startswith("3.1."), doc["openapi"])
        validate(doc, base_uri=DOCUMENT_URI, cls=OpenAPIV31SpecValidator)

    def test_invalidIsNoticed(self) -> None:
        """
        The validator is not a formality: a path without its leading slash
        and an operation whose response has no description are refused.
        """
        doc = load()
        doc["paths"]["sessions"] = doc["paths"].pop("/sessions")
        self.assertRaises(Exception, validate, doc, base_uri=DOCUMENT_URI, cls=OpenAPIV31SpecValidator)
        doc = load()
        del doc["paths"]["/health"]["get"]["responses"]["200"]["description"]
        self.assertRaises(Exception, validate, doc, base_uri=DOCUMENT_URI, cls=OpenAPIV31SpecValidator)

    def test_everyRefResolves(self) -> None:
        """
        Every C{$ref} reaches a place in the document or in a file of
        C{protocol/schemas/}, named relative to the document.
        """
        self.assertEqual(refProblems(load()), [])

    def test_badRefIsNoticed(self) -> None:
        """
        A reference to a file that is not there, or to a place that is not
        in a schema, or outside C{protocol/schemas/}, is found.
        """
        doc = load()
        body = doc["paths"]["/sessions"]["post"]["requestBody"]["content"]["application/json"]
        body["schema"] = {"$ref": "schemas/nothing.schema.json"}
        doc["paths"]["/health"]["get"]["responses"]["200"]["content"]["application/json"]["schema"] = {
            "$ref": "schemas/frame.schema.json#/$defs/nothing"
        }
        doc["components"]["schemas"] = {"Outside": {"$ref": "../tests/whatever.json"}}
        found = refProblems(doc)
        self.assertEqual(len(found), 3, found)

    def test_everyExampleIsValid(self) -> None:
        """
        Every example (bodies, answers, parameters, the event stream's
        events) is valid against its schema; there are examples for every
        operation's request body and success answer.
        """
        doc = load()
        self.assertEqual(exampleProblems(doc), [])
        where = {w for w, _, _, _ in examples(doc)}
        for path, method in documentedRoutes(doc):
            operation = doc["paths"][path][method]
            escaped = path.replace("~", "~0").replace("/", "~1")
            for status in operation["responses"]:
                if status.startswith("2"):
                    prefix = f"/paths/{escaped}/{method}/responses/{status}/"
                    self.assertTrue(any(w.startswith(prefix) for w in where), prefix)
            if "requestBody" in operation:
                prefix = f"/paths/{escaped}/{method}/requestBody/"
                self.assertTrue(any(w.startswith(prefix) for w in where), prefix)

    def test_badExampleIsNoticed(self) -> None:
        """
        An example that breaks its schema is found, also an event in the
        stream.
        """
        doc = load()
        events = doc["paths"]["/sessions/{sessionId}/events"]["get"]["responses"]["200"]["content"]
        stream = events["text/event-stream"]["examples"]["stream"]
        stream["value"] = stream["value"].replace('"type":"run.started"', '"type":"run.begun"', 1)
        created = doc["paths"]["/sessions"]["post"]["responses"]["201"]["content"]["application/json"]
        next(iter(created["examples"].values()))["value"]["type"] = "session.list"
        found = exampleProblems(doc)
        self.assertTrue(any("event-stream" in p for p in found), found)
        self.assertTrue(any("/201/" in p for p in found), found)

    def test_errorStatusesAreTheTables(self) -> None:
        """
        Each error response's codes have that status in the error table
        (C{model_unavailable} may be 400 or 503, spec "Frames"), and every
        code the host has is documented somewhere.
        """
        doc = load()
        seen = set()
        for where, status, codes in errorCodes(doc):
            for code in codes:
                seen.add(code)
                if status is None:
                    continue
                allowed = {400, 503} if code == "model_unavailable" else {STATUS[code]}
                self.assertIn(status, allowed, f"{where}: {code}")
        self.assertEqual(set(STATUS) - seen - NOT_PER_ROUTE, set())
        self.assertIn("method_not_allowed", seen)


class RouteTests(SynchronousTestCase):
    """
    The document and the app agree, both ways.
    """

    def test_bothWays(self) -> None:
        """
        Every route the host's app serves is documented with its method,
        and every documented path and method is served.
        """
        served = servedRoutes(Path(self.mktemp()))
        self.assertIn(("/sessions/{sessionId}/events", "get"), served)
        self.assertEqual(routeMismatches(load(), served), [])

    def test_mismatchIsNoticed(self) -> None:
        """
        A route missing from the document, and a method the app does not
        serve, are each reported.
        """
        served = servedRoutes(Path(self.mktemp()))
        doc = load()
        del doc["paths"]["/sessions/{sessionId}/capsule"]
        doc["paths"]["/health"]["post"] = copy.deepcopy(doc["paths"]["/health"]["get"])
        self.assertEqual(
            routeMismatches(doc, served),
            ["served, not documented: GET /sessions/{sessionId}/capsule",
             "documented, not served: POST /health"],
        )

    def test_pathParameters(self) -> None:
        """
        Each operation declares exactly its path's template parameters, in
        the path.
        """
        doc = load()
        for path, item in doc["paths"].items():
            wanted = set(re.findall(r"{([^}]+)}", path))
            for method, operation in item.items():
                declared = set()
                for parameter in operation.get("parameters", []):
                    _, parameter = _follow(doc, "", parameter)
                    if parameter["in"] == "path":
                        declared.add(parameter["name"])
                        self.assertTrue(parameter["required"])
                self.assertEqual(declared, wanted, f"{method} {path}")

    def test_identityHeaders(self) -> None:
        """
        Every operation but C{/health} takes gardend's secret and the
        identity headers gardend mints (spec, "Trust").
        """
        doc = load()
        scheme = doc["components"]["securitySchemes"]["gardendSecret"]
        self.assertEqual((scheme["in"], scheme["name"]), ("header", "x-internal-service"))
        self.assertEqual(doc["security"], [{"gardendSecret": []}])
        minted = {
            "x-user-id", "x-sophia-caller-role", "x-graph-id", "x-sophia-graph-role",
            "x-sophia-delegated-token", "x-vehicle-client-id", "x-sophia-caller-kind",
            "x-sophia-account-email", "x-sophia-account-email-verified",
            "x-sophia-public-graphs", "x-model-key",
        }
        for path, method in documentedRoutes(doc):
            operation = doc["paths"][path][method]
            headers = {
                _follow(doc, "", p)[1]["name"]
                for p in operation.get("parameters", [])
                if _follow(doc, "", p)[1]["in"] == "header"
            }
            if path == "/health":
                self.assertEqual(operation["security"], [])
            else:
                self.assertEqual(minted - headers, set(), f"{method} {path}")
                self.assertNotIn("security", operation)


class AnswersTests(SynchronousTestCase):
    """
    What the real app answers is among what the document says each route
    answers, with that status and that shape.
    """

    def setUp(self) -> None:
        self.h = Harness(self)
        self.doc = load()
        self.addCleanup(self.h.stop)

    def check(
        self, template: str, method: str, path: str, body: Any = None, expect: int | None = None,
        **kw: Any,
    ) -> Any:
        """
        Call the app; its status must be one the document gives this
        operation (and C{expect}, if given), its frame valid against the
        document's schema for that status.
        """
        code, frame = self.h.call(method.upper(), path, body, **kw)
        if expect is not None:
            self.assertEqual(code, expect, f"{method} {path}: {frame}")
        responses = self.doc["paths"][template][method]["responses"]
        self.assertIn(str(code), responses, f"{method} {path} answered {code}: {frame}")
        escaped = template.replace("~", "~0").replace("/", "~1")
        pointer, _ = _follow(
            self.doc, f"/paths/{escaped}/{method}/responses/{code}", responses[str(code)]
        )
        schema = f"{pointer}/content/application~1json/schema"
        found = [e.message[:200] for e in _validator(self.doc, schema).iter_errors(frame)]
        self.assertEqual(found, [], f"{method} {path} {code}: {frame}")
        return frame

    def test_aConversation(self) -> None:
        """
        Each route's success, a replay, and the common refusals.
        """
        tab = {"client": "tab-1"}
        self.check("/health", "get", "/health", expect=200)
        created = self.check("/sessions", "post", "/sessions", {"requestId": "c1"}, 201, **tab)
        self.check("/sessions", "post", "/sessions", {"requestId": "c1"}, 200, **tab)
        sid = created["value"]["session"]["sessionId"]
        one = f"/sessions/{sid}"
        self.check("/sessions", "get", "/sessions", expect=200, **tab)
        self.check("/sessions/{sessionId}", "get", one, expect=200, **tab)
        self.check("/sessions/{sessionId}", "patch", one, {"title": "A name"}, 200, **tab)
        self.check("/sessions/{sessionId}/claim", "post", one + "/claim", {"requestId": "k1"}, 409,
                   client="tab-2")
        self.check("/sessions/{sessionId}/claim", "post", one + "/claim",
                   {"requestId": "k2", "takeover": True}, 200, client="tab-2")
        self.check("/sessions/{sessionId}/commands", "post", one + "/commands",
                   {"type": "set_room_policy", "requestId": "rp", "policy": "suggest"}, 202, client="tab-2")
        self.check("/sessions/{sessionId}/commands", "post", one + "/commands",
                   {"type": "prompt", "requestId": "p1", "text": "hi"}, 409, client="tab-1")
        self.check("/sessions/{sessionId}/commands", "post", one + "/commands",
                   {"type": "fork", "requestId": "f1", "entryId": "e1"}, 409, client="tab-2")
        self.check("/sessions/{sessionId}/chimes", "post", one + "/chimes",
                   {"requestId": "ch", "author": "Bea", "text": "also this"}, 202, principal="bea")
        self.check("/sessions/{sessionId}/events", "get", one + "/events?since=0", expect=200, **tab)
        self.check("/sessions/{sessionId}/events", "get", one + "/events?since=999", expect=400, **tab)
        self.check("/sessions/{sessionId}/capsule", "get", one + "/capsule", expect=200, **tab)
        self.check("/sessions/{sessionId}/release", "post", one + "/release", {"requestId": "r1"}, 200,
                   client="tab-2")
        self.check("/sessions/{sessionId}/release", "post", one + "/release", {"requestId": "r2"}, 409,
                   client="tab-2")
        self.check("/account", "get", "/account", expect=200, **tab)
        self.check("/account/grants", "post", "/account/grants",
                   {"requestId": "g", "principal": "cognito:x", "amountUsd": 1,
                    "source": "operator", "idempotencyKey": "k"}, 403, principal="owner")
        self.check("/sessions/{sessionId}", "delete", one, expect=200, **tab)
        self.check("/sessions/{sessionId}", "delete", one, expect=404, **tab)

    def test_refusalsOnEveryRoute(self) -> None:
        """
        Without the secret every route but C{/health} is C{unauthorized};
        an unknown session is C{not_found}; a body that is not JSON is
        C{invalid_json}: each documented with its status and shape.
        """
        sid = self.h.create("mine")["sessionId"]
        for template, method in sorted(documentedRoutes(self.doc)):
            path = template.replace("{sessionId}", "nope")
            if template != "/health":
                self.check(template, method, path, secret=None)
            if "{sessionId}" in template:
                self.check(template, method, path, {"requestId": "x"})
            if "requestBody" in self.doc["paths"][template][method]:
                frame = self.check(template, method, template.replace("{sessionId}", sid),
                                   raw=b"{", principal="owner" if "account" in template else "alice")
                self.assertIn(frame["code"], ("invalid_json", "forbidden"))
