"""
The operator's documents stay true to the code: every environment variable
the host and the local run read, and every option of C{twistd vehicle} and
C{scripts/run}, is in C{docs/operating.md} with its default; the links in
the documents this module watches lead to files that exist.
"""

from __future__ import annotations

import re
from pathlib import Path

from twisted.trial.unittest import SynchronousTestCase

import vehicle_local
from vehicle import _tap


ROOT = Path(__file__).parent.parent.parent
OPERATING = ROOT / "docs" / "operating.md"
WATCHED = [OPERATING, ROOT / "docs" / "ids.md"]

#: Where the host and the local run read their environment.
READERS = [
    *(ROOT / "src" / "vehicle" / p for p in ("settings.py", "models.py", "_tap.py")),
    ROOT / "src" / "vehicle_local" / "_run.py",
]

#: Read by the local run only to pass on to its children as they are.
PASSED_THROUGH = {"HOME", "LANG", "PATH"}

_READ = re.compile(
    r'(?:environ|env)(?:\.get\(|\[)\s*"([A-Z][A-Z0-9_]+)"'
    r'|_(?:int|float|flag|off)\(\s*env,\s*"([A-Z][A-Z0-9_]+)"'
)


def variablesRead(text: str) -> set[str]:
    """
    The environment variables C{text} (Python source) reads by name.
    """
    return {a or b for a, b in _READ.findall(text)} - PASSED_THROUGH


def rowOf(document: str, name: str) -> str | None:
    """
    The first table row of C{document} that names C{name} in its first
    cell, or L{None}.
    """
    for line in document.splitlines():
        if line.startswith("|"):
            first = line.split("|")[1]
            if name in first:
                return line
    return None


class OperatingTests(SynchronousTestCase):
    """
    C{docs/operating.md} against the code.
    """

    def test_everyVariable(self) -> None:
        """
        Every variable read by the settings, the models, the plugin and
        the local run has a row of its own in a table.
        """
        document = OPERATING.read_text("utf-8")
        read = set()
        for path in READERS:
            read |= variablesRead(path.read_text("utf-8"))
        self.assertIn("VEHICLE_PUBLIC_RUN_MAX_COST_USD", read)  # read over two lines
        missing = sorted(name for name in read if rowOf(document, f"`{name}`") is None)
        self.assertEqual(missing, [])

    def test_missingVariableIsNoticed(self) -> None:
        """
        A variable the code reads and the document does not name is found.
        """
        read = variablesRead('x = env.get("VEHICLE_NOT_DOCUMENTED")')
        self.assertEqual(read, {"VEHICLE_NOT_DOCUMENTED"})
        self.assertIsNone(rowOf(OPERATING.read_text("utf-8"), "`VEHICLE_NOT_DOCUMENTED`"))

    def test_everyOption(self) -> None:
        """
        Every option of C{twistd vehicle} and of C{scripts/run} has a row
        naming it, and the row gives the option's default.
        """
        document = OPERATING.read_text("utf-8")
        for options in (_tap.Options, vehicle_local.Options):
            for name, short, default, *_ in options.optParameters:
                row = rowOf(document, f"`--{name}")
                self.assertIsNotNone(row, f"--{name}")
                if default is not None:
                    self.assertIn(f"`{default}`", row, f"--{name}'s default")
            for name, short, *_ in getattr(options, "optFlags", []):
                row = rowOf(document, f"`--{name}`")
                self.assertIsNotNone(row, f"--{name}")
                if short:
                    self.assertIn(f"`-{short}`", row)

    def test_links(self) -> None:
        """
        Every relative link, and every repository path in backquotes that
        names a file of the repository (docs/, protocol/, src/, ...), exists.
        """
        for document in WATCHED:
            text = document.read_text("utf-8")
            for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", text):
                self.assertTrue((document.parent / target).exists(), f"{document.name}: {target}")
            for target in re.findall(r"`((?:docs|protocol|scripts|tests|runtime|services|src)/[\w./-]+)`", text):
                if "*" in target or "<" in target:
                    continue
                self.assertTrue((ROOT / target).exists(), f"{document.name}: {target}")


#: A reference in the walk of a prompt: C{`path.py:N` `Name`} (or C{`:N`
#: `Name`}, the file being the last one named).
_WALK_REF = re.compile(r"`(?:([a-z_/.]+\.py))?:(\d+)`\s+`([A-Za-z_][A-Za-z_.]*)")


def walkReferences(design: str) -> list[tuple[str, int, str]]:
    """
    The C{(file, line, name)} references of design.md's walk of a prompt,
    each C{file} under C{src/vehicle/}.
    """
    walk = design[design.index("## The way of a prompt"):design.index("## Decisions")]
    found, current = [], ""
    for path, line, name in _WALK_REF.findall(walk):
        if path:
            current = path if "/" in path else current.rsplit("/", 1)[0] + "/" + path
        found.append((current, int(line), name))
    return found


class DesignWalkTests(SynchronousTestCase):
    """
    The walk of a prompt in docs/design.md points at the code it names.
    """

    def test_referencesPointAtTheirNames(self) -> None:
        """
        Each C{file:line} of the walk is a line of that file holding the
        name written beside it (its last part: C{Drive.find} -> C{find}).
        """
        references = walkReferences((ROOT / "docs" / "design.md").read_text())
        self.assertGreater(len(references), 20)
        wrong = []
        for path, line, name in references:
            lines = (ROOT / "src" / "vehicle" / path).read_text().splitlines()
            word = name.rsplit(".", 1)[-1]
            if line > len(lines) or word not in lines[line - 1]:
                wrong.append(f"{path}:{line} does not hold {name}")
        self.assertEqual(wrong, [])
