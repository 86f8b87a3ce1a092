"""
C{vehicle ride} in the tests: C{MODEL_KEY}, a user's own model key, and
L{startRider}, the console script in a child driven frame by frame (the
live tests start it; a L{tests.support._clients.Client}).
"""

from __future__ import annotations

import json
from typing import Any, Callable

from twisted.trial.unittest import TestCase

from tests.support._clients import Client, startClient


MODEL_KEY = "sk-or-own-key-0123456789"


def startRider(
    testCase: TestCase,
    onFrame: Callable[[Client, dict[str, Any]], None],
    *args: str,
    env: dict[str, str],
) -> Client:
    """
    Run C{vehicle ride <args>} with its standard input left open:
    C{onFrame(client, frame)} is called with each frame it writes (and may
    C{send} a request line, or close the input).
    """
    return startClient(
        testCase, "ride", *args, env=env, stdin=None,
        onLine=lambda client, line: onFrame(client, json.loads(line)),
    )
