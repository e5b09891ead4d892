"""``load_run``: every file of one run directory in one ``Run``, with what is missing."""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import pandas as pd

from gigaevo.analysis._files import parse_overrides, read_json, read_yaml
from gigaevo.analysis.evidence import EVIDENCE_FILE, Evidence, empty_evidence, load_evidence
from gigaevo.analysis.ledgers import (
    load_card_evidence,
    load_cards,
    load_events,
    load_llm_calls,
    load_memory_stats,
    load_summary,
    load_write_ledger,
)
from gigaevo.analysis.memory import (
    EVENTS_FILE,
    OPE_FILE,
    card_effects,
    load_memory_events,
    load_ope_summary,
    memory_counts,
    retirements,
)
from gigaevo.analysis.programs import archive_frame, programs_frame, read_store
from gigaevo.problems import ProblemError, load_problem

# files every finished run writes; a run without them is still going or crashed
CORE_FILES = ("programs.sqlite3", "events.jsonl", "summary.json", "config.yaml")
MEMORY_FILES = ("cards.json", "write_ledger.jsonl", "memory_stats.json")
# written by the read side (memory=v2 with memory.selection=causal)
READ_SIDE_FILES = (EVIDENCE_FILE, EVENTS_FILE, OPE_FILE)


@dataclass
class Run:
    """One run's files as frames (see each loader for the columns).

    Attributes:
        path: the run directory.
        programs: ``load_programs``; events: ``load_events``; archive:
            ``load_archive``; llm_calls: ``load_llm_calls``; cards:
            ``load_cards``; card_evidence: ``load_card_evidence``;
            write_ledger: ``load_write_ledger``.
        summary: ``load_summary`` (empty while the run is going).
        memory_stats: ``memory_stats.json`` (empty for memory=none).
        config: the resolved ``config.yaml`` as a dict.
        overrides: the command's overrides, ``{key: value}``.
        meta: the store's meta values (``identity``, ``state``, ...).
        scratchpad: the text of ``.agent/scratchpad.md``, or None.
        evidence: the causal ledger (``load_evidence``: decisions, candidates,
            terminals, edges, lineage).
        memory_events: ``load_memory_events``; ope_summary:
            ``load_ope_summary`` (one row, empty when missing).
        missing: expected files that are absent (memory files only for
            memory=v2, read-side files only with ``memory.selection=causal``).
        warnings: what could not be read (torn lines, bad JSON, ...).
    """

    path: Path
    programs: pd.DataFrame
    events: pd.DataFrame
    archive: pd.DataFrame
    llm_calls: pd.DataFrame
    cards: pd.DataFrame
    card_evidence: pd.DataFrame
    write_ledger: pd.DataFrame
    summary: pd.Series
    memory_stats: dict[str, Any]
    config: dict[str, Any]
    overrides: dict[str, Any]
    meta: dict[str, Any]
    scratchpad: str | None
    evidence: Evidence = field(default_factory=empty_evidence)
    memory_events: pd.DataFrame = field(default_factory=pd.DataFrame)
    ope_summary: pd.DataFrame = field(default_factory=pd.DataFrame)
    missing: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def finished(self) -> bool:
        """Whether the run closed normally (``summary.json`` says so)."""
        return bool(self.summary.get("finished", False))

    @cached_property
    def higher_is_better(self) -> bool:
        """The direction of the primary metric (summary, else the problem's files)."""
        return metric_direction(self.summary.get("higher_is_better"), self.config)

    @property
    def best_id(self) -> str | None:
        """The best program's id (summary, else the last checkpoint's counters)."""
        best = self.summary.get("best_program_id")
        if best is None:
            best = ((self.meta.get("state") or {}).get("counters") or {}).get("best_id")
        return best

    def card_effects(self) -> pd.DataFrame:
        """Usage and posterior effect per card (``gigaevo.analysis.card_effects``)."""
        return card_effects(self.evidence, self.cards)

    def retirements(self) -> pd.DataFrame:
        """Retired cards from the events and the write ledger (``retirements``)."""
        return retirements(self.memory_events, self.write_ledger)

    def memory_counts(self) -> dict[str, Any]:
        """Decisions, offers, controls, citations and the ITT DR (``memory_counts``)."""
        return memory_counts(self.evidence, self.memory_events, self.ope_summary, self.memory_stats)

    def best_so_far(self) -> pd.DataFrame:
        """Valid mutants with ``best``: the running best fitness by direction.

        Columns: ``mutant``, ``fitness``, ``best`` (initial programs are row
        ``mutant == 0`` and seed the running best).
        """
        df = self.programs[self.programs["valid"].astype(bool)][["mutant", "fitness"]]
        df = df.sort_values("mutant", kind="stable")
        best = df["fitness"].cummax() if self.higher_is_better else df["fitness"].cummin()
        return df.assign(best=best).reset_index(drop=True)


