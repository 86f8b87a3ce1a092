# -*- test-case-name: tests.unit.test_conductor,tests.unit.test_earlybodies -*-
"""
The extension's questions (UI C{input}, C{confirm}, C{select} and
C{editor} requests in pi's RPC) and the host's answers to them: the
session's delegation token, a spare's session facts, and no to anything
else (the host has no person at a prompt).
"""

from __future__ import annotations

from vehicle.protocol import JSON, JSONObject


#: The extension's question for its session's facts, at a spare's hand-off.
SESSION_TITLE = "sophia.session"

#: The extension's question for the session's delegation token, before an
#: MCP request to the graph.
TOKEN_TITLE = "sophia.delegated-token"


def isQuestion(event: JSONObject) -> bool:
    """
    Does C{event} (one of pi's records) wait for an answer?
    """
    return event.get("type") == "extension_ui_request" and event.get("method") in (
        "input", "confirm", "select", "editor",
    )


def asksForFacts(event: JSONObject) -> bool:
    """
    Is C{event} (a question) the extension's question for its session's
    facts?
    """
    return event.get("method") == "input" and event.get("title") == SESSION_TITLE


def _answer(event: JSONObject, **fields: JSON) -> JSONObject:
    return {"type": "extension_ui_response", "id": event.get("id"), **fields}


def answered(event: JSONObject, value: str) -> JSONObject:
    """
    The answer C{value} to C{event} (an C{input}).
    """
    return _answer(event, value=value)


def refusal(event: JSONObject) -> JSONObject:
    """
    The answer no (cancelled) to C{event}.
    """
    return _answer(event, cancelled=True)


def answerFor(request: JSONObject, token: str | None) -> JSONObject:
    """
    A session's body's answer to C{request}: the delegation token the
    session holds now (C{token}), if asked for and held; no to anything
    else (a C{confirm} is not confirmed).
    """
    if request.get("method") == "input" and request.get("title") == TOKEN_TITLE and token:
        return answered(request, token)
    if request.get("method") == "confirm":
        return _answer(request, confirmed=False)
    return refusal(request)
