"""
Tests for L{vehicle.box._apis}: what the model proxy knows of each provider
API (the routes it passes, where a key goes, the stream a spare is primed
with).  The proxy itself, on a real socket, is L{tests.live.test_proxy}; pi
through it, L{tests.live.test_apis_live}.
"""

from __future__ import annotations

import json
from typing import Any

from twisted.trial.unittest import SynchronousTestCase

from vehicle.box._apis import (
    KEY_HEADERS,
    MODEL_ROUTES,
    PRIMING_ANSWER,
    PRIMING_GENERATED,
    PRIMING_MESSAGE,
    PRIMING_RESPONSE,
    PROXIED_APIS,
    isModelPath,
    primingAnswer,
    throughProxy,
)
from vehicle.box import _apis
from vehicle.models import ModelCatalog

from tests.support._hints import assertAnnotationsResolve


def events(stream: bytes) -> list[tuple[str | None, Any]]:
    """
    An event stream's events: each one's name (L{None} when it has none)
    and its data, parsed.
    """
    found = []
    for block in stream.replace(b"\r\n", b"\n").split(b"\n\n"):
        if not block:
            continue
        name, data = None, None
        for line in block.decode("utf-8").split("\n"):
            if line.startswith("event: "):
                name = line[len("event: "):]
            elif line.startswith("data: "):
                data = line[len("data: "):]
        assert data is not None, block
        found.append((name, data if data == "[DONE]" else json.loads(data)))
    return found


class RouteTests(SynchronousTestCase):
    """
    L{isModelPath}: the model routes of the APIs a proxy speaks, after the
    C{/v1} of the address a body is given, with or without a query.
    """

    def test_theRoutes(self) -> None:
        """
        OpenAI's chat completions and responses, Anthropic's messages (as
        its client asks, C{/v1} again), and one Google model's content,
        streamed or not.
        """
        for path in (
            "/v1/chat/completions", "/v1/responses", "/v1/messages", "/v1/v1/messages",
            "/v1/v1/messages?beta=true", "/v1/models/gemini-2.5-flash:streamGenerateContent",
            "/v1/models/gemini-1:streamGenerateContent?alt=sse", "/v1/models/g_1:generateContent",
            "/v1/models/G1:GenerateContent",
        ):
            self.assertTrue(isModelPath(path), path)
        self.assertEqual(
            MODEL_ROUTES, {"/chat/completions", "/responses", "/messages", "/v1/messages"}
        )

    def test_nothingElse(self) -> None:
        """
        Another path of those APIs (their files, tokens, model lists), one
        that is not under the proxy's C{/v1}, one with more after the
        route, and a Google model name that is empty, starts with a dot or
        holds a slash, are no model routes.
        """
        for path in (
            "/chat/completions", "/v2/chat/completions", "/v1/chat/completions/x",
            "/v1/v1/chat/completions", "/v1/files", "/v1/models", "/v1/embeddings",
            "/v1/models/gemini-1:countTokens", "/v1/models/:generateContent",
            "/v1/models/..:generateContent", "/v1/models/a/b:generateContent",
            "/v1/models/g:streamGenerateContent/x", "/v1/tunedModels/g:generateContent",
            "/v1/models/g:streamgeneratecontent", "", "/", "/v1", "/v1/",
            "/v1/chat/completionsX", "/v1/Xchat/completions",
        ):
            self.assertFalse(isModelPath(path), path)


class KeyHeaderTests(SynchronousTestCase):
    def test_whereKeysGo(self) -> None:
        """
        A key goes as a bearer (OpenAI's, and pi's C{authHeader}), in
        Anthropic's C{x-api-key} or in Google's C{x-goog-api-key}, as it
        is, nothing before it.
        """
        self.assertEqual(
            dict(KEY_HEADERS),
            {b"authorization": b"Bearer ", b"x-api-key": b"", b"x-goog-api-key": b""},
        )


def numbers(value: Any) -> list[int | float]:
    """
    Every number in a parsed JSON value.
    """
    if isinstance(value, bool):
        return []
    if isinstance(value, (int, float)):
        return [value]
    if isinstance(value, dict):
        return [n for item in value.values() for n in numbers(item)]
    if isinstance(value, list):
        return [n for item in value for n in numbers(item)]
    return []


