"""
Tests for L{vehicle.box}: the bwrap argv and the seatbelt profile (golden and
property tests), the probe and the isolation decision (fake spawner, and one
real probe), the tamper checks, the snapshot copy, and one real run of a
command in a box built by L{bwrapArgv} whose effects are checked on the host.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import socket
import stat
import tempfile
from pathlib import Path
from typing import Any, Mapping, Sequence

from hypothesis import given, settings
from hypothesis import strategies as st
from twisted.internet.defer import Deferred
from twisted.internet.error import ProcessDone, ProcessTerminated
from twisted.internet.protocol import ProcessProtocol
from twisted.internet.task import Clock
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase

from vehicle.box import (
    PROBE_ARGS,
    PROBE_ENV,
    BoxSpec,
    BoxSpecError,
    FolderIdentity,
    IsolationDecision,
    ProbeResult,
    SeatbeltSpec,
    bwrapArgv,
    canonicalPath,
    canonicalSpec,
    checkIsolation,
    copyTree,
    decideIsolation,
    probeBwrap,
    seatbeltArgv,
    seatbeltEnvironment,
    seatbeltProfile,
)
from vehicle.box import _folders
from vehicle.store import _atomic

from tests.support.box import BWRAP


def goldenSpec() -> BoxSpec:
    """
    A box as the host would make it for one session, with a pi runtime under
    a hidden home and a nested hidden gardend profile.
    """
    return BoxSpec(
        bwrap=BWRAP,
        workspace="/var/lib/vehicle/workspaces/s1",
        piDir="/var/lib/vehicle/pi/s1",
        readOnly=["/opt/pi"],
        hidden=["/root", "/var/lib/vehicle", "/root/.config/gardend"],
        socketDir="/var/lib/vehicle/run/s1",
        env={"PATH": "/usr/bin:/bin", "HOME": "/var/lib/vehicle/pi/s1"},
        command=["node", "cli.js", "--mode", "rpc"],
    )


GOLDEN_ARGV = [
    "/usr/bin/bwrap",
    "--new-session",
    "--die-with-parent",
    "--unshare-user",
    "--unshare-pid",
    "--unshare-ipc",
    "--unshare-uts",
    "--unshare-net",
    "--unshare-cgroup-try",
    "--disable-userns",
    "--cap-drop", "ALL",
    "--clearenv",
    "--setenv", "PATH", "/usr/bin:/bin",
    "--setenv", "HOME", "/var/lib/vehicle/pi/s1",
    "--ro-bind", "/", "/",
    "--dev", "/dev",
    "--proc", "/proc",
    "--tmpfs", "/root",
    "--size", "268435456", "--tmpfs", "/tmp",
    "--ro-bind", "/opt/pi", "/opt/pi",
    "--tmpfs", "/var/lib/vehicle",
    "--tmpfs", "/root/.config/gardend",
    "--bind", "/var/lib/vehicle/workspaces/s1", "/var/lib/vehicle/workspaces/s1",
    "--bind", "/var/lib/vehicle/pi/s1", "/var/lib/vehicle/pi/s1",
    "--ro-bind", "/var/lib/vehicle/run/s1", "/var/lib/vehicle/run/s1",
    "--remount-ro", "/root",
    "--remount-ro", "/var/lib/vehicle",
    "--remount-ro", "/root/.config/gardend",
    "--chdir", "/var/lib/vehicle/workspaces/s1",
    "--",
    "node", "cli.js", "--mode", "rpc",
]  # fmt: skip


#: Options taking (number of arguments, mount target index or None).
_OPTIONS: Mapping[str, tuple[int, int | None]] = {
    "--setenv": (2, None),
    "--cap-drop": (1, None),
    "--size": (1, None),
    "--chdir": (1, None),
    "--ro-bind": (2, 1),
    "--bind": (2, 1),
    "--tmpfs": (1, 0),
    "--dev": (1, 0),
    "--proc": (1, 0),
    "--remount-ro": (1, 0),
}


def mountOps(argv: Sequence[str]) -> list[tuple[int, str, Path]]:
    """
    Parse the mount operations of a bwrap argv as C{(position, option,
    target)}, in order, stopping at C{--}.
    """
    ops = []
    index = 1
    while argv[index] != "--":
        option = argv[index]
        count, target = _OPTIONS.get(option, (0, None))
        if target is not None:
            ops.append((index, option, Path(argv[index + 1 + target])))
        index += 1 + count
    return ops


def beneath(path: Path, ancestor: Path) -> bool:
    """
    Whether C{path} is strictly beneath C{ancestor}.
    """
    return ancestor in path.parents


class BwrapArgvTests(SynchronousTestCase):
    """
    L{bwrapArgv} builds the exact argv, in an order bwrap can mount.
    """

    def test_golden(self) -> None:
        """
        A fixed spec gives exactly the pinned argv: namespace flags, a clean
        environment, the read-only root, masks parents-first, the binds that
        re-expose the body's folders, the masks made read-only, the command.
        """
        self.assertEqual(bwrapArgv(goldenSpec()), GOLDEN_ARGV)

    def test_disableUsernsWithUnshareUser(self) -> None:
        """
        C{--disable-userns} is only accepted by bwrap together with
        C{--unshare-user}, which is given explicitly (bwrap skips it for
        uid 0), and capabilities are dropped.
        """
        argv = bwrapArgv(goldenSpec())
        self.assertIn("--unshare-user", argv)
        self.assertLess(argv.index("--unshare-user"), argv.index("--disable-userns"))
        self.assertEqual(argv[argv.index("--cap-drop") + 1], "ALL")

    def test_environmentPassesThrough(self) -> None:
        """
        The environment is cleared, then each variable is set with
        C{--setenv} in the given order, before any mount.
        """
        spec = BoxSpec(
            workspace="/d/ws",
            piDir="/d/pi",
            env={
                "PATH": "/usr/bin",
                "PI_OFFLINE": "1",
                "SOPHIA_MODEL_SOCKET": "/r/m.sock",
            },
            command=["true"],
        )
        argv = bwrapArgv(spec)
        clear = argv.index("--clearenv")
        self.assertEqual(
            argv[clear + 1 : clear + 10],
            ["--setenv", "PATH", "/usr/bin",
             "--setenv", "PI_OFFLINE", "1",
             "--setenv", "SOPHIA_MODEL_SOCKET", "/r/m.sock"],
        )  # fmt: skip
        self.assertEqual(argv[clear + 10], "--ro-bind")

    def test_secretLookingEnvironmentRefused(self) -> None:
        """
        A variable named like a credential never reaches the box's
        environment: the spec is refused.
        """
        names = ["OPENAI_API_KEY", "MODEL_KEY", "GARDEN_TOKEN", "SECRET", "DB_PASSWORD"]
        for name in [*names, "AUTH"]:
            spec = BoxSpec(
                workspace="/d/ws", piDir="/d/pi", env={name: "x"}, command=["true"]
            )
            self.assertRaises(BoxSpecError, bwrapArgv, spec)

    def test_badEnvironmentRefused(self) -> None:
        """
        Names that are not variable names and values holding NUL are refused.
        """
        for env in [{"A=B": "x"}, {"": "x"}, {"A": "x\0y"}]:
            spec = BoxSpec(workspace="/d/ws", piDir="/d/pi", env=env, command=["true"])
            self.assertRaises(BoxSpecError, bwrapArgv, spec)

    def test_refusesBadPaths(self) -> None:
        """
        Relative or non-normal paths, hiding C{/}, a workspace holding a
        hidden folder, nested workspace and pi folder, a read-only path that
        would re-expose a hidden folder, and an empty command are refused.
        """
        good = dict(workspace="/d/ws", piDir="/d/pi", command=["true"])
        for change in [
            {"workspace": "d/ws"},
            {"workspace": "/d/../ws"},
            {"piDir": "//d/pi"},
            {"hidden": ["/"]},
            {"workspace": "/"},
            {"hidden": ["/d/ws/inner"]},
            {"hidden": ["/d/ws"]},
            {"piDir": "/d/ws/pi"},
            {"readOnly": ["/d"], "hidden": ["/d"]},
            {"socketDir": "/d", "hidden": ["/d/x"]},
            {"command": []},
            {"tmpSizeBytes": 0},
        ]:
            spec = BoxSpec(**{**good, **change})  # type: ignore[arg-type]
            self.assertRaises(BoxSpecError, bwrapArgv, spec)

    @settings(deadline=None, max_examples=300)
    @given(st.data())
    def test_mountOrder(self, data: st.DataObject) -> None:
        """
        For any spec: every mount beneath a masked folder comes after that
        folder's tmpfs; each re-exposed path's own bind is the last mount at
        or above it; each hidden folder's tmpfs is the last mount at it and
        is remounted read-only after everything beneath it.
        """
        parts = st.sampled_from(["a", "b", "tmp"])
        dirs = st.lists(parts, min_size=1, max_size=4).map(lambda p: "/" + "/".join(p))
        hidden = data.draw(st.lists(dirs, max_size=4, unique=True))
        spec = BoxSpec(
            workspace=data.draw(dirs) + "/ws",
            piDir=data.draw(dirs) + "/pi",
            readOnly=data.draw(
                st.lists(dirs.map(lambda d: d + "/ro"), max_size=2, unique=True)
            ),
            hidden=hidden,
            socketDir=data.draw(st.none() | dirs.map(lambda d: d + "/run")),
            command=["true"],
        )
        argv = bwrapArgv(spec)
        ops = mountOps(argv)
        masks = [(i, target) for i, option, target in ops if option == "--tmpfs"]
        for i, option, target in ops:
            if option == "--remount-ro":
                continue
            for j, mask in masks:
                if beneath(target, mask):
                    self.assertLess(j, i, f"{option} {target} before tmpfs {mask}")
        exposed = [spec.workspace, spec.piDir, *spec.readOnly]
        if spec.socketDir is not None:
            exposed.append(spec.socketDir)
        for path in exposed:
            covering = [
                (i, option, target)
                for i, option, target in ops
                if option != "--remount-ro"
                and (target == path or beneath(path, target))
            ]
            self.assertEqual(covering[-1][2], path)
            self.assertIn(covering[-1][1], {"--bind", "--ro-bind"})
        for hide in spec.hidden:
            at = [(i, option) for i, option, target in ops if target == hide]
            if hide == Path("/tmp"):
                # The private /tmp is the mask, and stays writable.
                self.assertEqual([option for _, option in at], ["--tmpfs"])
                continue
            self.assertEqual([option for _, option in at], ["--tmpfs", "--remount-ro"])
            remount = at[-1][0]
            for i, option, target in ops:
                if option != "--remount-ro" and beneath(target, hide):
                    self.assertLess(i, remount)
        self.assertEqual(argv[argv.index("--chdir") + 1], str(spec.workspace))


class CanonicalTests(SynchronousTestCase):
    """
    L{canonicalPath} and L{canonicalSpec} earn the trust L{bwrapArgv} puts
    in its paths.
    """

    def setUp(self) -> None:
        self.root = Path(self.mktemp()).absolute()
        (self.root / "real" / "ws").mkdir(parents=True)
        (self.root / "real" / "pi").mkdir()

    def test_symlinkRefused(self) -> None:
        """
        A path that is itself a symlink is refused, even to a directory.
        """
        link = self.root / "link"
        link.symlink_to(self.root / "real")
        self.assertRaises(BoxSpecError, canonicalPath, link)

    def test_ancestorSymlinkResolved(self) -> None:
        """
        A symlink among the ancestors is resolved to the real path.
        """
        (self.root / "alias").symlink_to(self.root / "real")
        self.assertEqual(
            canonicalPath(self.root / "alias" / "ws"),
            Path(os.path.realpath(self.root / "real" / "ws")),
        )

    def test_missingAndNotDirectory(self) -> None:
        """
        A missing path, a file where a directory is needed and a relative
        path are refused; a file is accepted when any file will do.
        """
        (self.root / "file").write_text("x")
        self.assertRaises(BoxSpecError, canonicalPath, self.root / "missing")
        self.assertRaises(BoxSpecError, canonicalPath, self.root / "file")
        self.assertRaises(BoxSpecError, canonicalPath, "relative")
        self.assertEqual(
            canonicalPath(self.root / "file", directory=False).name, "file"
        )

    def test_canonicalSpec(self) -> None:
        """
        L{canonicalSpec} resolves the paths, keeps the rest, and drops a
        hidden folder that does not exist (there is nothing to mask).
        """
        (self.root / "alias").symlink_to(self.root / "real")
        spec = canonicalSpec(
            BoxSpec(
                workspace=self.root / "alias" / "ws",
                piDir=self.root / "real" / "pi",
                hidden=[self.root / "real", self.root / "nothing"],
                env={"PATH": "/bin"},
                command=["true"],
            )
        )
        real = Path(os.path.realpath(self.root / "real"))
        self.assertEqual(spec.workspace, real / "ws")
        self.assertEqual(spec.hidden, (real,))
        self.assertEqual(spec.env, (("PATH", "/bin"),))

    def test_canonicalSpecRefusesSymlinkedWorkspace(self) -> None:
        """
        A workspace that was swapped for a symlink is refused rather than
        bound wherever it points.
        """
        (self.root / "real" / "ws").rmdir()
        (self.root / "real" / "ws").symlink_to("/etc")
        spec = BoxSpec(
            workspace=self.root / "real" / "ws",
            piDir=self.root / "real" / "pi",
            command=["true"],
        )
        self.assertRaises(BoxSpecError, canonicalSpec, spec)


GOLDEN_PROFILE = """\
(version 1)
(deny default)

