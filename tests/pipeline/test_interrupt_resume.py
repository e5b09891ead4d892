"""Ctrl-C, then resume: the history of memory=v2 is the uninterrupted run's (issue 13).

Ctrl-C used to close the memory as at the end of a run (the librarian's last drain,
the duplicate audit, a retirement sweep, every lease released); the resumed run then
decided on another bank and other leases. ``CardBankMemory.suspend`` now leaves them as
a kill -9 would, and a kill -9 resumes exactly (tests/memory/test_reader_crash_resume.py).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT, program_ids, run_py
from tests.memory.test_reader_crash_resume import ARGS, _edges, _ledger_view


def _cards(ckpt: Path) -> list[tuple[str, int]]:
    bank = json.loads((ckpt / "cards.json").read_text())
    return sorted((c["id"], c["revision"]) for c in bank["cards"])


@pytest.mark.slow
@pytest.mark.parametrize("cadence", ["live", "end_of_run"])
def test_ctrl_c_then_resume_matches_the_uninterrupted_memory_v2_run(
    tmp_path: Path, cadence: str
) -> None:
    # end_of_run: the librarian writes every card at the run's close; a Ctrl-C that
    # closed the memory wrote them mid-run, and the resumed run offered them
    args = [*ARGS, f"memory/write={cadence}"]
    ckpt = tmp_path / "interrupted"
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "run.py"), *args, f"checkpoint_dir={ckpt}"],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 180
    while _edges(ckpt) < 27 and time.monotonic() < deadline:
        time.sleep(0.005)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    summary = json.loads((ckpt / "summary.json").read_text())
    assert 27 <= summary["n_mutants"] < 60, "the run should have been stopped mid-way"

    code, _, err = run_py(*args, f"checkpoint_dir={ckpt}", "resume=true", cwd=tmp_path)
    assert code == 0, err
    code, _, err = run_py(*args, f"checkpoint_dir={tmp_path / 'whole'}", cwd=tmp_path)
    assert code == 0, err

    assert program_ids(ckpt) == program_ids(tmp_path / "whole")
    interrupted, whole = _ledger_view(ckpt), _ledger_view(tmp_path / "whole")
    assert [d[0] for d in interrupted["decisions"]] == list(range(60))
    assert interrupted == whole
    assert _cards(ckpt) == _cards(tmp_path / "whole") and _cards(ckpt)
