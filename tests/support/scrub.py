"""
The key the own-key proxy must scrub: C{KEY}, with a quote and a backslash
so that its JSON form differs from it, and L{escaped}, that JSON form
(what a provider echoing it inside a JSON string sends).
"""

from __future__ import annotations

import json


KEY = 'sk-or-v1-"quoted"\\slash-0123456789abcdef'


def escaped(key: str) -> str:
    return json.dumps(key)[1:-1]
