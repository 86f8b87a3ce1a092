# -*- test-case-name: tests.unit.test_digest -*-
"""
A session's sleep: when it may go dormant, and its digest (L{_digest}),
made from what it is and written (by the data directory's writer, off the
reactor's thread) only when its logs moved on since the last one.  The
session's journal closes and opens the logs (L{Journal.sleep},
L{Journal.wake}); this part decides when, and keeps the digest that lets
a start do without reading them.
"""

from __future__ import annotations

from typing import ClassVar, Protocol

from attrs import define
from twisted.logger import Logger
from twisted.python.failure import Failure

from vehicle.protocol import BodyState
from vehicle.session._command import CommandBook
from vehicle.session._digest import Digest, LogMark, Origin, digestKey, marksOf, writeDigest
from vehicle.session._journal import Journal
from vehicle.session._lease import LeaseKeeper
from vehicle.session._room import Room
from vehicle.store import Chain


class Sleeper(Protocol):
    """
    The session, as its dormancy reads it: what its digest keeps beyond
    its parts, and whether a body is at work in it.
    """

    @property
    def sessionId(self) -> str: ...

    @property
    def title(self) -> str | None: ...

    @property
    def preview(self) -> str | None: ...

    @property
    def previewInherited(self) -> bool: ...

    @property
    def origin(self) -> Origin | None: ...

    @property
    def deleted(self) -> bool: ...

    def bodyState(self) -> BodyState: ...

    def running(self) -> bool: ...


@define(eq=False, kw_only=True)
class Dormancy:
    """
    When a session may sleep, and its digest made and kept up.
    """

    _log: ClassVar[Logger] = Logger()

    session: Sleeper
    journal: Journal
    book: CommandBook
    room: Room
    leases: LeaseKeeper
    #: The logs its last digest written (or read) names.
    digested: tuple[LogMark, LogMark] | None = None

    def digestible(self) -> bool:
        """
        May its digest be written now: awake, served, its logs whole and
        every line taken durable, no command under way (a digest naming open
        commands would only send the next start to the logs)?
        """
        journal = self.journal
        return (
            journal.awake
            and not journal.busy
            and not journal.closed
            and not self.session.deleted
            and not journal.failed
            and not self.book.open()
        )

    def canSleep(self) -> bool:
        """
        May it go dormant now: its digest may be written, and it has no
        body?
        """
        return (self.digestible() and self.session.bodyState() == "dormant"
                and not self.session.running())

    def digest(self) -> Digest:
        """
        What it is, in brief, derived from its logs as they are now (its
        whole state is in memory and every append is durable).

        @raise OSError: a log cannot be read.
        """
        journal, session = self.journal, self.session
        events, commands = marksOf(journal.directory)
        return Digest(
            events=events, commands=commands, cursor=journal.cursor,
            lastAt=journal.lastTimestamp, deletedAs=journal.deletedAs, runs=journal.runsSoFar(),
            title=session.title, preview=session.preview,
            previewInherited=session.previewInherited, roomPolicy=self.room.policy,
            lease=self.leases.lease, openCommands=tuple(c.commandId for c in self.book.open()),
            origin=session.origin, branches=tuple(sorted(journal.branches)),
        )

    def sleep(self) -> bool:
        """
        Go dormant when it may (L{canSleep}): its digest is handed to the
        writer, its logs closed, and what they say again when it wakes is
        let go (a wake reads the logs, never the digest).

        @return: whether it sleeps now.
        """
        if not (self.canSleep() and self._keep()):
            return False
        self.journal.sleep()
        return True

    def refresh(self) -> bool:
        """
        Hand its digest to the writer when its logs moved on since the last
        one and it may (L{digestible}), staying awake: after a host dies,
        only what was written since is read back from the logs at start.

        @return: whether its digest names its logs now.
        """
        return self.digestible() and self._keep()

    def withdraw(self) -> None:
        """
        Its folder is about to move (a delete): a digest still waiting for
        its time with the writer is taken back and dropped (the move's own
        event leaves it stale), so nothing is written where the folder was.
        """
        writer = self.journal.writer
        if writer is not None and writer.takeLater(digestKey(self.journal.directory)) is not None:
            self.digested = None

    def _keep(self) -> bool:
        """
        Hand the digest to the writer unless the last one handed over names
        the logs as they are.
        """
        try:
            digest = self.digest()
            marks = (digest.events, digest.commands)
            if marks != self.digested:
                self._write(digest)
        except OSError as e:
            self._log.warn("Session {sessionId}: its digest could not be written ({error}); "
                           "the next start reads its logs",
                           sessionId=self.session.sessionId, error=str(e))
            return False
        self.digested = marks
        return True

    def _write(self, digest: Digest) -> None:
        """
        Write C{digest}: made here, on the reactor's thread, while every line
        taken is durable (so its marks name what it says), written by the
        journal's writer once what was handed over before it is durable, a
        second later at most (an atomic write's syncs, off the reactor's
        thread).  A host that dies before finds a stale digest and reads the
        logs, as after any cut; a write that fails is logged by the writer,
        and the next digest is written once the logs move on.  With no
        writer (a folder built aside) it is written here.

        @raise OSError: written here, and the disk refused it.
        """
        directory, writer = self.journal.directory, self.journal.writer
        if writer is None:
            writeDigest(directory, digest)
            return
        handed = writer.write(Chain(), (), (digestKey(directory),
                                            lambda: writeDigest(directory, digest)))
        handed.addErrback(self._notHanded)

    def _notHanded(self, failure: Failure) -> None:
        self._log.warn("Session {sessionId}: its digest was not written ({error}); "
                       "the next start reads its logs",
                       sessionId=self.session.sessionId, error=failure.getErrorMessage())
