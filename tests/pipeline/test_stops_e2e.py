"""Stops as a user meets them, through run.py: a sweep interrupted in job 0, a kill before the
store exists, a full disk, and where a run's folder is."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gigaevo.pipeline.build import STORE_FILE
from tests.conftest import ROOT, committed_count, program_ids, run_py

pytestmark = pytest.mark.slow


def _popen(*args: str, cwd: Path) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HYDRA_")}
    return subprocess.Popen(
        [sys.executable, str(ROOT / "run.py"), *args],
        cwd=cwd,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
    )


def _wait(condition: object, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not condition() and time.monotonic() < deadline:  # type: ignore[operator]
        time.sleep(0.02)


def _summary(ckpt: Path) -> dict[str, object]:
    return dict(json.loads((ckpt / "summary.json").read_text()))


def test_a_sweep_interrupted_in_job_0_resumes_with_the_same_command(tmp_path: Path) -> None:
    sweep = ["-m", "problem=rastrigin", "seed=0,1", "max_mutants=30", "progress=false"]
    proc = _popen(*sweep, cwd=tmp_path)
    job0 = lambda: next(iter((tmp_path / "multirun").glob(f"*/0/{STORE_FILE}")), None)  # noqa: E731
    _wait(lambda: job0() is not None and committed_count(job0()) >= 8)  # type: ignore[arg-type]
    os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C in job 0
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    (root,) = (tmp_path / "multirun").iterdir()
    assert not (root / "1").exists()
    done = program_ids(root / "0")
    assert 8 <= len(done) < 31

    code, _, err = run_py(*sweep, "resume=true", cwd=tmp_path)  # finishes 0, starts 1
    assert code == 0, err
    assert f"resuming sweep multirun/{root.name}" in err
    assert [p.name for p in (tmp_path / "multirun").iterdir()] == [root.name]
    for job in ("0", "1"):
        assert _summary(root / job)["n_mutants"] == 30 and _summary(root / job)["finished"]
    assert program_ids(root / "0")[: len(done)] == done
    events = {job: (root / job / "events.jsonl").read_bytes() for job in ("0", "1")}

    code, _, err = run_py(*sweep, "resume=true", cwd=tmp_path)  # both finished: skipped
    assert code == 0, err
    assert all((root / j / "events.jsonl").read_bytes() == events[j] for j in ("0", "1"))


def test_killed_before_the_store_exists_resumes_in_its_own_folder(tmp_path: Path) -> None:
    """kill -9 0.3 s after start; the explicit checkpoint_dir holds run.log and .hydra/."""
    ckpt = tmp_path / "ck"
    args = ("problem=rastrigin", "max_mutants=4", "progress=false", f"checkpoint_dir={ckpt}")
    proc = _popen(*args, cwd=tmp_path)
    time.sleep(0.3)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (ckpt / STORE_FILE).exists()
    code, _, err = run_py(*args, "resume=true", cwd=tmp_path)
    assert code == 0, err
    code, _, err = run_py(*args[:1], "max_mutants=6", *args[2:], "resume=true", cwd=tmp_path)
    assert code == 0, err
    assert _summary(ckpt)["n_mutants"] == 6
    assert (ckpt / ".hydra" / "config.yaml").exists()
    log = (ckpt / "run.log").read_text()
    assert log.count("best rastrigin_value") == 2 and "resumed: 4 mutants" in log
    assert not (tmp_path / "outputs").exists()  # no fresh outputs/... folder per session


def test_a_problem_dir_run_goes_to_outputs_under_its_own_name(tmp_path: Path) -> None:
    import shutil

    from gigaevo.problems import builtin_root

    prob = tmp_path / "mine"
    shutil.copytree(builtin_root() / "rastrigin", prob)
    spec = prob / "problem.yaml"
    spec.write_text(spec.read_text().replace("name: rastrigin", "name: my_rastrigin"))
    code, _, err = run_py(f"problem.dir={prob}", "max_mutants=1", "progress=false", cwd=tmp_path)
    assert code == 0, err
    (run,) = (tmp_path / "outputs" / "my_rastrigin").iterdir()
    assert {"run.log", ".hydra", "command.json", STORE_FILE} <= {p.name for p in run.iterdir()}


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 400 KiB tmpfs (root only); grown to 64 MiB by remounting it."""
    mnt = tmp_path / "disk"
    mnt.mkdir()
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=400k", "tmpfs", str(mnt)])
    if made.returncode != 0:
        pytest.skip("cannot mount a tmpfs here (needs root)")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_a_full_disk_exits_2_in_one_line_and_resumes_once_freed(
    tmp_path: Path, small_disk: Path
) -> None:
    ckpt = small_disk / "run"
    args = ("problem=rastrigin", "max_mutants=80", "progress=false", f"checkpoint_dir={ckpt}")
    code, out, err = run_py(*args, cwd=tmp_path)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 2 and len(lines) == 1, err
    assert lines[0].startswith(f"error: {ckpt}/") and "resume=true" in lines[0]
    assert "disk is full" in lines[0] or "No space left on device" in lines[0]
    assert "Traceback" not in out and "rollback" not in err
    before = program_ids(ckpt)  # the store opens and holds whole commits
    assert 0 < len(before) < 81
    subprocess.run(["mount", "-o", "remount,size=64m", str(small_disk)], check=True)
    code, _, err = run_py(*args, "resume=true", cwd=tmp_path)
    assert code == 0, err
    ids = program_ids(ckpt)
    assert ids[: len(before)] == before and len(ids) == 81 == len(set(ids))
    assert not list(ckpt.rglob("*.tmp"))
