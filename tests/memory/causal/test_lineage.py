"""Ground truth 8 (memory-model.md "Ground-truth tests" (8), "Worked example" (step 6) and
"Delayed-lineage head"): delayed-lineage outcomes and exclusive credit."""

from __future__ import annotations

import pytest

from gigaevo.memory.v2.causal import (
    GainOutOfBoundsError,
    LineageEdge,
    LineageOutcome,
    LineageRoot,
    RewardDefinition,
    archive_disposition,
    assign_credit,
    lineage_outcomes,
    raw_feasible_interval,
    root_outcome,
)

REWARD = RewardDefinition(0.0, 1.0)
FEASIBLE = raw_feasible_interval(REWARD, 0.80)  # (-0.80, +0.20)


def _edge(
    parent: str,
    child: str,
    ordinal: int,
    gain: float | None = 0.0,
    disposition: str = "accepted",
    status: str = "valid",
    island: int = 0,
) -> LineageEdge:
    return LineageEdge(parent, child, island, ordinal, status, gain, disposition)  # type: ignore[arg-type]


def _root(
    decision: str = "dA", child: str = "r", ordinal: int = 1, gain: float = 0.03
) -> LineageRoot:
    return LineageRoot(decision, child, 0, ordinal, gain, FEASIBLE)


def _fillers(first: int, last: int, island: int = 0) -> list[LineageEdge]:
    """Unrelated same-island edges (rejected children of another parent)."""
    return [
        _edge("other", f"f{i}-{island}", i, -0.01, "rejected", island=island)
        for i in range(first, last + 1)
    ]


def _example(extra: tuple[LineageEdge, ...] = (), fill_to: int = 33) -> list[LineageEdge]:
    """Section 10 step 5: root child 0.83 -> c2 (+0.05, depth 2) -> c3 (-0.02, depth 3)."""
    core = [
        _edge("p", "r", 1, 0.03),
        _edge("r", "c2", 2, 0.05),
        _edge("c2", "c3", 3, -0.02),
    ]
    return core + _fillers(4, fill_to) + list(extra)


def _one(edges: list[LineageEdge], **kwargs: int) -> LineageOutcome:
    (out,) = lineage_outcomes([_root()], edges, **kwargs)
    return out


def test_section_10_topology() -> None:
    out = _one(_example())
    assert out.status == "outcome"
    assert out.maturity_ordinal == 33  # the 32nd island edge after ordinal 1
    assert out.best_descendant_id == "c2"
    assert out.best_depth == 2
    assert out.best_gain == pytest.approx(0.08)
    assert out.residual == pytest.approx(0.05)
    assert (out.residual or 0.0) / REWARD.range == pytest.approx(0.05)
    assert out.credit_owner == "dA"
    assert not out.structural_zero
    assert (out.depth, out.budget) == (3, 32)


def test_fewer_than_budget_edges_is_pending() -> None:
    out = _one(_example(fill_to=32))  # only 31 later edges
    assert out.status == "pending"
    assert out.maturity_ordinal is None
    assert out.residual is None


@pytest.mark.parametrize(
    "unresolved",
    [
        _edge("other", "u", 20, None, "none", status="pending"),
        _edge("other", "u", 20, 0.01, "none"),  # valid but not yet disposed by the archive
    ],
)
def test_unresolved_edge_in_window_keeps_pending(unresolved: LineageEdge) -> None:
    edges = [e for e in _example() if e.ordinal != 20] + [unresolved]
    out = _one(edges)
    assert out.status == "pending"
    assert out.maturity_ordinal == 33


def test_unresolved_edge_after_maturity_is_ignored() -> None:
    out = _one(_example((_edge("c2", "late", 34, None, "none", status="pending"),)))
    assert out.status == "outcome"
    assert out.residual == pytest.approx(0.05)


def test_invalid_and_censored_edges_need_no_disposition() -> None:
    edges = [e for e in _example() if e.ordinal not in (20, 21)]
    edges += [
        _edge("other", "i", 20, None, "none", status="invalid"),
        _edge("other", "k", 21, None, "none", status="censored"),
    ]
    assert _one(edges).status == "outcome"  # unreachable censored edge does not censor


def test_reachable_censored_edge_censors() -> None:
    out = _one(_example((_edge("c2", "cx", 10, None, "none", status="censored"),)))
    assert out.status == "censored"
    assert out.residual is None
    assert "cx" in (out.censor_reason or "")


