"""
The live half of L{tests.unit.test_box}: L{RealBoxTests}
(real processes, sockets or the real reactor; see that module for the rest).
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

from twisted.internet import reactor as globalReactor
from twisted.internet.defer import Deferred
from twisted.internet.error import ProcessDone
from twisted.internet.protocol import Factory, ProcessProtocol, Protocol
from twisted.python.failure import Failure
from twisted.trial.unittest import TestCase

from vehicle.box import BoxSpec, ProbeResult, bwrapArgv, canonicalSpec, probeBwrap

from tests.support.box import BWRAP, INSIDE


def hasBwrap() -> bool:
    return os.access(BWRAP, os.X_OK)


class _Collect(ProcessProtocol):
    def __init__(self) -> None:
        self.out = bytearray()
        self.err = bytearray()
        self.ended: Deferred[None] = Deferred()
        self.reason: Failure | None = None

    def outReceived(self, data: bytes) -> None:
        self.out += data

    def errReceived(self, data: bytes) -> None:
        self.err += data

    def processEnded(self, reason: Failure) -> None:
        self.reason = reason
        self.ended.callback(None)


class _Say(Protocol):
    def __init__(self, word: bytes) -> None:
        self.word = word

    def connectionMade(self) -> None:
        assert self.transport is not None
        self.transport.write(self.word)
        self.transport.loseConnection()


class RealBoxTests(TestCase):
    """
    A real command in a real box built by L{bwrapArgv}, with its effects
    checked from the host.
    """

    if not hasBwrap():
        skip = f"no bwrap at {BWRAP}"

    def setUp(self) -> None:
        base = "/var/tmp" if os.path.isdir("/var/tmp") else None
        self.base = Path(tempfile.mkdtemp(prefix="vbox-", dir=base))
        self.addCleanup(shutil.rmtree, self.base)

    async def test_probe(self) -> None:
        """
        The real bwrap here passes the probe.
        """
        result = await probeBwrap(globalReactor, BWRAP)
        self.assertEqual(result, ProbeResult(True, "ok"))

    async def test_realRun(self) -> None:
        """
        Inside the box: the workspace and pi folder are writable and the
        writes land on the host; the data dir, the home and C{/etc} are not
        writable and stay unchanged on the host; the data dir looks empty but
        for the re-exposed folders; a read-only path under the hidden home is
        readable, not writable; no capabilities, no new privileges, no new
        user namespaces; a private pid namespace where the host is not seen
        and bwrap's init carries no environment; only the given environment;
        no route to a host loopback listener, while the bound Unix socket
        still connects.
        """
        data = self.base / "data"
        workspace = data / "workspaces" / "s1"
        other = data / "workspaces" / "s2"
        piDir = data / "pi" / "s1"
        run = data / "run"
        home = self.base / "home"
        runtime = home / "runtime"
        for folder in [workspace, other, piDir, run, runtime]:
            folder.mkdir(parents=True)
        (data / "secret.txt").write_text("secret")
        (other / "theirs.txt").write_text("theirs")
        (runtime / "tool.txt").write_text("tool")
        mark = f"vehicle-box-{os.getpid()}-{id(self)}"

        tcp = globalReactor.listenTCP(
            0, Factory.forProtocol(lambda: _Say(b"leak")), interface="127.0.0.1"
        )
        self.addCleanup(tcp.stopListening)
        sock = run / "bridge.sock"
        unix = globalReactor.listenUNIX(
            str(sock), Factory.forProtocol(lambda: _Say(b"pong"))
        )
        self.addCleanup(unix.stopListening)

        env = {
            "PATH": "/usr/bin:/bin",
            "PIDIR": str(piDir),
            "DATA": str(data),
            "FAKEHOME": str(home),
            "MARK": mark,
            "HOSTPID": str(os.getpid()),
            "PORT": str(tcp.getHost().port),
            "SOCK": str(sock),
            "PY": os.path.realpath(sys.executable),
        }
        spec = canonicalSpec(
            BoxSpec(
                bwrap=BWRAP,
                workspace=workspace,
                piDir=piDir,
                readOnly=[runtime],
                hidden=[data, home],
                socketDir=run,
                env=env,
                command=["sh", "-c", INSIDE],
            )
        )
        argv = bwrapArgv(spec)
        protocol = _Collect()
        globalReactor.spawnProcess(protocol, argv[0], argv, env={})
        await protocol.ended
        reason = protocol.reason
        assert reason is not None
        self.assertTrue(reason.check(ProcessDone), (reason, protocol.err))
        out: dict[str, str] = {}
        for line in protocol.out.decode().splitlines():
            key, _, value = line.partition("=")
            out[key] = value.strip()

        self.assertEqual(out["PWD"], str(spec.workspace))
        # The body's own folders: written inside, seen on the host.
        self.assertEqual(out["WS_WRITE"], "ok")
        self.assertEqual((workspace / "ws.txt").read_text(), "inside\n")
        self.assertEqual(out["PI_WRITE"], "ok")
        self.assertEqual((piDir / "pi.txt").read_text(), "pi\n")
        # A private /tmp: writable inside, nothing on the host.
        self.assertEqual(out["TMP_WRITE"], "ok")
        self.assertFalse(os.path.lexists(f"/tmp/{mark}"))
        # The rest is read-only, and the host is unchanged.
        self.assertEqual(out["DATA_WRITE"], "fail")
        self.assertFalse(os.path.lexists(data / "intruder.txt"))
        self.assertEqual(out["ETC_WRITE"], "fail")
        self.assertFalse(os.path.lexists(f"/etc/{mark}"))
        # The data dir and the home are out of sight.
        self.assertEqual(sorted(out["DATA_LIST"].split()), ["pi", "run", "workspaces"])
        self.assertEqual(out["WORKSPACES_LIST"].split(), ["s1"])
        self.assertEqual(out["SECRET"], "hidden")
        self.assertEqual(out["HOME_LIST"].split(), ["runtime"])
        self.assertEqual(out["RUNTIME"], "tool")
        self.assertEqual(out["RUNTIME_WRITE"], "fail")
        self.assertFalse(os.path.lexists(runtime / "new"))
        # No privileges.
        self.assertEqual(out["CAPEFF"], "0000000000000000")
        self.assertEqual(out["NONEWPRIVS"], "1")
        self.assertEqual(out["USERNS"], "fail")
        # A pid namespace of its own.
        self.assertLess(int(out["PIDS"]), 10)
        if os.getpid() > 10:
            self.assertEqual(out["HOSTPID"], "invisible")
        self.assertEqual(out["INIT_ENV"], "")
        self.assertTrue(
            set(out["ENV_NAMES"].split()) <= set(env) | {"PWD", "SHLVL", "OLDPWD", "_"},
            out["ENV_NAMES"],
        )
        # No network but the bound socket.
        self.assertEqual(out["TCP"], "refused")
        self.assertEqual(out["UNIX"], "pong")
