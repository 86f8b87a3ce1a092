# -*- test-case-name: tests.unit.test_agent,tests.unit.test_hardening -*-
"""
Every setting the host reads from its environment, parsed and checked once.

L{Settings.fromEnvironment} is the only place that looks at C{VEHICLE_*} and
gardend's variables; everything else receives a frozen L{Settings}.
"""

from __future__ import annotations

import math
import os
import sys
from pathlib import Path
from typing import Mapping

from attrs import field, frozen


class SettingsError(ValueError):
    """
    A setting is missing or malformed; the message is one line for the operator.
    """


_LOOPBACK = {"127.0.0.1", "::1", "localhost"}


def isLoopback(host: str) -> bool:
    """
    Is C{host} a loopback address (127.0.0.0/8, ::1 or localhost)?
    """
    host = host.strip("[]")
    return host in _LOOPBACK or host.startswith("127.")


def _int(env: Mapping[str, str], name: str, default: int, minimum: int = 0) -> int:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise SettingsError(f"{name} must be a whole number, not {raw!r}")
    if value < minimum:
        raise SettingsError(f"{name} must be at least {minimum}, not {value}")
    return value


def _float(env: Mapping[str, str], name: str, default: float, positive: bool = False) -> float:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise SettingsError(f"{name} must be a number, not {raw!r}")
    if not math.isfinite(value):
        raise SettingsError(f"{name} must be a finite number, not {raw!r}")
    if value < 0 or (positive and value == 0):
        raise SettingsError(f"{name} must be {'above zero' if positive else 'at least zero'}")
    return value


def _flag(env: Mapping[str, str], name: str) -> bool:
    return env.get(name, "").strip().lower() in {"1", "true", "yes", "on"}


def _off(env: Mapping[str, str], name: str) -> bool:
    """
    Is a setting that is on unless said otherwise turned off?
    """
    return (env.get(name) or "on").strip().lower() in {"off", "0", "false", "no"}


def defaultPiRoot() -> Path:
    """
    Where C{scripts/setup} installs the pinned pi runtime: C{<venv>/pi}, or
    C{$VEHICLE_PI_ROOT} (tox's environments point it at the project's).
    """
    if os.environ.get("VEHICLE_PI_ROOT"):
        return Path(os.environ["VEHICLE_PI_ROOT"])
    return Path(sys.prefix) / "pi"


@frozen(kw_only=True)
class PublicSettings:
    """
    Public sessions (spec, "Public sessions"): off unless C{VEHICLE_PUBLIC}.
    """

    enabled: bool = False
    provider: str = "openrouter"
    defaultModel: str = "openrouter/openai/gpt-6-luna"
    creditModels: tuple[str, ...] = ("openrouter/deepseek/deepseek-v4.1-flash",)
    creditDefaultModel: str = "openrouter/deepseek/deepseek-v4.1-flash"
    signupGrantUsd: float = 0.5
    creditDailyCapUsd: float = 5.0
    turnsPerDay: int = 100
    sessionMaxTurns: int = 40
    runMaxTurns: int = 8
    runMaxCostUsd: float = 0.05
    #: C{VEHICLE_LEDGER_URL}: the whole ledger in PostgreSQL, shared by
    #: every host of a fleet (else C{public/ledger.jsonl}, one host's).  It
    #: may carry a password: never shown.
    ledgerUrl: str | None = field(default=None, repr=False)
    #: How long a public turn waits for PostgreSQL before it is refused
    #: (C{ledger_unavailable}).
    ledgerTimeoutSeconds: float = 2.0

    @classmethod
    def fromEnvironment(cls, env: Mapping[str, str]) -> "PublicSettings":
        default = cls()
        creditDefault = env.get("VEHICLE_CREDIT_DEFAULT_MODEL") or default.creditDefaultModel
        raw = env.get("VEHICLE_CREDIT_MODELS")
        creditModels = (
            tuple(m.strip() for m in raw.split(",") if m.strip()) if raw else (creditDefault,)
        )
        return cls(
            enabled=_flag(env, "VEHICLE_PUBLIC"),
            provider=env.get("VEHICLE_PUBLIC_PROVIDER") or default.provider,
            defaultModel=env.get("VEHICLE_PUBLIC_DEFAULT_MODEL") or default.defaultModel,
            creditModels=creditModels,
            creditDefaultModel=creditDefault,
            signupGrantUsd=_float(env, "VEHICLE_SIGNUP_GRANT_USD", default.signupGrantUsd),
            creditDailyCapUsd=_float(env, "VEHICLE_CREDIT_DAILY_CAP_USD", default.creditDailyCapUsd),
            turnsPerDay=_int(env, "VEHICLE_PUBLIC_TURNS_PER_DAY", default.turnsPerDay, 0),
            sessionMaxTurns=_int(env, "VEHICLE_PUBLIC_SESSION_MAX_TURNS", default.sessionMaxTurns, 0),
            runMaxTurns=_int(env, "VEHICLE_PUBLIC_RUN_MAX_TURNS", default.runMaxTurns, 1),
            runMaxCostUsd=_float(
                env, "VEHICLE_PUBLIC_RUN_MAX_COST_USD", default.runMaxCostUsd, positive=True
            ),
            ledgerUrl=ledgerUrl(env),
            ledgerTimeoutSeconds=_float(
                env, "VEHICLE_LEDGER_TIMEOUT_SECONDS", default.ledgerTimeoutSeconds, positive=True
            ),
        )


