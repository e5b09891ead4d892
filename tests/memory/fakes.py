"""LLM clients that misbehave on purpose, wrapped around the offline memory LLM."""

from __future__ import annotations

import json
import re
import time
from typing import Any

from gigaevo.llm.base import LLMResponse, Message
from gigaevo.llm.offline_memory import OfflineMemoryLLM

_AGENT = re.compile(r"^Agent:\s*(\w+)", re.MULTILINE)


def agent_of(messages: list[Message]) -> str:
    system = "\n".join(m.content for m in messages if m.role == "system")
    match = _AGENT.search(system)
    return match.group(1) if match else ""


class ScriptedMemoryLLM:
    """The offline memory LLM, except for the agents named in ``behaviour``.

    behaviour maps an agent name to ``"garbage"`` (non-JSON text), ``"raise"``
    (a transport error), ``("sleep", seconds)`` or a dict answered as JSON.
    ``calls`` counts calls per agent.
    """

    def __init__(self, behaviour: dict[str, Any] | None = None, seed: int = 0) -> None:
        self.behaviour = dict(behaviour or {})
        self.inner = OfflineMemoryLLM(seed=seed)
        self.calls: dict[str, int] = {}

    @property
    def name(self) -> str:
        return "scripted-memory"

    def complete(
        self, messages: list[Message], *, seed: int, response_format: dict[str, Any] | None = None
    ) -> LLMResponse:
        agent = agent_of(messages)
        self.calls[agent] = self.calls.get(agent, 0) + 1
        plan = self.behaviour.get(agent)
        if plan == "garbage":
            return LLMResponse(text="I think it is new, probably.", model=self.name)
        if plan == "raise":
            raise ConnectionError("memory model unreachable")
        if isinstance(plan, tuple) and plan[0] == "sleep":
            time.sleep(plan[1])
        if isinstance(plan, dict):
            return LLMResponse(text=json.dumps(plan), model=self.name)
        return self.inner.complete(messages, seed=seed, response_format=response_format)


def fixed_card(description: str, explanation: str = "Because of a mechanism.") -> dict[str, Any]:
    """An author answer that always proposes this exact card."""
    return {
        "decision": "NEW",
        "card": {"description": description, "explanation_summary": explanation},
        "reason": "fixed",
    }
