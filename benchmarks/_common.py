"""
What the benchmarks share: a stand-in for the trial TestCase that
L{tests.support.live.LiveHost} wants, and a process's resident memory.
"""

from __future__ import annotations

import secrets
import tempfile
from pathlib import Path
from typing import Any

from twisted.internet.defer import Deferred


class BenchCase:
    """
    Stands for a trial TestCase where a L{LiveHost} wants one: temporary
    folders and cleanups, run by L{cleanup}.
    """

    def __init__(self, prefix: str = "vehicle-bench-") -> None:
        self.cleanups: list[tuple[Any, tuple[Any, ...]]] = []
        self.root = Path(tempfile.mkdtemp(prefix=prefix))

    def mktemp(self) -> str:
        return str(self.root / secrets.token_hex(4))

    def addCleanup(self, f: Any, *a: Any) -> None:
        self.cleanups.append((f, a))

    async def cleanup(self) -> None:
        for f, a in reversed(self.cleanups):
            result = f(*a)
            if isinstance(result, Deferred) or hasattr(result, "__await__"):
                await result


def rss(pid: int) -> int:
    """
    The resident memory of process C{pid}, in bytes.
    """
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0
