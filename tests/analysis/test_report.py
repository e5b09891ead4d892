"""The report: a self-contained HTML page and real PNGs, for a run and for a sweep."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import matplotlib.image
import pytest

from gigaevo.analysis.report import write_report

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
ROOT = Path(__file__).resolve().parents[2]


def _check_self_contained(html_path: Path) -> None:
    page = html_path.read_text()
    # no asset fetched from anywhere: every src/href is inline data or an in-page anchor
    refs = re.findall(r"""(?:src|href)\s*=\s*["']?([^"'\s>]+)""", page, flags=re.I)
    assert refs, "the page embeds no image"
    assert all(r.startswith(("data:", "#")) for r in refs), refs
    assert not re.search(r"url\(\s*['\"]?(https?:)?//", page)
    assert "<script" not in page.lower() and "<link" not in page.lower()


def _check_pngs(out: Path, names: set[str]) -> None:
    pngs = {p.stem: p for p in out.glob("*.png")}
    assert names <= set(pngs), set(pngs)
    for path in pngs.values():
        assert path.read_bytes()[:8] == PNG_MAGIC
        image = matplotlib.image.imread(path)
        assert image.shape[0] > 100 and image.shape[1] > 100
        assert image.std() > 0  # not a blank canvas


def test_run_report_is_one_self_contained_page(plain_run: Path, tmp_path: Path) -> None:
    html_path = write_report(plain_run, tmp_path / "out")
    assert html_path == tmp_path / "out" / "report.html"
    _check_self_contained(html_path)
    _check_pngs(html_path.parent, {"fitness", "archive", "lineage", "invalid"})
    page = html_path.read_text()
    assert page.count("data:image/png;base64,") == 4
    assert "rastrigin_value" in page


def test_memory_run_report_shows_the_card_bank(memory_run: Path, tmp_path: Path) -> None:
    html_path = write_report(memory_run, tmp_path)
    _check_self_contained(html_path)
    _check_pngs(tmp_path, {"cards"})
    assert "Residual duplicate rate" in html_path.read_text()


def test_read_side_report_shows_decisions_cards_ope_and_retirements(
    read_side_run: Path, tmp_path: Path
) -> None:
    html_path = write_report(read_side_run, tmp_path)
    _check_self_contained(html_path)
    _check_pngs(tmp_path, {"memory_decisions", "card_usage", "card_effects"})
    page = html_path.read_text()
    headings = re.findall(r"<h2>(Memory: [^<]*)</h2>", page)
    for part in ("decisions, offers and controls", "posterior effect per card", "off-policy"):
        assert any(part in h for h in headings), headings
    assert "No card was retired in this run (" in page
    ope = json.loads((read_side_run / "ope_summary.json").read_text())
    assert f"<td>dr</td>\n      <td>{ope['dr']:.6f}</td>" in page  # the ITT DR, as pandas shows it
    assert "<td>ledger</td>" in page  # counts came from the ledger
    for gate in ope.get("gates") or {}:  # newer summaries: one table row per offer gate
        assert f"<td>{gate}</td>" in page


def test_plain_run_report_has_no_read_side(plain_run: Path, tmp_path: Path) -> None:
    page = write_report(plain_run, tmp_path).read_text()
    assert "Memory:" not in page and not (tmp_path / "card_usage.png").exists()


def test_sweep_report(sweep_dir: Path, tmp_path: Path) -> None:
    html_path = write_report(sweep_dir, tmp_path)
    _check_self_contained(html_path)
    _check_pngs(tmp_path, {"sweep_curves", "sweep_best"})
    assert "Best fitness by seed" in html_path.read_text()


@pytest.mark.slow
def test_sweep_report_compares_arms_over_seeds(memory_sweep_dir: Path, tmp_path: Path) -> None:
    page = write_report(memory_sweep_dir, tmp_path).read_text()
    assert "Best fitness by memory<" in page
    assert page.count("<td>none</td>") >= 1 and page.count("<td>v2</td>") >= 1
    assert "Memory read side by memory" in page
    assert "Paired difference v2 - none (same seeds)" in page


def test_default_output_is_dir_report(plain_run: Path, copy_of: Callable[[Path], Path]) -> None:
    run_dir = copy_of(plain_run)
    assert write_report(run_dir) == run_dir / "report" / "report.html"


def test_a_run_without_summary_and_a_torn_log_still_reports(
    plain_run: Path, copy_of: Callable[[Path], Path]
) -> None:
    run_dir = copy_of(plain_run)
    (run_dir / "summary.json").unlink()
    events = run_dir / "events.jsonl"
    events.write_text(events.read_text()[:-20])
    page = write_report(run_dir).read_text()
    assert "No summary.json" in page and "missing: summary.json" in page
    assert "skipped 1 unreadable line" in page
    _check_self_contained(run_dir / "report" / "report.html")


def test_command_line(plain_run: Path, tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "gigaevo.report"]
    ok = subprocess.run(
        [*cmd, str(plain_run), "--out", str(tmp_path)], capture_output=True, text=True, cwd=ROOT
    )
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.strip() == str(tmp_path / "report.html")
    bad = subprocess.run([*cmd, str(tmp_path / "nope")], capture_output=True, text=True)
    assert bad.returncode == 2 and bad.stderr.startswith("error: ")


@pytest.mark.parametrize("content", [None, "x.txt"])
def test_a_directory_without_runs_is_refused(tmp_path: Path, content: str | None) -> None:
    if content:
        (tmp_path / content).write_text("hello")
    with pytest.raises(FileNotFoundError, match="neither a run nor a sweep"):
        write_report(tmp_path)
