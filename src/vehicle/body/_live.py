# -*- test-case-name: tests.unit.test_conductor -*-
"""
One live pi process and everything that lives and dies with it: its
protocol and transport, the plan it was made from, its translator, pi's
queue as the host knows it, and the run under way.  A L{LiveBody} is made
whole when a body is spawned and dropped whole when it is gone, so going
dormant forgets everything at once.
"""

from __future__ import annotations

from attrs import define, field
from twisted.internet.interfaces import IProcessTransport

from vehicle.body._picommand import sessionFacts
from vehicle.body._spawner import BodyPaths, BodyPlan, Launcher
from vehicle.body._spare import Spare
from vehicle.body._rpc import IBodySink, PiProtocol
from vehicle.body._translate import Translator
from vehicle.protocol import Command, JSONObject, PiQueue
from vehicle.session import Session, SessionMeta


#: gardend's reader tools (their scopes end in C{.read}): all a session
#: started by a viewer may call.
READER_TOOLS = ("read_document", "list_documents", "get_workspace", "search_documents")


def toolsFor(meta: SessionMeta) -> list[str]:
    """
    pi's built-in tools a body of this session has (an agent's only).
    """
    if meta.profile == "agent":
        return ["read", "write", "edit", "bash"]
    return []


def bootExtra(meta: SessionMeta, plan: BodyPlan, mcpUrl: str | None) -> JSONObject | None:
    """
    What the extension's boot config says beyond the plan's: the reader
    tools of a session a viewer started, a public conversation's graphs.
    """
    extra = dict(plan.bootExtra or {})
    if meta.access == "read" and mcpUrl:
        # The role at creation fixes the tools for the session's life.
        extra["mcpReaders"] = list(READER_TOOLS)
    if meta.graphs:
        # A public conversation reads every public graph, and no other.
        extra["graphs"] = {"own": meta.graphId, "public": list(meta.graphs)}
    return extra or None


@define(eq=False)
class Run:
    """
    The run under way on a body: the commands it answers, and how many
    model requests its proxy let through (L{LiveBody.meter}).
    """

    commands: list[Command] = field(factory=list)
    modelRequests: int = 0


