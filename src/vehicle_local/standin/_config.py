# -*- test-case-name: tests.unit.test_gardend -*-
"""
The stand-in's configuration: the master key, client tokens and their grants,
the graphs, public mode (its graphs and the accounts standing in for Cognito)
and the one service it fronts (C{vehicle}), parsed from JSON once.

Secrets are kept out of every C{repr}.
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping

from attrs import field, frozen

from vehicle.protocol import JSON, JSONObject, loads

#: Roles, weakest first.
ROLES = ("viewer", "editor", "owner")


class ConfigError(ValueError):
    """
    The configuration is missing something or malformed; one line for the
    operator.
    """


def roleRank(role: str) -> int:
    """
    The strength of C{role}: higher is stronger.

    @raise ValueError: for an unknown role.
    """
    return ROLES.index(role)


def _string(data: JSONObject, key: str, where: str) -> str:
    value = data.get(key)
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{where}.{key} must be a non-empty string")
    return value


def _graphIds(value: JSON) -> list[str] | None:
    """
    C{value} if it is a list of graph ids (non-empty strings), else L{None}.
    """
    if not isinstance(value, list):
        return None
    named = [g for g in value if isinstance(g, str) and g]
    return named if len(named) == len(value) else None


@frozen(kw_only=True)
class ClientToken:
    """
    A client token gardend issued: its id, its secret and its grants.

    @ivar grants: graph id -> role.
    """

    id: str
    secret: str = field(repr=False)
    grants: Mapping[str, str]

    def highestRole(self) -> str:
        """
        The strongest role among the grants (C{viewer} when there are none).
        """
        if not self.grants:
            return "viewer"
        return max(self.grants.values(), key=roleRank)

    @classmethod
    def fromJSON(cls, raw: JSON, where: str) -> "ClientToken":
        """
        Parse one of C{config.tokens}, found at C{where}.

        @raise ConfigError: when it is malformed.
        """
        if not isinstance(raw, dict):
            raise ConfigError(f"{where} must be an object")
        grants = raw.get("grants", {})
        if not isinstance(grants, dict) or not all(
            isinstance(role, str) and role in ROLES for role in grants.values()
        ):
            raise ConfigError(
                f"{where}.grants must map graph ids to one of {', '.join(ROLES)}"
            )
        return cls(
            id=_string(raw, "id", where),
            secret=_string(raw, "secret", where),
            grants={g: role for g, role in grants.items() if isinstance(role, str)},
        )


@frozen(kw_only=True)
class Account:
    """
    A Sophia account, standing in for Cognito: a bearer equal to C{token}
    (its ID token) is this account.

    @ivar sub: Cognito's subject; the principal is C{cognito:<sub>}.
    @ivar emailVerified: what the ID token says of the email.
    """

    token: str = field(repr=False)
    sub: str
    email: str
    emailVerified: bool = False

    @property
    def principal(self) -> str:
        """
        The C{x-user-id} gardend mints for this account.
        """
        return "cognito:" + self.sub


@frozen(kw_only=True)
class PublicConfig:
    """
    Public mode: people with no login of this Sophia reach the service as
    viewers of the public graphs (a visitor, or a Sophia account).

    @ivar graphs: the public graphs, in the configured order.
    """

    enabled: bool = False
    graphs: tuple[str, ...] = ()
    accounts: tuple[Account, ...] = ()

    def serves(self, graphId: str | None) -> bool:
        """
        Whether a public caller may reach C{graphId}.
        """
        return self.enabled and graphId is not None and graphId in self.graphs

    @classmethod
    def fromJSON(cls, data: JSON) -> "PublicConfig":
        """
        Parse C{config.public}.

        @raise ConfigError: when it is malformed.
        """
        if data is None:
            return cls()
        if not isinstance(data, dict):
            raise ConfigError("config.public must be an object")
        enabled = data.get("enabled", False)
        if not isinstance(enabled, bool):
            raise ConfigError("config.public.enabled must be true or false")
        graphs = data.get("graphs", [])
        named = _graphIds(graphs)
        if named is None or not all("," not in g for g in named):
            raise ConfigError("config.public.graphs must be a list of graph ids")
        if enabled and not named:
            raise ConfigError("config.public.graphs names no graph")
        rawAccounts = data.get("accounts", [])
        if not isinstance(rawAccounts, list):
            raise ConfigError("config.public.accounts must be a list")
        accounts = []
        seen: set[str] = set()
        for index, raw in enumerate(rawAccounts):
            where = f"config.public.accounts[{index}]"
            if not isinstance(raw, dict):
                raise ConfigError(f"{where} must be an object")
            verified = raw.get("emailVerified", False)
            if not isinstance(verified, bool):
                raise ConfigError(f"{where}.emailVerified must be true or false")
            account = Account(
                token=_string(raw, "token", where),
                sub=_string(raw, "sub", where),
                email=_string(raw, "email", where),
                emailVerified=verified,
            )
            if account.sub in seen or account.token in seen:
                raise ConfigError(f"{where} repeats another account's sub or token")
            seen.update((account.sub, account.token))
            accounts.append(account)
        return cls(
            enabled=enabled,
            graphs=tuple(dict.fromkeys(named)),
            accounts=tuple(accounts),
        )


@frozen(kw_only=True)
class ServiceConfig:
    """
    The fronted service (gardend's C{services/vehicle/service.json} plus its
    spawn): where it listens and the secret gardend hands it.
    """

    url: str
    secret: str = field(repr=False)
    delegateCaller: bool = True
    acceptsModelKey: bool = False

    @classmethod
    def fromJSON(cls, raw: JSON, environ: Mapping[str, str]) -> "ServiceConfig":
        """
        Parse C{config.service}; a missing C{secret} is read from
        C{MNEMOSYNE_INTERNAL_SERVICE_SECRET} in C{environ}.

        @raise ConfigError: when it is malformed.
        """
        if not isinstance(raw, dict):
            raise ConfigError("config.service must be an object")
        raw = dict(raw)
        if "secret" not in raw and environ.get("MNEMOSYNE_INTERNAL_SERVICE_SECRET"):
            raw["secret"] = environ["MNEMOSYNE_INTERNAL_SERVICE_SECRET"]
        flags = {}
        for flag, default in (("delegateCaller", True), ("acceptsModelKey", False)):
            value = raw.get(flag, default)
            if not isinstance(value, bool):
                raise ConfigError(f"config.service.{flag} must be true or false")
            flags[flag] = value
        return cls(
            url=_string(raw, "url", "config.service").rstrip("/"),
            secret=_string(raw, "secret", "config.service"),
            delegateCaller=flags["delegateCaller"],
            acceptsModelKey=flags["acceptsModelKey"],
        )


@frozen(kw_only=True)
class Config:
    """
    The whole stand-in configuration.
    """

    masterKey: str = field(repr=False)
    tokens: tuple[ClientToken, ...]
    graphs: tuple[str, ...]
    service: ServiceConfig
    public: PublicConfig = PublicConfig()

    @classmethod
    def fromJSON(cls, data: JSON, environ: Mapping[str, str] | None = None) -> "Config":
        """
        Parse the decoded JSON document.

        A missing C{masterKey} is read from C{GARDEND_MASTER_KEY} and a
        missing C{service.secret} from C{MNEMOSYNE_INTERNAL_SERVICE_SECRET} in
        C{environ}, so that secrets need not sit in the file.

        @raise ConfigError: when anything is missing or malformed.
        """
        environ = environ or {}
        if not isinstance(data, dict):
            raise ConfigError("the configuration must be a JSON object")
        data = dict(data)
        if "masterKey" not in data and environ.get("GARDEND_MASTER_KEY"):
            data["masterKey"] = environ["GARDEND_MASTER_KEY"]
        masterKey = _string(data, "masterKey", "config")
        graphs = _graphIds(data.get("graphs", []))
        if graphs is None:
            raise ConfigError("config.graphs must be a list of graph ids")
        rawTokens = data.get("tokens", [])
        if not isinstance(rawTokens, list):
            raise ConfigError("config.tokens must be a list")
        tokens: list[ClientToken] = []
        for index, raw in enumerate(rawTokens):
            token = ClientToken.fromJSON(raw, f"config.tokens[{index}]")
            if token.id in {t.id for t in tokens}:
                raise ConfigError(f"config.tokens[{index}].id {token.id!r} is used twice")
            tokens.append(token)
        service = ServiceConfig.fromJSON(data.get("service"), environ)
        public = PublicConfig.fromJSON(data.get("public"))
        secrets = {masterKey} | {t.secret for t in tokens}
        for account in public.accounts:
            if account.token in secrets:
                raise ConfigError(
                    f"config.public.accounts: the token of {account.sub!r} is "
                    "also a member's credential"
                )
        return cls(
            masterKey=masterKey,
            tokens=tuple(tokens),
            graphs=tuple(graphs),
            service=service,
            public=public,
        )

    @classmethod
    def fromPath(
        cls, path: str | Path, environ: Mapping[str, str] | None = None
    ) -> "Config":
        """
        Read and parse the JSON file at C{path}.
        """
        try:
            data = loads(Path(path).read_text("utf-8"))
        except (OSError, ValueError) as e:
            raise ConfigError(f"cannot read {path}: {e}")
        return cls.fromJSON(data, environ)

    def knownGraphs(self) -> frozenset[str]:
        """
        Every graph the stand-in knows: the listed ones, the public ones and
        any a token is granted.
        """
        known = set(self.graphs) | set(self.public.graphs)
        for token in self.tokens:
            known.update(token.grants)
        return frozenset(known)
