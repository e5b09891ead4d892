"""The LLM client role: chat messages in, one text answer out."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Protocol


@dataclass(frozen=True)
class Message:
    role: str  # "system" | "user" | "assistant"
    content: str


@dataclass(frozen=True)
class LLMResponse:
    """One completion and its accounting."""

    text: str
    model: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float | None = None
    latency_s: float = 0.0


def offline_response(model: str, messages: list[Message], text: str, started: float) -> LLMResponse:
    """The response of an offline backend: approximate tokens (4 chars each), no cost.

    ``started`` is the ``time.perf_counter()`` reading taken when the call began.
    """
    return LLMResponse(
        text=text,
        model=model,
        prompt_tokens=sum(len(m.content) for m in messages) // 4,
        completion_tokens=len(text) // 4,
        cost_usd=0.0,
        latency_s=time.perf_counter() - started,
    )


class LLMClient(Protocol):
    """Anything that answers a chat prompt: a remote model or an offline backend.

    ``seed`` makes offline backends deterministic per call (remote models pass
    it on where the provider supports it). ``response_format`` is an OpenAI
    style ``{"type": "json_schema", "json_schema": {...}}`` request for
    structured answers; backends that cannot honour it ignore it (callers
    still validate the text). Implementations are thread-safe.
    """

    @property
    def name(self) -> str: ...

    def complete(
        self,
        messages: list[Message],
        *,
        seed: int,
        response_format: dict[str, Any] | None = None,
    ) -> LLMResponse: ...
