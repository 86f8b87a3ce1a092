"""
The benchmarks' in-process measures still run against the code as it is
(a benchmark is run on demand, so nothing else would notice it broke).
The figures are not judged here: only that each measure runs and counts.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from twisted.trial.unittest import SynchronousTestCase, TestCase
from twisted.web.server import NOT_DONE_YET

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

    def test_helperTimes(self) -> None:
        """
        The CPU of a process's children running C{_syncd.py} is counted,
        and no other child's.
        """
        import subprocess
        import sys

        from benchmarks.bench_write import helperTimes

        if not os.path.isdir("/proc/self/task"):
            raise self.skipTest("reads /proc")
        folder = Path(self.mktemp())
        folder.mkdir()
        burn = "import sys, time\nt = time.process_time()\nwhile time.process_time() - t < 0.2: pass\nsys.stdout.write('x'); sys.stdout.flush(); sys.stdin.read()\n"
        children = []
        for name in ("_syncd.py", "other.py"):
            (folder / name).write_text(burn)
            child = subprocess.Popen([sys.executable, str(folder / name)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE)
            self.addCleanup(child.wait)
            self.addCleanup(child.stdin.close)  # type: ignore[union-attr]
            self.addCleanup(child.stdout.close)  # type: ignore[union-attr]
            children.append(child)
        for child in children:
            child.stdout.read(1)  # type: ignore[union-attr]
        counted = helperTimes(os.getpid())
        self.assertGreaterEqual(counted, 0.15)
        self.assertLess(counted, 0.35)


class SweepBenchmarkTests(SynchronousTestCase):
    """
    L{benchmarks.bench_sweep}: one sweep of the real app timed, its floor
    beside it.
    """

    def test_sweep(self) -> None:
        """
        The sweep runs over every session made, each awake after it (their
        logs moved a moment ago), and both times are taken.
        """
        from benchmarks.bench_sweep import sweep

        self.patch(sys, "path", list(sys.path))
        out = sweep(3)
        self.assertEqual(out["awake"], 3)
        self.assertGreater(out["sweep"], 0)
        self.assertGreater(out["floor"], 0)


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


class HostProcessTests(SynchronousTestCase):
    """
    L{benchmarks._fleet.HostProcess}, the host the fan-out, restart and
    memory benchmarks start.
    """

    def test_stoppedWhenTheBenchmarkFails(self) -> None:
        """
        A benchmark that fails after starting a host (an exception, the
        interpreter exits) leaves no host running.
        """
        import subprocess
        import sys
        from pathlib import Path

        root = Path(__file__).resolve().parents[2]
        work = Path(self.mktemp()).resolve()
        work.mkdir()
        script = (
            "import sys\n"
            f"sys.path.insert(0, {str(root)!r})\n"
            "from pathlib import Path\n"
            "from benchmarks._fleet import HostProcess\n"
            f"host = HostProcess(Path({str(work)!r}) / 'data')\n"
            "host.start()\n"
            "print(host.process.pid, flush=True)\n"
            "raise RuntimeError('the benchmark failed')\n"
        )
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=300)
        self.assertEqual(done.returncode, 1)
        self.assertIn(b"the benchmark failed", done.stderr)
        pid = int(done.stdout.split()[0])
        left = Path(f"/proc/{pid}").exists() and b"twistd" in Path(
            f"/proc/{pid}/cmdline").read_bytes()
        if left:
            os.kill(pid, 9)
        self.assertFalse(left)


class RawClientTests(TestCase):
    """
    L{benchmarks._common.RawClient}, the bare HTTP/1.1 client that sends
    L{benchmarks.bench_delta}'s prompts.
    """

    def test_parseAnswer(self) -> None:
        """
        An answer is read by its C{Content-Length} or its chunks, only once
        whole; what follows it is left.
        """
        from benchmarks._common import parseAnswer

        sized = b"HTTP/1.1 201 Created\r\nContent-Length: 5\r\n\r\nhello" + b"HTTP/1.1"
        self.assertEqual(parseAnswer(sized), (201, b"hello", b"HTTP/1.1"))
        chunked = (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                   b"3\r\nabc\r\n2;x=1\r\nde\r\n0\r\n\r\n")
        self.assertEqual(parseAnswer(chunked), (200, b"abcde", b""))
        for cut in range(len(chunked)):
            self.assertIsNone(parseAnswer(chunked[:cut]), cut)
        self.assertIsNone(parseAnswer(sized[:len(sized) - len(b"HTTP/1.1") - 1]))

    async def test_requestsOnOneConnection(self) -> None:
        """
        Requests go one after another on one kept connection to a real
        Twisted site, each with its headers and body, each answer read
        whole (the site's are chunked).
        """
        from twisted.internet import reactor
        from twisted.web.resource import Resource
        from twisted.web.server import Site

        from benchmarks._common import rawClient

        seen: list[tuple[bytes, bytes | None, bytes]] = []
        peers: set[int] = set()

        class Echo(Resource):
            isLeaf = True

            def render_POST(self, request: Any) -> int:
                body = request.content.read()
                seen.append((request.path, request.getHeader(b"x-who"), body))
                peers.add(request.getClientAddress().port)
                request.setResponseCode(202)
                request.write(b"got " + body)
                request.finish()
                return NOT_DONE_YET

        port = reactor.listenTCP(0, Site(Echo()), interface="127.0.0.1")
        self.addCleanup(port.stopListening)
        client = await rawClient(reactor, port.getHost().port)
        self.addCleanup(client.transport.loseConnection)
        for n in (1, 2):
            answer = await client.request("POST", f"/p{n}", {"x-who": "me"}, b'{"n": %d}' % n)
            self.assertEqual(answer, (202, b'got {"n": %d}' % n))
        self.assertEqual(seen, [(b"/p1", b"me", b'{"n": 1}'), (b"/p2", b"me", b'{"n": 2}')])
        self.assertEqual(len(peers), 1)


class SourceRootTests(SynchronousTestCase):
    """
    L{benchmarks._common.sourceRoot}: what C{--src} names, as the
    C{PYTHONPATH} of the other host.
    """

    def test_checkoutOrItsSource(self) -> None:
        """
        A checkout gives its C{src/}; a C{src/} gives itself; a folder
        holding no C{vehicle} package is refused rather than put on the
        path, where this checkout's host would run in its place.
        """
        from pathlib import Path

        from benchmarks._common import sourceRoot

        checkout = Path(self.mktemp())
        (checkout / "src" / "vehicle").mkdir(parents=True)
        (checkout / "src" / "vehicle" / "__init__.py").write_text("")
        self.assertEqual(sourceRoot(checkout), (checkout / "src").resolve())
        self.assertEqual(sourceRoot(checkout / "src"), (checkout / "src").resolve())
        empty = Path(self.mktemp())
        empty.mkdir()
        self.assertRaises(SystemExit, sourceRoot, empty)


class HostEnvironmentTests(SynchronousTestCase):
    """
    L{benchmarks._common.hostEnvironment}, the environment of the hosts the
    write, fan-out, restart and memory benchmarks start.
    """

    def test_noSparesUnlessAsked(self) -> None:
        """
        A benchmark's host keeps no spare bodies (a spare's refill would
        boot Node on the measure's cores), unless the benchmark asks.
        """
        from pathlib import Path

        from benchmarks._common import hostEnvironment

        env = hostEnvironment("s3cret", Path("/m.json"))
        self.assertEqual((env["VEHICLE_SPARE_BODIES"], env["VEHICLE_AGENT_SPARE_BODIES"]),
                         ("0", "0"))
        kept = hostEnvironment("s3cret", Path("/m.json"), spares=True)
        self.assertNotEqual(kept.get("VEHICLE_SPARE_BODIES"), "0")
        self.assertNotEqual(kept.get("VEHICLE_AGENT_SPARE_BODIES"), "0")

    def test_hostOfAnotherTree(self) -> None:
        """
        The secret, the models and C{extra} are set, gardend's MCP endpoint
        is not, and C{src} names the C{vehicle} the host runs.
        """
        import os
        from pathlib import Path
        from unittest import mock

        from benchmarks._common import hostEnvironment

        checkout = Path(self.mktemp())
        (checkout / "src" / "vehicle").mkdir(parents=True)
        (checkout / "src" / "vehicle" / "__init__.py").write_text("")
        with mock.patch.dict(os.environ, {"MNEMOSYNE_MCP_URL": "http://127.0.0.1:1/mcp",
                                          "VEHICLE_SPARE_BODIES": "3"}):
            env = hostEnvironment("s3cret", Path("/m.json"), checkout,
                                  extra={"VEHICLE_MIRROR": "off"})
            kept = hostEnvironment("s3cret", Path("/m.json"), spares=True)
        self.assertEqual(env["MNEMOSYNE_INTERNAL_SERVICE_SECRET"], "s3cret")
        self.assertEqual(env["VEHICLE_MODELS"], "/m.json")
        self.assertEqual(env["VEHICLE_MIRROR"], "off")
        self.assertNotIn("MNEMOSYNE_MCP_URL", env)
        self.assertEqual(env["PYTHONPATH"], str((checkout / "src").resolve()))
        self.assertEqual(env["VEHICLE_SPARE_BODIES"], "0")
        self.assertEqual(kept["VEHICLE_SPARE_BODIES"], "3")


class DeltaTraceTests(SynchronousTestCase):
    """
    L{benchmarks.bench_delta}'s trace.
    """

    def test_syncsCountedWhereverMade(self) -> None:
        """
        A traced prompt's syncs are counted whether the sync helper made
        them (their time comes back with the batch's answer) or this
        process did; a batch that synced nothing counts none.
        """
        from benchmarks import bench_delta
        from vehicle.store._jsonl import JsonlLog

        self.patch(JsonlLog, "wroteElsewhere", JsonlLog.wroteElsewhere)
        self.patch(JsonlLog, "sync", JsonlLog.sync)
        self.patch(bench_delta, "TRACING", [True])
        self.patch(bench_delta, "TRACE", {})
        self.patch(bench_delta, "SPENT", {})
        bench_delta._accountSyncs()
        root = Path(self.mktemp())
        root.mkdir()
        log, _ = JsonlLog.open(root / "a")
        self.addCleanup(log.close)
        log.wroteElsewhere(0, 0, None, None)
        self.assertEqual(bench_delta.SPENT, {})
        log.wroteElsewhere(6, 1, 0.25, None)
        log.sync()
        calls, seconds = bench_delta.SPENT["fsync"]
        self.assertEqual(calls, 2)
        self.assertGreaterEqual(seconds, 0.25)
        self.assertEqual(log.size, 6)
