# -*- test-case-name: tests.unit.test_spares,tests.unit.test_preparedspares -*-
"""
Spare bodies: warm C{pi --mode rpc} children started before anyone needs
them, so a new or revived conversation's first word does not wait for Node.

A spare (L{vehicle.body._spare.Spare}, one child and its hand-off) is made
for no one: its own folders, its own empty
session there, a boot config that names no session and holds no key (only
the token of its own proxy to the model, L{SpareProxy}, which reaches no
provider until the hand-off), and no person's data.  It is primed (one
prompt that its proxy answers itself, so pi has loaded what its first real
prompt needs) and waits.

How a spare of one kind of body is set up (its folders, its proxy, its
box) is its kind's (L{SpareKind}): a chat spare's folders are in the
host's private run folder (L{ChatSpares}); an agent's are in the data dir,
bound in its box where the session it will become keeps its own
(L{vehicle.agent}).  Everything else is the pool's, whatever the kind.

A kind may make each spare for one new session's id (L{SpareSetup}'s
C{session}): once primed, pi is switched to a new file where that session
will keep its conversation, so pi's switch (its whole runtime rebuilt) is
done while the spare waits, not on anyone's way.  L{SpareHolds} keeps such
a spare for the session made with it.

L{SparePool.take} gives one to a session, once: the pool forgets it at
once, and the body it becomes dies with its session's body (a spare is
never returned).  The pool refills in the background, after a pause that
keeps a new spare's start off the CPU the handed body's first run needs,
and stops with the host.  The hand-off itself (the session's facts given
by the extension's command to a spare already on the session's file, or
pi's C{switch_session} to it, the facts asked by the extension on the way)
is the body's life's (L{vehicle.body._life.BodyLife}), with what a spare
says and answers on the way (L{vehicle.body._spare}).
"""

from __future__ import annotations

import secrets
import shutil
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Awaitable, Callable, ClassVar, Protocol

from attrs import Factory, define, field, frozen
from twisted.internet.defer import Deferred, gatherResults
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure
from zope.interface import implementer

from vehicle._timers import cancelIfActive
from vehicle.body._rpc import IBodySink, PiProtocol
from vehicle.body._sessionfile import newSessionFile
from vehicle.body._questions import answered, asksForFacts, isQuestion, refusal
from vehicle.body._spare import Spare, SpareProxy
from vehicle.body._spawner import BodyPaths, Launcher, Wrapper
from vehicle.protocol import JSONObject, RunBudget
from vehicle.session import Session
from vehicle.store import files


#: A spare's own budget, from its boot config: its one priming turn.  A
#: session's budget reaches it at the hand-off.
SPARE_BUDGET = RunBudget(maxTurns=1, maxCostUsd=0.01)

#: What a spare's priming prompt says (its proxy answers it; it stays in
#: the spare's own session, which no one ever sees).
PRIMING_PROMPT = "ready?"

#: The answer to it while a spare is switched to its session's file
#: before the hand-off: no facts yet (they come with L{vehicle.body._spare.HAND_OFF_COMMAND}).
PREPARE = '{"prepare":true}'

#: The longest pause before another try after a spare could not be made.
MAX_RETRY_SECONDS = 60.0


#: Opens the proxy of the spare named by the argument.
ProxyOpener = Callable[[str], Awaitable[SpareProxy]]


class SpareLost(Exception):
    """
    The spare ended, or the pool stopped, before it was ready.
    """


class SparesUnavailable(Exception):
    """
    No spare of this kind can be made on this host (an agent's box that
    cannot bind a spare's folders where its session will keep them): the
    pool stops trying.
    """


@frozen(kw_only=True)
class SpareSetup:
    """
    How one spare is started, as its kind sets it up.

    @ivar paths: its own folders as the host has them; the folder holding
        its pi folder is the spare's, and goes with it.
    @ivar inside: where pi sees them, when its box binds them elsewhere.
    @ivar sessionId: the session the spare is made to become, if it is
        reserved so.
    @ivar session: where that session's conversation will be (its pi
        folder and working folder, as the host has them): the spare is
        switched to a new file there before anyone needs it.
    @ivar reservedDir: a folder made for that session, which goes with the
        spare unless a session took it.
    """

    paths: BodyPaths
    proxy: SpareProxy
    profile: str = "chat"
    mcpUrl: str | None = None
    wrap: Wrapper | None = None
    extraFDs: dict[int, bytes] | None = field(default=None, repr=False)
    box: str | None = None
    inside: BodyPaths | None = None
    sessionId: str | None = None
    session: BodyPaths | None = None
    reservedDir: Path | None = None


