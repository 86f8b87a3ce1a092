# -*- test-case-name: tests.unit.test_datalock -*-
"""
Whether a process is alive, by its pid.
"""

from __future__ import annotations

import os


def alive(pid: int) -> bool:
    """
    Whether process C{pid} exists (signal 0 checks without sending; a
    process not ours to signal exists).
    """
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
