"""
L{importsOf}: what a module's source imports, read with L{ast}, for the
tests that hold the code's and the tests' own layout to their rules.
"""

from __future__ import annotations

import ast
from typing import Callable


def importsOf(module: str, source: str, isModule: Callable[[str], bool],
              package: bool = False) -> list[tuple[int, str]]:
    """
    Every module C{source} (the text of C{module}; C{package} when it is a
    package's C{__init__.py}) imports, with its line: C{import a.b};
    C{from a.b import c} gives C{a.b}, and C{a.b.c} too when C{isModule}
    says that names a module; relative imports are resolved against
    C{module}.
    """
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                here = module.split(".")
                if not package:
                    here = here[:-1]
                here = here[: len(here) - (node.level - 1)]
                base = ".".join(here + ([base] if base else []))
            found.append((node.lineno, base))
            for alias in node.names:
                candidate = f"{base}.{alias.name}"
                if isModule(candidate):
                    found.append((node.lineno, candidate))
    return found
