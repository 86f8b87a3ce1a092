# -*- test-case-name: tests.unit.test_pi_smoke,tests.live.test_graph_tools -*-
"""
The command line of one pi child: where pi and its Node are (L{PiCommand}),
its argv, its environment, its agent settings and its boot config.

Pure functions (bar L{findPi}'s look at the install) that the spawner
(L{vehicle.body._spawner.Launcher}) calls; the secrets travel only in
L{bootConfig}'s bytes, written to the child's fd 3.
"""

from __future__ import annotations

import json
import math
import platform
import re
from pathlib import Path
from typing import Mapping, Sequence
from urllib.parse import urlsplit

from attrs import frozen

from vehicle.protocol import JSONObject, RunBudget


__all__ = [
    "PiCommand",
    "PiNotInstalled",
    "SOPHIA_EXTENSION",
    "BUILTIN_TOOLS",
    "AGENT_TOOLS",
    "MCP_EXTENSION",
    "GRAPH_TOOL_PREFIX",
    "findPi",
    "nodeArchitecture",
    "piArgv",
    "piEnvironment",
    "agentSettings",
    "bootConfig",
    "sessionFacts",
    "checkMcpUrl",
]

#: The project's pi extension, shipped as package data next to this module.
SOPHIA_EXTENSION = Path(__file__).parent / "extension" / "sophia.js"

#: pi's built-in tools (1.6.0), any of which C{piArgv}'s C{tools} may name.
BUILTIN_TOOLS = ("read", "bash", "edit", "write", "grep", "find", "ls", "powershell")

#: The agent profile's built-in tools.
AGENT_TOOLS = ("read", "write", "edit", "bash")

#: pi's built-in MCP support, loaded explicitly (C{--no-extensions} drops it).
MCP_EXTENSION = "builtin:mcp"

#: The names the graph tools have in pi (C{mcp__graph__create_document}).
GRAPH_TOOL_PREFIX = "mcp__graph__"

#: The flags that turn off everything pi would otherwise discover or fetch.
_ISOLATION_FLAGS = (
    "--no-context-files",
    "--no-skills",
    "--no-prompt-templates",
    "--no-extensions",
    "--no-approve",
    "--no-themes",
    "--offline",
)

_MACHINES = {"x86_64": "x64", "amd64": "x64", "aarch64": "arm64", "arm64": "arm64"}
_TOOL_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")
_PI_PACKAGE = ("node_modules", "@earendil-works", "pi-coding-agent")
_LOOPBACK = ("localhost", "127.0.0.1", "::1")


class PiNotInstalled(Exception):
    """
    The pinned pi runtime (pi and its own Node) is not where it should be.
    """


@frozen(kw_only=True)
class PiCommand:
    """
    The two paths that run pi: its own Node binary and pi's CLI script.
    """

    node: Path
    cli: Path


def _requireAbsolute(**paths: Path) -> None:
    """
    pi resolves relative paths against its own working directory, not the
    host's: refuse them.
    """
    for name, path in paths.items():
        if not Path(path).is_absolute():
            raise ValueError(f"{name} must be an absolute path, not {str(path)!r}")


def nodeArchitecture(machine: str | None = None) -> str:
    """
    The C{node-linux-<arch>} suffix for C{machine} (default: this machine).

    @raise PiNotInstalled: for a machine no pinned Node package exists for.
    """
    machine = platform.machine() if machine is None else machine
    try:
        return _MACHINES[machine.lower()]
    except KeyError:
        raise PiNotInstalled(f"no pinned Node for machine {machine!r} (x86_64 and aarch64 only)")


