"""
The benchmarks' in-process measures still run against the code as it is
(a benchmark is run on demand, so nothing else would notice it broke).
The figures are not judged here: only that each measure runs and counts.
"""

from __future__ import annotations

import os

from twisted.trial.unittest import SynchronousTestCase

from benchmarks import bench_body
from benchmarks.bench_body import dormantCost, perEvent


class BodyBenchmarkTests(SynchronousTestCase):
    """
    L{benchmarks.bench_body}'s measures that need no pi.
    """

    def setUp(self) -> None:
        # Their data directories in the test's own folder, not /tmp.
        base = os.path.abspath(self.mktemp())
        made: list[str] = []

        def mkdtemp(prefix: str = "") -> str:
            made.append(os.path.join(base, f"{prefix}{len(made)}"))
            os.makedirs(made[-1])
            return made[-1]

        self.patch(bench_body.tempfile, "mkdtemp", mkdtemp)

    def test_perEvent(self) -> None:
        """
        A few durable and ephemeral events are timed.
        """
        durable, ephemeral = perEvent(count=5)
        self.assertGreater(durable, 0)
        self.assertGreater(ephemeral, 0)

    def test_dormantCost(self) -> None:
        """
        A few dormant sessions are made, closed and loaded again.
        """
        self.assertIsInstance(dormantCost(sessions=2), float)


class WriteBenchmarkTests(SynchronousTestCase):
    """
    L{benchmarks.bench_write}'s in-process profile (the wrk runs need wrk).
    """

    def test_profile(self) -> None:
        """
        Each route is driven through the real app beside the bare route,
        its CPU taken and its calls put under their phases.
        """
        from benchmarks.bench_write import profile

        out = profile(requests=32, rounds=1)
        self.assertEqual(sorted(out), ["command", "inspect", "rename"])
        for figures in out.values():
            self.assertEqual((len(figures["host"]), len(figures["floor"])), (1, 1))
            self.assertGreater(figures["calls"]["trust"], 0)
            self.assertNotIn("trust", figures["floorCalls"])
        self.assertGreater(out["command"]["calls"]["the record"], 0)
