"""Off-policy evaluation of the offer gate: ITT DR / IPS and conditional-offer AIPW
(memory-model.md "Off-policy evaluation")."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeAlias

import numpy as np

from gigaevo.memory.v2.causal.errors import DesignError

Column: TypeAlias = Sequence[float] | np.ndarray  # one value per ledger row

PROPENSITY_CLIP = 1e-6
LOW_POWER_ROWS = 30
PROPENSITY_WARNING_GAP = 0.05


@dataclass(frozen=True)
class IttSummary:
    """Intention-to-treat DR summary written to ``ope_summary.json``.

    ``se`` is the i.i.d. sd(psi)/sqrt(n); ``se_parent`` the parent-clustered (sandwich) SE
    over ``n_parents`` parents (None with fewer than 2). ``interval_se`` names the SE that
    the interval, z and p use: "parent" whenever it exists, else "iid".
    ``insufficient_data`` is True (and every estimate None) without >= 1 treated and >= 1 control.
    """

    n: int
    n_treated: int
    n_control: int
    insufficient_data: bool
    dr: float | None = None
    se: float | None = None
    se_parent: float | None = None
    n_parents: int = 0
    interval_se: str = "iid"
    ci_low: float | None = None
    ci_high: float | None = None
    z: float | None = None
    p_value: float | None = None
    ips: float | None = None
    ips_outside_ci: bool = False
    low_power: bool = True
    propensity_warning: bool = False


def _arrays(*cols: Column) -> list[np.ndarray]:
    out = [np.asarray(c, dtype=float).reshape(-1) for c in cols]
    if len({len(c) for c in out}) != 1:
        raise DesignError("OPE columns must have equal length")
    return out


def itt_scores(
    z: Column,
    y: Column,
    q1: Column,
    q0: Column,
    e: Column,
) -> np.ndarray:
    """psi_i = q1 - q0 + Z/e (Y - q1) - (1 - Z)/(1 - e) (Y - q0), e clipped; shape (n,)."""
    za, ya, q1a, q0a, ea = _arrays(z, y, q1, q0, e)
    ea = np.clip(ea, PROPENSITY_CLIP, 1.0 - PROPENSITY_CLIP)
    return q1a - q0a + za / ea * (ya - q1a) - (1.0 - za) / (1.0 - ea) * (ya - q0a)


@dataclass(frozen=True)
class ClusterCodes:
    """Cluster labels already coded: ``codes[i]`` is the rank of row i's label in the order
    of first appearance (0, 1, 2, ...), as ``clustered_se`` codes labels itself. A caller
    that keeps its rows as they arrive (``read.outcomes.OpeColumns``) codes each label once
    instead of every summary hashing every row's label again."""

    codes: np.ndarray

    def __len__(self) -> int:
        return len(self.codes)


Clusters: TypeAlias = Sequence[object] | np.ndarray | ClusterCodes


def clustered_se(psi: np.ndarray, clusters: Clusters) -> tuple[float | None, int]:
    """Cluster-robust (sandwich) SE of mean(psi) and the number of clusters G.

    SE = sqrt( G/(G - 1) * sum_g (sum_{i in g} (psi_i - mean psi))^2 ) / n; None when G < 2.
    With every row its own cluster it equals sd(psi)/sqrt(n).
    """
    if isinstance(clusters, ClusterCodes):
        index = np.asarray(clusters.codes, dtype=np.intp)
        if len(index) != len(psi):
            raise DesignError("clusters must have one label per row")
    else:
        labels = np.asarray(clusters, dtype=object)
        if len(labels) != len(psi):
            raise DesignError("clusters must have one label per row")
        # codes in order of first appearance, by hashing (no sort; no pandas import in a
        # run: ~50 MB and ~0.3 s for one summary); ~15 ms per 1e5 rows
        codes: dict[object, int] = {}
        index = np.fromiter(
            (codes.setdefault(label, len(codes)) for label in labels.tolist()),
            dtype=np.intp,
            count=len(labels),
        )
    sums = np.bincount(index, weights=psi - psi.mean())
    g = len(sums)
    if g < 2:
        return None, g
    return math.sqrt(g / (g - 1) * float(np.sum(sums**2))) / len(psi), g