def findPi(piRoot: Path, machine: str | None = None) -> PiCommand:
    """
    Locate the pinned Node and pi's C{dist/cli.js} under C{piRoot}
    (C{.venv/pi}, where C{scripts/setup} runs C{npm ci}).

    @raise PiNotInstalled: if either is missing.
    """
    arch = nodeArchitecture(machine)
    node = piRoot / "node_modules" / f"node-linux-{arch}" / "bin" / "node"
    cli = piRoot.joinpath(*_PI_PACKAGE, "dist", "cli.js")
    missing = [str(path) for path in (node, cli) if not path.is_file()]
    if missing:
        raise PiNotInstalled(
            f"the pinned pi runtime is missing ({', '.join(missing)}); run scripts/setup"
        )
    return PiCommand(node=node, cli=cli)


def piArgv(
    pi: PiCommand,
    *,
    sessionDir: Path,
    sessionFile: Path | None,
    extension: Path,
    model: str,
    tools: Sequence[str] | None,
    mcp: bool = False,
) -> list[str]:
    """
    The argv of a pi RPC child, C{argv[0]} being the Node binary.

    Built-in tools are always switched off (C{--no-builtin-tools}) and the
    ones in C{tools} switched back on with C{--tools +a,+b}; tools registered
    by the extension (and the graph tools) stay available either way.

    @param sessionDir: where pi keeps its session files.
    @param sessionFile: a session file to resume, or L{None} for a new one.
    @param extension: the project's extension (C{sophia.js}).
    @param model: C{provider/id}.
    @param tools: the built-in tools to enable: L{None} or empty for none
        (chat profile), L{AGENT_TOOLS} for the agent profile.
    @param mcp: load pi's MCP support (L{MCP_EXTENSION}), which the
        extension needs for the graph tools; pass C{True} whenever the boot
        config has an MCP endpoint (L{bootConfig}'s C{mcpUrl}).
    """
    _requireAbsolute(sessionDir=sessionDir, extension=extension)
    if sessionFile is not None:
        _requireAbsolute(sessionFile=sessionFile)
    if "/" not in model.strip("/"):
        raise ValueError(f"model must be provider/id, not {model!r}")
    argv = [str(pi.node), str(pi.cli), "--mode", "rpc", "--session-dir", str(sessionDir)]
    if sessionFile is not None:
        argv += ["--session", str(sessionFile)]
    argv += _ISOLATION_FLAGS
    if mcp:
        argv += ["-e", MCP_EXTENSION]
    argv += ["-e", str(extension), "--model", model, "--no-builtin-tools"]
    if tools:
        for name in tools:
            if not _TOOL_NAME.match(name):
                raise ValueError(f"not a tool name: {name!r}")
        argv += ["--tools", ",".join("+" + name for name in tools)]
    return argv


def piEnvironment(*, home: Path, agentDir: Path, path: str) -> dict[str, str]:
    """
    The whole environment of a pi child: nothing inherited, no secrets.

    @param home: C{HOME} (pi looks only at C{~/.agents/skills} and a gcloud
        credential probe there).
    @param agentDir: pi's agent dir; it must be writable (lock files).
    @param path: C{PATH}; tools run with it, so put the pinned Node's
        C{bin} first if tools may run C{node}.
    """
    _requireAbsolute(home=home, agentDir=agentDir)
    return {
        "PATH": path,
        "HOME": str(home),
        "PI_CODING_AGENT_DIR": str(agentDir),
        "PI_OFFLINE": "1",
        "PI_SKIP_VERSION_CHECK": "1",
        "PI_TELEMETRY": "0",
    }


def agentSettings() -> JSONObject:
    """
    The agent dir's C{settings.json}: pi's automatic retries off (the host
    decides what a failed model call means), at agent and provider level.
    """
    return {"retry": {"enabled": False, "provider": {"maxRetries": 0}}}


def checkMcpUrl(url: str) -> str:
    """
    C{url} if pi will send the delegation token to it: C{https}, or C{http}
    on a loopback host (pi's MCP transport refuses a provider token for
    anything else).

    @raise ValueError: otherwise.
    """
    parsed = urlsplit(url)
    host = (parsed.hostname or "").lower()
    if parsed.scheme == "https" and host:
        return url
    if parsed.scheme == "http" and host in _LOOPBACK:
        return url
    raise ValueError(f"the MCP endpoint must be https or http on loopback, not {url!r}")


