"""
Configurations of the gardend stand-in (L{vehicle_local.standin}) for its tests:
the master key C{MASTER} and the service's C{SECRET}; L{configData} and
L{makeConfig} (two graphs, a viewing and an editing token);
L{publicConfigData} and L{makePublicConfig} (the same in public mode, with
the accounts' ID tokens C{ACCOUNT_TOKEN} and C{UNVERIFIED_TOKEN}).
"""

from __future__ import annotations

from typing import Any

from vehicle_local.standin import Config


MASTER = "master-key-0123"
SECRET = "internal-secret-4567"


def configData(**service: Any) -> dict[str, Any]:
    """
    A configuration document: g1 and g2; t-view views g1, t-edit edits g1
    and views g2.
    """
    return {
        "masterKey": MASTER,
        "tokens": [
            {"id": "t-view", "secret": "view-secret", "grants": {"g1": "viewer"}},
            {
                "id": "t-edit",
                "secret": "edit-secret",
                "grants": {"g1": "editor", "g2": "viewer"},
            },
        ],
        "graphs": ["g1", "g2"],
        "service": {"url": "http://127.0.0.1:9", "secret": SECRET, **service},
    }


def makeConfig(**service: Any) -> Config:
    return Config.fromJSON(configData(**service))


#: Sophia accounts' ID tokens (the stand-in's Cognito).
ACCOUNT_TOKEN = "id-token-verified-0001"
UNVERIFIED_TOKEN = "id-token-unverified-0002"


def publicConfigData(**service: Any) -> dict[str, Any]:
    """
    L{configData} in public mode: g-public and g-pub2 are public (g1 and g2
    are not); two accounts, one with a verified email; the manifest accepts
    a model key unless C{service} says otherwise.
    """
    data = configData(**{"acceptsModelKey": True, **service})
    data["public"] = {
        "enabled": True,
        "graphs": ["g-public", "g-pub2"],
        "accounts": [
            {
                "token": ACCOUNT_TOKEN,
                "sub": "123",
                "email": "a@example.com",
                "emailVerified": True,
            },
            {"token": UNVERIFIED_TOKEN, "sub": "456", "email": "b@example.com"},
        ],
    }
    return data


def makePublicConfig(**service: Any) -> Config:
    return Config.fromJSON(publicConfigData(**service))
