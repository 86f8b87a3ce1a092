"""
Tests for L{vehicle.body._sessionfile}: reading pi's session files, the
transcript, and fork/clone by file.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from hypothesis import given, strategies as st
from twisted.trial.unittest import SynchronousTestCase

from vehicle.body import (
    ForkPoint,
    NothingToFork,
    ToolCall,
    branchSession,
    capText,
    parseSession,
    readSession,
)
from vehicle.errors import VehicleError

from tests.support.pifiles import HEADER, assistant, encode, entry, user


def conversation() -> list[dict[str, Any]]:
    """
    A session as pi 1.6.0 writes it: settings, the system prompt, two user
    turns (the second with a raw U+2028), a tool call and its result, a label
    and a custom entry.
    """
    return [
        HEADER,
        entry("model_change", "83ce834c", None, 50.259, provider="sophia", modelId="fake-1"),
        entry("thinking_level_change", "aa778db0", "83ce834c", 50.259, thinkingLevel="off"),
        entry("message", "9652dac7", "aa778db0", 50.281, message={
            "role": "system", "content": "", "sections": {"cwd": "<cwd>"},
            "timestamp": 1796022050276, "toolsAdded": [{"name": "read"}],
        }),
        user("ab1d5f48", "9652dac7", 50.282, "first [[PLAIN]]"),
        assistant("74a5faba", "ab1d5f48", 50.552,
                  [{"type": "thinking", "thinking": "hmm"},
                   {"type": "text", "text": "Hello \u2028there"}]),
        entry("label", "1abe1000", "74a5faba", 50.6, targetId="ab1d5f48", label="start"),
        user("722cc9d8", "1abe1000", 51.0, "second\u2028line"),
        assistant("733100d7", "722cc9d8", 51.2,
                  [{"type": "toolCall", "id": "call_fe96c4440a", "name": "sophia_echo",
                    "arguments": {"text": "hello from the model"}}], stopReason="toolUse"),
        entry("message", "60096496", "733100d7", 51.3, message={
            "role": "toolResult", "toolCallId": "call_fe96c4440a", "toolName": "sophia_echo",
            "content": [{"type": "text", "text": "echo:hello"}], "details": {"tokenLength": 7},
            "isError": False, "durationMs": 0, "timestamp": 1796022051300,
        }),
        assistant("5e5e5e5e", "60096496", 51.5, [{"type": "text", "text": "done"}]),
        entry("custom", "c0ffee00", "5e5e5e5e", 51.6, customType="sophia-budget", data={"turns": 2}),
    ]


class CapTextTests(SynchronousTestCase):
    """
    L{capText} cuts by UTF-8 bytes on character boundaries.
    """

    def test_short(self) -> None:
        """
        A text within the limit is returned as is.
        """
        self.assertEqual(capText("héllo", 6), ("héllo", False))

    def test_multiByteNotSplit(self) -> None:
        """
        A cut that would fall inside a 3-byte character falls before it.
        """
        text, truncated = capText("€" * 6000)
        self.assertTrue(truncated)
        self.assertEqual(text, "€" * 5461)
        self.assertEqual(len(text.encode("utf-8")), 16383)

    def test_loneSurrogate(self) -> None:
        """
        A lone surrogate (possible in JSON from a model) does not break the
        cut.
        """
        self.assertEqual(capText("ab\ud800cd", 5), ("ab\ud800", True))

    @given(st.text(), st.integers(min_value=0, max_value=64))
    def test_prefixWithinLimit(self, text: str, limit: int) -> None:
        """
        The result is the longest prefix of whole characters within the
        limit, flagged when shorter than the text.
        """
        result, truncated = capText(text, limit)
        self.assertTrue(text.startswith(result))
        size = len(result.encode("utf-8", "surrogatepass"))
        self.assertLessEqual(size, limit)
        self.assertEqual(truncated, result != text)
        if truncated:
            nextChar = text[len(result)]
            self.assertGreater(size + len(nextChar.encode("utf-8", "surrogatepass")), limit)


class ReadSessionTests(SynchronousTestCase):
    """
    L{readSession} and L{SessionFile} read pi's file as pi does.
    """

    def write(self, data: bytes) -> Path:
        """
        Put C{data} in a session file of a fresh directory.
        """
        directory = Path(self.mktemp())
        directory.mkdir()
        path = directory / "2026-11-30T07-00-50-130Z_01a22b41.jsonl"
        path.write_bytes(data)
        return path

    def test_headerAndEntries(self) -> None:
        """
        The header is the first line; every other record is an entry, U+2028
        inside strings included.
        """
        session = readSession(self.write(encode(conversation())))
        self.assertEqual(session.header, HEADER)
        self.assertEqual(len(session.entries), 11)
        self.assertEqual(session.skippedLines, 0)
        self.assertEqual(session.firstUserText(), "first [[PLAIN]]")

    def test_tornLastLine(self) -> None:
        """
        A last line cut off mid-record is ignored.
        """
        data = encode(conversation()) + b'{"type":"message","id":"dead","parentId":"c0f'
        session = readSession(self.write(data))
        self.assertEqual(session.skippedLines, 1)
        self.assertEqual(session.activeBranch()[-1].id, "c0ffee00")

    def test_missingFile(self) -> None:
        """
        A file pi has not written yet raises L{FileNotFoundError}.
        """
        self.assertRaises(FileNotFoundError, readSession, Path(self.mktemp()))

    def test_transcript(self) -> None:
        """
        The transcript lists user, assistant and tool-result messages of the
        active branch with their entry ids and timestamps, an assistant
        message's thinking beside its text (not in it); system messages,
        labels and custom entries are left out.  On the wire each item's keys
        come in one order.
        """
        session = readSession(self.write(encode(conversation())))
        items = session.transcript()
        self.assertEqual(
            [(item.role, item.toolCalls) for item in items[2:4]],
            [("user", ()), ("assistant", (ToolCall(id="call_fe96c4440a", name="sophia_echo"),))],
        )
        self.assertEqual(
            json.dumps([item.toJSON() for item in items]),
            json.dumps([
                {"entryId": "ab1d5f48", "role": "user", "text": "first [[PLAIN]]",
                 "timestamp": "2026-11-30T07:00:50.282Z"},
                {"entryId": "74a5faba", "role": "assistant", "text": "Hello \u2028there",
                 "toolCalls": [], "thinking": "hmm", "timestamp": "2026-11-30T07:00:50.552Z"},
                {"entryId": "722cc9d8", "role": "user", "text": "second\u2028line",
                 "timestamp": "2026-11-30T07:00:51.000Z"},
                {"entryId": "733100d7", "role": "assistant", "text": "",
                 "toolCalls": [{"id": "call_fe96c4440a", "name": "sophia_echo"}],
                 "timestamp": "2026-11-30T07:00:51.200Z"},
                {"entryId": "60096496", "role": "toolResult", "text": "echo:hello",
                 "toolName": "sophia_echo", "isError": False,
                 "timestamp": "2026-11-30T07:00:51.300Z"},
                {"entryId": "5e5e5e5e", "role": "assistant", "text": "done",
                 "toolCalls": [], "timestamp": "2026-11-30T07:00:51.500Z"},
            ]),
        )

    def test_transcriptTruncates(self) -> None:
        """
        A long text is cut to the limit on a character boundary and flagged.
        """
        records = conversation()[:4] + [user("ab1d5f48", "9652dac7", 50.3, "é" * 9000)]
        item = readSession(self.write(encode(records))).transcript()[0]
        self.assertEqual(item.text, "é" * 8192)
        self.assertIs(item.truncated, True)
        self.assertIs(item.toJSON()["truncated"], True)
        small = readSession(self.write(encode(records))).transcript(maxText=5)[0]
        self.assertEqual(small.text, "éé")
        thought = conversation()[:5] + [assistant("74a5faba", "ab1d5f48", 50.5,
                                                  [{"type": "thinking", "thinking": "é" * 9}])]
        [_, answer] = readSession(self.write(encode(thought))).transcript(maxText=5)
        self.assertEqual(answer.thinking, "éé")

    def test_stringContent(self) -> None:
        """
        A user message whose content is a plain string is read too.
        """
        records = [HEADER, entry("message", "aaaa0001", None, 1, message={
            "role": "user", "content": "plain", "timestamp": 1})]
        session = parseSession(encode(records))
        self.assertEqual(session.transcript()[0].text, "plain")

    def test_leafDecidesBranch(self) -> None:
        """
        With two children of one entry, the branch is the one holding the
        last entry of the file.
        """
        records = conversation()[:6] + [
            user("0ld0ld00", "74a5faba", 52, "abandoned"),
            assistant("0ld0ld01", "0ld0ld00", 53, [{"type": "text", "text": "old"}]),
            user("new00000", "74a5faba", 54, "taken"),
            assistant("new00001", "new00000", 55, [{"type": "text", "text": "new"}]),
        ]
        session = parseSession(encode(records))
        self.assertEqual(
            [e.id for e in session.activeBranch()],
            ["83ce834c", "aa778db0", "9652dac7", "ab1d5f48", "74a5faba",
             "new00000", "new00001"],
        )
        self.assertEqual(
            session.forkPoints(),
            [ForkPoint(entryId="ab1d5f48", text="first [[PLAIN]]"),
             ForkPoint(entryId="new00000", text="taken")],
        )
        # Appending under the old branch moves the leaf back to it.
        records.append(user("0ld0ld02", "0ld0ld01", 56, "back"))
        session = parseSession(encode(records))
        self.assertEqual(
            [e.id for e in session.activeBranch()][-3:],
            ["0ld0ld00", "0ld0ld01", "0ld0ld02"],
        )

    def test_noMessages(self) -> None:
        """
        A file with only a header has no branch, transcript or first text.
        """
        session = parseSession(encode([HEADER]))
        self.assertEqual(session.activeBranch(), [])
        self.assertEqual(session.transcript(), [])
        self.assertIsNone(session.firstUserText())


class BranchSessionTests(SynchronousTestCase):
    """
    L{branchSession} forks and clones by copying the file as pi does.
    """

    now = datetime(2026, 11, 30, 7, 0, 50, 820999, tzinfo=timezone.utc)

    def setUp(self) -> None:
        self.root = Path(self.mktemp())
        self.root.mkdir()
        self.source = self.root / "2026-11-30T07-00-50-130Z_01a22b41.jsonl"
        self.source.write_bytes(encode(conversation()))
        self.dest = self.root / "sessions"

    def lines(self, path: Path) -> list[dict[str, Any]]:
        """
        The records of a written file, checking it ends in LF.
        """
        data = path.read_bytes()
        self.assertTrue(data.endswith(b"\n"))
        return [json.loads(piece) for piece in data.split(b"\n")[:-1]]

    def test_clone(self) -> None:
        """
        A clone copies the active branch to the leaf, drops the label and
        rechains around it, keeping ids, timestamps and U+2028 raw.
        """
        result = branchSession(self.source, self.dest, entryId=None,
                               newSessionId="sess-clone", now=self.now)
        self.assertEqual(result.path, self.dest / "2026-11-30T07-00-50-820Z_sess-clone.jsonl")
        self.assertIsNone(result.selectedText)
        records = self.lines(result.path)
        self.assertEqual(records[0], {
            "type": "session", "version": 3, "id": "sess-clone",
            "timestamp": "2026-11-30T07:00:50.820Z", "cwd": "/scratch/ws",
            "parentSession": str(self.source),
        })
        original = {e["id"]: e for e in conversation()[1:]}
        ids = [r["id"] for r in records[1:]]
        self.assertEqual(ids, [i for i in original if i != "1abe1000"])
        self.assertEqual([r["parentId"] for r in records[1:]], [None] + ids[:-1])
        for record in records[1:]:
            self.assertEqual({**record, "parentId": None},
                             {**original[record["id"]], "parentId": None})
        self.assertIn("second\u2028line".encode("utf-8"), result.path.read_bytes())
        self.assertEqual(
            readSession(result.path).transcript(), readSession(self.source).transcript()
        )
        self.assertEqual(sorted(p.name for p in self.dest.iterdir()), [result.path.name])

    def test_forkMiddle(self) -> None:
        """
        A fork at the second user message keeps the path up to its parent and
        hands back its text.
        """
        result = branchSession(self.source, self.dest, entryId="722cc9d8",
                               newSessionId="sess-fork", now=self.now)
        self.assertEqual(result.selectedText, "second\u2028line")
        records = self.lines(result.path)
        self.assertEqual(
            [r["id"] for r in records[1:]],
            ["83ce834c", "aa778db0", "9652dac7", "ab1d5f48", "74a5faba"],
        )
        self.assertEqual(records[-1]["parentId"], "ab1d5f48")
        self.assertEqual(records[0]["parentSession"], str(self.source))

    def test_forkFirst(self) -> None:
        """
        A fork at the first user message keeps only what came before any
        conversation: settings and the system prompt.
        """
        result = branchSession(self.source, self.dest, entryId="ab1d5f48",
                               newSessionId="sess-first", now=self.now)
        self.assertEqual(result.selectedText, "first [[PLAIN]]")
        session = readSession(result.path)
        self.assertEqual([e.type for e in session.entries],
                         ["model_change", "thinking_level_change", "message"])
        self.assertEqual(session.transcript(), [])
        self.assertIsNone(session.firstUserText())

    def test_forkNotUserMessage(self) -> None:
        """
        Forking at an assistant message, an unknown id, or a user message off
        the active branch is C{nothing_to_fork}, and writes nothing.
        """
        records = conversation() + [user("0ff0ff00", "74a5faba", 60, "other"),
                                    assistant("0ff0ff01", "0ff0ff00", 61, [])]
        self.source.write_bytes(encode(records))
        for entryId in ("74a5faba", "nope", "722cc9d8"):
            error = self.assertRaises(
                NothingToFork, branchSession, self.source, self.dest,
                entryId=entryId, newSessionId="x", now=self.now)
            self.assertIsInstance(error, VehicleError)
            self.assertEqual((error.code, error.entryId), ("nothing_to_fork", entryId))
        self.assertFalse(self.dest.exists())

    def test_timestampFormat(self) -> None:
        """
        A naive C{now} counts as UTC; another zone is converted.
        """
        naive = branchSession(self.source, self.dest, entryId=None, newSessionId="a",
                              now=datetime(2026, 11, 30, 7, 1, 2, 3000))
        self.assertEqual(naive.path.name, "2026-11-30T07-01-02-003Z_a.jsonl")
        zoned = branchSession(
            self.source, self.dest, entryId=None, newSessionId="b",
            now=datetime(2026, 11, 30, 9, 1, 2, tzinfo=timezone(timedelta(hours=2))))
        self.assertEqual(self.lines(zoned.path)[0]["timestamp"], "2026-11-30T07:01:02.000Z")

    def test_existingDestination(self) -> None:
        """
        A destination that exists is not overwritten.
        """
        branchSession(self.source, self.dest, entryId=None, newSessionId="a", now=self.now)
        self.assertRaises(FileExistsError, branchSession, self.source, self.dest,
                          entryId=None, newSessionId="a", now=self.now)

    def test_tornSource(self) -> None:
        """
        A torn last line of the source is left out of the copy.
        """
        with open(self.source, "ab") as f:
            f.write(b'{"type":"message","id":"torn')
        result = branchSession(self.source, self.dest, entryId=None, newSessionId="t",
                               now=self.now)
        self.assertEqual(self.lines(result.path)[-1]["id"], "c0ffee00")
