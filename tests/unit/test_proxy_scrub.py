"""
The own-key proxy scrubs the caller's key out of everything the provider
sends back, also out of an error event inside a 200 stream and across the
pieces it arrives in (issue 10, section 3): L{KeyScrubber} cut at every
point, then the proxy in front of the scripted model echoing the key.
"""

from __future__ import annotations

from twisted.trial.unittest import SynchronousTestCase

from vehicle.box._proxy import KeyScrubber

from tests.support.scrub import KEY, escaped


class KeyScrubberTests(SynchronousTestCase):
    """
    L{KeyScrubber} on bodies cut into pieces anywhere.
    """

    body = (
        b'data: {"choices":[]}\n\n'
        + b'data: {"error":{"message":"Invalid key ' + KEY.encode()
        + b' (' + escaped(KEY).encode() + b')"}}\n\n'
        + b"data: [DONE]\n\n"
    )

    def scrubbed(self, pieces: list[bytes]) -> bytes:
        scrubber = KeyScrubber([KEY])
        out = []
        for piece in pieces:
            sent = scrubber.feed(piece)
            out.append(sent)
        out.append(scrubber.flush())
        return b"".join(out)

    def assertClean(self, data: bytes) -> None:
        for form in (KEY, escaped(KEY)):
            self.assertNotIn(form.encode(), data)
            # Not even its middle part.
            self.assertNotIn(form[5:-5].encode(), data)
        self.assertEqual(data.count(b"[redacted]"), 2)

    def test_everyCutInTwo(self) -> None:
        """
        Cut in two anywhere, the key never passes, and all else does.
        """
        whole = self.scrubbed([self.body])
        self.assertClean(whole)
        for at in range(len(self.body) + 1):
            self.assertEqual(self.scrubbed([self.body[:at], self.body[at:]]), whole, at)

    def test_byteByByte(self) -> None:
        """
        One byte at a time, the key never passes, and the bytes that come
        out are the same.
        """
        pieces = [self.body[i : i + 1] for i in range(len(self.body))]
        result = self.scrubbed(pieces)
        self.assertClean(result)
        self.assertEqual(result, self.scrubbed([self.body]))

    def test_streamStaysLive(self) -> None:
        """
        What cannot begin a key is passed on at once: only a tail that could
        is held back, until the next piece shows it is not one.
        """
        scrubber = KeyScrubber([KEY])
        self.assertEqual(scrubber.feed(b"data: hello\n\n"), b"data: hello\n\n")
        self.assertEqual(scrubber.feed(b"data: sk-or"), b"data: ")
        self.assertEqual(scrubber.feed(b"ange\n\n"), b"sk-orange\n\n")
        self.assertEqual(scrubber.flush(), b"")

    def test_noKeys(self) -> None:
        """
        With no key to look for, everything passes as it came.
        """
        scrubber = KeyScrubber([])
        self.assertEqual(scrubber.feed(self.body), self.body)
        self.assertEqual(scrubber.flush(), b"")
