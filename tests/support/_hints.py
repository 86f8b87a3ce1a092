"""
The annotations of a module resolve to types: what mypy reads, checked at
run time too (they are strings under C{from __future__ import annotations},
so nothing else would notice one that is not a type).
"""

from __future__ import annotations

import inspect
import typing
from types import ModuleType

from twisted.trial.unittest import SynchronousTestCase


def annotated(module: ModuleType) -> list[object]:
    """
    The module itself when it annotates its own names, the functions and
    classes it defines, and the classes' methods.
    """
    found: list[object] = [module] if vars(module).get("__annotations__") else []
    for value in vars(module).values():
        if getattr(value, "__module__", None) != module.__name__:
            continue
        if inspect.isfunction(value):
            found.append(value)
        elif inspect.isclass(value):
            found.append(value)
            for member in vars(value).values():
                # A class or static method's function, a property's getter.
                member = getattr(member, "__func__", getattr(member, "fget", member))
                if inspect.isfunction(member):
                    found.append(member)
    return found


def assertAnnotationsResolve(case: SynchronousTestCase, module: ModuleType) -> None:
    """
    Every annotation in C{module} evaluates to a type, in the module's
    names (an attrs class's generated C{__init__} has globals of its own).
    """
    things = annotated(module)
    case.assertTrue(things)
    for thing in things:
        own = inspect.isclass(thing) or getattr(thing, "__globals__", None) is vars(module)
        try:
            typing.get_type_hints(thing, globalns=None if own else vars(module))
        except Exception as e:
            case.fail(f"{module.__name__}: the annotations of {thing!r} do not resolve: {e!r}")
