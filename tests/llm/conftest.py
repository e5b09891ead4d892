"""Fixtures for the remote-client tests: a test API key, a mutation prompt, both wires."""

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


@pytest.fixture(params=["httpx", "litellm"])
def client(request: pytest.FixtureRequest) -> str:
    """Each wire in turn (``llm.client``); litellm is imported once, outside the timed calls."""
    if request.param == "litellm":
        from gigaevo.llm.litellm_wire import load_litellm

        load_litellm()
    return str(request.param)
