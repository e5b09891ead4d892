"""A sweep watched live: jobs appear, one is killed mid-run and resumed, the page keeps up."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select

from gigaevo.analysis import load_programs
from tests.dashboard.conftest import Dashboard, console_errors, start_run
from tests.dashboard.test_browser import PLOT, page_programs, wait_for

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
ARGS = ["problem=rastrigin", "memory=none", "pipeline=guided", "max_mutants=200", "progress=false"]


def _count(run_dir: Path) -> int:
    return len(load_programs(run_dir)) if (run_dir / "programs.sqlite3").exists() else 0


def test_a_sweep_killed_and_resumed_while_the_page_watches(browser: Any, tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("HYDRA_")}
    cmd = [sys.executable, str(ROOT / "run.py"), "-m", "seed=0,1", *ARGS]
    cmd += ["evaluator.max_workers=1", f"hydra.sweep.dir={sweep}"]
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL)
    server = Dashboard(str(sweep), "--poll", "0.2")  # started before any job exists
    try:
        browser.get(server.url)
        job1 = sweep / "1"
        wait_for(lambda: _count(job1) >= 20, timeout=240, what="job 1 running")
        os.kill(proc.pid, signal.SIGKILL)  # the sweep dies in the middle of job 1
        proc.wait()
        select = Select(browser.find_element(By.ID, "run-select"))
        wait_for(lambda: len(select.options) == 2, what="both jobs listed")
        assert not browser.find_element(By.ID, "sweep").get_attribute("hidden")
        rows = "#sweep-table tr[data-rid]"
        wait_for(lambda: len(browser.find_elements(By.CSS_SELECTOR, rows)) == 2, what="rows")
        select.select_by_visible_text("1")
        killed_at = _count(job1)
        wait_for(lambda: page_programs(browser) == killed_at, what="the killed job's programs")
        status = browser.find_element(By.ID, "status")
        wait_for(lambda: status.text == "interrupted", what="the killed job shown interrupted")
        resume = start_run(job1, *ARGS[1:], "seed=1", "resume=true", cwd=tmp_path)
        wait_for(lambda: page_programs(browser) > killed_at, timeout=120, what="resumed mutants")
        assert resume.wait(timeout=300) == 0
        n = _count(job1)
        wait_for(lambda: page_programs(browser) == n, what="every program of job 1")
        wait_for(lambda: browser.find_element(By.ID, "status").text == "stopped", what="stop")
        assert "resumed 1" in browser.find_element(By.ID, "status-detail").text
        valid = load_programs(job1).query("valid")
        assert browser.execute_script(f"return {PLOT}.data[0].x") == list(valid["mutant"])
        traces = "return document.getElementById('sweep-plot').data.length"
        wait_for(lambda: browser.execute_script(traces) == 2, what="two best-so-far curves")
        time.sleep(1.0)  # a few more polls of the finished runs
        assert console_errors(browser) == []
    finally:
        if proc.poll() is None:
            proc.kill()
        assert server.stop() == 0
    for job in (sweep / "0", job1):  # the dashboard's reads left no SQLite side files
        assert not [p.name for p in job.iterdir() if p.name.endswith(("-wal", "-shm"))]
