# -*- test-case-name: tests.live.test_anthropic_live -*-
"""
A provider on Anthropic's messages API (pi's C{anthropic-messages}), with
real pi and the scripted model behind that API: a body started with the
key sends it itself (C{x-api-key}); a spare and a boxed agent reach the
provider through their proxy, which takes the body's token from the header
that API's client puts a key in, puts the key there, and passes the path
that client adds (C{/v1/messages} after the address); a spare started on
such a default is primed by its proxy in that API's events.
"""

from __future__ import annotations

import json
from typing import Any

from twisted.trial.unittest import TestCase

from tests.support.live import LiveHost, readySpare, settledEvent
from tests.support.scripted import writeMarker


class AnthropicTests(TestCase):
    """
    Conversations on C{anth/claude-1}.
    """

    timeout = 120

    def assertOnAnthropic(self, host: LiveHost, tokens: list[str] = []) -> None:
        """
        Every request the model had was Anthropic's, for C{claude-1}, with
        the host's key in its header and none of C{tokens}.
        """
        self.assertTrue(host.model.requests)
        for headers, body in host.model.requests:
            self.assertEqual(body["model"], "claude-1")
            self.assertEqual(headers["x-api-key"], host.anthKey)
            self.assertNotIn("authorization", headers)
            self.assertIn("anthropic-version", headers)
            for token in tokens:
                self.assertNotIn(token, json.dumps(headers))

    async def talk(self, host: LiveHost, sid: str, text: str) -> list[dict[str, Any]]:
        await host.command(sid, "prompt", "p1", text=text)
        events = await host.waitFor(sid, settledEvent)
        self.assertFalse(events[-1]["data"]["aborted"], events[-1])
        completed = [e for e in events if e["type"] == "message.completed"]
        self.assertIn(f"you said: '{text}'", json.dumps(completed[-1]))
        return events

    async def test_aBodyWithTheKey(self) -> None:
        """
        With no spare, the conversation's body is started with the key and
        pi speaks Anthropic's API to the provider itself.
        """
        host = await LiveHost(self, spareBodies=0, anthropic=True).start()
        sid = await host.create(model="anth/claude-1")
        await self.talk(host, sid, "hello anthropic")
        self.assertOnAnthropic(host)
        [(_, body)] = host.model.requests
        self.assertEqual([m["role"] for m in body["messages"]], ["user"])

    async def test_aSpareTakesIt(self) -> None:
        """
        A spare started on the default (an OpenAI-style provider) is set to
        the Anthropic model at the hand-off; its proxy swaps its token in
        C{x-api-key} for the key.
        """
        host = await LiveHost(self, spareBodies=1, spareRefillMs=60000, anthropic=True).start()
        spare = await readySpare(host)
        token = spare.proxy.proxy.token
        sid = await host.create(model="anth/claude-1")
        self.assertEqual(sid, spare.sessionId)
        events = await self.talk(host, sid, "hello spare")
        materialized = [e for e in events if e["type"] == "body.materialized"]
        self.assertEqual(materialized[0]["data"]["pid"], spare.transport.pid)
        self.assertOnAnthropic(host, [token])

    async def test_aSpareOnAnAnthropicDefault(self) -> None:
        """
        A spare started on an Anthropic default is primed by its proxy (in
        that API's events; nothing reaches the provider), and then carries
        a new conversation there.
        """
        host = await LiveHost(self, spareBodies=1, spareRefillMs=60000,
                              anthropic="default").start()
        spare = await readySpare(host)
        self.assertTrue(spare.proxy.proxy.primed)
        self.assertEqual(host.model.requests, [])
        sid = await host.create()
        self.assertEqual(sid, spare.sessionId)
        await self.talk(host, sid, "hello default")
        self.assertOnAnthropic(host, [spare.proxy.proxy.token])
        [(_, body)] = host.model.requests
        self.assertEqual([m["role"] for m in body["messages"]], ["user"])

    async def test_aBoxedAgentUsesItsTools(self) -> None:
        """
        A boxed agent on the Anthropic model (through its proxy, never the
        key) calls a tool that writes into the session's workspace, and the
        model gets the tool's result back.
        """
        host = await LiveHost(self, spareBodies=0, anthropic=True).start()
        sid = await host.create(profile="agent", model="anth/claude-1")
        await host.command(sid, "prompt", "p1",
                           text="make it " + writeMarker("made.txt", "made on anthropic"))
        events = await host.waitFor(sid, settledEvent)
        self.assertFalse(events[-1]["data"]["aborted"], events[-1])
        self.assertEqual((host.root / "workspaces" / sid / "made.txt").read_text(),
                         "made on anthropic")
        self.assertOnAnthropic(host)
        self.assertEqual(len(host.model.requests), 2)
        last = host.model.requests[-1][1]["messages"][-1]
        self.assertEqual([b["type"] for b in last["content"]], ["tool_result"])