def ledgerUrl(env: Mapping[str, str]) -> str | None:
    """
    C{VEHICLE_LEDGER_URL}, a C{postgresql://} URL, or L{None}.

    @raise SettingsError: for any other kind of URL (the message never
        repeats it: it may carry a password).
    """
    url = (env.get("VEHICLE_LEDGER_URL") or "").strip()
    if not url:
        return None
    if not url.startswith(("postgresql://", "postgres://")):
        raise SettingsError(
            "VEHICLE_LEDGER_URL must be a postgresql:// URL (the ledger moves to PostgreSQL)"
        )
    return url


@frozen(kw_only=True)
class Settings:
    """
    The host's configuration.  Secrets here (the service secret, provider
    keys) live in memory only.
    """

    secret: str = field(repr=False)
    dataDir: Path
    listen: str
    piCommand: tuple[str, ...] | None = None
    piRoot: Path = field(factory=defaultPiRoot)
    modelsFile: Path | None = None
    defaultModel: str | None = None
    bodyIdleMs: int = 10 * 60 * 1000
    leaseTtlMs: int = 30 * 60 * 1000
    maxTurns: int = 12
    maxCostUsd: float = 0.25
    mirror: bool = True
    isolation: str = "bwrap"
    agentUnisolated: bool = False
    mcpUrl: str | None = None
    keepaliveSeconds: float = 15.0
    #: How long an event stream whose client reads nothing is kept.
    stallSeconds: float = 60.0
    headerTimeoutSeconds: float = 10.0
    #: Folders no agent box may see, beyond the home folder and the data
    #: dir (gardend's profile, when the host can tell where it is).
    boxHidden: tuple[Path, ...] = ()
    public: PublicSettings = field(factory=PublicSettings)
    #: Where C{/metrics} is served (C{--metrics}, else C{VEHICLE_METRICS});
    #: L{None}: nowhere.
    metricsListen: str | None = None
    #: C{VEHICLE_SPARE_BODIES}: warm chat bodies kept ready for new and
    #: revived conversations (0: none; each holds a pi process's memory).
    #: None unless asked for here; the environment's default is 1.
    spareBodies: int = 0
    #: C{VEHICLE_SPARE_REFILL_MS}: the pause after a spare is handed over
    #: before the next one starts (its start would take the CPU the handed
    #: body's first run needs).
    spareRefillMs: int = 2000
    #: C{VEHICLE_AGENT_SPARE_BODIES}: warm boxed agent bodies kept ready
    #: for new agent sessions (0: none; made only where agent bodies are
    #: boxed by bwrap).  None unless asked for here; the environment's
    #: default is 1.
    agentSpareBodies: int = 0
    #: C{VEHICLE_SYNC_HELPER}: the logs' writes and syncs made by a process
    #: of their own (on by default; C{off}: on the writer's thread).
    syncHelper: bool = True

    @classmethod
    def fromEnvironment(
        cls,
        env: Mapping[str, str],
        *,
        listen: str | None = None,
        dataDir: str | None = None,
        metrics: str | None = None,
    ) -> "Settings":
        """
        Read the settings from C{env}; C{listen}, C{dataDir} and C{metrics}
        (from the command line) win over the environment.

        @raise SettingsError: when a setting is missing or wrong.
        """
        secret = _secretFrom(env)
        listen = listen if listen is not None else _listenFrom(env)
        checkLoopbackEndpoint(listen)
        dataDir = _dataDirFrom(env, dataDir)
        piCommand = None
        if env.get("VEHICLE_PI"):
            piCommand = tuple(env["VEHICLE_PI"].split())
        isolation = _isolation(env)
        mirror = not _off(env, "VEHICLE_MIRROR")
        return cls(
            secret=secret,
            dataDir=Path(dataDir).absolute(),
            listen=listen,
            piCommand=piCommand,
            piRoot=Path(env["VEHICLE_PI_ROOT"]) if env.get("VEHICLE_PI_ROOT") else defaultPiRoot(),
            modelsFile=Path(env["VEHICLE_MODELS"]) if env.get("VEHICLE_MODELS") else None,
            defaultModel=env.get("VEHICLE_DEFAULT_MODEL") or None,
            bodyIdleMs=_int(env, "VEHICLE_BODY_IDLE_MS", 10 * 60 * 1000, 1),
            leaseTtlMs=_int(env, "VEHICLE_LEASE_TTL_MS", 30 * 60 * 1000, 1),
            maxTurns=_int(env, "VEHICLE_MAX_TURNS", 12, 1),
            maxCostUsd=_float(env, "VEHICLE_MAX_COST_USD", 0.25, positive=True),
            mirror=mirror,
            isolation=isolation,
            agentUnisolated=_flag(env, "VEHICLE_AGENT_UNISOLATED"),
            mcpUrl=env.get("MNEMOSYNE_MCP_URL") or None,
            keepaliveSeconds=_float(env, "VEHICLE_SSE_KEEPALIVE_SECONDS", 15.0),
            stallSeconds=_float(env, "VEHICLE_SSE_STALL_SECONDS", 60.0, positive=True),
            headerTimeoutSeconds=_float(env, "VEHICLE_HEADER_TIMEOUT_SECONDS", 10.0),
            boxHidden=_hiddenFolders(env, Path(dataDir).absolute()),
            public=PublicSettings.fromEnvironment(env),
            metricsListen=_metricsFrom(env, metrics),
            spareBodies=_int(env, "VEHICLE_SPARE_BODIES", 1, 0),
            spareRefillMs=_int(env, "VEHICLE_SPARE_REFILL_MS", 2000, 0),
            agentSpareBodies=_int(env, "VEHICLE_AGENT_SPARE_BODIES", 1, 0),
            syncHelper=not _off(env, "VEHICLE_SYNC_HELPER"),
        )


