"""
Tests for the local run's page on the stand-in (L{vehicle_local.standin.Page},
L{vehicle_local.standin.PageLogin}): its files and their headers, the login
(the master key, the one-time code, the browser's cookie, the tab's token),
its refusals, and how the front lets a page's request through to the
gateway as the master key's holder, and nothing else.
"""

from __future__ import annotations

import json
from http.cookies import SimpleCookie
from pathlib import Path
from typing import Any

from treq.testing import StubTreq
from twisted.internet.testing import MemoryReactorClock
from twisted.trial.unittest import SynchronousTestCase
from twisted.web.resource import Resource
from twisted.web.server import Request

from vehicle_local.standin import LOGIN_SECONDS, PageLogin, StandIn

from tests.support.gardend import MASTER, makeConfig

FRONT = "http://127.0.0.1:8700"


class _Host(Resource):
    """
    The host behind the gateway: it records what reached it and answers
    C{{"reached": true}}.
    """

    isLeaf = True

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[dict[str, str]] = []

    def render(self, request: Request) -> bytes:
        self.seen.append(
            {
                k.decode().lower(): v[-1].decode()
                for k, v in request.requestHeaders.getAllRawHeaders()
            }
        )
        request.setHeader(b"content-type", b"application/json")
        return b'{"reached": true}'


class PageLoginTests(SynchronousTestCase):
    """
    L{PageLogin}: the tokens it signs and the one-time code.
    """

    def setUp(self) -> None:
        self.clock = MemoryReactorClock()
        self.clock.advance(1_800_000_000)
        self.login = PageLogin(masterKey=MASTER, clock=self.clock)

    def test_roundTrip(self) -> None:
        """
        A token it minted is valid for its own scope only, until it
        expires; it never holds the master key.
        """
        token, expires = self.login.mint("tab")
        self.assertEqual(expires, 1_800_000_000 + LOGIN_SECONDS)
        self.assertNotIn(MASTER, token)
        self.assertTrue(self.login.valid(token, "tab"))
        self.assertFalse(self.login.valid(token, "browser"))
        self.clock.advance(LOGIN_SECONDS - 1)
        self.assertTrue(self.login.valid(token, "tab"))
        self.clock.advance(1)
        self.assertFalse(self.login.valid(token, "tab"))

    def test_forgeries(self) -> None:
        """
        A token with its expiry, scope or signature changed, one signed for
        another master key, and junk are all invalid.
        """
        token, _ = self.login.mint("browser")
        _, scope, expires, nonce, mac = token.split(".")
        later = f"vpage1.{scope}.{int(expires) + 1000}.{nonce}.{mac}"
        rescoped = f"vpage1.tab.{expires}.{nonce}.{mac}"
        flipped = token[:-1] + ("A" if token[-1] != "A" else "B")
        other, _ = PageLogin(masterKey="another-key", clock=self.clock).mint("browser")
        for bad in (later, rescoped, flipped, other, "", "vpage1", MASTER, token + "."):
            self.assertFalse(self.login.valid(bad, "browser"), bad)
            self.assertFalse(self.login.valid(bad, "tab"), bad)

    def test_codeOnce(self) -> None:
        """
        The one-time code lets in once; a wrong code never, and does not
        use it up.
        """
        code = self.login.code
        assert code is not None
        self.assertFalse(self.login.takeCode(code + "x"))
        self.assertTrue(self.login.takeCode(code))
        self.assertFalse(self.login.takeCode(code))
        self.assertIsNone(self.login.code)

    def test_secretsOutOfRepr(self) -> None:
        """
        Neither the master key nor the code shows in the login's C{repr};
        the cookie's name is stable for a key and tells nothing of it.
        """
        text = repr(self.login)
        self.assertNotIn(MASTER, text)
        self.assertNotIn(str(self.login.code), text)
        again = PageLogin(masterKey=MASTER, clock=self.clock)
        self.assertEqual(self.login.cookieName, again.cookieName)
        self.assertNotEqual(
            self.login.cookieName, PageLogin(masterKey="k2", clock=self.clock).cookieName
        )
        self.assertNotIn(MASTER, self.login.cookieName)


