"""What a run leaves in checkpoint_dir, duplicates, stoppers and corrupt stores."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from omegaconf import DictConfig

from gigaevo.evaluation.base import EvaluationResult, Evaluator
from gigaevo.evolution.store import ProgramStore
from gigaevo.mutation.base import MutationOutcome, MutationRequest
from gigaevo.pipeline.build import STORE_FILE, ConfigError, build_run, run_from_config
from gigaevo.programs import MutationInfo, ProgramStatus


def test_outputs_of_a_run(make_cfg: Callable[..., DictConfig], tmp_path: Path) -> None:
    k = run_from_config(make_cfg("max_mutants=15"), show_progress=False)
    ckpt = tmp_path / "run"
    summary = json.loads((ckpt / "summary.json").read_text())
    for key in (
        "problem",
        "best_fitness",
        "initial_fitness",
        "n_mutants",
        "n_valid",
        "n_invalid",
        "llm_calls",
        "wall_seconds",
    ):
        assert key in summary
    assert summary["n_mutants"] == 15 == k.n_mutants
    assert summary["n_valid"] + summary["n_invalid"] + summary["n_duplicate"] == 15
    assert summary["llm_calls"] == 15
    assert summary["best_fitness"] <= summary["initial_fitness"]  # rastrigin: lower is better
    best = (ckpt / "best_program.py").read_text()
    assert "EVOLVE-BLOCK-START" in best and summary["best_program_id"] in best
    events = [json.loads(line) for line in (ckpt / "events.jsonl").read_text().splitlines()]
    kinds = [e["event"] for e in events]
    assert kinds.count("initial") == 1 and kinds.count("mutant") == 15 and kinds[-1] == "stop"
    store = ProgramStore(ckpt / STORE_FILE)
    progs = list(store.iter_programs())
    store.close()
    assert [p.ordinal for p in progs] == list(range(16))
    for p in progs[1:]:
        assert p.parent_ids and p.generation >= 1 and p.mutation is not None
        assert p.valid == (p.status in (ProgramStatus.ACCEPTED, ProgramStatus.REJECTED))
        if p.status is ProgramStatus.INVALID:
            assert p.invalid_reason


@dataclass
class _SameChildMutator:
    """Always answers with one fixed edit of the parent: every later child is a duplicate."""

    child: str

    def mutate(self, request: MutationRequest) -> MutationOutcome:
        return MutationOutcome(self.child, MutationInfo(model="fixed", tactic="same"))


@dataclass
class _CountingEvaluator:
    inner: Evaluator
    codes: list[str] = field(default_factory=list)

    def evaluate(self, code: str) -> EvaluationResult:
        self.codes.append(code)
        return self.inner.evaluate(code)

    def close(self) -> None:
        self.inner.close()


def test_duplicates_are_recorded_not_evaluated(make_cfg: Callable[..., DictConfig]) -> None:
    built = build_run(make_cfg("max_mutants=8", "evolution.max_in_flight=1"), show_progress=False)
    initial = built.engine.problem.initial_programs[0]
    child = initial.replace("# EVOLVE-BLOCK-END", "_unused = 0\n# EVOLVE-BLOCK-END")
    counting = _CountingEvaluator(built.evaluator)
    built.engine.mutator = _SameChildMutator(child + "\n# only a comment differs\n")
    built.engine.evaluator = counting
    try:
        k = built.engine.run()
    finally:
        built.close()
    assert k.n_duplicate == 7 and k.n_mutants == 8
    assert len(counting.codes) == 2  # the initial program and the first child
    store = ProgramStore(built.checkpoint_dir / STORE_FILE)
    progs = list(store.iter_programs())
    store.close()
    first_child = progs[1]
    assert all(p.duplicate_of == first_child.id for p in progs[2:])


def test_plateau_stopper_ends_the_run_early(make_cfg: Callable[..., DictConfig]) -> None:
    built = build_run(
        make_cfg("max_mutants=50", "evolution.stop.plateau_patience=3"), show_progress=False
    )
    initial = built.engine.problem.initial_programs[0]
    built.engine.mutator = _SameChildMutator(
        initial.replace("# EVOLVE-BLOCK-END", "z = 1\n# EVOLVE-BLOCK-END")
    )
    try:
        k = built.engine.run()
    finally:
        built.close()
    summary = json.loads((built.checkpoint_dir / "summary.json").read_text())
    assert k.n_mutants < 50 and summary["stop_reason"].startswith("fitness_plateau")


def test_bad_stopper_value_names_the_key(make_cfg: Callable[..., DictConfig]) -> None:
    with pytest.raises(ConfigError, match=r"evolution\.stop"):
        build_run(make_cfg("evolution.stop.max_wall_seconds=-1"), show_progress=False)


def test_corrupt_store_is_refused_and_left_alone(
    make_cfg: Callable[..., DictConfig], tmp_path: Path
) -> None:
    ckpt = tmp_path / "run"
    ckpt.mkdir()
    garbage = b"this is not a database" * 100
    (ckpt / STORE_FILE).write_bytes(garbage)
    for extra in ((), ("resume=true",)):
        with pytest.raises(ConfigError, match=STORE_FILE):
            build_run(make_cfg(*extra), show_progress=False)
        assert (ckpt / STORE_FILE).read_bytes() == garbage


def test_scratchpad_corrupted_mid_run_stops_with_a_config_error(
    make_cfg: Callable[..., DictConfig], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pad = tmp_path / "run" / ".agent" / "scratchpad.md"

    class _Vandal:
        """Corrupts the scratchpad from outside while the run is going."""

        def __init__(self, inner: object) -> None:
            self.inner = inner

        def mutate(self, request: MutationRequest) -> MutationOutcome:
            if pad.exists():
                pad.write_text("## Hypotheses\nnot an entry\n")
            return self.inner.mutate(request)  # type: ignore[attr-defined]

    import gigaevo.pipeline.build as build_module

    real_build = build_module.build_run

    def build_with_vandal(cfg: DictConfig, *, show_progress: bool = True) -> object:
        built = real_build(cfg, show_progress=show_progress)
        built.engine.mutator = _Vandal(built.engine.mutator)
        return built

    cfg = make_cfg("max_mutants=60", "scratchpad.record_every=5")
    monkeypatch.setattr(build_module, "build_run", build_with_vandal)
    with pytest.raises(ConfigError, match="scratchpad"):
        run_from_config(cfg, show_progress=False)
    assert pad.read_text() == "## Hypotheses\nnot an entry\n"  # never overwritten
