"""
Header names for the tests' HTTP clients: bytes, as Twisted keeps them.

Twisted caches header names by what it is handed; the same name once as
C{str} and once as C{bytes} is compared across types on every lookup, a
C{BytesWarning} under C{python -b}.  The host and Twisted's parser use bytes,
so a test's request does too.
"""

from __future__ import annotations

from typing import Mapping


def bytesNames(headers: Mapping[str | bytes, str]) -> dict[bytes, str]:
    """
    C{headers} with every name in bytes (values as they are).
    """
    return {
        (name.encode("latin-1") if isinstance(name, str) else name): value
        for name, value in headers.items()
    }
