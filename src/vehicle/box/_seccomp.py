# -*- test-case-name: tests.unit.test_seccomp -*-
"""
The box's seccomp filter: the policy written once by system call name,
compiled by libseccomp (through C{pyseccomp}, a ctypes binding of
C{libseccomp.so.2}) and exported as the classic BPF program bwrap installs
(C{--seccomp FD}) on the body and everything it starts.

It follows Flatpak's blocklist: the calls that reach the kernel's riskiest
corners (new namespaces and mounts, keyrings, BPF, io_uring, another
process's memory) fail, everything else is allowed.  libseccomp numbers the
calls for the architecture at hand (this machine's by default; any it knows,
x86_64 and aarch64 among them), and its program checks the architecture
first: a call of any other ABI (32-bit calls on a 64-bit host, x32) kills
the process.

Without libseccomp no filter can be built (L{SeccompUnavailable}); the
isolation decision then refuses agent bodies (C{isolation_unavailable})
rather than start a box without it.
"""

from __future__ import annotations

import errno
import os
from types import ModuleType
from typing import Any


class SeccompUnavailable(Exception):
    """
    No filter can be built here: libseccomp is missing, or it does not know
    the architecture.  The argument is a sentence saying which.
    """


def _load() -> tuple[ModuleType | None, str | None]:
    """
    The binding, or why there is none.  Run once, when this module is
    imported (the binding looks its library up with a subprocess, which
    must not happen under a running reactor).
    """
    try:
        import pyseccomp
    except ImportError as e:
        return None, f"pyseccomp is not installed ({e})"
    except (OSError, RuntimeError) as e:
        return None, f"libseccomp.so.2 cannot be loaded ({e})"
    return pyseccomp, None


_libseccomp, _missing = _load()


#: System calls that fail with EPERM in the box.
BLOCKED_EPERM = (
    "ptrace", "syslog", "vhangup", "pivot_root", "chroot", "acct", "mount", "umount2",
    "swapon", "swapoff", "reboot", "init_module", "delete_module", "quotactl",
    "lookup_dcookie", "kexec_load", "add_key", "request_key", "keyctl", "unshare",
    "perf_event_open", "name_to_handle_at", "open_by_handle_at", "setns",
    "process_vm_readv", "process_vm_writev", "finit_module", "kexec_file_load", "bpf",
    "userfaultfd",
)
#: ... and those that fail with ENOSYS, so that libraries fall back (libuv
#: without io_uring, glibc's clone without clone3, mounts without the new API).
BLOCKED_ENOSYS = (
    "io_uring_setup", "io_uring_enter", "io_uring_register", "open_tree", "move_mount",
    "fsopen", "fsconfig", "fsmount", "fspick", "clone3", "mount_setattr",
)
CLONE_NEWUSER = 0x10000000
#: The socket families a body may make: Unix, IPv4, IPv6, netlink.
ALLOWED_FAMILIES = (1, 2, 10, 16)

#: The ioctls that push input into a terminal (the TIOCSTI escape),
#: TIOCSTI and TIOCLINUX: the kernel's generic numbers, and MIPS's own.
TERMINAL_IOCTLS = (0x5412, 0x541C)
_MIPS_TERMINAL_IOCTLS = (0x5472, 0x5483)


def seccompProgram(arch: str | None = None) -> bytes:
    """
    The compiled filter, as the classic BPF program libseccomp exports.

    @param arch: libseccomp's name of the architecture (C{"x86_64"},
        C{"aarch64"}, ...); this machine's when L{None}.
    @raise SeccompUnavailable: no libseccomp, or it does not know C{arch}.
    """
    lib = _libseccomp
    if lib is None:
        raise SeccompUnavailable(_missing)
    names = {value: name.lower() for name, value in vars(lib.Arch).items() if name.isupper()}
    token = lib.Arch.NATIVE if arch is None else getattr(lib.Arch, arch.upper(), None)
    if arch is not None and (token is None or token == lib.Arch.NATIVE):
        raise SeccompUnavailable(f"libseccomp knows no architecture {arch!r}")
    name = names.get(lib.system_arch() if arch is None else token, "")
    try:
        scFilter = lib.SyscallFilter(lib.ALLOW)
        if arch is not None and token != lib.system_arch():
            # One architecture per filter (libseccomp refuses to mix
            # endiannesses): this machine's goes first.
            scFilter.remove_arch(lib.Arch.NATIVE)
            scFilter.add_arch(token)
        scFilter.set_attr(lib.Attr.ACT_BADARCH, lib.KILL_PROCESS)
        _addRules(lib, scFilter, name)
        with os.fdopen(os.memfd_create("vehicle-seccomp", os.MFD_CLOEXEC), "w+b", 0) as memory:
            scFilter.export_bpf(memory)
            memory.seek(0)
            return memory.read()
    except OSError as e:
        raise SeccompUnavailable(f"libseccomp cannot build the filter for {name}: {e}") from e


def _addRules(lib: Any, scFilter: Any, arch: str) -> None:
    """
    The policy, by name.  libseccomp leaves out a call the architecture does
    not have; a name it does not know (a libseccomp older than the call) is
    an error, never a rule skipped.
    """

    def refuse(code: int, call: str, *args: Any) -> None:
        try:
            scFilter.add_rule(lib.ERRNO(code), call, *args)
        except OSError as e:
            raise SeccompUnavailable(f"libseccomp cannot add the rule for {call}: {e}") from e

    for call in BLOCKED_EPERM:
        refuse(errno.EPERM, call)
    for call in BLOCKED_ENOSYS:
        refuse(errno.ENOSYS, call)
    # clone with a new user namespace (s390 takes the flags second).
    flags = 1 if arch.startswith("s390") else 0
    refuse(errno.EPERM, "clone", lib.Arg(flags, lib.MASKED_EQ, CLONE_NEWUSER, CLONE_NEWUSER))
    # The terminal ioctls, compared on the low 32 bits the kernel reads.
    for request in _MIPS_TERMINAL_IOCTLS if arch.startswith("mips") else TERMINAL_IOCTLS:
        refuse(errno.EPERM, "ioctl", lib.Arg(1, lib.MASKED_EQ, 0xFFFFFFFF, request))
    # socket: each family below the last allowed one that is not allowed,
    # and everything above it (a family with high bits set among them).
    for family in range(max(ALLOWED_FAMILIES)):
        if family not in ALLOWED_FAMILIES:
            refuse(errno.EAFNOSUPPORT, "socket", lib.Arg(0, lib.EQ, family))
    refuse(errno.EAFNOSUPPORT, "socket", lib.Arg(0, lib.GE, max(ALLOWED_FAMILIES) + 1))


def seccompProblem() -> str | None:
    """
    Why no filter can be built for this machine, or L{None} when one can.
    """
    try:
        seccompProgram()
    except SeccompUnavailable as e:
        return str(e)
    return None
