"""A retirement sweep's cheaper paths give what judging afresh gives (issue 16, session 19).

A card judged again on the same inputs (heads, V, support, controls, threshold) keeps its
last judgement (``CausalEvictor._judge``), and a head's worlds are drawn through a node table
(``projection.NodeTable``, read by ``MixtureProjector.draw``): the same random numbers in the
same order, so the same draws, verdicts, retirements and events.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from gigaevo.memory.v2.causal import BayesianLinearHead, BlockDesign, LogisticLaplaceHead
from gigaevo.memory.v2.causal.projection import (
    NODE_BINS,
    NodeTable,
    chol2x2,
    node_cdf,
)
from gigaevo.memory.v2.causal.retirement import (
    RetirementHeads,
    judge_card,
    sorted_threshold,
)
from gigaevo.memory.v2.read.events import EVENTS_FILE
from gigaevo.memory.v2.read.evictor import CausalEvictor, _reason_key
from tests.memory.causal.simulate import CARD as WORLD_CARD
from tests.memory.causal.simulate import card_world
from tests.memory.ledger_rows import fast_dir, put_card
from tests.memory.test_evictor import CARD, Run, build_run

# -- the node table --------------------------------------------------------------------


def _table(weights: np.ndarray) -> NodeTable:
    """The node table of a mixture with node ``weights``."""
    return NodeTable(node_cdf(np.asarray(weights, dtype=float)))


@pytest.mark.parametrize(
    "weights",
    [
        np.ones(1),  # one node: every uniform is node 0
        np.ones(4),  # cdf values 0.25, 0.5, 0.75, 1 exactly on bin edges
        np.array([0.0, 1.0, 0.0, 0.0, 3.0, 0.0]),  # empty nodes: repeated cdf values
        np.random.default_rng(0).random(136),  # the item-5 heads' node count
        np.random.default_rng(1).random(3 * NODE_BINS),  # more nodes than bins
        np.r_[1e-12, np.ones(5), 1e-12],  # cdf values within a bin of 0 and 1
    ],
)
def test_the_node_table_finds_the_nodes_searchsorted_finds(weights: np.ndarray) -> None:
    weights = weights / weights.sum()
    draws = _table(weights)
    cdf = node_cdf(weights)
    edges = np.arange(NODE_BINS) / NODE_BINS
    below = np.nextafter(edges[1:], 0.0)
    u = np.concatenate(
        [np.random.default_rng(2).random(50_000), edges, below, cdf[cdf < 1.0], [0.0]]
    )
    want = np.searchsorted(cdf, u, side="right")
    got = draws.nodes(u)
    assert got.dtype == want.dtype and np.array_equal(got, want)
    # and the nodes ``rng.choice`` draws from the same generator
    n = 4096
    choice = np.random.default_rng(5).choice(len(weights), size=n, p=weights)
    assert np.array_equal(draws.nodes(np.random.default_rng(5).random(n)), choice)


@pytest.mark.parametrize("block", [False, True])
def test_the_projector_draws_by_its_table_what_a_searched_fancy_gather_draws(
    block: bool,
) -> None:
    world = card_world(60, 40, np.random.default_rng(8), effect=0.03)
    space = world.space
    design: Any = world.design
    if block:
        design = BlockDesign.from_dense(world.design, space.shared_size, space.n_context)
    head = BayesianLinearHead(space.utility_prior_variance(), residual_sd_bounds=(0.01, 5.0))
    head.fit(design, world.y)
    mu, var = space.invalidity_prior()
    heads = RetirementHeads(space, head, LogisticLaplaceHead(mu, var).fit(world.design, world.d))
    projector = heads.projector(head)
    assert heads.projector(head) is projector  # kept per head

    def plain(lineage: str, z0: np.ndarray, z1: np.ndarray, rng: np.random.Generator) -> Any:
        """The draw by ``rng.choice``'s search and fancy-index gathers (the session-18 code)."""
        means, covs = projector.moments(lineage, z0, z1)
        ks = np.searchsorted(projector.node_cdf, rng.random(4096), side="right")
        xi = rng.standard_normal((4096, 2))
        roots = chol2x2(covs)
        out = means[ks]
        out[:, 0] += roots[ks, 0, 0] * xi[:, 0]
        out[:, 1] += roots[ks, 1, 0] * xi[:, 0] + roots[ks, 1, 1] * xi[:, 1]
        return out

    for i, x in enumerate(np.random.default_rng(3).uniform(-1, 1, size=(5, space.n_context))):
        x[0] = 1.0
        z0, z1 = space.row(x, 0), space.row(x, 1, WORLD_CARD, "insight", "applicable")
        want_rng, got_rng = np.random.default_rng(i), np.random.default_rng(i)
        want = plain(WORLD_CARD, z0, z1, want_rng)
        got = projector.draw(WORLD_CARD, z0, z1, 4096, got_rng)
        assert np.array_equal(got, want)
        assert got_rng.random() == want_rng.random()  # the stream read to the same point


# -- the judgement memo, over a real ledger ------------------------------------------------


