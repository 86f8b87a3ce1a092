# -*- test-case-name: tests.unit.test_manifest -*-
"""
gardend's way of starting a service: the manifest
(C{services/<id>/service.json}), the environment gardend injects, and a
child process that is started, watched, health-checked and stopped.

The stand-in starts the host from the project's own manifest exactly as
gardend would; the local run also uses L{ChildProcess} for the model.
"""

from __future__ import annotations

import json
import os
import signal
from collections import deque
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Sequence

from attrs import define, field, frozen
from twisted.internet.defer import Deferred, succeed
from twisted.internet.error import ProcessDone
from twisted.internet.interfaces import IReactorProcess, IReactorTime
from twisted.internet.protocol import ProcessProtocol
from twisted.python.failure import Failure

from vehicle._timers import cancelIfActive
from vehicle.gardend._config import ServiceConfig
from vehicle.gardend._frontdoor import MOUNT, SERVICE_ID


class ManifestError(ValueError):
    """
    The manifest is missing, unreadable or malformed; one line for the
    operator.
    """


#: What gardend injects into a service's environment; a manifest's C{env}
#: cannot override these.
INJECTED = (
    "PORT",
    "DATA_DIR",
    "MNEMOSYNE_MCP_URL",
    "MNEMOSYNE_MCP_ACCESS_TOKEN",
    "MNEMOSYNE_INTERNAL_SERVICE_SECRET",
    "GARDEN_LOOPBACK_API_URL",
    "GARDEN_SERVICE_ID",
    "GARDEN_PROFILE_ID",
)


def _text(data: Mapping[str, Any], key: str) -> str:
    value = data.get(key)
    if not isinstance(value, str) or not value:
        raise ManifestError(f"service.json: {key} must be a non-empty string")
    return value


def _flag(data: Mapping[str, Any], key: str, default: bool) -> bool:
    value = data.get(key, default)
    if not isinstance(value, bool):
        raise ManifestError(f"service.json: {key} must be true or false")
    return value


@frozen(kw_only=True)
class Manifest:
    """
    A service's manifest, with relative paths resolved against its folder.

    @ivar command: the program; a relative one with a path separator is
        resolved against the manifest's folder, a bare name is left for
        C{PATH}.
    @ivar env: the manifest's own variables, in order.
    """

    path: Path
    serviceId: str
    command: str
    args: tuple[str, ...]
    workingDir: Path
    healthPath: str
    proxyMount: str
    env: tuple[tuple[str, str], ...] = ()
    delegateCaller: bool = False
    acceptsModelKey: bool = False

    @classmethod
    def fromPath(cls, path: str | Path) -> "Manifest":
        """
        Read and check the manifest at C{path}.

        @raise ManifestError: when it cannot be read or is malformed.
        """
        path = Path(path).absolute()
        try:
            data = json.loads(path.read_text("utf-8"))
        except (OSError, ValueError) as e:
            raise ManifestError(f"cannot read {path}: {e}")
        return cls.fromJSON(data, path)

    @classmethod
    def fromJSON(cls, data: Any, path: Path) -> "Manifest":
        """
        Check the decoded manifest C{data} found at C{path}.

        @raise ManifestError: when it is malformed.
        """
        if not isinstance(data, Mapping):
            raise ManifestError("service.json must be a JSON object")
        folder = path.parent
        serviceId = _text(data, "serviceId")
        command = _text(data, "command")
        if os.sep in command or (os.altsep and os.altsep in command):
            command = str((folder / command).resolve()) if not os.path.isabs(command) else command
        args = data.get("args", [])
        if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
            raise ManifestError("service.json: args must be a list of strings")
        workingDir = (folder / data.get("workingDir", ".")).resolve()
        healthPath = _text(data, "healthPath")
        proxyMount = _text(data, "proxyMount")
        for key, value in (("healthPath", healthPath), ("proxyMount", proxyMount)):
            if not value.startswith("/"):
                raise ManifestError(f"service.json: {key} must start with /")
        rawEnv = data.get("env", [])
        if not isinstance(rawEnv, list):
            raise ManifestError("service.json: env must be a list of {name, value}")
        env = []
        for index, entry in enumerate(rawEnv):
            if (
                not isinstance(entry, Mapping)
                or not isinstance(entry.get("name"), str)
                or not entry["name"]
                or not isinstance(entry.get("value"), str)
            ):
                raise ManifestError(
                    f"service.json: env[{index}] must be {{\"name\": ..., \"value\": ...}}"
                )
            env.append((entry["name"], entry["value"]))
        return cls(
            path=path,
            serviceId=serviceId,
            command=command,
            args=tuple(args),
            workingDir=workingDir,
            healthPath=healthPath,
            proxyMount=proxyMount.rstrip("/") or "/",
            env=tuple(env),
            delegateCaller=_flag(data, "delegateCaller", False),
            acceptsModelKey=_flag(data, "acceptsModelKey", False),
        )

    def serviceConfig(self, url: str, secret: str) -> ServiceConfig:
        """
        The stand-in's view of this service: where it listens, the secret
        it is handed, and the manifest's flags.

        @raise ManifestError: when the manifest is not for a service the
            stand-in can front (it fronts C{vehicle} at
            C{/services/vehicle} only).
        """
        if self.serviceId != SERVICE_ID or self.proxyMount != MOUNT.decode("ascii"):
            raise ManifestError(
                f"the stand-in fronts {SERVICE_ID!r} at {MOUNT.decode('ascii')} only, "
                f"not {self.serviceId!r} at {self.proxyMount}"
            )
        return ServiceConfig(
            url=url,
            secret=secret,
            delegateCaller=self.delegateCaller,
            acceptsModelKey=self.acceptsModelKey,
        )

    def environment(
        self, base: Mapping[str, str], injected: Mapping[str, str]
    ) -> dict[str, str]:
        """
        The service's environment: C{base} (what the operator passes on),
        then the manifest's own C{env}, then what gardend injects, which
        nothing overrides.

        @raise ManifestError: when C{injected} names a variable gardend does
            not inject.
        """
        unknown = set(injected) - set(INJECTED)
        if unknown:
            raise ManifestError(f"not gardend's to inject: {', '.join(sorted(unknown))}")
        env = dict(base)
        env.update(self.env)
        env.update(injected)
        return env


