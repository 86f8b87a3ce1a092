# -*- test-case-name: tests.unit.test_conductor,tests.unit.test_bodypaths -*-
"""
The spawner of bodies (L{Launcher}): a session's pi child started from its
plan (L{BodyPlan}) in its folders under the session's C{pi/} (L{BodyPaths}),
with the argv and explicit environment of L{vehicle.body._picommand}, and
the boot config (provider keys and the run budget) written once to its fd 3
and closed.
"""

from __future__ import annotations

import json
import os
import stat
import time
from pathlib import Path
from typing import Callable, ClassVar

from attrs import define, field
from twisted.internet.interfaces import IProcessTransport, IReactorProcess
from twisted.internet.protocol import ProcessProtocol
from twisted.logger import Logger

from vehicle.body._picommand import (
    AGENT_TOOLS,
    PiCommand,
    agentSettings,
    bootConfig,
    findPi,
    piArgv,
    piEnvironment,
)
from vehicle.models import ModelCatalog
from vehicle.protocol import JSONObject, RunBudget
from vehicle.store import writeAtomic


EXTENSION = Path(__file__).parent / "extension" / "sophia.js"


def newestSessionFile(piDir: Path) -> tuple[Path, os.stat_result] | None:
    """
    The conversation file pi keeps in C{piDir} (the newest by time, then
    name, should there be several) and its own status (never a link's
    target's); L{None} when there is none or no such folder.  Only regular
    files count: an agent's body may write its pi folder, and a link it
    planted there must never lead the host elsewhere.
    """
    return _scan(piDir)[0]


def _scan(piDir: Path) -> tuple[tuple[Path, os.stat_result] | None, int]:
    """
    L{newestSessionFile}, and how many conversation files there are.
    """
    newest: tuple[int, str, os.stat_result] | None = None
    count = 0
    try:
        entries = os.scandir(piDir)
    except (FileNotFoundError, NotADirectoryError):
        return None, 0
    with entries:
        for entry in entries:
            if not entry.name.endswith(".jsonl"):
                continue
            try:
                st = entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue
            if not stat.S_ISREG(st.st_mode):
                continue
            count += 1
            if newest is None or (st.st_mtime_ns, entry.name) > newest[:2]:
                newest = (st.st_mtime_ns, entry.name, st)
    return (None if newest is None else (piDir / newest[1], newest[2])), count


#: A folder changed less than this long before it was read may change again
#: within one tick of its file system's clock, its time unchanged: it is
#: read again next time.
RACY_SECONDS = 2.0


@define(eq=False)
class NewestSessionFile:
    """
    L{newestSessionFile} of one folder at a time, its reading kept while the
    folder's own status (inode, times) is as it was then: an entry added,
    removed or renamed changes the folder's times, so only the one file
    found is looked at again.  Kept only when the folder holds at most one
    conversation file (with several, pi writing to an older one makes it the
    newest, the folder unchanged), and only when the folder had not changed
    for L{RACY_SECONDS} before it was read (a change within the same tick of
    the file system's clock would leave its time as it was).

    @ivar now: the wall clock, which the file system's times follow.
    """

    now: Callable[[], float] = time.time
    _folder: tuple[str, int, int, int, int] | None = None
    _file: Path | None = None

    def __call__(self, piDir: Path) -> tuple[Path, os.stat_result] | None:
        try:
            folder = os.stat(piDir, follow_symlinks=False)
        except OSError:
            self._folder = None
            return None
        key = (str(piDir), folder.st_dev, folder.st_ino, folder.st_mtime_ns, folder.st_ctime_ns)
        if key == self._folder:
            if self._file is None:
                return None
            try:
                st = os.stat(self._file, follow_symlinks=False)
            except FileNotFoundError:
                pass
            else:
                if stat.S_ISREG(st.st_mode):
                    return self._file, st
        readAt = self.now()
        found, count = _scan(piDir)
        quiet = max(folder.st_mtime_ns, folder.st_ctime_ns) < (readAt - RACY_SECONDS) * 1e9
        kept = count <= 1 and quiet and stat.S_ISDIR(folder.st_mode)
        self._folder = key if kept else None
        self._file = None if found is None else found[0]
        return found


