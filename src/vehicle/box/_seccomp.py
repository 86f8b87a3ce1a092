# -*- test-case-name: tests.test_seccomp -*-
"""
The box's seccomp filter: a classic BPF program, built here without a
library, that bwrap installs (C{--seccomp FD}) on the body and everything it
starts.  It follows Flatpak's blocklist: the calls that reach the kernel's
riskiest corners (new namespaces and mounts, keyrings, BPF, io_uring,
another process's memory) fail, everything else is allowed.  x86_64 only;
elsewhere the box runs without it.
"""

from __future__ import annotations

import errno
import platform
import struct

# struct sock_filter {u16 code; u8 jt; u8 jf; u32 k}
_LD_W_ABS = 0x20
_JEQ_K = 0x15
_JGE_K = 0x35
_JSET_K = 0x45
_RET_K = 0x06

_RET_ALLOW = 0x7FFF0000
_RET_KILL_PROCESS = 0x80000000
_RET_ERRNO = 0x00050000

AUDIT_ARCH_X86_64 = 0xC000003E
_X32_BIT = 0x40000000

# seccomp_data offsets: nr, arch, instruction pointer, then the six args.
_NR, _ARCH = 0, 4


def _arg(index: int) -> int:
    return 16 + 8 * index  # the low 32 bits (little-endian)


#: x86_64 system calls that fail with EPERM in the box.
BLOCKED_EPERM = {
    "ptrace": 101, "syslog": 103, "vhangup": 153, "pivot_root": 155,
    "chroot": 161, "acct": 163, "mount": 165, "umount2": 166, "swapon": 167, "swapoff": 168,
    "reboot": 169, "init_module": 175, "delete_module": 176, "quotactl": 179,
    "lookup_dcookie": 212, "kexec_load": 246, "add_key": 248, "request_key": 249,
    "keyctl": 250, "unshare": 272, "perf_event_open": 298, "name_to_handle_at": 303,
    "open_by_handle_at": 304, "setns": 308, "process_vm_readv": 310,
    "process_vm_writev": 311, "finit_module": 313, "kexec_file_load": 320, "bpf": 321,
    "userfaultfd": 323,
}
#: ... and those that fail with ENOSYS, so that libraries fall back (libuv
#: without io_uring, glibc's clone without clone3, mounts without the new API).
BLOCKED_ENOSYS = {
    "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
    "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432,
    "fspick": 433, "clone3": 435, "mount_setattr": 442,
}
_CLONE, _IOCTL, _SOCKET = 56, 16, 41
CLONE_NEWUSER = 0x10000000
#: ioctls that push input into a terminal (the TIOCSTI escape).
_TIOCSTI, _TIOCLINUX = 0x5412, 0x541C
#: The socket families a body may make: Unix, IPv4, IPv6, netlink.
ALLOWED_FAMILIES = (1, 2, 10, 16)


def _insn(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k)


def seccompProgram(machine: str | None = None) -> bytes | None:
    """
    The compiled filter for this machine, or L{None} where there is none
    (not x86_64).
    """
    machine = (machine or platform.machine()).lower()
    if machine not in ("x86_64", "amd64"):
        return None
    eperm = _RET_ERRNO | errno.EPERM
    enosys = _RET_ERRNO | errno.ENOSYS
    prog: list[bytes] = []
    # Another architecture (32-bit calls) is not expected: kill.
    prog.append(_insn(_LD_W_ABS, _ARCH))
    prog.append(_insn(_JEQ_K, AUDIT_ARCH_X86_64, jt=1, jf=0))
    prog.append(_insn(_RET_K, _RET_KILL_PROCESS))
    prog.append(_insn(_LD_W_ABS, _NR))
    # The x32 ABI numbers: refused.
    prog.append(_insn(_JGE_K, _X32_BIT, jt=0, jf=1))
    prog.append(_insn(_RET_K, eperm))
    for number in sorted(BLOCKED_EPERM.values()):
        prog.append(_insn(_JEQ_K, number, jt=0, jf=1))
        prog.append(_insn(_RET_K, eperm))
    for number in sorted(BLOCKED_ENOSYS.values()):
        prog.append(_insn(_JEQ_K, number, jt=0, jf=1))
        prog.append(_insn(_RET_K, enosys))
    # clone with CLONE_NEWUSER.
    prog.append(_insn(_JEQ_K, _CLONE, jt=0, jf=3))
    prog.append(_insn(_LD_W_ABS, _arg(0)))
    prog.append(_insn(_JSET_K, CLONE_NEWUSER, jt=0, jf=1))
    prog.append(_insn(_RET_K, eperm))
    prog.append(_insn(_LD_W_ABS, _NR))
    # ioctl TIOCSTI / TIOCLINUX.
    prog.append(_insn(_JEQ_K, _IOCTL, jt=0, jf=5))
    prog.append(_insn(_LD_W_ABS, _arg(1)))
    prog.append(_insn(_JEQ_K, _TIOCSTI, jt=2, jf=0))
    prog.append(_insn(_JEQ_K, _TIOCLINUX, jt=1, jf=0))
    prog.append(_insn(_RET_K, _RET_ALLOW))
    prog.append(_insn(_RET_K, eperm))
    # socket: only the allowed families.
    prog.append(_insn(_JEQ_K, _SOCKET, jt=0, jf=2 + len(ALLOWED_FAMILIES)))
    prog.append(_insn(_LD_W_ABS, _arg(0)))
    for index, family in enumerate(ALLOWED_FAMILIES):
        # Allowed: jump over the rest of the checks and the refusal.
        prog.append(_insn(_JEQ_K, family, jt=len(ALLOWED_FAMILIES) - index, jf=0))
    prog.append(_insn(_RET_K, _RET_ERRNO | errno.EAFNOSUPPORT))
    prog.append(_insn(_RET_K, _RET_ALLOW))
    return b"".join(prog)
