"""
The box's seccomp program as libseccomp exports it, run here by a small
classic-BPF interpreter: what it allows and what it refuses, call by call,
for x86_64 and for aarch64 by each one's own system call numbers; and the
box refused, never run bare, where no filter can be built.
"""

from __future__ import annotations

import ctypes.util
import errno
import platform
import struct
import sys
from typing import Any, ClassVar

from twisted.internet.defer import Deferred
from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from vehicle.box import IsolationDecision, decideIsolation
from vehicle.box import _seccomp
from vehicle.box._seccomp import (
    BLOCKED_ENOSYS,
    BLOCKED_EPERM,
    CLONE_NEWUSER,
    SeccompUnavailable,
    seccompProblem,
    seccompProgram,
)


ALLOW, KILL_PROCESS = 0x7FFF0000, 0x80000000
AUDIT_ARCH_I386 = 0x40000003
AUDIT_ARCH_ARM = 0x40000028


def errnoOf(action: int) -> int:
    return 0x00050000 | action


def run(program: bytes, arch: int, nr: int, args: tuple[int, ...] = ()) -> int:
    """
    Evaluate a classic BPF seccomp program (this machine's byte order) on
    one call's C{seccomp_data}: the instructions libseccomp emits, and no
    others.
    """
    values = list(args) + [0] * (6 - len(args))
    data = struct.pack("=iIQ6Q", nr, arch, 0, *values)
    insns = [struct.unpack("=HBBI", program[i:i + 8]) for i in range(0, len(program), 8)]
    acc, pc = 0, 0
    while True:
        code, jt, jf, k = insns[pc]
        pc += 1
        if code == 0x20:  # ld [k]
            acc = struct.unpack_from("=I", data, k)[0]
        elif code == 0x54:  # and #k
            acc &= k
        elif code == 0x05:  # ja +k
            pc += k
        elif code == 0x15:  # jeq
            pc += jt if acc == k else jf
        elif code == 0x25:  # jgt
            pc += jt if acc > k else jf
        elif code == 0x35:  # jge
            pc += jt if acc >= k else jf
        elif code == 0x45:  # jset
            pc += jt if acc & k else jf
        elif code == 0x06:  # ret
            return k
        else:
            raise AssertionError(f"unknown instruction {code:#x} at {pc - 1}")


#: The x86_64 numbers, from the kernel's syscall_64.tbl.
X86_64 = {
    "ptrace": 101, "syslog": 103, "vhangup": 153, "pivot_root": 155,
    "chroot": 161, "acct": 163, "mount": 165, "umount2": 166, "swapon": 167, "swapoff": 168,
    "reboot": 169, "init_module": 175, "delete_module": 176, "quotactl": 179,
    "lookup_dcookie": 212, "kexec_load": 246, "add_key": 248, "request_key": 249,
    "keyctl": 250, "unshare": 272, "perf_event_open": 298, "name_to_handle_at": 303,
    "open_by_handle_at": 304, "setns": 308, "process_vm_readv": 310,
    "process_vm_writev": 311, "finit_module": 313, "kexec_file_load": 320, "bpf": 321,
    "userfaultfd": 323,
    "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
    "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432,
    "fspick": 433, "clone3": 435, "mount_setattr": 442,
    "read": 0, "write": 1, "ioctl": 16, "socket": 41, "socketpair": 53, "clone": 56,
    "fork": 57,
}

#: The aarch64 numbers, from the kernel's generic table
#: (include/uapi/asm-generic/unistd.h).
AARCH64 = {
    "ptrace": 117, "syslog": 116, "vhangup": 58, "pivot_root": 41, "chroot": 51,
    "acct": 89, "mount": 40, "umount2": 39, "swapon": 224, "swapoff": 225, "reboot": 142,
    "init_module": 105, "delete_module": 106, "quotactl": 60, "lookup_dcookie": 18,
    "kexec_load": 104, "add_key": 217, "request_key": 218, "keyctl": 219, "unshare": 97,
    "perf_event_open": 241, "name_to_handle_at": 264, "open_by_handle_at": 265,
    "setns": 268, "process_vm_readv": 270, "process_vm_writev": 271, "finit_module": 273,
    "kexec_file_load": 294, "bpf": 280, "userfaultfd": 282,
    "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
    "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432,
    "fspick": 433, "clone3": 435, "mount_setattr": 442,
    "read": 63, "write": 64, "ioctl": 29, "socket": 198, "socketpair": 199, "clone": 220,
    "execve": 221,
}


