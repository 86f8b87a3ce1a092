# -*- test-case-name: tests.unit.test_ledger,tests.unit.test_ledger_import -*-
"""
The rows of C{public/ledger.jsonl}, one value per kind, written and read
through the protocol's codec: each class's fields are its row's keys in the
order the host has always written them (C{type} first, C{day} and C{at}
last), so a file written by an older host reads back and a new row's bytes
are an older host's.

A field has a default only so that a row an older or odder host wrote
without it still reads back, as the ledger always read its rows: the
host writes every field it has.
"""

from __future__ import annotations

from typing import Literal, Union

from attrs import frozen

from vehicle.protocol import JSONObject, fromJSON, omitted, textOf


@frozen(kw_only=True)
class GrantRow:
    """
    Credit in, once per key.
    """

    type: Literal["grant"] = "grant"
    principal: str = ""
    amountUsd: float
    source: str = ""
    key: str = ""
    note: str | None = omitted()
    day: str = ""
    at: str = ""


@frozen(kw_only=True)
class DebitRow:
    """
    A credit run's cost; C{holds} are the run's holds it ends.
    """

    type: Literal["debit"] = "debit"
    principal: str = ""
    amountUsd: float
    key: str = ""
    session: str = ""
    holds: tuple[str, ...] | None = omitted()
    day: str = ""
    at: str = ""


@frozen(kw_only=True)
class TurnRow:
    """
    A public turn; named by its command (C{key}) since turns counted once,
    holding its run's budget (C{holdUsd}) when reserved on credit.
    """

    type: Literal["turn"] = "turn"
    principal: str = ""
    session: str = ""
    funding: str = ""
    key: str | None = omitted()
    command: str | None = omitted()
    holdUsd: float | None = omitted()
    day: str = ""
    at: str = ""


@frozen(kw_only=True)
class HoldRow:
    """
    A credit turn's run budget, spoken for (a turn row holds it now; an
    older host wrote it apart).
    """

    type: Literal["hold"] = "hold"
    principal: str = ""
    amountUsd: float
    key: str
    session: str = ""
    command: str = ""
    day: str = ""
    at: str = ""


@frozen(kw_only=True)
class ReleaseRow:
    """
    The end of the hold C{hold}.
    """

    type: Literal["release"] = "release"
    principal: str = ""
    hold: str = ""
    key: str = ""
    session: str = ""
    reason: str = ""
    day: str = ""
    at: str = ""


@frozen(kw_only=True)
class VoidRow:
    """
    The turn C{turn} undone: its command was not accepted.
    """

    type: Literal["void"] = "void"
    principal: str = ""
    session: str = ""
    turn: str = ""
    command: str = ""
    key: str | None = omitted()
    day: str = ""
    at: str = ""


@frozen(kw_only=True)
class OtherRow:
    """
    A row of a kind this host does not know (a later host's): kept in the
    file, its key taken, counted for nothing.
    """

    type: str | None
    key: str | None


#: A row of a kind this host writes.
KnownRow = Union[GrantRow, DebitRow, TurnRow, HoldRow, ReleaseRow, VoidRow]

#: A row of the ledger's file.
LedgerRow = Union[KnownRow, OtherRow]

_KINDS: dict[str, type[KnownRow]] = {
    "grant": GrantRow,
    "debit": DebitRow,
    "turn": TurnRow,
    "hold": HoldRow,
    "release": ReleaseRow,
    "void": VoidRow,
}


def rowOf(line: JSONObject) -> LedgerRow:
    """
    The row a line of the file holds.

    @raise ValueError: a row of a known kind that does not fit it.
    """
    kind = textOf(line.get("type"))
    known = _KINDS.get(kind) if kind is not None else None
    if known is None:
        return OtherRow(type=kind, key=textOf(line.get("key")))
    return fromJSON(line, known)
