# -*- test-case-name: tests.test_ride -*-
"""
C{vehicle ride}: the stdio (JSONL) client of the host, through gardend's
front door.  It knows the host only by its routes and frames.
"""

from vehicle.ride._door import (
    Credentials,
    CredentialError,
    Door,
    asFrame,
    errorFrame,
    isLoopback,
    loadVisitorId,
    localFrame,
    credentialsFor,
    resolveCredentials,
)
from vehicle.ride._main import RideOptions, runRide
from vehicle.ride._ride import COMMAND_OPS, OPS, Call, NewSession, Ride
from vehicle.ride._stdio import StdioLines


__all__ = [
    "COMMAND_OPS",
    "Call",
    "CredentialError",
    "Credentials",
    "Door",
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