def test_invalid_edges_counted_not_expanded() -> None:
    extra = (
        _edge("r", "bad", 5, None, "none", status="invalid"),
        _edge("c2", "bad2", 6, None, "none", status="invalid"),
        _edge("bad", "big", 7, 0.10),  # below an invalid edge: never scanned
    )
    out = _one(_example(extra))
    assert out.invalid_edges == 2
    assert out.best_descendant_id == "c2"
    assert out.residual == pytest.approx(0.05)


def test_other_islands_ignored() -> None:
    extra = (_edge("c2", "x", 5, 0.10, island=1),)
    assert _one(_example(extra)).best_descendant_id == "c2"
    # other-island edges do not count towards the opportunity budget either
    out = _one(_example(extra, fill_to=32) + _fillers(1, 40, island=1))
    assert out.status == "pending"


def test_edges_after_maturity_ignored() -> None:
    edges = _example((_edge("c2", "late", 34, 0.10),))
    assert _one(edges).best_descendant_id == "c2"
    out = _one(edges + _fillers(35, 40), budget=33)  # maturity moves to 34
    assert out.best_descendant_id == "late"
    assert out.best_gain == pytest.approx(0.18)


def test_depth_limit() -> None:
    edges = _example((_edge("c3", "c4", 5, 0.10),))  # depth 4, cumulative 0.16
    assert _one(edges).best_descendant_id == "c2"
    deep = _one(edges, depth=4)
    assert (deep.best_descendant_id, deep.best_depth) == ("c4", 4)
    assert deep.residual == pytest.approx(0.13)
    shallow = _one(edges, depth=1)
    assert (shallow.best_descendant_id, shallow.best_depth) == ("r", 1)
    assert shallow.residual == 0.0


def test_residual_never_negative_and_only_accepted_descendants_count() -> None:
    edges = [
        _edge("p", "r", 1, 0.03),
        _edge("r", "worse", 2, -0.05),
        _edge("r", "rej", 3, 0.10, "rejected"),  # rejected: not a best candidate, still expanded
        _edge("rej", "kid", 4, -0.04),  # accepted, cumulative 0.09
        *_fillers(5, 33),
    ]
    out = _one(edges)
    assert out.best_descendant_id == "kid"
    assert out.best_gain == pytest.approx(0.09)
    no_gain = _one([e for e in edges if e.child_id != "kid"] + [_edge("x", "y", 4)])
    assert (no_gain.best_descendant_id, no_gain.best_depth) == ("r", 1)
    assert no_gain.residual == 0.0
    assert no_gain.credit_owner is None


def test_out_of_interval_cumulative_gain_censors() -> None:
    out = _one(_example((_edge("c2", "c5", 5, 0.15),)))  # cumulative 0.23 > G+ = 0.20
    assert out.status == "censored"
    assert "outside feasible" in (out.censor_reason or "")


def test_shared_breakthrough_owned_by_closest_root() -> None:
    edges = [
        _edge("p", "r", 1, 0.03),
        _edge("r", "m", 2, 0.01),
        _edge("m", "br", 3, 0.10),
        *_fillers(4, 40),
    ]
    roots = [_root("dA", "r", 1, 0.03), _root("dB", "m", 2, 0.01)]
    a, b = lineage_outcomes(roots, edges)
    assert (a.best_descendant_id, a.best_depth) == ("br", 3)
    assert (b.best_descendant_id, b.best_depth) == ("br", 2)
    assert b.residual == pytest.approx(0.10)
    assert b.credit_owner == "dB" and not b.structural_zero
    assert a.status == "outcome" and a.residual == 0.0
    assert a.structural_zero and a.credit_owner == "dB"
    # alone, root A would have claimed it
    (alone,) = lineage_outcomes(roots[:1], edges)
    assert alone.residual == pytest.approx(0.11)


def _claim(decision: str, depth: int) -> LineageOutcome:
    return LineageOutcome(
        decision, "outcome", 3, 32, 40, "br", depth, 0.1, 0.05, credit_owner=decision
    )


def test_credit_ties_latest_root_then_smaller_id() -> None:
    roots = [_root("d1", "a", 1), _root("d2", "b", 5), _root("d0", "c", 5)]
    claims = [_claim("d1", 2), _claim("d2", 2), _claim("d0", 2)]
    out = assign_credit(roots, claims)
    assert [o.residual for o in out] == [0.0, 0.0, 0.05]
    assert {o.credit_owner for o in out} == {"d0"}
    closer = assign_credit(roots, [_claim("d1", 1), _claim("d2", 2), _claim("d0", 2)])
    assert [o.structural_zero for o in closer] == [False, True, True]


