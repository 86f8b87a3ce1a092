# -*- test-case-name: tests.unit.test_protocol -*-
"""
JSON as the type checker sees it: the values the wire carries, nothing
looser.  Here, in a module that imports nothing of the project, so that
L{vehicle.errors} (which the protocol itself imports) can name them too;
everyone else takes them from L{vehicle.protocol}.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ForwardRef, TypeAlias, Union


if TYPE_CHECKING:
    #: Any JSON value.
    JSON: TypeAlias = Union[None, bool, int, float, str, list["JSON"], dict[str, "JSON"]]
else:
    # The same alias, its self-references bound to this module, so that
    # reading the annotations of a class elsewhere (the codec does) finds it.
    _self = ForwardRef("JSON", module=__name__)
    JSON = Union[None, bool, int, float, str, list[_self], dict[str, _self]]

#: A JSON object.
JSONObject: TypeAlias = dict[str, JSON]