def _record(ev: CausalEvictor, memo: bool) -> dict[str, str]:
    """Record every judgement of ``ev`` by card id (repr: nan == nan); without ``memo`` every
    due card is judged afresh (the memo cleared before each judgement)."""
    judge: Callable[..., Any] = ev._judge
    seen: dict[str, str] = {}

    def record(heads: Any, support: Any, key: Any) -> Any:
        if not memo:
            ev._judged.clear()
        out = judge(heads, support, key)
        seen[support.card_id] = repr(out)
        return out

    ev._judge = record  # type: ignore[method-assign]
    return seen


def _script(run: Run, memo: bool) -> dict[str, Any]:
    """Sweeps of a ledger whose V moves and then stands, and a retirement: what each sweep
    judged and left as verdicts, the ids deleted and the ``retired`` events."""
    ev = run.evictor
    seen = _record(ev, memo)
    put_card(run.store, "ins-other")  # a second supported card, kept as viable
    steps: list[tuple[dict[str, str], dict[str, Any]]] = []

    def sweep() -> None:
        seen.clear()
        verdicts = ev.sweep()
        steps.append(
            (dict(seen), {k: (v.evidence_version, v.snapshot) for k, v in verdicts.items()})
        )

    for i in range(4):
        row = run.row(z=1, parent=5.0, island=i % 2, cell=i % 3, proposed="ins-other")
        run.commit(row, y=0.02)
        if i % 2:
            sweep()  # V moved since the last sweep: judged afresh
    sweep()  # V stands: the memo's judgements
    seen.clear()
    removed = ev.run()  # and the retirement's own sweep
    steps.append((dict(seen), {}))
    lines = (run.checkpoint / EVENTS_FILE).read_text().splitlines()
    return {
        "steps": steps,
        "removed": removed,
        "retired": [  # without the event's clock
            {k: v for k, v in e.items() if k not in ("time", "ts")}
            for e in map(json.loads, lines)
            if e.get("event") == "retired"
        ],
        "reused": ev.counts.reused,
        "stats": {k: v for k, v in ev.stats().items() if k != "sweep_seconds"},
    }


def test_a_judgement_kept_for_unchanged_inputs_is_the_one_judging_afresh_gives(
    tmp_path: Path,
) -> None:
    outs = []
    for memo in (True, False):
        with fast_dir(tmp_path / str(memo)) as base:
            run = build_run(base, effect=-0.05, p_invalid=0.35)
            try:
                outs.append(_script(run, memo))
            finally:
                run.reader.evidence.close()
    kept, fresh = outs
    assert kept["reused"] == 4 and fresh["reused"] == 0  # 2 cards x the 2 sweeps at one V
    assert kept["removed"] == fresh["removed"] == [CARD]  # the harmful card retires
    assert kept["steps"] == fresh["steps"]
    assert [set(s[1]) for s in kept["steps"][:3]] == [{CARD}] * 3
    assert all(set(s[0]) == {CARD, "ins-other"} for s in kept["steps"])
    assert "viable" in kept["steps"][-1][0]["ins-other"]
    assert kept["retired"] == fresh["retired"] and kept["retired"]
    assert kept["stats"] == fresh["stats"]  # the same counts (a kept judgement counts too)


def test_a_sweeps_counts_are_judge_cards_card_by_card(tmp_path: Path) -> None:
    """The sweep gates every card once and counts a gated card as ``judge_card`` keeps it:
    its keep reasons, evaluations and verdicts are those of ``judge_card`` on each card."""
    with fast_dir(tmp_path) as base:
        run = build_run(base, effect=-0.05, p_invalid=0.35)
        try:
            for i in range(3):
                put_card(run.store, f"ins-decoy-{i}")  # no cited row: min_treated
            put_card(run.store, "ins-other")
            for i in range(4):
                row = run.row(z=1, parent=5.0, island=i % 2, cell=i % 3, proposed="ins-other")
                run.commit(row, y=0.02)
            ev = run.evictor
            verdicts = ev.sweep()
            heads = ev._heads[1] if ev._heads else None
            assert heads is not None
            controls, _ = ev._rows()
            pending = ev.pending_by_proposal()
            cfg = ev.config
            theta = sorted_threshold(
                ev._magnitudes, cfg.min_global_control, cfg.practical_effect_quantile
            )
            reasons: Counter[str] = Counter()
            retire, evaluations = set(), 0
            for card in sorted(run.store.cards(task_key="toy"), key=lambda c: c.id):
                out = judge_card(
                    heads,
                    ev.support(card, pending),
                    n_controls=len(controls),
                    theta=theta,
                    evidence_version=ev.version,
                    cfg=cfg,
                )
                evaluations += len(out.evaluations)
                if out.retire:
                    retire.add(card.id)
                else:
                    reasons[_reason_key(out.reason)] += 1
        finally:
            run.reader.evidence.close()
    assert set(verdicts) == retire == {CARD}
    assert ev.counts.keep_reasons == reasons == Counter(min_treated=3, viable=1)
    assert ev.counts.evaluations == evaluations and ev.counts.judged == 5