class SpareKind(Protocol):
    """
    How a spare of one kind of body is set up.
    """

    async def setUp(self, spareId: str) -> SpareSetup:
        """
        Make the folders and open the proxy of spare C{spareId}, and say how
        it is to be started.

        @raise SparesUnavailable: no spare of this kind can be made here.
        """


@define(eq=False)
class ChatSpares:
    """
    Chat spares (L{SpareKind}): their folders in the host's private run
    folder, their proxies opened by C{openProxy}.

    With C{reserve} each is made for a new session's id: the folders of
    that session's conversation (its pi folder and working folder) are
    made where the session will keep them, and the spare is switched to a
    new file there while it waits (a new session made with it moves them
    into its folder: L{SpareHolds.moveIn}).
    """

    #: Where spares keep their folders (the host's private run folder).
    root: Callable[[], Path]
    openProxy: ProxyOpener
    #: The graph's MCP endpoint as a chat body reaches it, if any.
    mcpUrl: str | None = None
    #: Makes a session id as the registry does, and names that session's
    #: folder: each spare is made for one new session.
    reserve: tuple[Callable[[], str], Callable[[str], Path]] | None = None

    async def setUp(self, spareId: str) -> SpareSetup:
        sessionId = session = reservedDir = None
        if self.reserve is not None:
            newSessionId, sessionDir = self.reserve
            sessionId = newSessionId()
            reservedDir = sessionDir(sessionId)
            reservedDir.mkdir(mode=0o700)
            session = BodyPaths.forSession(reservedDir)
            session.prepareConversation()
        try:
            proxy = await self.openProxy(spareId)
        except BaseException:
            if reservedDir is not None:
                shutil.rmtree(reservedDir, ignore_errors=True)
            raise
        return SpareSetup(
            paths=BodyPaths.forSession(self.root() / "spares" / spareId),
            proxy=proxy,
            mcpUrl=self.mcpUrl,
            sessionId=sessionId,
            session=session,
            reservedDir=reservedDir,
        )


