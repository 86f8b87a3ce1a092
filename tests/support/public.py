"""
Public-mode fixtures: the settings C{SCRIPTED} (scripted provider, default
limits) and C{PUBLIC} (the same with small daily and per-session limits),
the identities C{VISITOR} and C{ACCOUNT}, a visitor's own model C{KEY},
and the gateway's headers for a visitor (L{visitor}) and an account
(L{account}).
"""

from __future__ import annotations

import json
from typing import Any

from attrs import evolve

from vehicle.settings import PublicSettings


#: Public mode on the scripted provider, with the default limits.
SCRIPTED = PublicSettings(
    enabled=True,
    provider="scripted",
    defaultModel="scripted/echo-1",
    creditModels=("scripted/echo-1",),
    creditDefaultModel="scripted/echo-1",
)
#: The same with limits small enough to reach in a few turns.
PUBLIC = evolve(SCRIPTED, signupGrantUsd=0.5, turnsPerDay=3, sessionMaxTurns=2)

VISITOR = {"principal": "anon:abc", "role": "viewer", "client": "tab-v"}
ACCOUNT = {"principal": "cognito:123", "role": "viewer", "client": "tab-a"}
KEY = "sk-or-visitor-0123456789"


def visitor(key: str | None = None) -> dict[str, str]:
    headers = {"x-sophia-caller-kind": "anonymous", "x-sophia-public-graphs": "g1,g2"}
    if key:
        headers["x-model-key"] = key
    return headers


def account(verified: bool = True) -> dict[str, str]:
    return {
        "x-sophia-caller-kind": "account",
        "x-sophia-account-email": "a@example.com",
        "x-sophia-account-email-verified": "true" if verified else "false",
        "x-sophia-public-graphs": "g1",
    }


def ledgerRows(h: Any, kind: str | None = None) -> list[dict[str, Any]]:
    """
    The rows of the harness's ledger, whichever keeps it, in one shape:
    C{type}, C{key}, C{amountUsd}, and for a release C{hold} and C{reason}.
    The file's reserved turn (a C{turn} row carrying C{holdUsd}) is a turn
    and a hold, a debit that ends holds is a debit and their releases, and
    a voided turn is gone, as PostgreSQL keeps them.
    """
    from vehicle.public import PostgresLedger

    ledger = h.api.public.ledger
    rows: list[dict[str, Any]] = []
    if isinstance(ledger, PostgresLedger):
        from tests.support import postgres

        url = h.overrides["public"].ledgerUrl
        for k, key, amount, hold, reason in postgres.shared().query(
            url, "SELECT kind, key, amount_usd, hold_key, reason FROM ledger_rows ORDER BY id"
        ):
            row = {"type": k, "key": key, "amountUsd": float(amount)}
            if k == "release":
                row.update(hold=hold, reason=reason)
            rows.append(row)
    else:
        path = h.root / "public" / "ledger.jsonl"
        for line in path.read_text().splitlines():
            row = json.loads(line)
            if row["type"] == "void":
                # A voided turn never was, as PostgreSQL forgets it.
                gone = {row["turn"], "hold:" + row["turn"].removeprefix("turn:")}
                rows = [r for r in rows if r.get("key") not in gone]
                continue
            rows.append(row)
            if row["type"] == "turn" and row.get("holdUsd"):
                rows.append({"type": "hold", "key": f"hold:{row['session']}:{row['command']}",
                             "amountUsd": row["holdUsd"]})
            for hold in row.get("holds") or () if row["type"] == "debit" else ():
                rows.append({"type": "release", "hold": hold, "reason": "charged",
                             "key": "release:" + hold.removeprefix("hold:")})
    return [r for r in rows if kind is None or r["type"] == kind]


def figures(testCase: Any, h: Any, principal: str) -> Any:
    """
    The harness's ledger's figures for C{principal}, now.
    """
    return testCase.successResultOf(h.api.public.ledger.figures(principal))


def withPostgres(settings: Any) -> Any:
    """
    C{settings} (a L{vehicle.settings.PublicSettings}) with the ledger in a
    fresh database of the tests' PostgreSQL.
    """
    from tests.support import postgres

    return evolve(settings, ledgerUrl=postgres.shared().newDatabase())