def latestSessionFile(piDir: Path) -> Path | None:
    """
    The path of L{newestSessionFile}, when there is one.
    """
    found = newestSessionFile(piDir)
    return None if found is None else found[0]


def _ownFolder(path: Path) -> None:
    """
    Make C{path} a real folder of the host's: whatever a body left in its
    place (a link, a file) is removed, never followed.
    """
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        path.mkdir(mode=0o700, parents=True)
        return
    if stat.S_ISDIR(st.st_mode):
        return
    path.unlink()
    path.mkdir(mode=0o700)


@define(frozen=True)
class BodyPaths:
    """
    Where one body keeps its things: C{pi/} holds pi's session files,
    C{pi/agent} its private agent dir and C{pi/home} its home; C{work/} (or
    the agent's workspace) is its working folder.
    """

    piDir: Path
    agentDir: Path
    home: Path
    workDir: Path

    @classmethod
    def forSession(cls, sessionDir: Path, workDir: Path | None = None) -> "BodyPaths":
        piDir = sessionDir / "pi"
        return cls(
            piDir=piDir,
            agentDir=piDir / "agent",
            home=piDir / "home",
            workDir=workDir or sessionDir / "work",
        )

    def prepareConversation(self) -> None:
        """
        Make the folders of the conversation itself: pi's session files
        and the working folder.
        """
        for path in (self.piDir, self.workDir):
            path.mkdir(mode=0o700, parents=True, exist_ok=True)

    def prepare(self) -> None:
        self.prepareConversation()
        # Inside the pi folder, which an agent's body may write: the host
        # writes here before each body, so these must be its own folders.
        for path in (self.agentDir, self.home):
            _ownFolder(path)
        # A body may write its own agent dir: an MCP config left there could
        # redirect the graph tools' token on the next start.
        for name in ("mcp.json", "mcp-auth.json"):
            try:
                (self.agentDir / name).unlink()
            except FileNotFoundError:
                pass
        writeAtomic(
            self.agentDir / "settings.json",
            json.dumps(agentSettings()).encode("utf-8"),
        )


#: Wraps a pi argv and environment into the box's (identity for chat).
Wrapper = Callable[[list[str], dict[str, str], "BodyPaths"], tuple[list[str], dict[str, str]]]


@define(eq=False)
class BodyPlan:
    """
    How one body is to be made, beyond the defaults: its working folder,
    its providers (a boxed body gets a token and the bridge, never the
    key), the wrapper into its box, extra boot config, and what to undo
    when it is gone.
    """

    workDir: Path | None = None
    #: pi's provider configs (models.json shape), as the boot config
    #: carries them; L{None}: the catalogue's for the session's model.
    providers: dict[str, JSONObject] | None = field(default=None, repr=False)
    wrap: Wrapper | None = None
    #: More of the boot config (a boxed body's bridge, with its proxy's
    #: token): kept out of a repr, as the providers are.
    bootExtra: JSONObject | None = field(default=None, repr=False)
    box: str | None = None
    #: Undoes what the plan set up (its proxy); may return a Deferred.
    cleanup: Callable[[], object] | None = None
    #: The graph's MCP endpoint as this body reaches it; L{None}: the
    #: launcher's own (gardend's loopback /mcp), or no graph tools at all.
    mcpUrl: str | None = None
    #: More of the child's fds, each written once then closed (the box's
    #: seccomp program).
    extraFDs: dict[int, bytes] | None = None
    #: A body started ahead of its command and primed: pi starts a new
    #: session of its own in this folder (inside its pi folder, so its box
    #: shows it; never the conversation pi resumes), where it is primed
    #: before it is switched to the session's conversation.
    primingDir: Path | None = None
    #: Called when the session's command takes the body (its proxy opens
    #: to the session's provider).
    onAdopt: Callable[[], None] | None = None


