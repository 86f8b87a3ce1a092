"""
Package faces: a package's private modules (C{_x.py}) are its own.  Every
module under C{src/vehicle} and C{src/vehicle_local} is read with L{ast}; an
import of C{vehicle.X._y} (or C{from vehicle.X import _y}) from outside
package C{vehicle.X} fails, so every package reaches another only through what
that package's C{__init__.py} exports.  A private module of C{vehicle} itself
(C{vehicle._http}) is shared by every package inside it, and by the local run's
tools (C{vehicle_local}, the same project's code run from the same C{src/});
one of C{vehicle_local} (C{vehicle_local._run}) by its own packages only.

The arrow between the two runs one way: the host (C{vehicle} and its twistd
plugin, what the wheel ships) imports nothing from C{vehicle_local}.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from twisted.trial.unittest import SynchronousTestCase

from tests.support.imports import circles, importGraph, importsOf


SRC = Path(__file__).parent.parent.parent / "src"
PACKAGE = SRC / "vehicle"
LOCAL = SRC / "vehicle_local"
PLUGIN = SRC / "twisted" / "plugins" / "vehicle_plugin.py"

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
        if not target.startswith(("vehicle.", "vehicle_local.")):
            continue
        owning = owner(target)
        if owning is None or module == owning or module.startswith(owning + "."):
            continue
        if owning == "vehicle" and isLocal(module):
            continue
        out.append((line, target))
    return out


def isLocal(name: str) -> bool:
    """
    Whether C{name} is C{vehicle_local} or inside it.
    """
    return name == "vehicle_local" or name.startswith("vehicle_local.")


def localImports(module: str, source: str, package: bool = False) -> list[tuple[int, str]]:
    """
    The imports in C{source} (the text of C{module}) of C{vehicle_local} or
    anything inside it.
    """
    return [(line, target) for line, target in imported(module, source, package)
            if isLocal(target)]


def everyModule() -> list[tuple[str, Path]]:
    return [(moduleName(p), p)
            for p in sorted([*PACKAGE.rglob("*.py"), *LOCAL.rglob("*.py")])]


def hostModules() -> list[tuple[str, Path]]:
    """
    What the wheel ships: every module of C{vehicle}, and the plugin.
    """
    return [(moduleName(p), p) for p in sorted([*PACKAGE.rglob("*.py"), PLUGIN])]


def offending(
    modules: list[tuple[str, Path]],
    check: Callable[[str, str, bool], list[tuple[int, str]]],
) -> list[str]:
    """
    C{path:line: target} for every import C{check} finds in C{modules}.
    """
    found = []
    for name, path in modules:
        for line, target in check(name, path.read_text("utf-8"), path.name == "__init__.py"):
            found.append(f"{path.relative_to(SRC.parent)}:{line}: {target}")
    return found


class FacesTests(SynchronousTestCase):
    """
    No module imports another package's private modules.
    """

    def test_noPrivateImports(self) -> None:
        """
        Every import across packages goes through the other package's
        C{__init__.py}, with no exception.
        """
        self.assertEqual(
            offending(everyModule(), violations), [],
            "imports of another package's private modules",
        )

    def test_modulesFound(self) -> None:
        """
        The walk reads the package (a walk that read nothing would pass).
        """
        names = {name for name, _ in everyModule()}
        self.assertIn("vehicle._tap", names)
        self.assertIn("vehicle.body._conductor", names)
        self.assertIn("vehicle_local._run", names)
        self.assertIn("vehicle_local.standin._gateway", names)
        self.assertGreater(len(names), 50)
        hosts = {name for name, _ in hostModules()}
        self.assertIn("twisted.plugins.vehicle_plugin", hosts)
        self.assertFalse({name for name in hosts if isLocal(name)})

    def test_forms(self) -> None:
        """
        Each form of import is seen: C{from vehicle.X._y import}, C{import
        vehicle.X._y}, C{from vehicle.X import _y}, and a relative import.
        A package's own private modules and C{vehicle}'s are allowed, to
        C{vehicle_local} too; C{vehicle_local}'s packages keep their faces.
        """
        cases = [
            ("vehicle.host._bodies", "from vehicle.body._conductor import Conductor",
             [(1, "vehicle.body._conductor")]),
            ("vehicle.mirror._mirror", "import vehicle.body._spawner",
             [(1, "vehicle.body._spawner")]),
            ("vehicle.web._app", "from vehicle.host import _drive as drive",
             [(1, "vehicle.host._drive")]),
            ("vehicle.web._app", "from ..session import _journal", [(1, "vehicle.session._journal")]),
            ("vehicle.body._conductor", "from vehicle.body._spawner import Launcher", []),
            ("vehicle.mirror._mirror", "from vehicle._http import httpClient", []),
            ("vehicle.mirror._mirror", "from vehicle.body import readSession", []),
            ("vehicle_local._run", "from vehicle.body._spawner import Launcher",
             [(1, "vehicle.body._spawner")]),
            ("vehicle_local._run", "from vehicle_local.standin._gateway import Gateway",
             [(1, "vehicle_local.standin._gateway")]),
            ("vehicle.web._app", "from vehicle_local import _run", [(1, "vehicle_local._run")]),
            ("vehicle_local.standin._gateway", "from vehicle._relay import passOn", []),
            ("vehicle_local.standin._manifest", "from vehicle_local._supervisor import Supervise", []),
        ]
        for module, source, expected in cases:
            self.assertEqual(violations(module, source), expected, source)


class OneWayTests(SynchronousTestCase):
    """
    The shipped host never imports the local run's tools.
    """

    def test_hostImportsNoLocalTools(self) -> None:
        """
        No module of C{vehicle}, nor the plugin, imports C{vehicle_local}
        or anything in it, in any form.
        """
        self.assertEqual(
            offending(hostModules(), localImports), [],
            "the host imports the local run's tools",
        )

    def test_forms(self) -> None:
        """
        Each form of the import is seen: C{import vehicle_local}, C{from
        vehicle_local.standin import}, C{from vehicle_local import model},
        and a relative import that climbs out of C{vehicle}; a module whose
        name merely starts with it is not.
        """
        cases = {
            "import vehicle_local": [(1, "vehicle_local")],
            "from vehicle_local.standin import StandIn": [(1, "vehicle_local.standin")],
            "from vehicle_local import model": [(1, "vehicle_local"), (1, "vehicle_local.model")],
            "from ...vehicle_local import standin": [
                (1, "vehicle_local"), (1, "vehicle_local.standin")],
            "import vehicle_localized": [],
            "from vehicle import _relay": [],
        }
        for source, expected in cases.items():
            self.assertEqual(localImports("vehicle.web._app", source), expected, source)


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

