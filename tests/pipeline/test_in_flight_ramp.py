"""The in-flight ramp: a run starts with one attempt outstanding and widens as mutants commit."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np
import pytest
from omegaconf import DictConfig

from gigaevo.evolution import BestOrTournament, Elite
from gigaevo.evolution.records import EngineSettings
from gigaevo.pipeline.build import STORE_FILE, ConfigError, build_run, validate_config
from gigaevo.problems.spec import MetricsSpec
from tests.conftest import STEADY_EVAL, kill_9_after_commits, program_ids, run_py


class CountInFlight:
    """The default selector, recording how many attempts were in flight at each choice."""

    def __init__(self) -> None:
        self.inner = BestOrTournament(p_best=0.9)
        self.in_flight: list[int] = []

    def select(
        self,
        elites: Sequence[Elite],
        metrics: MetricsSpec,
        rng: np.random.Generator,
        pending: Mapping[str, int] | None = None,
    ) -> Elite:
        self.in_flight.append(sum((pending or {}).values()))
        return self.inner.select(elites, metrics, rng, pending=pending)


def _strict_in_flight(width: Callable[[int], int], n: int) -> list[int]:
    """Attempts in flight when each of ``n`` attempts is chosen, under strict dispatch:
    after each commit (in attempt order) attempts are dispatched while fewer than
    ``width(committed)`` are outstanding."""
    seen: list[int] = []
    outstanding: list[int] = []
    committed = 0
    next_attempt = 0
    while next_attempt < n or outstanding:
        while next_attempt < n and len(outstanding) < width(committed):
            seen.append(len(outstanding))
            outstanding.append(next_attempt)
            next_attempt += 1
        outstanding.pop(0)
        committed += 1
    return seen


def test_width_grows_linearly_from_one_to_all_outstanding() -> None:
    s = EngineSettings(seed=0, max_mutants=100, max_in_flight=4, in_flight_ramp=30)
    assert [s.width(n) for n in (0, 9, 10, 19, 20, 29, 30, 1000)] == [1, 1, 2, 2, 3, 3, 4, 4]
    assert all(s.width(n) <= s.width(n + 1) for n in range(40))  # never narrows
    arrival = EngineSettings(
        seed=0,
        max_mutants=10,
        max_in_flight=8,
        dispatch="arrival",
        dispatch_ahead=2,
        in_flight_ramp=9,
    )
    assert arrival.width(0) == 1
    assert arrival.width(9) == 10 == arrival.outstanding  # the ramp's end: slots and ahead
    off = EngineSettings(seed=0, max_mutants=10, max_in_flight=4)
    assert off.width(0) == 4  # no ramp: everything from the start, as before
    with pytest.raises(ValueError, match="in_flight_ramp"):
        EngineSettings(seed=0, max_mutants=10, in_flight_ramp=-1)


def _run(make_cfg: Callable[..., DictConfig], run: str, *extra: str) -> tuple[list[int], list]:
    cfg = make_cfg(
        "max_mutants=20",
        "memory=none",
        "evolution.max_in_flight=4",
        "evolution.dispatch=strict",
        "evolution.n_islands=1",
        *extra,
        run=run,
    )
    built = build_run(cfg, show_progress=False)
    spy = CountInFlight()
    built.engine.selector = spy
    try:
        built.engine.run()
    finally:
        built.close()
    db = sqlite3.connect(Path(cfg.checkpoint_dir) / STORE_FILE)
    try:
        rows = [json.loads(r[0]) for r in db.execute("SELECT data FROM programs ORDER BY ordinal")]
    finally:
        db.close()
    history = [(r["id"], r["parent_ids"], r["code"], r["fitness"]) for r in rows]
    return spy.in_flight, history


def test_strict_run_with_a_ramp_waits_on_fewer_results_early_and_repeats(
    make_cfg: Callable[..., DictConfig],
) -> None:
    in_flight, history = _run(make_cfg, "a", "evolution.in_flight_ramp=9")
    settings = EngineSettings(seed=0, max_mutants=20, max_in_flight=4, in_flight_ramp=9)
    expected = _strict_in_flight(settings.width, 20)
    assert in_flight == expected
    assert expected[:3] == [0, 0, 0]  # the first choices see every earlier result
    assert max(expected) == 3  # and the run widens to all 4 slots
    again, history_again = _run(make_cfg, "b", "evolution.in_flight_ramp=9")
    assert again == in_flight and history_again == history  # still reproducible
    plain, _ = _run(make_cfg, "c")
    assert plain == _strict_in_flight(lambda n: 4, 20)
    assert plain[:4] == [0, 1, 2, 3]  # without the ramp: 4 at once from the start


def test_a_negative_ramp_is_a_config_error(make_cfg: Callable[..., DictConfig]) -> None:
    with pytest.raises(ConfigError, match=r"evolution\.in_flight_ramp"):
        validate_config(make_cfg("evolution.in_flight_ramp=-3"))


@pytest.mark.slow
def test_kill_9_during_the_ramp_then_resume_matches_uninterrupted_run(tmp_path: Path) -> None:
    args = [
        "problem=rastrigin",
        "max_mutants=60",
        "progress=false",
        "seed=3",
        "evolution.dispatch=strict",
        "evolution.in_flight_ramp=50",
        STEADY_EVAL,
    ]
    ckpt = tmp_path / "killed"
    done = kill_9_after_commits(args, ckpt, tmp_path, 15)
    assert 15 <= done < 61, "the run should have been killed mid-way"
    code, _, err = run_py(*args, f"checkpoint_dir={ckpt}", "resume=true", cwd=tmp_path)
    assert code == 0, err
    code, _, err = run_py(*args, f"checkpoint_dir={tmp_path / 'whole'}", cwd=tmp_path)
    assert code == 0, err
    assert program_ids(ckpt) == program_ids(tmp_path / "whole")
