"""The LLM client role: chat messages in, one text answer out."""

from __future__ import annotations

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
