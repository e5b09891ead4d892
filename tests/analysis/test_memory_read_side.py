"""The read side as frames: the causal ledger, memory events, the OPE summary, card effects."""

from __future__ import annotations

import json
import math
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

from gigaevo.analysis import (
    PartialRunWarning,
    card_effects,
    itt_from_evidence,
    load_evidence,
    load_memory_events,
    load_ope_summary,
    load_run,
    load_summary,
    offer_counts,
    retirement_sweeps,
)
from gigaevo.analysis.evidence import EVIDENCE_FILE
from gigaevo.memory.v2.evidence.bodies import body_text


def _raw_bodies(run_dir: Path, table: str) -> list[dict]:
    """Row bodies as stored; version-2 candidate columns turned back into a list of rows."""
    con = sqlite3.connect(run_dir / EVIDENCE_FILE)
    try:
        query = f"SELECT body FROM {table} ORDER BY seq"
        bodies = [json.loads(body_text(b)) for (b,) in con.execute(query)]
    finally:
        con.close()
    for body in bodies:
        columns = body.pop("candidate_columns", None)
        if columns is not None:
            rows = zip(*columns.values(), strict=True)
            body["candidates"] = [dict(zip(columns, r, strict=True)) for r in rows]
    return bodies


def _tamper(run_dir: Path, sql: str) -> None:
    """Run ``sql`` on a copy's ledger with its immutability triggers dropped."""
    con = sqlite3.connect(run_dir / EVIDENCE_FILE)
    try:
        query = "SELECT name FROM sqlite_master WHERE type='trigger'"
        triggers = [n for (n,) in con.execute(query)]
        for name in triggers:
            con.execute(f"DROP TRIGGER {name}")
        # bodies stored compressed (schema version 4) are first stored as their text,
        # the other form of the same row, so that ``sql`` edits the JSON
        for table in ("decisions", "terminals", "edges", "lineage", "fit_sets"):
            for rowid, body in con.execute(f"SELECT rowid, body FROM {table}").fetchall():
                if isinstance(body, bytes):
                    update = f"UPDATE {table} SET body = ? WHERE rowid = ?"
                    con.execute(update, (body_text(body), rowid))
        con.execute(sql)
        con.commit()
    finally:
        con.close()


def test_the_ledger_has_one_decision_and_one_terminal_per_attempt(read_side_run: Path) -> None:
    ev = load_evidence(read_side_run)
    n = int(load_summary(read_side_run)["n_mutants"])
    assert ev.missing == [] and len(ev.decisions) == n and len(ev.terminals) == n
    assert sorted(ev.decisions["attempt"]) == list(range(n))
    assert ev.decisions["sha_ok"].all() and ev.terminals["sha_ok"].all()
    offered = ev.decisions["action"] == "offer"
    assert (ev.decisions.loc[offered, "z"] == 1).all()
    assert offered.sum() > 0 and (ev.decisions["action"] == "withhold").sum() > 0
    # one proposed candidate per randomised decision, none for an abstention
    proposed = ev.candidates[ev.candidates["proposed"]]
    assert len(proposed) == int((~ev.decisions["abstain"].astype(bool)).sum())
    assert ev.lineage.groupby("root_decision_id")["latest"].sum().eq(1).all()
    assert len(ev.edges) == n


def test_the_recomputed_itt_equals_ope_summary(read_side_run: Path) -> None:
    ope = load_ope_summary(read_side_run).iloc[0]
    mine = itt_from_evidence(load_evidence(read_side_run))
    assert mine["n"] == ope["n"] and mine["n_treated"] == ope["n_treated"]
    assert mine["dr"] == pytest.approx(ope["dr"], rel=1e-9)
    assert mine["ci_low"] == pytest.approx(ope["ci_low"], rel=1e-9)
    # the interval uses the parent-clustered SE (the ledger's run and parent of each row)
    assert mine["interval_se"] == ope["interval_se"] == "parent"
    assert mine["se_parent"] == pytest.approx(ope["se_parent"], rel=1e-9)


