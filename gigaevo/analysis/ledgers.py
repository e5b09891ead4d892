"""A run's JSON and JSONL files as DataFrames: events, summary, LLM calls, cards, write ledger.

Every loader takes the run directory (for the card bank: ``memory_bank_dir``,
the run directory by default), gives an empty frame with the documented
columns when the file is missing, and skips a torn line with a
``PartialRunWarning``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from gigaevo.analysis._files import flatten, read_json, read_jsonl
from gigaevo.memory.v2.bank.cards import MAX_USE_TRIALS
from gigaevo.memory.v2.bank.recordjournal import replay_dicts
from gigaevo.memory.v2.bank.trialjournal import JOURNAL_FILE

BANK_FILE = "cards.json"  # and beside it RECORDS_FILE, JOURNAL_FILE: the bank's three files

EVENT_COLUMNS = ["seq", "event", "time", "elapsed_s", "program_id", "fitness"]
LLM_CALL_COLUMNS = [
    "time",
    "role",
    "model",
    "outcome",
    "attempts",
    "latency_s",
    "prompt_tokens",
    "completion_tokens",
    "cost_usd",
    "seed",
    "retried_on",
    "error_type",
    "error",
]
CARD_COLUMNS = [
    "id",
    "kind",
    "revision",
    "task_key",
    "description",
    "explanation_summary",
    "n_evidence",
    "n_provenance",
    "mean_gain",
    "derived_from",
    "aliases",
    "n_use_trials",
    "author_model",
    "created_by",
    "created_at",
    "updated_at",
]
LEDGER_COLUMNS = [
    "ts",
    "time",
    "run_id",
    "task_key",
    "item",
    "outcome",
    "reason",
    "attempt",
    "parent_id",
    "child_id",
    "normalised_gain",
    "card_id",
    "revision",
    "candidate_id",
    "candidate.description",
    "candidate.explanation_summary",
    "neighbour_ids",
    "judge",
    "fail_open",
    "ingest_attempts",
    "latency_s",
]


def _frame(rows: list[dict[str, Any]], first: list[str]) -> pd.DataFrame:
    """Rows as a frame whose columns start with ``first`` (added as NA when absent)."""
    df = pd.DataFrame(rows)
    for col in first:
        if col not in df.columns:
            df[col] = None
    rest = [c for c in df.columns if c not in first]
    return df[[*first, *rest]]


def load_events(run_dir: str | Path) -> pd.DataFrame:
    """``events.jsonl``: one row per event, in file order.

    ============  ============================================================
    column        meaning
    ============  ============================================================
    seq           line number (0-based)
    event         initial, mutant, archive, new_best, migration, resume, stop
    time          Unix time
    elapsed_s     seconds since the first event
    program_id    the program concerned (NA for resume and stop)
    fitness       its fitness (initial, mutant, new_best)
    ...           the other keys of each event as columns (NA elsewhere):
                  ``attempt``, ``island``, ``parent_id``, ``status``,
                  ``reason``, ``tactic`` (mutant); ``cell``, ``evicted``,
                  ``replaced`` (archive); ``from_island``, ``to_island``
                  (migration); ``n_mutants`` (stop)
    ============  ============================================================
    """
    rows = read_jsonl(Path(run_dir) / "events.jsonl")
    for n, row in enumerate(rows):
        row["seq"] = n
    df = _frame(rows, EVENT_COLUMNS)
    if len(df):
        df["elapsed_s"] = df["time"] - df["time"].min()
    return df


def load_summary(run_dir: str | Path) -> pd.Series:
    """``summary.json`` flattened to dotted keys (``invalid_reasons.NameError``, ...).

    Keys include ``problem``, ``primary_metric``, ``higher_is_better``,
    ``best_fitness``, ``best_program_id``, ``initial_fitness``, ``n_mutants``,
    ``n_valid``, ``n_invalid``, ``n_accepted``, ``n_duplicate``,
    ``n_failed_mutations``, ``llm_calls``, ``llm_prompt_tokens``,
    ``llm_completion_tokens``, ``llm_cost_usd``, ``wall_seconds``,
    ``stop_reason``, ``finished``, ``seed``. Empty when the file is missing
    (a run still going or killed before its close).
    """
    data = read_json(Path(run_dir) / "summary.json")
    return pd.Series(flatten(data) if isinstance(data, dict) else {}, dtype=object)


def load_llm_calls(run_dir: str | Path) -> pd.DataFrame:
    """``llm_calls.jsonl`` (remote models only): one row per LLM call.

    Columns: ``time`` (Unix, call end), ``role`` (mutator, memory, ...),
    ``model``, ``outcome`` (ok, error, auth_error), ``attempts``,
    ``latency_s``, ``prompt_tokens``, ``completion_tokens``, ``cost_usd``
    (NA when no price is known), ``seed``, ``retried_on`` (list of error
    kinds), ``error_type``, ``error``.
    """
    return _frame(read_jsonl(Path(run_dir) / "llm_calls.jsonl"), LLM_CALL_COLUMNS)


def read_bank(bank_dir: str | Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The header and raw card dicts of the bank (``({}, [])`` when missing): ``cards.json``
    with the card revisions appended to ``cards.records.jsonl`` since it was written."""
    data = read_json(Path(bank_dir) / BANK_FILE)
    if not isinstance(data, dict):
        return {}, []
    cards = [c for c in data.get("cards", []) if isinstance(c, dict)]
    header = {k: v for k, v in data.items() if k != "cards"}
    return replay_dicts(bank_dir, header, cards)


