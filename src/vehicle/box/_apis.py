# -*- test-case-name: tests.unit.test_providerapis,tests.live.test_proxy,tests.live.test_apis_live -*-
"""
The provider APIs a body's model proxy speaks (pi's C{openai-completions},
C{openai-responses}, C{anthropic-messages} and C{google-generative-ai}):
the routes their clients ask for after the proxy's address, the headers
they put a key in, and the answer a spare's proxy primes pi with in each
API's stream (it never reaches a provider).
"""

from __future__ import annotations

import json
import re

from vehicle.models import ModelCatalog
from vehicle.protocol import JSONObject


#: pi's APIs a proxy speaks (the others' clients ask for routes it does not
#: pass, or sign their requests with the key).
PROXIED_APIS = frozenset(
    {"openai-completions", "openai-responses", "anthropic-messages", "google-generative-ai"}
)


def reachesThroughProxy(models: ModelCatalog, model: str) -> bool:
    """
    Can a body reach C{model} (of C{models}) through its proxy: is its API
    one the proxy speaks?
    """
    return models.apiOf(model) in PROXIED_APIS


def throughProxy(models: ModelCatalog) -> frozenset[str]:
    """
    The models of C{models} a body can reach through its proxy (a spare
    serves these, and only these).
    """
    return frozenset(name for name in models.names() if reachesThroughProxy(models, name))


#: Where a provider's client puts its key, and what comes before it there:
#: a bearer (OpenAI's, and pi's C{authHeader}), Anthropic's header,
#: Google's.
KEY_HEADERS = ((b"authorization", b"Bearer "), (b"x-api-key", b""), (b"x-goog-api-key", b""))

#: The model routes a body may use (pi's provider APIs), POST only, as they
#: follow the C{/v1} that ends the address a body is given for its proxy
#: (and that the provider's C{baseUrl} stands in for): OpenAI's chat
#: completions and responses, whose clients add their path to a base that
#: ends in C{/v1}, Anthropic's messages, whose client adds C{/v1} itself
#: (its base is the host name alone), and Google's generateContent of a
#: model (L{_GENERATE}; its base ends in its version, C{/v1beta}).
MODEL_ROUTES = frozenset({"/chat/completions", "/responses", "/messages", "/v1/messages"})

#: Google's route: one model's content generated, streamed or not.
_GENERATE = re.compile(r"/models/[A-Za-z0-9][A-Za-z0-9._-]*:(?:stream)?[gG]enerateContent")


#: The chat completion a spare's proxy answers its priming prompt with, as
#: the event stream pi asked for: one word, no tokens, no cost.  It never
#: reaches a provider, and it stays in the spare's own session.
PRIMING_ANSWER = b"".join(
    b"data: " + json.dumps(chunk, separators=(",", ":")).encode("ascii") + b"\n\n"
    for chunk in (
        {"id": "primed", "object": "chat.completion.chunk", "created": 0, "model": "primer",
         "choices": [{"index": 0, "delta": {"role": "assistant", "content": "ready"},
                      "finish_reason": None}]},
        {"id": "primed", "object": "chat.completion.chunk", "created": 0, "model": "primer",
         "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
        {"id": "primed", "object": "chat.completion.chunk", "created": 0, "model": "primer",
         "choices": [], "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}},
    )
) + b"data: [DONE]\n\n"

def _namedEvents(*events: JSONObject) -> bytes:
    """
    C{events} as an event stream whose every event is named by its
    C{type} (Anthropic's, and OpenAI's responses).
    """
    return b"".join(
        b"event: " + str(event["type"]).encode("ascii") + b"\ndata: "
        + json.dumps(event, separators=(",", ":")).encode("ascii") + b"\n\n"
        for event in events
    )


#: The same for a spare started on a model of Anthropic's messages API:
#: the events of one message of one word.
PRIMING_MESSAGE = _namedEvents(
    {"type": "message_start", "message": {
        "id": "primed", "type": "message", "role": "assistant", "model": "primer",
        "content": [], "stop_reason": None, "stop_sequence": None,
        "usage": {"input_tokens": 0, "output_tokens": 0}}},
    {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
    {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "ready"}},
    {"type": "content_block_stop", "index": 0},
    {"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None},
     "usage": {"output_tokens": 0}},
    {"type": "message_stop"},
)

#: The same for a spare started on a model of OpenAI's responses API: the
#: response made, one message of one word, the response completed.
PRIMING_RESPONSE = _namedEvents(
    {"type": "response.created", "response": {
        "id": "primed", "object": "response", "status": "in_progress", "output": []}},
    {"type": "response.output_item.added", "output_index": 0, "item": {
        "type": "message", "id": "msg_primed", "role": "assistant", "content": []}},
    {"type": "response.output_text.delta", "output_index": 0, "content_index": 0,
     "item_id": "msg_primed", "delta": "ready"},
    {"type": "response.output_item.done", "output_index": 0, "item": {
        "type": "message", "id": "msg_primed", "role": "assistant", "status": "completed",
        "content": [{"type": "output_text", "text": "ready", "annotations": []}]}},
    {"type": "response.completed", "response": {
        "id": "primed", "object": "response", "status": "completed", "output": [],
        "usage": {"input_tokens": 0, "output_tokens": 0, "total_tokens": 0}}},
)

#: The same for a spare started on a model of Google's API: one response.
PRIMING_GENERATED = b"data: " + json.dumps({
    "candidates": [{"content": {"parts": [{"text": "ready"}], "role": "model"},
                    "finishReason": "STOP", "index": 0}],
    "usageMetadata": {"promptTokenCount": 0, "candidatesTokenCount": 0, "totalTokenCount": 0},
}, separators=(",", ":")).encode("ascii") + b"\r\n\r\n"

#: The model paths a spare's proxy answers (its priming), by pi's API: its
#: C{openai-completions}, C{openai-responses} and C{anthropic-messages} (and
#: Google's, whose path names the model: L{primingAnswer}).
PRIMING_ANSWERS = {
    "/v1/chat/completions": PRIMING_ANSWER,
    "/v1/responses": PRIMING_RESPONSE,
    "/v1/v1/messages": PRIMING_MESSAGE,
}


def primingAnswer(path: str) -> bytes | None:
    """
    What a spare's proxy answers its priming prompt with at C{path}, in
    its API's stream; L{None} for a path no priming goes to.
    """
    if path.startswith("/v1/") and _GENERATE.fullmatch(path[len("/v1"):]):
        return PRIMING_GENERATED
    return PRIMING_ANSWERS.get(path)


def isModelPath(uri: str) -> bool:
    """
    Whether C{uri} (with its query) is one of the model routes
    (L{MODEL_ROUTES}) under the proxy's C{/v1}.
    """
    path = uri.split("?", 1)[0]
    if not path.startswith("/v1/"):
        return False
    route = path[len("/v1"):]
    return route in MODEL_ROUTES or _GENERATE.fullmatch(route) is not None
