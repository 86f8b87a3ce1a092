# -*- test-case-name: tests.unit.test_ledger_import -*-
"""
C{vehicle ledger import}: a host's C{public/ledger.jsonl} moved into the
PostgreSQL ledger (C{VEHICLE_LEDGER_URL}), once: every row by its key, so
a second run moves nothing.  The host must be stopped (its data dir's lock
is taken for the move).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Mapping, TextIO

from twisted.internet.interfaces import IReactorTime
from twisted.python import usage

from vehicle.public._contract import LedgerUnavailable
from vehicle.public._open import hostIdentity, runnerFor
from vehicle.public._postgres import PostgresLedger, describe
from vehicle.public._rows import LedgerRow, rowOf
from vehicle.protocol import JSONObject
from vehicle.settings import SettingsError, ledgerUrl
from vehicle.store import DataDirLock, DataDirLocked


class ImportOptions(usage.Options):
    """
    C{vehicle ledger import [--data-dir DIR]}; PostgreSQL from
    C{VEHICLE_LEDGER_URL} (never an argument: it may carry a password).
    """

    synopsis = "vehicle ledger import [--data-dir DIR]"
    optParameters = [
        ["data-dir", None, None, "The host's data dir (default $VEHICLE_DATA_DIR, else $DATA_DIR)."],
    ]


class LedgerOptions(usage.Options):
    synopsis = "vehicle ledger import [--data-dir DIR]"
    subCommands = [
        ["import", None, ImportOptions,
         "Move this host's public/ledger.jsonl into PostgreSQL (VEHICLE_LEDGER_URL), once."],
    ]

    def postOptions(self) -> None:
        if self.subCommand is None:
            raise usage.UsageError("a subcommand is required: import")


def importKey(number: int, line: JSONObject) -> str:
    """
    The key a row without one moves in by: its line's number and a digest
    of its JSON, the same however often it is read.
    """
    digest = hashlib.sha256(json.dumps(line, sort_keys=True).encode()).hexdigest()[:16]
    return f"import:{number}:{digest}"


def readRows(path: Path) -> list[tuple[str, LedgerRow]]:
    """
    The file's rows, each with the key it moves in by (its own, or
    L{importKey}); a torn last line (a host cut mid-write) is not a row.

    @raise ValueError: a row of a known kind that does not fit it.
    """
    rows: list[tuple[str, LedgerRow]] = []
    with path.open("rb") as f:
        for number, raw in enumerate(f, 1):
            try:
                line = json.loads(raw)
            except ValueError:
                continue
            if isinstance(line, dict):
                try:
                    row = rowOf(line)
                except ValueError as e:
                    raise ValueError(f"{path}, line {number}: {e}") from e
                rows.append((row.key or importKey(number, line), row))
    return rows


async def runImport(
    reactor: IReactorTime, options: ImportOptions, environ: Mapping[str, str], out: TextIO,
) -> int:
    """
    Move the rows; one line on C{out} saying what was done.

    @return: the exit status: 0 done, 1 not done.
    """
    try:
        url = ledgerUrl(environ)
    except SettingsError as e:
        out.write(f"vehicle ledger import: {e}\n")
        return 1
    dataDir = options["data-dir"] or environ.get("VEHICLE_DATA_DIR") or environ.get("DATA_DIR")
    if not url or not dataDir:
        out.write("vehicle ledger import: needs VEHICLE_LEDGER_URL and a data dir "
                  "(--data-dir, or VEHICLE_DATA_DIR)\n")
        return 1
    root = Path(dataDir).absolute()
    path = root / "public" / "ledger.jsonl"
    if not path.exists():
        out.write(f"vehicle ledger import: {path} does not exist: nothing to move\n")
        return 1
    lock = DataDirLock(root)
    try:
        lock.acquire()
    except DataDirLocked as e:
        out.write(f"vehicle ledger import: {e}: stop the host first\n")
        return 1
    ledger = PostgresLedger(
        runner=runnerFor(reactor, url, 10.0), clock=reactor, host=hostIdentity(root / "public"),
        where=describe(url), timeoutSeconds=10.0,
    )
    try:
        rows = readRows(path)
        moved, present = await ledger.importRows(rows)
    except (LedgerUnavailable, ValueError) as e:
        out.write(f"vehicle ledger import: {e}\n")
        return 1
    finally:
        ledger.close()
        lock.release()
    out.write(
        f"vehicle ledger import: {len(rows)} rows read from {path}; {moved} moved into "
        f"{describe(url)}, {present} already there\n"
    )
    return 0
