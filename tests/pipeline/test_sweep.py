"""Multirun sweeps: each job gets its own checkpoint_dir and finishes its run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import run_py


def _summaries(sweep: Path) -> list[dict[str, object]]:
    return [json.loads(p.read_text()) for p in sorted(sweep.rglob("summary.json"))]


@pytest.mark.slow
@pytest.mark.parametrize("launcher", ["basic", "joblib"])
def test_local_launcher_sweep(tmp_path: Path, launcher: str) -> None:
    sweep = tmp_path / "sweep"
    code, _, err = run_py(
        "-m", "problem=rastrigin", "seed=0,1", "max_mutants=6", "progress=false",
        f"hydra/launcher={launcher}", f"hydra.sweep.dir={sweep}", cwd=tmp_path,
    )  # fmt: skip
    assert code == 0, err
    summaries = _summaries(sweep)
    assert sorted(s["seed"] for s in summaries) == [0, 1]  # type: ignore[type-var]
    assert all(s["n_mutants"] == 6 for s in summaries)


@pytest.mark.slow
def test_submitit_local_sweep(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    code, _, err = run_py(
        "-m", "problem=rastrigin", "seed=0,1", "max_mutants=6", "progress=false",
        "hydra/launcher=submitit_local", "hydra.launcher.timeout_min=5",
        f"hydra.sweep.dir={sweep}", cwd=tmp_path, timeout=600,
    )  # fmt: skip
    assert code == 0, err
    dirs = sorted(p.parent for p in sweep.rglob("summary.json"))
    assert len(dirs) == 2 and dirs[0] != dirs[1]
    assert sorted(s["seed"] for s in _summaries(sweep)) == [0, 1]  # type: ignore[type-var]