class _PageCase(SynchronousTestCase):
    """
    A stand-in whose gateway forwards to L{_Host}, its whole front
    through L{StubTreq}.
    """

    def setUp(self) -> None:
        self.reactor = MemoryReactorClock()
        self.reactor.advance(1_800_000_000)
        self.host = _Host()
        self.standIn = StandIn(
            root=Path(self.mktemp()),
            config=makeConfig(),
            reactor=self.reactor,
            http=StubTreq(self.host),
        )
        self.login = self.standIn.page.login

    def request(
        self, method: str, path: str, body: Any = None, **headers: str
    ) -> tuple[int, dict[str, list[str]], bytes]:
        data = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
        # A new client each time: treq's keeps cookies, and each test says
        # which cookie a request carries.
        stub = StubTreq(self.standIn.resource())
        response = self.successResultOf(
            stub.request(
                method,
                FRONT + path,
                data=data,
                # Header names in bytes, as Twisted keeps them (python -b).
                headers={k.replace("_", "-").encode(): [v.encode()] for k, v in headers.items()},
            )
        )
        content = self.successResultOf(response.content())
        found = {
            k.decode().lower(): [v.decode() for v in values]
            for k, values in response.headers.getAllRawHeaders()
        }
        return response.code, found, content

    def logIn(self, body: Any, **headers: str) -> tuple[int, dict[str, list[str]], Any]:
        headers.setdefault("content_type", "application/json")
        code, found, content = self.request("POST", "/page/login", body, **headers)
        return code, found, json.loads(content)

    def cookieOf(self, found: dict[str, list[str]]) -> Any:
        [raw] = found["set-cookie"]
        cookie = SimpleCookie()
        cookie.load(raw)
        return cookie[self.login.cookieName], raw


class FilesTests(_PageCase):
    """
    The page's files.
    """

    def test_index(self) -> None:
        """
        C{/} is the page: HTML that loads its module from C{/page/}, with a
        policy that lets nothing in from elsewhere or inline, and no
        framing.
        """
        code, headers, body = self.request("GET", "/")
        self.assertEqual(code, 200)
        self.assertEqual(headers["content-type"], ["text/html; charset=utf-8"])
        self.assertIn(b'<script type="module" src="/page/app.js">', body)
        [policy] = headers["content-security-policy"]
        self.assertIn("default-src 'none'", policy)
        self.assertIn("script-src 'self';", policy)
        self.assertNotIn("unsafe-inline", policy)
        self.assertEqual(headers["x-frame-options"], ["DENY"])
        self.assertEqual(headers["x-content-type-options"], ["nosniff"])

    def test_everyFileTheIndexNames(self) -> None:
        """
        Every file the page and its modules name under C{/page/} is served
        with its type; the modules name no address outside the machine.
        """
        _, _, index = self.request("GET", "/")
        names = {"app.js", "page.css", "icon.svg"}
        for name in sorted(names):
            self.assertIn(f"/page/{name}".encode(), index)
        seen: set[str] = set()
        while names - seen:
            name = sorted(names - seen)[0]
            seen.add(name)
            code, headers, body = self.request("GET", "/page/" + name)
            self.assertEqual(code, 200, name)
            kind = {"js": "text/javascript", "css": "text/css", "svg": "image/svg+xml"}
            self.assertTrue(headers["content-type"][0].startswith(kind[name.rsplit(".", 1)[1]]))
            if name.endswith(".js"):
                text = body.decode()
                self.assertNotIn("http://", text)
                self.assertNotIn("https://", text)
                self.assertNotIn("innerHTML", text)
                self.assertNotIn("insertAdjacentHTML", text)
                for line in text.splitlines():
                    if line.startswith("import "):
                        names.add(line.split('"./')[1].split('"')[0])
        self.assertIn("conversation.js", seen)
        self.assertIn("watch.js", seen)

    def test_head(self) -> None:
        """
        C{HEAD} says the length and sends nothing.
        """
        code, headers, body = self.request("HEAD", "/page/app.js")
        self.assertEqual(code, 200)
        self.assertEqual(body, b"")
        self.assertEqual(
            int(headers["content-length"][0]), len(self.standIn.page.files["app.js"].body)
        )

    def test_noOtherFile(self) -> None:
        """
        Only the page's own files: a name it does not have, or a path out of
        its folder, is C{not_found}; another method is refused.
        """
        for path in ("/page/nope.js", "/page/..%2f_page.py", "/page/%2e%2e/_page.py",
                     "/page/", "/page/_page.py", "/page/__init__.py"):
            code, _, body = self.request("GET", path)
            self.assertEqual(code, 404, path)
            if body:
                self.assertNotIn(b"import", body)
        code, _, _ = self.request("POST", "/page/app.js")
        self.assertEqual(code, 405)
        code, _, _ = self.request("DELETE", "/")
        self.assertEqual(code, 405)


