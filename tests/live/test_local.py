"""
Live: the README's first command, C{scripts/run}, started as a person starts
it (a subprocess in a clean clone), then talked to with the ride line its
banner prints, stopped with Ctrl-C, and started again; a part that dies, a
busy port and a data dir another host holds.
"""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

from treq.client import HTTPClient
from twisted.internet import reactor
from twisted.trial.unittest import SkipTest, TestCase
from twisted.web.client import Agent, HTTPConnectionPool

from vehicle_local.standin import freeLoopbackPort

from tests.support._localrun import (
    REPO,
    LocalRun,
    Process,
    Ride,
    childrenOf,
    cleanClone,
    personEnv,
    processesUnder,
)
from tests.support.live import requirePi, sleep


def _portFree(port: int) -> bool:
    with socket.socket() as s:
        # As Twisted listens: a port left in TIME_WAIT is free.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


class _CloneCase(TestCase):
    timeout = 300

    async def clone(self) -> Path:
        requirePi()
        self.base = Path(self.mktemp()).absolute()
        self.base.mkdir(parents=True)
        self.tmp = self.base / "tmp"
        self.tmp.mkdir()
        return await cleanClone(self.base / "vehicle")

    def start(self, clone: Path, *args: str, **env: str) -> LocalRun:
        run = LocalRun(clone, list(args), personEnv(self.tmp, **env))
        self.addCleanup(run.reap)
        return run

    def assertNothingLeft(self, *paths: Path) -> None:
        left = processesUnder(*paths)
        self.assertEqual(left, [], "processes left behind")
        self.assertEqual(sorted(os.listdir(self.tmp)), [], "files left in TMPDIR")


class LocalRunTests(_CloneCase):
    """
    C{scripts/run --port P --data-dir D}: a whole conversation through the
    printed ride line, Ctrl-C, and the same sessions and key on a second
    start.
    """

    async def test_conversationStopAndStartAgain(self) -> None:
        clone = await self.clone()
        data = self.base / "data"
        port = freeLoopbackPort()
        run = self.start(clone, "--port", str(port), "--data-dir", str(data))
        banner = await run.banner()
        self.assertIn(f"http://127.0.0.1:{port}/services/vehicle/g/demo", banner)
        line = run.rideLine()
        self.assertEqual(
            line,
            f"VEHICLE_TOKEN={run.masterKey()} .venv/bin/vehicle ride "
            f"--gardend http://127.0.0.1:{port} --graph demo --new",
        )
        # The key is kept, for the owner alone.
        keyFile = data / "master-key"
        self.assertEqual(keyFile.read_text().strip(), run.masterKey())
        self.assertEqual(keyFile.stat().st_mode & 0o777, 0o600)
        # Quiet: the banner and nothing per request.
        before = run.process.text()

        ride = Ride(line, clone, personEnv(self.tmp))
        ready = await ride.frame(lambda f: f["type"] == "ready")
        sessionId = ready["value"]["session"]["sessionId"]
        accepted = await ride.send({"op": "prompt", "requestId": "p1", "text": "how many cows?"})
        self.assertEqual(accepted["type"], "command.accepted", accepted)
        events = await ride.watchUntil("run.settled", "w")
        answers = [e["data"] for e in events if e["type"] == "message.completed"]
        self.assertIn("how many cows?", json.dumps(answers))
        self.assertIn("Hello from the scripted model", json.dumps(answers))
        renamed = await ride.send({"op": "rename", "requestId": "r1", "title": "Cows"})
        self.assertEqual(renamed["type"], "session.renamed", renamed)
        capsule = await ride.send({"op": "capsule", "requestId": "c1"})
        self.assertEqual(capsule["type"], "session.capsule", capsule)
        self.assertIn("how many cows?", json.dumps(capsule["value"]))
        self.assertEqual(await ride.end(), 0, ride.process.err.decode())
        self.assertEqual(run.process.text(), before, "scripts/run printed while serving")

        self.assertEqual(await run.stop("INT"), 0, run.process.err.decode())
        self.assertNothingLeft(clone, data)
        for name in ("gardend.log", "host.log", "model.log"):
            self.assertTrue((data / "logs" / name).exists(), name)
        self.assertNotIn("Starting factory", (data / "logs" / "host.log").read_text())
        self.assertNotIn("Starting factory", (data / "logs" / "gardend.log").read_text())

        # Again on the same data dir: the same key, the same session; with
        # -v, the parts' logs are shown too.
        again = self.start(clone, "--port", str(port), "--data-dir", str(data), "-v")
        await again.banner()
        self.assertIn("[vehicle] ", again.process.text())
        self.assertIn("[gardend] ", again.process.text())
        self.assertEqual(again.masterKey(), run.masterKey())
        ride = Ride(again.rideLine().replace("--new", f"--session {sessionId}"), clone,
                    personEnv(self.tmp))
        ready = await ride.frame(lambda f: f["type"] == "ready")
        self.assertEqual(ready["value"]["session"]["title"], "Cows")
        self.assertEqual(await ride.end(), 0)
        self.assertEqual(await again.stop("TERM"), 0, again.process.err.decode())
        self.assertNothingLeft(clone, data)

    async def test_asTheReadmeSaysIt(self) -> None:
        """
        C{scripts/run} with no option at all: the default port and the
        repository's C{.data/}.
        """
        if not _portFree(8700):
            raise SkipTest("port 8700 is taken on this machine")
        clone = await self.clone()
        run = self.start(clone)
        await run.banner()
        self.assertEqual(run.url(), "http://127.0.0.1:8700/services/vehicle/g/demo")
        self.assertTrue((clone / ".data" / "master-key").exists())
        pool = HTTPConnectionPool(reactor, persistent=False)
        http = HTTPClient(Agent(reactor, pool=pool))
        response = await http.get(
            run.url() + "/sessions",
            headers={b"authorization": f"Bearer {run.masterKey()}"},
        )
        body = json.loads(await response.content())
        self.assertEqual((response.code, body["type"]), (200, "session.list"), body)
        self.assertEqual(await run.stop("INT"), 0, run.process.err.decode())
        self.assertNothingLeft(clone)
        # .data/ is the person's, not the repository's.
        status = Process().spawn(["git", "status", "--porcelain"], cwd=clone, env=dict(os.environ))
        await status.ended
        self.assertNotIn(".data", status.text())


