"""Trusted evaluation inputs: the worker's own measurements, data files, feedback, the cascade."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from gigaevo.evaluation import SandboxEvaluator
from gigaevo.evaluation.verdict import MAX_FEEDBACK_CHARS
from gigaevo.problems.spec import CascadeSpec, Problem

from .helpers import program, write_problem

# Reports what the worker measured, never what the program said.
CONTEXT_VALIDATOR = """
def validate(output, context):
    claimed = output["claimed"]
    return {
        "score": 1.0,
        "cpu": context.cpu_seconds,
        "wall": context.run_seconds,
        "peak_mb": context.peak_memory_bytes / 2**20,
        "claimed_cpu": float(claimed),
    }, "stage " + context.stage
"""

# Burns CPU, then tries every way it has to look fast.
FORGER = program(
    """
    import os, resource, time

    def solve():
        end = time.process_time() + 0.4
        while time.process_time() < end:
            pass
        time.process_time = lambda: 0.0
        time.perf_counter = lambda: 0.0
        time.monotonic = lambda: 0.0
        resource.getrusage = lambda who: None
        os.times = lambda: os.times_result((0, 0, 0, 0, 0))
        print('{"ok": true, "output": {"claimed": 0}}')
        try:
            open("/proc/self/stat", "w").write("0")
        except OSError:
            pass
        return {"claimed": 0.0}
    """
)


@pytest.fixture
def context_problem(tmp_path: Path) -> Problem:
    return write_problem(tmp_path / "ctx", CONTEXT_VALIDATOR, timeout_s=10.0)


def test_trusted_timing_cannot_be_altered_by_the_child(context_problem: Problem) -> None:
    with SandboxEvaluator(context_problem, max_workers=1, memory_mb=512) as ev:
        result = ev.evaluate(FORGER)
        sleeper = ev.evaluate(
            "import time\ndef solve():\n    time.sleep(0.5)\n    return {'claimed': 0}\n"
        )
    assert result.valid, result.reason
    assert result.metrics["claimed_cpu"] == 0.0
    assert result.metrics["cpu"] >= 0.35  # the kernel's figure, whatever the child patched
    assert result.metrics["cpu"] == pytest.approx(result.cpu_seconds)
    assert result.metrics["wall"] >= result.metrics["cpu"] - 0.05
    assert result.metrics["peak_mb"] > 1.0
    assert result.feedback == "stage full"
    assert sleeper.valid and sleeper.metrics["wall"] >= 0.45 and sleeper.metrics["cpu"] < 0.4


def test_a_validator_of_the_output_alone_still_works(tmp_path: Path) -> None:
    problem = write_problem(tmp_path / "plain")
    with SandboxEvaluator(problem, max_workers=1, memory_mb=512) as ev:
        result = ev.evaluate("def solve():\n    return [1.5, 2.0]\n")
    assert result.valid and result.metrics == {"score": 3.5, "count": 2.0}
    assert result.feedback == "" and result.cascade is None


FEEDBACK_VALIDATOR = """
def validate(output):
    if output == "bad type":
        return {"score": 1.0}, 42
    if output == "long":
        return {"score": 1.0}, "x" * 10_000
    if output == "reject":
        raise ValueError("circles 3 and 7 overlap by 2e-09")
    return {"score": 2.0}, "  all fine, try the corners  "
"""


def test_validator_feedback_comes_back_bounded_and_its_errors_are_the_reason(
    tmp_path: Path,
) -> None:
    problem = write_problem(tmp_path / "fb", FEEDBACK_VALIDATOR)
    with SandboxEvaluator(problem, max_workers=1, memory_mb=512) as ev:
        ok, long, bad, reject = (
            ev.evaluate(f"def solve():\n    return {value!r}\n")
            for value in ("ok", "long", "bad type", "reject")
        )
    assert ok.valid and ok.feedback == "all fine, try the corners"
    assert long.valid and len(long.feedback) == MAX_FEEDBACK_CHARS
    assert not bad.valid and "feedback must be a str" in (bad.reason or "")
    assert not reject.valid and reject.reason == "validator: circles 3 and 7 overlap by 2e-09"


DATA_VALIDATOR = """
import os

