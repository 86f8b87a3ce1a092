# -*- test-case-name: tests.live.test_apis_live -*-
"""
Providers on pi's other APIs than OpenAI's chat completions, with real pi
and the scripted model behind each: OpenAI's responses
(C{openai-responses}), Anthropic's messages (C{anthropic-messages}) and
Google's generateContent (C{google-generative-ai}).  A body started with
the key sends it itself, in that API's header; a spare and a boxed agent
reach the provider through their proxy, which takes the body's token from
the header that API's client puts a key in, puts the key there, and passes
the path that client asks for after the provider's own base; a spare
started on such a default is primed by its proxy in that API's stream.
"""

from __future__ import annotations

import json
from typing import Any, ClassVar

from twisted.trial.unittest import TestCase

from tests.support.live import LiveHost, readySpare, settledEvent
from tests.support.scripted import writeMarker


class _ApiTests:
    """
    Conversations on the provider of L{api}, whose client sends its key in
    L{keyHeader}.  (Mixed into a L{TestCase}.)
    """

    timeout = 120
    api: ClassVar[str]
    keyHeader: ClassVar[str]

    def host(self, **overrides: Any) -> LiveHost:
        return LiveHost(self, api=self.api, spareRefillMs=60000, **overrides)  # type: ignore[arg-type]

    def assertOnTheApi(self, host: LiveHost, tokens: list[str] = []) -> None:
        """
        Every request the model had was for the provider's model, with the
        host's key in that API's header, and none of C{tokens}.
        """
        test: Any = self
        test.assertTrue(host.model.requests)
        for headers, _ in host.model.requests:
            bearer = "Bearer " if self.keyHeader == "authorization" else ""
            test.assertEqual(headers[self.keyHeader], bearer + host.apiKey)
            if self.keyHeader != "authorization":
                test.assertNotIn("authorization", headers)
            for token in tokens:
                test.assertNotIn(token, json.dumps(headers))

    async def talk(self, host: LiveHost, sid: str, text: str) -> list[dict[str, Any]]:
        test: Any = self
        await host.command(sid, "prompt", "p1", text=text)
        events = await host.waitFor(sid, settledEvent)
        test.assertFalse(events[-1]["data"]["aborted"], events[-1])
        completed = [e for e in events if e["type"] == "message.completed"]
        test.assertIn(f"you said: '{text}'", json.dumps(completed[-1]))
        return events

    async def test_aBodyWithTheKey(self) -> None:
        """
        With no spare, the conversation's body is started with the key and
        pi speaks the API to the provider itself.
        """
        host = await self.host(spareBodies=0).start()
        sid = await host.create(model=host.apiModel)
        await self.talk(host, sid, "hello there")
        self.assertOnTheApi(host)

    async def test_aSpareTakesIt(self) -> None:
        """
        A spare started on the default (an OpenAI-style provider) is set to
        the model at the hand-off; its proxy swaps its token for the key in
        that API's header.
        """
        host = await self.host(spareBodies=1).start()
        spare = await readySpare(host)
        sid = await host.create(model=host.apiModel)
        test: Any = self
        test.assertEqual(sid, spare.sessionId)
        events = await self.talk(host, sid, "hello spare")
        materialized = [e for e in events if e["type"] == "body.materialized"]
        test.assertEqual(materialized[0]["data"]["pid"], spare.transport.pid)
        self.assertOnTheApi(host, [spare.proxy.proxy.token])

    async def test_aSpareOnThisDefault(self) -> None:
        """
        A spare started on a default of this API is primed by its proxy (in
        that API's stream; nothing reaches the provider), and then carries
        a new conversation there.
        """
        host = await self.host(spareBodies=1, apiDefault=True).start()
        spare = await readySpare(host)
        test: Any = self
        test.assertTrue(spare.proxy.proxy.primed)
        test.assertEqual(host.model.requests, [])
        sid = await host.create()
        test.assertEqual(sid, spare.sessionId)
        await self.talk(host, sid, "hello default")
        self.assertOnTheApi(host, [spare.proxy.proxy.token])
        test.assertEqual(len(host.model.requests), 1)

    async def test_aBoxedAgentUsesItsTools(self) -> None:
        """
        A boxed agent on the model (through its proxy, never the key) calls
        a tool that writes into the session's workspace, and the model gets
        the tool's result back.
        """
        host = await self.host(spareBodies=0).start()
        sid = await host.create(profile="agent", model=host.apiModel)
        await host.command(sid, "prompt", "p1",
                           text="make it " + writeMarker("made.txt", "made there"))
        events = await host.waitFor(sid, settledEvent)
        test: Any = self
        test.assertFalse(events[-1]["data"]["aborted"], events[-1])
        test.assertEqual((host.root / "workspaces" / sid / "made.txt").read_text(), "made there")
        self.assertOnTheApi(host)
        test.assertEqual(len(host.model.requests), 2)
        test.assertIn("answered", json.dumps(events))


class AnthropicTests(_ApiTests, TestCase):
    """
    Anthropic's messages API: the key in C{x-api-key}, the path
    C{/v1/messages} added to the host name by its client.
    """

    api = "anthropic-messages"
    keyHeader = "x-api-key"


class GoogleTests(_ApiTests, TestCase):
    """
    Google's generateContent: the key in C{x-goog-api-key}, the path
    C{/models/<id>:streamGenerateContent} added to a base that ends in its
    version.
    """

    api = "google-generative-ai"
    keyHeader = "x-goog-api-key"


class ResponsesTests(_ApiTests, TestCase):
    """
    OpenAI's responses API: the key as a bearer, the path C{/responses}
    after a base that ends in C{/v1}.
    """

    api = "openai-responses"
    keyHeader = "authorization"
