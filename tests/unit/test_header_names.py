"""
Header names reach Twisted as bytes from every part of vehicle.

Twisted keeps one cache of canonical header names for str and bytes names
alike; a str name beside the same name in bytes is compared with it, which
C{python -b} reports as a C{BytesWarning}.  The host, the clients and the
stand-in therefore always name headers in bytes.  Twisted itself names one
header in str (C{"Transfer-Encoding"}, set by C{twisted.web.http} on a chunked
response): that one is Twisted's, not ours, and not counted here.
"""

from __future__ import annotations

import sys
from typing import Any, Callable

from twisted.trial.unittest import SynchronousTestCase
from twisted.web.http_headers import Headers

from vehicle.clients import HostLink

from tests.support.harness import Harness


#: Libraries that only pass on the names their caller gave them.
_PASSING_ON = ("/treq/",)


def _ourCaller() -> str | None:
    """
    Where the header name came from, if that is vehicle's code or its tests:
    the first frame outside L{Headers} and the libraries that pass names on.
    """
    frame = sys._getframe(2)
    while frame is not None and any(part in frame.f_code.co_filename for part in _PASSING_ON):
        frame = frame.f_back
    if frame is None:
        return None
    filename = frame.f_code.co_filename
    if "site-packages" in filename or "/lib/python" in filename:
        return None
    return f"{filename}:{frame.f_lineno}"


class HeaderNameTests(SynchronousTestCase):
    """
    A request through the host (JSON, an error, an SSE stream) and through
    the clients' L{HostLink} names every header in bytes.
    """

    def setUp(self) -> None:
        self.strNames: list[tuple[str, str]] = []
        for method in ("setRawHeaders", "addRawHeader", "getRawHeaders", "hasHeader", "removeHeader"):
            self.patch(Headers, method, self._recording(getattr(Headers, method)))
        self.h = Harness(self)
        self.addCleanup(self.h.stop)

    def _recording(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def recorded(headers: Headers, name: str | bytes, *args: Any, **kw: Any) -> Any:
            if isinstance(name, str):
                where = _ourCaller()
                if where is not None:
                    self.strNames.append((name, where))
            return original(headers, name, *args, **kw)

        return recorded

    def test_recorderSeesAStrName(self) -> None:
        """
        The recorder itself notices a str name from this module.
        """
        Headers().setRawHeaders("x-test", [b"1"])
        self.assertEqual([name for name, _ in self.strNames], ["x-test"])

    def test_hostAnswers(self) -> None:
        """
        Creating a session, a command, a refused method and an SSE stream.
        """
        sid = self.h.create()["sessionId"]
        code, frame = self.h.call("POST", f"/sessions/{sid}/commands",
                                  {"requestId": "p1", "type": "prompt", "text": "hi"})
        self.assertEqual(frame["type"], "command.accepted")
        code, _ = self.h.call("PUT", "/sessions")
        self.assertEqual(code, 405)
        d = self.h.request("GET", f"/sessions/{sid}/events", headers={"accept": "text/event-stream"})
        self.h.stub.flush()
        self.assertEqual(self.successResultOf(d).code, 200)
        self.assertEqual(self.strNames, [])

    def test_linkRequests(self) -> None:
        """
        The clients' link sends its credentials and client id in bytes.
        """
        link = HostLink(
            http=self.h.stub,
            gardend="http://host",
            graph="g1",
            headers={"Authorization": "Bearer t", "X-Vehicle-Client-Id": "tab-1"},
        )
        d = link.call("GET", "/sessions")
        self.h.stub.flush()
        self.successResultOf(d)
        d = link.call("POST", "/sessions", payload={"requestId": "c1"})
        self.h.stub.flush()
        self.successResultOf(d)
        self.assertEqual(self.strNames, [])
