"""The ITT DR's parent-clustered SE against known truth (memory-model.md "Off-policy
evaluation").

A synthetic offer world not shaped like the memory's model: parents g = 1..G, each with a
skewed level a_g (centred exponential) and its own offer effect tau_g = TAU + s_g
(s_g ~ Laplace), k_g rows (1 + Poisson(4)) per parent, offer probability 0.7, and per-row
noise from a t distribution with 5 degrees of freedom. The estimand is the population ITT
TAU (the mean of tau over parents): rows of one parent share a_g and tau_g, so they are not
independent units. q-hats are deliberately poor (a constant guess), which leaves psi
unbiased (e is known) but carries the parent level into every psi of that parent.
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from gigaevo.memory.v2.causal import itt_summary, offer_gate_report
from gigaevo.memory.v2.causal.ope import clustered_se, itt_scores

TAU = 0.05
E = 0.7
REPLICATES = 600
PARENTS = 80


def world(rng: np.random.Generator, parents: int, *, shared: bool = True) -> tuple[np.ndarray, ...]:
    """(z, y, q1, q0, e, parent ids); ``shared=False`` draws a_g and tau_g per row (every
    row its own parent in distribution)."""
    k = 1 + rng.poisson(4.0, parents)
    g = np.repeat(np.arange(parents), k)
    n = len(g)
    a = rng.exponential(0.05, parents) - 0.05
    s = rng.laplace(0.0, 0.1, parents)
    if not shared:
        a, s, g = rng.exponential(0.05, n) - 0.05, rng.laplace(0.0, 0.1, n), np.arange(n)
    z = (rng.uniform(size=n) < E).astype(float)
    y = a[g] + z * (TAU + s[g]) + 0.05 * rng.standard_t(5, n)
    q = np.full(n, 0.01)
    return z, y, q + 0.03, q, np.full(n, E), np.array([f"p{i}" for i in g], dtype=object)


def test_the_clustered_interval_covers_where_the_iid_one_does_not() -> None:
    """Over 600 replicates of 80 parents the parent-clustered 95 % interval covers TAU at the
    nominal rate (within 3 Monte-Carlo SEs, 0.027), the i.i.d. one clearly less; both are
    unbiased; the clustered SE tracks the sd of the estimate across replicates."""
    rng = np.random.default_rng(2026)
    hits = {"iid": 0, "parent": 0}
    est, ses = [], []
    for _ in range(REPLICATES):
        z, y, q1, q0, e, parent = world(rng, PARENTS)
        s = itt_summary(z, y, q1, q0, e, parent)
        assert s.interval_se == "parent" and s.n_parents == PARENTS
        assert s.dr is not None and s.se is not None and s.se_parent is not None
        hits["iid"] += abs(s.dr - TAU) <= 1.96 * s.se
        hits["parent"] += abs(s.dr - TAU) <= 1.96 * s.se_parent
        assert s.ci_low == pytest.approx(s.dr - 1.96 * s.se_parent)
        est.append(s.dr)
        ses.append(s.se_parent)
    mc = 3 * np.sqrt(0.95 * 0.05 / REPLICATES)
    cover = {k: v / REPLICATES for k, v in hits.items()}
    assert abs(cover["parent"] - 0.95) <= mc, cover
    assert cover["iid"] < 0.95 - mc, cover
    assert abs(np.mean(est) - TAU) <= 3 * np.std(est) / np.sqrt(REPLICATES)
    assert np.mean(ses) == pytest.approx(np.std(est), rel=0.1)


def test_independent_rows_cover_at_the_nominal_rate_either_way() -> None:
    """With every row its own parent (the same marginal law, no sharing) both intervals are
    nominal, and the clustered SE equals the i.i.d. one exactly."""
    rng = np.random.default_rng(7)
    hits = {"iid": 0, "parent": 0}
    for _ in range(REPLICATES):
        z, y, q1, q0, e, parent = world(rng, PARENTS, shared=False)
        s = itt_summary(z, y, q1, q0, e, parent)
        assert s.dr is not None and s.se is not None and s.se_parent is not None
        assert s.se_parent == pytest.approx(s.se, rel=1e-12)
        hits["iid"] += abs(s.dr - TAU) <= 1.96 * s.se
        hits["parent"] += abs(s.dr - TAU) <= 1.96 * s.se_parent
    mc = 3 * np.sqrt(0.95 * 0.05 / REPLICATES)
    for k, v in hits.items():
        assert abs(v / REPLICATES - 0.95) <= mc, (k, v)


def test_the_clustered_se_agrees_with_the_delete_a_parent_jackknife() -> None:
    """The sandwich SE against a standard baseline on the same rows: the delete-one-cluster
    jackknife of the mean of psi (within 5 %; they differ by O(1/G) terms)."""
    rng = np.random.default_rng(11)
    z, y, q1, q0, e, parent = world(rng, 200)
    psi = itt_scores(z, y, q1, q0, e)
    se, g = clustered_se(psi, parent)
    labels = np.unique(parent)
    leave = np.array([psi[parent != p].mean() for p in labels])
    jack = np.sqrt((len(labels) - 1) / len(labels) * np.sum((leave - leave.mean()) ** 2))
    assert g == 200 and se == pytest.approx(jack, rel=0.05)


def test_without_parents_or_with_one_the_interval_is_the_iid_one() -> None:
    """No parent column: no clustered SE and the i.i.d. interval (the equation unchanged);
    one parent: G < 2, the same; the report carries both SEs and which one the interval
    uses."""
    rng = np.random.default_rng(3)
    z, y, q1, q0, e, parent = world(rng, 30)
    plain = itt_summary(z, y, q1, q0, e)
    one = itt_summary(z, y, q1, q0, e, ["p"] * len(z))
    for s in (plain, one):
        assert s.se_parent is None and s.interval_se == "iid"
        assert s.se is not None and s.dr is not None
        assert s.ci_high == pytest.approx(s.dr + 1.96 * s.se)
    report = offer_gate_report(z, y, q1, q0, e, parents=parent)
    assert report["interval_se"] == "parent" and report["n_parents"] == 30
    assert report["se"] == plain.se and report["se_parent"] != report["se"]
    with pytest.raises(Exception, match="one label per row"):
        clustered_se(itt_scores(z, y, q1, q0, e), parent[:-1])


def test_the_clustered_se_imports_no_dataframe_library() -> None:
    # a run writes ope_summary.json every 20 outcomes: pandas there would cost the run's
    # process about 50 MB and 0.3 s for nothing
    code = (
        "import sys, numpy as np\n"
        "from gigaevo.memory.v2.causal.ope import clustered_se\n"
        "se, g = clustered_se(np.arange(6.0), ['a', 'b', 'a', 'c', 'b', 'c'])\n"
        "assert g == 3 and se is not None and 'pandas' not in sys.modules, sorted(sys.modules)\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_coded_clusters_give_the_same_bits_as_their_labels() -> None:
    """``ClusterCodes`` (labels coded once, in first-appearance order, as ``OpeColumns``
    keeps them) give exactly the SEs and report of the labels themselves."""
    from gigaevo.memory.v2.causal.ope import ClusterCodes
    from gigaevo.memory.v2.read.outcomes import OpeColumns

    rng = np.random.default_rng(7)
    n = 500
    labels = [f"p{int(k)}" for k in rng.integers(0, 60, n)]
    runs = [f"r{int(k)}" for k in rng.integers(0, 3, n)]
    psi = rng.normal(size=n)
    codes: dict[str, int] = {}
    coded = ClusterCodes(np.array([codes.setdefault(x, len(codes)) for x in labels]))
    assert clustered_se(psi, coded) == clustered_se(psi, labels)
    run_codes: dict[str, int] = {}
    coded_runs = ClusterCodes(np.array([run_codes.setdefault(x, len(run_codes)) for x in runs]))
    z = (rng.random(n) < E).astype(float)
    y, q1, q0, e = rng.normal(size=n), rng.normal(size=n), rng.normal(size=n), np.full(n, E)
    plain = offer_gate_report(z, y, q1, q0, e, runs, labels)
    assert offer_gate_report(z, y, q1, q0, e, coded_runs, coded) == plain
    cols = OpeColumns()
    for i in range(n):
        cols._append((z[i], y[i], q1[i], q0[i], e[i]), runs[i], labels[i])
    parents = [f"{r}/{p}" for r, p in zip(runs, labels, strict=True)]
    assert offer_gate_report(
        cols.z, cols.y, cols.q1, cols.q0, cols.e, cols.runs, cols.parents
    ) == offer_gate_report(z, y, q1, q0, e, runs, parents)
    assert cols.run_names == set(runs)
