"""Fixtures for problem tests: built-in validators, in-process program runs, JSON round trip."""

from __future__ import annotations

import importlib.util
import json
import os
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from gigaevo.evaluation.verdict import ValidationContext, split_answer
from gigaevo.evaluation.worker import wants_context
from gigaevo.problems import builtin_root


def load_module(path: Path) -> ModuleType:
    """Import a file as a fresh module (validators are plain files, not package modules)."""
    spec = importlib.util.spec_from_file_location(f"_validator_{path.parent.name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def json_round_trip(value: Any) -> Any:
    """What the sandbox hands the validator: numpy arrays become lists, tuples lists."""
    return json.loads(json.dumps(value, default=lambda o: o.tolist()))


def run_entry(source: str, entry: str, problem_dir: Path | None = None) -> Any:
    """Execute a program in-process, call its entry function, JSON round trip the result.

    ``problem_dir`` is announced as ``GIGAEVO_PROBLEM_DIR`` (as the sandbox does).
    """
    namespace: dict[str, Any] = {"__name__": "__candidate__"}
    before = os.environ.get("GIGAEVO_PROBLEM_DIR")
    if problem_dir is not None:
        os.environ["GIGAEVO_PROBLEM_DIR"] = str(problem_dir)
    try:
        exec(compile(source, "<candidate>", "exec"), namespace)
        return json_round_trip(namespace[entry]())
    finally:
        if problem_dir is not None and before is None:
            del os.environ["GIGAEVO_PROBLEM_DIR"]
        elif before is not None:
            os.environ["GIGAEVO_PROBLEM_DIR"] = before


TRUSTED = ValidationContext(stage="full", run_seconds=0.1, cpu_seconds=0.1, peak_memory_bytes=1)


@pytest.fixture
def validator() -> Callable[[str], Callable[[Any], dict[str, float]]]:
    """``validator(name)``: the built-in's ``validate`` as the worker calls it, metrics only.

    A validator of ``(output, context)`` gets a full-stage context; a returned
    ``(metrics, feedback)`` pair gives its metrics.
    """

    def get(name: str) -> Callable[[Any], dict[str, float]]:
        validate = load_module(builtin_root() / name / "validator.py").validate

        def metrics_of(output: Any) -> dict[str, float]:
            raw = validate(output, TRUSTED) if wants_context(validate) else validate(output)
            metrics: dict[str, float] = split_answer(raw)[0]
            return metrics

        return metrics_of

    return get


@pytest.fixture(name="run_entry")
def run_entry_fixture() -> Callable[..., Any]:
    """``run_entry(source, entry)``: run a program in-process, return its round-tripped output."""
    return run_entry


@pytest.fixture(name="round_trip")
def round_trip_fixture() -> Callable[[Any], Any]:
    """``round_trip(value)``: the sandbox's JSON round trip."""
    return json_round_trip


@pytest.fixture(name="load_module")
def load_module_fixture() -> Callable[[Path], ModuleType]:
    """``load_module(path)``: import a file (a validator) as a fresh module."""
    return load_module
