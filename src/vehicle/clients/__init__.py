# -*- test-case-name: tests.unit.test_ride,tests.unit.test_tail,tests.unit.test_acp -*-
"""
The host's clients, through gardend's gateway: C{vehicle ride}, the
stdio (JSONL) client, C{vehicle tail}, an operator's view of a session's
events, and C{vehicle acp}, an Agent Client Protocol agent for editors.
They know the host only by its routes and frames, and share the link
(credentials, the gateway's URL), the HTTP client and
the stdio lines.
"""

from vehicle.clients._acp import AcpAgent, AcpOptions, AcpSession, runAcp
from vehicle.clients._acpmap import EventMapper, promptCommand, replay, stopReason
from vehicle.clients._acprpc import RPCError, readMessage
from vehicle.clients._client import clientHTTP, isLoopback
from vehicle.clients._link import (
    Credentials,
    CredentialError,
    HostLink,
    asFrame,
    errorFrame,
    loadVisitorId,
    localFrame,
    credentialsFor,
    resolveCredentials,
)
from vehicle.clients._ridemain import RideOptions, runRide
from vehicle.clients._ride import COMMAND_OPS, OPS, Call, NewSession, Ride
from vehicle.clients._stdio import StdioLines
from vehicle.clients._tail import (
    SSEParser,
    Tail,
    TailAll,
    TailFailed,
    TailOptions,
    formatEvent,
    runTail,
    typeMatches,
)


__all__ = [
    "AcpAgent",
    "AcpOptions",
    "AcpSession",
    "EventMapper",
    "RPCError",
    "promptCommand",
    "readMessage",
    "replay",
    "runAcp",
    "stopReason",
    "SSEParser",
    "Tail",
    "TailAll",
    "TailFailed",
    "TailOptions",
    "clientHTTP",
    "formatEvent",
    "runTail",
    "typeMatches",
    "COMMAND_OPS",
    "Call",
    "CredentialError",
    "Credentials",
    "HostLink",
    "NewSession",
    "OPS",
    "Ride",
    "RideOptions",
    "StdioLines",
    "asFrame",
    "errorFrame",
    "isLoopback",
    "loadVisitorId",
    "localFrame",
    "credentialsFor",
    "resolveCredentials",
    "runRide",
]
