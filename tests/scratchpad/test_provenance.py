"""Findings and Decisions need [src:<source> @ <date>]; unvalidated notes go to Hypotheses/Open."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from gigaevo.scratchpad import (
    DECISIONS,
    FINDINGS,
    HYPOTHESES,
    OPEN,
    InvalidEntryError,
    MissingProvenanceError,
    Scratchpad,
)


@pytest.mark.parametrize("section", [FINDINGS, DECISIONS])
def test_entry_without_provenance_is_refused(pad: Scratchpad, pad_path: Path, section: str) -> None:
    pad.load()
    before = pad_path.read_bytes()
    with pytest.raises(MissingProvenanceError) as info:
        pad.upsert(section, "k", "an unsupported claim")
    message = str(info.value)
    assert section in message and "[src:<source> @ <YYYY-MM-DD>]" in message
    assert "Hypotheses or Open" in message
    assert pad_path.read_bytes() == before
    assert "k" not in pad.state


@pytest.mark.parametrize("section", [HYPOTHESES, OPEN])
def test_unvalidated_sections_take_entries_without_provenance(
    pad: Scratchpad, section: str
) -> None:
    pad.upsert(section, "k", "an unsupported claim")
    entry = pad.state.get("k")
    assert entry is not None and entry.section == section and entry.source is None


def test_provenance_is_written_with_source_and_date(pad: Scratchpad, pad_path: Path) -> None:
    pad.record_finding("speed", "200 mutants/s on rastrigin", source="bench:42")
    pad.record_decision("d", "keep 4 in flight", source="config", date=dt.date(2024, 2, 29))
    text = pad_path.read_text()
    assert "- [speed] 200 mutants/s on rastrigin [src:bench:42 @ 2025-11-30]\n" in text
    assert "- [d] keep 4 in flight [src:config @ 2024-02-29]\n" in text


@pytest.mark.parametrize(
    ("key", "text", "source"),
    [
        ("bad key", "x", "s"),
        ("", "x", "s"),
        ("k", "two\nlines", "s"),
        ("k", " padded", "s"),
        ("k", "x" * 401, "s"),
        ("k", "claim [src:a @ 2025-01-01]", "s"),
        ("k", "(resolved) x", "s"),
        ("k", "x", "a]b"),
        ("k", "x", "a@b"),
        ("k", "x", " "),
    ],
)
def test_malformed_entries_are_refused(
    pad: Scratchpad, pad_path: Path, key: str, text: str, source: str
) -> None:
    pad.load()
    before = pad_path.read_bytes()
    with pytest.raises(InvalidEntryError):
        pad.record_finding(key, text, source=source)
    assert pad_path.read_bytes() == before


def test_unknown_section_is_refused(pad: Scratchpad) -> None:
    with pytest.raises(InvalidEntryError, match="unknown section"):
        pad.upsert("Todo", "k", "x")


def test_section_names_are_case_insensitive(pad: Scratchpad) -> None:
    pad.upsert("findings", "k", "x", source="s")
    assert pad.state.section(FINDINGS)[0].key == "k"
