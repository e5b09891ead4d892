"""load_sweep: one row per job, overrides as typed columns, partial jobs included."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import pandas as pd
import pytest

from gigaevo.analysis import compare_arms, load_sweep, paired_difference, varying_overrides


def test_one_row_per_job_with_overrides_and_summary(sweep_dir: Path) -> None:
    sweep = load_sweep(sweep_dir)
    assert list(sweep.job) == ["0", "1"]
    assert list(sweep["override.seed"]) == [0, 1]
    assert (sweep["override.max_mutants"] == 6).all()
    assert sweep.finished.all() and (sweep.n_mutants == 6).all()
    assert sweep.best_fitness.notna().all()
    assert varying_overrides(sweep) == ["override.seed"]


def test_a_job_that_never_finished_gets_a_row(sweep_dir: Path, tmp_path: Path) -> None:
    root = tmp_path / "sweep"
    shutil.copytree(sweep_dir, root)
    (root / "1" / "summary.json").unlink()
    (root / "2" / ".hydra").mkdir(parents=True)
    (root / "2" / ".hydra" / "overrides.yaml").write_text("- seed=2\n")
    sweep = load_sweep(root)
    assert list(sweep.job) == ["0", "1", "2"]
    assert list(sweep.finished) == [True, False, False]
    assert "summary.json" in sweep.missing.iloc[1]
    assert sweep["override.seed"].iloc[2] == 2
    assert sweep.best_fitness.isna().tolist() == [False, True, True]


def test_an_empty_directory_warns_and_gives_no_rows(tmp_path: Path) -> None:
    with pytest.warns(UserWarning, match="no job"):
        assert load_sweep(tmp_path).empty


def test_compare_arms_gives_the_t_interval() -> None:
    sweep = pd.DataFrame(
        {
            "override.memory": ["none", "none", "none", "v2", "v2"],
            "best_fitness": [1.0, 2.0, 3.0, 5.0, None],
        }
    )
    arms = compare_arms(sweep, "override.memory").set_index("override.memory")
    assert arms.loc["none", "n"] == 3 and arms.loc["none", "mean"] == pytest.approx(2.0)
    half = 4.302652729911275 * 1.0 / 3**0.5  # t(0.975, df=2) * s / sqrt(n)
    assert arms.loc["none", "ci_low"] == pytest.approx(2.0 - half)
    assert arms.loc["none", "ci_high"] == pytest.approx(2.0 + half)
    assert arms.loc["v2", "n"] == 1 and math.isnan(arms.loc["v2", "ci_low"])


def test_paired_difference_matches_seeds_within_each_problem() -> None:
    sweep = pd.DataFrame(
        {
            "override.problem": ["a"] * 5 + ["b"] * 2,
            "override.memory": ["none", "v2", "none", "v2", "v2", "none", "v2"],
            "override.seed": [0, 0, 1, 1, 2, 0, 0],
            "best_fitness": [1.0, 2.0, 3.0, 3.5, 9.0, 5.0, 4.0],
        }
    )
    diff = paired_difference(sweep, by="override.problem").set_index("override.problem")
    assert diff.loc["a", "n"] == 2  # seed 2 has no memory=none partner
    assert diff.loc["a", "mean"] == pytest.approx(0.75)
    half = 12.706204736174698 * 0.3535533905932738 / 2**0.5  # t(0.975, 1) * s / sqrt(2)
    assert diff.loc["a", "ci_high"] == pytest.approx(0.75 + half)
    assert diff.loc["b", "n"] == 1 and diff.loc["b", "mean"] == -1.0
    assert math.isnan(diff.loc["b", "ci_low"])
    assert paired_difference(sweep[sweep["override.memory"] == "v2"]).empty


def test_output_paths_are_never_arms() -> None:
    sweep = pd.DataFrame(
        {
            "override.checkpoint_dir": ["/a", "/b"],
            "override.hydra.run.dir": ["/a", "/b"],
            "override.memory": ["none", "v2"],
        }
    )
    assert varying_overrides(sweep) == ["override.memory"]