class LoginTests(_PageCase):
    """
    C{POST /page/login} and C{/page/logout}.
    """

    def test_masterKey(self) -> None:
        """
        The master key gets a tab token and sets the browser cookie:
        C{HttpOnly}, C{SameSite=Strict}, for the whole site, as long as the
        token; neither is the master key, and the answer is not kept.
        """
        code, headers, body = self.logIn({"key": MASTER})
        self.assertEqual(code, 200)
        self.assertTrue(body["ok"])
        self.assertTrue(self.login.valid(body["token"], "tab"))
        self.assertEqual(body["principal"], "owner")
        self.assertEqual(body["graphs"], ["g1", "g2"])
        self.assertEqual(body["mount"], "/services/vehicle")
        self.assertEqual(headers["cache-control"], ["no-store"])
        morsel, raw = self.cookieOf(headers)
        self.assertTrue(self.login.valid(morsel.value, "browser"))
        self.assertFalse(self.login.valid(morsel.value, "tab"))
        self.assertIn("HttpOnly", raw)
        self.assertIn("SameSite=strict", raw)
        self.assertEqual(morsel["path"], "/")
        self.assertEqual(int(morsel["max-age"]), LOGIN_SECONDS)
        self.assertNotIn(MASTER, json.dumps(body) + raw)

    def test_wrongKey(self) -> None:
        """
        Another key is C{unauthorized} and sets nothing.
        """
        code, headers, body = self.logIn({"key": MASTER + "x"})
        self.assertEqual(code, 401)
        self.assertEqual(body["error"]["code"], "unauthorized")
        self.assertNotIn("set-cookie", headers)

    def test_oneTimeCode(self) -> None:
        """
        The link's code lets in once; the link the banner prints carries it
        in the fragment, and names the bare page once it is used.
        """
        code = self.login.code
        assert code is not None
        self.assertEqual(self.standIn.page.link(FRONT), f"{FRONT}/#login={code}")
        status, headers, body = self.logIn({"code": code})
        self.assertEqual(status, 200)
        self.assertTrue(self.login.valid(body["token"], "tab"))
        self.assertIn("set-cookie", headers)
        status, _, body = self.logIn({"code": code})
        self.assertEqual((status, body["error"]["code"]), (401, "unauthorized"))
        self.assertEqual(self.standIn.page.link(FRONT), FRONT + "/")

    def test_secondTabByCookie(self) -> None:
        """
        With neither key nor code, this browser's cookie (another tab's
        login) or this tab's token lets in; a tab token as a cookie, a
        browser cookie as the bearer, or nothing at all does not.
        """
        _, headers, first = self.logIn({"key": MASTER})
        morsel, _ = self.cookieOf(headers)
        name = self.login.cookieName
        status, _, body = self.logIn({}, cookie=f"{name}={morsel.value}")
        self.assertEqual(status, 200)
        self.assertNotEqual(body["token"], first["token"])
        status, _, _ = self.logIn({}, authorization="Bearer " + first["token"])
        self.assertEqual(status, 200)
        for headers in (
            {"cookie": f"{name}={first['token']}"},
            {"authorization": "Bearer " + morsel.value},
            {"authorization": "Bearer " + MASTER},
            {},
        ):
            status, _, body = self.logIn({}, **headers)
            self.assertEqual((status, body["error"]["code"]), (401, "unauthorized"), headers)

    def test_expiredCookie(self) -> None:
        """
        A cookie past its time lets nobody in.
        """
        _, headers, _ = self.logIn({"key": MASTER})
        morsel, _ = self.cookieOf(headers)
        self.reactor.advance(LOGIN_SECONDS)
        status, _, _ = self.logIn({}, cookie=f"{self.login.cookieName}={morsel.value}")
        self.assertEqual(status, 401)

    def test_malformed(self) -> None:
        """
        A body that is not one small JSON object of C{key} or C{code} gets
        the refusal's code, never a 500.
        """
        cases = [
            (b"{not json", 400, "invalid_json"),
            ({"key": 1}, 400, "invalid_request"),
            ({"key": MASTER, "code": "x"}, 400, "invalid_request"),
            ({"password": MASTER}, 400, "invalid_request"),
            ([MASTER], 400, "invalid_request"),
            (b"\xff\xfe", 400, "invalid_json"),
            (json.dumps({"key": "x" * 5000}).encode(), 413, "body_too_large"),
        ]
        for body, status, errorCode in cases:
            code, _, answer = self.logIn(body)
            self.assertEqual((code, answer["error"]["code"]), (status, errorCode), body)

    def test_notFromThePage(self) -> None:
        """
        A login that another origin could send without asking first (not
        JSON), or that the browser says comes from another origin or site,
        is refused even with the right key.
        """
        code, _, body = self.logIn({"key": MASTER}, content_type="text/plain")
        self.assertEqual((code, body["error"]["code"]), (415, "unsupported_media_type"))
        code, _, body = self.logIn({"key": MASTER}, origin="http://127.0.0.1:9999")
        self.assertEqual((code, body["error"]["code"]), (403, "forbidden"))
        code, _, body = self.logIn({"key": MASTER}, sec_fetch_site="same-site")
        self.assertEqual((code, body["error"]["code"]), (403, "forbidden"))
        code, _, _ = self.logIn(
            {"key": MASTER}, origin=FRONT, sec_fetch_site="same-origin", host="127.0.0.1:8700"
        )
        self.assertEqual(code, 200)
        code, _, _ = self.request("GET", "/page/login")
        self.assertEqual(code, 404)

    def test_logout(self) -> None:
        """
        Logging out clears the cookie.
        """
        code, headers, body = self.request(
            "POST", "/page/logout", b"{}", content_type="application/json"
        )
        self.assertEqual((code, json.loads(body)), (200, {"ok": True}))
        morsel, _ = self.cookieOf(headers)
        self.assertEqual((morsel.value, morsel["max-age"]), ("", "0"))


