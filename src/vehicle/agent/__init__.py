"""
The agent package: the agent profile wired (who may create one, the isolation
decision, the workspace and its folders' identities) and the plan of every
agent body: its box, its proxy to the model and its per-body token.
"""

from vehicle.agent._profile import BRIDGE_PORT, SECCOMP_FD, AgentProfile


__all__ = ["BRIDGE_PORT", "SECCOMP_FD", "AgentProfile"]
