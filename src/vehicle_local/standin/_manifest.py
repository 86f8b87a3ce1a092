# -*- test-case-name: tests.unit.test_manifest -*-
"""
gardend's way of starting a service: the manifest
(C{services/<id>/service.json}) and the environment gardend injects.

The stand-in starts the host from the project's own manifest exactly as
gardend would (L{vehicle_local.standin.StandIn.serviceFor}), as a
L{vehicle_local.Supervised} child, the way the local run keeps the model.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping

from attrs import frozen

from vehicle.protocol import JSON, JSONObject, loads
from vehicle_local.standin._config import ServiceConfig
from vehicle_local.standin._gateway import MOUNT, SERVICE_ID


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


def _text(data: JSONObject, key: str) -> str:
    value = data.get(key)
    if not isinstance(value, str) or not value:
        raise ManifestError(f"service.json: {key} must be a non-empty string")
    return value


def _flag(data: JSONObject, key: str, default: bool) -> bool:
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
            data = loads(path.read_text("utf-8"))
        except (OSError, ValueError) as e:
            raise ManifestError(f"cannot read {path}: {e}")
        return cls.fromJSON(data, path)

    @classmethod
    def fromJSON(cls, data: JSON, path: Path) -> "Manifest":
        """
        Check the decoded manifest C{data} found at C{path}.

        @raise ManifestError: when it is malformed.
        """
        if not isinstance(data, dict):
            raise ManifestError("service.json must be a JSON object")
        folder = path.parent
        serviceId = _text(data, "serviceId")
        command = _text(data, "command")
        if os.sep in command or (os.altsep and os.altsep in command):
            command = str((folder / command).resolve()) if not os.path.isabs(command) else command
        rawArgs = data.get("args", [])
        args = [a for a in rawArgs if isinstance(a, str)] if isinstance(rawArgs, list) else []
        if not isinstance(rawArgs, list) or len(args) != len(rawArgs):
            raise ManifestError("service.json: args must be a list of strings")
        rawWorkingDir = data.get("workingDir", ".")
        if not isinstance(rawWorkingDir, str):
            raise ManifestError("service.json: workingDir must be a string")
        workingDir = (folder / rawWorkingDir).resolve()
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
            name = entry.get("name") if isinstance(entry, dict) else None
            setting = entry.get("value") if isinstance(entry, dict) else None
            if not isinstance(name, str) or not name or not isinstance(setting, str):
                raise ManifestError(
                    f"service.json: env[{index}] must be {{\"name\": ..., \"value\": ...}}"
                )
            env.append((name, setting))
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
