"""
Public sessions through the routes: the doors, the limits, the ledger and
/account (spec, "Public sessions").
"""

from __future__ import annotations

import errno
from typing import Any

from vehicle.models import ModelCatalog
from vehicle.store import OsFiles, useFiles

from tests.support.public import (
    ACCOUNT,
    KEY,
    PUBLIC,
    VISITOR,
    account,
    figures,
    ledgerRows,
    visitor,
    withPostgres,
)
from tests.support.routes import RouteTestCase


class PublicTests(RouteTestCase):
    """
    A public caller opens a conversation by one of two doors.
    """

    harnessSettings = {"public": PUBLIC}

    def test_visitorWithNeitherRefused(self) -> None:
        """
        A visitor with no key and no account is refused at creation, and
        the refusal names both doors.
        """
        frame = self.refused("model_key_required", "POST", "/sessions", {"requestId": "c1"},
                             headers=visitor(), **VISITOR)
        self.assertEqual(set(frame["details"]["doors"]), {"byok", "account"})

    def test_ownKeyDoor(self) -> None:
        """
        With X-Model-Key the session is byok, a viewer's, with the host's
        public budget and the public graphs recorded; the key is in no file.
        """
        frame = self.ok("POST", "/sessions",
                        {"requestId": "c1", "budget": {"maxTurns": 99}},
                        headers=visitor(KEY), **VISITOR)
        session = frame["value"]["session"]
        self.assertEqual(session["funding"], "byok")
        self.assertEqual(session["role"], "viewer")
        self.assertEqual(session["budget"]["maxTurns"], PUBLIC.runMaxTurns)
        self.assertEqual(session["graphs"], ["g1", "g2"])
        for path in self.h.root.rglob("*"):
            if path.is_file():
                self.assertNotIn(KEY.encode(), path.read_bytes(), str(path))

    def test_ownKeyNamesAnotherProvider(self) -> None:
        """
        An own key runs only the public provider's models.
        """
        self.refused("model_not_allowed", "POST", "/sessions",
                     {"requestId": "c1", "model": "other/model"}, headers=visitor(KEY), **VISITOR)

    def test_ownKeyOnAnApiNoProxySpeaks(self) -> None:
        """
        An own key is only ever held by a body's proxy: a model of the
        public provider on an API the proxy does not speak is refused
        (C{model_unavailable} 503, naming the API), and nothing is made.
        """
        public = self.h.api.public
        assert public is not None
        providers = dict(public.models.providers)
        provider = PUBLIC.provider
        providers[provider] = {**providers[provider], "api": "bedrock-converse-stream"}
        public.models = ModelCatalog(providers, public.models.default)
        code, frame = self.h.call("POST", "/sessions", {"requestId": "c1"},
                                  headers=visitor(KEY), **VISITOR)
        self.assertEqual((code, frame["code"]), (503, "model_unavailable"), frame)
        self.assertIn("bedrock-converse-stream", frame["message"])
        self.assertEqual(self.h.call("GET", "/sessions", **VISITOR)[1]["value"]["sessions"], [])

    def test_invalidModelKey(self) -> None:
        """
        A key that is not one printable token of 8 to 512 characters is
        refused.
        """
        self.refused("invalid_model_key", "POST", "/sessions", {"requestId": "c1"},
                     headers=visitor("short"), **VISITOR)

    def test_turnLimits(self) -> None:
        """
        Turns per conversation and per day are counted before acceptance;
        the metrics count each refusal by its code.
        """
        sid = self.ok("POST", "/sessions", {"requestId": "c1"},
                      headers=visitor(KEY), **VISITOR)["value"]["session"]["sessionId"]
        for n in range(PUBLIC.sessionMaxTurns):
            self.prompt(sid, f"p{n}", headers=visitor(KEY), **VISITOR)
        self.refused("session_turn_limit", "POST", f"/sessions/{sid}/commands",
                     {"type": "prompt", "requestId": "px", "text": "more"},
                     headers=visitor(KEY), **VISITOR)
        other = self.ok("POST", "/sessions", {"requestId": "c2"},
                        headers=visitor(KEY), **VISITOR)["value"]["session"]["sessionId"]
        self.prompt(other, "q1", headers=visitor(KEY), **VISITOR)
        self.refused("daily_turn_limit", "POST", f"/sessions/{other}/commands",
                     {"type": "prompt", "requestId": "q2", "text": "more"},
                     headers=visitor(KEY), **VISITOR)
        frame = self.ok("GET", "/account", headers=visitor(KEY), **VISITOR)
        self.assertEqual(frame["value"]["kind"], "anonymous")
        self.assertEqual(frame["value"]["turnsToday"], PUBLIC.turnsPerDay)
        # Each refusal counted for an operator, by its code.
        refused = self.h.api.metrics.registry.get_sample_value
        for reason in ("session_turn_limit", "daily_turn_limit"):
            self.assertEqual(refused("vehicle_public_turns_refused_total", {"reason": reason}), 1)

    def test_byokTurnNeedsTheKey(self) -> None:
        """
        After a restart a byok conversation has no key: a turn without one
        is model_key_required; the next with it is accepted.
        """
        sid = self.ok("POST", "/sessions", {"requestId": "c1"},
                      headers=visitor(KEY), **VISITOR)["value"]["session"]["sessionId"]
        self.h.restart()
        self.refused("model_key_required", "POST", f"/sessions/{sid}/commands",
                     {"type": "prompt", "requestId": "p1", "text": "hi"},
                     headers=visitor(), **VISITOR)
        self.prompt(sid, "p1", headers=visitor(KEY), **VISITOR)

    def test_accountCredit(self) -> None:
        """
        A verified account gets the signup credit once, sees it on /account,
        and opens a credit conversation; an unverified one has none.
        """
        frame = self.ok("GET", "/account", headers=account(), **ACCOUNT)
        self.assertEqual(frame["value"]["credit"]["balanceUsd"], 0.5)
        self.ok("GET", "/account", headers=account(), **ACCOUNT)
        frame = self.ok("GET", "/account", headers=account(), **ACCOUNT)
        self.assertEqual(frame["value"]["credit"]["grantedUsd"], 0.5)
        frame = self.ok("POST", "/sessions", {"requestId": "c1"}, headers=account(), **ACCOUNT)
        self.assertEqual(frame["value"]["session"]["funding"], "credit")
        self.refused("email_unverified", "POST", "/sessions", {"requestId": "c1"},
                     headers=account(verified=False), principal="cognito:456", role="viewer")
        grants = ledgerRows(self.h, "grant")
        self.assertEqual([g["key"] for g in grants], ["signup:cognito:123"])

    def test_grantsOwnerOnlyAndIdempotent(self) -> None:
        """
        Only the owner grants credit; a grant delivered twice credits once.
        """
        body = {"principal": "cognito:123", "amountUsd": 2.0, "source": "purchase",
                "idempotencyKey": "pay-1"}
        self.refused("forbidden", "POST", "/account/grants", body, principal="bob", role="editor")
        first = self.ok("POST", "/account/grants", body, principal="owner")
        again = self.ok("POST", "/account/grants", body, principal="owner")
        self.assertTrue(first["value"]["granted"])
        self.assertFalse(again["value"]["granted"])
        self.assertEqual(again["value"]["balanceUsd"], 2.0)

    def test_grantOnAFullDisk(self) -> None:
        """
        A grant the disk will not take is C{storage_unavailable}, not an
        internal error, and nothing of it counts; the same grant goes
        through once the disk takes it again.
        """
        class Full(OsFiles):
            def write(self, fd: int, data: Any) -> int:
                raise OSError(errno.ENOSPC, "No space left on device")

        previous = useFiles(Full())
        body = {"principal": "cognito:123", "amountUsd": 2.0, "source": "purchase",
                "idempotencyKey": "pay-9"}
        try:
            frame = self.refused("storage_unavailable", "POST", "/account/grants", body,
                                 principal="owner")
        finally:
            useFiles(previous)
        self.assertEqual(frame["details"], {"errno": "ENOSPC"})
        self.assertEqual(figures(self, self.h, "cognito:123").balanceUsd, 0)
        self.assertTrue(self.ok("POST", "/account/grants", body, principal="owner")["value"]["granted"])
        self.assertEqual(figures(self, self.h, "cognito:123").balanceUsd, 2.0)

    def test_publicTakesNoChimes(self) -> None:
        """
        A public conversation takes no chimes.
        """
        sid = self.ok("POST", "/sessions", {"requestId": "c1"},
                      headers=visitor(KEY), **VISITOR)["value"]["session"]["sessionId"]
        self.refused("chimes_closed", "POST", f"/sessions/{sid}/chimes",
                     {"requestId": "ch", "author": "Bea", "text": "hi"}, principal="bea")


