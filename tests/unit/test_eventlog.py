"""
Tests for L{vehicle.session._eventlog}: a session's events read back from
its log by seq, the pages kept of it, and each event encoded once.
"""

from __future__ import annotations

import json
from pathlib import Path

from twisted.trial.unittest import SynchronousTestCase

from vehicle.protocol import Event, toObject
from vehicle.session._eventlog import (
    KEEP_PAGES, STREAMED_PAGES, STRIDE, Entry, EventFile, LogDiffers, Pages,
)
from vehicle.store import JsonlLog


def event(seq: int) -> Event:
    return Event(seq=seq, type="tool.started", timestamp="2026-11-30T07:00:00.000Z",
                 sessionId="s1", data={"toolCallId": f"c{seq}", "text": "é" * (seq % 7)})


class EventFileTests(SynchronousTestCase):
    """
    L{EventFile} reads events by seq from anywhere in the log.
    """

    def setUp(self) -> None:
        self.path = Path(self.mktemp())
        log, _ = JsonlLog.open(self.path, seqField="seq")
        self.addCleanup(log.close)
        self.log = log

    def write(self, count: int) -> None:
        start = self.log.lastSeq + 1
        for seq in range(start, start + count):
            self.log.append(toObject(event(seq)), sync=False)

    def test_anyRange(self) -> None:
        """
        Any range of seqs reads back as the events written there, in any
        order of reads: from the start, far ahead, back near the start,
        across page boundaries.
        """
        self.write(5 * STRIDE + 3)
        file = EventFile(self.path)
        for first, last in ((1, 3), (4 * STRIDE, 5 * STRIDE + 3), (2, STRIDE + 2),
                            (STRIDE + 1, STRIDE + 1), (3 * STRIDE - 1, 3 * STRIDE + 1)):
            self.assertEqual(file.read(first, last), [event(n) for n in range(first, last + 1)])

    def test_emptyRange(self) -> None:
        """
        A range that ends before it starts is nothing, and the log is not
        read (it may not exist yet).
        """
        self.assertEqual(EventFile(self.path.with_name("missing")).read(3, 2), [])

    def test_growingLog(self) -> None:
        """
        Events appended after a read are read too (what was found of the
        log stays true: it only grows).
        """
        self.write(STRIDE + 1)
        file = EventFile(self.path)
        self.assertEqual(file.read(STRIDE + 1, STRIDE + 1), [event(STRIDE + 1)])
        self.write(2 * STRIDE)
        self.assertEqual(file.read(2 * STRIDE, 3 * STRIDE + 1),
                         [event(n) for n in range(2 * STRIDE, 3 * STRIDE + 2)])

    def test_lineBeingWritten(self) -> None:
        """
        A last line without its newline (a write under way) is never read:
        asking for it is an error, not a half event.
        """
        self.write(2)
        with open(self.path, "ab") as f:
            f.write(json.dumps(toObject(event(3))).encode()[:20])
        file = EventFile(self.path)
        self.assertEqual(file.read(1, 2), [event(1), event(2)])
        self.assertRaises(LogDiffers, file.read, 2, 3)

    def test_otherSeq(self) -> None:
        """
        A line whose seq is not its place is refused.
        """
        with open(self.path, "wb") as f:
            for seq in (1, 2, 2):
                f.write(json.dumps(toObject(event(seq))).encode() + b"\n")
        file = EventFile(self.path)
        self.assertEqual(file.read(1, 2), [event(1), event(2)])
        self.assertRaises(LogDiffers, file.read, 3, 3)

    def test_moved(self) -> None:
        """
        After its folder moves, the log is read where it is now.
        """
        self.write(3)
        file = EventFile(self.path)
        self.assertEqual(file.read(1, 1), [event(1)])
        moved = self.path.with_name("moved")
        self.path.rename(moved)
        file.moved(moved)
        self.assertEqual(file.read(2, 3), [event(2), event(3)])