def itt_summary(
    z: Column,
    y: Column,
    q1: Column,
    q0: Column,
    e: Column,
    parents: Clusters | None = None,
) -> IttSummary:
    """ITT (probe) DR estimate with i.i.d. and parent-clustered SEs, 95 % CI, z, p and the
    IPS cross-check.

    Args:
        z: (n,) offer indicators; y: (n,) outcomes (raw gain, R G- if invalid);
        q1, q0: (n,) frozen nuisance predictions; e: (n,) offer probabilities;
        parents: (n,) parent program ids (the clusters); None: no clustered SE, and the
            interval uses the i.i.d. one.
    """
    za, ya, q1a, q0a, ea = _arrays(z, y, q1, q0, e)
    n, n_t = len(za), int(np.sum(za == 1))
    n_c = n - n_t
    if n_t < 1 or n_c < 1:
        return IttSummary(n, n_t, n_c, insufficient_data=True)
    psi = itt_scores(za, ya, q1a, q0a, ea)
    ec = np.clip(ea, PROPENSITY_CLIP, 1.0 - PROPENSITY_CLIP)
    dr = float(psi.mean())
    se = float(psi.std(ddof=1) / math.sqrt(n)) if n > 1 else math.nan
    se_parent, n_parents = clustered_se(psi, parents) if parents is not None else (None, 0)
    used = se_parent if se_parent is not None else se
    ips = float(np.mean(za * ya / ec - (1.0 - za) * ya / (1.0 - ec)))
    lo, hi = dr - 1.96 * used, dr + 1.96 * used
    zstat = dr / used if used > 0 else math.nan
    from scipy.special import ndtr  # here: a run's close writes ope_summary.json at 0 rows

    p = float(2.0 * ndtr(-abs(zstat))) if math.isfinite(zstat) else math.nan
    return IttSummary(
        n=n,
        n_treated=n_t,
        n_control=n_c,
        insufficient_data=False,
        dr=dr,
        se=se,
        se_parent=se_parent,
        n_parents=n_parents,
        interval_se="iid" if se_parent is None else "parent",
        ci_low=lo,
        ci_high=hi,
        z=zstat,
        p_value=p,
        ips=ips,
        ips_outside_ci=bool(not lo <= ips <= hi),
        low_power=n_t < LOW_POWER_ROWS or n_c < LOW_POWER_ROWS,
        propensity_warning=abs(n_t / n - float(ea.mean())) > PROPENSITY_WARNING_GAP,
    )


@dataclass(frozen=True)
class GateValue:
    """Conditional-offer AIPW value of a target gate pi (memory-model.md "Off-policy evaluation").

    Attributes:
        value: Psi-bar(pi); se: run-clustered SE (None with fewer than 2 runs).
        ess: (sum w)^2 / sum w^2; max_weight: largest w;
        min_overlap: smallest min(e, 1 - e) over the rows.
    """

    value: float
    se: float | None
    ess: float
    max_weight: float
    min_overlap: float
    n: int
    n_runs: int


def gate_value(
    pi: Column | float,
    z: Column,
    y: Column,
    q1: Column,
    q0: Column,
    e: Column,
    runs: Clusters | None = None,
) -> GateValue:
    """psi_i = pi q1 + (1 - pi) q0 + w_i (Y - q_Z), w = pi/e or (1 - pi)/(1 - e).

    Args:
        pi: target gate values in [0, 1], scalar or (n,); may read pre-treatment fields only.
        runs: (n,) run ids for the clustered SE (one run when None).
    """
    za, ya, q1a, q0a, ea = _arrays(z, y, q1, q0, e)
    n = len(za)
    if n == 0:
        raise DesignError("gate value needs at least one row")
    pa = np.broadcast_to(np.asarray(pi, dtype=float), (n,)).astype(float)
    if np.any(pa < 0) or np.any(pa > 1) or np.any(ea <= 0) or np.any(ea >= 1):
        raise DesignError("pi must lie in [0, 1] and e in (0, 1)")
    w = np.where(za == 1, pa / ea, (1.0 - pa) / (1.0 - ea))
    q_obs = np.where(za == 1, q1a, q0a)
    psi = pa * q1a + (1.0 - pa) * q0a + w * (ya - q_obs)
    value = float(psi.mean())
    labels: Clusters
    if isinstance(runs, ClusterCodes):
        labels = runs
    else:
        labels = np.asarray(runs if runs is not None else ["run"] * n, dtype=object)
    if len(labels) != n:
        raise DesignError("runs must have one id per row")
    se, n_runs = clustered_se(psi, labels)
    wsum2 = float(np.sum(w**2))
    ess = float(np.sum(w) ** 2 / wsum2) if wsum2 > 0 else 0.0
    return GateValue(
        value=value,
        se=se,
        ess=ess,
        max_weight=float(np.max(w)),
        min_overlap=float(np.min(np.minimum(ea, 1.0 - ea))),
        n=n,
        n_runs=n_runs,
    )


