"""
Hostile input gets the error table (issue 10, section 3): every request, as
bytes on a connection to the real site (L{VehicleSite} over a
L{StringTransport}, on the harness's clock), is answered with a success or
a frame of the error table: the table's status, C{Content-Type:
application/json}, the frame valid against C{error.schema.json}.  Never a
5xx, never HTML, never a silent close.

The property tests at the end draw bodies from the request schemas and
mutate them (L{tests.support._fuzz}); C{VEHICLE_FUZZ_EXAMPLES} (or
C{HYPOTHESIS_PROFILE}) raises their count.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from twisted.trial.unittest import SynchronousTestCase

from vehicle.errors import STATUS
from vehicle.web import MAX_BODY_BYTES
from vehicle.web._frames import MAX_DEPTH, MAX_NUMBER_CHARS
from vehicle.web._limits import HEADERS_LIMIT, MAX_HEADERS, REQUEST_LINE_LIMIT

from tests.support._fuzz import examples, mutated, requestSchema, valid
from tests.support.byline import byLine
from tests.support.harness import Harness
from tests.support.public import ACCOUNT, KEY, PUBLIC, VISITOR, account, visitor
from tests.support.rawhttp import RawConnection
from tests.support.schemas import assertValidFrame, problems


class HostileCase(SynchronousTestCase):
    """
    A host in memory, a session of alice's, and raw connections to it.
    """

    harnessSettings: dict[str, Any] = {}

    def setUp(self) -> None:
        self.h = Harness(self, **self.harnessSettings)
        self.addCleanup(self.h.stop)
        self.sid = self.h.create(client="tab-1")["sessionId"]

    def connect(self, **kw: Any) -> RawConnection:
        return RawConnection(self.h, **kw)

    def send(self, method: str, path: str, body: bytes | None = None,
             extra: dict[str, str] | None = None, **who: Any) -> RawConnection:
        conn = self.connect()
        length = len(body) if body is not None else None
        conn.send(conn.head(method, path, length=length, extra=extra, **who) + (body or b""))
        return conn

    def headers(self, conn: RawConnection) -> dict[str, str]:
        head = conn.output().partition(b"\r\n\r\n")[0].decode("latin-1")
        out = {}
        for line in head.split("\r\n")[1:]:
            name, _, value = line.partition(":")
            out[name.strip().lower()] = value.strip()
        return out

    def assertAnswer(self, conn: RawConnection) -> tuple[int, dict[str, Any]]:
        """
        The connection was answered: a success or a table frame, as JSON,
        never a 5xx outside the table, never HTML.
        """
        status = conn.status()
        self.assertIsNotNone(status, f"no answer: {conn.output()[:300]!r}")
        headers = self.headers(conn)
        self.assertEqual(headers.get("content-type"), "application/json", conn.output()[:400])
        frame = json.loads(conn.body())
        assertValidFrame(self, frame)
        if frame["type"] == "error":
            # The table's status (model_unavailable has two); a 5xx only
            # where the table has one, never the host's own failure.
            self.assertNotEqual(frame["code"], "internal", frame)
            expected = {400, 503} if frame["code"] == "model_unavailable" else {STATUS[frame["code"]]}
            self.assertIn(status, expected, frame)
        else:
            self.assertIn(status, (200, 201, 202), frame)
        return status, frame

    def assertRefused(self, conn: RawConnection, status: int, code: str) -> dict[str, Any]:
        got, frame = self.assertAnswer(conn)
        self.assertEqual((got, frame["type"], frame.get("code")), (status, "error", code), frame)
        return frame


class NumberTests(HostileCase):
    """
    Numbers and their text are bounded when the body is parsed (and query
    numbers before they are converted): C{invalid_request}, never a 500.
    """

    def test_waitMsOfThousandsOfDigits(self) -> None:
        """
        C{waitMs} of 5000 digits is refused, as is C{since} and
        C{Last-Event-ID}.
        """
        digits = "9" * 5000
        conn = self.send("GET", f"/sessions/{self.sid}/events?waitMs={digits}", client="tab-1")
        frame = self.assertRefused(conn, 400, "invalid_request")
        self.assertEqual(frame["details"]["field"], "waitMs")
        conn = self.send("GET", f"/sessions/{self.sid}/events?since={digits}", client="tab-1")
        self.assertRefused(conn, 400, "invalid_request")
        conn = self.send("GET", f"/sessions/{self.sid}/events", client="tab-1",
                         extra={"accept": "text/event-stream", "last-event-id": digits})
        self.assertRefused(conn, 400, "invalid_request")

    def test_bodyNumbers(self) -> None:
        """
        An integer or a float longer than the bound, or one that overflows,
        in any field, is C{invalid_request}; one at the bound reaches the
        schema.
        """
        for raw in (b"9" * 5000, b"-" + b"9" * 40, b"1" + b"0" * 400 + b".5",
                    b"0." + b"0" * 5000 + b"1", b"1e999", b"-1E+99999"):
            for field in (b"ttlMs", b"extra"):
                body = b'{"requestId":"n1","' + field + b'":' + raw + b"}"
                conn = self.send("POST", f"/sessions/{self.sid}/claim", body, client="tab-1")
                frame = self.assertRefused(conn, 400, "invalid_request")
                self.assertIn("number", frame["message"])
        body = b'{"requestId":"n1","ttlMs":' + b"9" * MAX_NUMBER_CHARS + b"}"
        conn = self.send("POST", f"/sessions/{self.sid}/claim", body, client="tab-1")
        frame = self.assertRefused(conn, 400, "invalid_request")
        self.assertEqual(frame["details"]["field"], "ttlMs")


class NestingTests(HostileCase):
    """
    Nesting is bounded before the body is parsed or validated.
    """

    def test_contextRefs950Deep(self) -> None:
        """
        C{contextRefs} nested 950 deep is C{invalid_request} naming the
        bound; no recursion anywhere, even while the refusal is written.
        """
        nested = b"[" * 950 + b'"x"' + b"]" * 950
        body = b'{"requestId":"d1","type":"prompt","text":"hi","contextRefs":' + nested + b"}"
        conn = self.send("POST", f"/sessions/{self.sid}/commands", body, client="tab-1")
        frame = self.assertRefused(conn, 400, "invalid_request")
        self.assertEqual(frame["details"], {"limit": MAX_DEPTH})

    def test_objectsAndUnclosed(self) -> None:
        """
        Deep objects, and deep brackets never closed, are refused the same
        way; brackets inside strings do not count.
        """
        for nested in (b'{"a":' * 2000 + b"1" + b"}" * 2000, b"[" * 100_000):
            body = b'{"requestId":"d2","title":' + nested + b"}"
            conn = self.send("PATCH", f"/sessions/{self.sid}", body)
            self.assertRefused(conn, 400, "invalid_request")
        title = "[" * 5000
        conn = self.send("PATCH", f"/sessions/{self.sid}",
                         json.dumps({"title": title[:200]}).encode())
        status, frame = self.assertAnswer(conn)
        self.assertEqual(status, 200, frame)

    def test_atTheBound(self) -> None:
        """
        A body exactly L{MAX_DEPTH} deep is parsed and then judged by the
        schema (an unknown field), not by its depth.
        """
        nested = "[" * (MAX_DEPTH - 1) + "]" * (MAX_DEPTH - 1)
        body = ('{"requestId":"d3","odd":' + nested + "}").encode()
        conn = self.send("POST", f"/sessions/{self.sid}/claim", body, client="tab-1")
        frame = self.assertRefused(conn, 400, "invalid_request")
        self.assertEqual(frame["details"], {"field": "odd"})


class PathTests(HostileCase):
    """
    A path that is not UTF-8 is refused with a frame, the secret checked
    first.
    """

    PATHS = [b"/sessions/%ff%fe", b"/sessions/\xff\xfe/events", b"/sessions/%c3%28/claim",
             b"/sessions/\xed\xa0\x80", b"/%80"]

    def raw(self, path: bytes, **who: Any) -> RawConnection:
        conn = self.connect()
        head = conn.head("GET", "/PLACEHOLDER", **who).replace(b"/PLACEHOLDER", path)
        conn.send(head)
        return conn

    def test_withoutTheSecret(self) -> None:
        """
        Without the secret: C{unauthorized}, nothing about the path.
        """
        for path in self.PATHS:
            self.assertRefused(self.raw(path, secret=None), 401, "unauthorized")
            self.assertRefused(self.raw(path, secret="wrong"), 401, "unauthorized")

    def test_withTheSecret(self) -> None:
        """
        With it: C{not_found} (no session has such an id), as JSON.
        """
        for path in self.PATHS:
            self.assertRefused(self.raw(path), 404, "not_found")

    def test_asteriskTarget(self) -> None:
        """
        C{OPTIONS *} (and C{GET *}) go to the app: the secret first, then
        no such route; not Twisted's empty page.
        """
        for method in ("OPTIONS", "GET"):
            conn = self.connect()
            conn.send(conn.head(method, "*", secret=None))
            self.assertRefused(conn, 401, "unauthorized")
            conn = self.connect()
            conn.send(conn.head(method, "*"))
            self.assertRefused(conn, 404, "not_found")

    def test_lastResortIsAFrame(self) -> None:
        """
        A failure nothing caught (here, in the front resource itself) is
        logged and answered as the C{internal} frame, never HTML.
        """
        from vehicle.web._trust import GuardedResource

        def broken(resource: Any, request: Any) -> bytes:
            raise RuntimeError("boom")

        self.patch(GuardedResource, "render", broken)
        conn = self.send("GET", "/sessions")
        self.assertEqual(conn.status(), 500)
        self.assertEqual(self.headers(conn)["content-type"], "application/json")
        frame = json.loads(conn.body())
        assertValidFrame(self, frame)
        self.assertEqual(frame["code"], "internal")
        self.assertEqual(len(self.flushLoggedErrors(RuntimeError)), 1)

    def test_neverRedirected(self) -> None:
        """
        Doubled slashes are matched as sent (C{not_found}), never
        redirected to another spelling in HTML.
        """
        for path in ("/sessions//x", f"/sessions/{self.sid}//claim"):
            self.assertRefused(self.send("GET", path), 404, "not_found")

    def test_hostNotUtf8(self) -> None:
        """
        A Host header that is not UTF-8: C{invalid_request} with the
        secret, C{unauthorized} without.
        """
        for who, status, code in (({}, 400, "invalid_request"),
                                  ({"secret": None}, 401, "unauthorized")):
            conn = self.connect()
            conn.send(conn.head("GET", "/sessions", **who).replace(b"host: host", b"host: \xff\xfe"))
            self.assertRefused(conn, status, code)

    def test_malformedRequestLine(self) -> None:
        """
        A request line Twisted cannot read (controls, a bad version) is
        C{invalid_request} as a frame, then closed.
        """
        for line in (b"GET /a\x01b HTTP/1.1", b"GET / HTTP/9.9", b"GET  / HTTP/1.1", b"\x00\x01"):
            conn = self.connect()
            conn.send(line + b"\r\nhost: h\r\n\r\n")
            self.assertRefused(conn, 400, "invalid_request")
            self.assertTrue(conn.closed)

    def test_malformedHeaders(self) -> None:
        """
        A header line without a colon, a bad Content-Length, an unknown
        transfer coding, both length and chunked: frames, not a bare 400.
        """
        for extra in (b"no colon here", b"content-length: -1", b"content-length: 1x",
                      b"transfer-encoding: gzip", b"content-length: 2\r\ntransfer-encoding: chunked"):
            conn = self.connect()
            conn.send(b"POST /sessions HTTP/1.1\r\nhost: h\r\n" + extra + b"\r\n\r\n")
            self.assertRefused(conn, 400, "invalid_request")

    def test_malformedChunks(self) -> None:
        """
        Chunk framing that is not hex is a frame too.
        """
        conn = self.connect()
        conn.send(conn.head("POST", f"/sessions/{self.sid}/claim", chunked=True) + b"zz\r\nabc\r\n")
        self.assertRefused(conn, 400, "invalid_request")


class FormBodyTests(HostileCase):
    """
    Form bodies are never parsed by Twisted: the route refuses them as not
    JSON, and the connection lives on.
    """

    def test_multipart(self) -> None:
        """
        A well-formed and a malformed multipart body, and a urlencoded one:
        C{invalid_json} naming the media type; the next request on the same
        connection is answered.
        """
        well = b"--x\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\nb\r\n--x--\r\n"
        for ctype, body in (("multipart/form-data; boundary=x", well),
                            ("multipart/form-data; boundary=x", b"garbage"),
                            ("MULTIPART/FORM-DATA", well),
                            ("application/x-www-form-urlencoded", b"requestId=r1&a=%ff")):
            conn = self.connect()
            conn.send(conn.head("POST", "/sessions", length=len(body),
                                extra={"content-type": ctype}) + body)
            frame = self.assertRefused(conn, 400, "invalid_json")
            self.assertEqual(frame["details"]["contentType"], ctype.split(";")[0].lower())
            self.assertFalse(conn.closed)
            conn.transport.clear()
            conn.send(conn.head("GET", "/health"))
            self.assertEqual(conn.status(), 200)

    def test_jsonMediaTypes(self) -> None:
        """
        C{application/json} in any case, with parameters, a C{+json} type,
        or no type at all, are read as JSON.
        """
        for n, ctype in enumerate(("APPLICATION/JSON; charset=utf-8", "application/vnd.x+json", None)):
            conn = self.connect()
            body = json.dumps({"requestId": f"m{n}"}).encode()
            head = conn.head("POST", "/sessions", length=len(body),
                             extra={"content-type": ctype or "x"})
            if ctype is None:
                head = head.replace(b"content-type: x\r\n", b"")
            conn.send(head + body)
            status, frame = self.assertAnswer(conn)
            self.assertEqual(status, 201, frame)


class AcceptTests(HostileCase):
    """
    C{Accept} is read as media types are: case-insensitive, parameters
    allowed, q-values honoured.
    """

    def contentType(self, accept: str) -> str:
        conn = self.send("GET", f"/sessions/{self.sid}/events", extra={"accept": accept},
                         client="tab-1")
        self.assertEqual(conn.status(), 200, conn.output()[:300])
        return self.headers(conn)["content-type"]

    def test_streamChosen(self) -> None:
        for accept in ("TEXT/EVENT-STREAM", "text/event-stream; charset=utf-8",
                       "application/json;q=0.5, text/event-stream;q=0.9",
                       "text/html, Text/Event-Stream ;q=1.0", "*/*;q=0.1, text/event-stream"):
            self.assertTrue(self.contentType(accept).startswith("text/event-stream"), accept)
        self.h.api.stopStreams()

    def test_jsonChosen(self) -> None:
        for accept in ("application/json", "*/*", "text/event-stream;q=0",
                       "text/event-stream;q=0.4, application/json", "text/event-stream;q=x",
                       "text/event-streams", ""):
            self.assertEqual(self.contentType(accept), "application/json", accept)


class DeadlineAndSizeTests(HostileCase):
    """
    One deadline for the whole request; bodies refused by their announced
    length before they are read, and chunked ones cut at the limit.
    """

    def test_bodyTrickleCut(self) -> None:
        """
        Headers in time, then a body a byte a second: cut at the deadline
        (10 s from the first byte) with C{request_timeout}.
        """
        conn = RawConnection(self.h, headerTimeout=10)
        body = json.dumps({"requestId": "slow", "ttlMs": 5000}).encode()
        conn.send(conn.head("POST", f"/sessions/{self.sid}/claim", length=len(body), client="tab-1"))
        for byte in body[:9]:
            self.h.clock.advance(1)
            conn.send(bytes([byte]))
        self.assertIsNone(conn.status())
        self.h.clock.advance(1)
        self.assertRefused(conn, 408, "request_timeout")
        self.assertTrue(conn.closed)
        conn.send(body[9:])  # too late: nothing more is read
        self.assertEqual(conn.output().count(b"HTTP/1.1"), 1)

    def test_partialRequestLineCut(self) -> None:
        """
        A request line that never ends is cut at the deadline too.
        """
        conn = RawConnection(self.h, headerTimeout=10)
        conn.send(b"GET /sess")
        self.h.clock.advance(10)
        self.assertRefused(conn, 408, "request_timeout")

    def test_promptBodyNotCut(self) -> None:
        """
        A request that arrived whole is not cut while it is answered (a
        long-poll), and the deadline does not fire later.
        """
        conn = RawConnection(self.h, headerTimeout=10)
        conn.send(conn.head("GET", f"/sessions/{self.sid}/events?since=1&waitMs=30000", client="tab-1"))
        self.h.clock.advance(29)
        self.assertFalse(conn.closed)
        self.h.clock.advance(1)
        status, frame = self.assertAnswer(conn)
        self.assertEqual(frame["type"], "watch.completed")

    def test_oversizedLengthRefusedUnread(self) -> None:
        """
        A C{Content-Length} just over the limit is answered 413 at once,
        before any body arrives, and closed; C{Expect: 100-continue} gets
        no 100.
        """
        for length in (MAX_BODY_BYTES + 1, 16 * MAX_BODY_BYTES, 10**30, "9" * 5000):
            conn = self.connect()
            conn.send(conn.head("POST", "/sessions", length=length,
                                extra={"expect": "100-continue"}))
            frame = self.assertRefused(conn, 413, "body_too_large")
            self.assertEqual(frame["details"]["limit"], MAX_BODY_BYTES)
            self.assertTrue(conn.closed)
            self.assertNotIn(b"100 Continue", conn.output())

    def test_contentLengthWithLeadingZeros(self) -> None:
        """
        A length written with thousands of leading zeros is still its
        number.
        """
        body = json.dumps({"requestId": "z1"}).encode()
        conn = self.connect()
        head = conn.head("POST", "/sessions", length=len(body))
        conn.send(head.replace(b"content-length: ", b"content-length: " + b"0" * 5000) + body)
        status, frame = self.assertAnswer(conn)
        self.assertEqual(status, 201, frame)

    def test_contentLengthAnySpelling(self) -> None:
        """
        The length is read (bounded) whatever the case of its name and the
        white space around it: thousands of leading zeros are still its
        number under every spelling.
        """
        for n, name in enumerate([b"Content-Length", b"CONTENT-LENGTH", b"cOnTeNt-LeNgTh",
                                  b"Content-Length ", b"\x0bcontent-length", b"\x0ccontent-length",
                                  b"content-length\t"]):
            body = json.dumps({"requestId": f"z{n}"}).encode()
            conn = self.connect()
            head = conn.head("POST", "/sessions", length=len(body))
            conn.send(head.replace(b"content-length: ", name + b": " + b"0" * 5000) + body)
            status, frame = self.assertAnswer(conn)
            self.assertEqual(status, 201, (name, frame))

    def test_chunkedCutAtTheLimit(self) -> None:
        """
        A chunked body is answered 413 and closed as soon as it passes the
        limit, without waiting for its end.
        """
        conn = self.connect()
        conn.send(conn.head("POST", f"/sessions/{self.sid}/commands", chunked=True))
        chunk = b"x" * (64 * 1024)
        sent = 0
        while not conn.closed and sent < 4 * MAX_BODY_BYTES:
            conn.send(b"%x\r\n" % len(chunk) + chunk + b"\r\n")
            sent += len(chunk)
        self.assertEqual(sent, MAX_BODY_BYTES + len(chunk))
        self.assertRefused(conn, 413, "body_too_large")


class LongLineTests(HostileCase):
    """
    Over-long request lines and headers are answered, not dropped.
    """

    def test_requestLineOver16KiB(self) -> None:
        """
        A request line over 16 KiB: 414 C{uri_too_long}, whole or still
        arriving.
        """
        conn = self.connect()
        conn.send(b"GET /" + b"a" * REQUEST_LINE_LIMIT + b" HTTP/1.1\r\nhost: h\r\n\r\n")
        self.assertRefused(conn, 414, "uri_too_long")
        self.assertTrue(conn.closed)
        conn = self.connect()
        conn.send(b"GET /sessions?since=" + b"1" * (REQUEST_LINE_LIMIT + 10))
        self.assertRefused(conn, 414, "uri_too_long")

    def test_requestLineAtTheLimit(self) -> None:
        """
        A request line of 16 KiB exactly is served (an unknown route here).
        """
        path = "/x" + "a" * (REQUEST_LINE_LIMIT - len("GET /x HTTP/1.1"))
        conn = self.send("GET", path)
        self.assertEqual(len(f"GET {path} HTTP/1.1"), REQUEST_LINE_LIMIT)
        self.assertRefused(conn, 404, "not_found")

    def filled(self, lines: int, size: int) -> RawConnection:
        """
        A C{GET /health} whose header lines are exactly C{lines} lines and
        C{size} bytes (line ends aside): the usual headers, then C{x-N: b}
        lines, the last padded.
        """
        conn = self.connect()
        base = conn.head("GET", "/health").split(b"\r\n")[1:-2]
        more = lines - len(base)
        left = size - sum(map(len, base)) - sum(len(b"x-%d: b" % i) for i in range(more - 1))
        extra = {f"x-{i}": "b" for i in range(more - 1)}
        extra["x-pad"] = "b" * (left - len("x-pad: "))
        head = conn.head("GET", "/health", extra=extra)
        sent = head.split(b"\r\n")[1:-2]
        self.assertEqual((len(sent), sum(map(len, sent))), (lines, size))
        conn.send(head)
        return conn

    def test_headersAtTheLimits(self) -> None:
        """
        Exactly L{MAX_HEADERS} header lines of exactly L{HEADERS_LIMIT}
        bytes are served; one line more, or one byte more, is 431.
        """
        self.assertEqual(self.assertAnswer(self.filled(MAX_HEADERS, HEADERS_LIMIT))[0], 200)
        self.assertRefused(self.filled(MAX_HEADERS + 1, 6000), 431, "headers_too_large")
        self.assertRefused(self.filled(20, HEADERS_LIMIT + 1), 431, "headers_too_large")

    def test_headersTooLarge(self) -> None:
        """
        One long header, too many header bytes, or too many headers: 431
        C{headers_too_large}.
        """
        for extra in ({"x-a": "b" * (HEADERS_LIMIT + 1)},
                      {f"x-{i}": "b" * 100 for i in range(200)},
                      {f"x-{i}": "b" for i in range(600)}):
            self.assertRefused(self.send("GET", "/health", extra=extra), 431, "headers_too_large")


class AllowTests(HostileCase):
    """
    A 405 names the methods the path takes.
    """

    def test_allow(self) -> None:
        for method, path, allowed in (
            ("PUT", "/sessions", "GET, HEAD, POST"),
            ("POST", "/sessions/SID", "DELETE, GET, HEAD, PATCH"),
            ("GET", "/sessions/SID/claim", "POST"),
            ("DELETE", "/account", "GET, HEAD"),
            ("OPTIONS", "/health", "GET, HEAD"),
        ):
            conn = self.send(method, path.replace("SID", self.sid))
            frame = self.assertRefused(conn, 405, "method_not_allowed")
            self.assertEqual(self.headers(conn).get("allow"), allowed, path)
            self.assertEqual(frame["details"]["allowed"], allowed.split(", "))

    def test_secretFirst(self) -> None:
        """
        Without the secret it is C{unauthorized}, with no C{Allow}.
        """
        conn = self.send("PUT", "/sessions", secret=None)
        self.assertRefused(conn, 401, "unauthorized")
        self.assertNotIn("allow", self.headers(conn))


class PublicOffTests(HostileCase):
    """
    On a host without public sessions every route refuses a public caller
    with C{not_public}: listing too (it used to answer an empty list).
    """

    def test_everyRoute(self) -> None:
        for headers, who in ((visitor(KEY), VISITOR), (account(), ACCOUNT)):
            for method, path in (("GET", "/sessions"), ("GET", "/account"),
                                 ("GET", f"/sessions/{self.sid}"),
                                 ("GET", f"/sessions/{self.sid}/events"),
                                 ("POST", f"/sessions/{self.sid}/chimes")):
                conn = self.send(method, path, extra=headers, **who)
                self.assertRefused(conn, 403, "not_public")

    def test_membersUnchanged(self) -> None:
        status, frame = self.assertAnswer(self.send("GET", "/sessions"))
        self.assertEqual(len(frame["value"]["sessions"]), 1)


class PublicOnListTests(HostileCase):
    """
    With public sessions on, a visitor lists its own sessions (none yet).
    """

    harnessSettings = {"public": PUBLIC}

    def test_visitorLists(self) -> None:
        conn = self.send("GET", "/sessions", extra=visitor(KEY), **VISITOR)
        status, frame = self.assertAnswer(conn)
        self.assertEqual((status, frame["value"]["sessions"]), (200, []))


class AccountSchemaTests(SynchronousTestCase):
    """
    C{account.schema.json} and C{account.granted.schema.json} hold each
    kind to its own fields.
    """

    DOORS = {
        "byok": {"header": "X-Model-Key", "provider": "openrouter", "defaultModel": "openrouter/a/b"},
        "account": {"header": "Authorization: Bearer <t>", "signupGrantUsd": 0.5, "models": ["m/x"]},
    }
    CREDIT = {"balanceUsd": -0.01, "grantedUsd": 0.5, "spentUsd": 0.51, "defaultModel": "m/x",
              "models": ["m/x"], "poolOpenToday": True}

    def frame(self, value: Any, kind: str = "account") -> dict[str, Any]:
        return {"protocol": "sophia.vehicle-ride.v2", "type": kind, "requestId": None, "value": value}

    def test_kinds(self) -> None:
        visitorValue = {"kind": "anonymous", "principal": "anon:x", "turnsToday": 0, "turnsPerDay": 100,
                        "sessionMaxTurns": 40, "doors": self.DOORS,
                        "byok": {"provider": "openrouter", "defaultModel": "openrouter/a/b"}}
        accountValue = {**visitorValue, "kind": "account", "principal": "cognito:1",
                        "email": "a@example.com", "emailVerified": True, "credit": self.CREDIT}
        good = [{"kind": "member", "principal": "owner"}, visitorValue, accountValue]
        for value in good:
            self.assertEqual(problems("frame", self.frame(value)), [], value)
        bad = [
            {"kind": "member", "principal": "owner", "credit": self.CREDIT},
            {**visitorValue, "credit": self.CREDIT},
            {k: v for k, v in accountValue.items() if k != "credit"},
            {**accountValue, "credit": {**self.CREDIT, "poolOpenToday": "yes"}},
            {**visitorValue, "doors": {"byok": {}}},
            {**visitorValue, "secret": "x"},
        ]
        for value in bad:
            self.assertNotEqual(problems("frame", self.frame(value)), [], value)

    def test_granted(self) -> None:
        ok = {"principal": "cognito:1", "granted": True, "balanceUsd": 1.5}
        self.assertEqual(problems("frame", self.frame(ok, "account.granted")), [])
        for value in ({**ok, "extra": 1}, {**ok, "granted": 1}, {"principal": "x"}):
            self.assertNotEqual(problems("frame", self.frame(value, "account.granted")), [])


class RunFolderTests(SynchronousTestCase):
    """
    The model proxies' run folder does not outlive the host, and a host removes the
    ones an earlier host of its data dir left behind.
    """

    def setUp(self) -> None:
        self.tmp = Path(self.mktemp())
        self.tmp.mkdir()
        self.patch(tempfile, "tempdir", str(self.tmp))

    def test_removedAtStop(self) -> None:
        h = Harness(self)
        agent = h.host.bodies.agent
        run = agent.runDir()
        (run / "s1").mkdir()
        self.assertEqual(run.parent, self.tmp)
        self.assertIn(f"-{os.getpid()}-", run.name)
        h.stop()
        self.assertEqual(list(self.tmp.iterdir()), [])

    def test_staleSweptAtStart(self) -> None:
        h = Harness(self)
        prefix = h.host.bodies.agent._runPrefix()
        h.stop()
        stale = [self.tmp / f"{prefix}4194999-abc", self.tmp / f"{prefix}oldstyle"]
        live = self.tmp / f"{prefix}{os.getpid()}-other"
        elsewhere = self.tmp / "vehicle-00000000-4194999-x"
        for path in stale + [live, elsewhere]:
            (path / "sess").mkdir(parents=True)
        h2 = Harness(self, root=h.root)
        self.addCleanup(h2.stop)
        self.assertEqual(sorted(p.name for p in self.tmp.iterdir()), sorted([live.name, elsewhere.name]))


#: Every route that takes a body, with its request schema and who sends it.
BODY_ROUTES = [
    ("POST", "/sessions", "create", {}),
    ("PATCH", "/sessions/SID", "rename", {}),
    ("POST", "/sessions/SID/claim", "claim", {"client": "tab-1"}),
    ("POST", "/sessions/SID/release", "release", {"client": "tab-1"}),
    ("POST", "/sessions/SID/commands", "command", {"client": "tab-1"}),
    ("POST", "/sessions/SID/chimes", "chime", {"principal": "bea"}),
    ("POST", "/account/grants", "grant", {"principal": "owner"}),
]


#: Content types a body comes with: mostly JSON, sometimes a form.
CONTENT_TYPES = st.sampled_from(
    ["application/json"] * 6
    + ["multipart/form-data; boundary=x", "application/x-www-form-urlencoded", "TEXT/PLAIN",
       "Application/JSON; charset=utf-8", "application/problem+json", ""]
)

#: Numbers as a client might write them in a query or a header.
WATCH_NUMBERS = st.one_of(
    st.integers(min_value=-5, max_value=40_000).map(str),
    st.integers(min_value=1, max_value=6000).map(lambda n: "9" * n),
    st.sampled_from(["", "1e3", "0x10", " 1", "\u00b2\u00b3", "%ff", "1.5", "-0", "+1"]),
)


def _bodies(name: str) -> st.SearchStrategy[bytes]:
    base = valid(requestSchema(name))
    return st.one_of(base.map(lambda b: json.dumps(b).encode()), mutated(base))


class PropertyTests(HostileCase):
    """
    Generated requests, valid and mutated, to every route: each answer is
    a success or a table frame.
    """

    # No box on a memory reactor: an agent session is refused by setting
    # (isolation_unavailable, a table frame), not by a probe that would spawn.
    harnessSettings = {"isolation": "none"}

    def answer(self, method: str, path: str, body: bytes | None,
               extra: dict[str, str] | None = None, **who: Any) -> tuple[int, dict[str, Any]]:
        conn = self.send(method, path.replace("SID", self.sid), body, extra=extra, **who)
        self.h.clock.advance(31)  # a long-poll that waits answers
        try:
            return self.assertAnswer(conn)
        finally:
            conn.lose()  # its timers go with it

    @examples(40)
    @given(route=st.sampled_from(BODY_ROUTES), data=st.data(), contentType=CONTENT_TYPES)
    def test_bodies(self, route: Any, data: Any, contentType: str) -> None:
        method, path, name, who = route
        self.answer(method, path, data.draw(_bodies(name)),
                    extra={"content-type": contentType}, **who)

    @examples(40)
    @given(
        since=WATCH_NUMBERS, waitMs=WATCH_NUMBERS, lastEventId=WATCH_NUMBERS,
        accept=st.sampled_from(["", "application/json", "TEXT/EVENT-STREAM", "text/event-stream;q=0",
                                "text/event-stream; charset=utf-8", "*/*", "text/event-stream;q=x"]),
    )
    def test_watchArguments(self, since: str, waitMs: str, lastEventId: str, accept: str) -> None:
        """
        The watch route's numbers (query and header) and C{Accept}: a
        frame, or the stream when asked for.
        """
        conn = self.send("GET", f"/sessions/{self.sid}/events?since={since}&waitMs={waitMs}",
                         extra={"accept": accept, "last-event-id": lastEventId}, client="tab-1")
        self.h.clock.advance(31)
        try:
            if self.headers(conn).get("content-type", "").startswith("text/event-stream"):
                self.assertEqual(conn.status(), 200)
                self.h.api.stopStreams()
            else:
                self.assertAnswer(conn)
        finally:
            conn.lose()  # its timers go with it

    @examples(40)
    @given(
        method=st.one_of(st.sampled_from([b"GET", b"POST", b"get", b"PRI"]), st.binary(max_size=8)),
        target=st.one_of(st.sampled_from([b"/health", b"/sessions", b"*", b"http://h/x"]),
                         st.binary(max_size=60).map(lambda b: b"/" + b)),
        version=st.sampled_from([b"HTTP/1.1", b"HTTP/1.0", b"HTTP/2.0", b"http/1.1", b""]),
        headers=st.lists(st.binary(min_size=1, max_size=40).map(
            lambda h: h.replace(b"\r", b"").replace(b"\n", b"")).filter(bool), max_size=6),
        body=st.binary(max_size=40),
    )
    def test_rawHeads(self, method: bytes, target: bytes, version: bytes,
                      headers: list[bytes], body: bytes) -> None:
        """
        Any bytes for a request's head: it is answered with a frame (or
        waits for more), and nothing escapes from the parser.
        """
        head = b" ".join([method, target, version]) + b"\r\n"
        head += b"".join(h + b"\r\n" for h in headers)
        conn = self.connect()
        try:
            conn.send(head + b"host: h\r\nx-internal-service: test-secret-0123456789\r\n\r\n" + body)
            self.h.clock.advance(31)
            if conn.output():
                self.assertAnswer(conn)
            else:
                self.assertFalse(conn.closed)
        finally:
            conn.lose()

    @examples(25)
    @given(
        method=st.sampled_from(["GET", "POST", "PATCH", "DELETE", "PUT", "HEAD", "OPTIONS", "TRACE"]),
        tail=st.sampled_from(["", "/events", "/capsule", "/claim", "/commands", "/x"]),
        session=st.one_of(
            st.just("SID"),
            st.binary(min_size=1, max_size=40).map(lambda b: "".join(f"%{x:02X}" for x in b)),
        ),
        query=st.sampled_from(["", "?since=", "?since=-1", "?waitMs=1e3", "?since=0&waitMs=30001",
                               "?since=%ff", "?a=%00"]),
    )
    def test_pathsAndMethods(self, method: str, tail: str, session: str, query: str) -> None:
        if method == "DELETE" and session == "SID" and tail == "":
            return  # keep the session for the next example
        path = f"/sessions/{session}{tail}{query}"
        conn = self.send(method, path.replace("SID", self.sid),
                         b"{}" if method in ("POST", "PATCH", "PUT") else None, client="tab-1")
        self.h.clock.advance(31)
        try:
            if method == "HEAD":
                self.assertIsNotNone(conn.status())
                self.assertLess(conn.status(), 500)
            else:
                self.assertAnswer(conn)
        finally:
            conn.lose()


PathByLineTests = byLine(PathTests)
DeadlineAndSizeByLineTests = byLine(DeadlineAndSizeTests)
LongLineByLineTests = byLine(LongLineTests)
