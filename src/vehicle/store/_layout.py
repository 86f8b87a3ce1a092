# -*- test-case-name: tests.unit.test_store -*-
"""
The data directory's layout: C{sessions/}, C{trash/}, C{workspaces/},
C{public/}, C{spares/}, the paths of a session's folders, and the move to
the trash.

Nothing here is ever unlinked: a deleted session's directory is renamed into
C{trash/}, with its workspace and a C{deleted.json} inside it.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from attrs import field, frozen

from vehicle.protocol import JSONObject
from vehicle.store._atomic import fsyncDirectory, makeDirs, writeJsonAtomic
from vehicle.store._files import files, removeTree
from vehicle.store._writer import GroupWriter


_SESSION_ID = re.compile(r"[A-Za-z0-9_-]{1,80}")

#: What a deleted session's workspace is called inside its trash directory.
WORKSPACE_IN_TRASH = "workspace"


def _spareLeftover(folder: Path) -> bool:
    """
    Does C{folder} hold only what a spare body makes for the new session
    it waits for (L{vehicle.body.ChatSpares}), or what a create cut while
    moving them in left of it: an empty C{work/}, a C{pi/} of session files
    in which nobody said anything, either, or neither?
    """
    work, piDir = folder / "work", folder / "pi"
    try:
        names = {p.name for p in folder.iterdir()}
        if not names <= {"pi", "work"}:
            return False
        for place in (folder / name for name in names):
            if place.is_symlink() or not place.is_dir():
                return False
        if "work" in names and any(work.iterdir()):
            return False
        for path in piDir.iterdir() if "pi" in names else ():
            if path.is_symlink() or not path.is_file() or path.suffix != ".jsonl":
                return False
            if b'"type":"message"' in path.read_bytes().replace(b" ", b""):
                return False
    except OSError:
        return False
    return True


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
            files().mkdir(parent / name, 0o700)
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
        files().rename(source, target)
    except BaseException:
        # Give back the empty reservation; it holds nothing of anyone's.
        try:
            files().rmdir(target)
        except BaseException:
            pass
        raise
    return name


#: The prefix of a session folder being built (create, fork, clone): it is
#: renamed to its id, in one step, when whole; start removes any left.
BUILDING = ".new-"


@frozen
class DataDir:
    """
    The host's data directory (C{$VEHICLE_DATA_DIR}) and the places in it.

    @ivar root: the directory itself.
    @ivar writer: its one writer (group commit); by default one that
        writes at once, on the caller's thread.
    """

    root: Path = field(converter=Path)
    writer: GroupWriter = field(factory=GroupWriter, eq=False, repr=False)

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
    def spares(self) -> Path:
        """
        C{spares/}: the folders of spare agent bodies, each made to become
        one session's (renamed into place when it does); a host's own, so
        start removes any left.
        """
        return self.root / "spares"

    @property
    def public(self) -> Path:
        """
        C{public/}: the public sessions' ledger and balances.
        """
        return self.root / "public"

    def ensure(self) -> None:
        """
        Create the root (parents and all) and its four directories, exactly
        0700, if missing, durably.
        """
        makeDirs(self.root)
        created = False
        for directory in (self.sessions, self.trash, self.workspaces, self.public):
            try:
                files().mkdir(directory, 0o700)
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

    def buildingDir(self, sessionId: str) -> Path:
        """
        Where session C{sessionId}'s folder is built before it is renamed
        into C{sessions/} whole (see L{publish}).
        """
        return self.sessions / (BUILDING + self._checked(sessionId))

    def publish(self, sessionId: str) -> Path:
        """
        Rename the folder built for C{sessionId} into place and sync
        C{sessions/}: the one step that makes the session exist.

        @return: the session's directory.
        """
        building = self.buildingDir(sessionId)
        fsyncDirectory(building)
        target = self.sessionDir(sessionId)
        files().rename(building, target)
        fsyncDirectory(self.sessions)
        return target

    def reserveTrash(self, sessionId: str) -> str:
        """
        Reserve a free name in the trash for session C{sessionId} (an empty
        directory, synced): C{<id>}, else C{<id>-2}, C{-3}, ...

        A reservation left empty by a host that died is removed at start.
        """
        layer = files()
        try:
            layer.mkdir(self.trash, 0o700)
        except FileExistsError:
            pass
        name = _reserve(self.trash, sessionId)
        fsyncDirectory(self.trash)
        return name

    def finishTrash(self, sessionId: str, name: str, deletedInfo: JSONObject) -> None:
        """
        Finish moving session C{sessionId} to C{trash/<name>} (reserved by
        L{reserveTrash}): its workspace goes inside it as C{workspace/},
        C{deleted.json} is written in it, and the whole directory is renamed
        onto the reservation.  Each step can be done again after a crash:
        this is how start finishes a delete a dead host began.
        """
        layer = files()
        source = self.sessionDir(sessionId)
        workspace = self.workspaceDir(sessionId)
        inner = source / WORKSPACE_IN_TRASH
        if workspace.is_dir() and not inner.exists():
            layer.rename(workspace, inner)
            fsyncDirectory(source)
            fsyncDirectory(self.workspaces)
        writeJsonAtomic(source / "deleted.json", {**deletedInfo, "trashedAs": name})
        target = self.trash / name
        layer.rename(source, target)
        fsyncDirectory(self.trash)
        fsyncDirectory(self.sessions)

    def moveToTrash(self, sessionId: str, deletedInfo: JSONObject) -> str:
        """
        Move session C{sessionId}'s directory into the trash, with its
        workspace (if any) as C{workspace/}, and write C{deleted.json} in it.

        The directory becomes C{trash/<id>}, or C{trash/<id>-2}, C{-3}, ...
        when that name is taken. C{deleted.json} is C{deletedInfo} plus
        C{"trashedAs"}. Every parent touched is synced. Nothing is unlinked.

        @param sessionId: a valid session id whose directory exists.
        @param deletedInfo: JSON-able facts about the deletion.
        @return: the name of the trash directory (for L{trashDir}).
        @raise ValueError: when C{sessionId} is not valid.
        @raise FileNotFoundError: when the session's directory is missing.
        """
        source = self.sessionDir(sessionId)
        if not source.is_dir():
            raise FileNotFoundError(f"no session directory {source}")
        name = self.reserveTrash(sessionId)
        try:
            self.finishTrash(sessionId, name, deletedInfo)
        except BaseException:
            if source.is_dir():
                try:
                    files().rmdir(self.trash / name)
                except BaseException:
                    pass
            raise
        return name

    def sweep(self) -> list[str]:
        """
        At start, before any session is loaded: remove what a host that
        died left half made, and finish what it left half done.  Nothing
        acknowledged is touched: a folder being built was never announced,
        an empty trash reservation holds nothing, a temporary file was never
        renamed into place.

        @return: one line per thing done, for the log.
        """
        done: list[str] = []
        layer = files()
        for entry in _entries(self.sessions):
            path = self.sessions / entry
            if entry.startswith(BUILDING) and path.is_dir() and not path.is_symlink():
                removeTree(path)
                done.append(f"removed the half-made session folder {path}")
            elif self.validSessionId(entry) and path.is_dir() and not (path / "meta.json").is_file():
                if _spareLeftover(path):
                    # Made for a new session by a spare the host died with.
                    removeTree(path)
                    done.append(f"removed the folder a spare body made for a session {path}")
                    continue
                # Left by an older host cut while creating; never announced.
                name = _renameInto(path, self.trash, entry)
                done.append(f"moved the session folder without meta.json {path} to trash/{name}")
        for entry in _entries(self.spares):
            path = self.spares / entry
            if path.is_dir() and not path.is_symlink():
                removeTree(path)
                done.append(f"removed the folder of a spare body {path}")
        # The host's own temporary files (never a body's: pi's home and an
        # agent's workspace are not searched).
        places = [self.public]
        for top in (self.sessions, self.trash):
            for entry in _entries(top):
                places += [top / entry, top / entry / "pi", top / entry / "pi" / "agent"]
        for place in places:
            if place.is_symlink() or not place.is_dir():
                continue
            for name in _entries(place):
                full = place / name
                if name.startswith(".") and name.endswith(".tmp") and full.is_file():
                    layer.unlink(full)
                    done.append(f"removed the temporary file {full}")
        if done:
            for directory in (self.sessions, self.trash, self.workspaces):
                if directory.is_dir():
                    fsyncDirectory(directory)
        return done

    def emptyTrashReservations(self) -> list[str]:
        """
        The trash names reserved and still empty: a delete under way (its
        session still names it) or one given up.
        """
        return [
            entry for entry in _entries(self.trash)
            if (self.trash / entry).is_dir() and not (self.trash / entry).is_symlink()
            and not os.listdir(self.trash / entry)
        ]

    def sweepTrash(self) -> list[str]:
        """
        At start, once the deletes under way are finished: remove the trash
        reservations left empty, write a C{deleted.json} an older host did
        not get to, and put a workspace left outside its session where it
        belongs (in its trash entry), or remove it when its session was
        never made.

        @return: one line per thing done, for the log.
        """
        done: list[str] = []
        layer = files()
        for entry in _entries(self.trash):
            path = self.trash / entry
            if not path.is_dir() or path.is_symlink():
                continue
            if not os.listdir(path):
                layer.rmdir(path)
                done.append(f"removed the empty trash reservation {path}")
            elif not (path / "deleted.json").exists():
                writeJsonAtomic(
                    path / "deleted.json",
                    {"sessionId": _idOf(entry), "trashedAs": entry,
                     "note": "finished at start: the host died while deleting"},
                )
                done.append(f"wrote the missing deleted.json of {path}")
        for entry in _entries(self.workspaces):
            path = self.workspaces / entry
            if not self.validSessionId(entry) or (self.sessions / entry).is_dir():
                continue
            # The newest entry of its session without a workspace: of names
            # of one id, a longer one has a larger number (abc-10 > abc-9).
            home = next(
                (self.trash / t
                 for t in sorted(_entries(self.trash), key=lambda t: (len(t), t), reverse=True)
                 if _idOf(t) == entry and not (self.trash / t / WORKSPACE_IN_TRASH).exists()),
                None,
            )
            if home is not None:
                layer.rename(path, home / WORKSPACE_IN_TRASH)
                fsyncDirectory(home)
                done.append(f"moved the workspace {path} into {home}")
            else:
                removeTree(path)
                done.append(f"removed the workspace {path} of a session never made")
        if done:
            for directory in (self.trash, self.workspaces):
                if directory.is_dir():
                    fsyncDirectory(directory)
        return done


def _entries(directory: Path) -> list[str]:
    try:
        return sorted(os.listdir(directory))
    except FileNotFoundError:
        return []


def _idOf(trashName: str) -> str:
    """
    The session id a trash name stands for (C{<id>} or C{<id>-<n>}).
    """
    base, sep, tail = trashName.rpartition("-")
    return base if sep and tail.isdigit() and base else trashName
