"""Small real runs made once per session: a plain run, a memory=v2 run and a two-job sweep."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import run_py


def _run(root: Path, name: str, *overrides: str, mutants: int = 12) -> Path:
    out = root / name
    code, _, err = run_py(
        "problem=rastrigin",
        f"max_mutants={mutants}",
        "progress=false",
        "evaluator.max_workers=1",
        f"checkpoint_dir={out}",
        *overrides,
        cwd=root,
    )
    assert code == 0, err[-2000:]
    return out


@pytest.fixture(scope="session")
def runs_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("analysis_runs")


@pytest.fixture(scope="session")
def plain_run(runs_root: Path) -> Path:
    """A finished memory=none run (12 mutants); treat as read-only."""
    return _run(runs_root, "plain", "memory=none", "pipeline=guided")


@pytest.fixture(scope="session")
def memory_run(runs_root: Path) -> Path:
    """A finished memory=v2 run (12 mutants) with its card bank; treat as read-only."""
    return _run(runs_root, "memory", "memory=v2")


def _sweep(root: Path, name: str, *overrides: str, mutants: int) -> Path:
    out = root / name
    code, _, err = run_py(
        "-m",
        *overrides,
        "problem=rastrigin",
        f"max_mutants={mutants}",
        "progress=false",
        "evaluator.max_workers=1",
        f"hydra.sweep.dir={out}",
        cwd=root,
    )
    assert code == 0, err[-2000:]
    return out


@pytest.fixture(scope="session")
def sweep_dir(runs_root: Path) -> Path:
    """A finished multirun over seed=0,1 (6 mutants each); treat as read-only."""
    return _sweep(runs_root, "sweep", "seed=0,1", "memory=none", "pipeline=guided", mutants=6)


@pytest.fixture
def copy_of(tmp_path: Path) -> Callable[[Path], Path]:
    """Copy a run directory into tmp_path, to damage it safely."""

    def _copy(src: Path) -> Path:
        dst = tmp_path / src.name
        shutil.copytree(src, dst)
        return dst

    return _copy


@pytest.fixture(scope="session")
def memory_sweep_dir(runs_root: Path) -> Path:
    """A finished multirun over memory=none,v2 x seed=0,1 (4 mutants each); read-only."""
    return _sweep(runs_root, "memory_sweep", "memory=none,v2", "seed=0,1", mutants=4)


@pytest.fixture(scope="session")
def read_side_run(runs_root: Path) -> Path:
    """A finished memory=v2 run with the read side (40 mutants, cards offered); read-only."""
    return _run(runs_root, "read_side", "memory=v2", "pipeline=memory_guided", mutants=40)
