"""run.py against a local OpenAI-compatible server, through real litellm, as a user runs it."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import run_py
from tests.llm.openai_server import OpenAIServer

KEY_ENV = "GIGAEVO_TEST_API_KEY"
KEY = "sk-wire-test-0d8e5c11aa"
MODEL = "openai/test-model"


@pytest.fixture(autouse=True)
def _key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, KEY)


def _run(tmp_path: Path, server: OpenAIServer, *extra: str) -> tuple[int, str, str]:
    return run_py(
        "problem=rastrigin",
        "llm=openai_compatible",
        f"llm.api_base={server.url}",
        f"llm.model={MODEL}",
        f"llm.api_key_env={KEY_ENV}",
        "llm.timeout_s=1.0",
        "llm.backoff_initial_s=0.01",
        "llm.backoff_max_s=0.05",
        f"checkpoint_dir={tmp_path / 'run'}",
        "evolution.max_in_flight=1",
        "evaluator.max_workers=1",
        "progress=false",
        *extra,
        cwd=tmp_path,
    )


def _summary(tmp_path: Path) -> dict[str, Any]:
    return dict(json.loads((tmp_path / "run" / "summary.json").read_text()))


def _mutants(tmp_path: Path) -> list[dict[str, Any]]:
    con = sqlite3.connect(tmp_path / "run" / "programs.sqlite3")
    try:
        rows = [json.loads(d) for (d,) in con.execute("SELECT data FROM programs ORDER BY ordinal")]
    finally:
        con.close()
    return [r for r in rows if r["mutation"] is not None]


def _assert_key_nowhere(tmp_path: Path, *outputs: str) -> None:
    for text in outputs:
        assert KEY not in text
    for path in tmp_path.rglob("*"):
        if path.is_file():
            assert KEY.encode() not in path.read_bytes(), path


def test_a_short_run_applies_diffs_and_survives_bad_answers(tmp_path: Path) -> None:
    script = [
        "diff",
        "rate_limit",  # retried
        "rewrite",
        "garbage",  # no code: a failed mutation
        "server_error",  # retried
        "broken_diff",  # a cut-off SEARCH block
        "slow",  # beyond the timeout: retried
        "bad_search",  # SEARCH text not in the parent
    ]
    with OpenAIServer(script, default="diff", slow_seconds=3.0) as server:
        code, out, err = _run(tmp_path, server, "max_mutants=9")
        requests = list(server.requests)
    assert code == 0, err
    s = _summary(tmp_path)
    assert s["stop_reason"].startswith("max_mutants") and s["finished"]
    assert s["n_mutants"] == 9 and s["llm_calls"] == 9
    assert s["llm_prompt_tokens"] > 1000 and s["llm_completion_tokens"] > 100
    assert s["n_failed_mutations"] == 3 and s["n_valid"] + s["n_duplicate"] == 6
    usage = s["llm_usage"]
    assert (usage["calls"], usage["failed"], usage["retries"]) == (9, 0, 3)
    assert usage["retried_on"] == {"RateLimitError": 1, "InternalServerError": 1, "Timeout": 1}
    assert usage["prompt_tokens"] == s["llm_prompt_tokens"]

    failures = {m["mutation"]["failure"]: m["mutation"]["raw_answer"] for m in _mutants(tmp_path)}
    reasons = " | ".join(f for f in failures if f)
    assert "no code in the answer" in reasons and "cut off" in reasons
    assert "SEARCH text not found" in reasons
    assert all(raw for failure, raw in failures.items() if failure)
    assert any(m["valid"] and m["mutation"]["model"] == MODEL for m in _mutants(tmp_path))

    records = [
        json.loads(x) for x in (tmp_path / "run" / "llm_calls.jsonl").read_text().splitlines()
    ]
    assert len(records) == 9 and {r["outcome"] for r in records} == {"ok"}
    assert requests[0]["headers"]["authorization"] == f"Bearer {KEY}"
    assert requests[0]["body"]["model"] == "test-model"
    _assert_key_nowhere(tmp_path, out, err)


def test_refused_key_stops_the_run_at_once(tmp_path: Path) -> None:
    with OpenAIServer(default="unauthorized") as server:
        code, out, err = _run(tmp_path, server, "max_mutants=20", "evolution.max_in_flight=2")
        n_requests = len(server.requests)
    assert code == 2
    last = err.strip().splitlines()[-1]
    assert last == (
        f"error: authentication failed for model {MODEL} (check ${KEY_ENV}); "
        "fix the key and add resume=true to continue"
    )
    assert n_requests <= 2  # no retries, no further dispatches
    s = _summary(tmp_path)
    assert s["stop_reason"] == "llm_authentication_failed" and not s["finished"]
    failures = s["llm_usage"]["failures"]  # a call in flight at the stop is aborted
    assert s["n_mutants"] == 0 and failures["AuthenticationError"] >= 1
    assert sum(failures.values()) == n_requests and set(failures) <= {
        "AuthenticationError",
        "CallAborted",
    }
    _assert_key_nowhere(tmp_path, out, err)  # the 401 body echoed the key


@pytest.mark.slow
def test_a_run_stopped_by_a_refused_key_resumes(tmp_path: Path) -> None:
    with OpenAIServer(["unauthorized"], default="diff") as server:
        code, _, _ = _run(tmp_path, server, "max_mutants=6")
        assert code == 2
        code, _, err = _run(tmp_path, server, "max_mutants=6", "resume=true")
    assert code == 0, err
    s = _summary(tmp_path)
    assert s["n_mutants"] == 6 and s["finished"] and s["llm_calls"] == 6
    assert s["llm_usage"]["calls"] == 7 and s["llm_usage"]["failed"] == 1
    assert [m["ordinal"] for m in _mutants(tmp_path)] == list(range(1, 7))


@pytest.mark.slow
def test_cost_budget_stops_the_run_cleanly(tmp_path: Path) -> None:
    with OpenAIServer(default="diff") as server:
        code, _, err = _run(
            tmp_path,
            server,
            "max_mutants=40",
            "llm.model=openai/gpt-4o-mini",  # litellm knows its price
            "llm.max_cost_usd=0.0005",
        )
    assert code == 0, err
    s = _summary(tmp_path)
    assert s["stop_reason"].startswith("cost_budget:") and s["finished"]
    assert 1 <= s["n_mutants"] < 40
    assert s["llm_usage"]["cost_usd"] >= 0.0005 and s["llm_cost_usd"] > 0


def test_missing_key_variable_is_a_startup_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("GEMINI_API_KEY", raising=False)
    code, _, err = run_py(
        "problem=rastrigin", "llm=gemini", f"checkpoint_dir={tmp_path / 'run'}", cwd=tmp_path
    )
    assert code == 2
    assert err.strip().splitlines()[-1] == (
        "error: environment variable GEMINI_API_KEY is not set (it should hold the API key)"
    )
    assert not (tmp_path / "run" / "programs.sqlite3").exists()


def test_bad_budget_is_a_startup_error(tmp_path: Path) -> None:
    code, _, err = run_py(
        "problem=rastrigin",
        "llm=openai_compatible",
        "llm.max_cost_usd=-1",
        f"checkpoint_dir={tmp_path / 'run'}",
        cwd=tmp_path,
    )
    assert code == 2 and "llm.max_cost_usd" in err.strip().splitlines()[-1]