class FailureTests(_CloneCase):
    """
    What a person sees when something is wrong.
    """

    async def test_aPartDies(self) -> None:
        """
        The model killed under a running local run: the rest stop, the exit
        status is not 0, and the model's last lines are shown.
        """
        clone = await self.clone()
        data = self.base / "data"
        run = self.start(clone, "--port", str(freeLoopbackPort()), "--data-dir", str(data))
        await run.banner()
        models = [pid for pid, cmd in childrenOf(run.process.pid) if "vehicle_local.model" in cmd]
        self.assertEqual(len(models), 1, childrenOf(run.process.pid))
        os.kill(models[0], 9)
        status = await run.process.ended
        self.assertEqual(status, 1)
        err = run.process.err.decode()
        self.assertIn("the scripted model stopped on its own (killed by SIGKILL)", err)
        self.assertIn("/v1", err)  # its last line: the URL it printed
        self.assertNotIn("Traceback", err)
        self.assertNothingLeft(clone, data)

    async def test_busyPort(self) -> None:
        clone = await self.clone()
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            s.listen(1)
            port = s.getsockname()[1]
            run = self.start(clone, "--port", str(port), "--data-dir", str(self.base / "d"))
            status = await run.process.ended
        err = run.process.err.decode()
        self.assertEqual(status, 2, err)
        lines = [l for l in err.splitlines() if not l.startswith("setup:")]
        self.assertEqual(lines, [f"vehicle: port {port} is in use; choose another with --port"])
        self.assertNothingLeft(clone)

    async def test_secondHostOnALockedDataDir(self) -> None:
        """
        Two hosts on one data dir: the second refuses in one line naming
        the first's pid; the first serves on.
        """
        requirePi()
        self.tmp = Path(self.mktemp()).absolute()
        self.tmp.mkdir(parents=True)
        data = Path(self.mktemp()).absolute()
        twistd = str(REPO / ".venv" / "bin" / "twistd")
        env = personEnv(self.tmp, MNEMOSYNE_INTERNAL_SERVICE_SECRET="s" * 32)

        def host() -> Process:
            p = Process().spawn(
                [twistd, "-n", "--pidfile=", "vehicle", "--listen",
                 f"tcp:{freeLoopbackPort()}:interface=127.0.0.1", "--data-dir", str(data)],
                cwd=self.tmp, env=env)
            self.addCleanup(lambda: p.signal("KILL"))
            return p

        first = host()
        await first.waitFor(lambda: "serving 0 sessions" in first.text() or None)
        second = host()
        status = await second.ended
        self.assertNotEqual(status, 0)
        said = (second.text() + second.err.decode()).strip().splitlines()
        self.assertEqual(len(said), 1, said)
        self.assertIn(f"in use by pid {first.pid}", said[0])
        self.assertIsNone(first.status)
        first.signal("TERM")
        # twistd ends by the signal that stopped it, once it has shut down.
        self.assertIn(await first.ended, (0, -15))
        # Once the first is gone, the data dir is free again.
        third = host()
        await third.waitFor(lambda: "serving 0 sessions" in third.text() or None)
        third.signal("TERM")
        self.assertIn(await third.ended, (0, -15))
        await sleep(0)