class PublicOffTests(RouteTestCase):
    """
    On a host without public sessions.
    """

    def test_notPublic(self) -> None:
        """
        A public caller is refused with not_public; a member's /account is
        just who they are.
        """
        self.refused("not_public", "POST", "/sessions", {"requestId": "c1"},
                     headers=visitor(KEY), **VISITOR)
        self.refused("not_public", "GET", "/account", headers=visitor(KEY), **VISITOR)
        frame = self.ok("GET", "/account")
        self.assertEqual(frame["value"], {"kind": "member", "principal": "alice"})


class CreditLimitTests(RouteTestCase):
    """
    The credit door's own refusals.
    """

    harnessSettings = {"public": PUBLIC}

    def test_modelNotOnTheCreditList(self) -> None:
        """
        A credit conversation must use a model of the credit list.
        """
        frame = self.refused("model_not_allowed", "POST", "/sessions",
                             {"requestId": "c1", "model": "scripted/echo-2"},
                             headers=account(), **ACCOUNT)
        self.assertEqual(frame["details"]["models"], list(PUBLIC.creditModels))

    def test_poolExhausted(self) -> None:
        """
        Once today's credit-funded spend reaches the cap, credit
        conversations are refused while an own key still works.
        """
        ledger = self.h.api.public.ledger
        self.successResultOf(ledger.addGrant("cognito:other", 10.0, "operator", "operator:big"))
        self.successResultOf(ledger.chargeRun("cognito:other", PUBLIC.creditDailyCapUsd,
                                              "run:x:1", "x"))
        self.refused("credit_pool_exhausted", "POST", "/sessions", {"requestId": "c1"},
                     headers=account(), **ACCOUNT)
        self.ok("POST", "/sessions", {"requestId": "c2"}, headers=visitor(KEY), **VISITOR)


