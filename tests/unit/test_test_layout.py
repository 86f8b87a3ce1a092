"""
The tests' own layout: a test module imports nothing from another test
module.  What two test modules share (constants, fakes, fixtures, base
cases with no tests of their own) lives in a helper module under
C{tests/support/}, and a helper imports nothing from C{tests.unit} or
C{tests.live} either.  Every file under C{tests/} is read with L{ast}.
"""

from __future__ import annotations

import re
from pathlib import Path

from twisted.trial.unittest import SynchronousTestCase

from tests.support.imports import importsOf


TESTS = Path(__file__).parent.parent
ROOT = TESTS.parent

# The one import of a test module kept on purpose: the variant's tests are
# every test of MirrorTests run again over a second stand-in, so the class
# they inherit is itself a test class, and it stays in its module.
RERUNS = {("tests.live.test_mirror_variant", "tests.live.test_mirror")}

# Helpers that start processes or reach the real reactor's sockets: a unit
# test (no process, no socket) never imports them.
LIVE_ONLY = {"tests.support.live", "tests.support.realpi", "tests.support.unixhttp"}


def moduleName(path: Path) -> str:
    """
    The dotted name of a file under C{tests/}.
    """
    return ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")


def isTestModule(name: str) -> bool:
    """
    Whether C{name} is (or is inside) C{tests.unit} or C{tests.live}.
    """
    return name.startswith(("tests.unit.", "tests.live."))


def isModule(name: str) -> bool:
    return ROOT.joinpath(*name.split(".")).with_suffix(".py").exists()


def imports(module: str, source: str) -> list[tuple[int, str]]:
    """
    Every module C{source} (the text of C{module}) imports, with its line
    (L{importsOf}; C{from a.b import c} counts C{a.b.c} when that is a file
    under C{tests/}).
    """
    return importsOf(module, source, isModule)


def crossImports(module: str, source: str) -> list[tuple[int, str]]:
    """
    The test modules C{source} (the text of C{module}) imports:
    C{import tests.unit.test_x}, C{from tests.unit.test_x import y},
    C{from tests.live import test_y}, C{from .test_x import y}.  A module
    importing itself is not counted, nor the re-runs of L{RERUNS}.
    """
    return [
        (line, target) for line, target in imports(module, source)
        if isTestModule(target) and target != module and (module, target) not in RERUNS
    ]


def liveImports(module: str, source: str) -> list[tuple[int, str]]:
    """
    The live-only helpers (L{LIVE_ONLY}) C{source} imports.
    """
    return [(line, target) for line, target in imports(module, source) if target in LIVE_ONLY]


def everyModule() -> list[tuple[str, Path]]:
    return [(moduleName(p), p) for p in sorted(TESTS.rglob("*.py"))]


class LayoutTests(SynchronousTestCase):
    """
    Shared test helpers live in C{tests/support/}, never in a test module.
    """

    def test_noCrossTestImports(self) -> None:
        """
        No module under C{tests/} imports from another test module.
        """
        found = []
        for name, path in everyModule():
            for line, target in crossImports(name, path.read_text("utf-8")):
                found.append(f"{path.relative_to(ROOT)}:{line}: {target}")
        self.assertEqual(found, [], "imports from another test module (move the helper to tests/support/)")

    def test_unitTestsImportNoLiveHelper(self) -> None:
        """
        No module under C{tests/unit/} imports a live-only helper.
        """
        found = []
        for name, path in everyModule():
            if name.startswith("tests.unit."):
                for line, target in liveImports(name, path.read_text("utf-8")):
                    found.append(f"{path.relative_to(ROOT)}:{line}: {target}")
        self.assertEqual(found, [], "a unit test imports a live-only helper")

    def test_modulesFound(self) -> None:
        """
        The walk reads the tests and the helpers (a walk that read nothing
        would pass).
        """
        names = {name for name, _ in everyModule()}
        self.assertIn("tests.unit.test_web", names)
        self.assertIn("tests.live.test_ride_live", names)
        self.assertIn("tests.support.harness", names)
        self.assertGreater(len(names), 60)

    def test_forms(self) -> None:
        """
        Each form of import is seen; an import of C{tests.support} is not
        one, nor is the one kept re-run of L{RERUNS}.
        """
        here = "tests.unit.test_a"
        self.assertEqual(
            crossImports(here, "from tests.unit.test_web import RouteTestCase"),
            [(1, "tests.unit.test_web")],
        )
        self.assertEqual(crossImports(here, "import tests.live.test_b"), [(1, "tests.live.test_b")])
        self.assertEqual(
            crossImports(here, "\n\nfrom tests.live import test_mirror"),
            [(3, "tests.live.test_mirror")],
        )
        self.assertEqual(crossImports(here, "from .test_web import TAB1"), [(1, "tests.unit.test_web")])
        self.assertEqual(crossImports(here, "from . import test_web"), [(1, "tests.unit.test_web")])
        self.assertEqual(
            crossImports("tests.support.routes", "from tests.unit.test_web import TAB1"),
            [(1, "tests.unit.test_web")],
        )
        self.assertEqual(crossImports(here, "from tests.support.routes import RouteTestCase"), [])
        self.assertEqual(crossImports(here, "from tests.support import harness"), [])
        self.assertEqual(crossImports(here, "import tests.unit"), [])
        self.assertEqual(
            crossImports("tests.live.test_mirror_variant", "from tests.live import test_mirror"), []
        )
        self.assertEqual(
            liveImports(here, "from tests.support.realpi import spawnPi\nimport tests.support.live"),
            [(1, "tests.support.realpi"), (2, "tests.support.live")],
        )
        self.assertEqual(liveImports(here, "from tests.support import unixhttp"),
                         [(1, "tests.support.unixhttp")])
        self.assertEqual(liveImports(here, "from tests.support.harness import Harness"), [])


#: An emacs/trial header naming the tests of a source module.
_TEST_CASE_NAME = re.compile(r"#\s*-\*-\s*test-case-name:\s*(.*?)\s*-\*-")


class TestCaseNameTests(SynchronousTestCase):
    """
    The C{test-case-name} header of each source module names test modules
    that exist (C{trial --testmodule} runs them; a stale one runs nothing).
    """

    def test_everyNameExists(self) -> None:
        missing = []
        sources = sorted(path for package in ("vehicle", "vehicle_local")
                         for path in (ROOT / "src" / package).rglob("*.py"))
        named = 0
        for source in sources:
            with source.open(encoding="utf-8") as f:
                match = _TEST_CASE_NAME.match(f.readline())
            if match is None:
                continue
            for name in match.group(1).split(","):
                named += 1
                module = ROOT.joinpath(*name.strip().split(".")[:3]).with_suffix(".py")
                if not module.is_file():
                    missing.append(f"{source.relative_to(ROOT)}: {name.strip()}")
        self.assertGreater(named, 50)
        self.assertIn(ROOT / "src" / "vehicle_local" / "_run.py", sources)
        self.assertEqual(missing, [])
