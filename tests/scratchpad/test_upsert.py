"""Typed upserts by key: idempotent, last one wins, atomic, and only the changed entry moves."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gigaevo.scratchpad import DECISIONS, FINDINGS, HYPOTHESES, OPEN, Scratchpad
from tests.scratchpad.conftest import new_session


def _fill(pad: Scratchpad) -> None:
    pad.add_hypothesis("h1", "loops may matter")
    pad.record_decision("d1", "four attempts in flight", source="config")
    pad.record_finding("f1", "first finding", source="p1")
    pad.record_finding("f2", "second finding", source="p2")
    pad.open_question("q1", "is the cache warm?")


def test_same_upsert_twice_gives_identical_bytes(pad: Scratchpad, pad_path: Path) -> None:
    _fill(pad)
    pad.record_finding("f3", "third", source="p3")
    first = pad_path.read_bytes()
    stat = pad_path.stat()
    result = pad.record_finding("f3", "third", source="p3")
    assert not result.changed
    assert pad_path.read_bytes() == first
    assert (pad_path.stat().st_ino, pad_path.stat().st_mtime_ns) == (stat.st_ino, stat.st_mtime_ns)


def test_unchanged_claim_keeps_its_first_date(pad_path: Path) -> None:
    import datetime as dt

    day1 = Scratchpad(pad_path, today=lambda: dt.date(2025, 1, 1))
    day1.record_decision("d", "keep it", source="config")
    before = pad_path.read_bytes()
    day2 = Scratchpad(pad_path, today=lambda: dt.date(2025, 6, 1))
    day2.record_decision("d", "keep it", source="config")
    assert pad_path.read_bytes() == before


def test_last_upsert_per_key_wins(pad: Scratchpad, pad_path: Path) -> None:
    for i in range(5):
        pad.upsert(HYPOTHESES, "h", f"version {i}")
    text = pad_path.read_text()
    assert text.count("[h]") == 1 and "version 4" in text
    assert new_session(pad_path).load().get("h").text == "version 4"  # type: ignore[union-attr]


def test_prefix_bytes_unchanged_after_upsert_of_a_later_entry(
    pad: Scratchpad, pad_path: Path
) -> None:
    _fill(pad)
    before = pad_path.read_bytes()
    cut = before.index(b"- [f2]")
    pad.record_finding("f2", "second finding, refined", source="p2", record_change=False)
    after = pad_path.read_bytes()
    assert after[:cut] == before[:cut]
    assert after != before
    # appending a new Open item keeps every earlier byte
    pad.open_question("q2", "another question")
    assert pad_path.read_bytes().startswith(after[: after.index(b"\n", after.index(b"[q1]")) + 1])


def test_only_the_changed_entry_differs(pad: Scratchpad, pad_path: Path) -> None:
    _fill(pad)
    before = pad_path.read_text().splitlines()
    pad.add_hypothesis("h1", "loops matter a lot")
    after = pad_path.read_text().splitlines()
    changed = [(a, b) for a, b in zip(before, after, strict=True) if a != b]
    assert changed == [("- [h1] loops may matter", "- [h1] loops matter a lot")]


def test_new_entries_go_to_the_end_of_their_section(pad: Scratchpad, pad_path: Path) -> None:
    _fill(pad)
    pad.record_decision("d2", "second decision", source="config")
    lines = pad_path.read_text().splitlines()
    assert lines.index("- [d2] second decision [src:config @ 2025-11-30]") == (
        lines.index("- [d1] four attempts in flight [src:config @ 2025-11-30]") + 1
    )


def test_a_key_moves_between_sections(pad: Scratchpad) -> None:
    pad.add_hypothesis("card.x", "card x may help")
    pad.record_finding("card.x", "card x helps", source="ledger:17")
    state = pad.state
    assert [e.section for e in state if e.key == "card.x"] == [FINDINGS]
    assert state.section(HYPOTHESES) == ()
    assert state.section(DECISIONS) == ()  # a promotion is not a contradiction


def test_every_section_round_trips_through_a_new_session(pad: Scratchpad, pad_path: Path) -> None:
    _fill(pad)
    state = new_session(pad_path).load()
    assert [(e.section, e.key) for e in state] == [
        (HYPOTHESES, "h1"),
        (DECISIONS, "d1"),
        (FINDINGS, "f1"),
        (FINDINGS, "f2"),
        (OPEN, "q1"),
    ]
    assert state == pad.state


def test_failed_replace_leaves_the_old_file_and_no_temp(
    pad: Scratchpad, pad_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fill(pad)
    before = pad_path.read_bytes()

    def broken(src: str, dst: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", broken)
    with pytest.raises(OSError):
        pad.record_finding("f9", "never lands", source="x")
    assert pad_path.read_bytes() == before
    assert [p.name for p in pad_path.parent.iterdir() if p.name.endswith(".tmp")] == []


def test_write_is_atomic_temp_fsync_replace_dirsync(
    pad: Scratchpad, pad_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pad.load()
    calls: list[str] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        calls.append("fsync")
        real_fsync(fd)

    def replace(src: str, dst: str) -> None:
        calls.append(f"replace {Path(src).name.startswith('.scratchpad.md.')}")
        real_replace(src, dst)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    pad.record_finding("f", "x", source="s")
    assert calls == ["fsync", "replace True", "fsync"]


def test_creating_the_skeleton_skips_the_directory_fsync(
    pad: Scratchpad, pad_path: Path, fsync_log: list[str]
) -> None:
    """A power loss that undoes the creation leaves no file, which the next load creates
    again; the file itself is still fsynced before the rename (never blank)."""
    assert not pad_path.exists()
    pad.load()
    assert pad.created and pad_path.exists() and fsync_log == ["file"]
