"""
The public room: callers' doors, limits, the ledger and C{/account}.
"""

from vehicle.public._body import OwnKeyBodies
from vehicle.public._ledger import Ledger, utcDay
from vehicle.public._public import OUT_OF_CREDIT, Public


__all__ = ["Ledger", "OUT_OF_CREDIT", "OwnKeyBodies", "Public", "utcDay"]