def test_counts_agree_with_the_runs_own_statistics(read_side_run: Path) -> None:
    run = load_run(read_side_run)
    counts, decide = run.memory_counts(), run.memory_stats["decide"]
    assert counts["source"] == "ledger"
    assert counts["decisions"] == decide["decisions"] == len(run.evidence.decisions)
    assert counts["offered"] == decide["offered"] and counts["withheld"] == decide["withheld"]
    assert counts["abstained"] == decide["abstain"]
    ope = run.ope_summary.iloc[0]
    assert counts["cited"] == ope["cited"] and counts["itt_dr"] == ope["dr"]
    last = offer_counts(run.evidence).iloc[-1]
    assert (last["abstain"], last["offer"], last["withhold"]) == (
        counts["abstained"],
        counts["offered"],
        counts["withheld"],
    )


def test_card_effects_are_the_latest_proposals_logged_posterior(read_side_run: Path) -> None:
    run = load_run(read_side_run)
    effects = run.card_effects().set_index("card_id")
    decisions = [d for d in _raw_bodies(read_side_run, "decisions") if d["proposed_id"]]
    assert effects["n_proposed"].sum() == len(decisions)
    for card_id, row in effects[effects["n_proposed"] > 0].iterrows():
        mine = [d for d in decisions if d["proposed_id"] == card_id]
        latest = max(mine, key=lambda d: d["attempt"])
        logged = next(c for c in latest["candidates"] if c["card_id"] == card_id)
        assert row["last_attempt"] == latest["attempt"]
        assert row["mean_effect"] == pytest.approx(logged["mean_effect"])
        assert row["ci_low"] < row["mean_effect"] < row["ci_high"]
        assert row["ci_high"] - row["ci_low"] == pytest.approx(2 * 1.959964 * logged["sd_effect"])
        assert row["n_offered"] + row["n_withheld"] == len(mine)
        assert row["n_cited"] <= row["n_offered"]
    assert set(run.cards["id"]) <= set(effects.index)  # every bank card has a row


def test_memory_events_are_one_tidy_frame_and_unknown_kinds_are_kept(
    read_side_run: Path, copy_of: Callable[[Path], Path]
) -> None:
    run_dir = copy_of(read_side_run)
    path = run_dir / "memory_events.jsonl"
    base = load_memory_events(run_dir)
    n = int(load_summary(run_dir)["n_mutants"])
    assert (base["event"] == "assignment").sum() == n
    assert (base["event"] == "outcome").sum() == n
    actions = set(base.loc[base["event"] == "assignment", "action"])
    assert actions <= {"abstain", "offer", "withhold"}
    before = load_run(run_dir)
    extra = [
        {"event": "retired", "ts": 1.0, "retired_card_ids": ["ins-gone"], "reason": "harm"},
        {"event": "retired", "ts": 1.5, "retired_card_ids": [], "verdicts": 1},  # all rescued
        {"event": "something_new", "ts": 2.0, "shiny": 3},
    ]
    with path.open("a") as fh:
        fh.writelines(json.dumps(e) + "\n" for e in extra)
    events = load_memory_events(run_dir)
    assert len(events) == len(base) + 3
    assert events.iloc[-1]["event"] == "something_new" and events.iloc[-1]["shiny"] == 3
    assert events.iloc[-3]["card_ids"] == ["ins-gone"]
    after = load_run(run_dir)
    assert retirement_sweeps(after.memory_events) == retirement_sweeps(before.memory_events) + 2
    gone = after.retirements()
    assert len(gone) == len(before.retirements()) + 1
    assert gone.iloc[-1]["card_id"] == "ins-gone" and gone.iloc[-1]["reason"] == "harm"


def test_a_missing_ope_summary_is_an_empty_frame_and_the_itt_is_recomputed(
    read_side_run: Path, copy_of: Callable[[Path], Path]
) -> None:
    run_dir = copy_of(read_side_run)
    dr = load_ope_summary(run_dir).iloc[0]["dr"]
    (run_dir / "ope_summary.json").unlink()
    ope = load_ope_summary(run_dir)
    assert ope.empty and ope.attrs["missing"] == ["ope_summary.json"]
    run = load_run(run_dir)
    assert run.missing == ["ope_summary.json"]
    assert run.memory_counts()["itt_dr"] == pytest.approx(dr, rel=1e-9)


