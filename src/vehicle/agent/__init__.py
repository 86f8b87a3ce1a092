"""
The agent package: the agent profile wired (who may create one, the isolation
decision, the workspace and its folders' identities), the plan of every
agent body (its box, its proxy to the model and its per-body token), and the
spare agent bodies, each made to become one new session.
"""

from vehicle.agent._profile import BRIDGE_PORT, SECCOMP_FD, AgentProfile
from vehicle.agent._spares import AgentSpareProxy, AgentSpares, agentSpares


__all__ = [
    "BRIDGE_PORT",
    "SECCOMP_FD",
    "AgentProfile",
    "AgentSpareProxy",
    "AgentSpares",
    "agentSpares",
]
