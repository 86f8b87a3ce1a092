# -*- test-case-name: tests.unit.test_agent,tests.unit.test_openapi -*-
"""
The models this host offers: a pi-format C{models.json} named by
C{VEHICLE_MODELS}, whose provider keys written C{"$NAME"} are read from the
host's environment once, at start, and then removed from it.  The keys live
in this object's memory only.
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any, MutableMapping

from attrs import field, frozen

from vehicle.errors import VehicleError
from vehicle.settings import SettingsError


_REFERENCE = re.compile(r"^\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?$")


@frozen
class ModelCatalog:
    """
    Providers (pi's C{models.json} shape, keys resolved) and the default.
    """

    providers: dict[str, dict[str, Any]] = field(repr=False)
    default: str | None = None

    @classmethod
    def empty(cls) -> "ModelCatalog":
        return cls({}, None)

    @classmethod
    def load(
        cls, path: Path | None, default: str | None, environ: MutableMapping[str, str]
    ) -> "ModelCatalog":
        """
        Read C{path}; every C{"$NAME"} key is taken from C{environ} and the
        variable removed from it, so no child ever inherits it.

        @raise SettingsError: for a missing file, bad JSON, a missing
            variable, or a default that is not in the file.
        """
        if path is None:
            if default is not None:
                raise SettingsError("VEHICLE_DEFAULT_MODEL is set but VEHICLE_MODELS is not")
            return cls.empty()
        try:
            data = json.loads(path.read_text("utf-8"))
        except (OSError, ValueError) as e:
            raise SettingsError(f"VEHICLE_MODELS {str(path)!r} cannot be read: {e}")
        providers = copy.deepcopy(data.get("providers") or {})
        if not isinstance(providers, dict) or not providers:
            raise SettingsError(f"VEHICLE_MODELS {str(path)!r} names no providers")
        consumed = set()
        for name, provider in providers.items():
            key = provider.get("apiKey")
            if isinstance(key, str):
                match = _REFERENCE.match(key)
                if match:
                    variable = match.group(1)
                    if variable not in environ and variable not in consumed:
                        raise SettingsError(
                            f"provider {name!r} takes its key from ${variable}, which is not set"
                        )
                    if variable in environ:
                        provider["apiKey"] = environ[variable]
                        consumed.add(variable)
                    else:
                        provider["apiKey"] = _resolved(providers, variable)
                    provider["_keyVariable"] = variable
        for variable in consumed:
            environ.pop(variable, None)
        catalog = cls(providers, default)
        if default is None:
            first = next(iter(catalog.names()), None)
            catalog = cls(providers, first)
        elif not catalog.has(default):
            raise SettingsError(f"VEHICLE_DEFAULT_MODEL {default!r} is not in VEHICLE_MODELS")
        return catalog

    def names(self) -> list[str]:
        return [
            f"{provider}/{model['id']}"
            for provider, spec in self.providers.items()
            for model in spec.get("models") or []
        ]

    def has(self, name: str) -> bool:
        return name in self.names()

    def choose(self, requested: str | None) -> str:
        """
        The model for a new session.

        @raise VehicleError: C{model_unavailable}.
        """
        if requested is None:
            if self.default is None:
                raise VehicleError(
                    "model_unavailable", "this host offers no models", status=503
                )
            return self.default
        if not self.has(requested):
            raise VehicleError(
                "model_unavailable",
                f"the model {requested!r} is not on this host",
                {"models": self.names()},
            )
        return requested

    def providerFor(self, model: str) -> tuple[str, dict[str, Any]]:
        """
        The provider name and its config (with the key) for C{provider/id}.
        """
        provider = model.split("/", 1)[0]
        spec = {k: v for k, v in self.providers[provider].items() if not k.startswith("_")}
        return provider, spec

    def secrets(self) -> list[str]:
        """
        Every key this catalog holds (for the tests' leak scans).
        """
        return [p["apiKey"] for p in self.providers.values() if isinstance(p.get("apiKey"), str)]


def _resolved(providers: dict[str, dict[str, Any]], variable: str) -> str:
    for provider in providers.values():
        if provider.get("_keyVariable") == variable:
            return str(provider["apiKey"])
    raise SettingsError(f"${variable} is not set")
