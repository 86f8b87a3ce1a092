# -*- test-case-name: tests.unit.test_box -*-
"""
The macOS box: a Seatbelt profile (SBPL) and the C{sandbox-exec} argv.

The profile is a fixed template that depends only on how many hidden,
read-only and socket folders there are; every host path reaches it as a
C{-D NAME=path} parameter and is referred to as C{(param "NAME")}, never
interpolated, so no path can inject SBPL.
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping, Sequence

from attrs import field, frozen

from vehicle.box._spec import (
    BoxSpecError,
    _env,
    _optionalPath,
    _paths,
    _strings,
    checkCanonical,
    checkEnvironment,
)


SANDBOX_EXEC = "/usr/bin/sandbox-exec"


@frozen(kw_only=True)
class SeatbeltSpec:
    """
    One agent body's box on macOS; see L{vehicle.box.BoxSpec} for the
    fields they share.

    @ivar sandboxExec: the path of C{sandbox-exec}.
    @ivar tmpDir: the session's own temporary folder (writable; also
        C{TMPDIR} in the command's environment).
    """

    sandboxExec: str = SANDBOX_EXEC
    workspace: Path = field(converter=Path)
    piDir: Path = field(converter=Path)
    tmpDir: Path = field(converter=Path)
    readOnly: tuple[Path, ...] = field(default=(), converter=_paths)
    hidden: tuple[Path, ...] = field(default=(), converter=_paths)
    socketDir: Path | None = field(default=None, converter=_optionalPath)
    env: tuple[tuple[str, str], ...] = field(default=(), converter=_env)
    command: tuple[str, ...] = field(converter=_strings)


#: sysctls that node, libuv and a shell read at start (CPU count and
#: features, page size, OS version, the process table for C{ps}).
_SYSCTLS = (
    '(sysctl-name "hw.activecpu")',
    '(sysctl-name "hw.availcpu")',
    '(sysctl-name "hw.byteorder")',
    '(sysctl-name "hw.cachelinesize")',
    '(sysctl-name "hw.cachelinesize_compat")',
    '(sysctl-name "hw.cpufamily")',
    '(sysctl-name "hw.cpusubtype")',
    '(sysctl-name "hw.cputype")',
    '(sysctl-name "hw.l1dcachesize")',
    '(sysctl-name "hw.l1icachesize")',
    '(sysctl-name "hw.l2cachesize")',
    '(sysctl-name "hw.l3cachesize")',
    '(sysctl-name "hw.logicalcpu")',
    '(sysctl-name "hw.logicalcpu_max")',
    '(sysctl-name "hw.machine")',
    '(sysctl-name "hw.memsize")',
    '(sysctl-name "hw.model")',
    '(sysctl-name "hw.ncpu")',
    '(sysctl-name "hw.nperflevels")',
    '(sysctl-name "hw.pagesize")',
    '(sysctl-name "hw.pagesize_compat")',
    '(sysctl-name "hw.physicalcpu")',
    '(sysctl-name "hw.physicalcpu_max")',
    '(sysctl-name "kern.argmax")',
    '(sysctl-name "kern.boottime")',
    '(sysctl-name "kern.hostname")',
    '(sysctl-name "kern.maxfilesperproc")',
    '(sysctl-name "kern.osproductversion")',
    '(sysctl-name "kern.osrelease")',
    '(sysctl-name "kern.ostype")',
    '(sysctl-name "kern.osversion")',
    '(sysctl-name "kern.secure_kernel")',
    '(sysctl-name "kern.usrstack64")',
    '(sysctl-name "kern.version")',
    '(sysctl-name "sysctl.proc_cputype")',
    '(sysctl-name "vm.loadavg")',
    '(sysctl-name-prefix "hw.optional.")',
    '(sysctl-name-prefix "hw.perflevel")',
    '(sysctl-name-prefix "kern.proc.pgrp.")',
    '(sysctl-name-prefix "kern.proc.pid.")',
    '(sysctl-name-prefix "machdep.cpu.")',
)

#: Mach services libc needs for user and group look-ups and notifications.
_MACH_SERVICES = (
    '(global-name "com.apple.system.notification_center")',
    '(global-name "com.apple.system.opendirectoryd.libinfo")',
)

#: Devices a shell or node writes to; constants of the platform, not paths
#: of this host, so they are the only literals in the profile.
_DEVICES = (
    '(literal "/dev/null")',
    '(literal "/dev/zero")',
    '(literal "/dev/dtracehelper")',
    '(literal "/dev/tty")',
)


def hiddenParam(index: int) -> str:
    """
    The parameter name of the C{index}th hidden folder.
    """
    return f"HIDDEN_{index}"


def readOnlyParam(index: int) -> str:
    """
    The parameter name of the C{index}th read-only path.
    """
    return f"READONLY_{index}"


def _block(head: str, items: Sequence[str]) -> list[str]:
    return [f"({head}", *(f"  {item}" for item in items[:-1]), f"  {items[-1]})"]


def _readingRules(hiddenCount: int, readOnlyCount: int) -> list[str]:
    """
    What the box reads: metadata anywhere, contents anywhere but beneath
    the C{HIDDEN_i} folders, and the C{READONLY_i} paths even beneath one.
    """
    lines = [
        "; reading: metadata anywhere, contents anywhere but the hidden folders",
        "(allow file-read-metadata)",
    ]
    if hiddenCount:
        notHidden = []
        for index in range(hiddenCount):
            name = hiddenParam(index)
            notHidden.append(f'(require-not (literal (param "{name}")))')
            notHidden.append(f'(require-not (subpath (param "{name}")))')
        lines += [
            "(allow file-read*",
            "  (require-all",
            *(f"    {item}" for item in notHidden[:-1]),
            f"    {notHidden[-1]}))",
        ]
    else:
        lines.append("(allow file-read*)")
    if readOnlyCount:
        lines += _block(
            "allow file-read*",
            [
                f'(subpath (param "{readOnlyParam(index)}"))'
                for index in range(readOnlyCount)
            ],
        )
    return lines


def _writingRules() -> list[str]:
    """
    What the box writes: beneath its own folders, and a few devices.
    """
    return [
        "; writing: only the body's own folders, and a few devices",
        *_block(
            "allow file-read* file-write*",
            [
                '(subpath (param "WORKSPACE"))',
                '(subpath (param "PIDIR"))',
                '(subpath (param "TMPDIR"))',
            ],
        ),
        *_block("allow file-read-data file-write-data file-ioctl", _DEVICES),
    ]


#: The host's bridge: a Unix socket beneath C{SOCKET_DIR}, and nothing else
#: on the network.
_SOCKET_RULES = (
    "; the host's bridge: connect to its socket, nothing else on the network",
    '(allow file-read* (subpath (param "SOCKET_DIR")))',
    "(allow system-socket (socket-domain AF_UNIX))",
    "(allow network-outbound"
    ' (remote unix-socket (subpath (param "SOCKET_DIR"))))',
)


def seatbeltProfile(
    *, hiddenCount: int, readOnlyCount: int, socket: bool
) -> str:
    """
    The SBPL text of an agent body's box.

    Allowed: running and forking processes; signals and process information
    only within the same sandbox; a listed set of sysctls; C{mach-host*};
    reading file metadata anywhere (so C{realpath} can walk through the
    hidden folders to the workspace); reading file contents anywhere except
    beneath the hidden folders; reading the C{READONLY_i} paths, even beneath
    a hidden folder; reading and writing beneath C{WORKSPACE}, C{PIDIR} and
    C{TMPDIR}; writing to a few devices; and, with C{socket}, connecting to a
    Unix socket beneath C{SOCKET_DIR}. Nothing else, no other network. Every
    rule is an C{allow} under C{(deny default)}, so no rule's precedence
    matters.

    @param hiddenCount: how many C{HIDDEN_i} parameters there are.
    @param readOnlyCount: how many C{READONLY_i} parameters there are.
    @param socket: whether a C{SOCKET_DIR} parameter is given.
    @return: the profile, one rule per block, ending with a newline.
    """
    if hiddenCount < 0 or readOnlyCount < 0:
        raise BoxSpecError("counts cannot be negative")
    lines = [
        "(version 1)",
        "(deny default)",
        "",
        "; processes: run and fork; see and signal only this sandbox's own",
        "(allow process-exec)",
        "(allow process-fork)",
        "(allow signal (target same-sandbox))",
        "(allow process-info* (target same-sandbox))",
        "",
        "; what node and a shell ask the kernel about the machine",
        *_block("allow sysctl-read", _SYSCTLS),
        "(allow mach-host*)",
        *_block("allow mach-lookup", _MACH_SERVICES),
        "",
        *_readingRules(hiddenCount, readOnlyCount),
        "",
        *_writingRules(),
    ]
    if socket:
        lines += ["", *_SOCKET_RULES]
    return "\n".join(lines) + "\n"


def seatbeltArgv(spec: SeatbeltSpec) -> list[str]:
    """
    Build the C{sandbox-exec} argv that runs C{spec.command} in its box.

    C{sandbox-exec} does not clear the environment: spawn the result with
    L{seatbeltEnvironment} as its whole environment.

    @param spec: a spec whose paths are canonical (on macOS, under
        C{/private/...}, not through the C{/tmp} or C{/var} links).
    @return: C{[sandboxExec, "-p", profile, "-D", "NAME=path", ..., "--",
        *command]}.
    @raise BoxSpecError: for a non-canonical path, a bad environment or an
        empty command.
    """
    checkCanonical(spec.workspace, "workspace")
    checkCanonical(spec.piDir, "pi folder")
    checkCanonical(spec.tmpDir, "temporary folder")
    params = [
        ("WORKSPACE", spec.workspace),
        ("PIDIR", spec.piDir),
        ("TMPDIR", spec.tmpDir),
    ]
    for index, path in enumerate(spec.hidden):
        checkCanonical(path, "hidden")
        params.append((hiddenParam(index), path))
    for index, path in enumerate(spec.readOnly):
        checkCanonical(path, "read-only")
        params.append((readOnlyParam(index), path))
    if spec.socketDir is not None:
        checkCanonical(spec.socketDir, "socket folder")
        params.append(("SOCKET_DIR", spec.socketDir))
    if not spec.command:
        raise BoxSpecError("the box needs a command")
    checkEnvironment(spec.env)
    profile = seatbeltProfile(
        hiddenCount=len(spec.hidden),
        readOnlyCount=len(spec.readOnly),
        socket=spec.socketDir is not None,
    )
    argv = [spec.sandboxExec, "-p", profile]
    for name, path in params:
        argv += ["-D", f"{name}={path}"]
    return [*argv, "--", *spec.command]


def seatbeltEnvironment(spec: SeatbeltSpec) -> Mapping[str, str]:
    """
    The whole environment to spawn L{seatbeltArgv}'s argv with: C{spec.env}
    with C{TMPDIR} pointing at the session's own temporary folder.
    """
    env = dict(spec.env)
    env["TMPDIR"] = str(spec.tmpDir)
    return env
