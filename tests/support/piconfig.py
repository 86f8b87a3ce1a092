"""
pi's boot configuration in the tests: L{providerConfig}, the C{sophia}
provider's entry (one model, C{fake-1}, at a base URL with a key).
"""

from __future__ import annotations

from typing import Any


def providerConfig(baseUrl: str, key: str) -> dict[str, Any]:
    return {
        "baseUrl": baseUrl,
        "api": "openai-completions",
        "apiKey": key,
        "models": [
            {
                "id": "fake-1",
                "name": "Fake One",
                "reasoning": False,
                "input": ["text"],
                "cost": {"input": 3, "output": 15, "cacheRead": 0, "cacheWrite": 0},
                "contextWindow": 128000,
                "maxTokens": 4096,
            }
        ],
    }
