"""Bootstrap: a missing file becomes the skeleton; the file is read once per session."""

from __future__ import annotations

from pathlib import Path

import pytest

import gigaevo.scratchpad.pad as pad_module
from gigaevo.scratchpad import (
    SECTIONS,
    SKELETON,
    CorruptScratchpadError,
    Scratchpad,
    ScratchpadRereadWarning,
)
from tests.scratchpad.conftest import new_session


def test_missing_file_is_an_empty_state_and_gets_the_skeleton(
    pad: Scratchpad, pad_path: Path
) -> None:
    assert not pad_path.exists()
    state = pad.load()
    assert len(state) == 0
    assert pad_path.read_text() == SKELETON
    assert pad.created
    for name in SECTIONS:
        assert f"\n## {name}\n" in SKELETON


def test_zero_byte_file_is_corrupt_and_left_untouched(pad: Scratchpad, pad_path: Path) -> None:
    """Every scratchpad has its headings: zero bytes means the notes were lost, not absent."""
    pad_path.parent.mkdir(parents=True)
    pad_path.write_bytes(b"")
    with pytest.raises(CorruptScratchpadError, match="zero bytes"):
        pad.load()
    with pytest.raises(CorruptScratchpadError, match="zero bytes"):
        pad.record_finding("f", "a claim", source="s")
    assert pad_path.read_bytes() == b""


def test_unreadable_file_is_corrupt(pad: Scratchpad, pad_path: Path) -> None:
    pad_path.mkdir(parents=True)  # a directory where the file should be
    with pytest.raises(CorruptScratchpadError, match="unreadable"):
        pad.load()


def test_existing_file_is_not_rewritten_by_a_read(pad: Scratchpad, pad_path: Path) -> None:
    pad.record_finding("f", "a claim", source="s")
    before = pad_path.stat()
    state = new_session(pad_path).load()
    assert state.get("f") is not None and state.get("f").text == "a claim"  # type: ignore[union-attr]
    after = pad_path.stat()
    assert (before.st_ino, before.st_mtime_ns) == (after.st_ino, after.st_mtime_ns)


def test_second_read_warns_counts_and_returns_the_cache(pad: Scratchpad) -> None:
    first = pad.load()
    assert pad.reads == 1
    with pytest.warns(ScratchpadRereadWarning, match="read 2 times"):
        second = pad.load()
    assert second is first
    assert pad.reads == 2


def test_state_references_the_cache_without_touching_disk(
    pad: Scratchpad, monkeypatch: pytest.MonkeyPatch
) -> None:
    pad.load()
    disk_reads = []
    real = pad_module.read_text
    monkeypatch.setattr(pad_module, "read_text", lambda p: disk_reads.append(p) or real(p))
    for _ in range(5):
        assert len(pad.state) == 0
    assert disk_reads == [] and pad.reads == 1


def test_state_loads_on_first_use_once(pad_path: Path) -> None:
    session = new_session(pad_path)
    first, second = session.state, session.state
    assert first is second and session.reads == 1


def test_write_refreshes_the_cache_from_the_result(pad: Scratchpad) -> None:
    pad.load()
    result = pad.add_hypothesis("h", "maybe")
    assert pad.state is result.state
    assert pad.state.get("h") is not None
    assert pad.reads == 1  # the write's own read under the lock is not a session read
