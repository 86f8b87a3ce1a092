# -*- test-case-name: tests.unit.test_gardend -*-
"""
A stand-in for gardend, for tests and the one-command local run: the front
door that mints identity headers and delegation tokens (members, and in
public mode visitors and Sophia accounts), and C{/mcp} over a folder-backed
workspace. Not gardend: only the parts the host touches.
"""

from vehicle.gardend._config import (
    Account,
    ClientToken,
    Config,
    ConfigError,
    PublicConfig,
    ServiceConfig,
)
from vehicle.gardend._delegation import Delegation, DelegationRefused, Delegations
from vehicle.gardend._frontdoor import FrontDoor
from vehicle.gardend._mcp import CATALOG, MCPEndpoint
from vehicle.gardend._manifest import (
    ChildProcess,
    Manifest,
    ManifestError,
    describeStatus,
    waitHealthy,
)
from vehicle.gardend._standin import ServiceFailed, StandIn, freeLoopbackPort
from vehicle.gardend._store import FolderStore, ToolError

__all__ = [
    "Account",
    "CATALOG",
    "ChildProcess",
    "ClientToken",
    "Config",
    "ConfigError",
    "Delegation",
    "DelegationRefused",
    "Delegations",
    "FolderStore",
    "FrontDoor",
    "Manifest",
    "ManifestError",
    "MCPEndpoint",
    "PublicConfig",
    "ServiceConfig",
    "ServiceFailed",
    "StandIn",
    "ToolError",
    "describeStatus",
    "freeLoopbackPort",
    "waitHealthy",
]
