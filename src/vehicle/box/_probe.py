# -*- test-case-name: tests.unit.test_box -*-
"""
Whether this host can make a box: the pure decision from the settings and the
platform (L{checkIsolation}), and the probe that runs bwrap once to see that
user namespaces really work here (L{probeBwrap}).  A bwrap box also needs its
seccomp filter: without libseccomp there is no box.

A refusal carries a sentence; the host turns it into C{isolation_unavailable}.
"""

from __future__ import annotations

import errno
from typing import Callable, Mapping, Sequence

from attrs import define, field, frozen
from twisted.internet.defer import Deferred
from twisted.internet.error import ProcessDone, ProcessExitedAlready, ProcessTerminated
from twisted.internet.interfaces import IDelayedCall, IProcessTransport, IReactorProcess, IReactorTime
from twisted.internet.protocol import ProcessProtocol
from twisted.logger import Logger
from twisted.python.failure import Failure

from vehicle._timers import cancelIfActive
from vehicle.box._seccomp import seccompProblem


_log = Logger()

#: C{spawner(protocol, executable, args, env)}, like C{reactor.spawnProcess}.
Spawner = Callable[[ProcessProtocol, str, Sequence[str], Mapping[str, str]], IProcessTransport]

#: The probe uses every flag the real box uses that an old or restricted
#: bwrap could reject (C{--disable-userns} needs 0.8, C{--size} 0.7,
#: C{--clearenv} 0.5), so a host that passes the probe can build the box.
PROBE_ARGS: tuple[str, ...] = (
    "--unshare-user",
    "--unshare-net",
    "--unshare-pid",
    "--die-with-parent",
    "--new-session",
    "--unshare-ipc",
    "--unshare-uts",
    "--unshare-cgroup-try",
    "--disable-userns",
    "--cap-drop",
    "ALL",
    "--clearenv",
    "--ro-bind",
    "/",
    "/",
    "--proc",
    "/proc",
    "--dev",
    "/dev",
    "--size",
    "1048576",
    "--tmpfs",
    "/tmp",
    "true",
)

#: The probe's whole environment: bwrap needs nothing, and the child sees it.
PROBE_ENV: Mapping[str, str] = {"PATH": "/usr/bin:/bin"}

PROBE_TIMEOUT_SECONDS = 10.0


@frozen
class ProbeResult:
    """
    What the probe found.

    @ivar ok: whether bwrap made a box and ran C{true} in it.
    @ivar reason: C{"ok"}, or a sentence saying why not (bwrap's first line
        of stderr, or that it is missing).
    """

    ok: bool
    reason: str


@frozen(kw_only=True)
class IsolationDecision:
    """
    Whether agent bodies may be made on this host, and in which tier.

    @ivar ok: whether the tier is usable (for C{bwrap}, still subject to
        L{probeBwrap} when C{needsProbe}).
    @ivar tier: the tier asked for: C{bwrap}, C{seatbelt}, C{microvm} or
        C{none}.
    @ivar reason: for a refusal, the sentence to send with
        C{isolation_unavailable}; C{None} when C{ok}.
    @ivar needsProbe: whether L{probeBwrap} must still pass.
    @ivar probed: whether L{probeBwrap} ran for this decision (C{ok} is
        then its outcome).
    """

    ok: bool
    tier: str
    reason: str | None = None
    needsProbe: bool = False
    probed: bool = False


def checkIsolation(
    *, isolation: str, agentUnisolated: bool, platform: str
) -> IsolationDecision:
    """
    Decide from the settings alone whether agent bodies can be boxed here.

    @param isolation: C{VEHICLE_ISOLATION}.
    @param agentUnisolated: C{VEHICLE_AGENT_UNISOLATED}.
    @param platform: C{sys.platform}.
    """
    if isolation == "bwrap":
        if platform.startswith("linux"):
            return IsolationDecision(ok=True, tier="bwrap", needsProbe=True)
        return IsolationDecision(
            ok=False,
            tier="bwrap",
            reason=f"bwrap isolation needs Linux, and this host is {platform}.",
        )
    if isolation == "seatbelt":
        if platform == "darwin":
            return IsolationDecision(ok=True, tier="seatbelt")
        return IsolationDecision(
            ok=False,
            tier="seatbelt",
            reason=f"seatbelt isolation needs macOS, and this host is {platform}.",
        )
    if isolation == "microvm":
        return IsolationDecision(
            ok=False,
            tier="microvm",
            reason="microvm isolation is not implemented.",
        )
    if isolation == "none":
        if agentUnisolated:
            return IsolationDecision(ok=True, tier="none")
        return IsolationDecision(
            ok=False,
            tier="none",
            reason=(
                "Agent bodies are not run without a box unless the operator"
                " sets VEHICLE_AGENT_UNISOLATED=1."
            ),
        )
    return IsolationDecision(
        ok=False,
        tier=isolation,
        reason=f"{isolation!r} is not an isolation tier this host knows.",
    )