class ProgramTestsMixin:
    """
    The program for one architecture, call by call.
    """

    arch: ClassVar[str]
    #: Its C{AUDIT_ARCH_*}, and another ABI the same machine can run.
    audit: ClassVar[int]
    other: ClassVar[int]
    numbers: ClassVar[dict[str, int]]

    def setUp(self) -> None:
        self.program = seccompProgram(self.arch)

    def call(self, name: str, *args: int, arch: int | None = None) -> int:
        return run(self.program, self.audit if arch is None else arch, self.numbers[name], args)

    def test_everyJumpLands(self: Any) -> None:
        """
        Whole instructions, every jump forward and inside the program,
        ending in a return.
        """
        self.assertEqual(len(self.program) % 8, 0)
        count = len(self.program) // 8
        for index in range(count):
            code, jt, jf, k = struct.unpack_from("=HBBI", self.program, index * 8)
            if code in (0x15, 0x25, 0x35, 0x45):
                self.assertLess(index + 1 + max(jt, jf), count, index)
            elif code == 0x05:
                self.assertLess(index + 1 + k, count, index)
        self.assertEqual(struct.unpack_from("=H", self.program, (count - 1) * 8)[0], 0x06)

    def test_ordinaryCallsAllowed(self: Any) -> None:
        """
        Reading, writing, a thread (clone without a new user namespace),
        sockets of the families a body uses, socketpair, a terminal's own
        ioctls: allowed.
        """
        for name, args in (("read", ()), ("write", ()), ("clone", (0x3D0F00,)),
                           ("socket", (1,)), ("socket", (2,)), ("socket", (10,)),
                           ("socket", (16,)), ("socketpair", (1,)), ("ioctl", (3, 0x5401))):
            self.assertEqual(self.call(name, *args), ALLOW, (name, args))

    def test_blockedCalls(self: Any) -> None:
        """
        Every blocked call fails with its errno, by this architecture's
        number.
        """
        for name in BLOCKED_EPERM:
            self.assertEqual(self.call(name), errnoOf(errno.EPERM), name)
        for name in BLOCKED_ENOSYS:
            self.assertEqual(self.call(name), errnoOf(errno.ENOSYS), name)

    def test_argumentChecks(self: Any) -> None:
        """
        clone with a new user namespace, the terminal-injecting ioctls (on
        the low 32 bits the kernel reads) and other socket families (a
        family with high bits set among them) are refused.
        """
        self.assertEqual(self.call("clone", CLONE_NEWUSER | 0x11), errnoOf(errno.EPERM))
        for request in (0x5412, 0x541C, 0x1_0000_5412, 0xFFFF_FFFF_0000_541C):
            self.assertEqual(self.call("ioctl", 0, request), errnoOf(errno.EPERM), hex(request))
        for family in (0, 3, 15, 17, 40, 0x1_0000_0002, 0xFFFF_FFFF_FFFF_FFFF):
            self.assertEqual(
                self.call("socket", family), errnoOf(errno.EAFNOSUPPORT), hex(family)
            )

    def test_otherArchitectureKilled(self: Any) -> None:
        """
        A call of another ABI (the 32-bit one) kills the process, whatever
        the call.
        """
        for name in ("read", "ptrace"):
            self.assertEqual(self.call(name, arch=self.other), KILL_PROCESS, name)


class X86_64ProgramTests(ProgramTestsMixin, SynchronousTestCase):
    """
    The program for x86_64.
    """

    arch = "x86_64"
    audit = 0xC000003E
    other = AUDIT_ARCH_I386
    numbers = X86_64

    def test_x32Killed(self) -> None:
        """
        An x32 call (the x86_64 arch with bit 30 in the number) kills too.
        """
        for name in ("read", "ptrace"):
            self.assertEqual(
                run(self.program, self.audit, 0x40000000 | X86_64[name]), KILL_PROCESS, name
            )


class Aarch64ProgramTests(ProgramTestsMixin, SynchronousTestCase):
    """
    The program for aarch64, built on whatever machine runs the tests.
    """

    arch = "aarch64"
    audit = 0xC00000B7
    other = AUDIT_ARCH_ARM
    numbers = AARCH64

    def test_notX86Numbers(self) -> None:
        """
        The numbers are aarch64's: x86_64's C{ptrace} (101) is another call
        there (C{nanosleep}, allowed), and an x86_64 call is killed.
        """
        self.assertEqual(run(self.program, self.audit, X86_64["ptrace"]), ALLOW)
        self.assertEqual(run(self.program, 0xC000003E, X86_64["ptrace"]), KILL_PROCESS)


