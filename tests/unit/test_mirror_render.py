"""
Tests for L{vehicle.mirror._render}: the conversation document's markdown,
its title and the fork's point of divergence, as pure functions.
"""

from __future__ import annotations

from typing import Any

from attrs import evolve
from hypothesis import given, strategies as st
from twisted.trial.unittest import SynchronousTestCase

from vehicle.body import ToolCall, TranscriptItem, parseSession
from vehicle.protocol import Parent
from vehicle.mirror._render import (
    UNTITLED,
    branchLink,
    divergenceIndex,
    documentIdFor,
    documentTitle,
    firstQuestion,
    personWords,
    renderConversation,
    shorten,
)

from tests.support.pifiles import HEADER, USAGE, encode
from tests.support.pifiles import assistant as piAssistant, user as piUser


#: 2026-11-30T07:00:00Z
START = 1796022000.0


def user(entryId: str, text: str, at: str) -> TranscriptItem:
    return TranscriptItem(entryId=entryId, role="user", text=text, timestamp=at)


def assistant(
    entryId: str, text: str, at: str, tools: tuple[str, ...] = ()
) -> TranscriptItem:
    return TranscriptItem(
        entryId=entryId,
        role="assistant",
        text=text,
        toolCalls=tuple(ToolCall(id=f"call-{n}", name=n) for n in tools),
        timestamp=at,
    )


def result(entryId: str, toolName: str, isError: bool = False) -> TranscriptItem:
    return TranscriptItem(
        entryId=entryId,
        role="toolResult",
        text="SECRET-RESULT",
        toolName=toolName,
        isError=isError,
        timestamp="2026-11-30T07:00:51.500Z",
    )


TRANSCRIPT = [
    user("u1", "What grows in **my** garden?\n\n[open in Garden: doc-7, doc-9]",
         "2026-11-30T07:00:50.282Z"),
    assistant("a1", "Let me look.", "2026-11-30T07:00:51.000Z",
              ("read_document", "search_documents")),
    result("r1", "read_document"),
    result("r2", "search_documents", isError=True),
    assistant("a2", "Tomatoes and *basil*.", "2026-11-30T07:00:52.000Z"),
    user("u2", "Thanks", "2026-11-30T07:05:00.000Z"),
    assistant("a3", "You're welcome.", "2026-11-30T07:05:01.000Z"),
]


def render(**overrides: Any) -> str:
    arguments: dict[str, Any] = {
        "model": "openai/gpt-4o-mini",
        "createdAt": START,
        "person": "alice@example.com",
        "transcript": TRANSCRIPT,
    }
    arguments.update(overrides)
    return renderConversation(**arguments)


class RenderTests(SynchronousTestCase):
    """
    L{renderConversation}.
    """

    def test_header(self) -> None:
        """
        The document opens with the model and the start, in UTC, and not the
        title (a rename alone must leave the content as it is).
        """
        text = render()
        first = text.split("\n", 1)[0]
        self.assertIn("`openai/gpt-4o-mini`", first)
        self.assertIn("2026-11-30 07:00 UTC", first)
        self.assertNotIn("# ", text)

    def test_turns(self) -> None:
        """
        Each turn says who and when (UTC), in order: the person, then the
        assistant once for all of its messages of that turn.
        """
        text = render()
        order = [
            "**alice@example.com** \u00b7 2026-11-30 07:00:50 UTC",
            "What grows in **my** garden?",
            "**Sophia** \u00b7 2026-11-30 07:00:51 UTC",
            "Let me look.",
            "Tomatoes and *basil*.",
            "**alice@example.com** \u00b7 2026-11-30 07:05:00 UTC",
            "Thanks",
            "**Sophia** \u00b7 2026-11-30 07:05:01 UTC",
            "You're welcome.",
        ]
        positions = [text.index(piece) for piece in order]
        self.assertEqual(positions, sorted(positions))
        self.assertEqual(text.count("**Sophia**"), 2)
        self.assertEqual(text.count("\n---\n"), 2)

    def test_chips(self) -> None:
        """
        Tool calls are one-line chips; a failed one says so; the results'
        text never shows.
        """
        text = render()
        self.assertIn(
            "`\u2699 read_document` `\u2699 search_documents (failed)`", text
        )
        self.assertNotIn("SECRET-RESULT", text)

    def test_contextNoteStripped(self) -> None:
        """
        The person's words are as they wrote them, without the note of what
        they had open.
        """
        text = render()
        self.assertNotIn("open in Garden", text)
        self.assertNotIn("doc-7", text)

    def test_noUsage(self) -> None:
        """
        Nothing but the text and tool names of a message is rendered, so
        the usage and cost pi's file holds for a reply never show.
        """
        records = [HEADER, piUser("u0000001", None, 1, "hi"),
                   piAssistant("a0000001", "u0000001", 2, [{"type": "text", "text": "ok"}])]
        text = render(transcript=parseSession(encode(records)).transcript())
        self.assertIn("ok", text)
        self.assertNotIn(str(USAGE["totalTokens"]), text)
        self.assertNotIn("0.00375", text)

    def test_cutMarked(self) -> None:
        """
        A message the reader cut short says so.
        """
        item = evolve(assistant("a9", "long", "2026-11-30T07:00:51.000Z"), truncated=True)
        self.assertIn("long \u2026 *(cut)*", render(transcript=[item]))
        self.assertNotIn("(cut)", render())

    def test_collaborator(self) -> None:
        """
        A chimed message is attributed to its collaborator, not the owner,
        and the attribution line is not repeated as words.
        """
        text = render(
            transcript=[
                user("u1", "[bob collaborator]\nMay I add something?",
                     "2026-11-30T07:00:50.000Z")
            ]
        )
        self.assertIn("**bob** \u00b7", text)
        self.assertNotIn("alice", text)
        self.assertNotIn("[bob collaborator]", text)

    def test_namesEscaped(self) -> None:
        """
        A name with markdown in it cannot break out of its bold.
        """
        text = render(person="eve**_`x", transcript=[TRANSCRIPT[0]])
        self.assertIn("**eve\\*\\*\\_\\`x**", text)

    def test_utf8(self) -> None:
        """
        Non-ASCII text (CJK, emoji, combining marks) comes through as is
        and encodes to UTF-8.
        """
        words = "Gr\u00fc\u00dfe aus \u6771\u4eac \U0001f331 e\u0301"
        text = render(transcript=[user("u1", words, "2026-11-30T07:00:50.000Z")])
        self.assertIn(words, text)
        self.assertIn(words.encode("utf-8"), text.encode("utf-8"))

    def test_fork(self) -> None:
        """
        A fork links its parent's document before the first message it did
        not inherit.
        """
        parent = Parent(**{"sessionId": "p-1", "kind": "fork", "entryId": "u2"})
        text = render(parent=parent, divergeAt=5)
        link = "*Branched from [[sophia-conversation-p-1]]*"
        self.assertIn(link, text)
        self.assertLess(text.index("Tomatoes"), text.index(link))
        self.assertLess(text.index(link), text.index("Thanks"))
        self.assertNotIn("Duplicated", text)

    def test_forkBeforeFirstMessage(self) -> None:
        """
        A fork with no history (or nothing new yet) still shows its link.
        """
        parent = Parent(**{"sessionId": "p-1", "kind": "fork", "entryId": "u1"})
        for transcript, divergeAt in (([], 0), (TRANSCRIPT, len(TRANSCRIPT))):
            text = render(transcript=transcript, parent=parent, divergeAt=divergeAt)
            self.assertEqual(text.count("Branched from [[sophia-conversation-p-1]]"), 1)

    def test_clone(self) -> None:
        """
        A clone's header says what it duplicates, before any turn.
        """
        parent = Parent(**{"sessionId": "p-2", "kind": "clone", "entryId": None})
        text = render(parent=parent, divergeAt=3)
        link = "*Duplicated from [[sophia-conversation-p-2]]*"
        self.assertIn(link, text)
        self.assertLess(text.index(link), text.index("What grows"))
        self.assertNotIn("Branched", text)

    def test_branchLink(self) -> None:
        """
        No parent, no link.
        """
        self.assertIsNone(branchLink(None))


