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
            # The router's short way leaves nothing for the collector; the
            # bare route, served by Klein's own resource, leaves its request.
            self.assertEqual(figures["garbage"], 0)
            self.assertGreater(figures["floorGarbage"], 0)
        self.assertGreater(out["command"]["calls"]["the record"], 0)


class FleetTests(SynchronousTestCase):
    """
    L{benchmarks._fleet}: the sessions the restart, fan-out and memory
    benchmarks are measured on are sessions the host serves.
    """

    def test_fleet(self) -> None:
        """
        A fleet's sessions load, each with the template's events under its
        own id, and list.
        """
        from pathlib import Path

        from twisted.internet.task import Clock

        from benchmarks._fleet import fleet
        from vehicle.session import Caller, Registry
        from vehicle.store import DataDir

        root = Path(self.mktemp()) / "data"
        root.parent.mkdir()
        sids = fleet(root, 3, 40)
        clock = Clock()
        clock.advance(1_900_000_000)
        registry = Registry(dataDir=DataDir(root), clock=clock)
        registry.loadAll()
        self.addCleanup(registry.close)
        self.assertEqual(sorted(registry.sessions), sorted(sids))
        for sid in sids:
            events, _ = registry.sessions[sid].feed.after(0, limit=100)
            self.assertGreaterEqual(len(events), 40)
            self.assertEqual({e.sessionId for e in events}, {sid})
        caller = Caller(principal="bench", clientId="bench", role="owner", graphId="bench")
        self.assertEqual(len(registry.listFor(caller)), 3)