@define(eq=False)
class Launcher:
    """
    Starts pi children.  Secrets reach a child only through its fd 3.
    """

    _log: ClassVar[Logger] = Logger()

    reactor: IReactorProcess
    models: ModelCatalog
    piRoot: Path
    piCommand: tuple[str, ...] | None = None
    extension: Path = EXTENSION
    #: gardend's MCP endpoint: bodies get the graph tools when it is set.
    mcpUrl: str | None = None
    _pi: PiCommand | None = field(default=None, init=False)

    def secrets(self) -> list[str]:
        """
        The provider keys a child may be handed: what its words must never
        show (L{vehicle.body._life.BodyLife.scrub}).
        """
        return list(self.models.secrets())

    def pi(self) -> PiCommand:
        if self._pi is None:
            self._pi = findPi(self.piRoot)
        return self._pi

    def spawn(
        self,
        protocol: ProcessProtocol,
        *,
        paths: BodyPaths,
        model: str,
        profile: str,
        budget: RunBudget,
        providers: dict[str, JSONObject] | None = None,
        wrap: Wrapper | None = None,
        bootExtra: JSONObject | None = None,
        mcpUrl: str | None = None,
        extraFDs: dict[int, bytes] | None = None,
        inside: BodyPaths | None = None,
        freshIn: Path | None = None,
    ) -> IProcessTransport:
        """
        Spawn C{pi --mode rpc} for a session and hand it its boot config.

        @param inside: where pi sees C{paths}, when its box binds them
            elsewhere (an agent's spare, at the session's future paths);
            C{wrap} is given C{paths}, and must bind them there.
        @param freshIn: start a new session of pi's own in this folder (as
            pi sees it) instead of resuming the session's conversation.
        """
        paths.prepare()
        argv, env = self._command(
            paths, inside, model=model, profile=profile, mcp=mcpUrl is not None, freshIn=freshIn
        )
        if wrap is not None:
            argv, env = wrap(argv, env, paths)
        if providers is None:
            name, spec = self.models.providerFor(model)
            providers = {name: spec}
        boot = bootConfig(providers=providers, budget=budget, mcpUrl=mcpUrl, extra=bootExtra)
        transport = self.reactor.spawnProcess(
            protocol,
            argv[0],
            argv,
            env=env,
            path=str(paths.workDir),
            childFDs={0: "w", 1: "r", 2: "r", 3: "w", **{fd: "w" for fd in extraFDs or {}}},
        )
        transport.writeToChild(3, boot)
        transport.closeChildFD(3)
        for fd, data in (extraFDs or {}).items():
            transport.writeToChild(fd, data)
            transport.closeChildFD(fd)
        self._log.info("Spawned pi pid={pid} in {workDir}", pid=transport.pid, workDir=str(paths.workDir))
        return transport

    def _command(
        self, paths: BodyPaths, inside: BodyPaths | None, *, model: str, profile: str, mcp: bool,
        freshIn: Path | None = None,
    ) -> tuple[list[str], dict[str, str]]:
        """
        The argv and whole environment of a pi child, before any box: it
        resumes the conversation pi keeps in C{paths.piDir}, if any (a new
        one in C{freshIn}, when given), each path named as pi sees it
        (C{inside}, when given).
        """
        pi = self.pi()
        seen = inside or paths
        current = latestSessionFile(paths.piDir) if freshIn is None else None
        argv = piArgv(
            pi,
            sessionDir=seen.piDir if freshIn is None else freshIn,
            sessionFile=seen.piDir / current.name if current is not None else None,
            extension=self.extension,
            model=model,
            tools=AGENT_TOOLS if profile == "agent" else None,
            mcp=mcp,
        )
        if self.piCommand:
            argv = list(self.piCommand) + argv[2:]
        env = piEnvironment(
            home=seen.home,
            agentDir=seen.agentDir,
            path=f"{pi.node.parent}:/usr/local/bin:/usr/bin:/bin",
        )
        return argv, env
