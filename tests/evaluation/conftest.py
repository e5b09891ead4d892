"""Fixtures for the sandbox tests: tiny problems in tmp_path and evaluators over them."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from gigaevo.evaluation import SandboxEvaluator
from gigaevo.problems.spec import Problem

from .helpers import LIST_VALIDATOR, write_problem

MakeProblem = Callable[..., Problem]


@pytest.fixture
def make_problem(tmp_path: Path) -> MakeProblem:
    """Factory: ``make_problem(validator_source=..., timeout_s=...)`` in a fresh directory."""
    counter = iter(range(1000))

    def make(validator_source: str = LIST_VALIDATOR, timeout_s: float = 1.0) -> Problem:
        directory = tmp_path / f"problem{next(counter)}"
        return write_problem(directory, validator_source, timeout_s=timeout_s)

    return make


@pytest.fixture
def problem(make_problem: MakeProblem) -> Problem:
    """The default list-of-numbers problem (score = sum)."""
    return make_problem()


@pytest.fixture
def evaluator(problem: Problem) -> Iterator[SandboxEvaluator]:
    """A private two-worker evaluator: 1 s timeout, 512 MB memory cap."""
    with SandboxEvaluator(problem, max_workers=2, timeout_s=1.0, memory_mb=512) as ev:
        yield ev


@pytest.fixture(scope="module")
def shared_evaluator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SandboxEvaluator]:
    """One evaluator shared by a module's tests that leave workers intact."""
    problem = write_problem(tmp_path_factory.mktemp("shared"))
    with SandboxEvaluator(
        problem, max_workers=2, timeout_s=1.0, memory_mb=512, max_output_bytes=100_000
    ) as ev:
        yield ev
