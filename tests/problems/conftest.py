"""Fixtures for problem tests: built-in validators, in-process program runs, JSON round trip."""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

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


def run_entry(source: str, entry: str) -> Any:
    """Execute a program in-process, call its entry function, JSON round trip the result."""
    namespace: dict[str, Any] = {"__name__": "__candidate__"}
    exec(compile(source, "<candidate>", "exec"), namespace)
    return json_round_trip(namespace[entry]())


@pytest.fixture
def validator() -> Callable[[str], Callable[[Any], dict[str, float]]]:
    """``validator(name)`` is the built-in problem's ``validate`` function."""

    def get(name: str) -> Callable[[Any], dict[str, float]]:
        validate: Callable[[Any], dict[str, float]] = load_module(
            builtin_root() / name / "validator.py"
        ).validate
        return validate

    return get


@pytest.fixture(name="run_entry")
def run_entry_fixture() -> Callable[[str, str], Any]:
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
