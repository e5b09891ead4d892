"""``.librarian_state.json``: written when the librarian's state changed, and not for a new
run whose state never left the fresh one (an offline start-up writes none)."""

from __future__ import annotations

import json
from pathlib import Path

from gigaevo.memory.v2.write.resume import STATE_FILE, LibrarianState
from tests.memory.helpers import librarian


def test_a_new_run_writes_its_state_only_once_it_changes(tmp_path: Path) -> None:
    lib = librarian(tmp_path / "bank", tmp_path / "write_ledger.jsonl")
    fresh = lib.state()
    state = LibrarianState(tmp_path, "run-test")
    state.load(lib)
    state.save(lib)
    assert not (tmp_path / STATE_FILE).exists()  # restoring from no file gives ``fresh``

    lib.restore({"best": 2.5, "queue": []}, "test")
    state.save(lib)
    saved = json.loads((tmp_path / STATE_FILE).read_text())
    assert saved["best"] == 2.5 and saved["run_id"] == "run-test"

    # the next session of the run takes it over; one of a new run starts fresh
    again = librarian(tmp_path / "bank", tmp_path / "write_ledger.jsonl")
    LibrarianState(tmp_path, "run-test").load(again)
    assert again.state() == lib.state() != fresh
    other = librarian(tmp_path / "bank", tmp_path / "write_ledger.jsonl")
    LibrarianState(tmp_path, "run-other").load(other)
    assert other.state() == fresh
