# -*- test-case-name: tests.unit.test_page -*-
"""
The local run's page: the stand-in's front serves a small browser
client of the protocol at C{/} (static files from C{page/}, no build step),
with the stand-in's own login.

A person logs in once per tab, with the master key or the one-time link the
local run prints.  The login answers a I{tab token} (kept by the page in the
tab's C{sessionStorage} and sent as C{Authorization: Bearer}) and sets a
I{browser cookie} (C{HttpOnly}, C{SameSite=Strict}) for the two things a
bearer cannot do: the browser's own C{EventSource}, which sends no header of
ours, and a second tab's login without typing the key again.  Both are
signed with a key derived from the master key and expire; neither is the
master key, and the master key never rides in a URL.

In front of the gateway, a request for C{/services/vehicle/...} that
carries a valid tab token, or (for an SSE watch only) a valid browser
cookie and no C{Authorization}, is let in as the master key's holder: the
front puts the master key's bearer in its place before the gateway
authenticates it, so the gateway's own rules (and refusals) apply
unchanged.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
import secrets
from datetime import datetime, timezone
from importlib.resources import files
from typing import Any, ClassVar, Optional, cast

from attrs import define, field, frozen
from klein import Klein
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger
from twisted.web.resource import IResource
from twisted.web.server import Request
from zope.interface import implementer

from vehicle_local.standin._config import Config

#: How long a tab token and the browser cookie last (seconds).
LOGIN_SECONDS = 12 * 3600

#: The largest login body read.
MAX_LOGIN_BYTES = 4096

#: What a token looks like: C{vpage1.<scope>.<expires>.<nonce>.<mac>}.
_TOKEN = re.compile(r"^vpage1\.(tab|browser)\.([0-9]{1,12})\.([A-Za-z0-9_-]{16,64})\.([A-Za-z0-9_-]{43})$")

#: The SSE watch, the one route the browser cookie opens.
_WATCH = re.compile(rb"^/services/vehicle(?:/g/[^/]+)?/sessions/[^/]+/events$")

#: The mount the page's tab token opens (the gateway's).
_MOUNT = b"/services/vehicle"

#: The files the page is made of, and their types.
_TYPES = {
    ".html": b"text/html; charset=utf-8",
    ".css": b"text/css; charset=utf-8",
    ".js": b"text/javascript; charset=utf-8",
    ".svg": b"image/svg+xml",
    ".png": b"image/png",
}

#: Nothing from outside the machine, nothing inline: a text that slipped
#: into the page as markup still could not run.
_POLICY = (
    b"default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    b"connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)


@frozen(kw_only=True)
class StaticFile:
    """
    One file of the page, read once.
    """

    body: bytes
    contentType: bytes


def pageFiles() -> dict[str, StaticFile]:
    """
    Every file in the package's C{page/} folder, by name.
    """
    found = {}
    for entry in files("vehicle_local.standin").joinpath("page").iterdir():
        suffix = "." + entry.name.rsplit(".", 1)[-1] if "." in entry.name else ""
        kind = _TYPES.get(suffix)
        if entry.is_file() and kind is not None:
            found[entry.name] = StaticFile(body=entry.read_bytes(), contentType=kind)
    return found


def _refusal(request: Request, status: int, code: str, message: str) -> bytes:
    """
    The gateway's shape of a refusal.
    """
    request.setResponseCode(status)
    request.setHeader(b"content-type", b"application/json")
    request.setHeader(b"cache-control", b"no-store")
    return json.dumps({"ok": False, "error": {"code": code, "message": message}}).encode()


@define
class PageLogin:
    """
    The page's credentials: the one-time code, and the tokens it signs.

    @ivar masterKey: what a login must show (or the code stands for).
    @ivar clock: for the tokens' expiry.
    @ivar code: the one-time code of the login link, until it is used.
    """

    masterKey: str = field(repr=False)
    clock: IReactorTime
    code: Optional[str] = field(repr=False, factory=lambda: secrets.token_urlsafe(18))
    _key: bytes = field(init=False, repr=False)

    def __attrs_post_init__(self) -> None:
        self._key = hmac.new(
            self.masterKey.encode("utf-8"), b"vehicle local page v1", hashlib.sha256
        ).digest()

    @property
    def cookieName(self) -> str:
        """
        The browser cookie's name: one per master key, since a browser
        shares cookies between the ports of one host.
        """
        tag = hmac.new(self._key, b"cookie name", hashlib.sha256).hexdigest()[:10]
        return "vehicle_page_" + tag

    def _mac(self, text: str) -> str:
        digest = hmac.new(self._key, text.encode("ascii"), hashlib.sha256).digest()
        return base64.urlsafe_b64encode(digest).decode("ascii").rstrip("=")

    def mint(self, scope: str) -> tuple[str, int]:
        """
        A new token for C{scope} (C{tab} or C{browser}) and when it
        expires (seconds since the epoch).
        """
        expires = int(self.clock.seconds()) + LOGIN_SECONDS
        text = f"vpage1.{scope}.{expires}.{secrets.token_urlsafe(18)}"
        return text + "." + self._mac(text), expires

    def valid(self, token: str, scope: str) -> bool:
        """
        Whether C{token} is one this login signed, for C{scope}, and not
        expired.
        """
        match = _TOKEN.match(token)
        if match is None or match.group(1) != scope:
            return False
        if int(match.group(2)) <= self.clock.seconds():
            return False
        signed, _, mac = token.rpartition(".")
        return hmac.compare_digest(mac.encode("ascii"), self._mac(signed).encode("ascii"))

    def takeCode(self, given: str) -> bool:
        """
        Whether C{given} is the one-time code; it is used up by a match.
        """
        if self.code is None or not hmac.compare_digest(
            given.encode("utf-8"), self.code.encode("utf-8")
        ):
            return False
        self.code = None
        return True

    def isMasterKey(self, given: str) -> bool:
        """
        Whether C{given} is the master key.
        """
        return hmac.compare_digest(given.encode("utf-8"), self.masterKey.encode("utf-8"))

    def translate(self, request: Request) -> None:
        """
        Let a page's request for the service in as the master key's holder:
        a valid tab token as the bearer, or on an SSE watch with no
        C{Authorization} a valid browser cookie.  Anything else is left as
        it came, for the gateway to judge.
        """
        if not (request.path == _MOUNT or request.path.startswith(_MOUNT + b"/")):
            return
        header = (request.getHeader(b"authorization") or b"").decode("latin-1")
        scheme, _, credential = header.partition(" ")
        if header:
            if scheme.lower() == "bearer" and self.valid(credential.strip(), "tab"):
                self._asMaster(request)
            return
        cookie = request.getCookie(self.cookieName.encode("ascii"))
        if (
            cookie is not None
            and request.method == b"GET"
            and _WATCH.match(request.path)
            and b"text/event-stream" in (request.getHeader(b"accept") or b"").lower()
            and self.valid(cookie.decode("latin-1"), "browser")
        ):
            self._asMaster(request)

    def _asMaster(self, request: Request) -> None:
        request.requestHeaders.setRawHeaders(
            b"authorization", [b"Bearer " + self.masterKey.encode("utf-8")]
        )


@define
class Page:
    """
    The page's routes: its files, the login and the logout.

    @ivar config: the stand-in's (the graphs a session may be made on).
    @ivar login: the credentials.
    """

    config: Config
    login: PageLogin
    files: dict[str, StaticFile] = field(factory=pageFiles)

    router: ClassVar[Klein] = Klein()
    _log: ClassVar[Logger] = Logger()

    def link(self, front: str) -> str:
        """
        The one-time login link (the code rides in the fragment, which
        the browser never sends; the page takes it out of the address).
        """
        if self.login.code is None:
            return front + "/"
        return f"{front}/#login={self.login.code}"

    def front(self, gateway: IResource) -> IResource:
        """
        The stand-in's root: this page at C{/} and C{/page/...}, the
        gateway for the rest (a page's credentials made the master key's
        first).
        """
        return _Front(page=self.router.resource(), gateway=gateway, login=self.login)

    def _file(self, request: Request, name: str) -> bytes:
        found = self.files.get(name)
        if found is None:
            return _refusal(request, 404, "not_found", "no such file")
        request.setHeader(b"content-type", found.contentType)
        request.setHeader(b"cache-control", b"no-cache")
        request.setHeader(b"x-content-type-options", b"nosniff")
        request.setHeader(b"referrer-policy", b"no-referrer")
        request.setHeader(b"x-frame-options", b"DENY")
        request.setHeader(b"content-security-policy", _POLICY)
        if request.method == b"HEAD":
            request.setHeader(b"content-length", str(len(found.body)).encode("ascii"))
            return b""
        return found.body

    @router.route("/", methods=["GET", "HEAD"])
    def index(self, request: Request) -> bytes:
        """
        The page.
        """
        return self._file(request, "index.html")

    @router.route("/page/<name>", methods=["GET", "HEAD"])
    def static(self, request: Request, name: str) -> bytes:
        """
        One of the page's files (its own, by name; nothing else).
        """
        return self._file(request, name)

    @router.route("/page/login", methods=["POST"])
    def logIn(self, request: Request) -> bytes:
        """
        C{{"key"}} (the master key), C{{"code"}} (the link's one-time code),
        or C{{}} with this browser's cookie or a tab token as the bearer (a
        second tab, or a renewal): a tab token, and the cookie set again.
        """
        refused = self._sameOrigin(request)
        if refused is not None:
            return refused
        content = cast(Any, request.content)
        raw = content.read(MAX_LOGIN_BYTES + 1) if content is not None else b""
        if len(raw) > MAX_LOGIN_BYTES:
            return _refusal(request, 413, "body_too_large", "a login is a small JSON object")
        try:
            body = json.loads(raw.decode("utf-8") or "{}")
        except ValueError:
            return _refusal(request, 400, "invalid_json", "the body is not JSON")
        if not isinstance(body, dict) or not all(
            isinstance(body.get(k), str) for k in ("key", "code") if k in body
        ) or set(body) - {"key", "code"} or len(body) > 1:
            return _refusal(
                request, 400, "invalid_request",
                'send {"key": "<master key>"}, {"code": "<one-time code>"} or {}',
            )
        if "key" in body:
            ok = self.login.isMasterKey(body["key"])
        elif "code" in body:
            ok = self.login.takeCode(body["code"])
        else:
            ok = self._renewable(request)
        if not ok:
            self._log.info("A page login was refused.")
            return _refusal(
                request, 401, "unauthorized",
                "that is not the master key, the link was used already, or the login lapsed",
            )
        token, expires = self.login.mint("tab")
        browser, _ = self.login.mint("browser")
        request.addCookie(
            self.login.cookieName.encode("ascii"),
            browser.encode("ascii"),
            path=b"/",
            max_age=str(int(expires - self.login.clock.seconds())).encode("ascii"),
            httpOnly=True,
            sameSite="strict",
        )
        request.setHeader(b"content-type", b"application/json")
        request.setHeader(b"cache-control", b"no-store")
        return json.dumps(
            {
                "ok": True,
                "token": token,
                "expiresAt": _iso(expires),
                "principal": "owner",
                "graphs": list(self.config.graphs),
                "mount": _MOUNT.decode("ascii"),
            }
        ).encode("utf-8")

    def _renewable(self, request: Request) -> bool:
        """
        Whether a login without key or code may be renewed: this browser's
        cookie, or this tab's token as the bearer, is valid.
        """
        cookie = request.getCookie(self.login.cookieName.encode("ascii"))
        if cookie is not None and self.login.valid(cookie.decode("latin-1"), "browser"):
            return True
        header = (request.getHeader(b"authorization") or b"").decode("latin-1")
        scheme, _, credential = header.partition(" ")
        return scheme.lower() == "bearer" and self.login.valid(credential.strip(), "tab")

    @router.route("/page/logout", methods=["POST"])
    def logOut(self, request: Request) -> bytes:
        """
        Forget this browser's cookie (the tab forgets its token itself).
        """
        refused = self._sameOrigin(request)
        if refused is not None:
            return refused
        request.addCookie(
            self.login.cookieName.encode("ascii"), b"", path=b"/", max_age=b"0",
            httpOnly=True, sameSite="strict",
        )
        request.setHeader(b"content-type", b"application/json")
        return b'{"ok": true}'

    def _sameOrigin(self, request: Request) -> Optional[bytes]:
        """
        A refusal for a login or logout that is not the page's own: it must
        be JSON (so another origin's form cannot send it without asking
        first) and, when the browser says where it comes from, from here.
        """
        kind = (request.getHeader(b"content-type") or b"").split(b";")[0].strip().lower()
        if kind != b"application/json":
            return _refusal(request, 415, "unsupported_media_type", "send application/json")
        origin = request.getHeader(b"origin")
        host = request.getHeader(b"host") or b""
        if origin is not None and origin not in (b"http://" + host, b"https://" + host):
            return _refusal(request, 403, "forbidden", "a login comes from the page itself")
        site = request.getHeader(b"sec-fetch-site")
        if site is not None and site not in (b"same-origin", b"none"):
            return _refusal(request, 403, "forbidden", "a login comes from the page itself")
        return None


def _iso(seconds: int) -> str:
    return datetime.fromtimestamp(seconds, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


@implementer(IResource)
@define(eq=False)
class _Front:
    """
    The stand-in's root resource (a leaf: it takes the whole path): the
    page, or the gateway.
    """

    page: IResource
    gateway: IResource
    login: PageLogin
    isLeaf: ClassVar[bool] = True

    def getChildWithDefault(self, name: bytes, request: Request) -> IResource:
        raise NotImplementedError("a leaf has no children")

    def putChild(self, path: bytes, child: IResource) -> None:
        raise NotImplementedError("a leaf has no children")

    def render(self, request: Request) -> Any:
        path = request.path
        if path == b"/" or path.startswith(b"/page/"):
            return self.page.render(request)
        self.login.translate(request)
        return self.gateway.render(request)
