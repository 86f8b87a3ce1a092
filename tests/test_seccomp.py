"""
The box's seccomp program, run here by a small BPF interpreter: what it
allows and what it refuses, call by call.
"""

from __future__ import annotations

import errno
import struct

from twisted.trial.unittest import SynchronousTestCase

from vehicle.box._seccomp import (
    AUDIT_ARCH_X86_64,
    BLOCKED_ENOSYS,
    BLOCKED_EPERM,
    CLONE_NEWUSER,
    seccompProgram,
)


ALLOW, KILL = 0x7FFF0000, 0x80000000


def errnoOf(action: int) -> int:
    return 0x00050000 | action


def run(program: bytes, nr: int, args: tuple[int, ...] = (), arch: int = AUDIT_ARCH_X86_64) -> int:
    """
    Evaluate a classic BPF seccomp program on one call's seccomp_data.
    """
    values = list(args) + [0] * (6 - len(args))
    data = struct.pack("=iIQ6Q", nr, arch, 0, *values)
    insns = [struct.unpack("=HBBI", program[i:i + 8]) for i in range(0, len(program), 8)]
    acc, pc = 0, 0
    while True:
        code, jt, jf, k = insns[pc]
        if code == 0x20:  # ld [k]
            acc = struct.unpack_from("=I", data, k)[0]
            pc += 1
        elif code == 0x15:  # jeq
            pc += 1 + (jt if acc == k else jf)
        elif code == 0x35:  # jge
            pc += 1 + (jt if acc >= k else jf)
        elif code == 0x45:  # jset
            pc += 1 + (jt if acc & k else jf)
        elif code == 0x06:  # ret
            return k
        else:
            raise AssertionError(f"unknown instruction {code:#x}")


class SeccompProgramTests(SynchronousTestCase):
    """
    L{seccompProgram} for x86_64.
    """

    def setUp(self) -> None:
        program = seccompProgram("x86_64")
        assert program is not None
        self.program = program

    def test_everyJumpLands(self) -> None:
        """
        Whole instructions, every jump inside the program, ending in a
        return.
        """
        self.assertEqual(len(self.program) % 8, 0)
        count = len(self.program) // 8
        for index in range(count):
            code, jt, jf, k = struct.unpack_from("=HBBI", self.program, index * 8)
            if code in (0x15, 0x35, 0x45):
                self.assertLess(index + 1 + max(jt, jf), count, index)
        self.assertEqual(struct.unpack_from("=H", self.program, (count - 1) * 8)[0], 0x06)

    def test_ordinaryCallsAllowed(self) -> None:
        """
        Reading, writing, forking a thread or a process, sockets of the
        families a body uses, socketpair: allowed.
        """
        for nr, args in ((0, ()), (1, ()), (57, ()), (56, (0x3D0F00,)), (41, (1,)), (41, (2,)),
                         (41, (10,)), (53, (1,)), (16, (3, 0x5401))):
            self.assertEqual(run(self.program, nr, args), ALLOW, (nr, args))

    def test_blockedCalls(self) -> None:
        """
        Every blocked call fails with its errno.
        """
        for name, nr in BLOCKED_EPERM.items():
            self.assertEqual(run(self.program, nr), errnoOf(errno.EPERM), name)
        for name, nr in BLOCKED_ENOSYS.items():
            self.assertEqual(run(self.program, nr), errnoOf(errno.ENOSYS), name)

    def test_argumentChecks(self) -> None:
        """
        clone with a new user namespace, the terminal-injecting ioctls and
        other socket families are refused.
        """
        self.assertEqual(run(self.program, 56, (CLONE_NEWUSER | 0x11,)), errnoOf(errno.EPERM))
        self.assertEqual(run(self.program, 16, (0, 0x5412)), errnoOf(errno.EPERM))
        self.assertEqual(run(self.program, 16, (0, 0x541C)), errnoOf(errno.EPERM))
        self.assertEqual(run(self.program, 41, (17,)), errnoOf(errno.EAFNOSUPPORT))

    def test_otherArchitectureKilled(self) -> None:
        """
        A call of another ABI (32-bit) kills; an x32 number is refused.
        """
        self.assertEqual(run(self.program, 0, arch=0x40000003), KILL)
        self.assertEqual(run(self.program, 0x40000000 | 1), errnoOf(errno.EPERM))

    def test_otherMachines(self) -> None:
        """
        Only x86_64 has a program.
        """
        self.assertIsNone(seccompProgram("aarch64"))