def metric_direction(summary_value: Any, config: dict[str, Any]) -> bool:
    """Whether higher is better: the summary's word, else the configured problem's, else True."""
    if summary_value is not None:
        return bool(summary_value)
    problem = config.get("problem") or {}
    try:
        spec = load_problem(problem.get("name"), problem.get("dir"))
    except (ProblemError, OSError, TypeError):
        return True
    return bool(spec.metrics.higher_is_better)


def read_overrides(path: Path) -> dict[str, Any]:
    """The overrides of the run in ``path`` (``.hydra/overrides.yaml``, else ``command.json``)."""
    items = read_yaml(path / ".hydra" / "overrides.yaml")
    if not isinstance(items, list):
        command = read_json(path / "command.json")
        items = command.get("overrides", []) if isinstance(command, dict) else []
    return parse_overrides([str(i) for i in items])


def bank_dir(path: Path, config: dict[str, Any]) -> Path:
    """Where the run's card bank is: its own folder when it holds one, else ``memory_bank_dir``."""
    configured = Path(config.get("memory_bank_dir") or path)
    if (path / "cards.json").is_file() or not configured.is_dir():
        return path
    return configured


def _missing(path: Path, config: dict[str, Any]) -> list[str]:
    expected = list(CORE_FILES)
    memory = config.get("memory") or {}
    if "v2" in str(memory.get("_target_", "")).lower() or "writer" in memory:
        expected += MEMORY_FILES
        if memory.get("selection", "causal") == "causal":
            expected += READ_SIDE_FILES
    bank = bank_dir(path, config)
    return [
        name for name in expected if not ((bank if name == "cards.json" else path) / name).is_file()
    ]


def load_run(run_dir: str | Path) -> Run:
    """Every file of the run in ``run_dir``; never raises on missing or partial files.

    The card bank is ``run_dir/cards.json`` when there is one (so a copied
    run reads its own copy), else the one in the config's ``memory_bank_dir``.

    Raises:
        FileNotFoundError: ``run_dir`` is not a directory.
    """
    path = Path(run_dir)
    if not path.is_dir():
        raise FileNotFoundError(f"{path}: not a directory")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        config = read_yaml(path / "config.yaml") or {}
        raw, meta = read_store(path)
        bank = bank_dir(path, config)
        run = Run(
            path=path,
            programs=programs_frame(raw),
            events=load_events(path),
            archive=archive_frame(meta),
            llm_calls=load_llm_calls(path),
            cards=load_cards(bank),
            card_evidence=load_card_evidence(bank),
            write_ledger=load_write_ledger(path),
            summary=load_summary(path),
            memory_stats=load_memory_stats(path),
            config=config,
            overrides=read_overrides(path),
            meta=meta,
            scratchpad=_read_text(path / ".agent" / "scratchpad.md"),
            evidence=load_evidence(path),
            memory_events=load_memory_events(path),
            ope_summary=load_ope_summary(path),
            missing=_missing(path, config),
        )
    run.warnings = [str(w.message) for w in caught]
    return run


def _read_text(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