@define(eq=False)
class LiveBody:
    """
    One pi process, from spawn to exit.  Its state is moved only by its
    own methods, named for what happened.

    @ivar queued: the commands handed to pi's queue (steer, follow-up) and
        not yet seen delivered, in pi's order.
    @ivar rendered: the text pi was sent for each command (the model's,
        never the session's record): how pi's user messages are matched to
        commands.
    @ivar run: the run under way, if any.
    """

    protocol: PiProtocol
    plan: BodyPlan
    paths: BodyPaths
    translator: Translator
    transport: IProcessTransport | None = None
    queued: list[Command] = field(factory=list)
    rendered: dict[str, str] = field(factory=dict)
    run: Run | None = None
    #: The host asked it to end: its exit is no news.
    expectExit: bool = False
    #: An abort was asked for: what pi still queues is taken out, not
    #: delivered after it.
    abortRequested: bool = False

    @classmethod
    def prepare(cls, session: Session, plan: BodyPlan, sink: IBodySink) -> "LiveBody":
        """
        The body C{plan} makes for C{session}, its events going to C{sink}:
        everything but the child, which L{spawn} starts.
        """
        return cls(
            protocol=PiProtocol(sink),
            plan=plan,
            paths=BodyPaths.forSession(session.directory, plan.workDir),
            translator=Translator(runCount=session.feed.runsSoFar()),
        )

    @classmethod
    def handed(
        cls, session: Session, spare: Spare, paths: BodyPaths, mcpUrl: str | None
    ) -> "LiveBody":
        """
        The body C{spare} becomes for C{session}: its process and its plan
        (its proxy's token; its folders to remove when it is gone), the
        session's folders, and the session's facts, which the extension
        asks for while pi is switched to the session's file.  The body is
        heard by the session once the switch is done.
        """
        spare.handingOver(
            sessionFacts(
                budget=session.meta.budget, extra=bootExtra(session.meta, BodyPlan(), mcpUrl)
            )
        )
        body = cls(
            protocol=spare.protocol,
            plan=spare.plan(),
            paths=paths,
            translator=Translator(runCount=session.feed.runsSoFar()),
            transport=spare.transport,
        )
        body.translator.setTools(toolsFor(session.meta))
        return body

    def spawn(self, launcher: Launcher, meta: SessionMeta) -> None:
        """
        Start the pi child (its boot config on fd 3).
        """
        plan = self.plan
        mcpUrl = plan.mcpUrl or launcher.mcpUrl
        self.transport = launcher.spawn(
            self.protocol,
            paths=self.paths,
            model=meta.model,
            profile=meta.profile,
            budget=meta.budget,
            providers=plan.providers,
            wrap=plan.wrap,
            bootExtra=bootExtra(meta, plan, mcpUrl),
            mcpUrl=mcpUrl,
            extraFDs=plan.extraFDs,
            freshIn=plan.primingDir,
        )
        self.translator.setTools(toolsFor(meta))

    # -- the run ------------------------------------------------------------

    def startRun(self, command: Command | None = None) -> Run:
        """
        A run begins (with the command that started it, if the host sent
        one): the proxy's meter starts again.
        """
        self.run = Run(commands=[command] if command is not None else [])
        return self.run

    def runRefused(self) -> None:
        """
        pi did not take the prompt that was to start a run (or an
        extension handled it): no run comes of it.
        """
        self.run = None

    def turnStarted(self) -> None:
        """
        pi started a turn of the run under way (after a compaction or a
        retry): the proxy's meter starts again for it.
        """
        if self.run is not None:
            self.run.modelRequests = 0

    def endRun(self) -> list[Command]:
        """
        The run is over: the commands it answered.
        """
        run, self.run = self.run, None
        finished = run.commands if run is not None else []
        for command in finished:
            self.rendered.pop(command.commandId, None)
        return finished

    # -- pi's queue ----------------------------------------------------------

    def render(self, command: Command, message: str) -> None:
        """
        C{message} is the text pi is sent for C{command}.
        """
        self.rendered[command.commandId] = message

    def renderedText(self, command: Command) -> str:
        return self.rendered[command.commandId]

    def enqueue(self, command: Command) -> None:
        """
        C{command} is handed to pi's queue.
        """
        self.queued.append(command)

    def isQueued(self, command: Command) -> bool:
        return command in self.queued

    def unqueue(self, command: Command) -> None:
        """
        C{command} is out of pi's queue (pi refused it).
        """
        if command in self.queued:
            self.queued.remove(command)

    def forget(self, command: Command) -> None:
        """
        C{command} was taken back (cancelled): out of pi's queue and its
        text forgotten.
        """
        self.unqueue(command)
        self.rendered.pop(command.commandId, None)

    def takeQueued(self) -> list[Command]:
        """
        Everything in pi's queue as the host knows it, which is now empty
        (pi's own queue was, or is being, cleared).
        """
        taken, self.queued = self.queued, []
        return taken

    def queuedIds(self) -> list[str]:
        return [c.commandId for c in self.queued]

    def requestAbort(self) -> None:
        """
        An abort was asked of pi: what it still queues is taken out, not
        delivered after it.
        """
        self.abortRequested = True

    def abortSettled(self) -> None:
        self.abortRequested = False

    def expectingExit(self) -> None:
        """
        The host asks it to end: its exit is no news.
        """
        self.expectExit = True

    def delivered(self, text: str) -> Command | None:
        """
        pi's user message with C{text} ended: the queued command it was,
        now part of the run (or L{None}: not one of ours).
        """
        for command in self.queued:
            if self.rendered.get(command.commandId) == text:
                self.queued.remove(command)
                if self.run is not None:
                    self.run.commands.append(command)
                return command
        return None

    def meter(self, maxTurns: int) -> str | None:
        """
        May the proxy forward one more model request?  Only during a run,
        and no more than the run's turn budget.
        """
        if self.run is None:
            return "no run is under way"
        if self.run.modelRequests >= maxTurns:
            return "this run's turn budget is spent"
        self.run.modelRequests += 1
        return None

    def secrets(self) -> list[str]:
        """
        The keys this body's plan holds (a proxy's token, a caller's key).
        """
        providers = self.plan.providers or {}
        return [str(p["apiKey"]) for p in providers.values() if p.get("apiKey")]

    def snapshotQueue(self) -> PiQueue:
        return self.translator.queue

    def piQueues(self) -> bool:
        """
        Does pi hold anything in its queue (as the host knows it, or as pi
        last reported it)?
        """
        piQueue = self.translator.queue
        return bool(self.queued or piQueue.steering or piQueue.followUp)
