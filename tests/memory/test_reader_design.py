"""The reader builds wide designs in block form directly, equal to splitting the dense design."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np

from gigaevo.memory.v2.causal import BlockDesign
from gigaevo.memory.v2.causal.arrowhead import DENSE_MAX_SIZE

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_decision_latency.py"


def _bench():
    spec = importlib.util.spec_from_file_location("bench_decision_latency", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses resolve annotations through it
    spec.loader.exec_module(module)
    return module


def test_block_design_equals_the_split_dense_design(tmp_path: Path) -> None:
    setup, counts = _bench().build(tmp_path, 30, 240)
    assert counts["cited"] and counts["control"]
    reader = setup.reader
    setup.decide()
    fit = reader._fit[1]
    space = fit.space
    assert space.size > DENSE_MAX_SIZE
    cards = list(reader.store.cards(task_key="toy"))
    alias = {a: c.id for c in cards for a in (c.id, *c.aliases)}
    rows = reader.evidence.head_rows("invalidity")
    assert len(rows) > 50
    got = reader._design(space, rows, alias)
    dense = np.array([reader._design_row(space, o, alias) for o in rows])
    want = BlockDesign.from_dense(dense, space.shared_size, space.n_context)
    assert isinstance(got, BlockDesign)
    assert np.any(got.lineage >= 0) and np.any(got.lineage < 0)
    for name in ("shared", "lineage", "lineage_part"):
        np.testing.assert_array_equal(getattr(got, name), getattr(want, name))
    assert got.n_lineages == want.n_lineages
    np.testing.assert_array_equal(got.to_dense(), dense)
