"""load_problem: built-ins load; every broken directory fails with one line naming the culprit."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from gigaevo.problems import (
    MetricsSpec,
    Problem,
    ProblemError,
    builtin_problem_names,
    builtin_root,
    load_problem,
)

MakeProblem = Callable[..., Path]

MINIMAL_YAML = """\
name: tiny
entry_function: solve
timeout_s: 1.5
metrics:
  primary: score
  higher_is_better: true
  lower_bound: 0.0
  upper_bound: 1.0
  sentinel: 0.0
  extra: [size]
"""

MINIMAL_PROGRAM = """\
# EVOLVE-BLOCK-START
def guess():
    return 0.25
# EVOLVE-BLOCK-END


def solve():
    return guess()
"""

MINIMAL_VALIDATOR = """\
def validate(output):
    if not isinstance(output, float):
        raise ValueError("output must be a float")
    return {"score": output, "size": 1.0}
"""


@pytest.fixture
def make_problem(tmp_path: Path) -> Callable[..., Path]:
    """Factory writing a valid minimal problem into ``tmp_path / 'tiny'``.

    Keyword arguments override a file's text (``task_md``, ``problem_yaml``,
    ``initial_program``, ``validator``); ``None`` leaves the file out.
    """

    def make(**files: str | None) -> Path:
        root = tmp_path / "tiny"
        root.mkdir(exist_ok=True)
        texts = {
            "task.md": files.get("task_md", "Return a float in [0, 1]."),
            "problem.yaml": files.get("problem_yaml", MINIMAL_YAML),
            "initial_program.py": files.get("initial_program", MINIMAL_PROGRAM),
            "validator.py": files.get("validator", MINIMAL_VALIDATOR),
        }
        for name, text in texts.items():
            if text is None:
                (root / name).unlink(missing_ok=True)
            else:
                (root / name).write_text(text, encoding="utf-8")
        return root

    return make


def _error(**kwargs: object) -> str:
    with pytest.raises(ProblemError) as info:
        load_problem(**kwargs)  # type: ignore[arg-type]
    message = str(info.value)
    assert "\n" not in message, message
    return message


def test_builtin_names() -> None:
    assert builtin_problem_names() == ["bin_packing", "circle_packing", "heilbronn", "rastrigin"]


@pytest.mark.parametrize("name", builtin_problem_names())
def test_builtin_loads(name: str) -> None:
    problem = load_problem(name)
    assert isinstance(problem, Problem)
    assert problem.name == name
    assert problem.directory == builtin_root() / name
    assert problem.directory.is_absolute()
    assert problem.description.strip()
    assert problem.initial_programs
    assert problem.validator_path == problem.directory / "validator.py"
    assert isinstance(problem.metrics, MetricsSpec)
    assert problem.metrics.lower_bound < problem.metrics.upper_bound
    assert problem.timeout_s > 0
    assert problem.extra_metrics


def test_builtin_details() -> None:
    packing = load_problem("circle_packing")
    assert packing.entry_function == "run_packing"
    assert packing.metrics == MetricsSpec("sum_radii", True, 0.0, 2.636, 0.0, 2.635)
    assert packing.extra_metrics == ("min_radius", "radius_spread")
    heil = load_problem("heilbronn")
    assert heil.metrics.primary == "min_triangle_area"
    assert heil.metrics.best_known == 0.0365
    assert len(heil.initial_programs) == 2
    rast = load_problem("rastrigin")
    assert not rast.metrics.higher_is_better
    assert rast.metrics.sentinel == 250.0
    assert rast.extra_metrics == ("l2_norm",)


def test_directory_happy_path(make_problem: MakeProblem) -> None:
    root = make_problem()
    problem = load_problem(directory=str(root))
    assert problem.name == "tiny"
    assert problem.directory == root.resolve()
    assert problem.initial_programs == (MINIMAL_PROGRAM,)
    assert problem.timeout_s == 1.5
    assert problem.metrics.best_known is None
    assert problem.extra_metrics == ("size",)


def test_defaults_for_optional_keys(make_problem: MakeProblem) -> None:
    yaml_text = MINIMAL_YAML.replace("name: tiny\n", "").replace("timeout_s: 1.5\n", "")
    problem = load_problem(
        directory=make_problem(problem_yaml=yaml_text.replace("  extra: [size]\n", ""))
    )
    assert problem.name == "tiny"  # the directory name
    assert problem.timeout_s == 10.0
    assert problem.extra_metrics == ()


def test_initial_programs_directory_sorted(make_problem: MakeProblem) -> None:
    root = make_problem(initial_program=None)
    folder = root / "initial_programs"
    folder.mkdir()
    (folder / "b.py").write_text(MINIMAL_PROGRAM.replace("0.25", "0.5"))
    (folder / "a.py").write_text(MINIMAL_PROGRAM)
    (folder / "notes.txt").write_text("ignored")
    problem = load_problem(directory=root)
    assert problem.initial_programs == (MINIMAL_PROGRAM, MINIMAL_PROGRAM.replace("0.25", "0.5"))


# ------------------------------------------------------------------ failures


def test_exactly_one_argument() -> None:
    assert "exactly one" in _error()
    assert "exactly one" in _error(name="rastrigin", directory="/tmp")


def test_unknown_name() -> None:
    message = _error(name="foo")
    assert message == (
        "problem.name='foo' is not a built-in problem; "
        "choose one of: bin_packing, circle_packing, heilbronn, rastrigin"
    )


def test_missing_directory(tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    assert _error(directory=missing) == f"problem.dir={missing}: no such directory"


@pytest.mark.parametrize(
    ("argument", "filename"),
    [("task_md", "task.md"), ("problem_yaml", "problem.yaml"), ("validator", "validator.py")],
)
def test_missing_file(make_problem: MakeProblem, argument: str, filename: str) -> None:
    root = make_problem(**{argument: None})
    assert _error(directory=root) == f"{root.resolve() / filename}: no such file"


def test_empty_task(make_problem: MakeProblem) -> None:
    assert "task.md: is empty" in _error(directory=make_problem(task_md="  \n"))


def test_bad_yaml(make_problem: MakeProblem) -> None:
    root = make_problem(problem_yaml="metrics: [unclosed\n  x: {")
    message = _error(directory=root)
    assert message.startswith(f"{root.resolve() / 'problem.yaml'}: invalid YAML")


def test_yaml_not_a_mapping(make_problem: MakeProblem) -> None:
    assert "must be a YAML mapping" in _error(directory=make_problem(problem_yaml="- a\n- b\n"))


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        ("timeout_s: 1.5", "timeout: 1.5", "unknown key 'timeout'"),
        ("  sentinel: 0.0", "  sentinal: 0.0", "unknown key metrics.sentinal"),
        ("entry_function: solve\n", "", "entry_function is missing"),
        ("entry_function: solve", "entry_function: 3", "entry_function must be a non-empty string"),
        ("entry_function: solve", "entry_function: not-ok", "must be a Python identifier"),
        ("name: tiny", "name: [a]", "name must be a non-empty string"),
        ("timeout_s: 1.5", "timeout_s: fast", "timeout_s must be a number"),
        ("timeout_s: 1.5", "timeout_s: 0", "timeout_s must be positive"),
        ("  primary: score", "  primary: 7", "metrics.primary must be a non-empty string"),
        ("higher_is_better: true", "higher_is_better: yes please", "metrics.higher_is_better"),
        ("  lower_bound: 0.0\n", "", "metrics.lower_bound is missing"),
        ("lower_bound: 0.0", "lower_bound: zero", "metrics.lower_bound must be a number"),
        ("lower_bound: 0.0", "lower_bound: true", "metrics.lower_bound must be a number"),
        ("upper_bound: 1.0", "upper_bound: .inf", "metrics.upper_bound must be finite"),
        ("upper_bound: 1.0", "upper_bound: 0.0", "metrics.lower_bound (0.0) must be below"),
        ("upper_bound: 1.0", "upper_bound: -1", "metrics.lower_bound (0.0) must be below"),
        ("sentinel: 0.0", "sentinel: .nan", "metrics.sentinel must be finite"),
        ("sentinel: 0.0", "sentinel: -.inf", "metrics.sentinel must be finite"),
        ("sentinel: 0.0", "sentinel: 0.0\n  best_known: high", "metrics.best_known must be"),
        ("extra: [size]", "extra: size", "metrics.extra must be a list"),
        ("extra: [size]", "extra: [size, size]", "metrics.extra must not repeat"),
        ("extra: [size]", "extra: [score]", "metrics.extra must not repeat"),
    ],
)
def test_bad_key(make_problem: MakeProblem, old: str, new: str, expected: str) -> None:
    assert old in MINIMAL_YAML
    root = make_problem(problem_yaml=MINIMAL_YAML.replace(old, new))
    message = _error(directory=root)
    assert message.startswith(f"{root.resolve() / 'problem.yaml'}: "), message
    assert expected in message


def test_metrics_missing_or_not_mapping(make_problem: MakeProblem) -> None:
    head = MINIMAL_YAML.split("metrics:")[0]
    assert "metrics is missing" in _error(directory=make_problem(problem_yaml=head))
    bad = head + "metrics: 3\n"
    assert "metrics must be a mapping" in _error(directory=make_problem(problem_yaml=bad))


def test_no_initial_program(make_problem: MakeProblem) -> None:
    root = make_problem(initial_program=None)
    assert "no initial program" in _error(directory=root)
    (root / "initial_programs").mkdir()
    assert "contains no *.py" in _error(directory=root)


def test_both_initial_layouts(make_problem: MakeProblem) -> None:
    root = make_problem()
    (root / "initial_programs").mkdir()
    assert "has both initial_program.py and initial_programs/" in _error(directory=root)


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        (MINIMAL_PROGRAM.replace("# EVOLVE-BLOCK-START\n", ""), "found 0 and 1"),
        (MINIMAL_PROGRAM.replace("# EVOLVE-BLOCK-END\n", ""), "found 1 and 0"),
        (MINIMAL_PROGRAM + "# EVOLVE-BLOCK-END\n", "found 1 and 2"),
        (
            MINIMAL_PROGRAM.replace("# EVOLVE-BLOCK-START", "#TMP")
            .replace("# EVOLVE-BLOCK-END", "# EVOLVE-BLOCK-START")
            .replace("#TMP", "# EVOLVE-BLOCK-END"),
            "must come before",
        ),
        (MINIMAL_PROGRAM.replace("def solve", "def other"), "no top-level 'def solve'"),
        (MINIMAL_PROGRAM.replace("def solve():", "def solve(x):"), "callable with no arguments"),
        (MINIMAL_PROGRAM.replace("return guess()", "return guess("), "does not parse as Python"),
    ],
)
def test_bad_initial_program(make_problem: MakeProblem, source: str, expected: str) -> None:
    root = make_problem(initial_program=source)
    message = _error(directory=root)
    assert message.startswith(f"{root.resolve() / 'initial_program.py'}: "), message
    assert expected in message


def test_entry_with_defaults_is_fine(make_problem: MakeProblem) -> None:
    source = MINIMAL_PROGRAM.replace("def solve():", "def solve(scale=1.0, *, k=2):")
    assert load_problem(directory=make_problem(initial_program=source))


def test_nested_entry_does_not_count(make_problem: MakeProblem) -> None:
    source = MINIMAL_PROGRAM.replace(
        "def solve():\n    return guess()", "class Box:\n    def solve(self):\n        return 1.0"
    )
    assert "no top-level 'def solve'" in _error(directory=make_problem(initial_program=source))


def test_bad_program_in_folder_is_named(make_problem: MakeProblem) -> None:
    root = make_problem(initial_program=None)
    (root / "initial_programs").mkdir()
    (root / "initial_programs" / "a.py").write_text(MINIMAL_PROGRAM)
    bad = root / "initial_programs" / "b.py"
    bad.write_text("x = 1\n")
    assert _error(directory=root).startswith(f"{bad.resolve()}: ")


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("def check(output):\n    return {}\n", "no top-level 'def validate(output)'"),
        ("validate = lambda output: {}\n", "no top-level 'def validate(output)'"),
        ("def validate(output:\n", "does not parse as Python"),
    ],
)
def test_bad_validator(make_problem: MakeProblem, source: str, expected: str) -> None:
    root = make_problem(validator=source)
    message = _error(directory=root)
    assert message.startswith(f"{root.resolve() / 'validator.py'}: ")
    assert expected in message


def test_validator_is_not_imported(make_problem: MakeProblem, tmp_path: Path) -> None:
    marker = tmp_path / "imported"
    source = f"open({str(marker)!r}, 'w').close()\n\ndef validate(output):\n    return {{}}\n"
    load_problem(directory=make_problem(validator=source))
    assert not marker.exists()
