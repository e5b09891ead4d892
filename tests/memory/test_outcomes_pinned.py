"""The reader's outcome recording pinned where a mutation run found it unchecked (issue 19:
the survivors of ``read/outcomes.py``'s mutation sample)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from gigaevo.memory.base import MutationContext
from gigaevo.memory.v2.evidence.queries import ope_eligible
from tests.memory.helpers import memory_provider, result
from tests.memory.ledger_rows import put_card


def test_an_outcome_observed_twice_is_stored_once_and_says_why_in_the_log(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    mem = memory_provider(tmp_path, selection="causal")
    assert mem.reader is not None
    mem.decide(MutationContext("toy", 0, "parent-0", 5.0, 0, (0,), (0.5,), 0.0))
    with caplog.at_level(logging.INFO, logger="gigaevo.memory.v2.read.outcomes"):
        mem.observe(result(0, scope="f0"))
        mem.observe(result(0, scope="f0"))  # a resumed engine observes the attempt again
        mem.close()
    said = [
        r.getMessage()
        for r in caplog.records
        if r.name == "gigaevo.memory.v2.read.outcomes" and r.levelno == logging.INFO
    ]
    assert said == ["memory v2: edge 'child-0' already recorded"]


def test_an_outcome_of_an_attempt_without_a_decision_is_recorded_as_an_edge(
    tmp_path: Path,
) -> None:
    # attempt 0 decided, attempt 1 never was (no decision row): its child is still an edge
    mem = memory_provider(tmp_path, selection="causal")
    assert mem.reader is not None
    mem.decide(MutationContext("toy", 0, "parent-0", 5.0, 0, (0,), (0.5,), 0.0))
    mem.observe(result(0, scope="f0"))
    mem.observe(result(1, scope="f1"))
    edge = mem.reader.evidence.edge("child-1")
    assert edge is not None and edge.decision_id is None
    assert mem.reader.evidence.edge("child-0") is not None
    mem.close()


def test_an_outcome_that_contradicts_its_decision_is_stored_censored_and_counted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # a child five metric spans above its parent: no gain the decision's reward allows, so
    # the terminal is kept as censored with the reason, counted and logged, never stored as
    # a gain (and the run goes on)
    mem = memory_provider(tmp_path, selection="causal")
    assert mem.reader is not None and mem.recorder is not None
    mem.decide(MutationContext("toy", 0, "parent-0", 5.0, 0, (0,), (0.5,), 0.0))
    with caplog.at_level(logging.WARNING, logger="gigaevo.memory.v2.read.outcomes"):
        mem.observe(result(0, scope="f0", gain=5.0))
    (terminal,) = mem.reader.evidence.terminals()
    assert terminal.status == "censored" and terminal.gain is None
    assert terminal.censor_reason is not None
    assert terminal.censor_reason.startswith("rejected: ")
    assert "outside the feasible" in terminal.censor_reason
    assert any("terminal rejected, censoring" in r.getMessage() for r in caplog.records)
    assert mem.recorder.rejected == 1
    stats = mem.recorder.stats()  # what memory_stats.json adds up over sessions
    assert (stats["outcomes"], stats["terminals_rejected"]) == (1, 1)
    mem.close()


def test_the_ope_summary_names_its_units_and_lineage_roots(tmp_path: Path) -> None:
    # the keys a notebook reads from ope_summary.json, spelled as memory-model.md has them
    mem = memory_provider(tmp_path, selection="causal")
    assert mem.reader is not None and mem.recorder is not None
    mem.decide(MutationContext("toy", 0, "parent-0", 5.0, 0, (0,), (0.5,), 0.0))
    mem.observe(result(0, scope="f0"))
    summary = mem.recorder.ope_summary()
    assert summary["units"] == "raw oriented gain (invalid rows: R * G-)"
    assert summary["lineage_roots"] == mem.reader.evidence.counts()["lineage_roots"]
    written = json.loads(mem.recorder.write_ope().read_text())
    assert {"units", "lineage_roots", "estimand", "evidence_version"} <= written.keys()
    mem.close()


def test_the_ope_summary_counts_each_arm_from_the_ledger(tmp_path: Path) -> None:
    mem = memory_provider(tmp_path, selection="causal", writer={"authoring_enabled": False})
    assert mem.reader is not None and mem.recorder is not None
    for cid in ("ins-a", "ins-b", "ins-c"):
        put_card(mem.store, cid)
    for a in range(16):
        ctx = MutationContext("toy", a, f"parent-{a}", 5.0, 0, (a % 3,), (0.5,), 0.0)
        mem.decide(ctx)
        mem.observe(result(a, scope=f"f{a % 4}", valid=a % 5 != 4, gain=0.01 * (a % 3)))
    want = {arm: {"n": 0, "valid": 0, "invalid": 0} for arm in ("treated", "control")}
    for obs in mem.reader.evidence.observations():
        if ope_eligible(obs):
            arm = want["treated" if obs.z == 1 else "control"]
            arm["n"] += 1
            arm["valid"] += int(obs.valid)
            arm["invalid"] += int(obs.invalid)
    # several valid rows in one arm and rows in both (else the counts would prove little)
    assert max(a["valid"] for a in want.values()) >= 2 and min(a["n"] for a in want.values())
    got = mem.recorder.ope_summary()["arms"]
    assert {arm: {k: got[arm][k] for k in ("n", "valid", "invalid")} for arm in got} == want
    mem.close()
