"""
The web package: the Klein app, trust, frames, request limits and watching.
"""

from vehicle.web._app import Snapshots, VehicleAPI
from vehicle.errors import errorFrame
from vehicle.web._frames import MAX_BODY_BYTES, MAX_TEXT_BYTES, frame
from vehicle.web._limits import LimitedRequest, VehicleSite
from vehicle.web._watch import sseEncode


__all__ = [
    "LimitedRequest",
    "MAX_BODY_BYTES",
    "MAX_TEXT_BYTES",
    "VehicleAPI",
    "Snapshots",
    "VehicleSite",
    "errorFrame",
    "frame",
    "sseEncode",
]
