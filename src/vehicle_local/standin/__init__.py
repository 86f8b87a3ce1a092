# -*- test-case-name: tests.unit.test_gardend -*-
"""
A stand-in for gardend, for tests and the one-command local run: the
gateway that mints identity headers and delegation tokens (members, and in
public mode visitors and Sophia accounts), C{/mcp} over a folder-backed
workspace, and gardend's way of starting a service from its manifest. Not
gardend: only the parts the host touches.
"""

from vehicle_local.standin._config import (
    Account,
    ClientToken,
    Config,
    ConfigError,
    PublicConfig,
    ServiceConfig,
)
from vehicle_local.standin._delegation import Delegation, DelegationRefused, Delegations
from vehicle_local.standin._gateway import Gateway
from vehicle_local.standin._mcp import MCPEndpoint
from vehicle_local.standin._manifest import Manifest, ManifestError
from vehicle_local.standin._page import LOGIN_SECONDS, Page, PageLogin
from vehicle_local.standin._standin import StandIn, freeLoopbackPort
from vehicle_local.standin._store import FolderStore, ToolError
from vehicle_local.standin._tools import CATALOG

__all__ = [
    "Account",
    "CATALOG",
    "ClientToken",
    "Config",
    "ConfigError",
    "Delegation",
    "DelegationRefused",
    "Delegations",
    "FolderStore",
    "Gateway",
    "LOGIN_SECONDS",
    "Manifest",
    "ManifestError",
    "MCPEndpoint",
    "Page",
    "PageLogin",
    "PublicConfig",
    "ServiceConfig",
    "StandIn",
    "ToolError",
    "freeLoopbackPort",
]
