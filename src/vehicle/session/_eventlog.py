# -*- test-case-name: tests.unit.test_eventlog -*-
"""
A session's events read back from its log on demand, never all kept in
memory: the log is read from near the first event asked for (where every
L{STRIDE}-th line starts is remembered: a few integers per session), and the
pages of events read or written lately are kept, a few at most, each event
with its encodings (L{Entry}) so that however many watchers read it, it is
encoded once.
"""

from __future__ import annotations

import json
from array import array
from collections import OrderedDict
from pathlib import Path
from typing import Callable

from attrs import define, field

from vehicle.protocol import Event, JSONObject
from vehicle.session._requests import eventOf


#: How many events a page holds; every STRIDE-th line's offset is remembered.
STRIDE = 64
#: How many pages a session keeps (the newest read or written).
KEEP_PAGES = 4
#: How many while SSE streams follow it: streams paused at different places
#: catch up from pages they share, not each from the file (a second of a
#: busy writer's events; ~1.3 KiB an event of the small kind) ...
STREAMED_PAGES = 32
#: ... as long as their events' bytes made for readers come to no more than
#: this (events of big tool results fill fewer pages).
STREAMED_BYTES = 2 * 1024 * 1024

#: Makes an event's bytes for one kind of reader (an SSE message, say).
Encoder = Callable[[Event], bytes]


@define(eq=False, slots=True)
class Entry:
    """
    One event as its readers get it: the value, and its bytes for each kind
    of reader, made the first time one asks (L{encoded}) and shared by
    every reader after.
    """

    event: Event
    _bytes: dict[Encoder, bytes] | None = field(default=None, init=False)

    def encoded(self, encoder: Encoder) -> bytes:
        """
        The event's bytes as C{encoder} makes them, made once.
        """
        if self._bytes is None:
            self._bytes = {}
        found = self._bytes.get(encoder)
        if found is None:
            found = self._bytes[encoder] = encoder(self.event)
        return found

    def weight(self) -> int | None:
        """
        The bytes made of it so far, for every kind of reader; L{None}
        before any.
        """
        return None if self._bytes is None else sum(len(b) for b in self._bytes.values())


class LogDiffers(ValueError):
    """
    A line of the log is not the event its place says (its C{seq}): the log
    was changed behind the host's back.
    """