class PagesTests(SynchronousTestCase):
    """
    L{Pages} keeps a few pages of entries, shared by every reader.
    """

    def setUp(self) -> None:
        self.path = Path(self.mktemp())
        log, _ = JsonlLog.open(self.path, seqField="seq")
        self.addCleanup(log.close)
        for seq in range(1, 10 * STRIDE + 1):
            log.append(toObject(event(seq)), sync=False)
        self.pages = Pages(EventFile(self.path))

    def test_sharedEntries(self) -> None:
        """
        Two readers of the same events get the same entries: what one
        encoded, the other does not encode again.
        """
        first = self.pages.entries(3, STRIDE + 5)
        again = self.pages.entries(STRIDE, STRIDE + 5)
        self.assertEqual([e.event for e in first], [event(n) for n in range(3, STRIDE + 6)])
        self.assertTrue(all(a is b for a, b in zip(again, first[STRIDE - 3:])))

    def test_fewPagesKept(self) -> None:
        """
        At most L{KEEP_PAGES} pages are kept: the oldest read is read
        again (new entries), the newest are shared.
        """
        one = self.pages.entries(1, 1)[0]
        for page in range(1, KEEP_PAGES + 1):
            self.pages.entries(page * STRIDE + 1, page * STRIDE + 1)
        newest = self.pages.entries(KEEP_PAGES * STRIDE + 1, KEEP_PAGES * STRIDE + 1)[0]
        self.assertIsNot(self.pages.entries(1, 1)[0], one)
        self.assertIs(self.pages.entries(KEEP_PAGES * STRIDE + 1, KEEP_PAGES * STRIDE + 1)[0],
                      newest)

    def test_morePagesWhileStreamed(self) -> None:
        """
        While streams follow, L{STREAMED_PAGES} pages are kept: readers far
        apart share them; when the last stream goes, only the newest
        L{KEEP_PAGES} stay.
        """
        self.assertGreaterEqual(STREAMED_PAGES, 10)
        self.pages.streamed(True)
        firsts = [self.pages.entries(p * STRIDE + 1, p * STRIDE + 1)[0] for p in range(10)]
        self.assertEqual([self.pages.entries(p * STRIDE + 1, p * STRIDE + 1)[0] for p in range(10)],
                         firsts)
        self.assertTrue(all(a is b for a, b in zip(
            [self.pages.entries(p * STRIDE + 1, p * STRIDE + 1)[0] for p in range(10)], firsts)))
        self.pages.streamed(False)
        self.assertIs(self.pages.entries(9 * STRIDE + 1, 9 * STRIDE + 1)[0], firsts[9])
        self.assertIs(self.pages.entries((10 - KEEP_PAGES) * STRIDE + 1,
                                         (10 - KEEP_PAGES) * STRIDE + 1)[0],
                      firsts[10 - KEEP_PAGES])
        self.assertIsNot(self.pages.entries(1, 1)[0], firsts[0])

    def test_streamedPagesBoundedByBytes(self) -> None:
        """
        While streams follow, pages past L{KEEP_PAGES} are let go once the
        bytes made of their events come to more than L{STREAMED_BYTES}.
        """
        from vehicle.session import _eventlog

        self.patch(_eventlog, "STREAMED_BYTES", 5 * STRIDE * 1000 + 500)

        def big(e: Event) -> bytes:
            return b"x" * 1000

        self.pages.streamed(True)
        firsts = []
        for p in range(10):
            page = self.pages.entries(p * STRIDE + 1, (p + 1) * STRIDE)
            for entry in page:
                entry.encoded(big)
            firsts.append(page[0])
        self.assertTrue(all(self.pages.entries(p * STRIDE + 1, p * STRIDE + 1)[0] is firsts[p]
                            for p in range(9, 3, -1)))
        self.assertIsNot(self.pages.entries(3 * STRIDE + 1, 3 * STRIDE + 1)[0], firsts[3])

    def test_writtenJoinsTheNewestPage(self) -> None:
        """
        An event written after its page was read joins that page; the first
        event of the next page starts a new one; an event whose page nobody
        read is not kept.
        """
        path = Path(self.mktemp())
        log, _ = JsonlLog.open(path, seqField="seq")
        self.addCleanup(log.close)
        pages = Pages(EventFile(path))

        def write(seq: int) -> Entry:
            log.append(toObject(event(seq)), sync=False)
            entry = Entry(event(seq))
            pages.written(entry)
            return entry

        lost = write(1)
        self.assertIsNot(pages.entries(1, 1)[0], lost)
        kept = [write(seq) for seq in range(2, STRIDE + 2)]
        self.assertEqual([e.event.seq for e in pages.entries(2, STRIDE + 1)],
                         list(range(2, STRIDE + 2)))
        self.assertTrue(all(a is b for a, b in zip(pages.entries(2, STRIDE + 1), kept)))

    def test_forget(self) -> None:
        """
        Forgotten pages are read again.
        """
        first = self.pages.entries(1, 1)[0]
        self.pages.forget()
        self.assertIsNot(self.pages.entries(1, 1)[0], first)


class EntryTests(SynchronousTestCase):
    def test_encodedOnce(self) -> None:
        """
        An entry's bytes for one encoder are made once; another encoder
        makes its own.
        """
        calls: list[str] = []

        def sse(e: Event) -> bytes:
            calls.append("sse")
            return b"sse"

        def plain(e: Event) -> bytes:
            calls.append("plain")
            return b"plain"

        entry = Entry(event(1))
        self.assertEqual([entry.encoded(sse), entry.encoded(sse), entry.encoded(plain),
                          entry.encoded(plain)], [b"sse", b"sse", b"plain", b"plain"])
        self.assertEqual(calls, ["sse", "plain"])