def test_root_validation_and_invalid_root() -> None:
    with pytest.raises(GainOutOfBoundsError):
        _root(gain=0.25)
    with pytest.raises(ValueError, match="distinct"):
        lineage_outcomes([_root(), _root()], _example())
    edges = [_edge("p", "r", 1, None, "none", status="invalid"), *_fillers(2, 40)]
    assert root_outcome(_root(), edges).status == "invalid"
    with pytest.raises(ValueError):
        root_outcome(_root(), edges, depth=0)


def test_archive_disposition() -> None:
    assert archive_disposition("new_cell") == "accepted"
    assert archive_disposition("improved") == "accepted"
    assert archive_disposition("rejected") == "rejected"
    assert archive_disposition(None) == "none"


def _reference_outcome(root: LineageRoot, edges, depth: int, budget: int) -> LineageOutcome:
    """Section 4.1 read literally, O(E) per root: the reference for the indexed scan."""
    from collections import deque
    from dataclasses import replace

    base = LineageOutcome(root.decision_id, "pending", depth, budget)
    mine = [e for e in edges if e.island == root.island]
    root_edge = next((e for e in mine if e.child_id == root.child_id), None)
    if root_edge is not None and root_edge.status in ("invalid", "censored"):
        status = root_edge.status
        reason = "censored root edge" if status == "censored" else None
        return replace(base, status=status, censor_reason=reason)
    later = sorted(e.ordinal for e in mine if e.ordinal > root.ordinal)
    if len(later) < budget:
        return base
    maturity = later[budget - 1]
    base = replace(base, maturity_ordinal=maturity)
    if not all(e.resolved for e in mine if root.ordinal < e.ordinal <= maturity):
        return base
    kids: dict[str, list[LineageEdge]] = {}
    for e in mine:
        if e.ordinal <= maturity:
            kids.setdefault(e.parent_id, []).append(e)
    best, invalid = (root.direct_gain, root.child_id, 1), 0
    frontier, seen = deque([(root.child_id, 1, root.direct_gain)]), {root.child_id}
    while frontier:
        node, d, cumulative = frontier.popleft()
        if d >= depth:
            continue
        for e in sorted(kids.get(node, ()), key=lambda e: (e.ordinal, e.child_id)):
            if e.status == "censored":
                return replace(base, status="censored", censor_reason=f"censored edge {e.child_id}")
            if not e.resolved:
                return replace(base, status="pending", invalid_edges=invalid)
            if e.status == "invalid":
                invalid += 1
                continue
            if e.child_id in seen:
                continue
            seen.add(e.child_id)
            total = cumulative + e.gain
            if not root.contains(total):
                reason = f"cumulative gain {total} at {e.child_id} outside feasible {root.feasible}"
                return replace(base, status="censored", censor_reason=reason)
            total = root.clamp(total)
            if e.disposition == "accepted" and total > best[0]:
                best = (total, e.child_id, d + 1)
            frontier.append((e.child_id, d + 1, total))
    gain, descendant, best_depth = best
    residual = max(0.0, gain - root.direct_gain)
    return replace(
        base, status="outcome", best_descendant_id=descendant, best_depth=best_depth,
        best_gain=gain, residual=residual,
        credit_owner=root.decision_id if residual > 0 else None, invalid_edges=invalid,
    )  # fmt: skip


def _random_run(rng, n_edges: int, islands: int):
    edges, ids, ordinals, roots = [], ["seed"], dict.fromkeys(range(islands), 0), []
    for k in range(n_edges):
        island = int(rng.integers(islands))
        ordinals[island] += 1
        status = str(
            rng.choice(["valid", "invalid", "censored", "pending"], p=[0.8, 0.1, 0.05, 0.05])
        )
        gain = float(rng.normal(0, 0.05)) if status == "valid" else None
        disposition = str(rng.choice(["accepted", "rejected", "none"], p=[0.5, 0.4, 0.1]))
        edge = LineageEdge(
            ids[int(rng.integers(len(ids)))], f"c{k}", island, ordinals[island], status,  # type: ignore[arg-type]
            gain, disposition if status == "valid" else "none",  # type: ignore[arg-type]
        )  # fmt: skip
        edges.append(edge)
        ids.append(edge.child_id)
        if status == "valid" and rng.random() < 0.5:
            roots.append(
                LineageRoot(f"d{k}", edge.child_id, island, edge.ordinal, gain, (-1.0, 1.0))
            )
    return roots, edges


