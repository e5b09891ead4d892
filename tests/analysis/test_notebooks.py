"""The notebooks run clean, headless, on runs made by the test (so they never rot)."""

from __future__ import annotations

import os
from pathlib import Path

import nbclient
import nbformat
import pytest

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"


def _execute(name: str, env: dict[str, str]) -> list:
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)  # the kernel inherits the environment of this process
    try:
        client = nbclient.NotebookClient(
            nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": NOTEBOOKS}}
        )
        client.execute()
    finally:
        for key, value in old.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    return [c for c in nb.cells if c.cell_type == "code"]


def _images(cells: list) -> int:
    return sum("image/png" in out.get("data", {}) for c in cells for out in c.outputs)


@pytest.mark.slow
def test_run_notebook_on_a_plain_run(plain_run: Path) -> None:
    cells = _execute("run.ipynb", {"GIGAEVO_RUN_DIR": str(plain_run)})
    assert not [o for c in cells for o in c.outputs if o.output_type == "error"]
    assert _images(cells) >= 4  # fitness, archive, lineage, invalid reasons


@pytest.mark.slow
def test_run_notebook_on_a_memory_run(memory_run: Path) -> None:
    cells = _execute("run.ipynb", {"GIGAEVO_RUN_DIR": str(memory_run)})
    assert _images(cells) >= 5  # and the card bank


@pytest.mark.slow
def test_memory_notebook_on_a_memory_run_and_sweep(
    memory_run: Path, memory_sweep_dir: Path
) -> None:
    env = {"GIGAEVO_RUN_DIR": str(memory_run), "GIGAEVO_SWEEP_DIR": str(memory_sweep_dir)}
    cells = _execute("memory.ipynb", env)
    assert _images(cells) >= 3  # the bank, the evidence, the arms
    text = "".join(
        str(out.get("data", {}).get("text/plain", "")) for c in cells for out in c.outputs
    )
    assert "ci_low" in text  # the arms table
