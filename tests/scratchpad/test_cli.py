"""``python -m gigaevo.scratchpad``: show, upsert, resolve, obsolete, prune, check; exit codes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gigaevo.scratchpad import SKELETON
from gigaevo.scratchpad.cli import main
from tests.conftest import ROOT


def _cli(capsys: pytest.CaptureFixture[str], path: Path, *args: str) -> tuple[int, str, str]:
    code = main(["--file", str(path), *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_upsert_show_resolve_prune(pad_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _cli(capsys, pad_path, "upsert", "findings", "f1", "a claim", "--source", "s1")
    assert code == 0 and out.strip() == "added f1 to Findings"
    code, out, _ = _cli(capsys, pad_path, "upsert", "findings", "f1", "a claim", "--source", "s1")
    assert code == 0 and out.strip() == "unchanged: f1"
    _cli(capsys, pad_path, "upsert", "open", "q1", "still waiting")
    code, out, _ = _cli(capsys, pad_path, "resolve", "q1")
    assert code == 0 and "pruned q1" in out
    code, out, _ = _cli(capsys, pad_path, "show")
    assert out == pad_path.read_text()
    code, out, _ = _cli(capsys, pad_path, "show", "--json", "--section", "findings")
    assert json.loads(out)["Findings"][0]["key"] == "f1"
    _cli(capsys, pad_path, "obsolete", "f1")
    code, out, _ = _cli(capsys, pad_path, "prune")
    assert code == 0 and out.strip() == "pruned f1"
    code, out, _ = _cli(capsys, pad_path, "prune")
    assert out.strip() == "unchanged: nothing to prune"


def test_show_creates_the_skeleton(pad_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _cli(capsys, pad_path, "show")
    assert code == 0 and out == SKELETON == pad_path.read_text()


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["upsert", "findings", "k", "no evidence"], "belongs in Hypotheses or Open"),
        (["upsert", "decisions", "k", "no evidence"], "needs provenance"),
        (["upsert", "todo", "k", "x"], "unknown section"),
        (["upsert", "open", "bad key", "x"], "bad key"),
        (["upsert", "findings", "k", "x", "--source", "s", "--date", "2025-02-30"], "not a date"),
        (["resolve", "missing"], "no entry 'missing'"),
        (["frobnicate"], "invalid choice"),
        (["upsert", "findings"], "required"),
    ],
)
def test_bad_input_exits_2_with_one_line(
    pad_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], fragment: str
) -> None:
    try:
        code = main(["--file", str(pad_path), *args])
    except SystemExit as exc:  # argparse's own errors
        code = int(exc.code or 0)
    lines = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert len(lines) == 1 and lines[0].startswith("error: ") and fragment in lines[0], lines


def test_corrupt_file_exits_2_and_is_untouched(
    pad_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pad_path.parent.mkdir(parents=True)
    data = (SKELETON + "stray line\n").encode()
    pad_path.write_bytes(data)
    code, _, err = _cli(capsys, pad_path, "upsert", "open", "q", "x")
    assert code == 2 and err.count("\n") == 1 and f"{pad_path}:11:" in err
    assert pad_path.read_bytes() == data


def test_check_command(pad_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _cli(capsys, pad_path, "show")
    code, out, _ = _cli(capsys, pad_path, "check")
    assert code == 0 and out.startswith("ok: ")
    pad_path.write_text(pad_path.read_text().replace("## Open", "## Later"))
    code, out, _ = _cli(capsys, pad_path, "check")
    assert code == 1 and len(out.strip().splitlines()) == 2  # unknown + missing section


def test_module_entry_point_and_help() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "gigaevo.scratchpad", "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0
    for word in ("show", "upsert", "resolve", "obsolete", "prune", "check", "examples:"):
        assert word in proc.stdout
