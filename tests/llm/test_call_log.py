"""The call log: one line per call, totals read incrementally, shared between writers."""

from __future__ import annotations

import threading
from pathlib import Path

from gigaevo.llm import CallLog, CallRecord, UsageTally


def _rec(**kw: object) -> CallRecord:
    base: dict[str, object] = {
        "time": 1.0,
        "role": "mutator",
        "model": "m",
        "outcome": "ok",
        "attempts": 1,
        "latency_s": 0.1,
        "prompt_tokens": 10,
        "completion_tokens": 5,
        "cost_usd": 0.5,
    }
    base.update(kw)
    return CallRecord(**base)  # type: ignore[arg-type]


def test_totals(tmp_path: Path) -> None:
    log = CallLog(tmp_path / "sub" / "calls.jsonl")
    tally = UsageTally(log.path)
    assert tally.totals().calls == 0  # no file yet
    log.record(_rec(attempts=3, retried_on=("RateLimitError", "Timeout")))
    log.record(_rec(model="n", role="memory", cost_usd=None))
    log.record(_rec(outcome="error", error_type="Timeout", cost_usd=None, prompt_tokens=0))
    log.record(_rec(outcome="auth_error", error_type="AuthenticationError", cost_usd=None))
    usage = tally.totals()
    assert (usage.calls, usage.failed, usage.retries) == (4, 2, 2)
    assert usage.prompt_tokens == 30 and usage.completion_tokens == 20
    assert usage.cost_usd == 0.5 and usage.calls_without_price == 1
    assert usage.retried_on == {"RateLimitError": 1, "Timeout": 1}
    assert usage.failures == {"Timeout": 1, "AuthenticationError": 1}
    assert usage.by_model["n"]["calls"] == 1 and usage.by_role["memory"]["calls"] == 1
    log.record(_rec())
    assert tally.totals().calls == 5  # only the new line is read


def test_partial_and_unreadable_lines(tmp_path: Path) -> None:
    path = tmp_path / "calls.jsonl"
    path.write_text(_rec().to_json() + "\nnot json\n" + _rec().to_json()[:20])
    tally = UsageTally(path)
    usage = tally.totals()
    assert usage.calls == 1 and usage.unreadable_lines == 1
    with path.open("a") as f:
        f.write(_rec().to_json()[20:] + "\n")
    assert tally.totals().calls == 2  # the line being written is read once complete


def test_a_resumed_run_counts_earlier_sessions(tmp_path: Path) -> None:
    path = tmp_path / "calls.jsonl"
    CallLog(path).record(_rec(cost_usd=1.25))
    CallLog(path).record(_rec(cost_usd=0.75))
    assert UsageTally(path).totals().cost_usd == 2.0
    tally = UsageTally(path)
    assert tally.cost_usd() == 2.0  # the engine's cheap per-commit read
    CallLog(path).record(_rec(cost_usd=0.5))
    assert tally.cost_usd() == 2.5 == tally.totals().cost_usd


def test_concurrent_writers_never_interleave(tmp_path: Path) -> None:
    path = tmp_path / "calls.jsonl"
    logs = [CallLog(path), CallLog(path)]

    def write(log: CallLog) -> None:
        for i in range(200):
            log.record(_rec(error="x" * (i % 50)))

    threads = [threading.Thread(target=write, args=(log,)) for log in logs for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    usage = UsageTally(path).totals()
    assert usage.calls == 800 and usage.unreadable_lines == 0
