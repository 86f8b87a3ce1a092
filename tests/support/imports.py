"""
L{importsOf}: what a module's source imports, read with L{ast}, for the
tests that hold the code's and the tests' own layout to their rules.
"""

from __future__ import annotations

import ast
from pathlib import Path
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


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """
    The circles of imports in C{graph} (module -> the modules it imports):
    every group of two or more modules each of which reaches all the others,
    each group sorted (Tarjan's strongly connected components).
    """
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    onStack: set[str] = set()
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        onStack.add(module)
        for target in sorted(graph.get(module, ())):
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in onStack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            group = []
            while True:
                member = stack.pop()
                onStack.discard(member)
                group.append(member)
                if member == module:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return found


def importGraph(src: Path) -> dict[str, set[str]]:
    """
    Every module under C{src} and the modules of C{src} it imports (every
    import, those for the type checker only included): a package's
    C{__init__.py} is the package, and C{from a import b} names C{a.b} when
    that is a module, else C{a}.
    """
    paths: dict[str, Path] = {}
    for path in sorted(src.rglob("*.py")):
        parts = list(path.relative_to(src).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        paths[".".join(parts)] = path
    graph: dict[str, set[str]] = {}
    for name, path in paths.items():
        targets = set()
        for _, target in importsOf(name, path.read_text("utf-8"), paths.__contains__,
                                   package=path.name == "__init__.py"):
            while target and target not in paths:
                target = target.rpartition(".")[0]
            if target and target != name:
                targets.add(target)
        graph[name] = targets
    return graph
