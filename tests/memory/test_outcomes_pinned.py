"""The recorder writes a lineage row only when a root's outcome is known (memory-model.md
"Delayed-lineage head": until its window matures the row is *pending*, never zero).

A pending root has no row in the ledger: its first version is its matured (or censored)
outcome, and since a matured window never changes (per-island ordinals are assigned in
commit order, so no edge lands inside a closed window) each root has exactly one version.
Writing pending versions would change the evidence digest V, and so refit the heads, on
every new root, and would count roots that have no outcome in ``lineage_roots``.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from gigaevo.memory.v2.evidence import SelectionEvidence, usefulness_eligible
from tests.memory.test_incremental_views import _drive


def test_only_known_outcomes_are_written_and_each_root_once(tmp_path: Path) -> None:
    mem = _drive(tmp_path, 24, seed=5)
    assert mem.reader is not None and mem.recorder is not None
    fresh = SelectionEvidence(mem.reader.evidence.path.parent).open(censor_orphans=False)
    every = fresh.lineage(latest=False)
    assert every, "the scenario must mature some roots"
    assert all(r.status != "pending" for r in every)
    assert all(r.version == 1 for r in every)
    assert Counter(r.root_decision_id for r in every).most_common(1)[0][1] == 1
    assert mem.recorder.stats()["lineage_versions"] == len(every)
    # and some roots are still pending, without a row
    roots = {
        o.decision.decision_id
        for o in fresh.observations()
        if usefulness_eligible(o) and o.valid and o.terminal.gain is not None
    }
    written = {r.root_decision_id for r in every}
    assert written < roots
    assert fresh.counts()["lineage_roots"] == len(written)
    mem.close()
