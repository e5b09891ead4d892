"""LiteLLMRouter against a local OpenAI-compatible server, over each wire (httpx, real litellm)."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest

from gigaevo.llm import (
    CallLog,
    LiteLLMRouter,
    LLMAuthenticationError,
    LLMCallError,
    UsageTally,
)
from tests.llm.conftest import KEY_ENV, PROMPT
from tests.llm.openai_server import OpenAIServer

FAST = {"backoff_initial_s": 0.01, "backoff_max_s": 0.05, "timeout_s": 5.0}


def _router(
    server: OpenAIServer,
    log: Path | None = None,
    model: str = "openai/test-model",
    client: str = "auto",
    **kw: Any,
) -> LiteLLMRouter:
    options: dict[str, Any] = {
        **FAST,
        "api_base": server.url,
        "api_key_env": KEY_ENV,
        "client": client,
        **kw,
    }
    return LiteLLMRouter(model, call_log=log, **options)


def _records(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text().splitlines()]


def test_answer_tokens_and_record(api_key: str, tmp_path: Path, client: str) -> None:
    log = tmp_path / "calls.jsonl"
    with OpenAIServer(["diff"]) as server:
        response = _router(server, log, client=client).complete(PROMPT, seed=7)
        request = server.requests[0]
    assert "<<<<<<< SEARCH" in response.text and response.model == "openai/test-model"
    assert response.prompt_tokens > 0 and response.completion_tokens > 0
    assert request["headers"]["authorization"] == f"Bearer {api_key}"
    assert request["body"]["seed"] == 7 and request["body"]["model"] == "test-model"
    (rec,) = _records(log)
    assert rec["outcome"] == "ok" and rec["attempts"] == 1 and rec["role"] == "mutator"
    assert rec["prompt_tokens"] == response.prompt_tokens
    assert rec["cost_usd"] is None  # the price map has no price for an unknown model
    assert "content" not in json.dumps(rec) and "EVOLVE" not in json.dumps(rec)


def test_known_model_has_a_cost_and_a_price_override_wins(api_key: str, client: str) -> None:
    with OpenAIServer() as server:
        priced = _router(server, model="openai/gpt-4o-mini", client=client).complete(PROMPT, seed=1)
        models = [{"model": "openai/x", "input_cost_per_mtok": 1e6, "output_cost_per_mtok": 0.0}]
        custom = LiteLLMRouter(
            models=models, api_base=server.url, api_key_env=KEY_ENV, client=client, **FAST
        )
        overridden = custom.complete(PROMPT, seed=1)
    # litellm's price map: $0.15 / $0.60 per million tokens, whichever wire read it
    expected = priced.prompt_tokens * 0.15e-6 + priced.completion_tokens * 0.6e-6
    assert priced.cost_usd == pytest.approx(expected)
    assert overridden.cost_usd == pytest.approx(overridden.prompt_tokens * 1.0)


@pytest.mark.parametrize(
    ("failure", "kind"),
    [("rate_limit", "RateLimitError"), ("server_error", "InternalServerError")],
)
def test_transient_errors_are_retried(
    api_key: str, tmp_path: Path, failure: str, kind: str, client: str
) -> None:
    log = tmp_path / "calls.jsonl"
    with OpenAIServer([failure, failure, "diff"]) as server:
        response = _router(server, log, client=client, max_retries=3).complete(PROMPT, seed=3)
        assert server.behaviours() == [failure, failure, "diff"]
    assert "SEARCH" in response.text
    (rec,) = _records(log)
    assert rec["outcome"] == "ok" and rec["attempts"] == 3 and rec["retried_on"] == [kind, kind]


def test_retry_after_is_honoured(api_key: str, client: str) -> None:
    with OpenAIServer(["rate_limit", "diff"], retry_after="0.4") as server:
        router = _router(server, client=client, max_retries=1, backoff_max_s=5.0)
        response = router.complete(PROMPT, seed=3)
    assert response.latency_s >= 0.4  # the backoff alone would wait about 0.01 s


def test_timeouts_are_retried_then_given_up(api_key: str, tmp_path: Path, client: str) -> None:
    log = tmp_path / "calls.jsonl"
    with OpenAIServer(["slow", "slow", "slow"], slow_seconds=1.5) as server:
        router = _router(server, log, client=client, max_retries=2, timeout_s=0.3)
        with pytest.raises(LLMCallError) as caught:
            router.complete(PROMPT, seed=3)
    assert caught.value.kind == "Timeout" and caught.value.attempts == 3
    (rec,) = _records(log)
    assert rec["outcome"] == "error" and rec["error_type"] == "Timeout"
    assert rec["retried_on"] == ["Timeout", "Timeout"]


def test_a_request_that_cannot_succeed_is_not_retried(api_key: str, client: str) -> None:
    with OpenAIServer(["not_found", "diff"]) as server:
        with pytest.raises(LLMCallError) as caught:
            _router(server, client=client, max_retries=3).complete(PROMPT, seed=3)
        assert server.behaviours() == ["not_found"]
    assert not caught.value.retryable and caught.value.attempts == 1


@pytest.mark.parametrize("refusal", ["unauthorized", "forbidden"])
def test_refused_credentials_raise_at_once(
    api_key: str, tmp_path: Path, refusal: str, client: str, caplog: pytest.LogCaptureFixture
) -> None:
    log = tmp_path / "calls.jsonl"
    with OpenAIServer([refusal, "diff"]) as server:
        with caplog.at_level(logging.DEBUG), pytest.raises(LLMAuthenticationError) as caught:
            _router(server, log, client=client, max_retries=3).complete(PROMPT, seed=3)
        assert len(server.requests) == 1
    assert api_key not in caplog.text  # no log line, at any level, carries the key
    message = str(caught.value)
    assert message == f"authentication failed for model openai/test-model (check ${KEY_ENV})"
    (rec,) = _records(log)
    assert rec["outcome"] == "auth_error" and rec["attempts"] == 1
    assert api_key not in log.read_text()  # the 401 body echoed the key; the record does not


def test_no_key_env_sends_a_placeholder_never_an_environment_key(
    monkeypatch: pytest.MonkeyPatch, client: str
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-must-not-leave-this-machine")
    with OpenAIServer() as server:
        router = LiteLLMRouter("openai/local", api_base=server.url, client=client, **FAST)
        router.complete(PROMPT, seed=1)
        assert server.requests[0]["headers"]["authorization"] == "Bearer no-key"


@pytest.mark.parametrize(("mode", "forwarded"), [("always", True), ("never", False)])
def test_response_format_forwarding(api_key: str, mode: str, forwarded: bool, client: str) -> None:
    fmt = {"type": "json_schema", "json_schema": {"name": "a", "schema": {"type": "object"}}}
    with OpenAIServer(["json"]) as server:
        router = _router(server, client=client, structured_outputs=mode)
        router.complete(PROMPT, seed=1, response_format=fmt)
        body = server.requests[0]["body"]
    assert ("response_format" in body) is forwarded


def test_two_clients_share_one_log(api_key: str, tmp_path: Path) -> None:
    log = CallLog(tmp_path / "calls.jsonl")
    with OpenAIServer() as server:
        mutator = LiteLLMRouter("openai/a", api_base=server.url, api_key_env=KEY_ENV, call_log=log)
        memory = LiteLLMRouter(
            "openai/b", api_base=server.url, api_key_env=KEY_ENV, call_log=log, role="memory"
        )
        mutator.complete(PROMPT, seed=1)
        memory.complete(PROMPT, seed=2)
    usage = UsageTally(log.path).totals()
    assert usage.calls == 2 and set(usage.by_role) == {"mutator", "memory"}
    assert set(usage.by_model) == {"openai/a", "openai/b"}


def test_structured_answer_over_the_wire(api_key: str, tmp_path: Path) -> None:
    from gigaevo.llm import request_json

    schema = {
        "type": "object",
        "properties": {"verdict": {"type": "string", "enum": ["NEW", "EQUIVALENT"]}},
        "required": ["verdict"],
        "additionalProperties": False,
    }
    log = tmp_path / "calls.jsonl"
    with OpenAIServer(["garbage", "json"], json_payload={"verdict": "NEW"}) as server:
        router = _router(server, log, structured_outputs="always", role="memory")
        result = request_json(router, PROMPT, schema, seed=4, name="judgement")
        sent = server.requests[0]["body"]["response_format"]
    assert result.ok and result.value == {"verdict": "NEW"} and result.attempts == 2
    assert "sorry" in result.raw_texts[0]
    assert sent["json_schema"]["name"] == "judgement"
    assert [r["role"] for r in _records(log)] == ["memory", "memory"]
