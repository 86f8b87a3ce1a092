# -*- test-case-name: tests.unit.test_agent -*-
"""
The agent profile, wired: who may create one, the isolation decision (with
its probe), the session's workspace and the identities of its folders, and
the box every agent body is started in, with the model reached only through
the host's proxy.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Callable, ClassVar

from attrs import define, field
from twisted.internet.defer import Deferred, succeed
from twisted.logger import Logger
from twisted.python.failure import Failure

from vehicle._pids import alive
from vehicle._reactors import IHostReactor
from vehicle.body import (
    BodyPaths, BodyPlan, Spare, SpareHolds, SparePool, Wrapper, primingFolder,
)
from vehicle.box import (
    BoxSpec,
    SeatbeltSpec,
    Spawner,
    seatbeltArgv,
    seatbeltEnvironment,
    FolderIdentity,
    ModelProxy,
    Upstream,
    bwrapArgv,
    canonicalSpec,
    decideIsolation,
    seccompProgram,
    reachesThroughProxy,
    systemRoots,
    throughProxy,
)
from vehicle.errors import VehicleError
from vehicle.metrics import Metrics, unserved
from vehicle.models import ModelCatalog
from vehicle.protocol import JSON, CreateRequest, JSONObject
from vehicle.session import Caller, FolderRecord, Session
from vehicle.store import DataDir, files, fsyncDirectory


#: Where, inside the box, the body's bridge listens for the model.
BRIDGE_PORT = 18080

#: The child fd bwrap reads the box's seccomp program from.
SECCOMP_FD = 4


@define(eq=False)
class AgentProfile:
    """
    Everything agent-specific the rest of the host asks for.
    """

    _log: ClassVar[Logger] = Logger()

    reactor: IHostReactor
    dataDir: DataDir
    models: ModelCatalog
    isolation: str
    agentUnisolated: bool
    piRoot: Path
    extensionDir: Path
    mcpUrl: str | None = None
    platform: str = sys.platform
    bwrap: str = "/usr/bin/bwrap"
    #: Folders never to show a box (the host's home, gardend's profile).
    hidden: tuple[Path, ...] = field(factory=lambda: (Path.home(),))
    #: Spawns the bwrap probe (tests hand in a fake); the reactor when L{None}.
    spawner: Spawner | None = None
    #: Where each probe of the box is counted.
    metrics: Metrics = field(factory=unserved)
    proxies: dict[str, ModelProxy] = field(factory=dict)
    #: Where run folders are made (a short path: the system's temp folder).
    runRoot: Path | None = None
    #: Warm agent bodies, each made to become one new session
    #: (L{vehicle.agent.agentSpares}), held for the session made with it,
    #: if kept.
    holds: SpareHolds | None = None
    #: How long a reserved spare waits for its session's first command.
    spareHoldSeconds: float = 600.0
    _runDir: Path | None = None

    @property
    def spares(self) -> SparePool | None:
        """
        The pool of agent spares, if kept.
        """
        return self.holds.pool if self.holds is not None else None

    @property
    def reserved(self) -> dict[str, Spare]:
        """
        The spares reserved, by their session's id.
        """
        holds = self.holds
        return holds.held if holds is not None else {}

    # -- creation -----------------------------------------------------------

    async def decide(self) -> str:
        """
        The isolation tier agent bodies get here, after probing the box.

        @raise VehicleError: C{isolation_unavailable}, with the reason.
        """
        decision = await decideIsolation(
            self.reactor,
            isolation=self.isolation,
            agentUnisolated=self.agentUnisolated,
            platform=self.platform,
            bwrap=self.bwrap,
            spawner=self.spawner,
        )
        if decision.probed:
            self.metrics.boxProbed(decision.ok)
        if not decision.ok:
            raise VehicleError(
                "isolation_unavailable", decision.reason or "agent bodies cannot be boxed here"
            )
        return decision.tier

    async def checkCreate(self, caller: Caller, request: CreateRequest, model: str) -> str:
        """
        The isolation tier a new agent session on C{model} gets (L{decide}).

        @raise VehicleError: C{model_unavailable} when its body would be
            boxed and C{model}'s API is not one its proxy speaks (every
            request would be refused).
        """
        tier = await self.decide()
        if tier != "none" and not reachesThroughProxy(self.models, model):
            usable: list[JSON] = [name for name in sorted(throughProxy(self.models))]
            raise VehicleError(
                "model_unavailable",
                f"a boxed agent cannot use {model!r}: its API ({self.models.apiOf(model)}) "
                "is not one an agent's model proxy speaks",
                {"models": usable},
            )
        return tier

    def runDir(self) -> Path:
        """
        Where the proxies' sockets live: a short path (a Unix socket's path is
        at most 107 bytes), made fresh and private (mode 0700, a random name)
        by this host process, so nobody else can have made it first.
        """
        if self._runDir is None or not self._runDir.is_dir():
            self._runDir = Path(
                tempfile.mkdtemp(prefix=f"{self._runPrefix()}{os.getpid()}-", dir=self.runRoot)
            )
        return self._runDir

    def _runPrefix(self) -> str:
        digest = hashlib.sha256(str(self.dataDir.root).encode()).hexdigest()[:8]
        return f"vehicle-{digest}-"

    def removeRunDir(self) -> None:
        """
        The host stops: its run folder (the proxies' sockets, all closed by
        now) goes with it.
        """
        if self._runDir is not None:
            shutil.rmtree(self._runDir, ignore_errors=True)
            self._runDir = None

    def sweepRunDirs(self) -> list[Path]:
        """
        The host starts: remove the run folders an earlier host of this
        data dir left (it was killed), named by a process that is gone.
        Only this user's folders, never this process's current one.

        @return: the folders removed.
        """
        root = Path(self.runRoot or tempfile.gettempdir())
        prefix = self._runPrefix()
        removed = []
        for path in root.glob(f"{prefix}*"):
            pid = path.name[len(prefix):].split("-", 1)[0]
            if path == self._runDir or path.is_symlink() or not path.is_dir():
                continue
            if path.stat().st_uid != os.getuid():
                continue
            if pid.isdigit() and alive(int(pid)):
                continue
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
        if removed:
            self._log.info(
                "Removed {count} run folders an earlier host left: {paths}",
                count=len(removed),
                paths=", ".join(str(p) for p in removed),
            )
        return removed

    def makeFolders(self, sessionId: str, sessionDir: Path) -> dict[str, FolderRecord]:
        """
        Make the workspace, or move in the folders of the spare reserved
        for the session (L{reserveSpare}); record both folders' identities
        as they are then (kept in the session's meta, checked before every
        body).
        """
        spare = self.reserved.get(sessionId)
        if spare is not None:
            self._moveSpareFolders(spare, sessionId, sessionDir)
        else:
            workspace = self.dataDir.workspaceDir(sessionId)
            workspace.mkdir(mode=0o700, parents=False, exist_ok=False)
        return self.recordFolders(sessionId, sessionDir)

    def _moveSpareFolders(self, spare: Spare, sessionId: str, sessionDir: Path) -> None:
        """
        The spare's pi folder becomes the session's (in its folder being
        built) and its workspace the session's workspace, each by a rename
        on the data dir's filesystem; the spare's box, whose binds follow
        the folders, already sees them where the session has them.  A host
        cut between here and the session's publication leaves a folder
        being built and a workspace of no session, which start removes.
        """
        layer = files()
        # The empty pi folder the maker made gives way to the spare's.
        layer.rmdir(sessionDir / "pi")
        layer.rename(spare.paths.piDir, sessionDir / "pi")
        layer.rename(spare.paths.workDir, self.dataDir.workspaceDir(sessionId))
        # (The spare's own session, its priming, went from its pi folder
        # when it was switched to its session's file: nothing to copy.)
        fsyncDirectory(sessionDir)
        fsyncDirectory(self.dataDir.workspaces)

    def recordFolders(self, sessionId: str, sessionDir: Path) -> dict[str, FolderRecord]:
        """
        Record the identities of an agent's folders as they are now.
        """
        workspace = self.dataDir.workspaceDir(sessionId)
        return {
            "workspace": _identity(workspace),
            "pi": _identity(sessionDir / "pi"),
        }

    # -- spares -------------------------------------------------------------

    def startSpares(self) -> None:
        """
        The host starts: agent spares are made, in the background.
        """
        if self.spares is not None:
            self.spares.start()

    def reserveSpare(self, model: str, tier: str) -> str | None:
        """
        A new agent session on C{model}, boxed by C{tier}, is about to be
        made: take a ready spare for it, if there is one, and return the id
        the session must have (the spare's box binds its folders where that
        session's are).  L{makeFolders} moves them in; the first command
        hands the spare over (L{spareFor}); L{unreserve} lets it go.  A
        spare waits L{spareHoldSeconds} for its session's first command.
        """
        holds = self.holds
        if holds is None or tier != "bwrap":
            return None
        return holds.reserve(model)

    def _release(self, sessionId: str) -> Spare | None:
        holds = self.holds
        return holds.release(sessionId) if holds is not None else None

    def unreserve(self, sessionId: str) -> None:
        """
        The spare reserved for C{sessionId}, if any, will not be handed
        over (its session was not made, was deleted, or waited too long):
        it ends, and only its own folder goes (its session's folders, moved
        out of it, stay).
        """
        if self.holds is not None:
            self.holds.unreserve(sessionId)

    async def spareFor(self, session: Session) -> Spare | None:
        """
        The spare reserved for C{session}, to hand over as its first body
        (L{vehicle.body.SpareSource}), once the box is still there and the
        folders are still the host's; L{None}: start a body.

        @raise VehicleError: C{body_tampered} (the spare is let go).
        """
        spare = self._release(session.sessionId)
        if spare is None:
            return None
        # Its box runs already: no box is made, so there is no probe to
        # make before it is handed over (only the folders to check).
        try:
            self.checkFolders(session)
        except BaseException:
            spare.end(self.reactor).addErrback(self._lostSpare, spare)
            raise
        if spare.protocol.hasEnded:
            spare.end(self.reactor).addErrback(self._lostSpare, spare)
            return None
        return spare

    def stopSpares(self) -> Deferred[None]:
        """
        The host stops: the pool's spares and every reserved one end.
        """
        holds = self.holds
        return holds.stop() if holds is not None else succeed(None)

    def _lostSpare(self, failure: Failure, spare: Spare) -> None:
        self._log.failure("Spare {spareId} did not end cleanly", failure, spareId=spare.spareId)

    # -- bodies -------------------------------------------------------------

    def workDir(self, session: Session) -> Path:
        return self.dataDir.workspaceDir(session.sessionId)

    def checkFolders(self, session: Session) -> None:
        """
        The workspace and pi folder must still be the folders the host made.

        @raise VehicleError: C{body_tampered}.
        """
        for name, recorded in (session.meta.folders or {}).items():
            identity = FolderIdentity(
                path=recorded.path, device=recorded.device, inode=recorded.inode
            )
            problem = identity.verify()
            if problem is not None:
                raise VehicleError(
                    "body_tampered",
                    f"the agent's {name} folder is not the one the host made: {problem}",
                    {"folder": name},
                )

    async def precheck(self, session: Session) -> None:
        """
        Could a body be made for this session now?  (Chat: always.)
        """
        if session.meta.profile != "agent":
            return
        spare = self.reserved.get(session.sessionId)
        conductor = session.conductor
        try:
            if (spare is None or spare.protocol.hasEnded) and not (
                conductor is not None and conductor.startedAhead()
            ):
                # A body would be made (a box started): probe first.  (Not
                # for a body started at the claim: its box runs already.)
                await self.decide()
            self.checkFolders(session)
        except VehicleError:
            # No body may start: a spare reserved for it will not be one.
            self.unreserve(session.sessionId)
            raise

    async def plan(self, session: Session) -> BodyPlan:
        """
        Before each agent body: probe the box, check the folders, open the
        body's proxy to the model, and say how to box it.
        """
        return await self._plan(session, primed=False)

    async def planAhead(self, session: Session) -> BodyPlan:
        """
        The plan of a body started at its driver's claim, before any
        command (L{vehicle.body.BodyLife.ahead}): as L{plan}, and in a box
        primed before it is switched to the conversation (pi starts a new
        session of its own in the session's pi folder's
        L{vehicle.body.PRIMING_FOLDER}, which its box shows, and its proxy
        answers that one priming prompt itself); the proxy reaches the
        session's provider once a command adopts the body.
        """
        return await self._plan(session, primed=True)

    async def _plan(self, session: Session, primed: bool) -> BodyPlan:
        tier = await self.decide()
        self.checkFolders(session)
        workDir = self.workDir(session)
        if tier == "none":
            # The operator's choice: no box, so the body holds its key as a
            # chat body does (there is no box to keep it out of).
            return BodyPlan(workDir=workDir, box="none")
        proxy = await self.openProxy(session, primed=primed)
        # A bwrap box has a loopback of its own; a seatbelt box shares the
        # host's, so its bridge takes any free port (the extension puts it
        # in place of the 0).
        port = BRIDGE_PORT if tier == "bwrap" else 0
        program = seccompProgram() if tier == "bwrap" else None
        primingDir: Path | None = None
        if primed:
            primingDir = primingFolder(BodyPaths.forSession(session.directory).piDir)
        return BodyPlan(
            primingDir=primingDir,
            onAdopt=(lambda: proxy.handTo(*self.upstreamFor(session))) if primed else None,
            workDir=workDir,
            providers=self.providersFor(session.meta.model, proxy, port),
            wrap=(
                self.wrapper(proxy, seccompFd=SECCOMP_FD if program else None)
                if tier == "bwrap"
                else self.seatbeltWrapper(proxy)
            ),
            extraFDs={SECCOMP_FD: program} if program else None,
            bootExtra=self.bridgeFor(proxy, port),
            box=tier,
            mcpUrl=self.mcpFor(proxy, port),
            cleanup=lambda: Deferred.fromCoroutine(self.closeProxy(session, proxy)),
        )

    async def openProxy(self, session: Session, primed: bool = False) -> ModelProxy:
        """
        The body's proxy to the model (and to MCP): a fresh token each body.
        C{primed}: it reaches no provider until handed to the session (it
        answers one priming prompt itself, as a spare's).
        """
        await self.closeProxy(session)
        if primed:
            proxy = self.newProxy(session.sessionId, None)
        else:
            proxy = self.newProxy(session.sessionId, *self.upstreamFor(session))
        await proxy.listen()
        self.proxies[session.sessionId] = proxy
        return proxy

    def newProxy(
        self, sessionId: str, model: Upstream | None, gate: Callable[[], str | None] | None = None,
    ) -> ModelProxy:
        """
        A proxy for a body of session C{sessionId} (not listening yet): to
        C{model} (L{None} for a spare's, until its hand-off), and to MCP.
        """
        return ModelProxy(
            reactor=self.reactor,
            socketPath=self.runDir() / sessionId / "model.sock",
            model=model,
            mcp=Upstream(baseUrl=self.mcpUrl) if self.mcpUrl else None,
            gate=gate,
        )

    def upstreamFor(self, session: Session) -> tuple[Upstream, Callable[[], str | None]]:
        """
        Where a body of C{session} reaches its model (the host holding the
        key), and the gate its proxy asks before each request (the
        session's meter).
        """
        return (
            Upstream.provider(self.models, session.meta.model),
            lambda: session.conductor.meterModelRequest() if session.conductor else None,
        )

    async def closeProxy(self, session: Session, proxy: ModelProxy | None = None) -> None:
        """
        Close C{proxy} (a body's, gone), or the session's newest; the
        session's newest is forgotten only if it is the one closed (a body
        ended late does not take a newer body's proxy with it).
        """
        if proxy is None:
            proxy = self.proxies.get(session.sessionId)
        if proxy is None:
            return
        if self.proxies.get(session.sessionId) is proxy:
            del self.proxies[session.sessionId]
        await proxy.close()

    def providersFor(
        self, model: str, proxy: ModelProxy, port: int = BRIDGE_PORT
    ) -> dict[str, JSONObject]:
        """
        The boot config's providers for a boxed body on C{model}: the
        token, and the bridge's loopback address, never the real key or URL.
        """
        name, _ = self.models.providerFor(model)
        return {name: self.everyProviderFor(proxy, port)[name]}

    def everyProviderFor(
        self, proxy: ModelProxy, port: int = BRIDGE_PORT
    ) -> dict[str, JSONObject]:
        """
        The boot config's providers for a boxed body that may be set to any
        model of the host (a spare): each as L{providersFor} gives it.
        """
        return self.models.throughProxy(f"http://127.0.0.1:{port}/v1", proxy.token)

    @staticmethod
    def bridgeFor(proxy: ModelProxy, port: int = BRIDGE_PORT) -> JSONObject:
        """
        The boot config's bridge for a boxed body: the proxy's socket, the
        port inside, the proxy's token.
        """
        return {"bridge": {"socket": str(proxy.socketPath), "port": port, "token": proxy.token}}

    @staticmethod
    def mcpFor(proxy: ModelProxy, port: int = BRIDGE_PORT) -> str | None:
        """
        The graph's MCP endpoint as a boxed body reaches it (its bridge).
        """
        return f"http://127.0.0.1:{port}/mcp" if proxy.mcp is not None else None

    def wrapper(
        self, proxy: ModelProxy, seccompFd: int | None = None, inside: BodyPaths | None = None,
    ) -> Wrapper:
        """
        Wrap a pi argv into the bwrap box: its own folders writable (seen
        where C{inside} says, when given: a spare's, where its session
        will keep them), the proxy's folder bound in, the home and the data
        dir out of sight.
        """

        def wrap(
            argv: list[str], env: dict[str, str], paths: BodyPaths
        ) -> tuple[list[str], dict[str, str]]:
            spec = canonicalSpec(
                BoxSpec(
                    bwrap=self.bwrap,
                    workspace=paths.workDir,
                    piDir=paths.piDir,
                    workspaceAt=inside.workDir if inside is not None else None,
                    piDirAt=inside.piDir if inside is not None else None,
                    readOnly=(self.piRoot, self.extensionDir),
                    hidden=tuple(self.hidden) + (self.dataDir.root,),
                    socketDir=proxy.socketPath.parent,
                    env=env,
                    command=argv,
                    # Only the system: no host folder but the body's own,
                    # so no socket planted anywhere else is reachable.
                    system=systemRoots(),
                    seccompFd=seccompFd,
                )
            )
            # bwrap's own environment is visible inside as /proc/1/environ.
            return bwrapArgv(spec), {"PATH": "/usr/bin:/bin"}

        return wrap


    def seatbeltWrapper(self, proxy: ModelProxy) -> Wrapper:
        """
        Wrap a pi argv into the macOS seatbelt box (C{sandbox-exec}): the
        same rules as the bwrap box, written as a profile whose paths are
        all parameters.  Tested as text here; it cannot run on Linux.
        """

        def wrap(
            argv: list[str], env: dict[str, str], paths: BodyPaths
        ) -> tuple[list[str], dict[str, str]]:
            tmpDir = paths.piDir / "tmp"
            tmpDir.mkdir(mode=0o700, exist_ok=True)
            spec = SeatbeltSpec(
                workspace=paths.workDir,
                piDir=paths.piDir,
                tmpDir=tmpDir,
                readOnly=(self.piRoot, self.extensionDir),
                hidden=tuple(self.hidden) + (self.dataDir.root,),
                socketDir=proxy.socketPath.parent,
                env=env,
                command=argv,
            )
            return seatbeltArgv(spec), dict(seatbeltEnvironment(spec))

        return wrap


def _identity(path: Path) -> FolderRecord:
    identity = FolderIdentity.record(path)
    return FolderRecord(path=str(identity.path), device=identity.device, inode=identity.inode)
