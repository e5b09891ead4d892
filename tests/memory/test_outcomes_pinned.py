"""The recorder writes a lineage row version only when a root's credited outcome is known and
has changed (memory-model.md "Delayed-lineage head": until its window matures the row is
*pending*, never zero; a new version replaces the root's previous one).

A pending root has no row in the ledger: its first version is its matured outcome. A later
version exists only when exclusive credit moved (a later root claimed the same best
descendant), and it differs from the previous one in a compared field. A new session on the
same ledger re-matures every root at start-up and writes nothing: the outcomes are the same.
Writing pending or unchanged versions would change the evidence digest V, and so refit the
heads, and count roots without an outcome in ``lineage_roots``.
"""

from __future__ import annotations

import itertools
import json
from collections import defaultdict
from pathlib import Path

import pytest

from gigaevo.memory.v2.evidence import SelectionEvidence, usefulness_eligible
from gigaevo.memory.v2.read.outcomes import _COMPARED
from tests.memory.helpers import memory_provider
from tests.memory.test_incremental_views import BUDGET, _drive


def _versions(tmp_path: Path):
    ev = SelectionEvidence(tmp_path / "run").open(censor_orphans=False)
    every = ev.lineage(latest=False)
    by_root = defaultdict(list)
    for r in every:
        by_root[r.root_decision_id].append(r)
    return ev, every, {k: sorted(v, key=lambda r: r.version) for k, v in by_root.items()}


@pytest.mark.slow  # a provider run of 30 mutants: seconds
def test_versions_are_written_only_for_known_changed_outcomes_and_not_again_on_resume(
    tmp_path: Path,
) -> None:
    mem = _drive(tmp_path, 30, seed=1)  # one claim group changes owner (a second version)
    assert mem.recorder is not None
    written = mem.recorder.stats()["lineage_versions"]
    mem.close()
    ev, every, by_root = _versions(tmp_path)
    assert written == len(every)
    assert every and all(r.status != "pending" for r in every)
    assert max(len(v) for v in by_root.values()) >= 2  # the scenario moves a credit
    for versions in by_root.values():
        assert [r.version for r in versions] == list(range(1, len(versions) + 1))
        for old, new in itertools.pairwise(versions):
            assert any(getattr(old, k) != getattr(new, k) for k in _COMPARED)
    roots = {
        o.decision.decision_id
        for o in ev.observations()
        if usefulness_eligible(o) and o.valid and o.terminal.gain is not None
    }
    assert set(by_root) < roots  # the last roots are still pending, without a row
    assert ev.counts()["lineage_roots"] == len(by_root)
    # a new session on the same ledger re-matures every root at start-up: nothing to write
    again = memory_provider(
        tmp_path,
        selection="causal",
        causal={"summary_draws": 64, "world_draws": 64, "lineage_budget": BUDGET},
        writer={"authoring_enabled": False},
    )
    assert again.recorder is not None
    assert again.recorder.stats()["lineage_versions"] == 0
    again.close()
    assert _versions(tmp_path)[1] == every


def test_the_ope_summary_names_its_estimand_and_counts_this_sessions_outcomes(
    tmp_path: Path,
) -> None:
    """``ope_summary.json`` (the report's OPE table reads it): every key the report shows, the
    estimand named as the ITT (probe) of memory-model.md "Off-policy evaluation", and the
    outcome counts of this session and of the run."""
    from gigaevo.analysis.report import OPE_KEYS

    mem = _drive(tmp_path, 6, seed=2)
    assert mem.recorder is not None
    summary = json.loads(mem.recorder.write_ope().read_text())
    mem.close()
    assert set(OPE_KEYS) <= set(summary)
    assert summary["estimand"] == "ITT (probe): offer vs withhold of the proposed card"
    assert summary["session_outcomes"] == 6
    assert summary["written_at_outcome"] == 6


def test_the_ope_columns_kept_as_arrays_give_the_summary_of_the_ledgers_rows(
    tmp_path: Path,
) -> None:
    """The OPE columns grow as numpy arrays (issue 16: a summary converted Python lists of
    every OPE row); past their first doubling, the report equals ``offer_gate_report`` of
    the ledger's OPE rows read whole, bit for bit (the ITT's clusters: each row's run and
    parent), and the run names are the rows' own."""
    import math

    import numpy as np

    from gigaevo.memory.v2.causal import offer_gate_report
    from gigaevo.memory.v2.causal.lineage import raw_feasible_interval

    mem = _drive(tmp_path, 50, seed=4)
    rec, reader = mem.recorder, mem.reader
    assert rec is not None and reader is not None
    summary = rec.ope_summary()
    rows = reader.evidence.ope_rows()
    assert rec._ope.n == len(rows) > 32  # grown past the first two capacities
    cols: dict[str, list[float]] = {k: [] for k in ("z", "y", "q1", "q0", "e")}
    for o in rows:
        d, t = o.decision, o.terminal
        lo, _ = raw_feasible_interval(reader.causal_reward, d.context.parent_fitness)
        cols["z"].append(float(d.z or 0))
        cols["y"].append(float(t.gain) if t.gain is not None else lo)
        cols["q1"].append(float(d.q1 or 0.0))
        cols["q0"].append(float(d.q0 or 0.0))
        cols["e"].append(float(d.offer or reader.settings.policy.offer_probability))
    runs = [o.decision.run_id for o in rows]
    parents = [f"{o.decision.run_id}/{o.decision.context.parent_id}" for o in rows]
    want = offer_gate_report(*cols.values(), runs, parents)
    assert want["interval_se"] == "parent" and want["n_parents"] >= 2  # type: ignore[operator]
    want = json.loads(json.dumps(want, default=float))
    got = json.loads(json.dumps({k: summary[k] for k in want}, default=float))

    def same(a: object, b: object) -> bool:  # NaN (None in the summary) aside, exact
        if isinstance(a, dict) and isinstance(b, dict):
            return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
        if isinstance(b, float) and math.isnan(b):
            return a is None
        return a == b

    assert same(got, want)
    assert summary["runs"] == sorted(set(runs)) and np.array_equal(rec._ope.z, cols["z"])
    mem.close()
