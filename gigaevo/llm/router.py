"""``LiteLLMRouter``: the remote ``LLMClient``, with a seeded choice among models.

One router serves one role (the mutator, or the memory's agents). Per call it
picks a model by weight (seeded by the call seed, so a replayed attempt goes
to the same model), sends the chat over that model's wire with a timeout
(``client``: the plain HTTP wire for an OpenAI-compatible server, litellm
for every other provider; see ``wire_for``), retries
rate limits, server errors, timeouts and connection errors with capped
exponential backoff and jitter, and records the call (failed ones too) in
the call log. ``timeout_s`` bounds each request as a whole (a trickled body
included). Credentials refused (401/403) raise ``LLMAuthenticationError``
at once; ``unreachable_after`` connection failures (or 404 answers) in a row
with no answer in between raise ``LLMUnreachableError`` (before the first
answer every request counts, and a call keeps trying past ``max_retries``
until the count is reached, so no mutation fails on a server that never
answered; after the first answer, every call that used up its retries counts),
so that a run against a server that is down stops before it spends its
budget. API keys are read from the environment variables the config names,
at construction, and never appear in a record, a log line or an exception.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from gigaevo.llm.base import LLMResponse, Message
from gigaevo.llm.call_log import CallLog, CallRecord
from gigaevo.llm.errors import (
    LLMAuthenticationError,
    LLMCallError,
    LLMConfigError,
    LLMUnreachableError,
)
from gigaevo.llm.http_wire import HTTP
from gigaevo.llm.litellm_wire import LITELLM
from gigaevo.llm.models import NO_KEY, ModelSpec, model_specs, read_key
from gigaevo.llm.preload import call_started
from gigaevo.llm.retry import RetryPolicy
from gigaevo.llm.wire import Failure, Wire, WireAnswer, protect_logs, redact
from gigaevo.util import derive_rng

STRUCTURED_MODES = ("auto", "always", "never")
CLIENTS = ("auto", "httpx", "litellm")


def wire_for(spec: ModelSpec, client: str) -> Wire:
    """The wire that sends ``spec``'s requests under ``llm.client``.

    ``auto``: the plain HTTP wire for an OpenAI-compatible server (an
    ``openai/<name>`` model with an ``api_base``), litellm for every other
    model (a provider's own API: its URL, its parameters, its price).
    ``httpx`` / ``litellm`` force one (``httpx`` needs an ``api_base``).
    """
    if client == "httpx":
        return HTTP
    if client == "litellm":
        return LITELLM
    return HTTP if spec.model.startswith("openai/") and spec.api_base else LITELLM


def config_wires(node: Mapping[str, Any] | None) -> list[Wire]:
    """The wires a router config node (plain values) will use; [] for any other client.

    Lets the pipeline start the right background imports before it builds anything.
    """
    if not node or not str(node.get("_target_", "")).endswith("LiteLLMRouter"):
        return []
    client = str(node.get("client", "auto"))
    try:
        specs = model_specs(
            node.get("model"), node.get("models"), node.get("api_base"), node.get("api_key_env")
        )
    except LLMConfigError:  # the router's construction reports it, naming the key
        return []
    return [wire_for(spec, client) for spec in specs]


class LiteLLMRouter:
    """``LLMClient`` over litellm; see the module docstring.

    Args:
        model: one litellm model id (give ``model`` or ``models``).
        models: several models, each a mapping with ``model`` and optionally
            ``weight``, ``api_base``, ``api_key_env``, ``input_cost_per_mtok``,
            ``output_cost_per_mtok``.
        api_base: default server URL (``http://host:port/v1`` for OpenAI-compatible servers).
        api_key_env: default environment variable holding the key; None sends no key.
        timeout_s: the longest one request may take in all, in seconds (each retry
            gets its own).
        max_retries, backoff_initial_s, backoff_max_s, backoff_multiplier, jitter:
            the ``RetryPolicy``.
        temperature, max_tokens: sampling settings (None: the provider's default).
        extra_params: further ``litellm.completion`` keyword arguments
            (``reasoning_effort``, ``top_p``, ...).
        send_seed: pass the call seed on to providers that accept one.
        structured_outputs: forward a JSON-schema ``response_format``:
            ``auto`` (where litellm says the model supports it), ``always``, ``never``.
        seed: the router's own seed (model choice and jitter).
        role: recorded with each call (``mutator``, ``memory``).
        call_log: a ``CallLog`` or the path of the JSONL file; None records nothing.
        unreachable_after: connection failures in a row that stop the run (see above).
        client: ``auto``, ``httpx`` or ``litellm`` (see ``wire_for``).

    Raises:
        LLMConfigError: a bad option, or a key variable is missing (naming it).
    """

    def __init__(
        self,
        model: str | None = None,
        models: Sequence[Mapping[str, Any]] | None = None,
        *,
        api_base: str | None = None,
        api_key_env: str | None = None,
        timeout_s: float = 120.0,
        max_retries: int = 4,
        backoff_initial_s: float = 1.0,
        backoff_max_s: float = 60.0,
        backoff_multiplier: float = 2.0,
        jitter: float = 0.5,
        temperature: float | None = None,
        max_tokens: int | None = None,
        extra_params: Mapping[str, Any] | None = None,
        send_seed: bool = True,
        structured_outputs: str = "auto",
        seed: int = 0,
        role: str = "mutator",
        call_log: CallLog | str | Path | None = None,
        unreachable_after: int = 3,
        client: str = "auto",
    ) -> None:
        self.specs = model_specs(model, models, api_base, api_key_env)
        if client not in CLIENTS:
            raise LLMConfigError(f"llm.client must be one of {CLIENTS}, got {client!r}")
        if client == "httpx" and not all(s.api_base for s in self.specs):
            raise LLMConfigError("llm.client=httpx needs llm.api_base (the server's URL)")
        self.client = client
        self._wires = {s: wire_for(s, client) for s in self.specs}
        try:
            self.retry = RetryPolicy(
                max_retries, backoff_initial_s, backoff_max_s, backoff_multiplier, jitter
            )
        except ValueError as exc:
            raise LLMConfigError(f"llm: {exc}") from None
        if not (isinstance(timeout_s, (int, float)) and math.isfinite(timeout_s) and timeout_s > 0):
            raise LLMConfigError(f"llm.timeout_s must be a positive number, got {timeout_s!r}")
        if structured_outputs not in STRUCTURED_MODES:
            raise LLMConfigError(
                f"llm.structured_outputs must be one of {STRUCTURED_MODES}, "
                f"got {structured_outputs!r}"
            )
        if isinstance(unreachable_after, bool) or not (
            isinstance(unreachable_after, int) and unreachable_after >= 1
        ):
            raise LLMConfigError(
                f"llm.unreachable_after must be an integer >= 1, got {unreachable_after!r}"
            )
        self.timeout_s = float(timeout_s)
        self.unreachable_after = unreachable_after
        self._answered = False  # some request got an answer (any status but 404)
        self._unreachable = 0  # connection failures in a row since the last answer
        self._health = threading.Lock()
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.extra_params = dict(extra_params or {})
        self.send_seed = send_seed
        self.structured_outputs = structured_outputs
        self.seed = seed
        self.role = role
        self.call_log = CallLog(call_log) if isinstance(call_log, (str, Path)) else call_log
        # keys live only here; never in a record, a message or repr
        self._keys = {s.api_key_env: read_key(s.api_key_env) for s in self.specs}
        self._secrets = tuple(k for k in self._keys.values() if k != NO_KEY)
        protect_logs(self._secrets)  # records written by others (asyncio) name no key
        weights = [s.weight for s in self.specs]
        self._p = [w / sum(weights) for w in weights]

    reproducible = False  # a sampling remote model: answers are not a function of the seed

    def __repr__(self) -> str:
        return f"LiteLLMRouter(models={[s.model for s in self.specs]!r}, role={self.role!r})"

    @property
    def name(self) -> str:
        if len(self.specs) == 1:
            return self.specs[0].model
        return "router(" + "|".join(s.model for s in self.specs) + ")"

    def choose(self, seed: int) -> ModelSpec:
        """The model for the call with ``seed`` (deterministic)."""
        if len(self.specs) == 1:
            return self.specs[0]
        rng = derive_rng(self.seed, "llm-model", seed)
        return self.specs[int(rng.choice(len(self.specs), p=self._p))]

    def complete(
        self,
        messages: list[Message],
        *,
        seed: int,
        response_format: dict[str, Any] | None = None,
    ) -> LLMResponse:
        """One answer from the chosen model, retrying transient failures.

        Raises:
            LLMAuthenticationError: the provider refused the key (no retry).
            LLMUnreachableError: the server cannot be reached (see the module docstring).
            LLMCallError: retries used up, or an error that cannot be retried
                (bad request, context too long, ...).
        """
        spec = self.choose(seed)
        payload = [{"role": m.role, "content": m.content} for m in messages]
        params = self._params(spec, seed, response_format)
        rng = derive_rng(self.seed, "llm-retry", seed)
        wire = self._wires[spec]
        wire.prepare()  # the first call pays the imports; keep them out of the latency
        call_started()  # the background imports deferred behind the first request may go
        started = time.perf_counter()
        retried_on: list[str] = []
        attempt = 0
        while True:
            attempt += 1
            try:
                answer = wire.send(
                    model=spec.model,
                    messages=payload,
                    api_key=self._keys[spec.api_key_env],
                    api_base=spec.api_base,
                    timeout_s=self.timeout_s,
                    params=params,
                )
            except Exception as exc:  # the provider boundary: classified and recorded below
                failure = wire.classify(exc)
                # before the server ever answered, a call never gives up on connection
                # failures (no mutation fails on them): it goes on until the count stops the run
                probing = failure.unreachable and not self._answered
                last = not (failure.retryable and (attempt <= self.retry.max_retries or probing))
                down = self._count_unreachable(failure, last)
                if not last and not down:
                    retried_on.append(failure.kind)
                    time.sleep(self.retry.delay(attempt - 1, rng, failure.retry_after))
                    continue
                error = self._failed(spec, seed, exc, failure, attempt, retried_on, started)
                if down:
                    raise LLMUnreachableError(
                        spec.model, spec.api_base, failure.kind, self.unreachable_after
                    ) from None
                raise error from None
            self._count_unreachable(None, True)
            return self._succeeded(spec, seed, answer, attempt, retried_on, started)

    def _count_unreachable(self, failure: Failure | None, last: bool) -> bool:
        """Count one request's outcome (None: answered); True when the server counts as down."""
        with self._health:
            if failure is None or not failure.unreachable:
                if failure is None or failure.status is not None:
                    self._answered, self._unreachable = True, 0
                return False
            if not self._answered or last:
                self._unreachable += 1
            return self._unreachable >= self.unreachable_after

    def _params(
        self, spec: ModelSpec, seed: int, response_format: dict[str, Any] | None
    ) -> dict[str, Any]:
        params: dict[str, Any] = dict(self.extra_params)
        if self.temperature is not None:
            params["temperature"] = self.temperature
        if self.max_tokens is not None:
            params["max_tokens"] = self.max_tokens
        if self.send_seed:
            params["seed"] = seed % (2**31 - 1)
        if response_format is not None and self._forwards_schema(spec):
            params["response_format"] = response_format
        return params

    def _forwards_schema(self, spec: ModelSpec) -> bool:
        if self.structured_outputs == "auto":
            return self._wires[spec].supports_response_schema(spec.model)
        return self.structured_outputs == "always"

    def _succeeded(
        self,
        spec: ModelSpec,
        seed: int,
        answer: WireAnswer,
        attempts: int,
        retried_on: list[str],
        started: float,
    ) -> LLMResponse:
        latency = time.perf_counter() - started
        cost = spec.cost(answer.prompt_tokens, answer.completion_tokens)
        cost = answer.cost_usd if cost is None else cost
        self._record(
            spec,
            seed,
            "ok",
            attempts,
            retried_on,
            latency,
            prompt_tokens=answer.prompt_tokens,
            completion_tokens=answer.completion_tokens,
            cost_usd=cost,
        )
        return LLMResponse(
            text=answer.text,
            model=spec.model,
            prompt_tokens=answer.prompt_tokens,
            completion_tokens=answer.completion_tokens,
            cost_usd=cost,
            latency_s=latency,
        )

    def _failed(
        self,
        spec: ModelSpec,
        seed: int,
        exc: Exception,
        failure: Failure,
        attempts: int,
        retried_on: list[str],
        started: float,
    ) -> LLMAuthenticationError | LLMCallError:
        detail = redact(" ".join(str(exc).split()), self._secrets)[:300]
        outcome = "auth_error" if failure.auth else "error"
        latency = time.perf_counter() - started
        self._record(
            spec,
            seed,
            outcome,
            attempts,
            retried_on,
            latency,
            error_type=failure.kind,
            error=detail,
        )
        if failure.auth:
            return LLMAuthenticationError(spec.model, spec.api_key_env or "", failure.status)
        return LLMCallError(
            spec.model, failure.kind, detail, attempts=attempts, retryable=failure.retryable
        )

    def _record(
        self,
        spec: ModelSpec,
        seed: int,
        outcome: str,
        attempts: int,
        retried_on: list[str],
        latency: float,
        **fields: Any,
    ) -> None:
        if self.call_log is None:
            return
        self.call_log.record(
            CallRecord(
                time=round(time.time(), 3),
                role=self.role,
                model=spec.model,
                outcome=outcome,
                attempts=attempts,
                latency_s=round(latency, 4),
                seed=seed,
                retried_on=tuple(retried_on),
                **fields,
            )
        )