def test_a_torn_event_log_and_an_unreadable_ledger_load_what_is_there(
    read_side_run: Path, copy_of: Callable[[Path], Path]
) -> None:
    run_dir = copy_of(read_side_run)
    path = run_dir / "memory_events.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:-1]) + lines[-1][:10])
    (run_dir / EVIDENCE_FILE).write_bytes(b"garbage" * 1000)
    with pytest.warns(PartialRunWarning):
        assert len(load_memory_events(run_dir)) == len(lines) - 1
    run = load_run(run_dir)
    assert run.evidence.empty and any(EVIDENCE_FILE in w for w in run.warnings)
    counts = run.memory_counts()
    assert counts["source"] == "events" and counts["decisions"] == len(lines) // 2


def test_open_decisions_and_tampered_rows_are_flagged_not_dropped(
    read_side_run: Path, copy_of: Callable[[Path], Path]
) -> None:
    run_dir = copy_of(read_side_run)
    last = _raw_bodies(run_dir, "decisions")[-1]["decision_id"]
    _tamper(run_dir, f"DELETE FROM terminals WHERE decision_id = '{last}'")
    _tamper(run_dir, "UPDATE decisions SET body = replace(body, '\"seed\":0', '\"seed\":9')")
    with pytest.warns(PartialRunWarning, match="decisions row"):
        ev = load_evidence(run_dir)
    assert len(ev.terminals) == len(ev.decisions) - 1
    assert not ev.decisions["sha_ok"].any() and (ev.decisions["seed"] == 9).all()
    obs = ev.observations()
    assert not obs.loc[obs["decision_id"] == last, "terminal"].item()
    assert obs["terminal"].sum() == len(ev.terminals)


def test_a_missing_fit_set_flags_the_decisions_that_reference_it(
    read_side_run: Path, copy_of: Callable[[Path], Path]
) -> None:
    run_dir = copy_of(read_side_run)
    by_ref = ["fitted_rows_ref" in b for b in _raw_bodies(run_dir, "decisions")]
    assert any(by_ref) and not all(by_ref)  # the first decisions had no fitted rows
    _tamper(run_dir, "DELETE FROM fit_sets")
    with pytest.warns(PartialRunWarning, match="decisions row"):
        ev = load_evidence(run_dir)
    assert ev.decisions.sort_values("seq")["sha_ok"].tolist() == [not r for r in by_ref]
    assert "fitted_rows_ref" not in ev.decisions.columns


def test_extra_fields_of_newer_ledger_rows_become_columns(
    read_side_run: Path, copy_of: Callable[[Path], Path]
) -> None:
    run_dir = copy_of(read_side_run)
    _tamper(run_dir, "UPDATE terminals SET body = replace(body, '{', '{\"novel_field\":5,')")
    with pytest.warns(PartialRunWarning):
        ev = load_evidence(run_dir)
    assert (ev.terminals["novel_field"] == 5).all()
    assert len(ev.terminals) == len(ev.decisions)


def test_a_run_without_the_read_side_has_empty_memory_frames(plain_run: Path) -> None:
    run = load_run(plain_run)
    assert run.evidence.empty and run.memory_events.empty and run.ope_summary.empty
    assert "decision_id" in run.evidence.decisions.columns
    assert run.card_effects().empty and run.retirements().empty
    counts = run.memory_counts()
    assert counts["source"] is None and math.isnan(counts["decisions"])
    assert card_effects(run.evidence).empty


def test_a_sweep_gets_memory_columns_for_jobs_with_a_read_side(
    read_side_run: Path, plain_run: Path, tmp_path: Path
) -> None:
    import shutil

    from gigaevo.analysis import load_sweep, varying_overrides

    shutil.copytree(plain_run, tmp_path / "0")
    shutil.copytree(read_side_run, tmp_path / "1")
    sweep = load_sweep(tmp_path).set_index("job")
    ope = load_ope_summary(read_side_run).iloc[0]
    stats = load_run(read_side_run).memory_stats["decide"]
    assert sweep.loc["1", "memory.decisions"] == stats["decisions"]
    assert sweep.loc["1", "memory.offered"] == stats["offered"]
    assert sweep.loc["1", "memory.itt_dr"] == ope["dr"]
    assert sweep.loc["1", "memory.itt_ci_high"] == ope["ci_high"]
    assert math.isnan(sweep.loc["0", "memory.decisions"])
    arms = varying_overrides(sweep)
    assert "override.memory" in arms and "override.checkpoint_dir" not in arms