def test_indexed_scan_equals_the_literal_reading_on_random_runs() -> None:
    import numpy as np

    rng = np.random.default_rng(8)
    compared = 0
    for _ in range(150):
        roots, edges = _random_run(rng, int(rng.integers(1, 70)), int(rng.integers(1, 3)))
        for depth, budget in ((3, 4), (2, 1), (3, 32)):
            want = [_reference_outcome(r, edges, depth, budget) for r in roots]
            assert list(lineage_outcomes(roots, edges, depth, budget)) == list(
                assign_credit(roots, want)
            )
            compared += len(roots)
    assert compared > 1000


def test_extending_the_island_index_equals_building_it_at_once() -> None:
    import numpy as np

    from gigaevo.memory.v2.causal.lineage import extend_index, island_index

    rng = np.random.default_rng(9)
    roots, edges = _random_run(rng, 80, 2)
    shuffled = list(edges)
    shuffled[10], shuffled[30] = shuffled[30], shuffled[10]  # one edge out of ordinal order
    index: dict = {}
    rebuilt = set()
    for start in range(0, len(shuffled), 7):
        rebuilt |= extend_index(index, shuffled[start : start + 7])
    assert rebuilt  # the late edge forced a rebuild of its island
    whole = island_index(shuffled)
    for root in roots:
        assert root_outcome(root, index[root.island], 3, 4) == root_outcome(
            root, whole[root.island], 3, 4
        )


# -- validation, the tolerance of the feasible interval, the censored root (issue 19) ------


def test_edges_and_roots_are_validated() -> None:
    for gain in (None, float("inf"), float("nan")):
        with pytest.raises(ValueError, match="needs a finite gain"):
            _edge("p", "x", 1, gain)
    assert _edge("p", "x", 1, None, status="invalid").gain is None
    for feasible in ((0.2, -0.8), (float("-inf"), 0.2), (-0.8, float("nan"))):
        with pytest.raises(ValueError, match="bad feasible interval"):
            LineageRoot("d", "r", 0, 1, 0.0, feasible)
    root = LineageRoot("d", "r", 0, 1, 0.2 + 5e-10, FEASIBLE)  # within 1e-9 of G+: accepted
    assert root.contains(0.2 + 9e-10) and not root.contains(0.2 + 2e-9)
    assert root.contains(-0.8 - 9e-10) and not root.contains(-0.8 - 2e-9)
    assert not root.contains(float("nan"))
    assert (root.clamp(0.3), root.clamp(-0.9), root.clamp(0.1)) == (FEASIBLE[1], FEASIBLE[0], 0.1)


def test_a_cumulative_gain_within_the_tolerance_is_clamped_not_censored() -> None:
    # 0.03 + 0.17 + 5e-10 lies 5e-10 above G+ = 0.20: clamped to 0.20, not censored
    out = _one(_example((_edge("c2", "top", 5, 0.12 + 5e-10),)))
    assert out.status == "outcome" and out.best_descendant_id == "top"
    assert out.best_gain == FEASIBLE[1] and out.best_depth == 3  # clamped to G+ exactly
    assert out.residual == pytest.approx(0.17)


def test_a_censored_root_edge_censors_the_row() -> None:
    edges = [_edge("p", "r", 1, None, "none", status="censored"), *_fillers(2, 40)]
    out = root_outcome(_root(), edges)
    assert out.status == "censored" and out.censor_reason == "censored root edge"
    assert out.residual is None


def test_depth_and_budget_must_be_at_least_one() -> None:
    for depth, budget in ((0, 32), (3, 0), (-1, -1)):
        with pytest.raises(ValueError, match="must be >= 1"):
            root_outcome(_root(), _example(), depth=depth, budget=budget)
    one = root_outcome(_root(), _example(), depth=1, budget=1)
    # budget 1: the first island edge after the root (ordinal 2) fixes maturity
    assert one.status == "outcome" and one.maturity_ordinal == 2


def test_every_accepting_archive_status_counts() -> None:
    assert archive_disposition("accepted") == "accepted"
    assert archive_disposition("anything else") == "rejected"


def test_an_unresolved_child_recorded_before_the_root_keeps_the_row_pending() -> None:
    """Inconsistent ordinals (a child of the root child completed before the root edge) are
    outside the maturity window's check; the scan still answers pending instead of
    raising, since one inconsistent edge must not stop the provider."""
    out = _one(_example((_edge("r", "early", 0, None, "none", status="pending"),)))
    assert out.status == "pending" and out.maturity_ordinal == 33
    assert out.residual is None
