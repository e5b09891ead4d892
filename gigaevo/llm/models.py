"""The models a router may call (``ModelSpec``) and reading their API keys from the environment."""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gigaevo.llm.errors import LLMConfigError

# sent when no key is configured, so that litellm never falls back to a provider
# key from the environment (a local server ignores it)
NO_KEY = "no-key"
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_SPEC_KEYS = frozenset(
    ("model", "weight", "api_base", "api_key_env", "input_cost_per_mtok", "output_cost_per_mtok")
)


@dataclass(frozen=True)
class ModelSpec:
    """One model a router may call.

    Attributes:
        model: the litellm model id (``gemini/...``, ``gpt-...``, ``openai/<name>``).
        weight: relative chance of being picked (> 0).
        api_base: the server URL (None: the provider's default).
        api_key_env: the environment variable holding the key (None: no key).
        input_cost_per_mtok, output_cost_per_mtok: USD per million tokens; when
            both are set they replace litellm's price (or supply a missing one).
    """

    model: str
    weight: float = 1.0
    api_base: str | None = None
    api_key_env: str | None = None
    input_cost_per_mtok: float | None = None
    output_cost_per_mtok: float | None = None

    def cost(self, prompt_tokens: int, completion_tokens: int) -> float | None:
        """The configured price of a call, or None when no price is configured."""
        if self.input_cost_per_mtok is None or self.output_cost_per_mtok is None:
            return None
        return (
            prompt_tokens * self.input_cost_per_mtok + completion_tokens * self.output_cost_per_mtok
        ) / 1e6


def model_specs(
    model: str | None,
    models: Sequence[Mapping[str, Any]] | None,
    api_base: str | None,
    api_key_env: str | None,
) -> tuple[ModelSpec, ...]:
    """The models of a router config: ``model`` alone or the ``models`` list.

    Entries of ``models`` inherit ``api_base`` and ``api_key_env`` unless they set them.

    Raises:
        LLMConfigError: neither or both given, an unknown entry key, an empty
            model name, or a weight that is not a positive finite number.
    """
    if (model is None) == (not models):
        raise LLMConfigError("set exactly one of llm.model and llm.models")
    entries = [{"model": model}] if model is not None else [dict(e) for e in models or ()]
    specs = []
    for i, entry in enumerate(entries):
        unknown = set(entry) - _SPEC_KEYS
        if unknown:
            raise LLMConfigError(
                f"llm.models[{i}]: unknown key(s) {sorted(unknown)} (allowed: {sorted(_SPEC_KEYS)})"
            )
        entry.setdefault("api_base", api_base)
        entry.setdefault("api_key_env", api_key_env)
        spec = ModelSpec(**entry)
        if not isinstance(spec.model, str) or not spec.model.strip():
            raise LLMConfigError(f"llm.models[{i}].model must be a non-empty string")
        weight = spec.weight
        if isinstance(weight, bool) or not isinstance(weight, (int, float)):
            raise LLMConfigError(f"llm.models[{i}].weight must be a number, got {weight!r}")
        if not math.isfinite(weight) or weight <= 0:
            raise LLMConfigError(f"llm.models[{i}].weight must be > 0, got {weight}")
        for name in ("input_cost_per_mtok", "output_cost_per_mtok"):
            price = getattr(spec, name)
            if price is not None and not (
                isinstance(price, (int, float)) and not isinstance(price, bool) and price >= 0
            ):
                raise LLMConfigError(f"llm.models[{i}].{name} must be a number >= 0, got {price!r}")
        specs.append(spec)
    return tuple(specs)


def read_key(env: str | None) -> str:
    """The API key in environment variable ``env`` (``NO_KEY`` when ``env`` is None).

    Raises:
        LLMConfigError: the name is malformed, or the variable is unset or empty.
            (Any name will do: child programs get an allow-listed environment,
            so no variable of the engine reaches them, whatever its name.)
    """
    if env is None:
        return NO_KEY
    if not _ENV_NAME.match(env):
        raise LLMConfigError(f"api_key_env={env!r} is not an environment variable name")
    value = os.environ.get(env, "").strip()
    if not value:
        raise LLMConfigError(f"environment variable {env} is not set (it should hold the API key)")
    return value
