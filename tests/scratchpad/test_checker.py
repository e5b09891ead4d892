"""The checker: a good design report passes; each kind of bad one fails, one line per violation."""

from __future__ import annotations

import copy
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from gigaevo.scratchpad import SECTIONS, SKELETON, design_report
from gigaevo.scratchpad.checker import (
    check_report,
    default_assets_dir,
    lint_scratchpad,
    load_contracts,
)
from gigaevo.scratchpad.format import EVIDENCED, MAX_TEXT_CHARS
from tests.conftest import ROOT
from tests.scratchpad.conftest import DAY

CHECK = ROOT / "scripts" / "check.sh"
CONTRACTS = load_contracts()


def good_report() -> dict[str, Any]:
    return design_report(
        path=".agent/scratchpad.md",
        lock_file=".agent/scratchpad.md.lock",
        observed_reads=1,
        name="test",
        run={},
    )


def test_manifest_lists_every_contract_file() -> None:
    manifest = json.loads((default_assets_dir() / "manifest.json").read_text())
    listed = {c["file"] for c in manifest["contracts"]}
    on_disk = {f"contracts/{p.name}" for p in (default_assets_dir() / "contracts").glob("*.json")}
    assert listed == on_disk
    ids = {c.id for c in CONTRACTS.contracts}
    assert {
        "allowed_path",
        "sections",
        "minimum_evidence",
        "read_once",
        "idempotent_write",
        "reconstruction",
        "concurrency",
        "edge_cases",
    } <= ids


def test_contracts_agree_with_the_library() -> None:
    assert tuple(CONTRACTS.lint("sections", "sections", None)) == SECTIONS
    assert tuple(CONTRACTS.lint("minimum_evidence", "required_in", None)) == EVIDENCED
    assert CONTRACTS.lint("minimum_evidence", "max_entry_chars", None) == MAX_TEXT_CHARS


def test_good_report_passes() -> None:
    assert check_report(good_report(), CONTRACTS) == []


def _set(report: dict[str, Any], pointer: str, value: Any) -> dict[str, Any]:
    report = copy.deepcopy(report)
    *parents, last = pointer.strip("/").split("/")
    node = report
    for part in parents:
        node = node[part]
    if value is _DELETE:
        del node[last]
    else:
        node[last] = value
    return report


_DELETE = object()

BAD = [
    ("/scratchpad/path", "notes.txt", "allowed_path: /scratchpad/path must match"),
    ("/scratchpad/format", "json", "allowed_path: /scratchpad/format must equal"),
    ("/scratchpad/sections", ["Findings", "Open"], "sections: /scratchpad/sections must equal"),
    ("/scratchpad/stable_keys", False, "sections: /scratchpad/stable_keys"),
    ("/evidence/required_in", ["Findings"], "minimum_evidence: /evidence/required_in must include"),
    ("/evidence/fields", ["source"], 'must include ["date"]'),
    ("/evidence/validated_only", False, "minimum_evidence: /evidence/validated_only"),
    ("/evidence/unvalidated_go_to", ["Findings"], "may only name"),
    ("/evidence/max_entry_chars", 5000, "must be at most 400"),
    ("/read_policy/reads_per_session", 2, "read_once: /read_policy/reads_per_session must equal 1"),
    ("/read_policy/cache_parsed_state", False, "read_once: /read_policy/cache_parsed_state"),
    ("/read_policy/reread_detection", ["warning"], 'must include ["counter"]'),
    ("/read_policy/observed_reads", 3, "read_once: /read_policy/observed_reads must be at most 1"),
    ("/write_policy/mode", "append", "idempotent_write: /write_policy/mode"),
    ("/write_policy/full_rewrite", True, "idempotent_write: /write_policy/full_rewrite"),
    ("/write_policy/idempotent", 1, "must equal true (got 1)"),
    ("/write_policy/atomic_steps", ["os_replace"], "idempotent_write: /write_policy/atomic_steps"),
    ("/write_policy/contradictions_recorded_in", "Findings", "contradictions_recorded_in"),
    ("/reconstruction/after_reset", "conversation", "reconstruction: /reconstruction/after_reset"),
    ("/reconstruction/after_compaction", _DELETE, "/reconstruction/after_compaction is missing"),
    ("/reconstruction/prompt_prefix_from", "file", "reconstruction: /reconstruction/prompt_prefix"),
    ("/concurrency/lock", "none", "concurrency: /concurrency/lock must be one of"),
    ("/concurrency/blind_text_merge", True, "concurrency: /concurrency/blind_text_merge"),
    ("/concurrency/ordering", "append", "concurrency: /concurrency/ordering"),
    ("/edge_cases/corrupt_file", "overwrite", "edge_cases: /edge_cases/corrupt_file"),
    ("/edge_cases/missing_file", "error", "edge_cases: /edge_cases/missing_file"),
    ("/edge_cases/growth", "unbounded", "edge_cases: /edge_cases/growth"),
    ("/edge_cases/contradicted_finding", "keep_both", "edge_cases: /edge_cases/contradicted"),
    ("/report_version", 2, "report: /report_version must equal 1"),
    ("/read_policy", _DELETE, "report: missing block /read_policy"),
    ("/extra", {}, "report: unknown key /extra"),
]