@define(eq=False)
class SparePool:
    """
    Keeps up to C{size} spares of one kind of body (chat, for the host's
    default model) ready, and hands each to one session.

    @ivar ready: the spares ready to be handed over, oldest first.
    @ivar making: the spares being started or primed.
    """

    _log: ClassVar[Logger] = Logger()

    launcher: Launcher
    clock: IReactorTime
    size: int
    #: The model the spares are started with.
    model: str
    #: How a spare of the pool's kind is set up.
    kind: SpareKind
    #: The pause after a hand-off before the next spare starts.
    refillSeconds: float = 2.0
    #: Prime each spare (one prompt its proxy answers) before it is ready.
    prime: bool = True
    #: The models a session of which takes a spare: the spares' own, and
    #: any other their boot config lists (through their proxy), which pi
    #: is set to at the hand-off.
    serves: frozenset[str] = field(
        default=Factory(lambda self: frozenset([self.model]), takes_self=True)
    )
    ready: list[Spare] = field(factory=list)
    making: list[Spare] = field(factory=list)
    stopped: bool = False
    #: Spares that could not be made in a row (the pause before the next
    #: try doubles with each).
    failures: int = 0
    _refill: IDelayedCall | None = None

    def start(self) -> None:
        """
        Start filling the pool.
        """
        self._fill()

    def take(self, model: str) -> Spare | None:
        """
        A ready spare for a session on C{model}, now its own (the pool
        forgets it), or L{None}: none is ready, the pool is stopped, or the
        spares do not serve the model.  The pool refills after
        L{refillSeconds}.
        """
        if self.stopped or model not in self.serves or not self.ready:
            return None
        spare = self.ready.pop(0)
        self._scheduleFill(self.refillSeconds)
        return spare

    async def spareFor(self, session: Session) -> Spare | None:
        """
        A ready spare for C{session}'s next body (L{SpareSource}).
        """
        return self.take(session.meta.model)

    def stop(self) -> Deferred[None]:
        """
        The host stops: no more spares, and every spare not handed over
        ends (its folders and proxy go with it).
        """
        self.stopped = True
        cancelIfActive(self._refill)
        self._refill = None
        spares, self.ready = self.ready + self.making, []
        self.making = []
        return gatherResults(
            [Deferred.fromCoroutine(self._end(spare)) for spare in spares], consumeErrors=True
        ).addCallback(lambda _: None)

    def lost(self, spare: Spare, exitCode: int | None, signal: int | None) -> None:
        """
        A spare ended by itself before it was handed over.
        """
        if spare.settled is not None and not spare.settled.called:
            spare.settled.errback(SpareLost(spare.spareId))
        if spare in self.ready:
            self.ready.remove(spare)
            self._log.warn(
                "Spare {spareId} ended (exit {exitCode}, signal {signal})",
                spareId=spare.spareId, exitCode=exitCode, signal=signal,
            )
            self._discard(spare)
            self._scheduleFill(self.refillSeconds)

    # -- making ---------------------------------------------------------------

    def _scheduleFill(self, delay: float) -> None:
        if self.stopped or (self._refill is not None and self._refill.active()):
            return
        self._refill = self.clock.callLater(delay, self._fill)

    def _fill(self) -> None:
        self._refill = None
        if self.stopped:
            return
        # As many as are missing now, once each: a spare that fails at once
        # (its process could not be started) is retried after its pause,
        # not again in this loop.
        for _ in range(self.size - len(self.ready) - len(self.making)):
            self._startOne()

    def _startOne(self) -> None:
        spareId = "spare-" + secrets.token_hex(8)
        sink = _SpareSink(pool=self)
        made = Deferred.fromCoroutine(self._make(spareId, sink))
        made.addCallbacks(self._madeOne, self._notMade)

    async def _make(self, spareId: str, sink: _SpareSink) -> Spare:
        setup = await self.kind.setUp(spareId)
        proxy = setup.proxy
        spare = Spare(
            spareId=spareId,
            paths=setup.paths,
            proxy=proxy,
            protocol=PiProtocol(sink),
            model=self.model,
            inside=setup.inside,
            sessionId=setup.sessionId,
            box=setup.box,
            session=setup.session,
            reservedDir=setup.reservedDir,
        )
        sink.spare = spare
        self.making.append(spare)
        try:
            if self.stopped:
                raise SpareLost(spareId)
            spare.transport = self.launcher.spawn(
                spare.protocol,
                paths=spare.paths,
                model=self.model,
                profile=setup.profile,
                budget=SPARE_BUDGET,
                providers=proxy.providers,
                bootExtra={**proxy.bootExtra, "spare": True},
                mcpUrl=setup.mcpUrl,
                wrap=setup.wrap,
                extraFDs=setup.extraFDs,
                inside=setup.inside,
            )
            state = await spare.protocol.request({"type": "get_state"})
            ownFile = state.get("sessionFile")
            spare.ownFile = ownFile if isinstance(ownFile, str) else None
            if self.prime:
                spare.settled = Deferred()
                await spare.protocol.request({"type": "prompt", "message": PRIMING_PROMPT})
                await spare.settled
            if spare.session is not None:
                await self._prepare(spare)
            if spare not in self.making:
                # The pool stopped meanwhile (its stop takes every spare
                # being made, and ends it).
                raise SpareLost(spareId)
        except Exception:
            if spare in self.making:
                self.making.remove(spare)
            if spare.settled is not None:
                # Nobody waits for the priming any more.
                spare.settled.addErrback(lambda _: None)
            await self._end(spare)
            raise
        self.making.remove(spare)
        return spare

    async def _prepare(self, spare: Spare) -> None:
        """
        Switch C{spare} to a new file where the session it is made for
        will keep its conversation (pi rebuilds its runtime for a switch:
        done now, not when someone waits), and let go of its own.
        """
        session = spare.session
        assert session is not None
        seen = spare.inside or session
        made = newSessionFile(
            session.piDir,
            sessionId=str(uuid.uuid4()),
            now=datetime.fromtimestamp(self.clock.seconds(), timezone.utc),
            cwd=seen.workDir,
        )
        assert spare.sessionId is not None
        await spare.switchTo(seen.piDir / made.name, spare.sessionId)
        if spare.ownFile is not None and Path(spare.ownFile).parent == seen.piDir:
            # Its priming, kept where its session's conversation will be.
            (session.piDir / Path(spare.ownFile).name).unlink(missing_ok=True)

    def _madeOne(self, spare: Spare) -> None:
        self.failures = 0
        self.ready.append(spare)
        self._log.info("Spare {spareId} is ready", spareId=spare.spareId)

    def _notMade(self, failure: Failure) -> None:
        if self.stopped:
            return
        if failure.check(SparesUnavailable):
            self._log.info("No spare bodies here: {reason}", reason=str(failure.value))
            self.stopped = True
            return
        self.failures += 1
        delay = min(MAX_RETRY_SECONDS, self.refillSeconds * 2 ** min(self.failures, 32))
        self._log.warn(
            "A spare body could not be made ({error}); the next try in {delay} s",
            error=str(failure.value), delay=delay,
        )
        self._scheduleFill(delay)

    async def _end(self, spare: Spare) -> None:
        await spare.end(self.clock)

    def _discard(self, spare: Spare) -> Deferred[None]:
        return spare.discard()


