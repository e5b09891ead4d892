"""Kill -9 past the fit grid's first point: the history equals the uninterrupted run's.

``memory.posterior_config.fit_rows: grid`` (memory=v2's configuration) fits the heads on
the rows up to the latest grid point only (docs/memory-model.md "The fit grid"): every
row below 256, then every 16th. A seeded rastrigin run passes 256 usefulness-eligible
rows at about its 700th mutant, so ``test_exactly_once``'s 30-mutant run never reaches
the grid. Here a 1,000-mutant run (about 440 eligible rows, 390 lineage moves at the
end) is killed at five moments spread over it, two of them past the first grid point,
and resumed each time: each resumed reader takes the rows up to the grid point of the
rows it finds, as the uninterrupted one did at the same count, so every decision, its
fitted rows, every terminal, card and event equal the uninterrupted run's.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.conftest import STEADY_EVAL, kill_9_after_commits, run_py
from tests.pipeline.test_exactly_once import _first_difference, history

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]

BUDGET = 1000
ARGS = ["problem=rastrigin", f"max_mutants={BUDGET}", "seed=3", "progress=false", STEADY_EVAL]


def test_a_grid_run_killed_past_its_first_grid_point_records_the_uninterrupted_history(
    tmp_path: Path,
) -> None:
    code, _, err = run_py(*ARGS, f"checkpoint_dir={tmp_path / 'whole'}", cwd=tmp_path)
    assert code == 0, err
    want = history(tmp_path / "whole")
    fits = [d.get("fit") or [] for d in want["decisions"]]
    rows = [next((x["value"] for x in f if x["name"] == "invalidity.rows"), 0.0) for f in fits]
    assert max(rows) > 300, "the run never passed the fit grid's first point (256 rows)"

    rng = np.random.default_rng(8)
    ckpt = tmp_path / "killed"
    held = 0
    for target in (120, 380, 640, 820, 930):
        commits = target + int(rng.integers(0, 40))
        resume = ["resume=true"] if ckpt.exists() else []
        held = kill_9_after_commits([*ARGS, *resume], ckpt, tmp_path, commits)
    assert held < BUDGET, "the last session ended before its kill"
    code, _, err = run_py(*ARGS, f"checkpoint_dir={ckpt}", "resume=true", cwd=tmp_path)
    assert code == 0, err

    got = history(ckpt)
    for key in want:
        assert got[key] == want[key], f"{key}: {_first_difference(got[key], want[key])}"
