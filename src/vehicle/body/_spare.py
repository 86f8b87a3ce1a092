# -*- test-case-name: tests.unit.test_spares,tests.unit.test_preparedspares -*-
"""
One spare body (L{Spare}): a warm C{pi --mode rpc} child made for no one,
with its own folders, its own empty session and its own proxy to the model
(L{SpareProxy}), which holds the key and reaches no provider until the
spare is handed to a session.

What a spare does at its hand-off lives here: the command that gives the
session's facts to a spare already on the session's file, the answers to
the extension's questions on the way (the facts; the others held for the
session), and the plan of the body it becomes.  The pool that makes spares
and gives them out is L{vehicle.body._spares}; the hand-off's steps are
the body's life's (L{vehicle.body._life.BodyLife}).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import ClassVar, Protocol

from attrs import define, field
from twisted.internet.defer import Deferred, succeed
from twisted.internet.interfaces import IProcessTransport, IReactorTime
from twisted.logger import Logger
from zope.interface import implementer

from vehicle.body._questions import answered, asksForFacts, isQuestion
from vehicle.body._rpc import IBodySink, PiProtocol, switchSession
from vehicle.body._spawner import BodyPaths, BodyPlan
from vehicle.protocol import JSONObject
from vehicle.session import Session


#: The extension's command a spare already on its session's file is handed
#: over with: C{/sophia-session <the session's facts>}.
HAND_OFF_COMMAND = "/sophia-session"

class SpareProxy(Protocol):
    """
    A spare's way to the model: the host's proxy, which holds the key and
    reaches no provider until the spare is handed to a session.
    """

    #: The boot config's providers: the proxy's token and the bridge's
    #: address, never a key.
    providers: dict[str, JSONObject]
    #: The rest of the boot config the proxy needs (the bridge).
    bootExtra: JSONObject

    def handTo(self, session: Session) -> None:
        """
        From now on reach C{session}'s provider, metered by its budget.
        """

    def close(self) -> Deferred[None]:
        """
        Stop listening; the proxy is gone.
        """



@define(eq=False)
class Spare:
    """
    One warm pi child that serves no one yet.

    @ivar paths: its own folders (its session, agent dir, home, work).
    @ivar inside: where pi sees them, when not there (see L{SpareSetup}).
    @ivar sessionId: the session it is made to become, if reserved so.
    @ivar ownFile: its own session's file, as pi names it (never the
        session's: see L{vehicle.body._life.BodyLife}).
    @ivar session: where the session it is made to become keeps its
        conversation (see L{SpareSetup}).
    @ivar prepared: the new file of that session pi is on (as pi names
        it), once switched there; it is handed over without a switch.
    @ivar claimed: a session took the folders made for it.
    @ivar revives: the file it was switched to holds a conversation (a
        dormant session's, switched to ahead of its next command).
    @ivar model: the model pi was started on (C{provider/id}); a session
        on another is set to its own at the hand-off.
    """

    _log: ClassVar[Logger] = Logger()

    spareId: str
    paths: BodyPaths
    proxy: SpareProxy
    protocol: PiProtocol
    transport: IProcessTransport | None = None
    model: str | None = None
    #: Waits for the priming run's end.
    settled: Deferred[None] | None = None
    inside: BodyPaths | None = None
    sessionId: str | None = None
    box: str | None = None
    ownFile: str | None = None
    session: BodyPaths | None = None
    reservedDir: Path | None = None
    prepared: Path | None = None
    claimed: bool = False
    revives: bool = False
    #: Being switched to its session's file (the extension's question is
    #: answered: no facts yet).
    preparing: bool = False
    _discarded: Deferred[None] | None = None

    async def switchTo(self, target: Path, sessionId: str) -> None:
        """
        Switch pi to C{target} (a file of session C{sessionId}, as pi names
        it) while the spare waits, the extension told no facts yet (they
        come with L{handOffCommand}); from then on it is handed to that
        session without a switch.

        @raise PiCommandError: pi refused the file.
        """
        self.preparing = True
        try:
            await switchSession(self.protocol, target, "the spare refused its session's file")
        finally:
            self.preparing = False
        self.prepared = target
        self.sessionId = sessionId

    def preparedFor(self, sessionId: str) -> Path | None:
        """
        The file pi is on, when the spare was made for C{sessionId} and
        switched to it already; L{None}: hand it over with a switch.
        """
        return self.prepared if sessionId == self.sessionId else None

    def handOffCommand(self) -> JSONObject:
        """
        The command that hands a spare already on its session's file to
        that session: the facts given to L{handingOver}.
        """
        sink = self.protocol.sink
        facts = sink.facts if isinstance(sink, _HandOffSink) else "null"
        return {"type": "prompt", "message": f"{HAND_OFF_COMMAND} {facts}"}

    def handOffRefusal(self) -> str | None:
        """
        Why the extension refused L{handOffCommand}, if it did.
        """
        sink = self.protocol.sink
        return sink.refused if isinstance(sink, _HandOffSink) else None

    def letGoOfReserved(self) -> None:
        """
        Remove the folder made for the session the spare was made for, when
        no session took it (the spare serves another session, or none).
        """
        reserved = self.reservedDir
        if reserved is not None and not self.claimed and not (reserved / "meta.json").exists():
            shutil.rmtree(reserved, ignore_errors=True)

    def handingOver(self, facts: str) -> None:
        """
        The spare is being handed to a session: the extension's question
        for the session's facts is answered with C{facts}; any other
        question is held for the session (L{handedOver}), and nothing else
        it says is anyone's news until the session's body hears it (its
        end included: a hand-off that fails is let go).
        """
        self.protocol.sink = _HandOffSink(spare=self, facts=facts)

    def handedOver(self, sink: IBodySink) -> None:
        """
        The switch is done: from now on C{sink} (the session's body) hears
        the spare, starting with the questions held on the way (pi's MCP
        client, connecting for the session's file, asks for the session's
        delegated token before the switch is answered).
        """
        handOff = self.protocol.sink
        self.protocol.sink = sink
        if isinstance(handOff, _HandOffSink):
            for question in handOff.held:
                sink.piEvent(question)

    def plan(self) -> BodyPlan:
        """
        The plan of the body this spare becomes: its providers (its proxy's
        token) and, when that body is gone, its proxy closed and its
        folders removed.
        """
        return BodyPlan(
            providers=self.proxy.providers,
            bootExtra=self.proxy.bootExtra,
            box=self.box,
            cleanup=self.discard,
        )

    def ownFileInSession(self) -> Path | None:
        """
        Where the host finds the spare's own session's file once the
        spare's folders are its session's (an agent's), or L{None}.
        """
        if self.inside is None or self.ownFile is None:
            return None
        return self.inside.piDir / Path(self.ownFile).name

    def forgetOwnFile(self) -> None:
        """
        Remove the spare's own session's file from its session's pi folder
        (pi is off it, or gone): it is no conversation of the session's.
        """
        own = self.ownFileInSession()
        if own is not None:
            own.unlink(missing_ok=True)

    def end(self, clock: IReactorTime) -> Deferred[None]:
        """
        Stop a spare that will not be handed over, then discard it.
        """
        protocol = self.protocol
        ending: Deferred[None] = succeed(None)
        if self.transport is not None and not protocol.hasEnded:
            ending = protocol.terminate(clock, graceSeconds=3)
        return ending.addBoth(lambda _: self.discard())

    def discard(self) -> Deferred[None]:
        """
        Close its proxy and remove its own folder (its process is gone, or
        going); once, however often it is asked.  Folders moved out of it
        (an agent's, now its session's) are not touched.
        """
        if self._discarded is None:
            shutil.rmtree(self.paths.piDir.parent, ignore_errors=True)
            self.forgetOwnFile()
            self.letGoOfReserved()
            self._discarded = self.proxy.close()
            self._discarded.addErrback(
                lambda f: self._log.failure("The proxy of {spareId} did not close", f,
                                            spareId=self.spareId)
            )
        done: Deferred[None] = Deferred()

        def closed(result: None) -> None:
            done.callback(None)
            return result

        self._discarded.addCallback(closed)
        return done


@implementer(IBodySink)
@define(eq=False)
class _HandOffSink:
    """
    Hears a spare while it is switched to its session: the extension asks
    for the session's facts (L{vehicle.body._picommand.sessionFacts}), and
    its other questions wait for the session (L{Spare.handedOver}); if the
    hand-off fails, the spare is ended with them unanswered.
    """

    spare: Spare
    facts: str = field(repr=False)
    held: list[JSONObject] = field(factory=list)
    #: Why the extension refused the hand-off command, if it did.
    refused: str | None = None

    def piEvent(self, event: JSONObject) -> None:
        if (
            event.get("type") == "extension_error"
            and event.get("extensionPath") == "command:" + HAND_OFF_COMMAND.lstrip("/")
        ):
            self.refused = str(event.get("error"))
        if not isQuestion(event):
            return
        if asksForFacts(event):
            self.spare.protocol.send(answered(event, self.facts))
        else:
            self.held.append(event)

    def bodyExited(self, exitCode: int | None, signal: int | None, stderrTail: str) -> None:
        pass
