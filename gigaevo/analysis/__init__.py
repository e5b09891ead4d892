"""Reading runs: a run's files as tidy pandas DataFrames, figures and the HTML report.

This layer only reads files a run wrote (it never runs anything and never
imports the pipeline), so it works on a run that is still going, a crashed
run or a copy of a run's directory.

- ``load_run(dir) -> Run``: every file of one run (programs, events, archive,
  LLM calls, card bank, write ledger, summary, config, overrides) and the
  list of what is ``missing``; torn lines are skipped with a
  ``PartialRunWarning`` and listed in ``Run.warnings``.
- One loader per file: ``load_programs``, ``load_archive``, ``load_events``,
  ``load_summary``, ``load_llm_calls``, ``load_cards``, ``load_card_evidence``,
  ``load_write_ledger``, ``load_memory_stats`` (columns in their docstrings).
- The memory's read side (``memory=v2``): ``load_evidence`` (the causal
  ledger: decisions, candidates, terminals, edges, lineage), ``load_memory_events``,
  ``load_ope_summary``, and from them ``card_effects`` (usage and posterior
  effect per card with intervals), ``offer_counts``, ``retirements``,
  ``memory_counts`` and ``itt_from_evidence``.
- ``load_sweep(dir)``: one row per job of a multirun, overrides as columns
  (and ``memory.*`` counts for jobs with a read side);
  ``compare_arms(sweep, by)``: mean and t-interval of the best fitness per arm;
  ``paired_difference(sweep)``: v2 - none over the same seeds, with its t-interval.
- ``lineage(programs, id)``: a program's parent chain.
- ``gigaevo.analysis.figures``: the plots; ``gigaevo.analysis.report``: the
  report behind ``python -m gigaevo.report DIR``.
"""

from __future__ import annotations

from gigaevo.analysis._files import PartialRunWarning
from gigaevo.analysis.evidence import Evidence, load_evidence
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
    card_effects,
    itt_from_evidence,
    load_memory_events,
    load_ope_summary,
    memory_counts,
    offer_counts,
    retirement_sweeps,
    retirements,
)
from gigaevo.analysis.programs import lineage, load_archive, load_programs
from gigaevo.analysis.run import Run, load_run
from gigaevo.analysis.sweep import (
    compare_arms,
    find_jobs,
    load_sweep,
    paired_difference,
    varying_overrides,
)

__all__ = [
    "Evidence",
    "PartialRunWarning",
    "Run",
    "card_effects",
    "compare_arms",
    "find_jobs",
    "itt_from_evidence",
    "lineage",
    "load_archive",
    "load_card_evidence",
    "load_cards",
    "load_events",
    "load_evidence",
    "load_llm_calls",
    "load_memory_events",
    "load_memory_stats",
    "load_ope_summary",
    "load_programs",
    "load_run",
    "load_summary",
    "load_sweep",
    "load_write_ledger",
    "memory_counts",
    "offer_counts",
    "paired_difference",
    "retirement_sweeps",
    "retirements",
    "varying_overrides",
]