def _journal_trials(bank_dir: str | Path) -> dict[str, int]:
    """Use trials per card in ``cards.trials.jsonl`` (where stamps go since the journal)."""
    counts: dict[str, int] = {}
    for line in read_jsonl(Path(bank_dir) / JOURNAL_FILE):
        card = line.get("card")
        if isinstance(card, str):
            counts[card] = counts.get(card, 0) + 1
    return counts


def _card_row(card: dict[str, Any], journal_trials: dict[str, int]) -> dict[str, Any]:
    gains = [e.get("normalised_gain") for e in card.get("evidence", [])]
    gains = [g for g in gains if isinstance(g, int | float)]
    row = {col: card.get(col) for col in CARD_COLUMNS}
    row["n_provenance"] = len(card.get("provenance", []))
    inline = len(card.get("use_trials", []))  # banks written before the journal
    row["n_use_trials"] = min(MAX_USE_TRIALS, inline + journal_trials.get(str(card.get("id")), 0))
    row["mean_gain"] = sum(gains) / len(gains) if gains else float("nan")
    return row


def load_cards(bank_dir: str | Path) -> pd.DataFrame:
    """``cards.json``: one row per card of the bank.

    ====================  ====================================================
    column                meaning
    ====================  ====================================================
    id, kind, revision    stable id (``ins-``/``prg-``), insight or program,
                          revision (1 at admission, +1 per change)
    task_key              the task the card was authored for
    description           "When C, try A because M"
    explanation_summary   the card's short explanation
    n_evidence            pooled outcomes (all of them)
    n_provenance          program ids in its provenance
    mean_gain             mean normalised gain over the kept evidence rows
    derived_from          cards the founding mutation cited (list)
    aliases               ids absorbed into this card (list)
    n_use_trials          randomised trials recorded by the read side (in the
                          card and in ``cards.trials.jsonl``, the newest 2,048)
    author_model          the model that wrote it
    created_by            run id
    created_at/updated_at timestamps as written
    ====================  ====================================================

    The bank header (``format``, ``generation``, ``write_id``, ``written_at``,
    ``n_cards``) is in ``df.attrs["header"]``.
    """
    header, cards = read_bank(bank_dir)
    journal_trials = _journal_trials(bank_dir)
    df = _frame([_card_row(c, journal_trials) for c in cards], CARD_COLUMNS)[CARD_COLUMNS]
    df.attrs["header"] = header
    return df


def load_card_evidence(bank_dir: str | Path) -> pd.DataFrame:
    """The evidence rows kept on every card: one row per (card, outcome).

    Columns: ``card_id``, ``kind``, then the evidence keys: ``task_key``,
    ``run_id``, ``attempt``, ``parent_id``, ``child_id``, ``parent_fitness``,
    ``child_fitness``, ``normalised_gain``, ``archive_status``,
    ``candidate_id``, ``recorded_at``.
    """
    _, cards = read_bank(bank_dir)
    rows = [
        {"card_id": c.get("id"), "kind": c.get("kind"), **e}
        for c in cards
        for e in c.get("evidence", [])
        if isinstance(e, dict)
    ]
    return _frame(rows, ["card_id", "kind", "attempt", "child_id", "normalised_gain"])


def load_write_ledger(run_dir: str | Path) -> pd.DataFrame:
    """``write_ledger.jsonl`` (memory=v2): one row per write outcome.

    Columns: ``ts`` (Unix), ``time`` (UTC text), ``run_id``, ``task_key``,
    ``item`` (insight, program, card), ``outcome`` (added, updated,
    discarded, rejected_retired, rejected_novelty, rejected_capacity,
    retired, evicted), ``reason``, ``attempt``, ``parent_id``, ``child_id``,
    ``normalised_gain``, ``card_id``, ``revision``, ``candidate_id``,
    ``candidate.description``, ``candidate.explanation_summary``,
    ``neighbour_ids`` (list), ``judge``, ``fail_open`` (retrieval, judge or
    NA), ``ingest_attempts``, ``latency_s``.
    """
    rows = []
    for row in read_jsonl(Path(run_dir) / "write_ledger.jsonl"):
        candidate = row.pop("candidate", None) or {}
        row["candidate.description"] = candidate.get("description")
        row["candidate.explanation_summary"] = candidate.get("explanation_summary")
        rows.append(row)
    return _frame(rows, LEDGER_COLUMNS)


def load_memory_stats(run_dir: str | Path) -> dict[str, Any]:
    """``memory_stats.json`` as a dict (empty when missing): what the memory writer did."""
    data = read_json(Path(run_dir) / "memory_stats.json")
    return data if isinstance(data, dict) else {}