class ProgramTests(SynchronousTestCase):
    """
    L{seccompProgram} as a whole.
    """

    def test_thisMachine(self) -> None:
        """
        Without an architecture, the program is this machine's.
        """
        machine = {"amd64": "x86_64", "arm64": "aarch64"}.get(
            platform.machine().lower(), platform.machine().lower()
        )
        self.assertEqual(seccompProgram(), seccompProgram(machine))

    def test_everyArchitecture(self) -> None:
        """
        Every architecture libseccomp 2.5 knows gets a program, in its own
        byte order: the first instruction loads the architecture.
        """
        for arch in ("x86_64", "x86", "x32", "aarch64", "arm", "ppc64le", "ppc64", "ppc",
                     "s390x", "s390", "riscv64", "mips", "mipsel", "mips64", "mipsel64",
                     "mips64n32", "mipsel64n32", "parisc", "parisc64"):
            program = seccompProgram(arch)
            self.assertIn(program[:8], (struct.pack("<HBBI", 0x20, 0, 0, 4),
                                        struct.pack(">HBBI", 0x20, 0, 0, 4)), arch)

    def test_unknownArchitecture(self) -> None:
        """
        An architecture libseccomp does not know is an error, not an empty
        filter.
        """
        for arch in ("vax", "native", ""):
            with self.assertRaises(SeccompUnavailable):
                seccompProgram(arch)

    def test_unknownCall(self) -> None:
        """
        A call libseccomp does not know (an older libseccomp than the
        policy) is an error naming it, not a rule left out.
        """
        self.patch(_seccomp, "BLOCKED_ENOSYS", BLOCKED_ENOSYS + ("no_such_call",))
        with self.assertRaises(SeccompUnavailable) as caught:
            seccompProgram("x86_64")
        self.assertIn("the rule for no_such_call", str(caught.exception))


class UnavailableTests(SynchronousTestCase):
    """
    Without libseccomp there is no filter, and so no box: agent bodies are
    refused with C{isolation_unavailable}, never run without the filter.
    """

    def test_bindingMissing(self) -> None:
        """
        pyseccomp not installed: no binding, and a sentence saying so.
        """
        sys.modules["pyseccomp"] = None  # type: ignore[assignment]
        self.addCleanup(sys.modules.pop, "pyseccomp", None)
        binding, reason = _seccomp._load()
        self.assertIsNone(binding)
        self.assertIn("pyseccomp is not installed", reason or "")

    def test_libraryMissing(self) -> None:
        """
        libseccomp.so.2 not on the machine: no binding, and a sentence
        saying so.
        """
        loaded = sys.modules.pop("pyseccomp", None)
        self.addCleanup(sys.modules.__setitem__, "pyseccomp", loaded)
        # libc found without asking ldconfig (no process in a unit test).
        self.patch(ctypes.util, "find_library", {"c": "libc.so.6"}.get)
        binding, reason = _seccomp._load()
        self.assertIsNone(binding)
        self.assertIn("libseccomp.so.2 cannot be loaded", reason or "")

    def withoutLibseccomp(self) -> None:
        self.patch(_seccomp, "_libseccomp", None)
        self.patch(_seccomp, "_missing", "libseccomp.so.2 cannot be loaded (not found)")

    def test_noProgram(self) -> None:
        """
        Without the library, L{seccompProgram} raises rather than answer
        with nothing, and L{seccompProblem} says why.
        """
        self.assertIsNone(seccompProblem())
        self.withoutLibseccomp()
        with self.assertRaises(SeccompUnavailable):
            seccompProgram()
        self.assertEqual(seccompProblem(), "libseccomp.so.2 cannot be loaded (not found)")

    def test_boxRefused(self) -> None:
        """
        The isolation decision for bwrap refuses, naming the filter, without
        even probing bwrap: the host answers C{isolation_unavailable}.
        """
        self.withoutLibseccomp()
        calls: list[Any] = []
        d = Deferred.fromCoroutine(
            decideIsolation(Clock(), isolation="bwrap", agentUnisolated=False,
                            platform="linux", spawner=lambda *a: calls.append(a))
        )
        self.assertEqual(
            self.successResultOf(d),
            IsolationDecision(
                ok=False, tier="bwrap",
                reason="the box's seccomp filter cannot be built on this host:"
                " libseccomp.so.2 cannot be loaded (not found).",
            ),
        )
        self.assertEqual(calls, [])

    def test_agentRefused(self) -> None:
        """
        The agent profile turns that refusal into C{isolation_unavailable},
        at creation and before each body (both ask L{AgentProfile.decide}).
        """
        from vehicle.agent import AgentProfile
        from vehicle.errors import VehicleError

        self.withoutLibseccomp()
        calls: list[Any] = []
        profile = AgentProfile(
            reactor=Clock(), dataDir=None, models=None,  # type: ignore[arg-type]
            isolation="bwrap", agentUnisolated=False, piRoot=None,  # type: ignore[arg-type]
            extensionDir=None, platform="linux",  # type: ignore[arg-type]
            spawner=lambda *a: calls.append(a),
        )
        failure = self.failureResultOf(Deferred.fromCoroutine(profile.decide()), VehicleError)
        self.assertEqual(failure.value.code, "isolation_unavailable")
        self.assertIn("seccomp filter", failure.value.message)
        self.assertEqual(calls, [])
