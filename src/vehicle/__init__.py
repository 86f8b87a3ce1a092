"""
vehicle: a Twisted host for pi agent conversations under gardend.

The protocol it speaks is C{sophia.vehicle-ride.v2}; see C{docs/} for the
map from the protocol's clauses to the modules that implement them.
"""

from vehicle._version import __version__


PROTOCOL = "sophia.vehicle-ride.v2"

__all__ = ["__version__", "PROTOCOL"]