def _secretFrom(env: Mapping[str, str]) -> str:
    """
    gardend's secret, which the host will not start without.
    """
    secret = env.get("MNEMOSYNE_INTERNAL_SERVICE_SECRET", "")
    if not secret:
        raise SettingsError(
            "MNEMOSYNE_INTERNAL_SERVICE_SECRET is not set: the host refuses "
            "to start without gardend's secret"
        )
    return secret


def _dataDirFrom(env: Mapping[str, str], given: str | None) -> str:
    """
    The data dir: C{--data-dir}, else C{VEHICLE_DATA_DIR}, else C{DATA_DIR}.
    """
    dataDir = given if given is not None else env.get("VEHICLE_DATA_DIR") or env.get("DATA_DIR")
    if not dataDir:
        raise SettingsError(
            "no --data-dir given and neither VEHICLE_DATA_DIR nor DATA_DIR is set"
        )
    return dataDir


def _metricsFrom(env: Mapping[str, str], given: str | None) -> str | None:
    """
    The endpoint of C{/metrics}: C{--metrics}, else C{VEHICLE_METRICS}, else
    none.  Any interface may be named (a scraper may be on another
    machine: the figures carry no secret and no session id); only stream
    endpoints Twisted can listen on (C{tcp}, C{tcp6}, C{unix}).
    """
    value = (given if given is not None else env.get("VEHICLE_METRICS") or "").strip()
    if not value:
        return None
    kind = _splitEndpoint(value)[0]
    if kind not in {"tcp", "tcp6", "unix"}:
        raise SettingsError(f"--metrics {value!r}: a tcp, tcp6 or unix endpoint")
    return value


