"""
C{vehicle ledger import}: a host's file ledger moved into PostgreSQL once,
idempotently, with one line saying what was done and an exit status
(issue 19, section 1).
"""

from __future__ import annotations

import io
from pathlib import Path

from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from vehicle._cli import Options
from vehicle.public import InlineRunner, Ledger, PostgresLedger, TurnAsk, runImport
from vehicle.public._import import ImportOptions
from vehicle.store import DataDirLock

from vehicle_local.standin import freeLoopbackPort

from tests.support import postgres


NOON = 1_796_126_400.0
TODAY = "2026-12-01"


class ImportTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.clock = Clock()
        self.clock.advance(NOON)
        self.root = Path(self.mktemp())
        self.url = postgres.shared().newDatabase()
        self.env = {"VEHICLE_LEDGER_URL": self.url}

    def fileLedger(self) -> Ledger:
        """
        A file ledger with every kind of row: grants, a reserved credit turn
        that was charged, one whose hold is still open, one voided, an own
        key's turn, an unnamed turn of an older host, a plain hold released.
        """
        ledger = Ledger(path=self.root / "public" / "ledger.jsonl", clock=self.clock)
        ledger.open()
        self.addCleanup(ledger.close)

        def ask(session: str, command: str, holdUsd: float = 0.05) -> TurnAsk:
            return TurnAsk(principal="p", session=session, command=command, funding="credit",
                           day=TODAY, turnsPerDay=100, sessionMaxTurns=40, holdUsd=holdUsd,
                           dailyCapUsd=5.0)

        ledger.grant("p", 1.0, "signup", "signup:p")
        ledger.grant("q", 2.0, "operator", "operator:k1", note="thanks")
        self.successResultOf(ledger.reserveTurn(ask("s1", "c1")))
        ledger.release("hold:s1:c1", "completed")
        ledger.debit("p", 0.03, "run:s1:5", "s1")
        self.successResultOf(ledger.reserveTurn(ask("s1", "c2")))
        self.successResultOf(ledger.reserveTurn(ask("s2", "c1")))
        self.successResultOf(ledger.voidTurn("s2", "c1"))
        self.successResultOf(ledger.reserveTurn(ask("s3", "c1", holdUsd=0)))
        ledger.turn("p", "s4", "credit")
        ledger.hold("p", 0.01, "s5", "c1")
        ledger.release("hold:s5:c1", "cancelled")
        return ledger

    def postgresLedger(self) -> PostgresLedger:
        ledger = PostgresLedger(runner=InlineRunner(url=self.url, timeoutSeconds=5.0),
                                clock=self.clock, host="", timeoutSeconds=5.0)
        self.addCleanup(ledger.close)
        return ledger

    def runImport(self) -> tuple[int, str]:
        out = io.StringIO()
        options = ImportOptions()
        options.parseOptions(["--data-dir", str(self.root)])
        code = self.successResultOf(runImport(self.clock, options, self.env, out))
        return code, out.getvalue()

    def test_movedOnce(self) -> None:
        """
        Every figure the file gives, PostgreSQL gives after the move; a
        second run moves nothing and says so.
        """
        ledger = self.fileLedger()
        lines = len(ledger.path.read_text().splitlines())
        code, line = self.runImport()
        self.assertEqual(code, 0, line)
        self.assertRegex(line, rf"^vehicle ledger import: {lines} rows read from .*ledger.jsonl; "
                               r"\d+ moved into postgresql://127.0.0.1:\d+/\w+, 0 already there\n$")
        self.assertNotIn("vehicle@", line)
        moved = self.postgresLedger()
        for principal in ("p", "q"):
            self.assertEqual(self.successResultOf(moved.figures(principal)),
                             self.successResultOf(ledger.figures(principal)))
        self.assertEqual(self.successResultOf(moved.turnsOf("s1")).count, 2)
        self.assertEqual(self.successResultOf(moved.turnsOf("s2")).count, 0)
        self.assertEqual(self.successResultOf(moved.turnsOf("s4")).count, 1)
        before = postgres.shared().query(self.url, "SELECT count(*) FROM ledger_rows")
        code, line = self.runImport()
        self.assertEqual(code, 0)
        self.assertIn("; 0 moved into", line)
        self.assertEqual(postgres.shared().query(self.url, "SELECT count(*) FROM ledger_rows"),
                         before)

    def test_tornLastLine(self) -> None:
        """
        A torn last line (a host cut mid-write) is not a row.
        """
        self.fileLedger().close()
        path = self.root / "public" / "ledger.jsonl"
        with path.open("a") as f:
            f.write('{"type": "grant", "princ')
        code, line = self.runImport()
        self.assertEqual(code, 0, line)
        self.assertEqual(self.successResultOf(self.postgresLedger().figures("q")).grantedUsd, 2.0)

    def test_rowThatDoesNotFit(self) -> None:
        """
        A row of a known kind that does not fit it (a grant without its
        amount) is named by its line, and nothing is moved: exit 1.
        """
        self.fileLedger().close()
        path = self.root / "public" / "ledger.jsonl"
        lines = len(path.read_text().splitlines())
        with path.open("a") as f:
            f.write('{"type": "grant", "principal": "q", "key": "k9"}\n')
        code, line = self.runImport()
        self.assertEqual(code, 1, line)
        self.assertRegex(line, rf"^vehicle ledger import: .*ledger.jsonl, line {lines + 1}: "
                               r"not a GrantRow")
        self.assertEqual(self.successResultOf(self.postgresLedger().figures("q")).grantedUsd, 0.0)

    def test_hostRunning(self) -> None:
        """
        A data dir in use by a running host is not imported from.
        """
        self.fileLedger()
        lock = DataDirLock(self.root)
        lock.acquire()
        self.addCleanup(lock.release)
        code, line = self.runImport()
        self.assertEqual(code, 1)
        self.assertIn("stop the host first", line)

    def test_unreachable(self) -> None:
        """
        PostgreSQL out of reach: exit 1, one line, nothing moved.
        """
        self.fileLedger()
        self.env = {"VEHICLE_LEDGER_URL": postgres.shared().url().replace(
            str(postgres.shared().port), str(freeLoopbackPort()))}
        code, line = self.runImport()
        self.assertEqual(code, 1)
        self.assertIn("did not answer", line)

    def test_needsTheUrlAndTheFile(self) -> None:
        self.env = {}
        self.assertEqual(self.runImport()[0], 1)
        self.env = {"VEHICLE_LEDGER_URL": "mysql://x"}
        code, line = self.runImport()
        self.assertEqual(code, 1)
        self.assertIn("postgresql://", line)
        self.env = {"VEHICLE_LEDGER_URL": self.url}
        code, line = self.runImport()
        self.assertEqual(code, 1)
        self.assertIn("nothing to move", line)

    def test_commandLine(self) -> None:
        """
        C{vehicle ledger import} is a subcommand of the console script.
        """
        options = Options()
        options.parseOptions(["ledger", "import", "--data-dir", "/d"])
        self.assertEqual(options.subCommand, "ledger")
        self.assertEqual(options.subOptions.subCommand, "import")
        self.assertEqual(options.subOptions.subOptions["data-dir"], "/d")
