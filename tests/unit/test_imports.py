"""
Package faces: a package's private modules (C{_x.py}) are its own.  Every
module under C{src/vehicle} is read with L{ast}; an import of
C{vehicle.X._y} (or C{from vehicle.X import _y}) from outside package
C{vehicle.X} fails, so every room reaches another only through what that
room's C{__init__.py} exports.  A private module of C{vehicle} itself
(C{vehicle._http}) is shared by every room inside it.
"""

from __future__ import annotations

from pathlib import Path

from twisted.trial.unittest import SynchronousTestCase

from tests.support.imports import circles, importGraph, importsOf


SRC = Path(__file__).parent.parent.parent / "src"
PACKAGE = SRC / "vehicle"

def moduleName(path: Path) -> str:
    """
    The dotted name of a module under C{src/}.
    """
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def isPackage(name: str) -> bool:
    return (SRC.joinpath(*name.split(".")) / "__init__.py").exists()


def owner(target: str) -> str | None:
    """
    The package whose private module C{target} is, or L{None} when
    C{target} is public (no part of its name below C{vehicle} starts with
    an underscore; C{__main__} and the like are not private).
    """
    parts = target.split(".")
    for i, part in enumerate(parts):
        if i > 0 and part.startswith("_") and not part.startswith("__"):
            return ".".join(parts[:i])
    return None


def isModule(name: str) -> bool:
    path = SRC.joinpath(*name.split("."))
    return path.with_suffix(".py").exists() or (path / "__init__.py").exists()


def imported(module: str, source: str, package: bool = False) -> list[tuple[int, str]]:
    """
    Every module C{source} imports, with its line (L{importsOf}).
    """
    return importsOf(module, source, isModule, package)


def violations(module: str, source: str, package: bool = False) -> list[tuple[int, str]]:
    """
    The imports in C{source} (the text of C{module}) of another package's
    private modules.
    """
    out = []
    for line, target in imported(module, source, package):
        if not target.startswith("vehicle."):
            continue
        room = owner(target)
        if room is None or module == room or module.startswith(room + "."):
            continue
        out.append((line, target))
    return out


def everyModule() -> list[tuple[str, Path]]:
    return [(moduleName(p), p) for p in sorted(PACKAGE.rglob("*.py"))]


class FacesTests(SynchronousTestCase):
    """
    No module imports another package's private modules.
    """

    def test_noPrivateImports(self) -> None:
        """
        Every import across packages goes through the other package's
        C{__init__.py}, with no exception.
        """
        found = []
        for name, path in everyModule():
            for line, target in violations(
                name, path.read_text("utf-8"), package=path.name == "__init__.py"
            ):
                found.append(f"{path.relative_to(SRC.parent)}:{line}: {target}")
        self.assertEqual(found, [], "imports of another package's private modules")

    def test_modulesFound(self) -> None:
        """
        The walk reads the package (a walk that read nothing would pass).
        """
        names = {name for name, _ in everyModule()}
        self.assertIn("vehicle._tap", names)
        self.assertIn("vehicle.body._conductor", names)
        self.assertGreater(len(names), 50)

    def test_forms(self) -> None:
        """
        Each form of import is seen: C{from vehicle.X._y import}, C{import
        vehicle.X._y}, C{from vehicle.X import _y}, and a relative import.
        A package's own private modules and C{vehicle}'s are allowed.
        """
        self.assertEqual(
            violations("vehicle.host._bodies", "from vehicle.body._conductor import Conductor"),
            [(1, "vehicle.body._conductor")],
        )
        self.assertEqual(
            violations("vehicle.mirror._mirror", "import vehicle.body._spawner"),
            [(1, "vehicle.body._spawner")],
        )
        self.assertEqual(
            violations("vehicle.web._app", "from vehicle.host import _drive as drive"),
            [(1, "vehicle.host._drive")],
        )
        self.assertEqual(
            violations("vehicle.web._app", "from ..session import _journal"),
            [(1, "vehicle.session._journal")],
        )
        self.assertEqual(
            violations("vehicle.body._conductor", "from vehicle.body._spawner import Launcher"),
            [],
        )
        self.assertEqual(violations("vehicle.mirror._mirror", "from vehicle._http import httpClient"), [])
        self.assertEqual(violations("vehicle.mirror._mirror", "from vehicle.body import readSession"), [])


class CirclesTests(SynchronousTestCase):
    """
    No circle of imports anywhere in C{src/}: the arrows between modules run
    one way, those for the type checker only included.
    """

    def test_none(self) -> None:
        """
        The import graph of every module under C{src/} has no circle.
        """
        graph = importGraph(SRC)
        self.assertIn("vehicle.session._session", graph)
        self.assertIn("vehicle.session._journal", graph["vehicle.session._session"])
        self.assertEqual(circles(graph), [])

    def test_found(self) -> None:
        """
        A circle, however long, is found and named whole; a chain is not a
        circle.
        """
        self.assertEqual(circles({"a": {"b"}, "b": {"c"}, "c": set()}), [])
        self.assertEqual(circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}),
                         [["a", "b", "c"]])
        self.assertEqual(circles({"x": {"y"}, "y": {"x"}, "p": {"q"}, "q": {"p"}}),
                         [["p", "q"], ["x", "y"]])

    def test_typeCheckingImportsCount(self) -> None:
        """
        An import made only for the type checker is an arrow too.
        """
        root = Path(self.mktemp())
        package = root / "pkg"
        package.mkdir(parents=True)
        (package / "__init__.py").write_text("")
        (package / "one.py").write_text("from pkg.two import B\n")
        (package / "two.py").write_text(
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.one import A\n"
        )
        self.assertEqual(circles(importGraph(root)), [["pkg.one", "pkg.two"]])