; processes: run and fork; see and signal only this sandbox's own
(allow process-exec)
(allow process-fork)
(allow signal (target same-sandbox))
(allow process-info* (target same-sandbox))

; what node and a shell ask the kernel about the machine
(allow sysctl-read
  (sysctl-name "hw.activecpu")
  (sysctl-name "hw.availcpu")
  (sysctl-name "hw.byteorder")
  (sysctl-name "hw.cachelinesize")
  (sysctl-name "hw.cachelinesize_compat")
  (sysctl-name "hw.cpufamily")
  (sysctl-name "hw.cpusubtype")
  (sysctl-name "hw.cputype")
  (sysctl-name "hw.l1dcachesize")
  (sysctl-name "hw.l1icachesize")
  (sysctl-name "hw.l2cachesize")
  (sysctl-name "hw.l3cachesize")
  (sysctl-name "hw.logicalcpu")
  (sysctl-name "hw.logicalcpu_max")
  (sysctl-name "hw.machine")
  (sysctl-name "hw.memsize")
  (sysctl-name "hw.model")
  (sysctl-name "hw.ncpu")
  (sysctl-name "hw.nperflevels")
  (sysctl-name "hw.pagesize")
  (sysctl-name "hw.pagesize_compat")
  (sysctl-name "hw.physicalcpu")
  (sysctl-name "hw.physicalcpu_max")
  (sysctl-name "kern.argmax")
  (sysctl-name "kern.boottime")
  (sysctl-name "kern.hostname")
  (sysctl-name "kern.maxfilesperproc")
  (sysctl-name "kern.osproductversion")
  (sysctl-name "kern.osrelease")
  (sysctl-name "kern.ostype")
  (sysctl-name "kern.osversion")
  (sysctl-name "kern.secure_kernel")
  (sysctl-name "kern.usrstack64")
  (sysctl-name "kern.version")
  (sysctl-name "sysctl.proc_cputype")
  (sysctl-name "vm.loadavg")
  (sysctl-name-prefix "hw.optional.")
  (sysctl-name-prefix "hw.perflevel")
  (sysctl-name-prefix "kern.proc.pgrp.")
  (sysctl-name-prefix "kern.proc.pid.")
  (sysctl-name-prefix "machdep.cpu."))