@define(eq=False)
class ChildProcess(ProcessProtocol):
    """
    One supervised child: its output appended to a log file line by line
    (and the last lines kept for a report), an optional echo of each line,
    a L{Deferred} for its end, and a stop that escalates from C{TERM} to
    C{KILL}.

    @ivar name: what the operator calls this part (C{host}, C{model}).
    @ivar logPath: where its output goes.
    @ivar echo: called with each whole line of output (C{-v}).
    @ivar ended: fires with the exit status (or C{-signal}) once it is gone.
    @ivar stopping: whether L{stop} was asked for (an end is then expected).
    """

    name: str
    logPath: Path
    clock: IReactorTime
    echo: Optional[Callable[[str, str], None]] = None
    tailLines: int = 40
    ended: "Deferred[int]" = field(factory=Deferred)
    stopping: bool = False
    exitStatus: Optional[int] = None
    _tail: deque = field(init=False)
    _partial: bytes = b""
    _log: Any = None

    def __attrs_post_init__(self) -> None:
        self._tail = deque(maxlen=self.tailLines)

    def spawn(
        self,
        reactor: IReactorProcess,
        command: str,
        args: Sequence[str],
        env: Mapping[str, str],
        path: Optional[Path] = None,
    ) -> "ChildProcess":
        """
        Start the child (stdin closed; stdout and stderr to the log).
        """
        self.logPath.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.logPath, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        self._log = os.fdopen(fd, "ab", buffering=0)
        reactor.spawnProcess(
            self,
            command,
            [command, *args],
            env=dict(env),
            path=str(path) if path is not None else None,
            childFDs={0: "w", 1: "r", 2: "r"},
        )
        return self

    def connectionMade(self) -> None:
        assert self.transport is not None
        self.transport.closeStdin()

    def childDataReceived(self, childFD: int, data: bytes) -> None:
        if self._log is not None:
            self._log.write(data)
        lines = (self._partial + data).split(b"\n")
        self._partial = lines.pop()
        if len(self._partial) > 65536:
            lines.append(self._partial)
            self._partial = b""
        for raw in lines:
            line = raw.decode("utf-8", "replace").rstrip("\r")
            self._tail.append(line)
            if self.echo is not None:
                self.echo(self.name, line)

    def lastLines(self) -> list[str]:
        """
        The last lines the child wrote (its partial last line included).
        """
        lines = list(self._tail)
        if self._partial:
            lines.append(self._partial.decode("utf-8", "replace"))
        return lines

    @property
    def running(self) -> bool:
        return self.exitStatus is None

    def processEnded(self, reason: Failure) -> None:
        value = reason.value
        if isinstance(value, ProcessDone):
            status = 0
        elif getattr(value, "signal", None):
            status = -int(value.signal)
        else:
            status = int(getattr(value, "exitCode", None) or 1)
        self.exitStatus = status
        if self._log is not None:
            self._log.close()
            self._log = None
        self.ended.callback(status)

    def stop(self, graceSeconds: float = 10.0) -> "Deferred[int]":
        """
        Ask the child to stop (C{TERM}); C{KILL} it if it is still there
        after C{graceSeconds}.  Fires with its exit status.
        """
        self.stopping = True
        if self.exitStatus is not None:
            return succeed(self.exitStatus)
        done: Deferred[int] = Deferred()

        def signalled(name: str) -> None:
            if self.running and self.transport is not None:
                try:
                    self.transport.signalProcess(name)
                except Exception:
                    pass

        signalled("TERM")
        kill = self.clock.callLater(graceSeconds, signalled, "KILL")

        def gone(status: int) -> int:
            cancelIfActive(kill)
            done.callback(status)
            return status

        self.ended.addCallback(gone)
        return done


def describeStatus(status: int) -> str:
    """
    An exit status in words: C{exit status 1}, C{killed by SIGKILL}.
    """
    if status < 0:
        try:
            return f"killed by {signal.Signals(-status).name}"
        except ValueError:
            return f"killed by signal {-status}"
    return f"exit status {status}"


async def waitHealthy(
    client: Any, clock: IReactorTime, child: ChildProcess, url: str, seconds: float
) -> bool:
    """
    Poll C{url} with C{client} (treq's) every tenth of a second until it
    answers 200 (C{True}), C{child} ends or C{seconds} pass (C{False}).
    """
    deadline = clock.seconds() + seconds
    while child.running and clock.seconds() < deadline:
        try:
            response = await client.get(url, timeout=2)
            await response.content()
            if response.code == 200:
                return True
        except Exception:
            pass
        pause: Deferred[None] = Deferred()
        clock.callLater(0.1, pause.callback, None)
        await pause
    return False
