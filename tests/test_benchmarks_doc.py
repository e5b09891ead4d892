"""BENCHMARKS.md's commands name scripts and options that exist, and its timing items match the
script that re-runs them (issue 19: every figure matches its command).

A figure whose command no longer parses cannot be reproduced; these checks read the file and
the scripts' sources only (no benchmark runs here).
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "BENCHMARKS.md"
RERUN = ROOT / "benchmarks" / "rerun_timing_figures.sh"

# a benchmark invocation inside inline code: the script, then its arguments up to the backtick
_COMMAND = re.compile(r"(bench_[a-z_]+\.py)([^`]*)`")
_OPTION = re.compile(r"(?<![\w-])(--[a-z][a-z0-9-]*)")


def _commands(text: str) -> list[tuple[str, list[str]]]:
    found = []
    for script, rest in _COMMAND.findall(text):
        rest = rest.split("&&")[0].split("|")[0]  # one command; a following one is checked alone
        found.append((script, _OPTION.findall(rest)))
    return found


def _declared(script: Path) -> set[str]:
    source = script.read_text()
    return set(re.findall(r"add_argument\(\s*\"(--[a-z0-9-]+)\"", source))


def test_every_command_names_a_script_and_options_it_declares() -> None:
    commands = _commands(DOC.read_text())
    assert len(commands) >= 20, "BENCHMARKS.md should quote the command of every figure"
    problems = []
    for script, options in commands:
        path = ROOT / "benchmarks" / script
        if not path.is_file():
            problems.append(f"{script}: no such benchmark")
            continue
        unknown = sorted(set(options) - _declared(path))
        if unknown:
            problems.append(f"{script}: options {unknown} are not declared by the script")
    assert not problems, "\n".join(problems)


def test_the_check_reads_options_and_finds_a_wrong_one() -> None:
    good = "`python benchmarks/bench_card_world.py --seeds 20 --rounds 600`"
    bad = "`python benchmarks/bench_card_world.py --seed 20`"
    assert _commands(good) == [("bench_card_world.py", ["--seeds", "--rounds"])]
    script = ROOT / "benchmarks" / "bench_card_world.py"
    assert {"--seeds", "--rounds"} <= _declared(script)
    assert "--seed" not in _declared(script)
    assert _commands(bad)[0][1] == ["--seed"]


def test_timing_items_of_the_document_and_of_the_rerun_script_agree() -> None:
    doc_items = {int(n) for n in re.findall(r"\(item (\d+)", DOC.read_text())}
    script_items = {int(n) for n in re.findall(r"^(?:item|pair) (\d+) ", RERUN.read_text(), re.M)}
    script_items |= {int(n) for n in re.findall(r"^\s+item (\d+) ", RERUN.read_text(), re.M)}
    assert script_items, "the rerun script lists no items"
    assert script_items == set(range(1, max(script_items) + 1)), "items are numbered 1..N"
    missing = sorted(script_items - doc_items)
    assert not missing, f"timing items {missing} are re-run by the script but cited nowhere"
    unknown = sorted(doc_items - script_items)
    assert not unknown, f"BENCHMARKS.md cites items {unknown} the script does not run"


def test_history_is_linked_and_labelled() -> None:
    history = ROOT / "docs" / "benchmarks-history.md"
    assert "docs/benchmarks-history.md" in DOC.read_text()
    head = history.read_text()[:1500]
    assert "not re-measured" in head.lower() or "none of them is re-measured" in head.lower()
