# -*- test-case-name: tests.unit.test_web.RenameTests,tests.unit.test_web.DeleteTests -*-
"""
A session's C{meta.json}: its fixed meta and its title, rewritten whole
(atomically).  A rename's rewrite is work for the writer once the rename
is durable (once a second at most, for all the renames of that second);
before the folder moves to the trash, a rewrite still waiting for its
second is taken back and done there, so that the trash names the title.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import ClassVar

from attrs import define
from twisted.logger import Logger

from vehicle.protocol import toObject
from vehicle.session._journal import Journal
from vehicle.session._values import SessionMeta
from vehicle.store import After, Chain, syncFile, writeJsonAtomic

#: A rewrite taken back from the writer (its key and its work), or none.
Owed = After | None


@define(eq=False, kw_only=True)
class MetaFile:
    """
    The C{meta.json} of a session's folder, wherever its journal says the
    folder is, rewritten by the journal's writer.
    """

    _log: ClassVar[Logger] = Logger()

    journal: Journal

    def rewrite(self, meta: SessionMeta, title: str | None) -> After:
        """
        C{meta.json} as it is now, to be written whole (atomically) by
        whoever runs it: the key is its path.  In a folder built aside it is
        synced when the folder is sealed (L{seal}).
        """
        path = os.path.join(self.journal.directory, "meta.json")
        durable = not self.journal.aside
        # Its content is made by whoever writes it (frozen values: the
        # writer's thread may), not on every rename.
        return path, lambda: writeJsonAtomic(Path(path), {**toObject(meta), "title": title},
                                             durable=durable)

    def write(self, meta: SessionMeta, title: str | None) -> None:
        """
        Rewrite it now.
        """
        self.rewrite(meta, title)[1]()

    def seal(self) -> None:
        """
        Sync it in a folder built aside (written there unsynced).

        @raise OSError: the sync failed.
        """
        syncFile(self.journal.directory / "meta.json")

    def takeBack(self, meta: SessionMeta, title: str | None) -> Owed:
        """
        The folder is about to move: a rewrite the writer has not yet done
        is taken back from it (to be done by L{settle}, or handed back).
        """
        writer = self.journal.writer
        if writer is None:
            return None
        key = self.rewrite(meta, title)[0]
        work = writer.takeLater(key)
        return None if work is None else (key, work)

    def settle(self, owed: Owed) -> None:
        """
        Do the rewrite taken back, before the folder moves.
        """
        if owed is None:
            return
        try:
            owed[1]()
        except OSError as e:
            self._log.warn("Session {sessionId}: meta.json could not be rewritten before "
                           "its move to the trash ({error}); its log has the title",
                           sessionId=self.journal.sessionId, error=str(e))

    def handBack(self, owed: Owed) -> None:
        """
        The folder stays where it was: the rewrite taken back is the
        writer's again.
        """
        if owed is not None and self.journal.writer is not None:
            self.journal.writer.write(Chain(), (), owed)
