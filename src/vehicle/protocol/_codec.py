# -*- test-case-name: tests.unit.test_protocol -*-
"""
The one codec between the protocol's values and JSON: a cattrs converter
that the web edge reads requests with (after the schema checked them), the
frames are written with, and the journal writes and reads its records
with.  Field names are the wire's own (camelCase), so the only rules are:
a field marked L{OMIT} is left out while it is L{None}, a field marked
L{SKIP} is neither read nor written, enums travel as their values, tuples
as lists, and JSON fields pass through as they are.
"""

from __future__ import annotations

import enum
from types import UnionType
from typing import Any, Literal, TypeVar, Union, cast, get_args, get_origin

import attrs
from cattrs import Converter
from cattrs.errors import BaseValidationError
from cattrs.dispatch import StructureHook, UnstructureHook
from cattrs.gen import make_dict_structure_fn_from_attrs

from vehicle.errors import VehicleError
from vehicle.protocol._commands import OMIT, CommandStatus, CommandType
from vehicle.protocol._json import JSON, JSONObject
from vehicle.protocol._requests import SKIP


T = TypeVar("T")


_SCALARS = frozenset({type(None), bool, int, float, str})


def _isJSONValue(kind: Any) -> bool:
    """
    L{JSON}, however its self-references were resolved.
    """
    return get_origin(kind) is Union and _SCALARS <= set(get_args(kind))


def _isJSON(kind: Any) -> bool:
    """
    L{JSON} or L{JSONObject}: passed through as they are.
    """
    if _isJSONValue(kind):
        return True
    args = get_args(kind)
    return get_origin(kind) is dict and len(args) == 2 and _isJSONValue(args[1])


def _value(member: enum.Enum) -> Any:
    return member.value


def _passThrough(value: Any, kind: Any) -> Any:
    return value


def _number(value: Any, kind: Any) -> float:
    # JSON numbers stay as they came: an int where a float is typed is
    # still a float to the type checker, and its JSON is unchanged.
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{value!r} is not a number")
    return cast(float, value)


def _integer(value: Any, kind: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, float) and value.is_integer():
            return int(value)
        raise TypeError(f"{value!r} is not an integer")
    return value


def _text(value: Any, kind: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{value!r} is not a string")
    # An enum of strings is read as its member (or refused).
    return value if kind is str else cast(str, kind(value))


def _flag(value: Any, kind: Any) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{value!r} is not a boolean")
    return value


def _copied(kind: Any) -> bool:
    """
    Whether a value of C{kind} is JSON as it is (no hook needed): a string,
    a number, a flag, a literal of those, JSON itself, or one of those or
    L{None}.
    """
    if kind in (str, int, float, bool, type(None)) or _isJSON(kind):
        return True
    if get_origin(kind) is Literal:
        return True
    if get_origin(kind) in (Union, UnionType):
        return all(_copied(arg) for arg in get_args(kind))
    return False


def _isHomogeneousTuple(kind: Any) -> bool:
    """
    C{tuple[X, ...]}.
    """
    return get_origin(kind) is tuple and get_args(kind)[1:] == (...,)


def _tupleHook(kind: Any, converter: Converter) -> StructureHook:
    """
    A C{tuple[X, ...]} read from a JSON array, never from a string (which
    Python would iterate).
    """
    itemType = get_args(kind)[0]
    item = converter.get_structure_hook(itemType)

    def structure(value: Any, _: Any) -> tuple[Any, ...]:
        if not isinstance(value, list):
            raise TypeError(f"{value!r} is not an array")
        return tuple(item(v, itemType) for v in value)

    return structure


def _unstructureHook(cls: type, converter: Converter) -> UnstructureHook:
    """
    One straight function per class, its fields in their declared order
    (cattrs would put the omissible ones last), a value that JSON carries
    as it is copied without a call.
    """
    attrs.resolve_types(cls)
    body = ["def unstructure(value):", "    out = {}"]
    hooks: dict[str, UnstructureHook] = {}
    for n, a in enumerate(attrs.fields(cls)):
        if a.metadata.get(SKIP):
            continue
        read = f"value.{a.name}"
        if not _copied(a.type):
            hooks[f"hook{n}"] = converter.get_unstructure_hook(a.type)
            read = f"hook{n}({read})"
        if a.metadata.get(OMIT):
            body.append(f"    if value.{a.name} is not None:")
            body.append(f"        out[{a.name!r}] = {read}")
        else:
            body.append(f"    out[{a.name!r}] = {read}")
    body.append("    return out")
    namespace: dict[str, object] = dict(hooks)
    exec("\n".join(body), namespace)  # noqa: S102 - code made here, from field names
    return cast(UnstructureHook, namespace["unstructure"])


def _structureHook(cls: type, converter: Converter) -> StructureHook:
    """
    cattrs' own, leaving out the fields marked L{SKIP}.
    """
    attrs.resolve_types(cls)
    kept = [a for a in attrs.fields(cls) if not a.metadata.get(SKIP)]
    return make_dict_structure_fn_from_attrs(kept, cls, converter)


def _makeConverter() -> Converter:
    converter = Converter(unstruct_collection_overrides={tuple: list})
    converter.register_structure_hook_func(_isJSON, _passThrough)
    converter.register_unstructure_hook_func(_isJSON, lambda value: value)
    for enumeration in (CommandType, CommandStatus):
        # An enum of strings travels as its string (cattrs would pass the
        # member on as a str subclass).
        converter.register_unstructure_hook(enumeration, _value)
    # Strict where cattrs would convert (a number is not a string).
    converter.register_structure_hook(float, _number)
    converter.register_structure_hook(int, _integer)
    converter.register_structure_hook(str, _text)
    converter.register_structure_hook(bool, _flag)
    converter.register_structure_hook_factory(_isHomogeneousTuple, _tupleHook)
    converter.register_unstructure_hook_factory(attrs.has, _unstructureHook)
    converter.register_structure_hook_factory(attrs.has, _structureHook)
    return converter


_converter = _makeConverter()


def toJSON(value: object) -> Any:
    """
    A value of the protocol as JSON (dicts, lists, strings, numbers).
    """
    return _converter.unstructure(value)


def toObject(value: object) -> JSONObject:
    """
    An attrs value of the protocol as a JSON object.
    """
    out = _converter.unstructure(value)
    assert isinstance(out, dict)
    return cast(JSONObject, out)


def fromJSON(data: JSON, kind: type[T]) -> T:
    """
    A value of type C{kind} read from JSON the host wrote itself (a log
    read back): a record that does not fit is the host's own damage.

    @raise ValueError: it does not fit.
    """
    try:
        return _converter.structure(data, kind)
    except (BaseValidationError, TypeError, ValueError, KeyError) as e:
        raise ValueError(f"not a {kind.__name__}: {e}") from e


def fromRequest(data: JSONObject, kind: type[T]) -> T:
    """
    The request C{data} (already checked against its schema) as its
    value, keeping the payload it was read from (C{raw}).

    @raise VehicleError: C{invalid_request}, should the schema have let
        through what the value cannot hold.
    """
    try:
        value = _converter.structure(data, kind)
    except (BaseValidationError, TypeError, ValueError, KeyError):
        raise VehicleError("invalid_request", "the request does not fit its verb")
    return cast(T, attrs.evolve(cast(Any, value), raw=data))
