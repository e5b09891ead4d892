"""The failure modes of issue 13 at the router, over each wire (httpx, real litellm), real HTTP.

A trickling body is cut at the total deadline; a server that is down (or has
no such route) stops the caller after ``unreachable_after`` failed requests
instead of a retry ladder per call; an abort cancels calls in flight.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from gigaevo.llm import (
    LiteLLMRouter,
    LLMCallError,
    LLMUnreachableError,
    abort_calls,
)
from tests.llm.conftest import KEY_ENV, PROMPT
from tests.llm.openai_server import OpenAIServer, closed_url

FAST = {"backoff_initial_s": 0.01, "backoff_max_s": 0.05}


def _router(api_base: str, client: str = "auto", **kw: Any) -> LiteLLMRouter:
    options: dict[str, Any] = {
        **FAST,
        "api_base": api_base,
        "api_key_env": KEY_ENV,
        "client": client,
        **kw,
    }
    return LiteLLMRouter("openai/test-model", **options)


def test_a_trickled_body_is_cut_at_the_total_deadline(
    api_key: str, tmp_path: Path, client: str
) -> None:
    # one byte every 0.1 s: each read is quick, so only a total deadline ends it (~70 s otherwise)
    with OpenAIServer(["trickle", "diff"], trickle_seconds=0.1) as server:
        router = _router(server.url, client, timeout_s=1.0, max_retries=1)
        started = time.monotonic()
        response = router.complete(PROMPT, seed=1)
        elapsed = time.monotonic() - started
        assert server.behaviours() == ["trickle", "diff"]
    assert "SEARCH" in response.text
    # uncut, the trickle would end in ~70 s with its own answer and no second request: the
    # second behaviour answering shows the cut; it came no earlier than the deadline
    assert elapsed >= 1.0


def test_a_trickled_body_fails_the_call_once_retries_are_spent(
    api_key: str, tmp_path: Path, client: str
) -> None:
    with OpenAIServer(default="trickle", trickle_seconds=0.1) as server:
        router = _router(
            server.url, client, timeout_s=0.5, max_retries=1, call_log=tmp_path / "c.jsonl"
        )
        started = time.monotonic()
        with pytest.raises(LLMCallError) as caught:
            router.complete(PROMPT, seed=1)
        elapsed = time.monotonic() - started
    # uncut, each trickle would end in ~70 s with an answer: a Timeout on both attempts is the
    # cut (no upper wall-clock bound), after at least the two deadlines of 0.5 s
    assert caught.value.kind == "Timeout" and caught.value.attempts == 2
    assert elapsed >= 1.0


def test_nothing_listening_stops_after_three_requests(
    api_key: str, tmp_path: Path, client: str
) -> None:
    url = closed_url()
    router = _router(url, client, timeout_s=5.0, max_retries=4, call_log=tmp_path / "c.jsonl")
    started = time.monotonic()
    with pytest.raises(LLMUnreachableError) as caught:
        router.complete(PROMPT, seed=1)
    assert time.monotonic() - started < 5.0
    message = str(caught.value)
    assert f"llm.api_base={url}" in message and "openai/test-model" in message
    assert caught.value.stop_reason == "llm_unreachable"
    with pytest.raises(LLMUnreachableError):  # every later call stops at once
        router.complete(PROMPT, seed=2)
    assert (tmp_path / "c.jsonl").read_text().count('"outcome": "error"') == 2


def test_no_call_fails_on_a_server_that_never_answered(api_key: str, client: str) -> None:
    """Concurrent calls, no retries: each stops the run; none fails its mutation alone."""
    router = _router(closed_url(), client, timeout_s=5.0, max_retries=0)
    errors: list[Exception] = []

    def call(seed: int) -> None:
        try:
            router.complete(PROMPT, seed=seed)
        except Exception as exc:  # collected: the kind is asserted below
            errors.append(exc)

    threads = [threading.Thread(target=call, args=(seed,)) for seed in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert [type(e) for e in errors] == [LLMUnreachableError] * 3


def test_a_wrong_route_counts_as_unreachable_before_any_answer(api_key: str, client: str) -> None:
    with OpenAIServer(default="not_found") as server:
        router = _router(server.url, client, timeout_s=5.0, unreachable_after=2)
        with pytest.raises(LLMCallError):  # 404 is not retried: the first call fails alone
            router.complete(PROMPT, seed=1)
        with pytest.raises(LLMUnreachableError):
            router.complete(PROMPT, seed=2)
        assert len(server.requests) == 2


def test_an_answer_resets_the_count_and_later_outages_count_calls(
    api_key: str, client: str
) -> None:
    with OpenAIServer(["diff", "not_found", "diff", "not_found"]) as server:
        router = _router(server.url, client, timeout_s=5.0, unreachable_after=2)
        router.complete(PROMPT, seed=1)
        for seed in (2, 4):
            with pytest.raises(LLMCallError) as caught:
                router.complete(PROMPT, seed=seed)
            assert not isinstance(caught.value, LLMUnreachableError)
            router.complete(PROMPT, seed=seed + 1)  # an answer: the count starts again


def test_abort_cancels_calls_in_flight(api_key: str, client: str) -> None:
    with OpenAIServer(default="slow", slow_seconds=30.0) as server:
        router = _router(server.url, client, timeout_s=60.0, max_retries=0)
        errors: list[LLMCallError] = []

        def call() -> None:
            try:
                router.complete(PROMPT, seed=1)
            except LLMCallError as exc:  # the cancellation under test
                errors.append(exc)

        threads = [threading.Thread(target=call) for _ in range(3)]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 20
        while len(server.requests) < 3 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert abort_calls() == 3
        for t in threads:
            t.join(timeout=60)
        # the server answers after 30 s: the three CallAborted errors below show that the
        # abort, not the answer, ended the calls (no wall-clock bound on how soon)
        assert not any(t.is_alive() for t in threads)
    assert len(errors) == 3
    assert [(e.kind, e.retryable, e.attempts) for e in errors] == [("CallAborted", False, 1)] * 3


def test_invalid_unreachable_after_is_a_config_error() -> None:
    from gigaevo.llm import LLMConfigError

    with pytest.raises(LLMConfigError, match=r"llm\.unreachable_after"):
        LiteLLMRouter("openai/x", api_base="http://127.0.0.1:9/v1", unreachable_after=0)