class TitleTests(SynchronousTestCase):
    """
    L{documentTitle}, L{firstQuestion}, L{shorten}.
    """

    def test_titleWins(self) -> None:
        """
        The session's title names the document.
        """
        self.assertEqual(documentTitle("  Roses  ", TRANSCRIPT), "Roses")

    def test_firstQuestion(self) -> None:
        """
        Without a title: the first question as written, without the note.
        """
        self.assertEqual(documentTitle(None, TRANSCRIPT), "What grows in **my** garden?")
        self.assertEqual(documentTitle("", TRANSCRIPT), "What grows in **my** garden?")

    def test_forkTitle(self) -> None:
        """
        A fork is titled by its own first message, and by the first of its
        history before it has one.
        """
        self.assertEqual(documentTitle(None, TRANSCRIPT, 5), "Thanks")
        self.assertEqual(
            documentTitle(None, TRANSCRIPT[:5], 5), "What grows in **my** garden?"
        )

    def test_untitled(self) -> None:
        """
        Nobody has said anything: a placeholder.
        """
        self.assertEqual(documentTitle(None, []), UNTITLED)
        self.assertIsNone(firstQuestion([]))

    def test_shortened(self) -> None:
        """
        A long first question is cut near 80 characters at a word.
        """
        question = "word " * 40
        title = documentTitle(None, [user("u1", question, "2026-11-30T07:00:50Z")])
        self.assertLessEqual(len(title), 80)
        self.assertTrue(title.endswith("word\u2026"))

    @given(st.text())
    def test_shortenBounds(self, text: str) -> None:
        """
        Whatever the text, the title is one line of at most 80 characters.
        """
        line = shorten(text)
        self.assertLessEqual(len(line), 80)
        self.assertNotIn("\n", line)
        if len(" ".join(text.split())) <= 80:
            self.assertEqual(line, " ".join(text.split()))

    def test_documentId(self) -> None:
        """
        One document per session, named after it.
        """
        self.assertEqual(documentIdFor("abc"), "sophia-conversation-abc")

    def test_personWords(self) -> None:
        """
        The note is taken off only when it ends the text.
        """
        self.assertEqual(personWords("hi\n\n[open in Garden: a]"), (None, "hi"))
        self.assertEqual(
            personWords("hi\n\n[open in Garden: a] more"),
            (None, "hi\n\n[open in Garden: a] more"),
        )


class DivergenceTests(SynchronousTestCase):
    """
    L{divergenceIndex}.
    """

    def test_inheritedAreOlder(self) -> None:
        """
        The items older than the branch are its inherited history.
        """
        createdAt = START + 120  # 07:02
        self.assertEqual(divergenceIndex(TRANSCRIPT, createdAt), 5)
        self.assertEqual(divergenceIndex(TRANSCRIPT, START), 0)
        self.assertEqual(divergenceIndex(TRANSCRIPT, START + 3600), len(TRANSCRIPT))

    def test_missingTimestamp(self) -> None:
        """
        An item without a time is not taken as inherited.
        """
        items = [TranscriptItem(entryId="u1", role="user", text="x")]
        self.assertEqual(divergenceIndex(items, START + 3600), 0)
