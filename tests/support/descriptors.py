"""
How many file descriptors this process holds, for tests that check that
nothing is left open.
"""

from __future__ import annotations

import gc
import os


def openDescriptors() -> int:
    """
    The descriptors this process holds once what is only garbage is
    collected: a socket or file an earlier test left in a reference cycle
    is closed by the collector whenever its pass comes, which may be in the
    middle of a count.
    """
    gc.collect()
    return len(os.listdir("/proc/self/fd"))
