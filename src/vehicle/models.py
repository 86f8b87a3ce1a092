# -*- test-case-name: tests.unit.test_agent,tests.unit.test_openapi -*-
"""
The models this host offers: a pi-format C{models.json} named by
C{VEHICLE_MODELS}, whose provider keys and header values written C{"$NAME"}
are read from the host's environment once, at start, and then removed from
it.  The keys (and headers) live in this object's memory only; a body that
reaches its models through a proxy is given neither.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Callable, Mapping, MutableMapping

from attrs import field, frozen

from vehicle.errors import VehicleError
from vehicle.protocol import JSON, JSONObject, loads, objectOf, textOf
from vehicle.settings import SettingsError


_REFERENCE = re.compile(r"^\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?$")

#: A header's name (HTTP's token) and what its value may not hold.
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_BREAKS = re.compile(r"[\r\n\0]")


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
        Read C{path}; every C{"$NAME"} key or header value (a provider's or
        a model's) is taken from C{environ} and the variable removed from
        it, so no child ever inherits it.

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
        taken: dict[str, str] = {}

        def resolved(where: str, value: JSON) -> JSON:
            match = _REFERENCE.match(value) if isinstance(value, str) else None
            if match is None:
                return value
            variable = match.group(1)
            if variable not in taken:
                if variable not in environ:
                    raise SettingsError(f"{where} from ${variable}, which is not set")
                taken[variable] = environ[variable]
            return taken[variable]

        for name, provider in providers.items():
            if "apiKey" in provider:
                provider["apiKey"] = resolved(f"provider {name!r} takes its key", provider["apiKey"])
            _resolveHeaders(provider, f"provider {name!r}", resolved)
            models = provider.get("models")
            if isinstance(models, list):
                provider["models"] = [
                    _resolveHeaders(dict(model), f"model {name}/{model.get('id')}", resolved)
                    if isinstance(model, dict) else model
                    for model in models
                ]
        for variable in taken:
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

    def proxied(self, provider: str, baseUrl: str, token: str) -> JSONObject:
        """
        C{provider} as a body that reaches its models through a proxy sees
        it: at C{baseUrl} with C{token} for its key (never the real key or
        URL), with none of its or its models' C{headers} (the proxy adds
        them, L{headersFor}: a header may carry a secret as the key does).
        """
        spec = {k: v for k, v in self._spec(provider).items() if k != "headers"}
        models = spec.get("models")
        if isinstance(models, list):
            spec["models"] = [
                {k: v for k, v in model.items() if k != "headers"}
                if isinstance(model, dict) else model
                for model in models
            ]
        return {**spec, "baseUrl": baseUrl, "apiKey": token}

    def throughProxy(self, baseUrl: str, token: str) -> dict[str, JSONObject]:
        """
        Every provider as a body that reaches its models through a proxy
        sees them (L{proxied}).  A body booted with these can be set to any
        model of the catalogue (pi's C{set_model}), and the proxy decides
        where its requests go.
        """
        return {name: self.proxied(name, baseUrl, token) for name in self.providers}

    def apiOf(self, model: str) -> str | None:
        """
        The API pi speaks to C{model}'s provider for it: the model's own
        C{api}, else its provider's.
        """
        _, spec = self.providerFor(model)
        entry = modelEntry(spec, model.split("/", 1)[1]) or {}
        api = entry.get("api", spec.get("api"))
        return api if isinstance(api, str) else None

    def headersFor(self, model: str) -> dict[str, str]:
        """
        The headers a request for C{model} carries to its provider, as pi
        would send them: the provider's C{headers}, then the model's own
        over them.
        """
        _, spec = self.providerFor(model)
        return {**_headers(spec), **_headers(modelEntry(spec, model.split("/", 1)[1]) or {})}

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


def modelEntry(spec: Mapping[str, JSON], modelId: str) -> JSONObject | None:
    """
    The entry of model C{modelId} in a provider's C{spec} (pi's C{models}
    list), or L{None} when it lists no such model.
    """
    models = spec.get("models")
    for entry in models if isinstance(models, list) else []:
        if isinstance(entry, dict) and entry.get("id") == modelId:
            return entry
    return None


def _resolveHeaders(
    spec: JSONObject, where: str, resolved: Callable[[str, JSON], JSON]
) -> JSONObject:
    """
    C{spec} (a provider or a model) with each value of its C{headers} that
    is written C{"$NAME"} read through C{resolved}, as its key is.
    """
    headers = spec.get("headers")
    if headers is None:
        return spec
    if not isinstance(headers, dict):
        raise SettingsError(f"{where}'s headers are not an object")
    sent: dict[str, JSON] = {}
    for name, value in headers.items():
        value = resolved(f"{where}'s header {name!r} takes its value", value)
        if not _TOKEN.fullmatch(name) or not isinstance(value, str) or _BREAKS.search(value):
            raise SettingsError(f"{where}'s header {name!r} is not a header pi can send")
        sent[name] = value
    spec["headers"] = sent
    return spec


def _headers(spec: Mapping[str, JSON]) -> dict[str, str]:
    """
    The C{headers} of a provider or model, those whose value is text.
    """
    headers = spec.get("headers")
    if not isinstance(headers, dict):
        return {}
    return {name: value for name, value in headers.items() if isinstance(value, str)}
