# -*- test-case-name: tests.unit.test_localrun -*-
"""
The local run's and the tests' tools: not the host.

Nothing here ships in the wheel, and the host package (C{vehicle}) imports
nothing from it (C{tests/unit/test_imports.py} keeps it so).  It holds what
stands in for the world around the host when it runs on one machine:

  - L{vehicle_local.standin}: a stand-in for gardend (the gateway that
    authenticates callers and mints identity headers, C{/mcp} with the
    document tools over a folder-backed workspace, and gardend's way of
    starting a service from its manifest);
  - L{vehicle_local.model}: the scripted OpenAI-compatible model;
  - the one-command local run (C{scripts/run}, C{python -m vehicle_local}):
    the stand-in, the model and the host as one service tree
    (L{makeLocalRun}), each child process a L{Supervised} service.
"""

from vehicle_local._run import (
    LocalRun,
    LocalRunFailed,
    LogFile,
    Options,
    main,
    makeLocalRun,
    masterKey,
    runLocally,
)
from vehicle_local._supervise import (
    ChildProcess,
    InTurn,
    ServiceFailed,
    Supervised,
    describeStatus,
    waitHealthy,
)


__all__ = [
    "ChildProcess",
    "InTurn",
    "LocalRun",
    "LocalRunFailed",
    "LogFile",
    "Options",
    "ServiceFailed",
    "Supervised",
    "describeStatus",
    "main",
    "makeLocalRun",
    "masterKey",
    "runLocally",
    "waitHealthy",
]
