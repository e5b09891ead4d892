"""A corrupt or schema-broken file stops loudly (file and line named) and is never written."""

from __future__ import annotations

from pathlib import Path

import pytest

from gigaevo.scratchpad import SKELETON, CorruptScratchpadError, Scratchpad
from tests.scratchpad.conftest import new_session

GOOD = SKELETON.replace("## Findings\n", "## Findings\n- [f1] fine [src:x @ 2025-11-30]\n")

CASES = {
    "unknown section": (GOOD.replace("## Open", "## Todo"), 11, "unknown section '## Todo'"),
    "missing section": (GOOD.replace("\n## Hypotheses\n", "\n"), 0, "missing section"),
    "section twice": (GOOD + "\n## Open\n", 13, "appears twice"),
    "out of order": (
        SKELETON.replace("## Decisions", "## T")
        .replace("## Findings", "## Decisions")
        .replace("## T", "## Findings"),
        8,
        "out of order",
    ),
    "text before sections": (GOOD.replace("# Scratchpad\n", "# Scratchpad\nhello\n"), 2, "before"),
    "free text in a section": (GOOD.replace("## Open\n", "## Open\nsome notes\n"), 12, "not an"),
    "key twice": (
        GOOD.replace("## Open\n", "## Open\n- [f1] again\n"),
        12,
        "key 'f1' appears twice",
    ),
    "finding without provenance": (
        GOOD.replace("[src:x @ 2025-11-30]", ""),
        9,
        "has no provenance",
    ),
    "bad date": (GOOD.replace("2025-11-30", "2025-13-40"), 9, "malformed provenance"),
    "status not allowed": (
        GOOD.replace("## Decisions\n", "## Decisions\n- [d] (resolved) x [src:c @ 2025-11-30]\n"),
        7,
        "not allowed in Decisions",
    ),
    "crlf": (GOOD.replace("\n", "\r\n"), 1, "carriage return"),
    "nul byte": (GOOD.replace("fine", "fi\x00ne"), 9, "NUL"),
}


def _write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


@pytest.mark.parametrize("case", sorted(CASES))
def test_corrupt_file_fails_loudly_and_is_left_untouched(pad_path: Path, case: str) -> None:
    text, line, fragment = CASES[case]
    data = text.encode("utf-8")
    _write(pad_path, data)
    stamp = pad_path.stat().st_mtime_ns
    with pytest.raises(CorruptScratchpadError) as info:
        new_session(pad_path).load()
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"{pad_path}:{line}: " if line else f"{pad_path}: ")
    assert fragment in message
    assert info.value.line == line
    with pytest.raises(CorruptScratchpadError):
        new_session(pad_path).add_hypothesis("h", "never written")
    assert pad_path.read_bytes() == data
    assert pad_path.stat().st_mtime_ns == stamp
    assert [p.name for p in pad_path.parent.iterdir() if p.suffix == ".tmp"] == []


def test_non_utf8_bytes_name_the_line(pad_path: Path) -> None:
    data = GOOD.encode().replace(b"fine", b"fi\xffne")
    _write(pad_path, data)
    with pytest.raises(CorruptScratchpadError, match=r":9: not UTF-8"):
        new_session(pad_path).load()
    assert pad_path.read_bytes() == data


def test_a_good_file_with_comments_and_blank_lines_parses(pad_path: Path) -> None:
    text = GOOD.replace("## Open\n", "## Open\n<!-- nothing yet -->\n\n")
    _write(pad_path, text.encode())
    state = new_session(pad_path).load()
    assert [e.key for e in state] == ["f1"]


def test_corrupted_between_sessions_is_caught_before_any_write(
    pad: Scratchpad, pad_path: Path
) -> None:
    pad.record_finding("f", "x", source="s")
    pad_path.write_text(pad_path.read_text().replace("## Open", "## Later"))
    data = pad_path.read_bytes()
    with pytest.raises(CorruptScratchpadError):
        pad.record_finding("g", "y", source="s")
    assert pad_path.read_bytes() == data
