"""
Crash injection for the public package's mutating requests (issue 10, "What
must show"): a grant, a credit conversation's creation (with the signup
grant it brings), a credit turn and an own-key turn, each killed after
each of its durable writes (and under a simulated power cut), restarted and
retried, must leave the money as the request done or not done, never half:
the turn counted once, its hold ended or open as its command is, a grant
credited once.
"""

from __future__ import annotations

from typing import Any

from tests.support.crashdriver import CrashDriver, addCrashTests, scenario
from tests.support.harness import Harness
from tests.support.public import ACCOUNT, KEY, PUBLIC, VISITOR, account, visitor


SETTINGS = {"public": PUBLIC}
PRINCIPALS = (ACCOUNT["principal"], VISITOR["principal"])


def money(h: Harness) -> dict[str, Any]:
    """
    What the ledger says of everyone it knows, and the public sessions'
    commands (the session package's own look lists only its member's).
    """
    ledger = h.api.public.ledger
    return {
        "people": [
            {
                "principal": p,
                "balance": ledger.balance(p),
                "spent": round(ledger.spent[p], 9),
                "held": ledger.held(p),
                "turnsToday": ledger.turnsToday(p),
            }
            for p in PRINCIPALS
        ],
        "pool": ledger.poolToday(),
        "grants": sorted(ledger.grants),
        "sessions": sorted(
            [
                [sid, ledger.sessionTurns[sid],
                 sorted([c.commandId, c.type, c.text] for c in s.commands())]
                for sid, s in h.api.registry.sessions.items()
            ],
            key=lambda x: str(x[2]),
        ),
    }


def _creditSession(h: Harness) -> dict[str, Any]:
    code, frame = h.call("POST", "/sessions", {"requestId": "c-credit"},
                         headers=account(), **ACCOUNT)
    assert code == 201, frame
    return {"sid": frame["value"]["session"]["sessionId"]}


def _byokSession(h: Harness) -> dict[str, Any]:
    code, frame = h.call("POST", "/sessions", {"requestId": "c-byok"},
                         headers=visitor(KEY), **VISITOR)
    assert code == 201, frame
    return {"sid": frame["value"]["session"]["sessionId"]}


def _turn(headers: dict[str, str], who: dict[str, str]) -> Any:
    def request(ctx: dict[str, Any]) -> Any:
        return ("POST", f"/sessions/{ctx['sid']}/commands",
                {"requestId": "r-turn", "type": "prompt", "text": "how many cows?"},
                dict(who, headers=headers))
    return request


scenario(
    "public_grant", lambda h: {},
    lambda ctx: ("POST", "/account/grants",
                 {"principal": ACCOUNT["principal"], "amountUsd": 2.0, "source": "purchase",
                  "idempotencyKey": "pay-1"}, {"principal": "owner"}),
    settings=SETTINGS, extra=money,
)
scenario("public_credit_create", lambda h: {},
         lambda ctx: ("POST", "/sessions", {"requestId": "r-create"},
                      dict(ACCOUNT, headers=account())),
         settings=SETTINGS, extra=money)
scenario("public_credit_turn", _creditSession, _turn(account(), ACCOUNT),
         settings=SETTINGS, extra=money)
scenario("public_byok_turn", _byokSession, _turn(visitor(KEY), VISITOR),
         settings=SETTINGS, extra=money)

NAMES = ["public_grant", "public_credit_create", "public_credit_turn", "public_byok_turn"]


class PublicCrashTests(CrashDriver):
    """
    The public package's routes, killed at their durable writes.
    """


addCrashTests(PublicCrashTests, NAMES)


class PublicPowerLossTests(PublicCrashTests):
    """
    The same under a power cut: what was not synced is lost.
    """

    mode = "power"