@define
class _ProbeProtocol(ProcessProtocol):
    """
    Collects the probe's stderr and fires C{done} with C{(status, stderr)}
    when it ends; C{status} is an exit code, or a negative signal number.
    """

    done: Deferred[tuple[int, bytes]] = field(factory=Deferred)
    stderr: bytearray = field(factory=bytearray)

    def errReceived(self, data: bytes) -> None:
        if len(self.stderr) < 65536:
            self.stderr += data

    def processEnded(self, reason: Failure) -> None:
        status = 0
        value = reason.value
        if isinstance(value, ProcessTerminated):
            if value.exitCode is not None:
                status = value.exitCode
            else:
                status = -(value.signal or 0) or -1
        elif not isinstance(value, ProcessDone):
            status = -1
        self.done.callback((status, bytes(self.stderr)))


def _firstLine(stderr: bytes) -> str | None:
    for line in stderr.decode("utf-8", "replace").splitlines():
        if line.strip():
            return line.strip()
    return None


async def probeBwrap(
    reactor: IReactorTime,
    bwrap: str,
    spawner: Spawner | None = None,
    timeout: float = PROBE_TIMEOUT_SECONDS,
) -> ProbeResult:
    """
    Run bwrap once with the box's namespace flags and C{true} inside.

    @param reactor: the clock for the timeout, and (without C{spawner}) the
        C{IReactorProcess} that spawns.
    @param bwrap: the path of the bwrap executable.
    @param spawner: spawns like C{reactor.spawnProcess(protocol, executable,
        args, env)}; tests hand in a fake.
    @param timeout: seconds before the probe is killed and counted a failure.
    @return: C{ok} iff bwrap exited 0; otherwise a reason sentence.
    """
    if spawner is None:
        spawner = _reactorSpawner(reactor)
    protocol = _ProbeProtocol()
    try:
        transport = spawner(protocol, bwrap, [bwrap, *PROBE_ARGS], PROBE_ENV)
    except OSError as e:
        if e.errno in (errno.ENOENT, errno.ENOTDIR):
            result = ProbeResult(False, f"bwrap not found at {bwrap}.")
        else:
            result = ProbeResult(
                False, f"bwrap at {bwrap} cannot be run: {e.strerror or e}."
            )
        _log.warn("bwrap probe failed: {reason}", reason=result.reason)
        return result

    timedOut = []

    def kill() -> None:
        timedOut.append(True)
        try:
            transport.signalProcess("KILL")
        except ProcessExitedAlready:
            pass

    call: IDelayedCall = reactor.callLater(timeout, kill)
    try:
        status, stderr = await protocol.done
    finally:
        cancelIfActive(call)

    if status == 0 and not timedOut:
        _log.info("bwrap probe passed: {bwrap}", bwrap=bwrap)
        return ProbeResult(True, "ok")
    if timedOut:
        reason = f"bwrap did not finish its probe within {timeout:g} seconds."
    else:
        reason = _firstLine(stderr) or (
            f"bwrap exited with status {status}."
            if status > 0
            else f"bwrap was killed by signal {-status}."
        )
    _log.warn("bwrap probe failed: {reason}", reason=reason)
    return ProbeResult(False, reason)


def _reactorSpawner(reactor: IReactorTime) -> Spawner:
    """
    The probe's L{Spawner} when none is handed in: C{reactor}'s own
    C{spawnProcess}.
    """
    spawnProcess = IReactorProcess(reactor).spawnProcess

    def spawner(
        protocol: ProcessProtocol,
        executable: str,
        args: Sequence[str],
        env: Mapping[str, str],
    ) -> IProcessTransport:
        process: IProcessTransport = spawnProcess(
            protocol, executable, list(args), env=dict(env)
        )
        return process

    return spawner


async def decideIsolation(
    reactor: IReactorTime,
    *,
    isolation: str,
    agentUnisolated: bool,
    platform: str,
    bwrap: str = "/usr/bin/bwrap",
    spawner: Spawner | None = None,
) -> IsolationDecision:
    """
    L{checkIsolation}, then (when the decision needs the probe) whether the
    box's seccomp filter can be built and L{probeBwrap}: the whole answer to
    "may this host make agent bodies?".
    """
    decision = checkIsolation(
        isolation=isolation, agentUnisolated=agentUnisolated, platform=platform
    )
    if not (decision.ok and decision.needsProbe):
        return decision
    problem = seccompProblem()
    if problem is not None:
        _log.warn("no seccomp filter for the box: {reason}", reason=problem)
        return IsolationDecision(
            ok=False,
            tier=decision.tier,
            reason=f"the box's seccomp filter cannot be built on this host: {problem}.",
        )
    probe = await probeBwrap(reactor, bwrap, spawner)
    if probe.ok:
        return IsolationDecision(ok=True, tier=decision.tier, probed=True)
    return IsolationDecision(
        ok=False,
        tier=decision.tier,
        reason=f"bwrap cannot make a box on this host: {probe.reason}",
        probed=True,
    )