class CreditReservationTests(RouteTestCase):
    """
    Credit spoken for by accepted turns (holds), and grants' keys.
    """

    harnessSettings = {"public": PUBLIC}

    def test_acceptedTurnsReserveCredit(self) -> None:
        """
        An accepted credit turn holds its run's budget from the moment it
        is accepted, before its body has started: another turn may be
        accepted only if the balance covers that hold too.
        """
        self.ok("GET", "/account", headers=account(), **ACCOUNT)
        ledger = self.h.api.public.ledger
        self.successResultOf(ledger.chargeRun("cognito:123", PUBLIC.signupGrantUsd - 0.01,
                                              "run:x:1", "x"))
        first = self.ok("POST", "/sessions", {"requestId": "c1"},
                        headers=account(), **ACCOUNT)["value"]["session"]["sessionId"]
        second = self.ok("POST", "/sessions", {"requestId": "c2"},
                         headers=account(), **ACCOUNT)["value"]["session"]["sessionId"]
        self.prompt(first, "p1", headers=account(), **ACCOUNT)
        self.assertEqual(figures(self, self.h, "cognito:123").heldUsd, PUBLIC.runMaxCostUsd)
        self.refused("out_of_credit", "POST", f"/sessions/{second}/commands",
                     {"type": "prompt", "requestId": "p2", "text": "hi"},
                     headers=account(), **ACCOUNT)
        self.refused("out_of_credit", "POST", "/sessions", {"requestId": "c3"},
                     headers=account(), **ACCOUNT)

    def test_grantKeyReusedForAnotherGrant(self) -> None:
        """
        An idempotencyKey used again for another principal or amount is a
        conflict, not a silent no.
        """
        body = {"principal": "cognito:1", "amountUsd": 2.0, "source": "purchase",
                "idempotencyKey": "pay-9"}
        self.ok("POST", "/account/grants", body, principal="owner")
        self.refused("request_id_conflict", "POST", "/account/grants",
                     {**body, "principal": "cognito:2"}, principal="owner")


class PostgresMixin:
    """
    The same tests with the ledger in PostgreSQL.
    """

    harnessSettings: dict[str, Any]

    def setUp(self) -> None:
        self.harnessSettings = {"public": withPostgres(PUBLIC)}
        super().setUp()  # type: ignore[misc]


class PostgresPublicTests(PostgresMixin, PublicTests):
    def test_grantOnAFullDisk(self) -> None:
        """
        A full disk is the file ledger's matter; PostgreSQL's own refusals
        are L{tests.live.test_ledger_postgres}'s.
        """
        from twisted.trial.unittest import SkipTest

        raise SkipTest("the file ledger's disk")


class PostgresCreditLimitTests(PostgresMixin, CreditLimitTests):
    pass


class PostgresCreditReservationTests(PostgresMixin, CreditReservationTests):
    pass
