# -*- test-case-name: tests.live.test_model -*-
"""
Test support: a scripted OpenAI-compatible model server.

L{ScriptedModel} answers chat-completions requests from a script of steps or
from markers in the conversation; C{python -m vehicle_local.model} runs it alone.
"""

from vehicle_local.model._model import Error, Hang, ScriptedModel, Step, Text, ToolCall, Usage


__all__ = ["ScriptedModel", "Step", "Text", "ToolCall", "Error", "Hang", "Usage"]