class PrimingTests(SynchronousTestCase):
    """
    L{primingAnswer}: the one answer a spare's proxy gives, in the stream of
    the API its pi asked in, one word, no tokens.
    """

    def test_nothingCounted(self) -> None:
        """
        In every priming stream each number is 0: no token is counted (the
        priming costs nothing), and the one word is the first of the first
        item, as a real answer's would be.
        """
        for stream in (PRIMING_ANSWER, PRIMING_MESSAGE, PRIMING_RESPONSE, PRIMING_GENERATED):
            found = [n for _, data in events(stream) for n in numbers(data)]
            self.assertTrue(found)
            self.assertEqual(set(found), {0}, stream)

    def test_byPath(self) -> None:
        """
        Each API's path has its own stream; another path has none (the
        proxy refuses it).
        """
        self.assertEqual(primingAnswer("/v1/chat/completions"), PRIMING_ANSWER)
        self.assertEqual(primingAnswer("/v1/responses"), PRIMING_RESPONSE)
        self.assertEqual(primingAnswer("/v1/v1/messages"), PRIMING_MESSAGE)
        self.assertEqual(
            primingAnswer("/v1/models/gemini-1:streamGenerateContent"), PRIMING_GENERATED
        )
        for path in ("/v1/messages", "/v1/files", "/chat/completions", "/v1/models/g:countTokens",
                     "/models/g:streamGenerateContent", ""):
            self.assertIsNone(primingAnswer(path), path)

    def test_chatCompletions(self) -> None:
        """
        OpenAI's chat completion chunks: the word, the stop, a usage of
        nothing, then C{[DONE]}.
        """
        found = events(PRIMING_ANSWER)
        self.assertEqual([name for name, _ in found], [None] * 4)
        self.assertEqual(found[0][1]["choices"][0]["delta"]["content"], "ready")
        self.assertEqual(found[1][1]["choices"][0]["finish_reason"], "stop")
        self.assertEqual(found[2][1]["usage"]["total_tokens"], 0)
        self.assertEqual(found[3][1], "[DONE]")

    def test_namedStreams(self) -> None:
        """
        Anthropic's and OpenAI's responses streams name each event by its
        type; each says the word once and ends as that API ends a message.
        """
        for stream, last, word in (
            (PRIMING_MESSAGE, "message_stop",
             lambda data: data.get("delta", {}).get("text")),
            (PRIMING_RESPONSE, "response.completed",
             lambda data: data.get("delta") if data["type"].endswith(".delta") else None),
        ):
            found = events(stream)
            self.assertEqual([name for name, _ in found], [data["type"] for _, data in found])
            self.assertEqual(found[-1][0], last)
            self.assertEqual([w for w in map(word, (d for _, d in found)) if w], ["ready"])

    def test_generated(self) -> None:
        """
        Google's stream: one response with the word, its finish, and a usage
        of nothing.
        """
        [(name, data)] = events(PRIMING_GENERATED)
        self.assertIsNone(name)
        [candidate] = data["candidates"]
        self.assertEqual(candidate["content"]["parts"], [{"text": "ready"}])
        self.assertEqual(candidate["finishReason"], "STOP")
        self.assertEqual(data["usageMetadata"]["totalTokenCount"], 0)


class ThroughProxyTests(SynchronousTestCase):
    def test_byApi(self) -> None:
        """
        The models a proxy reaches are those of the four APIs, by the
        model's own C{api}, else its provider's.
        """
        self.assertEqual(PROXIED_APIS, {
            "openai-completions", "openai-responses", "anthropic-messages",
            "google-generative-ai",
        })
        models = ModelCatalog({
            api.split("-")[0] + str(n): {"baseUrl": "u", "api": api, "models": [{"id": "m"}]}
            for n, api in enumerate(sorted(PROXIED_APIS))
        } | {
            "bed": {"baseUrl": "u", "api": "bedrock-converse-stream",
                    "models": [{"id": "b"}, {"id": "c", "api": "anthropic-messages"}]},
            "none": {"baseUrl": "u", "models": [{"id": "n"}]},
        }, None)
        self.assertEqual(
            throughProxy(models),
            {"anthropic0/m", "google1/m", "openai2/m", "openai3/m", "bed/c"},
        )


class AnnotationTests(SynchronousTestCase):
    def test_annotationsResolve(self) -> None:
        """
        Every annotation of the module is a type.
        """
        assertAnnotationsResolve(self, _apis)
