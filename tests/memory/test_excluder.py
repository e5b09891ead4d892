"""``memory/excluder``: a card cited on the parent or an ancestor is never proposed again.

Ancestry and citations come from the causal ledger (mutation edges and frozen terminal
cited sets), so they survive a resume; ``excluder=none`` is the ablation.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest

from gigaevo.memory.v2.evidence import DecisionRow
from gigaevo.memory.v2.read.reader import CausalReader, ReaderSettings
from gigaevo.memory.v2.settings import ExcluderSettings
from gigaevo.pipeline.build import build_run
from tests.conftest import compose_config
from tests.memory.helpers import open_store, runtime
from tests.memory.ledger_rows import (
    context,
    decision,
    edge,
    fast_dir,
    lineage,
    observe,
    put_card,
)

X = (1.0, 0.0, 0.5, 0.0)


@pytest.fixture
def scratch(tmp_path: Path) -> Iterator[Path]:
    with fast_dir(tmp_path) as path:
        yield path


def _reader(
    path: Path, kind: str = "lineage", max_depth: int | None = None, release: bool = False
) -> CausalReader:
    rt = runtime(path)
    excluder = ExcluderSettings(kind=kind, max_depth=max_depth, release_matured=release)  # type: ignore[arg-type]
    settings = ReaderSettings(excluder=excluder)
    return CausalReader(rt, open_store(rt.bank_dir), run_id="run-test", settings=settings)


def _family(reader: CausalReader) -> list[DecisionRow]:
    """Bank A, B (absorbed "B-old") and C; the ledger's family tree::

    seed -> G   (cites A)          grandparent
    G    -> P   (cites B-old)      parent
    G    -> S   (cites C)          the parent's sibling
    P    -> Q   (A delivered, uncited; then a withheld control)
    """
    for cid, aliases in (("A", ()), ("B", ("B-old",)), ("C", ())):
        put_card(reader.store, cid, aliases)
    plan = [
        ("seed", "G", "A", 1, True),
        ("G", "P", "B-old", 1, True),
        ("G", "S", "C", 1, True),
        ("P", "Q", "A", 1, False),
    ]
    rows = []
    for attempt, (parent, child, card, z, cited) in enumerate(plan):
        row = decision(reader, attempt, X, proposed=card, z=z, parent_id=parent)
        observe(reader, row, gain=0.0, cited=cited, child_id=child)
        edge(reader, parent, child, row)
        rows.append(row)
    return rows


def _drafts(reader: CausalReader, parent: str, n: int = 40) -> list[DecisionRow]:
    return [reader.draft(context(100 + a, parent_id=parent, coordinate=a / n)) for a in range(n)]


def test_cards_cited_on_ancestors_are_never_proposed(scratch: Path) -> None:
    reader = _reader(scratch)
    _family(reader)
    # a child of P: A was cited on its grandparent G, B (through its alias) on P itself
    rows = _drafts(reader, "P")
    assert {r.excluded_ids for r in rows} == {("A", "B")}
    assert all(r.proposed_id == "C" for r in rows if not r.abstain)
    assert all({c.card_id for c in r.candidates} <= {"C"} for r in rows)
    assert any(not r.abstain for r in rows)
    # the sibling's citation is not on P's ancestry; an uncited delivery is not applied
    assert reader.excluded("Q", reader.draft(context(1)).universe) == {"A", "B"}
    assert reader.excluded("S", reader.draft(context(2)).universe) == {"A", "C"}
    assert reader.excluded("seed", reader.draft(context(3)).universe) == frozenset()
    assert reader.excluded("unknown-program", reader.draft(context(4)).universe) == frozenset()


def test_excluder_none_allows_the_grandparents_card(scratch: Path) -> None:
    reader = _reader(scratch, "none")
    _family(reader)
    rows = _drafts(reader, "P")
    assert {r.excluded_ids for r in rows} == {()}
    proposed = {r.proposed_id for r in rows if not r.abstain}
    assert "A" in proposed and "B" in proposed


@pytest.mark.parametrize(("depth", "excluded"), [(1, {"B"}), (2, {"A", "B"}), (9, {"A", "B"})])
def test_max_depth_bounds_the_ancestry(scratch: Path, depth: int, excluded: set[str]) -> None:
    reader = _reader(scratch, max_depth=depth)
    _family(reader)
    universe = reader.draft(context(1)).universe
    assert reader.excluded("P", universe) == excluded
    # the memo of unbounded walks never leaks into a bounded one (and back)
    assert reader.evidence.applied_cards("P") == {"A", "B-old"}
    assert reader.excluded("P", universe) == excluded


def test_release_matured_frees_a_card_once_its_use_has_matured(scratch: Path) -> None:
    """A citation whose lineage window is still open excludes its card; once the delayed
    head has the root's row (the credit is final) it no longer does, with
    ``release_matured`` only."""
    reader = _reader(scratch, release=True)
    rows = _family(reader)
    universe = reader.draft(context(1)).universe
    assert reader.excluded("P", universe) == {"A", "B"}
    lineage(reader, rows[0], None, status="pending")  # G's window (A) still open
    assert reader.excluded("P", universe) == {"A", "B"}
    lineage(reader, rows[0], 0.0, version=2)  # ... now matured
    assert reader.excluded("P", universe) == {"B"}
    assert reader.excluded("Q", universe) == {"B"}
    assert {r.excluded_ids for r in _drafts(reader, "P", 5)} == {("B",)}
    lineage(reader, rows[1], 0.0)  # P's own window (B) matures too
    assert reader.excluded("P", universe) == frozenset()
    # the default keeps every citation of the ancestry, matured or not
    reader.evidence.close()
    assert _reader(scratch).excluded("P", universe) == {"A", "B"}


def test_exclusions_are_committed_and_survive_a_resume(scratch: Path) -> None:
    reader = _reader(scratch)
    _family(reader)
    reader.decide(context(50, parent_id="P"))
    stored = reader.evidence.decision(reader.draft(context(50, parent_id="P")).decision_id)
    assert stored is not None and stored.excluded_ids == ("A", "B")
    reader.evidence.close()
    resumed = _reader(scratch)  # a new process over the same checkpoint and bank
    assert all(r.excluded_ids == ("A", "B") for r in _drafts(resumed, "P", 5))


def test_a_decision_row_refuses_to_propose_an_excluded_card(scratch: Path) -> None:
    reader = _reader(scratch)
    row = decision(reader, 0, X, proposed="A", z=1)
    with pytest.raises(ValueError, match="'A' was excluded"):
        dataclasses.replace(row, excluded_ids=("A",))
    assert dataclasses.replace(row, excluded_ids=("B",)).excluded_ids == ("B",)


@pytest.mark.parametrize("option", ["lineage", "none"])
def test_each_excluder_option_reaches_the_reader(option: str, tmp_path: Path) -> None:
    cfg = compose_config(
        ["memory=v2", f"memory/excluder={option}", f"checkpoint_dir={tmp_path}", "max_mutants=1"]
    )
    built = build_run(cfg, show_progress=False)
    try:
        reader = built.memory.reader  # type: ignore[attr-defined]
        assert reader.settings.excluder.kind == option
    finally:
        built.close()


def test_default_excluder_is_lineage(tmp_path: Path) -> None:
    cfg = compose_config(["memory=v2", f"checkpoint_dir={tmp_path}"])
    assert cfg.memory.excluder.kind == "lineage"


@pytest.mark.slow
def test_a_real_run_never_proposes_a_card_applied_to_the_ancestry(tmp_path: Path) -> None:
    from gigaevo.memory.v2.evidence import SelectionEvidence
    from gigaevo.pipeline.build import run_from_config

    cfg = compose_config(
        [
            "problem=rastrigin",
            "max_mutants=40",
            f"checkpoint_dir={tmp_path}",
            "progress=false",
            "evaluator.max_workers=1",
            "memory=v2",
            "pipeline=memory_guided",
        ]
    )
    depth = cfg.memory.excluder.max_depth
    assert depth == cfg.memory.causal.lineage_depth == 3  # the default: the lineage window
    run_from_config(cfg, show_progress=False)
    with SelectionEvidence(tmp_path).open(censor_orphans=False) as ev:
        decisions = ev.decisions()
        cited = sum(1 for t in ev.terminals() if t.cited_ids)
        for d in decisions:
            applied = ev.applied_cards(d.context.parent_id, max_depth=depth)
            expected = {s.card_id for s in d.universe if s.lineage_ids & applied}
            assert set(d.excluded_ids) == expected, d.attempt
            if d.proposed_id is not None:
                snap = d.snapshot(d.proposed_id)
                assert snap is not None and not (snap.lineage_ids & applied)
    assert cited, "the offline mutator cited no card: the run exercises nothing"
    assert any(d.excluded_ids for d in decisions), "no decision had an applied ancestor card"


def test_memoised_ancestry_matches_a_fresh_walk(scratch: Path) -> None:
    from gigaevo.memory.v2.evidence import SelectionEvidence

    reader = _reader(scratch)
    prev = "seed"
    for i in range(30):  # a chain; node 5 cites A, node 20 cites B
        card = "B" if i == 20 else "A"
        row = decision(reader, i, X, proposed=card, z=1, parent_id=prev)
        observe(reader, row, gain=0.0, cited=i in (5, 20), child_id=f"n{i}")
        edge(reader, prev, f"n{i}", row)
        prev = f"n{i}"
    ev = reader.evidence
    want = {"n29": {"A", "B"}, "n20": {"A", "B"}, "n19": {"A"}, "n5": {"A"}, "n4": set()}
    assert {k: set(ev.applied_cards(k)) for k in want} == want  # deepest first: memoised
    fresh = SelectionEvidence(reader.runtime.checkpoint_dir).open(censor_orphans=False)
    assert {k: set(fresh.applied_cards(k)) for k in reversed(want)} == want  # shallowest first
    fresh.close()
