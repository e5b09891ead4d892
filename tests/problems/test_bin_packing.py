"""bin_packing: the seed is best fit, the baselines match task.md, the validator is strict."""

from __future__ import annotations

import json
import math
import shutil
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from gigaevo.evaluation.verdict import ValidationContext
from gigaevo.problems import load_problem

PROBLEM = load_problem(name="bin_packing")
FULL = ValidationContext("full", run_seconds=1.0, cpu_seconds=1.0, peak_memory_bytes=1)
QUICK = ValidationContext("cascade", run_seconds=0.1, cpu_seconds=0.1, peak_memory_bytes=1)


def _data() -> dict[str, Any]:
    data: dict[str, Any] = json.loads((PROBLEM.directory / "data" / "instances.json").read_text())
    return data


def _first_fit(items: list[int], capacity: int) -> int:
    room: list[int] = []
    for item in items:
        for j, r in enumerate(room):
            if r >= item:
                room[j] -= item
                break
        else:
            room.append(capacity - item)
    return len(room)


def _best_fit(items: list[int], capacity: int) -> int:
    room: list[int] = []
    for item in items:
        fits = [j for j, r in enumerate(room) if r >= item]
        if fits:
            room[min(fits, key=lambda j: room[j])] -= item
        else:
            room.append(capacity - item)
    return len(room)


@pytest.fixture(scope="module")
def seed_output() -> Any:
    from tests.problems.conftest import run_entry

    return run_entry(PROBLEM.initial_programs[0], PROBLEM.entry_function, PROBLEM.directory)


@pytest.fixture
def validate(load_module: Callable[[Path], ModuleType]) -> Callable[..., Any]:
    return load_module(PROBLEM.validator_path).validate  # type: ignore[no-any-return]


def test_the_baselines_of_task_md_and_the_seed_reproduces_best_fit(
    seed_output: Any, validate: Callable[..., Any]
) -> None:
    data = _data()
    full, capacity = data["full"], data["capacity"]
    lower = sum(math.ceil(sum(items) / capacity) for items in full)
    first = sum(_first_fit(items, capacity) for items in full)
    best = sum(_best_fit(items, capacity) for items in full)
    assert (lower, first, best) == (2012, 2118, 2110)
    assert f"{first / lower:.4f} ({first:,} bins for L1 {lower:,})" in PROBLEM.description
    assert f"{best / lower:.4f} ({best:,} bins)" in PROBLEM.description
    metrics, feedback = validate(seed_output, FULL)
    assert metrics["bins_over_l1"] == best / lower
    assert metrics["best_fit_deviation"] == 0.0 and metrics["new_bin_share"] == 0.0
    assert metrics["deviation_slack"] == 0.0
    assert feedback.startswith("instance 0: 417 bins (L1 bound 398, best fit 417); ")
    assert PROBLEM.metrics.better(PROBLEM.metrics.best_known, metrics["bins_over_l1"])


def test_the_descriptors_say_how_often_and_how_far_a_packing_departs_from_best_fit(
    load_module: Callable[[Path], ModuleType],
) -> None:
    replay = load_module(PROBLEM.validator_path)._replay
    # 50 and 70 open two bins (50 and 30 left); best fit puts 20 in the second (30 left),
    # this packing in the first (50 left): one item of three elsewhere, 20 more room
    assert replay([50, 70, 20], [0, 1, 0], 100, "x") == (2, pytest.approx(1 / 3), 0.0, 30.0, 20.0)
    assert replay([50, 70, 20], [0, 1, 1], 100, "x") == (2, 0.0, 0.0, 10.0, 0.0)
    # a new bin while one had room counts as a departure, but adds no slack
    assert replay([50, 20], [0, 1], 100, "x") == (2, 0.5, 0.5, 0.0, 0.0)


def test_the_first_stage_packs_the_quick_instance(
    validate: Callable[..., Any], run_entry: Callable[..., Any]
) -> None:
    assert PROBLEM.cascade is not None
    output = run_entry(
        PROBLEM.initial_programs[0], PROBLEM.cascade.entry_function, PROBLEM.directory
    )
    metrics, _ = validate(output, QUICK)
    assert metrics["bins_over_l1"] < PROBLEM.cascade.threshold
    with pytest.raises(ValueError, match="one assignment per instance"):
        validate(output, FULL)


def _broken(seed_output: Any, change: Callable[[list[list[int]]], None]) -> list[list[int]]:
    output = [list(a) for a in seed_output]
    change(output)
    return output


def test_the_validator_refuses_impossible_packings(
    seed_output: Any, validate: Callable[..., Any]
) -> None:
    items = _data()["full"][0]
    big = [i for i, size in enumerate(items) if size > 50]

    def overfill(o: list[list[int]]) -> None:
        o[0][big[1]] = o[0][big[0]]  # two items over half the capacity in one bin

    cases: list[tuple[Callable[[list[list[int]]], None], str]] = [
        (lambda o: o[0].pop(), "expected a list of 1000"),
        (lambda o: o[1].__setitem__(5, 999), "only bins 0"),
        (lambda o: o[2].__setitem__(0, 1.0), "must be integers"),  # type: ignore[arg-type]
        (lambda o: o[3].__setitem__(7, -1), "only bins 0"),
        (overfill, "does not fit"),
    ]
    for change, message in cases:
        with pytest.raises(ValueError, match=message):
            validate(_broken(seed_output, change), FULL)
    slow = ValidationContext("full", run_seconds=30.0, cpu_seconds=25.0, peak_memory_bytes=1)
    with pytest.raises(ValueError, match="too slow"):
        validate(seed_output, slow)


def test_changed_instances_are_refused(
    tmp_path: Path, seed_output: Any, load_module: Callable[[Path], ModuleType]
) -> None:
    copy = tmp_path / "bin_packing"
    shutil.copytree(PROBLEM.directory, copy)
    data = _data()
    data["full"][0][0] = 1
    (copy / "data" / "instances.json").write_text(json.dumps(data))
    with pytest.raises(ValueError, match="differs from the instances"):
        load_module(copy / "validator.py").validate(seed_output, FULL)
