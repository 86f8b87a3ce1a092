"""
The host room: every session joined to its body and to the parts that
follow it (public accounting, the mirror).
"""

from vehicle.host._bodies import Bodies


__all__ = ["Bodies"]