ONE_RUN_SE = (
    "one run: the run-clustered SE of the conditional-offer AIPW needs >= 2 runs "
    '(docs/memory-model.md "Off-policy evaluation"); '
    "pool the ledgers of several runs for an interval"
)
GATES: tuple[tuple[str, str], ...] = (
    ("always_offer", "pi = 1: deliver every proposed card"),
    ("never_offer", "pi = 0: withhold every proposed card"),
    ("logged", "pi = e: the logged offer policy"),
)


def _gate_entry(name: str, meaning: str, gv: GateValue) -> dict[str, object]:
    entry: dict[str, object] = {
        "gate": name,
        "pi": meaning,
        "value": gv.value,
        "se": gv.se,
        "ci_low": None if gv.se is None else gv.value - 1.96 * gv.se,
        "ci_high": None if gv.se is None else gv.value + 1.96 * gv.se,
        "ess": gv.ess,
        "max_weight": gv.max_weight,
        "min_overlap": gv.min_overlap,
        "n": gv.n,
        "n_runs": gv.n_runs,
    }
    if gv.se is None:
        entry["se_note"] = ONE_RUN_SE
    return entry


def offer_gate_report(
    z: Column,
    y: Column,
    q1: Column,
    q0: Column,
    e: Column,
    runs: Clusters | None = None,
    parents: Clusters | None = None,
) -> dict[str, object]:
    """The OPE section of ``ope_summary.json`` (memory-model.md "Off-policy evaluation") as plain
    JSON-ready values.

    The ITT DR / IPS fields of ``itt_summary`` stay at the top level; ``gates``
    holds the conditional-offer AIPW of pi = 1, pi = 0 and the logged pi = e
    (value, run-clustered SE or a note why it is None, ESS, max weight,
    min(e, 1 - e)); ``gate_difference`` is Psi(1) - Psi(0), which equals the
    ITT DR whenever no e needed clipping. With an empty arm the file says
    ``insufficient_data`` and carries counts only.

    Args:
        z, y, q1, q0, e: (n,) columns as for ``itt_summary``.
        runs: (n,) run ids (the gates' SE clusters); one run when None.
        parents: (n,) parent program ids (the ITT's clustered SE); none when None.
    """
    za, ya, q1a, q0a, ea = _arrays(z, y, q1, q0, e)
    itt = itt_summary(za, ya, q1a, q0a, ea, parents)
    keys = ("dr", "se", "se_parent", "n_parents", "interval_se", "ci_low", "ci_high", "z")
    estimates = {k: getattr(itt, k) for k in (*keys, "p_value", "ips")}
    flags = {
        "low_power": itt.low_power,
        "propensity_warning": itt.propensity_warning,
        "ips_outside_ci": itt.ips_outside_ci,
    }
    out: dict[str, object] = {
        "n": itt.n,
        "n_treated": itt.n_treated,
        "n_control": itt.n_control,
        "insufficient_data": itt.insufficient_data,
        **estimates,  # the ITT DR / IPS fields stay flat
        **flags,
        "itt": estimates,
        "flags": flags,
        "mean_offer_probability": float(ea.mean()) if len(ea) else None,
        "gates": None,
        "gate_difference": None,
    }
    if itt.insufficient_data:
        out["reason"] = "insufficient_data: at least one treated and one control row are needed"
        return out
    targets: dict[str, float | np.ndarray] = {"always_offer": 1.0, "never_offer": 0.0, "logged": ea}
    values = {name: gate_value(targets[name], za, ya, q1a, q0a, ea, runs) for name, _ in GATES}
    out["gates"] = {name: _gate_entry(name, meaning, values[name]) for name, meaning in GATES}
    out["gate_difference"] = values["always_offer"].value - values["never_offer"].value
    return out
