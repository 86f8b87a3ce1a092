"""
L{vehicle.web._trust}: who calls, read from gardend's headers, and the
callers kept by those headers.  The routes' refusals are in
L{tests.unit.test_web.TrustTests}.
"""

from __future__ import annotations

from typing import Any

from twisted.trial.unittest import SynchronousTestCase
from twisted.web.test.requesthelper import DummyRequest

from vehicle.errors import VehicleError
from vehicle.web import _trust
from vehicle.web._trust import KNOWN_MOST, authenticate, readCaller

from tests.support.spies import spyOn


SECRET = "trust-secret"

IDENTITY = {
    "x-internal-service": SECRET, "x-user-id": "alice", "x-graph-id": "g1",
    "x-sophia-graph-role": "editor", "x-vehicle-client-id": "tab-1",
}


def request(headers: dict[str, str], length: int | None = None) -> DummyRequest:
    made = DummyRequest([b""])
    for name, value in headers.items():
        made.requestHeaders.addRawHeader(name, value)
    if length is not None:
        made.requestHeaders.addRawHeader("content-length", str(length))
    return made


class KnownCallerTests(SynchronousTestCase):
    """
    A caller is read once for the same headers; anything trust reads that
    differs is read again, and the secret is checked every time.
    """

    def setUp(self) -> None:
        self.patch(_trust, "_known", {})
        self.reads = spyOn(self, _trust, "readCaller")

    def test_sameHeadersReadOnce(self) -> None:
        """
        The same headers (whatever the body's length) give the same caller,
        read once.
        """
        first = authenticate(request(IDENTITY, 10), SECRET)
        again = authenticate(request(IDENTITY, 99), SECRET)
        self.assertIs(again, first)
        self.assertEqual(len(self.reads), 1)
        self.assertEqual((first.principal, first.clientId, first.graphId, first.role),
                         ("alice", "tab-1", "g1", "editor"))

    def test_anyHeaderReadAgain(self) -> None:
        """
        A header changed, added or taken away is read again, and its own
        caller (or refusal) follows.
        """
        first = authenticate(request(IDENTITY), SECRET)
        other = authenticate(request({**IDENTITY, "x-vehicle-client-id": "tab-2"}), SECRET)
        self.assertEqual(other.clientId, "tab-2")
        added = authenticate(request({**IDENTITY, "x-sophia-caller-kind": "account"}), SECRET)
        self.assertEqual((added.kind, added.role), ("account", "viewer"))
        taken = dict(IDENTITY)
        del taken["x-vehicle-client-id"]
        self.assertEqual(authenticate(request(taken), SECRET).clientId, "alice")
        self.assertEqual(len(self.reads), 4)
        self.assertIs(authenticate(request(IDENTITY), SECRET), first)
        error = self.assertRaises(VehicleError, authenticate,
                                  request({**IDENTITY, "x-sophia-graph-role": "admin"}), SECRET)
        self.assertEqual(error.code, "invalid_identity")

    def test_secretEveryTime(self) -> None:
        """
        Headers whose caller was kept are still refused by a host whose
        secret they do not carry.
        """
        authenticate(request(IDENTITY), SECRET)
        error = self.assertRaises(VehicleError, authenticate, request(IDENTITY), "another")
        self.assertEqual(error.code, "unauthorized")

    def test_tokenNeverKept(self) -> None:
        """
        gardend mints a new delegation token for each request: a caller is
        kept by the rest of its headers, holding no token, and each request
        has its own token, on a graph only.
        """
        first = authenticate(request({**IDENTITY, "x-sophia-delegated-token": "tok-1"}), SECRET)
        second = authenticate(request({**IDENTITY, "x-sophia-delegated-token": "tok-2"}), SECRET)
        none = authenticate(request(IDENTITY), SECRET)
        empty = authenticate(request({**IDENTITY, "x-sophia-delegated-token": ""}), SECRET)
        self.assertEqual([c.delegatedToken for c in (first, second, none, empty)],
                         ["tok-1", "tok-2", None, None])
        self.assertEqual(len(self.reads), 1)
        self.assertEqual({second.principal, second.clientId, second.graphId, second.role},
                         {"alice", "tab-1", "g1", "editor"})
        self.assertEqual([c.delegatedToken for c in _trust._known.values()], [None])
        unbound = dict(IDENTITY, **{"x-sophia-caller-role": "owner"})
        del unbound["x-graph-id"]
        for token in ("tok-3", "tok-4"):
            caller = authenticate(request({**unbound, "x-sophia-delegated-token": token}), SECRET)
            self.assertEqual((caller.graphId, caller.delegatedToken), (None, None))
        self.assertEqual(len(self.reads), 2)

    def test_modelKeyNeverKept(self) -> None:
        """
        A caller with a model key is read at every request, never kept.
        """
        extra = {"x-sophia-caller-kind": "anonymous", "x-model-key": "sk-test-12345678"}
        first = authenticate(request({**IDENTITY, **extra}), SECRET)
        again = authenticate(request({**IDENTITY, **extra}), SECRET)
        self.assertIsNot(again, first)
        self.assertEqual(again, first)
        self.assertEqual(first.modelKey, "sk-test-12345678")
        self.assertEqual(_trust._known, {})
        self.assertEqual(len(self.reads), 2)

    def test_bounded(self) -> None:
        """
        At most L{KNOWN_MOST} callers are kept: one more starts afresh.
        """
        for n in range(KNOWN_MOST):
            authenticate(request({**IDENTITY, "x-vehicle-client-id": f"tab-{n}"}), SECRET)
        self.assertEqual(len(_trust._known), KNOWN_MOST)
        authenticate(request({**IDENTITY, "x-vehicle-client-id": "one-more"}), SECRET)
        self.assertEqual(len(_trust._known), 1)

    def test_readsOnlyWhatIsHeard(self) -> None:
        """
        Reading a caller looks at no header the key leaves out (the body's
        length): each header it asks for is one L{_trust._heard} holds.
        """
        asked: list[str] = []

        class Said(dict[str, str]):
            def get(self, name: str, default: Any = None) -> Any:
                asked.append(name)
                return dict.get(self, name, default)

            def __getitem__(self, name: str) -> str:
                asked.append(name)
                return dict.__getitem__(self, name)

        said = _trust._said
        self.patch(_trust, "_said", lambda request: Said(said(request)))
        for extra in ({}, {"x-sophia-caller-kind": "account", "x-sophia-public-graphs": "g1"},
                      {"x-sophia-caller-kind": "anonymous", "x-model-key": "sk-test-12345678"}):
            readCaller(request({**IDENTITY, **extra}, 5))
        self.assertTrue(asked)
        self.assertNotIn("content-length", asked)
        self.assertEqual([name for name in asked if not name.startswith("x-")], [])
