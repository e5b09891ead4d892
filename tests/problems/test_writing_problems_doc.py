"""The example problem in docs/problems.md loads, and its seed passes its own validator."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import gigaevo.problems
from gigaevo.problems import ProblemError, load_problem

LoadModule = Callable[[Path], ModuleType]
DOC = Path(gigaevo.problems.__file__).parents[2] / "docs" / "problems.md"
FILE_BLOCK = re.compile(r"<!-- file: (?P<path>\S+) -->\n```\w*\n(?P<body>.*?)```\n", re.DOTALL)


def _write_example(root: Path) -> Path:
    blocks = list(FILE_BLOCK.finditer(DOC.read_text(encoding="utf-8")))
    assert len(blocks) == 4
    for block in blocks:
        target = root / block["path"]
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(block["body"], encoding="utf-8")
    return root / "spread_points"


def test_example_loads_and_seed_is_valid(
    tmp_path: Path, run_entry: Callable[[str, str], Any], load_module: LoadModule
) -> None:
    problem = load_problem(directory=_write_example(tmp_path))
    assert problem.name == "spread_points"
    assert problem.extra_metrics == ("mean_distance",)
    output = run_entry(problem.initial_programs[0], problem.entry_function)
    metrics = load_module(problem.validator_path).validate(output)
    assert set(metrics) == {"min_distance", "mean_distance"}
    assert 0.0 < metrics["min_distance"] < problem.metrics.upper_bound
    assert math.isfinite(metrics["mean_distance"])


def test_example_validator_is_strict(tmp_path: Path, load_module: LoadModule) -> None:
    validate = load_module(_write_example(tmp_path) / "validator.py").validate
    good = [[0.1 * i, 0.1 * i] for i in range(8)]
    assert validate(good)["min_distance"] == pytest.approx(math.sqrt(0.02))
    for bad in (good[:7], [*good[:7], [math.nan, 0.5]], [*good[:7], [1.0 + 1e-9, 0.5]]):
        with pytest.raises(ValueError):
            validate(bad)


def test_example_typo_is_caught(tmp_path: Path) -> None:
    root = _write_example(tmp_path)
    spec = root / "problem.yaml"
    spec.write_text(spec.read_text().replace("sentinel:", "sentinal:"))
    with pytest.raises(ProblemError, match=r"unknown key metrics\.sentinal"):
        load_problem(directory=root)


@pytest.mark.slow
def test_example_runs_end_to_end_from_the_readme(tmp_path: Path) -> None:
    import json

    from tests.conftest import run_py

    problem_dir = _write_example(tmp_path)
    ckpt = tmp_path / "run"
    code, _, err = run_py(
        f"problem.dir={problem_dir}", "max_mutants=40", f"checkpoint_dir={ckpt}", cwd=tmp_path
    )
    assert code == 0, err
    summary = json.loads((ckpt / "summary.json").read_text())
    assert summary["problem"] == "spread_points" and summary["n_mutants"] == 40
    assert summary["best_fitness"] >= summary["initial_fitness"]
