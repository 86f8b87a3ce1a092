# -*- test-case-name: tests.unit.test_agentspares -*-
"""
Spare agent bodies: warm boxed pi children, each made to become one new
agent session.

A box's mounts are fixed for its process, so a spare cannot be boxed for
whoever comes: it reserves the id of the session it will become (made the
way the registry makes them) and its box binds its own folders, made
empty in the data dir (C{spares/<spareId>/pi} and C{.../workspace}),
where that session will keep its own (C{sessions/<id>/pi},
C{workspaces/<id>}).  pi's argv, environment and boot config name those
paths.  When a new agent session takes the spare, the folders are renamed
into place (L{vehicle.agent.AgentProfile.makeFolders}); a bind follows the
folder, so the running box sees them where it always did.

Until the hand-off the spare's proxy reaches no provider (it answers the
priming itself) and its boot config holds only the proxy's token; at the
hand-off the proxy opens to the session's provider, metered by the
session's conductor, and is the session's body's proxy from then on.
"""

from __future__ import annotations

import shutil
from typing import Callable

from attrs import define, field
from twisted.internet.defer import Deferred

from vehicle.body import BodyPaths, Launcher, SparePool, SpareSetup, SparesUnavailable
from vehicle.box import ModelProxy, seccompProgram, throughProxy
from vehicle.errors import VehicleError
from vehicle.protocol import JSONObject
from vehicle.session import Session

from vehicle.agent._profile import SECCOMP_FD, AgentProfile


@define(eq=False)
class AgentSpareProxy:
    """
    An agent spare's way to the model (L{vehicle.body.SpareProxy}): a
    proxy on the socket its session's bodies use, with no provider until
    the hand-off.
    """

    profile: AgentProfile
    proxy: ModelProxy
    #: The session the spare is made to become.
    sessionId: str
    providers: dict[str, JSONObject] = field(repr=False)
    #: The bridge's socket and the proxy's token: kept out of a repr, as
    #: the providers are (a token is no line for a log).
    bootExtra: JSONObject = field(repr=False)

    def handTo(self, session: Session) -> None:
        """
        The session's provider from now on, metered by its conductor; the
        proxy is the session's body's (closed with it, or when its next
        body opens another).
        """
        model, gate = self.profile.upstreamFor(session)
        self.proxy.handTo(model, gate)
        self.profile.proxies[session.sessionId] = self.proxy

    def close(self) -> Deferred[None]:
        if self.profile.proxies.get(self.sessionId) is self.proxy:
            del self.profile.proxies[self.sessionId]
        return Deferred.fromCoroutine(self.proxy.close())


@define(eq=False)
class AgentSpares:
    """
    How an agent spare is set up (L{vehicle.body.SpareKind}): only in a
    bwrap box, whose binds can put a folder at another path inside (a
    seatbelt box cannot, and a body with no box holds its key).
    """

    profile: AgentProfile
    #: Makes a session id as the registry does.
    newSessionId: Callable[[], str]

    async def setUp(self, spareId: str) -> SpareSetup:
        profile = self.profile
        try:
            tier = await profile.decide()
        except VehicleError as e:
            raise SparesUnavailable(e.message) from e
        if tier != "bwrap":
            raise SparesUnavailable(
                f"agent bodies are boxed by {tier} here; only a bwrap box can bind a"
                " spare's folders where its session will keep them"
            )
        sessionId = self.newSessionId()
        dataDir = profile.dataDir
        folder = dataDir.spares / spareId
        dataDir.spares.mkdir(mode=0o700, exist_ok=True)
        folder.mkdir(mode=0o700)
        paths = BodyPaths.forSession(folder, workDir=folder / "workspace")
        paths.prepareConversation()
        proxy = profile.newProxy(sessionId, model=None)
        try:
            await proxy.listen()
        except BaseException:
            shutil.rmtree(folder, ignore_errors=True)
            raise
        # pi sees its folders where the session will have them.
        inside = BodyPaths.forSession(
            dataDir.sessionDir(sessionId), workDir=dataDir.workspaceDir(sessionId)
        )
        return SpareSetup(
            paths=paths,
            proxy=AgentSpareProxy(
                profile=profile,
                proxy=proxy,
                sessionId=sessionId,
                # Every model of the host: pi is set to its session's at
                # the hand-off.
                providers=profile.everyProviderFor(proxy),
                bootExtra=profile.bridgeFor(proxy),
            ),
            profile="agent",
            mcpUrl=profile.mcpFor(proxy),
            wrap=profile.wrapper(proxy, seccompFd=SECCOMP_FD, inside=inside),
            extraFDs={SECCOMP_FD: seccompProgram()},
            box="bwrap",
            inside=inside,
            sessionId=sessionId,
            # Its folders are the session's: pi is switched to a new file
            # there while the spare waits.
            session=paths,
        )


def agentSpares(
    profile: AgentProfile,
    *,
    launcher: Launcher,
    model: str | None,
    size: int,
    refillSeconds: float,
    newSessionId: Callable[[], str],
) -> SparePool | None:
    """
    The pool of agent spares, started on C{model} (the catalogue's
    default) and serving a session on any model of the catalogue, or
    L{None} when there are to be none (size 0, no model).
    """
    if size < 1 or model is None:
        return None
    return SparePool(
        launcher=launcher,
        clock=profile.reactor,
        size=size,
        model=model,
        serves=throughProxy(profile.models),
        kind=AgentSpares(profile=profile, newSessionId=newSessionId),
        refillSeconds=refillSeconds,
    )