@pytest.mark.parametrize(("pointer", "value", "expected"), BAD, ids=[b[0] for b in BAD])
def test_each_kind_of_bad_report_is_rejected(pointer: str, value: Any, expected: str) -> None:
    lines = check_report(_set(good_report(), pointer, value), CONTRACTS)
    assert any(expected in line for line in lines), lines
    assert all("\n" not in line for line in lines)


def test_one_line_per_violation() -> None:
    report = _set(good_report(), "/read_policy/reads_per_session", 3)
    report = _set(report, "/write_policy/full_rewrite", True)
    report = _set(report, "/concurrency/lock", "none")
    lines = check_report(report, CONTRACTS)
    assert len(lines) == 3
    assert [line.split(":")[0] for line in lines] == [
        "read_once",
        "idempotent_write",
        "concurrency",
    ]


def test_report_that_is_not_an_object() -> None:
    assert check_report([1, 2], CONTRACTS) == ["report: the design report must be a JSON object"]


def _sh(*args: str) -> tuple[int, list[str]]:
    proc = subprocess.run(["bash", str(CHECK), *args], capture_output=True, text=True, timeout=60)
    return proc.returncode, (proc.stdout + proc.stderr).strip().splitlines()


def test_check_sh_exit_codes_for_reports(tmp_path: Path) -> None:
    good = tmp_path / "good.json"
    good.write_text(json.dumps(good_report()))
    code, lines = _sh(str(good))
    assert code == 0 and lines == [f"ok: {good} meets {len(CONTRACTS.contracts)} contracts"]
    bad = tmp_path / "bad.json"
    report = _set(good_report(), "/read_policy/reads_per_session", 2)
    bad.write_text(json.dumps(_set(report, "/concurrency/lock", "none")))
    code, lines = _sh(str(bad))
    assert code == 1 and len(lines) == 2 and all(ln.startswith(f"{bad}: ") for ln in lines)
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    code, lines = _sh(str(broken))
    assert code == 1 and len(lines) == 1 and "not valid JSON" in lines[0]
    code, lines = _sh(str(tmp_path / "missing.json"))
    assert code == 2 and lines[0].startswith("error: ")
    code, lines = _sh()
    assert code == 2 and len(lines) == 1


# -- linting scratchpad files ------------------------------------------------------------
def _pad_file(tmp_path: Path, text: str, name: str = ".agent/scratchpad.md") -> Path:
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_lint_accepts_a_good_scratchpad(tmp_path: Path) -> None:
    text = SKELETON.replace("## Findings\n", "## Findings\n- [f] ok [src:x @ 2025-11-30]\n")
    assert lint_scratchpad(_pad_file(tmp_path, text), CONTRACTS, today=DAY) == []


def test_lint_reports_every_violation_with_its_line(tmp_path: Path) -> None:
    text = (
        SKELETON.replace(
            "## Findings\n", "## Findings\n- [f] no evidence\n- [g] x [src:y @ 2099-01-01]\n"
        )
        .replace("## Open\n", "## Open\nloose text\n- [h] " + "z" * 500 + "\n")
        .replace("## Hypotheses", "## Ideas")
    )
    path = _pad_file(tmp_path, text, "notes/scratch.txt")
    lines = lint_scratchpad(path, CONTRACTS, today=DAY)
    joined = "\n".join(lines)
    assert f"{path}: allowed_path:" in joined
    assert f"{path}:4: sections: unknown section '## Ideas'" in joined
    assert f"{path}:9: minimum_evidence: Findings entry 'f' has no provenance" in joined
    assert f"{path}:10: minimum_evidence: entry 'g' is dated in the future" in joined
    assert f"{path}:13: sections: not an entry" in joined
    assert f"{path}:14: minimum_evidence: entry 'h' has 500 characters" in joined
    assert f"{path}: sections: missing section '## Hypotheses'" in joined
    assert len(lines) == 7


def test_check_sh_lints_a_scratchpad(tmp_path: Path) -> None:
    good = _pad_file(tmp_path, SKELETON)
    assert _sh("--scratchpad", str(good))[0] == 0
    bad = _pad_file(tmp_path / "b", SKELETON.replace("## Open\n", "## Open\n- [d]\n"))
    code, lines = _sh("--scratchpad", str(bad))
    assert code == 1 and len(lines) == 1 and ":11: sections: entry 'd' has no text" in lines[0]
    assert _sh("--scratchpad", str(tmp_path / "none.md"))[0] == 2


def test_lint_and_a_run_agree_on_a_zero_byte_scratchpad(tmp_path: Path) -> None:
    """check.sh rejects an empty file; a run refuses it too (tests/pipeline/test_resume_edges)."""
    path = _pad_file(tmp_path, "")
    assert lint_scratchpad(path, CONTRACTS, today=DAY) == [
        f"{path}: sections: empty (zero bytes; a scratchpad always has its section headings)"
    ]
