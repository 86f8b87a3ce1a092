# -*- test-case-name: tests.unit.test_box -*-
"""
What a box is made of: the L{BoxSpec} value, its checks, and the one impure
step that turns the paths a caller has into canonical, symlink-free ones.

Everything that builds an argv or a profile takes a L{BoxSpec} and trusts its
paths to be canonical; L{canonicalSpec} is where that trust is earned.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path
from typing import Mapping, Sequence

from attrs import field, frozen


class BoxSpecError(ValueError):
    """
    A box was described in a way that cannot be built safely: a relative,
    non-normal or symlinked path, a secret-looking variable, an empty command.
    """


def _paths(value: Sequence[Path | str]) -> tuple[Path, ...]:
    return tuple(Path(p) for p in value)


def _strings(value: Sequence[str]) -> tuple[str, ...]:
    return tuple(value)


def _optionalPath(value: Path | str | None) -> Path | None:
    return None if value is None else Path(value)


def _env(
    value: Mapping[str, str] | Sequence[tuple[str, str]],
) -> tuple[tuple[str, str], ...]:
    pairs = value.items() if isinstance(value, Mapping) else value
    return tuple((str(name), str(text)) for name, text in pairs)


@frozen(kw_only=True)
class BoxSpec:
    """
    One agent body's box, as the host wants it.

    @ivar bwrap: the path of the bubblewrap executable.
    @ivar workspace: the session's working folder; writable, bound at the same
        absolute path inside (or at C{workspaceAt}).
    @ivar piDir: the session's pi folder (pi's session files); writable, bound
        at the same absolute path inside (or at C{piDirAt}).
    @ivar workspaceAt: where the box sees C{workspace}, when not at its own
        path: a spare's folder is bound where the session it becomes will
        have its own (the bind follows the folder when it is renamed
        there).  Only checked for form: nothing need exist there outside.
    @ivar piDirAt: where the box sees C{piDir}, likewise.
    @ivar readOnly: paths re-exposed read-only (the pi runtime, the
        extension); only needed for paths beneath a hidden one, since the rest
        of the system is read-only already.
    @ivar hidden: folders masked with an empty read-only tmpfs (the home
        folder, the data dir, the gardend profile).
    @ivar socketDir: a host folder holding the Unix socket of the model/MCP
        bridge, bound read-only (C{connect} still works), or C{None}.
    @ivar env: the whole environment of the command (set after
        C{--clearenv}); never a secret. Kept as ordered pairs.
    @ivar command: the argv run inside the box.
    @ivar tmpSizeBytes: the size cap of the private C{/tmp}.
    @ivar system: L{None} to see the host's whole root read-only; otherwise
        only these system folders are shown (read-only), so nothing else on
        the host (its sockets in C{/run}, other people's folders) exists in
        the box.  Pairs of C{(path, None)} bind the folder; C{(path, target)}
        make C{path} a symlink to C{target}, as merged-C{/usr} systems have
        (see L{systemRoots}).
    """

    bwrap: str = "/usr/bin/bwrap"
    workspace: Path = field(converter=Path)
    piDir: Path = field(converter=Path)
    workspaceAt: Path | None = field(default=None, converter=_optionalPath)
    piDirAt: Path | None = field(default=None, converter=_optionalPath)
    readOnly: tuple[Path, ...] = field(default=(), converter=_paths)
    hidden: tuple[Path, ...] = field(default=(), converter=_paths)
    socketDir: Path | None = field(default=None, converter=_optionalPath)
    env: tuple[tuple[str, str], ...] = field(default=(), converter=_env)
    command: tuple[str, ...] = field(converter=_strings)
    tmpSizeBytes: int = 256 * 1024 * 1024
    system: tuple[tuple[Path, str | None], ...] | None = None
    #: The child fd bwrap reads the seccomp program from (C{--seccomp}), or
    #: L{None} for no filter.
    seccompFd: int | None = None

    @property
    def workspaceInside(self) -> Path:
        """
        Where the box sees its workspace (and starts its command).
        """
        return self.workspaceAt if self.workspaceAt is not None else self.workspace

    @property
    def piDirInside(self) -> Path:
        """
        Where the box sees its pi folder.
        """
        return self.piDirAt if self.piDirAt is not None else self.piDir


#: The folders a minimal root shows: the system and its configuration.
SYSTEM_FOLDERS = ("/usr", "/etc", "/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32")


def systemRoots(folders: Sequence[str] = SYSTEM_FOLDERS) -> tuple[tuple[Path, str | None], ...]:
    """
    Look at the host: which of C{folders} exist, and which are symlinks
    (merged C{/usr}).  Impure; feed the result to L{BoxSpec.system}.
    """
    import os

    found: list[tuple[Path, str | None]] = []
    for folder in folders:
        path = Path(folder)
        if path.is_symlink():
            found.append((path, os.readlink(path)))
        elif path.is_dir():
            found.append((path, None))
    return tuple(found)


#: Words that mark an environment variable as a credential.  The box's
#: environment is visible to every tool the agent runs, so a name made of one
#: of these is refused outright: a tripwire, not a proof.
_SECRET_WORD = re.compile(
    r"(^|_)(API_?KEY|KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIALS?|AUTH)(_|$)"
)

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def checkEnvironment(env: Sequence[tuple[str, str]]) -> None:
    """
    Refuse an environment that cannot be passed to C{--setenv} or that looks
    like it carries a credential.

    @param env: ordered C{(name, value)} pairs.
    @raise BoxSpecError: for a bad name, a NUL in a value, a repeated name or
        a secret-looking name.
    """
    seen: set[str] = set()
    for name, value in env:
        if not _ENV_NAME.match(name):
            raise BoxSpecError(f"{name!r} is not an environment variable name")
        if name in seen:
            raise BoxSpecError(f"environment variable {name} is given twice")
        seen.add(name)
        if "\0" in value:
            raise BoxSpecError(f"environment variable {name} holds a NUL")
        if _SECRET_WORD.search(name.upper()):
            raise BoxSpecError(
                f"environment variable {name} looks like a credential;"
                " secrets never enter the box's environment"
            )


def checkCanonical(path: Path, what: str) -> None:
    """
    Refuse a path that is not absolute and normal (no C{.}, C{..}, C{//}).

    This is the pure half of canonicalization; symlinks are
    L{canonicalPath}'s business.

    @param path: the path to check.
    @param what: its role, for the error sentence.
    @raise BoxSpecError: when C{path} is not canonical.
    """
    text = str(path)
    if "\0" in text or "\n" in text:
        raise BoxSpecError(f"the {what} path {text!r} holds a NUL or newline")
    if not path.is_absolute():
        raise BoxSpecError(f"the {what} path {text!r} is not absolute")
    if os.path.normpath(text) != text or text.startswith("//"):
        raise BoxSpecError(f"the {what} path {text!r} is not normal")


def isWithin(path: Path, ancestor: Path) -> bool:
    """
    Whether C{path} is C{ancestor} or beneath it (both canonical).
    """
    return path == ancestor or ancestor in path.parents


def checkSpec(spec: BoxSpec) -> None:
    """
    Check everything about C{spec} that can be checked without the filesystem.

    @raise BoxSpecError: on the first problem found.
    """
    # The folders as the host has them, and where the box sees them.
    pairs = (
        (spec.workspace, spec.piDir, ""),
        (spec.workspaceInside, spec.piDirInside, " inside"),
    )
    for workspace, piDir, where in pairs:
        checkCanonical(workspace, "workspace" + where)
        checkCanonical(piDir, "pi folder" + where)
    for path in spec.readOnly:
        checkCanonical(path, "read-only")
    for path in spec.hidden:
        checkCanonical(path, "hidden")
        if path == Path("/"):
            raise BoxSpecError("the root folder cannot be hidden")
    if spec.socketDir is not None:
        checkCanonical(spec.socketDir, "socket folder")
    for workspace, piDir, where in pairs:
        for path, what in ((workspace, "workspace"), (piDir, "pi folder")):
            if path == Path("/"):
                raise BoxSpecError(f"the {what}{where} cannot be the root folder")
            for hidden in spec.hidden:
                if isWithin(hidden, path):
                    raise BoxSpecError(
                        f"the {what}{where} {path} holds the hidden folder {hidden}"
                    )
        if isWithin(workspace, piDir) or isWithin(piDir, workspace):
            raise BoxSpecError(f"the workspace and the pi folder{where} must not nest")
    exposed = list(spec.readOnly)
    if spec.socketDir is not None:
        exposed.append(spec.socketDir)
    for path in exposed:
        for hidden in spec.hidden:
            if isWithin(hidden, path):
                raise BoxSpecError(
                    f"the re-exposed path {path} holds the hidden folder {hidden}"
                )
    if not spec.command:
        raise BoxSpecError("the box needs a command")
    if not isinstance(spec.tmpSizeBytes, int) or spec.tmpSizeBytes <= 0:
        raise BoxSpecError("the private /tmp needs a positive size")
    checkEnvironment(spec.env)


def canonicalPath(path: Path | str, *, directory: bool = True) -> Path:
    """
    Turn C{path} into the absolute, symlink-free path of what it names now.

    A path whose last component is itself a symlink is refused (binding it
    would follow the link to wherever it points today: sandbox-runtime#221);
    symlinks among its ancestors are resolved, so C{/tmp} on macOS becomes
    C{/private/tmp}.

    @param path: an absolute path.
    @param directory: whether it must name a directory (else any existing
        non-symlink file).
    @raise BoxSpecError: when C{path} is relative, missing, a symlink, or not
        a directory when one is needed.
    """
    given = Path(path)
    if not given.is_absolute():
        raise BoxSpecError(f"{given} is not an absolute path")
    absolute = Path(os.path.normpath(given))
    try:
        st = os.lstat(absolute)
    except FileNotFoundError:
        raise BoxSpecError(f"{absolute} does not exist") from None
    if stat.S_ISLNK(st.st_mode):
        raise BoxSpecError(f"{absolute} is a symlink")
    real = Path(os.path.realpath(absolute))
    st = os.lstat(real)
    if directory and not stat.S_ISDIR(st.st_mode):
        raise BoxSpecError(f"{real} is not a directory")
    return real


def canonicalSpec(spec: BoxSpec) -> BoxSpec:
    """
    Canonicalize every path in C{spec} against the filesystem as it is now.

    Hidden folders that do not exist are dropped (there is nothing to hide,
    and bwrap could not mount over them); everything else must exist. This
    does blocking filesystem work: run it in a thread, or accept a few
    C{lstat}s.

    @return: an equal spec with canonical paths, checked by L{checkSpec}.
    @raise BoxSpecError: when a path is refused.
    """
    hidden = []
    for path in spec.hidden:
        if not os.path.lexists(path):
            continue
        hidden.append(canonicalPath(path))
    canonical = BoxSpec(
        bwrap=spec.bwrap,
        workspace=canonicalPath(spec.workspace),
        piDir=canonicalPath(spec.piDir),
        # Where the box sees them need not exist outside: their form is
        # checked below.
        workspaceAt=spec.workspaceAt,
        piDirAt=spec.piDirAt,
        readOnly=[canonicalPath(p, directory=False) for p in spec.readOnly],
        hidden=hidden,
        socketDir=(
            None if spec.socketDir is None else canonicalPath(spec.socketDir)
        ),
        env=dict(spec.env),
        command=spec.command,
        tmpSizeBytes=spec.tmpSizeBytes,
        system=spec.system,
        seccompFd=spec.seccompFd,
    )
    checkSpec(canonical)
    return canonical