def _checkedProvider(name: str, provider: JSONObject) -> JSONObject:
    """
    C{provider} as the boot config carries it (its C{models} a list).

    @raise ValueError: it lacks a name, a field, its key or its models.
    """
    if not name or "/" in name:
        raise ValueError(f"not a provider name: {name!r}")
    for key in ("baseUrl", "api", "apiKey", "models"):
        if key not in provider:
            raise ValueError(f"provider {name!r} lacks {key!r}")
    apiKey, models = provider["apiKey"], provider["models"]
    if not isinstance(apiKey, str) or not apiKey:
        raise ValueError(f"provider {name!r} has no key")
    if not isinstance(models, (list, tuple)) or not models:
        raise ValueError(f"provider {name!r} has no models")
    return {**provider, "models": list(models)}


def _checkedBudget(budget: RunBudget) -> JSONObject:
    """
    C{budget} as the boot config carries it.

    @raise ValueError: its turns are not a positive int, or its dollars not
        a positive finite number.
    """
    maxTurns, maxCostUsd = budget.maxTurns, budget.maxCostUsd
    if isinstance(maxTurns, bool) or not isinstance(maxTurns, int) or maxTurns < 1:
        raise ValueError(f"maxTurns must be a positive int, not {maxTurns!r}")
    if isinstance(maxCostUsd, bool) or not isinstance(maxCostUsd, (int, float)):
        raise ValueError(f"maxCostUsd must be a number, not {maxCostUsd!r}")
    if not math.isfinite(maxCostUsd) or maxCostUsd <= 0:
        raise ValueError(f"maxCostUsd must be positive, not {maxCostUsd!r}")
    return {"maxTurns": maxTurns, "maxCostUsd": float(maxCostUsd)}


def bootConfig(
    *,
    providers: Mapping[str, JSONObject],
    budget: RunBudget,
    mcpUrl: str | None = None,
    extra: JSONObject | None = None,
) -> bytes:
    """
    The bytes the host writes to the child's fd 3 (then closes it).

    @param providers: name -> pi provider config (models.json shape:
        C{baseUrl}, C{api}, C{apiKey}, C{models}), passed through as pi
        reads it; C{apiKey} is passed as a literal (the extension escapes
        pi's templating).
    @param budget: the turns and dollars of one run.
    @param mcpUrl: the graph's MCP endpoint as the body reaches it (gardend's
        loopback C{/mcp} for a chat body, C{http://127.0.0.1:<bridge>/mcp}
        for a boxed one), or L{None} for no graph tools. It becomes
        C{"mcp": {"url": mcpUrl}}; the child must then be started with
        C{piArgv(..., mcp=True)}.
    @param extra: more of the extension's boot config, after the rest (a
        box's bridge, a viewer's reader tools, a public conversation's
        graphs).
    """
    document: JSONObject = {
        "providers": {name: _checkedProvider(name, p) for name, p in providers.items()},
        "budget": _checkedBudget(budget),
    }
    if mcpUrl is not None:
        document["mcp"] = {"url": checkMcpUrl(mcpUrl)}
    if extra:
        document.update(extra)
    return json.dumps(document, separators=(",", ":")).encode("utf-8")


def sessionFacts(*, budget: RunBudget, extra: JSONObject | None = None) -> str:
    """
    What a spare body's extension asks for when it is handed to a session
    (the UI C{input} titled C{sophia.session}): the part of a boot config
    that is the session's (its budget, a reader's tools, a public
    conversation's graphs), as JSON text.  Never a key: the spare reaches
    the model through its proxy.
    """
    document: JSONObject = {"budget": _checkedBudget(budget)}
    if extra:
        document.update(extra)
    return json.dumps(document, separators=(",", ":"))
