"""Fixtures for the remote-client tests: a test API key in the environment, a mutation prompt."""

from __future__ import annotations

import pytest

from gigaevo.llm.base import Message

KEY_ENV = "GIGAEVO_TEST_API_KEY"
KEY = "sk-test-wire-5f0c2d9a71"

PROMPT = [
    Message("system", "You improve programs."),
    Message(
        "user",
        "## Parent program\nid: p0\n```python\n# EVOLVE-BLOCK-START\n"
        "def f():\n    return [2.2, -3.1]\n# EVOLVE-BLOCK-END\n```\n",
    ),
]


@pytest.fixture
def api_key(monkeypatch: pytest.MonkeyPatch) -> str:
    """Sets ``GIGAEVO_TEST_API_KEY``; returns the key."""
    monkeypatch.setenv(KEY_ENV, KEY)
    return KEY
