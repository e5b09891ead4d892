"""The notebooks run clean, headless, on runs made by the test (so they never rot)."""

from __future__ import annotations

import json
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


def _text(cells: list) -> str:
    """Everything the cells printed or displayed as text. A cell's standard output may come
    as several stream outputs split anywhere, even inside one ``print`` (the kernel flushes
    on a timer, so a loaded machine splits more): its chunks are joined as printed, and
    everything else goes on lines of its own."""
    parts = []
    for cell in cells:
        for out in cell.outputs:
            if out.get("output_type") == "stream" and out.get("name") == "stdout":
                parts.append(str(out.get("text", "")))
            else:
                text = str(out.get("text", "")) + str(out.get("data", {}).get("text/plain", ""))
                parts.append(f"\n{text}\n")
        parts.append("\n")
    return "".join(parts)


def _line(text: str, marker: str) -> str:
    return next(line for line in text.splitlines() if line.startswith(marker))


@pytest.mark.slow
def test_memory_notebook_on_a_memory_run_and_sweep(
    read_side_run: Path, memory_sweep_dir: Path
) -> None:
    env = {"GIGAEVO_RUN_DIR": str(read_side_run), "GIGAEVO_SWEEP_DIR": str(memory_sweep_dir)}
    cells = _execute("memory.ipynb", env)
    assert not [o for c in cells for o in c.outputs if o.output_type == "error"]
    # bank, evidence, decisions, usage, effects, arms
    assert _images(cells) >= 6
    text = _text(cells)
    ope = json.loads((read_side_run / "ope_summary.json").read_text())
    stats = json.loads((read_side_run / "memory_stats.json").read_text())["decide"]
    decisions = _line(text, "MEMORY-DECISIONS:")
    assert f"'decisions': {stats['decisions']}" in decisions
    assert f"'offered': {stats['offered']}" in decisions
    assert f"'withheld': {stats['withheld']}" in decisions
    usage = _line(text, "CARD-USAGE:").split()
    assert int(usage[1]) == stats["offered"] + stats["withheld"] > 0
    assert int(_line(text, "POSTERIOR-EFFECTS:").split()[1]) >= 1
    assert _line(text, "OPE-SUMMARY:").startswith(f"OPE-SUMMARY: ITT DR {ope['dr']} [")
    assert _line(text, "RETIREMENTS:") == "RETIREMENTS: none (no card was retired in this run)"
    audit = json.loads((read_side_run / "memory_stats.json").read_text())["duplicate_audit"]
    rate = audit["residual_duplicate_rate"]
    assert _line(text, "RESIDUAL-DUPLICATES:").startswith(f"RESIDUAL-DUPLICATES: {rate:.3f}")
    assert "ci_low" in text  # the arms table
    assert "PAIRED DIFFERENCE (v2 - none, by seed):" in text
    assert "memory.itt_dr" in text  # the read side per v2 job
