"""Bad input stops run.py before any work: one line naming the culprit, exit code 2."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import run_py


def _one_error_line(stderr: str) -> str:
    lines = [ln for ln in stderr.strip().splitlines() if ln.strip()]
    assert lines, "no error message"
    assert lines[-1].startswith("error: "), stderr
    return lines[-1]


def test_unknown_problem_name(tmp_path: Path) -> None:
    code, _, err = run_py("problem.name=no_such_problem", cwd=tmp_path)
    assert code == 2
    line = _one_error_line(err)
    assert "problem.name" in line and "no_such_problem" in line
    assert not (tmp_path / "outputs").exists() or not list(
        (tmp_path / "outputs").rglob("programs.sqlite3")
    )


def test_negative_budget(tmp_path: Path) -> None:
    code, _, err = run_py("problem=rastrigin", "max_mutants=-5", cwd=tmp_path)
    assert code == 2
    assert "max_mutants" in _one_error_line(err)


def test_missing_problem_directory(tmp_path: Path) -> None:
    code, _, err = run_py(f"problem.dir={tmp_path / 'nowhere'}", cwd=tmp_path)
    assert code == 2
    line = _one_error_line(err)
    assert "problem.dir" in line and "nowhere" in line


def _copy_builtin(tmp_path: Path, name: str) -> Path:
    import shutil

    from gigaevo.problems import builtin_root

    dst = tmp_path / "myproblem"
    shutil.copytree(builtin_root() / name, dst)
    return dst


def test_broken_user_problem_dir_missing_validator(tmp_path: Path) -> None:
    prob = _copy_builtin(tmp_path, "rastrigin")
    (prob / "validator.py").unlink()
    code, _, err = run_py(f"problem.dir={prob}", cwd=tmp_path)
    assert code == 2
    assert "validator.py" in _one_error_line(err)


def test_initial_program_that_does_not_run(tmp_path: Path) -> None:
    prob = _copy_builtin(tmp_path, "rastrigin")
    init = prob / "initial_program.py"
    init.write_text(init.read_text().replace("# EVOLVE-BLOCK-END", "1 / 0\n# EVOLVE-BLOCK-END"))
    ckpt = tmp_path / "ck"
    code, _, err = run_py(f"problem.dir={prob}", f"checkpoint_dir={ckpt}", cwd=tmp_path)
    assert code == 2
    line = _one_error_line(err)
    assert "initial program" in line and "ZeroDivisionError" in line
    assert not ckpt.exists()  # a rejected start leaves no run folder


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        ("max_mutant=5", "max_mutant is not a key of the config (did you mean max_mutants?)"),
        ("evaluator.timeout_s=abc", "evaluator.timeout_s must be a number or null, got 'abc'"),
        ("evaluator.memory_mb=-1", "evaluator.memory_mb must be positive, got -1"),
        ("+llm.foo=1", "llm.foo is not an option of OfflineMutatorLLM"),
        ("evolution.stop.plateau_patience=abc", "evolution.stop.plateau_patience must be"),
        ("evolution.feedback.max_reason_chars=5", "evolution.feedback"),
    ],
)
def test_bad_value_exits_2_naming_the_key_and_leaves_no_folder(
    tmp_path: Path, override: str, expected: str
) -> None:
    """Hydra's own errors and the components' alike; no .hydra/, command.json or run.log."""
    code, out, err = run_py("problem=rastrigin", override, "max_mutants=2", cwd=tmp_path)
    assert code == 2
    assert expected in _one_error_line(err)
    assert len([ln for ln in err.splitlines() if ln.strip()]) == 1, err
    assert "Traceback" not in out + err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("value", ["abc", "1.5"])
def test_ill_typed_seed(tmp_path: Path, value: str) -> None:
    code, _, err = run_py("problem=rastrigin", f"seed={value}", cwd=tmp_path)
    assert code == 2
    assert "seed" in _one_error_line(err)


def test_existing_run_is_not_overwritten(tmp_path: Path) -> None:
    ckpt = tmp_path / "ck"
    args = ("problem=rastrigin", "max_mutants=3", f"checkpoint_dir={ckpt}", "progress=false")
    assert run_py(*args, cwd=tmp_path)[0] == 0
    before = (ckpt / "programs.sqlite3").read_bytes()
    code, _, err = run_py(*args, cwd=tmp_path)
    assert code == 2
    assert "resume=true" in _one_error_line(err)
    assert (ckpt / "programs.sqlite3").read_bytes() == before


def test_resume_without_earlier_run(tmp_path: Path) -> None:
    code, _, err = run_py("problem=rastrigin", "resume=true", cwd=tmp_path)
    assert code == 2
    assert "resume=true" in _one_error_line(err)


def test_a_refused_sweep_leaves_no_folder(tmp_path: Path) -> None:
    """Hydra saves multirun.yaml before it checks the swept values; the folder goes again."""
    code, _, err = run_py("-m", "problem=rastrigin", "max_mutant=1,2", cwd=tmp_path)
    assert code == 2
    assert "(did you mean max_mutants?)" in _one_error_line(err)
    assert list(tmp_path.iterdir()) == []


def test_hydra_errors_name_the_key_with_the_closest_one() -> None:
    """In-process: each Hydra composition error of a mistyped command line, as one line."""
    from hydra import compose, initialize_config_dir

    from gigaevo.pipeline.hydra_errors import hydra_error_line
    from tests.conftest import CONFIG_DIR

    expected = {
        "llm=ofline": "llm=ofline: no such option (did you mean offline?); choose one of: ",
        "evolution.max_inflight=3": "evolution.max_inflight is not a key of the config "
        "(did you mean evolution.max_in_flight?)",
        "memory.causal.ofer_probability=0.5": "(did you mean memory.causal.offer_probability?)",
        "seed=[": "seed=[: not a valid override",
        "+seed=3": "An item is already at 'seed'",
    }
    for override, line in expected.items():
        with (
            initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"),
            pytest.raises(Exception) as info,
        ):
            compose("config", overrides=[override])
        got = hydra_error_line(info.value, CONFIG_DIR, [override])
        assert got is not None and line in got and "\n" not in got, (override, got)
    assert hydra_error_line(RuntimeError("a bug"), CONFIG_DIR, []) is None


def test_help_and_cfg_job(tmp_path: Path) -> None:
    code, out, _ = run_py("--help", cwd=tmp_path)
    assert code == 0 and "problem" in out and "memory" in out
    code, out, _ = run_py("--cfg", "job", cwd=tmp_path)
    assert code == 0 and "max_mutants: 300" in out
