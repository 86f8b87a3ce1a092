# -*- test-case-name: tests.unit.test_box -*-
"""
The agent profile's box: the bwrap argv and the seatbelt profile (pure), the
probe and the isolation decision, the tamper checks on a body's folders and
the snapshot copy of a workspace.

It knows nothing of sessions: callers hand in paths, an environment and a
command, and get back an argv, a decision or a sentence.
"""

from vehicle.box._bwrap import NAMESPACE_FLAGS, bwrapArgv
from vehicle.box._folders import FolderIdentity, copyTree
from vehicle.box._probe import (
    PROBE_ARGS,
    PROBE_ENV,
    IsolationDecision,
    ProbeResult,
    Spawner,
    checkIsolation,
    decideIsolation,
    probeBwrap,
)
from vehicle.box._apis import reachesThroughProxy, throughProxy
from vehicle.box._proxy import ModelProxy, Upstream, proxiesClosed
from vehicle.box._seatbelt import (
    SANDBOX_EXEC,
    SeatbeltSpec,
    seatbeltArgv,
    seatbeltEnvironment,
    seatbeltProfile,
)
from vehicle.box._seccomp import seccompProgram
from vehicle.box._spec import (
    SYSTEM_FOLDERS,
    BoxSpec,
    BoxSpecError,
    canonicalPath,
    canonicalSpec,
    checkSpec,
    systemRoots,
)


__all__ = [
    "BoxSpec",
    "SYSTEM_FOLDERS",
    "systemRoots",
    "BoxSpecError",
    "FolderIdentity",
    "IsolationDecision",
    "NAMESPACE_FLAGS",
    "PROBE_ARGS",
    "PROBE_ENV",
    "ProbeResult",
    "SANDBOX_EXEC",
    "SeatbeltSpec",
    "Spawner",
    "bwrapArgv",
    "canonicalPath",
    "canonicalSpec",
    "checkIsolation",
    "checkSpec",
    "copyTree",
    "decideIsolation",
    "probeBwrap",
    "seatbeltArgv",
    "seatbeltEnvironment",
    "seatbeltProfile",
    "ModelProxy",
    "Upstream",
    "proxiesClosed",
    "seccompProgram",
    "reachesThroughProxy",
    "throughProxy",
]
