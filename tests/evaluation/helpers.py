"""Plain helpers for the sandbox tests: problem files, inline programs, /proc inspection."""

from __future__ import annotations

import textwrap
from pathlib import Path

from gigaevo.problems.spec import MetricsSpec, Problem

LIST_VALIDATOR = """
import math

def validate(output):
    if not isinstance(output, list):
        raise ValueError("expected a list of numbers")
    values = [float(x) for x in output]
    return {"score": math.fsum(values), "count": float(len(values))}
"""


def write_problem(
    directory: Path, validator_source: str = LIST_VALIDATOR, *, timeout_s: float = 1.0
) -> Problem:
    """A problem in ``directory``: entry function ``solve``, primary metric ``score``."""
    directory.mkdir(parents=True, exist_ok=True)
    validator = directory / "validator.py"
    validator.write_text(textwrap.dedent(validator_source))
    return Problem(
        name=directory.name,
        directory=directory,
        description="test problem",
        initial_programs=("def solve():\n    return [1.0]\n",),
        entry_function="solve",
        validator_path=validator,
        metrics=MetricsSpec(
            primary="score",
            higher_is_better=True,
            lower_bound=0.0,
            upper_bound=100.0,
            sentinel=0.0,
        ),
        timeout_s=timeout_s,
    )


def program(source: str) -> str:
    """Dedent an inline program."""
    return textwrap.dedent(source).lstrip("\n")


def is_alive(pid: int) -> bool:
    """True when ``pid`` exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    state = stat.rsplit(")", 1)[1].split()[0]
    return state not in ("Z", "X")


def descendants(pid: int) -> list[int]:
    """All live descendants of ``pid`` according to ``/proc``."""
    found: list[int] = []
    stack = [pid]
    while stack:
        task_dir = Path(f"/proc/{stack.pop()}/task")
        try:
            tids = list(task_dir.iterdir())
        except FileNotFoundError:
            continue
        for tid in tids:
            try:
                children = [int(x) for x in (tid / "children").read_text().split()]
            except (FileNotFoundError, ProcessLookupError):
                continue
            found.extend(children)
            stack.extend(children)
    return [p for p in found if is_alive(p)]


def is_worker(pid: int) -> bool:
    """True for a sandbox worker process (also the namespace init it forks)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return b"gigaevo.evaluation.worker" in cmdline


def stray_processes(worker_pids: list[int]) -> list[int]:
    """Live descendants of the workers that are not workers themselves (programs, escapees)."""
    return [pid for worker in worker_pids for pid in descendants(worker) if not is_worker(pid)]
