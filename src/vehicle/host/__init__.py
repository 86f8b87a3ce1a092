"""
The host package: the host's rules of a request above the sessions (L{Drive}:
which session, idempotency, delegation, public turns, the agent profile),
every session joined to its body (L{Bodies}), and the service that loads
and stops them (L{HostService}).
"""

from vehicle.host._bodies import Bodies, ChatAhead, ChatSpareProxy, chatSpares
from vehicle.host._drive import AgentRules, BodyRules, Drive, PublicTurns, Replayed, refuseIfRunning
from vehicle.host._service import HostBodyRules, HostService, MirrorFollower


__all__ = [
    "AgentRules",
    "Bodies",
    "BodyRules",
    "ChatAhead",
    "ChatSpareProxy",
    "chatSpares",
    "Drive",
    "HostBodyRules",
    "HostService",
    "MirrorFollower",
    "PublicTurns",
    "Replayed",
    "refuseIfRunning",
]