@define(eq=False)
class EventFile:
    """
    The events of one log (C{events.jsonl}), read by seq: the line of event
    C{n} is the log's C{n}-th (seqs count from 1 without a gap, which the
    log checks when it is opened).  Only complete lines up to the highest
    seq a reader names are ever read.
    """

    path: Path
    #: The offset of lines 1, STRIDE + 1, 2 * STRIDE + 1, ... as found.
    _marks: array[int] = field(factory=lambda: array("q", [0]))

    def read(self, first: int, last: int) -> list[Event]:
        """
        The events C{first} to C{last} (both included, C{1 <= first}).

        @raise LogDiffers: a line holds another seq.
        @raise ValueError: a line is not an event.
        @raise OSError: the log cannot be read.
        """
        if last < first:
            return []
        out: list[Event] = []

        def take(line: int, raw: bytes) -> None:
            event = eventOf(_parsed(raw))
            if event.seq != line:
                raise LogDiffers(f"{self.path}: line {line} holds seq {event.seq}")
            out.append(event)

        self._walk(first, last, take)
        if len(out) != last - first + 1:
            raise LogDiffers(f"{self.path}: events {first}-{last} asked, {len(out)} found")
        return out

    def moved(self, path: Path) -> None:
        """
        The same log, now at C{path} (its folder was published or trashed).
        """
        self.path = path

    def _walk(self, first: int, last: int, take: Callable[[int, bytes], None]) -> None:
        """
        Go through lines from the last mark at or before C{first} to
        C{last}, remembering marks on the way; C{take} is given each line
        from C{first}.
        """
        index = min((first - 1) // STRIDE, len(self._marks) - 1)
        line = index * STRIDE + 1
        offset = self._marks[index]
        with open(self.path, "rb") as f:
            f.seek(offset)
            for raw in f:
                if not raw.endswith(b"\n"):
                    break  # a line being written: never past a reader's last
                if (line - 1) % STRIDE == 0 and (line - 1) // STRIDE == len(self._marks):
                    self._marks.append(offset)
                if line >= first:
                    take(line, raw)
                if line >= last:
                    return
                line += 1
                offset += len(raw)


def _parsed(raw: bytes) -> JSONObject:
    value = json.loads(raw)
    if not isinstance(value, dict):
        raise ValueError("a line of the event log is not an object")
    return value


@define(eq=False)
class Pages:
    """
    The pages of a session's events read or written lately (at most
    L{KEEP_PAGES}), as entries: readers near the end of the log, the
    watchers of a busy session above all, share them, so each event is read
    and encoded once.
    """

    file: EventFile
    #: Streams follow: more pages kept (L{streamed}).
    _streamed: bool = False
    _pages: OrderedDict[int, list[Entry]] = field(factory=OrderedDict)
    #: The weight of pages whose every event was encoded (L{_weight}).
    _weights: dict[int, int] = field(factory=dict)

    def entries(self, first: int, last: int) -> list[Entry]:
        """
        The entries of events C{first} to C{last} (both included; no more
        than L{STRIDE} apart is the common case, any range works).
        """
        out: list[Entry] = []
        seq = first
        while seq <= last:
            index = (seq - 1) // STRIDE
            pageStart = index * STRIDE + 1
            pageEnd = pageStart + STRIDE - 1
            page = self._pages.get(index)
            upto = min(last, pageEnd)
            if page is None or pageStart + len(page) - 1 < upto:
                have = [] if page is None else page
                more = self.file.read(pageStart + len(have), upto)
                page = have + [Entry(event) for event in more]
                self._keep(index, page)
            else:
                self._pages.move_to_end(index)
            out.extend(page[seq - pageStart : upto - pageStart + 1])
            seq = upto + 1
        return out

    def written(self, entry: Entry) -> None:
        """
        A new durable event: the newest page, when it is kept, takes it.
        """
        seq = entry.event.seq
        if seq is None:
            return
        index = (seq - 1) // STRIDE
        offset = (seq - 1) % STRIDE
        page = self._pages.get(index)
        if page is not None and len(page) == offset:
            page.append(entry)
            self._weights.pop(index, None)
        elif offset == 0 and (index - 1) in self._pages:
            self._keep(index, [entry])

    def forget(self) -> None:
        self._pages.clear()
        self._weights.clear()

    def reading(self, file: EventFile) -> Pages:
        """
        New pages of another file (the log opened afresh), streamed as these.
        """
        return Pages(file, streamed=self._streamed)

    def streamed(self, streams: bool) -> None:
        """
        SSE streams follow the session (keep L{STREAMED_PAGES}), or none
        does any more (keep L{KEEP_PAGES}, the oldest let go).
        """
        self._streamed = streams
        self._trim()

    def _keep(self, index: int, page: list[Entry]) -> None:
        self._pages[index] = page
        self._weights.pop(index, None)
        self._pages.move_to_end(index)
        self._trim()

    def _trim(self) -> None:
        """
        Let the oldest pages go: past L{KEEP_PAGES}, or while streams follow,
        past L{STREAMED_PAGES} or L{STREAMED_BYTES}.
        """
        most = STREAMED_PAGES if self._streamed else KEEP_PAGES
        while len(self._pages) > most:
            self._weights.pop(self._pages.popitem(last=False)[0], None)
        if not self._streamed or len(self._pages) <= KEEP_PAGES:
            return
        weights = {index: self._weight(index) for index in self._pages}
        weight = sum(weights.values())
        while len(self._pages) > KEEP_PAGES and weight > STREAMED_BYTES:
            index, _ = self._pages.popitem(last=False)
            self._weights.pop(index, None)
            weight -= weights[index]

    def _weight(self, index: int) -> int:
        """
        The bytes made of a page's events so far, remembered once every one
        of them was encoded (SSE streams encode every event they are sent;
        bytes made later for another kind of reader are not counted until
        the page changes).
        """
        known = self._weights.get(index)
        if known is not None:
            return known
        weights = [entry.weight() for entry in self._pages[index]]
        total = sum(w for w in weights if w is not None)
        if None not in weights:
            self._weights[index] = total
        return total
