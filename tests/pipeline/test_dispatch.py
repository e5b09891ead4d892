"""Dispatch modes and containment, in process (offline mutator wrapped to be slow or to fail).

Arrival order commits results as they arrive and never lets one slow attempt
hold the others; strict order commits in attempt order. In both, an exception
in one attempt (the mutator, the memory's decision or observation, the
bookkeeping of a result) becomes one failed attempt, counted in summary.json.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from omegaconf import DictConfig

from gigaevo.evaluation.base import EvaluationResult, Evaluator
from gigaevo.evolution.store import ProgramStore
from gigaevo.memory.base import Decision, MemoryProvider, MutationContext, MutationResult
from gigaevo.mutation.base import MutationOutcome, MutationRequest, Mutator
from gigaevo.pipeline.build import STORE_FILE, BuiltRun, ConfigError, build_run
from gigaevo.programs import Program
from gigaevo.util import derive_seed


@dataclass
class _Slow:
    """Delays chosen attempts (by their seed) before the offline answer; the rest answer at once."""

    inner: Mutator
    delays: dict[int, float]

    def mutate(self, request: MutationRequest) -> MutationOutcome:
        time.sleep(self.delays.get(request.seed, 0.0))
        return self.inner.mutate(request)


@dataclass
class _Raising:
    """Raises ``exc`` for the attempt with ``seed``; the rest go to ``inner``."""

    inner: Any
    seed: int
    exc: Exception

    def mutate(self, request: MutationRequest) -> MutationOutcome:
        if request.seed == self.seed:
            raise self.exc
        return self.inner.mutate(request)


NO_MEMORY = ("memory=none", "pipeline=guided")


def _seed(attempt: int, seed: int = 0) -> int:
    return derive_seed(seed, "mutate", attempt)


def _run(built: BuiltRun) -> dict[str, Any]:
    try:
        built.engine.run()
    finally:
        built.close()
    return dict(json.loads((built.checkpoint_dir / "summary.json").read_text()))


def _commit_order(ckpt: Path) -> list[int]:
    events = [json.loads(x) for x in (ckpt / "events.jsonl").read_text().splitlines()]
    return [e["attempt"] for e in events if e["event"] == "mutant"]


def _mutants(ckpt: Path) -> list[Program]:
    store = ProgramStore(ckpt / STORE_FILE)
    try:
        return [p for p in store.iter_programs() if p.mutation is not None]
    finally:
        store.close()


@pytest.mark.parametrize("mode", ["strict", "arrival"])
def test_one_slow_attempt_holds_the_others_only_in_strict_order(
    make_cfg: Callable[..., DictConfig], tmp_path: Path, mode: str
) -> None:
    cfg = make_cfg(
        "max_mutants=12", "evolution.max_in_flight=3", f"evolution.dispatch={mode}", *NO_MEMORY
    )
    built = build_run(cfg, show_progress=False)
    built.engine.mutator = _Slow(built.engine.mutator, {_seed(1): 1.0})
    summary = _run(built)
    order = _commit_order(tmp_path / "run")
    assert sorted(order) == list(range(12)) and summary["n_mutants"] == 12
    assert [p.ordinal for p in _mutants(tmp_path / "run")] == list(range(1, 13))
    if mode == "strict":
        assert order == list(range(12))
    else:  # the other two slots went on while attempt 1 waited a second
        assert order.index(1) >= 6
    assert summary["attempt_errors"] == {} and summary["finished"]


@pytest.mark.parametrize("mode", ["strict", "arrival"])
def test_an_exception_in_one_attempt_becomes_a_failed_attempt(
    make_cfg: Callable[..., DictConfig], tmp_path: Path, mode: str
) -> None:
    cfg = make_cfg(
        "max_mutants=10", "evolution.max_in_flight=2", f"evolution.dispatch={mode}", *NO_MEMORY
    )
    built = build_run(cfg, show_progress=False)
    boom = SystemError("AST constructor recursion depth mismatch (before=18, after=7)")
    built.engine.mutator = _Raising(built.engine.mutator, _seed(4), boom)
    summary = _run(built)
    assert summary["n_mutants"] == 10 and summary["finished"]
    assert summary["attempt_errors"] == {"mutation": 1} and summary["n_attempt_errors"] == 1
    failed = [p for p in _mutants(tmp_path / "run") if p.ordinal == 5]
    assert failed[0].invalid_reason == (
        "mutation failed: attempt error (mutation): SystemError: "
        "AST constructor recursion depth mismatch (before=18, after=7)"
    )
    assert summary["invalid_reasons"]["mutation failed"] >= 1


class _FaultyMemory:
    """memory=none that raises in ``decide`` or ``observe`` for one attempt."""

    def __init__(self, inner: MemoryProvider, decide_fails: int, observe_fails: int) -> None:
        self.inner = inner
        self.decide_fails = decide_fails
        self.observe_fails = observe_fails
        self.observed: list[int] = []

    def decide(self, context: MutationContext) -> Decision:
        if context.attempt == self.decide_fails:
            raise KeyError("card-7")
        return self.inner.decide(context)

    def observe(self, result: MutationResult) -> None:
        if result.attempt == self.observe_fails:
            raise ValueError("ledger row rejected")
        self.observed.append(result.attempt)

    def close(self) -> None:
        self.inner.close()


@pytest.mark.parametrize("mode", ["strict", "arrival"])
def test_memory_errors_fail_one_attempt_or_one_observation(
    make_cfg: Callable[..., DictConfig], tmp_path: Path, mode: str
) -> None:
    cfg = make_cfg("max_mutants=9", f"evolution.dispatch={mode}", *NO_MEMORY)
    built = build_run(cfg, show_progress=False)
    memory = _FaultyMemory(built.engine.lane.memory, decide_fails=2, observe_fails=6)
    built.engine.lane.memory = memory
    summary = _run(built)
    assert summary["n_mutants"] == 9 and summary["finished"]
    assert summary["attempt_errors"] == {"memory decide": 1, "memory observe": 1}
    assert sorted(memory.observed) == [a for a in range(9) if a != 6]
    (failed,) = [p for p in _mutants(tmp_path / "run") if p.ordinal == 3]
    assert failed.invalid_reason == (
        "mutation failed: attempt error (memory decide): KeyError: 'card-7'"
    )
    assert failed.mutation is not None and failed.mutation.failure is not None


@dataclass
class _NoPrimaryMetric:
    """Reports one child as valid without its primary metric (a validator bug)."""

    inner: Evaluator
    calls: int = 0

    def evaluate(self, code: str) -> EvaluationResult:
        self.calls += 1
        if self.calls == 3:
            return EvaluationResult(valid=True, metrics={"other": 1.0})
        return self.inner.evaluate(code)

    def close(self) -> None:
        self.inner.close()


def test_a_result_that_cannot_be_booked_fails_its_attempt(
    make_cfg: Callable[..., DictConfig], tmp_path: Path
) -> None:
    cfg = make_cfg("max_mutants=6", "evolution.max_in_flight=1", *NO_MEMORY)
    built = build_run(cfg, show_progress=False)
    built.engine.evaluator = _NoPrimaryMetric(built.engine.evaluator)
    summary = _run(built)
    assert summary["n_mutants"] == 6 and summary["attempt_errors"] == {"bookkeeping": 1}
    reasons = [p.invalid_reason or "" for p in _mutants(tmp_path / "run")]
    assert sum("attempt error (bookkeeping): KeyError" in r for r in reasons) == 1


def test_arrival_order_resumes_out_of_order_commits(
    make_cfg: Callable[..., DictConfig], tmp_path: Path
) -> None:
    # the session dies (as by a kill) while attempt 1 is slow and later ones have committed
    args = ("max_mutants=10", "evolution.max_in_flight=3", "evolution.dispatch=arrival")
    built = build_run(make_cfg(*args), show_progress=False)

    class _Kill(BaseException):
        pass

    slow = _Slow(built.engine.mutator, {_seed(1): 3.0})
    built.engine.mutator = _KillAt(slow, _seed(8), _Kill)
    with pytest.raises(_Kill):
        _run(built)
    store = ProgramStore(tmp_path / "run" / STORE_FILE)
    pending = [d.attempt for d in store.pending_dispatches()]
    committed = [p.ordinal - 1 for p in store.iter_programs() if p.mutation is not None]
    store.close()
    assert 1 in pending and 8 in pending and max(committed) > 1
    summary = _run(build_run(make_cfg(*args, "resume=true"), show_progress=False))
    assert summary["n_mutants"] == 10 and summary["finished"]
    assert [p.ordinal for p in _mutants(tmp_path / "run")] == list(range(1, 11))
    store = ProgramStore(tmp_path / "run" / STORE_FILE)
    assert store.pending_dispatches() == []
    store.close()


@dataclass
class _KillAt:
    """Raises ``kill`` (a BaseException: the session ends as by a kill) for one seed."""

    inner: Mutator
    seed: int
    kill: type[BaseException]

    def mutate(self, request: MutationRequest) -> MutationOutcome:
        if request.seed == self.seed:
            raise self.kill()
        return self.inner.mutate(request)


def test_a_bad_dispatch_mode_is_a_config_error(make_cfg: Callable[..., DictConfig]) -> None:
    with pytest.raises(ConfigError, match=r"evolution\.dispatch must be one of auto, strict"):
        build_run(make_cfg("evolution.dispatch=fast"), show_progress=False)
