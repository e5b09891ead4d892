"""A problem's measurement noise reaches the causal ledger (issue 20,
memory-model.md "Rows and eligibility").

Built-in problems declare a deterministic evaluation: every valid terminal of a memory=v2
run records ``deterministic`` (omega = 0). A user problem whose validator reports the
standard error records it per outcome; ``estimate`` measures it once at the start and a
resumed run keeps the figure.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from omegaconf import DictConfig

from gigaevo.evolution.store import ProgramStore
from gigaevo.memory.v2.evidence import SelectionEvidence
from gigaevo.pipeline.build import STORE_FILE, run_from_config
from gigaevo.pipeline.noise import NOISE_META

PROGRAM = """\
# EVOLVE-BLOCK-START
def guess():
    return 0.25
# EVOLVE-BLOCK-END


def solve():
    return guess()
"""

VALIDATOR = """\
def validate(output):
    if isinstance(output, bool) or not isinstance(output, (int, float)):
        raise ValueError("output must be a number")
    if output != output:
        raise ValueError("output is NaN")
    score = min(max(float(output), 0.0), 1.0)
    return {"score": score, "score_se": 0.01 + 0.01 * score}
"""


def _problem(root: Path, noise: str) -> Path:
    root.mkdir(parents=True)
    (root / "task.md").write_text("Return a number; the score is it, clipped to [0, 1].")
    (root / "problem.yaml").write_text(
        f"name: noisy\nentry_function: solve\ntimeout_s: 2\nnoise: {noise}\nmetrics:\n"
        "  primary: score\n  higher_is_better: true\n  lower_bound: 0.0\n"
        "  upper_bound: 1.0\n  sentinel: 0.0\n"
    )
    (root / "initial_program.py").write_text(PROGRAM)
    (root / "validator.py").write_text(VALIDATOR)
    return root


def _valid_terminals(run: Path) -> list[tuple[int, str, float | None, str | None]]:
    """(attempt, child id, se, measurement) of every valid terminal of the run's ledger."""
    ledger = SelectionEvidence(run).open(censor_orphans=False)
    try:
        return [
            (o.decision.attempt, o.terminal.child_id, o.terminal.se, o.terminal.measurement)
            for o in ledger.observations()
            if o.valid
        ]
    finally:
        ledger.close()


def test_a_builtin_run_records_every_outcome_as_deterministic(
    make_cfg: Callable[..., DictConfig],
) -> None:
    cfg = make_cfg("max_mutants=16", "memory=v2", "pipeline=memory_guided")
    run_from_config(cfg, show_progress=False)
    rows = _valid_terminals(Path(cfg.checkpoint_dir))
    assert rows and {(se, kind) for _, _, se, kind in rows} == {(0.0, "deterministic")}


def test_a_validator_reported_standard_error_reaches_each_terminal(
    make_cfg: Callable[..., DictConfig], tmp_path: Path
) -> None:
    problem = _problem(tmp_path / "noisy", "{kind: metric, metric: score_se}")
    cfg = make_cfg(f"problem.dir={problem}", "max_mutants=16", "memory=v2")
    run_from_config(cfg, show_progress=False)
    run = Path(cfg.checkpoint_dir)
    rows = _valid_terminals(run)
    store = ProgramStore(run / STORE_FILE)
    try:  # the standard error each valid child's validator reported
        reported = [store.get(child).metrics["score_se"] for _, child, _, _ in rows]
    finally:
        store.close()
    assert len(rows) >= 8 and len(set(reported)) > 1
    assert [(se, kind) for _, _, se, kind in rows] == [(se, "scalar") for se in reported]


def test_an_estimated_standard_error_is_measured_once_and_kept_on_resume(
    make_cfg: Callable[..., DictConfig], tmp_path: Path
) -> None:
    problem = _problem(tmp_path / "noisy", "{kind: estimate, repeats: 3}")
    first = make_cfg(f"problem.dir={problem}", "max_mutants=6", "memory=v2")
    run_from_config(first, show_progress=False)
    run = Path(first.checkpoint_dir)
    store = ProgramStore(run / STORE_FILE)
    try:
        meta = store.get_meta(NOISE_META)
        store.set_meta(NOISE_META, {**meta, "se": 0.5})  # a resume must read, not re-measure
    finally:
        store.close()
    assert meta["samples"] == [[0.25, 0.25, 0.25]] and meta["se"] == 0.0
    before = _valid_terminals(run)
    assert before and {(se, kind) for _, _, se, kind in before} == {(0.0, "scalar")}
    again = make_cfg(f"problem.dir={problem}", "max_mutants=14", "memory=v2", "resume=true")
    run_from_config(again, show_progress=False)
    after = [row for row in _valid_terminals(run) if row[0] >= 6]
    assert after and {(se, kind) for _, _, se, kind in after} == {(0.5, "scalar")}
