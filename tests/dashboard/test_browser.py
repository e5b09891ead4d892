"""The dashboard in a real headless Chromium, against a run that is being written.

One real run (rastrigin, memory=v2) and one dashboard process are shared by the
tests of this module; the run is resumed while the page is open, so the page
watches a run in progress. Slow: the run, the browser and the server take
about 20 s to set up on 2 cores.
"""

from __future__ import annotations

import difflib
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By

from gigaevo.analysis import load_programs, load_run
from tests.dashboard.conftest import Dashboard, console_errors, start_run

pytestmark = pytest.mark.slow

PLOT = "document.getElementById('fitness-plot')"


def wait_for(check: Callable[[], Any], timeout: float = 30, what: str = "") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what or check}")
        time.sleep(0.2)


def page_programs(web: Any) -> int:
    return int(web.execute_script("return Number(document.body.dataset.programs || 0)"))


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dashboard") / "run"
    proc = start_run(out, "max_mutants=16", "memory=v2")
    assert proc.wait(timeout=300) == 0, proc.stderr.read() if proc.stderr else ""
    return out


@pytest.fixture(scope="module")
def dashboard(run_dir: Path) -> Iterator[Dashboard]:
    server = Dashboard(str(run_dir), "--poll", "0.2")
    yield server
    assert server.stop() == 0


@pytest.fixture(scope="module")
def page(browser: Any, dashboard: Dashboard, run_dir: Path) -> Any:
    browser.get(dashboard.url)
    n = len(load_programs(run_dir))
    wait_for(lambda: page_programs(browser) == n, what=f"{n} programs on the page")
    return browser


def test_page_loads_without_errors_and_plots_every_program(page: Any, run_dir: Path) -> None:
    assert console_errors(page) == []
    programs = load_programs(run_dir)
    valid = programs[programs["valid"]]
    xs = page.execute_script(f"return {PLOT}.data[0].x")
    ys = page.execute_script(f"return {PLOT}.data[0].y")
    assert xs == list(valid["mutant"])
    assert ys == pytest.approx(list(valid["fitness"]))
    others = page.execute_script(f"return {PLOT}.data[2].x.length")
    assert others == len(programs) - len(valid)
    best = page.execute_script(f"return {PLOT}.data[1].y")
    assert best[-1] == pytest.approx(load_run(run_dir).best_so_far()["best"].iloc[-1])
    assert page.find_element(By.ID, "status").text == "stopped"
    assert not page.find_element(By.ID, "memory").get_attribute("hidden")  # memory=v2 panels
    assert page.find_element(By.ID, "memory-table").text.count("decisions:") == 3


def test_new_mutants_appear_without_a_reload(page: Any, run_dir: Path) -> None:
    page.execute_script("window.__sameDocument = true")
    before = page_programs(page)
    proc = start_run(run_dir, "max_mutants=30", "memory=v2", "resume=true")
    try:
        wait_for(lambda: page_programs(page) > before, timeout=60, what="a new mutant")
        assert page.execute_script("return window.__sameDocument === true")  # not reloaded
        assert proc.wait(timeout=300) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    n = len(load_programs(run_dir))
    wait_for(lambda: page_programs(page) == n, what="every program of the resumed run")
    wait_for(lambda: "resumed 1" in page.find_element(By.ID, "status-detail").text, what="resume")
    valid = load_programs(run_dir).query("valid")
    assert page.execute_script(f"return {PLOT}.data[0].x") == list(valid["mutant"])
    assert page.execute_script("return window.__sameDocument === true")
    assert console_errors(page) == []


def test_clicking_a_point_shows_the_programs_code_and_diff(page: Any, run_dir: Path) -> None:
    programs = load_programs(run_dir).set_index("id")
    labels = page.execute_script(f"return {PLOT}.data[0].text")
    ids = [label.split(" ")[0] for label in labels]
    # the latest valid mutant whose code differs from its parent's
    k = next(
        i
        for i in range(len(ids) - 1, -1, -1)
        if programs.at[ids[i], "status"] != "initial"
        and programs.at[ids[i], "code"] != programs.at[programs.at[ids[i], "parent_id"], "code"]
    )
    pid = ids[k]
    points = page.find_elements(By.CSS_SELECTOR, "#fitness-plot .scatterlayer .trace")[0]
    point = points.find_elements(By.CSS_SELECTOR, "path.point")[k]
    ActionChains(page).move_to_element(point).click().perform()
    wait_for(lambda: pid in page.find_element(By.ID, "program-title").text, what=f"program {pid}")
    code = page.execute_script("return document.getElementById('program-code').textContent")
    assert code == programs.at[pid, "code"]
    parent = programs.at[pid, "parent_id"]
    expected = difflib.unified_diff(
        programs.at[parent, "code"].splitlines(keepends=True),
        programs.at[pid, "code"].splitlines(keepends=True),
        fromfile=f"parent {parent}",
        tofile="this program",
    )
    diff = page.execute_script("return document.getElementById('program-diff').textContent")
    assert diff.rstrip("\n") == "".join(expected).rstrip("\n")
    added = page.find_elements(By.CSS_SELECTOR, "#program-diff .diff-add")
    assert added and all(a.text.startswith("+") for a in added)
    report = page.find_element(By.ID, "program-report").text
    assert report == programs.at[pid, "mutation.change_report"].strip()
    assert page.execute_script("return document.getElementById('lineage-plot').data.length") == 3
    assert console_errors(page) == []
