"""
The public package: callers' doors, limits, the ledger and C{/account}.
"""

from vehicle.public._body import OwnKeyBodies
from vehicle.public._contract import (
    Figures,
    Hold,
    LedgerStore,
    LedgerUnavailable,
    SessionTurns,
    TurnAsk,
)
from vehicle.public._import import LedgerOptions, runImport
from vehicle.public._ledger import Ledger, utcDay
from vehicle.public._open import hostIdentity, openLedger
from vehicle.public._postgres import InlineRunner, PostgresLedger, describe
from vehicle.public._public import OUT_OF_CREDIT, Public, Reservation


__all__ = [
    "Figures",
    "Hold",
    "InlineRunner",
    "Ledger",
    "LedgerOptions",
    "LedgerStore",
    "LedgerUnavailable",
    "OUT_OF_CREDIT",
    "OwnKeyBodies",
    "PostgresLedger",
    "Public",
    "Reservation",
    "SessionTurns",
    "TurnAsk",
    "describe",
    "hostIdentity",
    "openLedger",
    "runImport",
    "utcDay",
]