def _listenFrom(env: Mapping[str, str]) -> str:
    """
    The endpoint gardend asks for when no C{--listen} is given: TCP on
    C{PORT}, at C{GARDEN_SERVICE_HOST} (loopback by default).
    """
    host = env.get("GARDEN_SERVICE_HOST") or "127.0.0.1"
    port = env.get("PORT")
    if not port:
        raise SettingsError("no --listen given and PORT is not set")
    hostPart = host.replace(":", "\\:")
    return f"tcp:{port}:interface={hostPart}"


def _isolation(env: Mapping[str, str]) -> str:
    """
    C{VEHICLE_ISOLATION}: C{bwrap} (the default), C{seatbelt}, C{microvm}
    or C{none}.
    """
    isolation = (env.get("VEHICLE_ISOLATION") or "bwrap").strip().lower()
    if isolation not in {"bwrap", "seatbelt", "microvm", "none"}:
        raise SettingsError(
            f"VEHICLE_ISOLATION must be bwrap, seatbelt, microvm or none, not {isolation!r}"
        )
    return isolation


def _hiddenFolders(env: Mapping[str, str], dataDir: Path) -> tuple[Path, ...]:
    hidden = [Path(p) for p in (env.get("VEHICLE_BOX_HIDE") or "").split(":") if p]
    # gardend gives a service DATA_DIR=<profile>/services/<id>: the profile
    # (its keys, every other service) is out of sight too.
    if env.get("GARDEN_PROFILE_ID") and dataDir.parent.name == "services":
        hidden.append(dataDir.parent.parent)
    return tuple(hidden)


def checkLoopbackEndpoint(listen: str) -> None:
    """
    Refuse an endpoint description that would listen beyond loopback.

    Only C{tcp}/C{tcp6} with an explicit loopback C{interface}, and C{unix},
    are allowed.
    """
    parts = _splitEndpoint(listen)
    kind = parts[0] if parts else ""
    if kind == "unix":
        return
    if kind not in {"tcp", "tcp6"}:
        raise SettingsError(f"--listen {listen!r}: only tcp (loopback) or unix endpoints")
    interface = None
    for part in parts[1:]:
        if part.startswith("interface="):
            interface = part[len("interface="):]
    if interface is None or not isLoopback(interface):
        raise SettingsError(
            f"--listen {listen!r}: the host binds loopback only "
            "(give interface=127.0.0.1 or ::1)"
        )


def _splitEndpoint(description: str) -> list[str]:
    out, cur, escape = [], [], False
    for ch in description:
        if escape:
            cur.append(ch)
            escape = False
        elif ch == "\\":
            escape = True
        elif ch == ":":
            out.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    out.append("".join(cur))
    return out


def scrubEnvironment(environ: "os._Environ[str] | dict[str, str]") -> None:
    """
    Remove what the host must never pass on or use: gardend's own MCP token.
    """
    environ.pop("MNEMOSYNE_MCP_ACCESS_TOKEN", None)