def validate(output):
    here = os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(here, "data", "numbers.txt")) as f:
        expected = [float(x) for x in f.read().split()]
    if output["numbers"] != expected:
        raise ValueError("the program did not read the data file")
    return {"score": sum(expected), "write_refused": float(output["write_refused"])}
"""

DATA_READER = program(
    """
    import os

    def solve():
        path = os.path.join(os.environ["GIGAEVO_PROBLEM_DIR"], "data", "numbers.txt")
        with open(path) as f:
            numbers = [float(x) for x in f.read().split()]
        refused = 0
        for attempt in (lambda: open(path, "w"), lambda: open(path + ".new", "w"),
                        lambda: os.remove(path), lambda: os.chmod(path, 0o777)):
            try:
                attempt()
            except OSError:
                refused += 1
        return {"numbers": numbers, "write_refused": refused}
    """
)


def test_a_problem_ships_data_files_the_child_reads_but_cannot_change(tmp_path: Path) -> None:
    problem = write_problem(tmp_path / "data_problem", DATA_VALIDATOR)
    data = problem.directory / "data"
    data.mkdir()
    (data / "numbers.txt").write_text("1.5 2.5 4\n")
    before = sorted((p.name, p.read_bytes()) for p in data.iterdir())
    with SandboxEvaluator(problem, max_workers=1, memory_mb=512) as ev:
        result = ev.evaluate(DATA_READER)
    assert result.valid, result.reason
    assert result.metrics == {"score": 8.0, "write_refused": 4.0}
    assert sorted((p.name, p.read_bytes()) for p in data.iterdir()) == before


# Stage "cascade" is a quick check: the first stage's value is the program's
# own claim of quality; the full stage takes half a second.
CASCADE_PROGRAM = """
import time

# EVOLVE-BLOCK-START
QUALITY = {quality}
# EVOLVE-BLOCK-END

def quick():
    return [QUALITY]

def solve():
    time.sleep(0.5)
    return [QUALITY, 100.0]
"""

STAGE_VALIDATOR = """
def validate(output, context):
    return {"score": sum(output), "stage_full": float(context.stage == "full")}
"""


@pytest.fixture
def cascade_problem(tmp_path: Path) -> Problem:
    problem = write_problem(tmp_path / "cascade", STAGE_VALIDATOR, timeout_s=5.0)
    return replace(problem, cascade=CascadeSpec("quick", threshold=10.0, timeout_s=1.0))


def test_the_cascade_skips_the_full_evaluation_of_programs_that_fail_the_first_stage(
    cascade_problem: Problem,
) -> None:
    with SandboxEvaluator(cascade_problem, max_workers=1, memory_mb=512) as ev:
        weak = ev.evaluate(CASCADE_PROGRAM.format(quality=3.0))
        strong = ev.evaluate(CASCADE_PROGRAM.format(quality=12.0))
        crash = ev.evaluate(CASCADE_PROGRAM.format(quality="1 / 0"))
    assert not weak.valid and weak.cascade == "stopped"
    assert weak.reason is not None and weak.reason.startswith("cascade: score 3 ")
    assert "below the threshold 10" in weak.reason
    assert weak.run_seconds < 0.45  # the sleeping full stage never ran
    assert strong.valid and strong.cascade == "passed"
    assert strong.metrics == {"score": 112.0, "stage_full": 1.0}
    assert strong.run_seconds >= 0.5  # both children's time
    assert not crash.valid and crash.cascade == "stopped"
    assert crash.reason == "cascade: first stage failed: ZeroDivisionError: division by zero"


def test_the_cascade_threshold_follows_the_metric_direction(cascade_problem: Problem) -> None:
    metrics = replace(cascade_problem.metrics, higher_is_better=False)
    lower = replace(cascade_problem, metrics=metrics)
    with SandboxEvaluator(lower, max_workers=1, memory_mb=512) as ev:
        weak = ev.evaluate(CASCADE_PROGRAM.format(quality=12.0))
    assert weak.cascade == "stopped" and "above the threshold 10" in (weak.reason or "")
