"""
The pi child: its RPC wire, the translation of its events into the host's,
and the reader of its session files (transcript, active branch, fork/clone).
"""

from vehicle.body._ahead import Planner
from vehicle.body._branching import RunInThread, branch, inline
from vehicle.body._conductor import Conductor, TranscriptReader
from vehicle.body._early import PRIMING_FOLDER, Places, primingFolder
from vehicle.body._modeltext import stripContextNote
from vehicle.body._picommand import (
    agentSettings,
    bootConfig,
    findPi,
    piArgv,
    piEnvironment,
    sessionFacts,
)
from vehicle.body._spare import Spare, SpareProxy
from vehicle.body._spares import (
    PRIMING_PROMPT,
    SPARE_BUDGET,
    ChatSpares,
    SpareHolds,
    SpareKind,
    SparePool,
    SpareSetup,
    SpareSource,
    SparesUnavailable,
)
from vehicle.body._spawner import (
    EXTENSION,
    BodyPaths,
    BodyPlan,
    Launcher,
    Wrapper,
    latestSessionFile,
)
from vehicle.body._rpc import (
    MAX_LINE_BYTES,
    BodyExited,
    IBodySink,
    PiCommandError,
    PiProtocol,
)
from vehicle.body._pimessage import PiMessage, ToolCall, Usage
from vehicle.body._sessionfile import (
    MAX_TEXT_BYTES,
    BranchResult,
    Entry,
    ForkPoint,
    NothingToFork,
    SessionFile,
    TranscriptItem,
    TranscriptRole,
    branchSession,
    capText,
    parseSession,
    readSession,
)
from vehicle.body._translate import HostEvent, Translator


__all__ = [
    "PRIMING_FOLDER",
    "Places",
    "primingFolder",
    "agentSettings",
    "bootConfig",
    "findPi",
    "piArgv",
    "piEnvironment",
    "sessionFacts",
    # _spare
    "Spare",
    "SpareProxy",
    # _spares
    "PRIMING_PROMPT",
    "SPARE_BUDGET",
    "ChatSpares",
    "SpareKind",
    "SpareSetup",
    "SpareSource",
    "SparesUnavailable",
    "SparePool",
    "SpareHolds",
    # _rpc
    "MAX_LINE_BYTES",
    "BodyExited",
    "IBodySink",
    "PiCommandError",
    "PiProtocol",
    # _pimessage
    "PiMessage",
    "ToolCall",
    "Usage",
    # _sessionfile
    "MAX_TEXT_BYTES",
    "BranchResult",
    "Entry",
    "ForkPoint",
    "NothingToFork",
    "SessionFile",
    "TranscriptItem",
    "TranscriptRole",
    "branchSession",
    "capText",
    "parseSession",
    "readSession",
    # _translate
    "HostEvent",
    "Translator",
    "branch",
    "inline",
    "RunInThread",
    "Conductor",
    "TranscriptReader",
    "Planner",
    "stripContextNote",
    "EXTENSION",
    "BodyPaths",
    "BodyPlan",
    "Launcher",
    "Wrapper",
    "latestSessionFile",
]