class GatewayTests(_PageCase):
    """
    A page's requests reach the gateway as the master key's holder; nothing
    else is changed.
    """

    def tokens(self) -> tuple[str, str]:
        _, headers, body = self.logIn({"key": MASTER})
        morsel, _ = self.cookieOf(headers)
        return body["token"], morsel.value

    def test_tabToken(self) -> None:
        """
        A tab token as the bearer reaches the host as the owner, with the
        tab's own client id; the host never sees the token, the cookie or
        the master key.
        """
        token, browser = self.tokens()
        code, _, body = self.request(
            "GET", "/services/vehicle/g/g1/sessions", authorization="Bearer " + token,
            x_vehicle_client_id="page-1", cookie=f"{self.login.cookieName}={browser}",
        )
        self.assertEqual((code, json.loads(body)), (200, {"reached": True}))
        [seen] = self.host.seen
        self.assertEqual(seen["x-user-id"], "owner")
        self.assertEqual(seen["x-vehicle-client-id"], "page-1")
        self.assertEqual(seen["x-graph-id"], "g1")
        for header in ("authorization", "cookie"):
            self.assertNotIn(header, seen)
        self.assertNotIn(token, json.dumps(seen))
        self.assertNotIn(MASTER, json.dumps(seen))

    def test_cookieOpensTheWatchOnly(self) -> None:
        """
        The browser cookie alone opens a session's SSE watch (bound to a
        graph or not), and nothing else: not the long-poll, not another
        route, not another method, not with another bearer beside it.
        """
        _, browser = self.tokens()
        cookie = f"{self.login.cookieName}={browser}"
        sse = "text/event-stream"
        for path in ("/services/vehicle/g/g1/sessions/s1/events?since=3",
                     "/services/vehicle/sessions/s1/events"):
            code, _, _ = self.request("GET", path, cookie=cookie, accept=sse)
            self.assertEqual(code, 200, path)
        self.assertEqual(len(self.host.seen), 2)
        refused = [
            ("GET", "/services/vehicle/g/g1/sessions/s1/events", {"accept": "application/json"}),
            ("GET", "/services/vehicle/g/g1/sessions", {"accept": sse}),
            ("GET", "/services/vehicle/g/g1/sessions/s1", {"accept": sse}),
            ("POST", "/services/vehicle/g/g1/sessions/s1/events", {"accept": sse}),
            ("GET", "/services/vehicle/g/g1/sessions/s1/events",
             {"accept": sse, "authorization": "Bearer nope"}),
        ]
        for method, path, headers in refused:
            code, _, body = self.request(method, path, cookie=cookie, **headers)
            self.assertEqual((code, json.loads(body)["error"]["code"]), (401, "unauthorized"),
                             (method, path, headers))
        self.assertEqual(len(self.host.seen), 2)

    def test_notForOtherRoutes(self) -> None:
        """
        A tab token opens the service's mount only: C{/mcp} refuses it.
        """
        token, _ = self.tokens()
        code, _, _ = self.request(
            "POST", "/mcp", b"{}", authorization="Bearer " + token,
            content_type="application/json",
        )
        self.assertEqual(code, 401)

    def test_badTokens(self) -> None:
        """
        A lapsed or forged tab token, and a browser token as the bearer,
        are the gateway's own C{unauthorized}; the master key still works
        as it always did.
        """
        token, browser = self.tokens()
        path = "/services/vehicle/g/g1/sessions"
        self.reactor.advance(LOGIN_SECONDS)
        for bearer in (token, browser, token[:-2] + "xx"):
            code, _, body = self.request("GET", path, authorization="Bearer " + bearer)
            self.assertEqual((code, json.loads(body)["error"]["code"]), (401, "unauthorized"))
        self.assertEqual(self.host.seen, [])
        code, _, _ = self.request("GET", path, authorization="Bearer " + MASTER)
        self.assertEqual(code, 200)
        self.assertEqual([s["x-user-id"] for s in self.host.seen], ["owner"])