@define(eq=False)
class SpareHolds:
    """
    The spares of a pool whose kind makes each for one new session's id:
    one is taken when such a session is made (L{reserve}: the session gets
    its id, and L{moveIn} its folders), and held for that session's first
    command (L{spareFor}), or ended.  A session that did not get one at its
    making (a revived one) may take any ready spare, switched to its file.
    """

    _log: ClassVar[Logger] = Logger()

    pool: SparePool
    clock: IReactorTime
    #: How long a reserved spare waits for its session's first command.
    holdSeconds: float = 600.0
    held: dict[str, Spare] = field(factory=dict)
    _timers: dict[str, IDelayedCall] = field(factory=dict)

    def start(self) -> None:
        self.pool.start()

    def reserve(self, model: str) -> str | None:
        """
        Take a ready spare for a session about to be made on C{model}: the
        id that session must have, or L{None} (none ready).
        """
        spare = self.pool.take(model)
        if spare is None:
            return None
        sessionId = spare.sessionId
        if sessionId is None or spare.prepared is None:
            spare.end(self.clock).addErrback(self._lost, spare)
            return None
        self.held[sessionId] = spare
        self._timers[sessionId] = self.clock.callLater(
            self.holdSeconds, self.unreserve, sessionId
        )
        return sessionId

    def moveIn(self, sessionId: str, building: Path) -> None:
        """
        The folders made for the session (its pi folder, with the file the
        spare is on, and its working folder) become those of its folder
        being built, each by a rename on the data dir's filesystem (the
        publication's sync of that folder makes them durable).  pi writes
        nothing while it waits; once the folder is renamed into place its
        file is where pi has it again.
        """
        spare = self.held.get(sessionId)
        if spare is None or spare.session is None:
            return
        layer = files()
        for name, source in (("pi", spare.session.piDir), ("work", spare.session.workDir)):
            layer.rmdir(building / name)
            layer.rename(source, building / name)
        spare.claimed = True
        if spare.reservedDir is not None:
            layer.rmdir(spare.reservedDir)

    def release(self, sessionId: str) -> Spare | None:
        cancelIfActive(self._timers.pop(sessionId, None))
        return self.held.pop(sessionId, None)

    def unreserve(self, sessionId: str) -> None:
        """
        The spare held for C{sessionId}, if any, will not be handed over
        (its session was not made, was deleted, or waited too long): it
        ends.
        """
        spare = self.release(sessionId)
        if spare is not None:
            spare.end(self.clock).addErrback(self._lost, spare)

    async def spareFor(self, session: Session) -> Spare | None:
        """
        The spare held for C{session}, else a ready one (L{SpareSource}).
        """
        spare = self.release(session.sessionId)
        if spare is not None:
            if not spare.protocol.hasEnded:
                return spare
            spare.end(self.clock).addErrback(self._lost, spare)
        return await self.pool.spareFor(session)

    def stop(self) -> Deferred[None]:
        """
        The host stops: the pool's spares and every held one end.
        """
        ending = [self.pool.stop()]
        for sessionId in list(self.held):
            spare = self.release(sessionId)
            if spare is not None:
                ending.append(spare.end(self.clock))
        return gatherResults(ending, consumeErrors=True).addCallback(lambda _: None)

    def _lost(self, failure: Failure, spare: Spare) -> None:
        self._log.failure("Spare {spareId} did not end cleanly", failure, spareId=spare.spareId)


class SpareSource(Protocol):
    """
    Where a session's next body may be taken from, warm: the chat pool (by
    model), or an agent's spare reserved for that very session.
    """

    async def spareFor(self, session: Session) -> Spare | None:
        """
        A spare to hand to C{session} now, or L{None}: start a body.
        """


@implementer(IBodySink)
@define(eq=False)
class _SpareSink:
    """
    Hears a spare until it is handed over: its priming run's end, and its
    exit; the extension's questions are answered no (a spare has no
    session, no token, no facts).
    """

    pool: SparePool
    spare: Spare | None = None

    def piEvent(self, event: JSONObject) -> None:
        spare = self.spare
        if spare is None:
            return
        if isQuestion(event):
            if spare.preparing and asksForFacts(event):
                spare.protocol.send(answered(event, PREPARE))
            else:
                spare.protocol.send(refusal(event))
        elif (
            event.get("type") == "agent_settled"
            and spare.settled is not None
            and not spare.settled.called
        ):
            spare.settled.callback(None)

    def bodyExited(self, exitCode: int | None, signal: int | None, stderrTail: str) -> None:
        if self.spare is not None:
            self.pool.lost(self.spare, exitCode, signal)
