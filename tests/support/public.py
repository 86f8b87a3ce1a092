"""
Public-mode fixtures: the settings C{SCRIPTED} (scripted provider, default
limits) and C{PUBLIC} (the same with small daily and per-session limits),
the identities C{VISITOR} and C{ACCOUNT}, a visitor's own model C{KEY},
and the gateway's headers for a visitor (L{visitor}) and an account
(L{account}).
"""

from __future__ import annotations

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
