# -*- test-case-name: tests.unit.test_agent,tests.unit.test_openapi -*-
"""
The models this host offers: a pi-format C{models.json} named by
C{VEHICLE_MODELS}, whose provider keys written C{"$NAME"} are read from the
host's environment once, at start, and then removed from it.  The keys live
in this object's memory only.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import MutableMapping

from attrs import field, frozen

from vehicle.errors import VehicleError
from vehicle.protocol import JSON, JSONObject, loads, objectOf, textOf
from vehicle.settings import SettingsError


_REFERENCE = re.compile(r"^\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?$")


@frozen
class ModelCatalog:
    """
    Providers (pi's C{models.json} shape, keys resolved) and the default.

    @ivar providers: name -> pi's provider config, JSON as pi reads it: the
        host reads only its C{baseUrl}, C{apiKey} and its models' C{id}s,
        and hands the rest to pi.
    """

    providers: dict[str, JSONObject] = field(repr=False)
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
            data = loads(path.read_text("utf-8"))
        except (OSError, ValueError) as e:
            raise SettingsError(f"VEHICLE_MODELS {str(path)!r} cannot be read: {e}")
        providers = _providers(objectOf(data).get("providers") or {}, path)
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
            f"{provider}/{modelId}"
            for provider, spec in self.providers.items()
            for modelId in _modelIds(spec)
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
                {"models": list(self.names())},
            )
        return requested

    def providerFor(self, model: str) -> tuple[str, JSONObject]:
        """
        The provider name and its config (with the key) for C{provider/id}.

        @return: the config is pi's, passed through to it; the packages that
            plan bodies read its C{baseUrl}, C{apiKey} and C{models} by key.
        """
        provider = model.split("/", 1)[0]
        return provider, self._spec(provider)

    def _spec(self, provider: str) -> JSONObject:
        """
        The config of C{provider} as pi reads it (the host's own notes,
        named with a leading C{_}, left out).
        """
        return {k: v for k, v in self.providers[provider].items() if not k.startswith("_")}

    def throughProxy(self, baseUrl: str, token: str) -> dict[str, JSONObject]:
        """
        Every provider as a body that reaches its models through a proxy
        sees them: each at C{baseUrl} with C{token} for its key (never the
        real key or URL), its models as they are.  A body booted with these
        can be set to any model of the catalogue (pi's C{set_model}), and
        the proxy decides where its requests go.
        """
        return {
            name: {**self._spec(name), "baseUrl": baseUrl, "apiKey": token}
            for name in self.providers
        }

    def endpointFor(self, model: str) -> tuple[str, str]:
        """
        Where the provider of C{model} is reached, and with which key: its
        C{baseUrl} and C{apiKey}, for the model proxy that holds them.
        """
        _, spec = self.providerFor(model)
        return str(spec["baseUrl"]), str(spec["apiKey"])

    def secrets(self) -> list[str]:
        """
        Every key this catalog holds (for the tests' leak scans).
        """
        keys = (p.get("apiKey") for p in self.providers.values())
        return [key for key in keys if isinstance(key, str)]


def _providers(value: JSON, path: Path) -> dict[str, JSONObject]:
    """
    The C{providers} of a C{models.json}, each an object (a copy: the keys
    are resolved in it).

    @raise SettingsError: there are none, or one is not an object.
    """
    if not isinstance(value, dict) or not value:
        raise SettingsError(f"VEHICLE_MODELS {str(path)!r} names no providers")
    providers: dict[str, JSONObject] = {}
    for name, provider in value.items():
        if not isinstance(provider, dict):
            raise SettingsError(f"VEHICLE_MODELS {str(path)!r}: provider {name!r} is not an object")
        providers[name] = dict(provider)
    return providers


def _modelIds(spec: JSONObject) -> list[str]:
    """
    The ids of a provider's models (what is not a model with an id is no
    model).
    """
    models = spec.get("models") or []
    if not isinstance(models, list):
        return []
    return [
        modelId
        for model in models
        if isinstance(model, dict)
        for modelId in (textOf(model.get("id")),)
        if modelId is not None
    ]


def _resolved(providers: dict[str, JSONObject], variable: str) -> str:
    for provider in providers.values():
        if provider.get("_keyVariable") == variable:
            return str(provider["apiKey"])
    raise SettingsError(f"${variable} is not set")