(allow mach-host*)
(allow mach-lookup
  (global-name "com.apple.system.notification_center")
  (global-name "com.apple.system.opendirectoryd.libinfo"))

; reading: metadata anywhere, contents anywhere but the hidden folders
(allow file-read-metadata)
(allow file-read*
  (require-all
    (require-not (literal (param "HIDDEN_0")))
    (require-not (subpath (param "HIDDEN_0")))
    (require-not (literal (param "HIDDEN_1")))
    (require-not (subpath (param "HIDDEN_1")))))
(allow file-read*
  (subpath (param "READONLY_0")))

; writing: only the body's own folders, and a few devices
(allow file-read* file-write*
  (subpath (param "WORKSPACE"))
  (subpath (param "PIDIR"))
  (subpath (param "TMPDIR")))
(allow file-read-data file-write-data file-ioctl
  (literal "/dev/null")
  (literal "/dev/zero")
  (literal "/dev/dtracehelper")
  (literal "/dev/tty"))

; the host's bridge: connect to its socket, nothing else on the network
(allow file-read* (subpath (param "SOCKET_DIR")))
(allow system-socket (socket-domain AF_UNIX))
(allow network-outbound (remote unix-socket (subpath (param "SOCKET_DIR"))))
"""


def seatbeltSpec(**changes: Any) -> SeatbeltSpec:
    """
    A macOS box for one session, with distinctive paths.
    """
    values: dict[str, Any] = dict(
        workspace="/private/var/vehicle/workspaces/s1",
        piDir="/private/var/vehicle/pi/s1",
        tmpDir="/private/var/vehicle/tmp/s1",
        hidden=["/Users/alice", "/private/var/vehicle"],
        readOnly=["/opt/pi"],
        socketDir="/private/var/vehicle/run/s1",
        env={"PATH": "/usr/bin:/bin", "HOME": "/private/var/vehicle/pi/s1"},
        command=["node", "cli.js"],
    )
    values.update(changes)
    return SeatbeltSpec(**values)


def sbplStrings(profile: str) -> list[tuple[str, str]]:
    """
    Every string literal in C{profile}, with the form that holds it.
    """
    return re.findall(r'\(([a-z-]+) "([^"]*)"\)', profile)


class SeatbeltTests(SynchronousTestCase):
    """
    L{seatbeltProfile} and L{seatbeltArgv} (text only: sandbox-exec cannot
    run here).
    """

    def test_goldenProfile(self) -> None:
        """
        The profile for two hidden folders, one read-only path and a socket
        is exactly the pinned text.
        """
        self.assertEqual(
            seatbeltProfile(hiddenCount=2, readOnlyCount=1, socket=True),
            GOLDEN_PROFILE,
        )

    def test_minimalProfile(self) -> None:
        """
        With nothing hidden, nothing read-only and no socket, contents may be
        read anywhere and there is no network rule at all.
        """
        profile = seatbeltProfile(hiddenCount=0, readOnlyCount=0, socket=False)
        self.assertIn("\n(allow file-read*)\n", profile)
        self.assertNotIn("network", profile)
        self.assertNotIn("READONLY", profile)
        self.assertNotIn("SOCKET_DIR", profile)

    def test_noPathLiterals(self) -> None:
        """
        No path of the spec appears in the profile; every string literal is
        a parameter name, a sysctl, a Mach service or one of the fixed
        devices, and the profile is the same whatever the paths are.
        """
        spec = seatbeltSpec()
        argv = seatbeltArgv(spec)
        profile = argv[2]
        for path in ["/private/var/vehicle", "/Users/alice", "/opt/pi", "workspaces"]:
            self.assertNotIn(path, profile)
        devices = {"/dev/null", "/dev/zero", "/dev/dtracehelper", "/dev/tty"}
        for form, text in sbplStrings(profile):
            if form == "param":
                self.assertRegex(text, r"^[A-Z_0-9]+$")
            elif form in {"sysctl-name", "sysctl-name-prefix", "global-name"}:
                self.assertNotIn("/", text)
            else:
                self.assertEqual(form, "literal")
                self.assertIn(text, devices)
        other = seatbeltSpec(
            workspace="/w",
            piDir="/p",
            tmpDir="/t",
            hidden=["/h1", "/h2"],
            readOnly=["/r"],
            socketDir="/s",
        )
        self.assertEqual(seatbeltArgv(other)[2], profile)

    def test_balanced(self) -> None:
        """
        Every profile shape has balanced parentheses outside strings.
        """
        for hidden in range(3):
            for readOnly in range(2):
                for sock in (False, True):
                    profile = seatbeltProfile(
                        hiddenCount=hidden, readOnlyCount=readOnly, socket=sock
                    )
                    depth = 0
                    for char in re.sub(r'"[^"]*"', "", profile):
                        depth += {"(": 1, ")": -1}.get(char, 0)
                        self.assertGreaterEqual(depth, 0)
                    self.assertEqual(depth, 0)

    def test_argv(self) -> None:
        """
        The argv passes the profile with C{-p}, each path as C{-D NAME=path},
        then C{--} and the command.
        """
        argv = seatbeltArgv(seatbeltSpec())
        self.assertEqual(argv[:2], ["/usr/bin/sandbox-exec", "-p"])
        self.assertEqual(
            argv[3:],
            [
                "-D", "WORKSPACE=/private/var/vehicle/workspaces/s1",
                "-D", "PIDIR=/private/var/vehicle/pi/s1",
                "-D", "TMPDIR=/private/var/vehicle/tmp/s1",
                "-D", "HIDDEN_0=/Users/alice",
                "-D", "HIDDEN_1=/private/var/vehicle",
                "-D", "READONLY_0=/opt/pi",
                "-D", "SOCKET_DIR=/private/var/vehicle/run/s1",
                "--", "node", "cli.js",
            ],
        )  # fmt: skip

    def test_environment(self) -> None:
        """
        The environment to spawn with is the spec's, with C{TMPDIR} the
        session's own temporary folder.
        """
        self.assertEqual(
            seatbeltEnvironment(seatbeltSpec()),
            {
                "PATH": "/usr/bin:/bin",
                "HOME": "/private/var/vehicle/pi/s1",
                "TMPDIR": "/private/var/vehicle/tmp/s1",
            },
        )

    def test_refusals(self) -> None:
        """
        Non-canonical paths, secret-looking variables and an empty command
        are refused.
        """
        for change in [
            {"workspace": "relative"},
            {"tmpDir": "/a/../b"},
            {"hidden": ["/x/../y"]},
            {"env": {"OPENAI_API_KEY": "sk"}},
            {"command": []},
        ]:
            self.assertRaises(BoxSpecError, seatbeltArgv, seatbeltSpec(**change))


class FakeProcess:
    """
    The process transport a fake spawner hands back.
    """

    def __init__(self) -> None:
        self.signals: list[str] = []

    def signalProcess(self, signal: str) -> None:
        self.signals.append(signal)


class FakeSpawner:
    """
    Records what the probe spawns; raises C{error} instead if given.
    """

    def __init__(self, error: OSError | None = None) -> None:
        self.error = error
        self.calls: list[tuple[ProcessProtocol, str, list[str], dict[str, str]]] = []
        self.process = FakeProcess()

    def __call__(
        self,
        protocol: ProcessProtocol,
        executable: str,
        args: Sequence[str],
        env: Mapping[str, str],
    ) -> FakeProcess:
        if self.error is not None:
            raise self.error
        self.calls.append((protocol, executable, list(args), dict(env)))
        protocol.makeConnection(self.process)  # type: ignore[arg-type]
        return self.process

    @property
    def protocol(self) -> ProcessProtocol:
        return self.calls[-1][0]


class ProbeTests(SynchronousTestCase):
    """
    L{probeBwrap} with a fake spawner, and L{checkIsolation}.
    """

    def setUp(self) -> None:
        self.clock = Clock()

    def test_ok(self) -> None:
        """
        The probe runs bwrap with the box's namespace flags and C{true}, with
        a minimal explicit environment, and passes when it exits 0.
        """
        spawner = FakeSpawner()
        d = Deferred.fromCoroutine(probeBwrap(self.clock, BWRAP, spawner))
        self.assertNoResult(d)
        [(_, executable, args, env)] = spawner.calls
        self.assertEqual(executable, BWRAP)
        self.assertEqual(args, [BWRAP, *PROBE_ARGS])
        self.assertEqual(env, dict(PROBE_ENV))
        for flag in [
            "--unshare-user",
            "--unshare-net",
            "--unshare-pid",
            "--die-with-parent",
            "--disable-userns",
        ]:
            self.assertIn(flag, args)
        self.assertEqual(args[-1], "true")
        spawner.protocol.processEnded(Failure(ProcessDone(0)))
        self.assertEqual(self.successResultOf(d), ProbeResult(True, "ok"))
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_missing(self) -> None:
        """
        A bwrap that is not there gives a sentence naming the path.
        """
        spawner = FakeSpawner(FileNotFoundError(errno.ENOENT, "No such file"))
        d = Deferred.fromCoroutine(probeBwrap(self.clock, "/opt/none/bwrap", spawner))
        self.assertEqual(
            self.successResultOf(d),
            ProbeResult(False, "bwrap not found at /opt/none/bwrap."),
        )

    def test_notExecutable(self) -> None:
        """
        A bwrap that cannot be executed gives the system's reason.
        """
        spawner = FakeSpawner(PermissionError(errno.EACCES, "Permission denied"))
        d = Deferred.fromCoroutine(probeBwrap(self.clock, "/x/bwrap", spawner))
        self.assertEqual(
            self.successResultOf(d),
            ProbeResult(False, "bwrap at /x/bwrap cannot be run: Permission denied."),
        )

    def test_userNamespacesRefused(self) -> None:
        """
        When the kernel refuses user namespaces, bwrap's first line of stderr
        is the reason.
        """
        spawner = FakeSpawner()
        d = Deferred.fromCoroutine(probeBwrap(self.clock, BWRAP, spawner))
        spawner.protocol.childDataReceived(2, b"bwrap: setting up uid map: ")
        spawner.protocol.childDataReceived(2, b"Permission denied\nmore\n")
        spawner.protocol.processEnded(Failure(ProcessTerminated(exitCode=1)))
        self.assertEqual(
            self.successResultOf(d),
            ProbeResult(False, "bwrap: setting up uid map: Permission denied"),
        )

    def test_silentFailure(self) -> None:
        """
        A failure with nothing on stderr is described by its status.
        """
        spawner = FakeSpawner()
        d = Deferred.fromCoroutine(probeBwrap(self.clock, BWRAP, spawner))
        spawner.protocol.processEnded(Failure(ProcessTerminated(exitCode=3)))
        self.assertEqual(
            self.successResultOf(d), ProbeResult(False, "bwrap exited with status 3.")
        )

    def test_timeout(self) -> None:
        """
        A probe that hangs is killed after the timeout and counts as failed.
        """
        spawner = FakeSpawner()
        d = Deferred.fromCoroutine(probeBwrap(self.clock, BWRAP, spawner, timeout=5))
        self.clock.advance(4.9)
        self.assertEqual(spawner.process.signals, [])
        self.clock.advance(0.2)
        self.assertEqual(spawner.process.signals, ["KILL"])
        self.assertNoResult(d)
        spawner.protocol.processEnded(Failure(ProcessTerminated(signal=9)))
        self.assertEqual(
            self.successResultOf(d),
            ProbeResult(False, "bwrap did not finish its probe within 5 seconds."),
        )

    def test_checkIsolation(self) -> None:
        """
        bwrap is allowed on Linux (pending the probe), seatbelt on macOS,
        microvm never, none only when the operator allows it; every refusal
        has a sentence.
        """
        cases = [
            ("bwrap", False, "linux", True, True),
            ("bwrap", False, "darwin", False, False),
            ("seatbelt", False, "darwin", True, False),
            ("seatbelt", False, "linux", False, False),
            ("microvm", True, "linux", False, False),
            ("none", False, "linux", False, False),
            ("none", True, "linux", True, False),
            ("chroot", True, "linux", False, False),
        ]
        for isolation, unisolated, platform, ok, probe in cases:
            decision = checkIsolation(
                isolation=isolation, agentUnisolated=unisolated, platform=platform
            )
            self.assertEqual(
                (decision.ok, decision.needsProbe, decision.tier),
                (ok, probe, isolation),
                (isolation, unisolated, platform),
            )
            if ok:
                self.assertIsNone(decision.reason)
            else:
                self.assertTrue(decision.reason and decision.reason.endswith("."))
        self.assertEqual(
            checkIsolation(
                isolation="microvm", agentUnisolated=False, platform="linux"
            ).reason,
            "microvm isolation is not implemented.",
        )

    def test_decideIsolationProbes(self) -> None:
        """
        For bwrap on Linux the decision waits for the probe, and a failed
        probe refuses with its reason.
        """
        spawner = FakeSpawner()
        d = Deferred.fromCoroutine(
            decideIsolation(
                self.clock,
                isolation="bwrap",
                agentUnisolated=False,
                platform="linux",
                spawner=spawner,
            )
        )
        self.assertNoResult(d)
        spawner.protocol.childDataReceived(
            2, b"bwrap: setting up uid map: Permission denied\n"
        )
        spawner.protocol.processEnded(Failure(ProcessTerminated(exitCode=1)))
        self.assertEqual(
            self.successResultOf(d),
            IsolationDecision(
                ok=False,
                tier="bwrap",
                reason="bwrap cannot make a box on this host:"
                " bwrap: setting up uid map: Permission denied",
                probed=True,
            ),
        )

    def test_decideIsolationWithoutProbe(self) -> None:
        """
        Tiers that need no probe are decided at once, without spawning.
        """
        spawner = FakeSpawner()
        d = Deferred.fromCoroutine(
            decideIsolation(
                self.clock,
                isolation="none",
                agentUnisolated=True,
                platform="linux",
                spawner=spawner,
            )
        )
        self.assertEqual(
            self.successResultOf(d), IsolationDecision(ok=True, tier="none")
        )
        self.assertEqual(spawner.calls, [])


class FolderIdentityTests(SynchronousTestCase):
    """
    L{FolderIdentity} notices a body's folder being swapped.
    """

    def setUp(self) -> None:
        self.path = Path(self.mktemp()).absolute()
        self.path.mkdir()
        self.identity = FolderIdentity.record(self.path)

    def test_unchanged(self) -> None:
        """
        The same folder, with its content changed, verifies.
        """
        (self.path / "file").write_text("x")
        self.assertIsNone(self.identity.verify())

    def test_swappedDirectory(self) -> None:
        """
        A folder renamed away and replaced by another is detected.
        """
        self.path.rename(self.path.with_name("moved"))
        self.path.mkdir()
        self.assertEqual(
            self.identity.verify(),
            f"{self.path} has been replaced by another directory.",
        )

    def test_symlinkInPlace(self) -> None:
        """
        A symlink put in the folder's place is detected, even one pointing
        back at the original folder.
        """
        moved = self.path.with_name("moved")
        self.path.rename(moved)
        self.path.symlink_to(moved)
        self.assertEqual(
            self.identity.verify(), f"{self.path} has been replaced by a symlink."
        )

    def test_goneOrFile(self) -> None:
        """
        A removed folder, or a file in its place, is detected.
        """
        self.path.rmdir()
        self.assertEqual(self.identity.verify(), f"{self.path} is gone.")
        self.path.write_text("x")
        self.assertEqual(
            self.identity.verify(), f"{self.path} is no longer a directory."
        )

    def test_recordRefusesSymlink(self) -> None:
        """
        Recording a symlink, a file or a missing path is refused.
        """
        link = self.path.with_name("link")
        link.symlink_to(self.path)
        self.assertRaises(BoxSpecError, FolderIdentity.record, link)
        (self.path / "f").write_text("x")
        self.assertRaises(BoxSpecError, FolderIdentity.record, self.path / "f")
        self.assertRaises(BoxSpecError, FolderIdentity.record, self.path / "none")


class CopyTreeTests(SynchronousTestCase):
    """
    L{copyTree} makes a snapshot of a workspace for fork and clone.
    """

    def setUp(self) -> None:
        base = Path(self.mktemp()).absolute()
        self.outside = base / "outside.txt"
        self.src = base / "src"
        self.dst = base / "dst"
        self.src.mkdir(parents=True)
        self.outside.write_text("outside")

    def test_filesDirectoriesModes(self) -> None:
        """
        Files keep content, permission bits and times; nested directories
        keep their modes, even read-only ones; setuid bits are dropped.
        """
        (self.src / "a" / "b" / "c").mkdir(parents=True)
        (self.src / "a" / "b" / "c" / "deep.txt").write_text("deep")
        script = self.src / "run.sh"
        script.write_text("#!/bin/sh\n")
        script.chmod(0o755)
        private = self.src / "a" / "private"
        private.write_bytes(b"\0\1" * 100000)
        private.chmod(0o600)
        setuid = self.src / "suid"
        setuid.write_text("x")
        setuid.chmod(0o4755)
        os.utime(private, ns=(1_000_000_000, 2_000_000_000))
        (self.src / "a" / "b").chmod(0o550)
        (self.src / "empty").mkdir(mode=0o700)
        (self.src / "empty").chmod(0o711)

        copyTree(self.src, self.dst)

        self.assertEqual((self.dst / "a" / "b" / "c" / "deep.txt").read_text(), "deep")
        self.assertEqual(stat.S_IMODE((self.dst / "run.sh").stat().st_mode), 0o755)
        self.assertEqual((self.dst / "a" / "private").read_bytes(), b"\0\1" * 100000)
        self.assertEqual(
            stat.S_IMODE((self.dst / "a" / "private").stat().st_mode), 0o600
        )
        self.assertEqual((self.dst / "a" / "private").stat().st_mtime_ns, 2_000_000_000)
        self.assertEqual(stat.S_IMODE((self.dst / "suid").stat().st_mode), 0o755)
        self.assertEqual(stat.S_IMODE((self.dst / "a" / "b").stat().st_mode), 0o550)
        self.assertEqual(stat.S_IMODE((self.dst / "empty").stat().st_mode), 0o711)
        self.assertEqual(list((self.dst / "empty").iterdir()), [])
        (self.src / "a" / "b").chmod(0o755)
        (self.dst / "a" / "b").chmod(0o755)

    def test_everyPartIsSynced(self) -> None:
        """
        On return every copied file and folder was synced, and the new
        folder's name in its parent too: a branch announced after the copy
        keeps its workspace through a power cut.
        """
        (self.src / "a" / "b").mkdir(parents=True)
        (self.src / "a" / "b" / "deep.txt").write_text("deep")
        (self.src / "top.txt").write_text("top")
        (self.src / "link").symlink_to("top.txt")
        synced: list[str] = []
        realFsync = os.fsync

        def fsync(fd: int) -> None:
            synced.append(os.readlink(f"/proc/self/fd/{fd}"))
            realFsync(fd)

        self.patch(_folders.os, "fsync", fsync)
        self.patch(_atomic.os, "fsync", fsync)
        copyTree(self.src, self.dst)
        expected = {
            str(self.dst / "a" / "b" / "deep.txt"),
            str(self.dst / "top.txt"),
            str(self.dst / "a" / "b"),
            str(self.dst / "a"),
            str(self.dst),
            str(self.dst.parent),
        }
        self.assertEqual(expected - set(synced), set())
        # A folder is synced after what is in it.
        self.assertLess(
            synced.index(str(self.dst / "a" / "b")), synced.index(str(self.dst / "a"))
        )
        self.assertLess(synced.index(str(self.dst)), synced.index(str(self.dst.parent)))

    def test_linksCopiedAsLinks(self) -> None:
        """
        Relative, absolute, dangling and outward symlinks, and a symlink to a
        folder, are copied as the same link text and never followed.
        """
        (self.src / "sub").mkdir()
        (self.src / "sub" / "f").write_text("f")
        links = {
            "relative": "sub/f",
            "absolute": "/etc/passwd",
            "dangling": "nowhere/at/all",
            "outside": os.path.relpath(self.outside, self.src),
            "outsideAbs": str(self.outside),
            "dirlink": "/etc",
            "loop": "loop",
        }
        for name, target in links.items():
            os.symlink(target, self.src / name)
        os.symlink("../sub", self.src / "sub" / "up")

        copyTree(self.src, self.dst)

        for name, target in links.items():
            self.assertTrue((self.dst / name).is_symlink(), name)
            self.assertEqual(os.readlink(self.dst / name), target)
        self.assertEqual(os.readlink(self.dst / "sub" / "up"), "../sub")
        self.assertEqual(
            sorted(p.name for p in self.dst.iterdir()),
            sorted([*links, "sub"]),
        )

    def test_hardlinksSeparate(self) -> None:
        """
        Two hard links to one file become two separate files.
        """
        (self.src / "one").write_text("same")
        os.link(self.src / "one", self.src / "two")
        copyTree(self.src, self.dst)
        self.assertEqual((self.dst / "two").read_text(), "same")
        self.assertNotEqual(
            (self.dst / "one").stat().st_ino, (self.dst / "two").stat().st_ino
        )
        self.assertEqual((self.dst / "one").stat().st_nlink, 1)

    def test_specialFilesSkipped(self) -> None:
        """
        Fifos and sockets are not copied (and a fifo does not block the copy).
        """
        short = Path(tempfile.mkdtemp(prefix="vbox"))
        self.addCleanup(shutil.rmtree, short)
        src = short / "s"
        src.mkdir()
        os.mkfifo(src / "fifo")
        sock = socket.socket(socket.AF_UNIX)
        self.addCleanup(sock.close)
        sock.bind(str(src / "sock"))
        (src / "file").write_text("x")
        copyTree(src, short / "d")
        self.assertEqual([p.name for p in (short / "d").iterdir()], ["file"])

    def test_refusesExistingDestination(self) -> None:
        """
        An existing destination, even an empty folder or a symlink, is
        refused and left as it was.
        """
        self.dst.mkdir()
        (self.dst / "keep").write_text("keep")
        self.assertRaises(FileExistsError, copyTree, self.src, self.dst)
        self.assertEqual((self.dst / "keep").read_text(), "keep")
        link = self.dst.with_name("link")
        link.symlink_to("nowhere")
        self.assertRaises(FileExistsError, copyTree, self.src, link)

    def test_refusesSymlinkSource(self) -> None:
        """
        A source that is a symlink is refused.
        """
        link = self.src.with_name("srclink")
        link.symlink_to(self.src)
        self.assertRaises(BoxSpecError, copyTree, link, self.dst)
        self.assertFalse(os.path.lexists(self.dst))

    def test_failureLeavesNothing(self) -> None:
        """
        A copy that fails halfway removes what it made, read-only folders
        included.
        """
        (self.src / "ro").mkdir()
        (self.src / "ro" / "a").write_text("a")
        (self.src / "z").write_text("z")
        real = _folders._copyFile
        calls = []

        def failing(name: str, srcDir: int, dstDir: int) -> None:
            calls.append(name)
            if name == "z":
                raise OSError(errno.EIO, "Input/output error")
            real(name, srcDir, dstDir)

        self.patch(_folders, "_copyFile", failing)
        (self.src / "ro").chmod(0o500)
        self.addCleanup((self.src / "ro").chmod, 0o755)
        self.assertRaises(OSError, copyTree, self.src, self.dst)
        self.assertEqual(calls, ["a", "z"])
        self.assertFalse(os.path.lexists(self.dst))


class SeccompArgvTests(SynchronousTestCase):
    """
    The seccomp program's fd in the argv.
    """

    def test_seccompBeforeTheCommand(self) -> None:
        """
        With C{seccompFd}, C{--seccomp FD} comes with the options, before
        C{--chdir} and the command; without it, no such option.
        """
        from attrs import evolve

        base = BoxSpec(workspace="/srv/ws", piDir="/srv/pi", command=["true"])
        argv = bwrapArgv(evolve(base, seccompFd=4))
        at = argv.index("--seccomp")
        self.assertEqual(argv[at + 1], "4")
        self.assertLess(at, argv.index("--chdir"))
        self.assertNotIn("--seccomp", bwrapArgv(base))
