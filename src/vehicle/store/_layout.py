# -*- test-case-name: tests.test_store -*-
"""
The data directory's layout: C{sessions/}, C{trash/}, C{workspaces/},
C{public/}, the paths of a session's folders, and the move to the trash.

Nothing here is ever unlinked: a deleted session's directory is renamed into
C{trash/}, with its workspace and a C{deleted.json} inside it.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from attrs import field, frozen

from vehicle.store._atomic import fsyncDirectory, writeJsonAtomic


_SESSION_ID = re.compile(r"[A-Za-z0-9_-]{1,80}")

#: What a deleted session's workspace is called inside its trash directory.
WORKSPACE_IN_TRASH = "workspace"


def _reserve(parent: Path, base: str) -> str:
    """
    Create an empty directory named C{base} (or C{base-2}, C{base-3}, ...
    when taken) in C{parent} and return its name.

    A directory can be renamed onto an empty one, so the reservation is the
    rename's target and no other entry can be overwritten.
    """
    name = base
    n = 1
    while True:
        try:
            os.mkdir(parent / name, 0o700)
        except FileExistsError:
            n += 1
            name = f"{base}-{n}"
            continue
        return name


def _renameInto(source: Path, parent: Path, base: str) -> str:
    """
    Rename the directory C{source} to a free name in C{parent} based on
    C{base}; return that name.
    """
    name = _reserve(parent, base)
    target = parent / name
    try:
        os.rename(source, target)
    except BaseException:
        # Give back the empty reservation; it holds nothing of anyone's.
        try:
            os.rmdir(target)
        except OSError:
            pass
        raise
    return name


@frozen
class DataDir:
    """
    The host's data directory (C{$VEHICLE_DATA_DIR}) and the places in it.

    @ivar root: the directory itself.
    """

    root: Path = field(converter=Path)

    @property
    def sessions(self) -> Path:
        """
        C{sessions/}: one directory per live session.
        """
        return self.root / "sessions"

    @property
    def trash(self) -> Path:
        """
        C{trash/}: deleted sessions' directories.
        """
        return self.root / "trash"

    @property
    def workspaces(self) -> Path:
        """
        C{workspaces/}: agent sessions' working folders.
        """
        return self.root / "workspaces"

    @property
    def public(self) -> Path:
        """
        C{public/}: the public sessions' ledger and balances.
        """
        return self.root / "public"

    def ensure(self) -> None:
        """
        Create the root and its four directories (mode 0700) if missing.
        """
        created = False
        if not self.root.is_dir():
            self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        for directory in (self.sessions, self.trash, self.workspaces, self.public):
            try:
                directory.mkdir(mode=0o700)
            except FileExistsError:
                continue
            created = True
        if created:
            fsyncDirectory(self.root)

    @staticmethod
    def validSessionId(sessionId: object) -> bool:
        """
        Is C{sessionId} a string that is safe as one path component
        (C{[A-Za-z0-9_-]}, 1 to 80 characters)?
        """
        if not isinstance(sessionId, str):
            return False
        return _SESSION_ID.fullmatch(sessionId) is not None

    def _checked(self, name: str) -> str:
        if not self.validSessionId(name):
            raise ValueError(f"not a valid session id: {name!r}")
        return name

    def sessionDir(self, sessionId: str) -> Path:
        """
        The directory of session C{sessionId}.

        @raise ValueError: when C{sessionId} is not valid.
        """
        return self.sessions / self._checked(sessionId)

    def workspaceDir(self, sessionId: str) -> Path:
        """
        The working folder of agent session C{sessionId}.

        @raise ValueError: when C{sessionId} is not valid.
        """
        return self.workspaces / self._checked(sessionId)

    def trashDir(self, name: str) -> Path:
        """
        The trash directory named C{name} (as L{moveToTrash} returned it).

        @raise ValueError: when C{name} is not a valid name.
        """
        return self.trash / self._checked(name)

    def listSessionIds(self) -> list[str]:
        """
        The ids of the sessions on disk: the directories under C{sessions/}
        with a valid name that hold a C{meta.json}, sorted.
        """
        try:
            entries = list(os.scandir(self.sessions))
        except FileNotFoundError:
            return []
        return sorted(
            entry.name
            for entry in entries
            if self.validSessionId(entry.name)
            and entry.is_dir(follow_symlinks=False)
            and os.path.isfile(os.path.join(entry.path, "meta.json"))
        )

    def moveToTrash(self, sessionId: str, deletedInfo: dict[str, Any]) -> str:
        """
        Move session C{sessionId}'s directory into the trash, with its
        workspace (if any) as C{workspace/}, and write C{deleted.json} in it.

        The directory becomes C{trash/<id>}, or C{trash/<id>-2}, C{-3}, ...
        when that name is taken. C{deleted.json} is C{deletedInfo} plus
        C{"trashedAs"}. Every parent touched is synced. Nothing is unlinked.

        Should the host die midway, nothing is lost: the session is already
        gone from C{sessions/}, and its workspace may still be in
        C{workspaces/} or C{deleted.json} may be missing.

        @param sessionId: a valid session id whose directory exists.
        @param deletedInfo: JSON-able facts about the deletion.
        @return: the name of the trash directory (for L{trashDir}).
        @raise ValueError: when C{sessionId} is not valid.
        @raise FileNotFoundError: when the session's directory is missing.
        """
        source = self.sessionDir(sessionId)
        if not source.is_dir():
            raise FileNotFoundError(f"no session directory {source}")
        self.trash.mkdir(mode=0o700, exist_ok=True)
        name = _renameInto(source, self.trash, sessionId)
        fsyncDirectory(self.trash)
        fsyncDirectory(self.sessions)
        target = self.trash / name
        workspace = self.workspaceDir(sessionId)
        if workspace.is_dir():
            _renameInto(workspace, target, WORKSPACE_IN_TRASH)
            fsyncDirectory(target)
            fsyncDirectory(self.workspaces)
        writeJsonAtomic(target / "deleted.json", {**deletedInfo, "trashedAs": name})
        return name
