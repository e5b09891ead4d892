"""OPE against known truth (memory-model.md "Off-policy evaluation" and "Ground-truth tests"): ITT
DR, IPS, conditional-offer AIPW, naive.

A simulated offer world with a context x ~ U(-1, 1), control outcome
y0 = 0.1 x + N(0, 0.05^2) and a heterogeneous offer effect tau(x) = 0.05 + 0.04 x,
so that (population values)

    Psi(1) = E y1 = 0.05,   Psi(0) = E y0 = 0,   ITT = Psi(1) - Psi(0) = 0.05,
    Psi(e) = E[e(x) y1 + (1 - e(x)) y0] = E[e(x) tau(x)].

The offer probability is either the production constant 0.7 or depends on the
context, e(x) = 0.5 + 0.3 x, in which case the naive difference in means is
biased: E[y | Z=1] - E[y | Z=0] = 0.078 + 0.02 = 0.098, not 0.05. Rows come in
runs (the clusters of the AIPW standard error).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from gigaevo.memory.base import MutationContext
from gigaevo.memory.v2 import CardBankMemory, HashingEmbedder
from gigaevo.memory.v2.causal import gate_value, itt_summary, offer_gate_report
from gigaevo.memory.v2.causal.ope import ONE_RUN_SE
from gigaevo.memory.v2.read.outcomes import OPE_FILE
from tests.memory.evidence.factories import make_decision, make_terminal
from tests.memory.helpers import result, runtime

TAU = 0.05
PSI1, PSI0 = 0.05, 0.0
RUNS = 40


def constant_e(x: np.ndarray) -> np.ndarray:
    return np.full_like(x, 0.7)


def context_e(x: np.ndarray) -> np.ndarray:
    return 0.5 + 0.3 * x


def psi_logged(e: Callable[[np.ndarray], np.ndarray]) -> float:
    """E[e(x) tau(x)] for x ~ U(-1, 1), by a fine midpoint rule (exact for these polynomials)."""
    x = np.linspace(-1, 1, 200_001)
    x = 0.5 * (x[1:] + x[:-1])
    return float(np.mean(e(x) * (0.05 + 0.04 * x)))


@dataclasses.dataclass(frozen=True)
class World:
    x: np.ndarray
    z: np.ndarray
    y: np.ndarray
    e: np.ndarray
    runs: list[str]

    def nuisances(self, good: bool) -> tuple[np.ndarray, np.ndarray]:
        """q-hat: the true conditional means (good) or deliberately wrong ones."""
        if good:
            return 0.1 * self.x + 0.05 + 0.04 * self.x, 0.1 * self.x
        return 0.3 - 0.2 * self.x, np.full_like(self.x, -0.1)


def simulate(rng: np.random.Generator, n: int, e: Callable[[np.ndarray], np.ndarray]) -> World:
    x = rng.uniform(-1, 1, size=n)
    y0 = 0.1 * x + 0.05 * rng.standard_normal(n)
    y1 = y0 + 0.05 + 0.04 * x
    ex = e(x)
    z = (rng.uniform(size=n) < ex).astype(float)
    runs = [f"run{i * RUNS // n}" for i in range(n)]
    return World(x, z, np.where(z == 1, y1, y0), ex, runs)


def replicate(
    reps: int, n: int, seed: int, e: Callable[[np.ndarray], np.ndarray], good: bool
) -> dict[str, np.ndarray]:
    """Estimates and SEs over ``reps`` seeded data sets of ``n`` rows."""
    rng = np.random.default_rng(seed)
    keys = ("dr", "dr_se", "ips", "naive", "psi1", "psi1_se", "psi0", "psi0_se", "psie", "psie_se")
    out: dict[str, list[float]] = {k: [] for k in keys}
    for _ in range(reps):
        w = simulate(rng, n, e)
        q1, q0 = w.nuisances(good)
        s = itt_summary(w.z, w.y, q1, q0, w.e)
        assert s.dr is not None and s.se is not None and s.ips is not None
        out["dr"].append(s.dr)
        out["dr_se"].append(s.se)
        out["ips"].append(s.ips)
        out["naive"].append(w.y[w.z == 1].mean() - w.y[w.z == 0].mean())
        for name, pi in (("psi1", 1.0), ("psi0", 0.0), ("psie", w.e)):
            g = gate_value(pi, w.z, w.y, q1, q0, w.e, w.runs)
            assert g.se is not None and g.n_runs == RUNS
            out[name].append(g.value)
            out[f"{name}_se"].append(g.se)
    return {k: np.asarray(v) for k, v in out.items()}


def within_3_mc_se(draws: np.ndarray, truth: float) -> bool:
    return bool(abs(draws.mean() - truth) <= 3 * draws.std(ddof=1) / np.sqrt(len(draws)))


def coverage(est: np.ndarray, se: np.ndarray, truth: float) -> float:
    return float(np.mean(np.abs(est - truth) <= 1.96 * se))


@pytest.fixture(scope="module")
def wrong_q_context_e() -> dict[str, np.ndarray]:
    return replicate(400, 400, seed=11, e=context_e, good=False)


def test_dr_and_aipw_unbiased_with_wrong_nuisances(wrong_q_context_e: dict[str, Any]) -> None:
    r = wrong_q_context_e
    assert within_3_mc_se(r["dr"], TAU)
    assert within_3_mc_se(r["ips"], TAU)
    assert within_3_mc_se(r["psi1"], PSI1)
    assert within_3_mc_se(r["psi0"], PSI0)
    assert within_3_mc_se(r["psie"], psi_logged(context_e))
    # Psi(1) - Psi(0) is the ITT DR in every data set (no e needed clipping)
    np.testing.assert_allclose(r["psi1"] - r["psi0"], r["dr"], atol=1e-12)


def test_naive_difference_is_biased_when_the_offer_depends_on_context(
    wrong_q_context_e: dict[str, Any],
) -> None:
    naive = wrong_q_context_e["naive"]
    assert naive.mean() == pytest.approx(0.098, abs=3 * naive.std(ddof=1) / np.sqrt(len(naive)))
    assert not within_3_mc_se(naive, TAU)
    # ... and unbiased when the offer probability is the constant e = 0.7
    assert within_3_mc_se(replicate(200, 400, seed=12, e=constant_e, good=False)["naive"], TAU)


def test_intervals_cover_near_the_nominal_rate(wrong_q_context_e: dict[str, Any]) -> None:
    r = wrong_q_context_e
    truths = {"dr": TAU, "psi1": PSI1, "psi0": PSI0, "psie": psi_logged(context_e)}
    for name, truth in truths.items():
        rate = coverage(r[name], r[f"{name}_se"], truth)
        assert 0.90 <= rate <= 0.99, (name, rate)
    # the reported SE tracks the sampling sd of the estimate
    for name in truths:
        assert r[f"{name}_se"].mean() == pytest.approx(r[name].std(ddof=1), rel=0.15), name


def test_error_halves_when_n_quadruples() -> None:
    small = replicate(200, 200, seed=21, e=constant_e, good=False)
    big = replicate(200, 800, seed=22, e=constant_e, good=False)
    for name in ("dr", "psi1", "psi0", "psie"):
        sd_ratio = big[name].std(ddof=1) / small[name].std(ddof=1)
        se_ratio = big[f"{name}_se"].mean() / small[f"{name}_se"].mean()
        assert sd_ratio == pytest.approx(0.5, abs=0.1), (name, sd_ratio)
        assert se_ratio == pytest.approx(0.5, abs=0.05), (name, se_ratio)
        rmse_small = np.sqrt(np.mean((small[name] - small[name].mean()) ** 2))
        assert np.sqrt(np.mean((big[name] - big[name].mean()) ** 2)) < 0.7 * rmse_small


def test_dr_variance_at_most_ipw_with_good_nuisances() -> None:
    r = replicate(300, 400, seed=31, e=context_e, good=True)
    assert within_3_mc_se(r["dr"], TAU) and within_3_mc_se(r["ips"], TAU)
    assert r["dr"].std() <= 0.8 * r["ips"].std()  # ~0.0059 vs ~0.0090
    # good nuisances also tighten the gate values
    wrong = replicate(300, 400, seed=31, e=context_e, good=False)
    assert r["psi1"].std() < wrong["psi1"].std()


def test_report_gates_flags_and_one_run_note() -> None:
    rng = np.random.default_rng(41)
    w = simulate(rng, 300, constant_e)
    q1, q0 = w.nuisances(good=False)
    pooled = offer_gate_report(w.z, w.y, q1, q0, w.e, w.runs)
    gates = pooled["gates"]
    assert isinstance(gates, dict)
    assert set(gates) == {"always_offer", "never_offer", "logged"}
    assert pooled["gate_difference"] == pytest.approx(pooled["dr"], abs=1e-12)
    assert gates["logged"]["max_weight"] == pytest.approx(1.0)  # pi = e: every weight is 1
    assert gates["logged"]["ess"] == pytest.approx(300)
    assert gates["always_offer"]["max_weight"] == pytest.approx(1 / 0.7)
    assert gates["always_offer"]["min_overlap"] == pytest.approx(0.3)
    assert gates["always_offer"]["se"] is not None and "se_note" not in gates["always_offer"]
    lo, hi = gates["never_offer"]["ci_low"], gates["never_offer"]["ci_high"]
    assert lo < gates["never_offer"]["value"] < hi
    single = offer_gate_report(w.z, w.y, q1, q0, w.e)
    assert isinstance(single["gates"], dict)
    for g in single["gates"].values():
        assert g["se"] is None and g["se_note"] == ONE_RUN_SE and g["n_runs"] == 1
    flags = single["flags"]
    assert flags == {"low_power": False, "propensity_warning": False, "ips_outside_ci": False}
    empty = offer_gate_report([1.0, 1.0], [0.1, 0.2], [0, 0], [0, 0], [0.7, 0.7])
    assert empty["insufficient_data"] and empty["gates"] is None and "reason" in empty


# -- through the real recorder ---------------------------------------------------------------


def _provider(tmp_path: Path, **kwargs: Any) -> CardBankMemory:
    return CardBankMemory(
        runtime(tmp_path), llm=kwargs.pop("llm", None), embedder=HashingEmbedder(), **kwargs
    )


def test_recorder_estimates_a_known_effect_from_ledger_rows(tmp_path: Path) -> None:
    """One simulated data set written as ledger rows of 4 runs, read back by ``ope_summary``."""
    mem = _provider(tmp_path, write={"cadence": "none"}, selection="causal")
    assert mem.recorder is not None and mem.reader is not None
    ledger = mem.reader.evidence
    rng = np.random.default_rng(51)
    w = simulate(rng, 400, constant_e)
    q1, q0 = w.nuisances(good=False)
    for i in range(len(w.z)):
        d = make_decision(i, z=int(w.z[i]), run_id=f"sim{i % 4}", offer=0.7)
        d = dataclasses.replace(d, q1=float(q1[i]), q0=float(q0[i]))
        ledger.append_decision(d)
        ledger.append_terminal(make_terminal(d, gain=float(w.y[i])))
    ope = mem.recorder.ope_summary()
    pure = itt_summary(w.z, w.y, q1, q0, w.e)
    assert ope["n"] == 400 and ope["dr"] == pytest.approx(pure.dr, abs=1e-12)
    assert abs(ope["dr"] - TAU) <= 3 * ope["se"]
    assert ope["gate_difference"] == pytest.approx(ope["dr"], abs=1e-12)
    gates = ope["gates"]
    assert gates["always_offer"]["n_runs"] == 4 and gates["always_offer"]["se"] is not None
    assert abs(gates["always_offer"]["value"] - PSI1) <= 3 * gates["always_offer"]["se"]
    assert abs(gates["never_offer"]["value"] - PSI0) <= 3 * gates["never_offer"]["se"]
    arms = ope["arms"]
    assert arms["treated"]["n"] == int(w.z.sum()) and arms["control"]["n"] == 400 - w.z.sum()
    assert ope["runs"] == ["sim0", "sim1", "sim2", "sim3"]
    mem.close()


def _context(attempt: int) -> MutationContext:
    coordinate = 0.1 + 0.8 * ((attempt * 37) % 100) / 100
    return MutationContext("toy", attempt, f"parent-{attempt}", 5.0, 0, (0,), (coordinate,), 0.0)


def test_gate_identity_on_a_providers_own_ledger(tmp_path: Path) -> None:
    """Real decisions and terminals of one run: Psi(1) - Psi(0) = tau_DR; SE null and why."""
    from gigaevo.llm.offline_memory import OfflineMemoryLLM

    mem = _provider(
        tmp_path,
        llm=OfflineMemoryLLM(seed=0),
        write={"cadence": "live"},
        selection="causal",
        causal={"ope_every": 7},
    )
    assert mem.reader is not None and mem.recorder is not None
    scopes = ("f0", "f1", "f2", "f3")
    for a in range(40):
        d = mem.decide(_context(a))
        gain = 0.02 * ((a * 7) % 5 - 2)
        cited = d.card_ids if a % 2 else ()
        valid = a % 9 != 4
        mem.observe(result(a, scope=scopes[a % 4], gain=gain, cited=cited, valid=valid))
    ope = mem.recorder.ope_summary()
    assert not ope["insufficient_data"], ope["arms"]
    assert ope["n_treated"] >= 1 and ope["n_control"] >= 1
    assert ope["gate_difference"] == pytest.approx(ope["dr"], abs=1e-12)
    assert ope["arms"]["treated"]["invalid"] + ope["arms"]["control"]["invalid"] >= 1
    for g in ope["gates"].values():
        assert g["se"] is None and g["se_note"] == ONE_RUN_SE
    mem.close()
    on_disk = json.loads((tmp_path / "run" / OPE_FILE).read_text())
    assert on_disk["written_at_outcome"] == 40 and on_disk["gates"] is not None
    stats = json.loads((tmp_path / "run" / "memory_stats.json").read_text())["decide"]
    assert stats["ope_summary"] == OPE_FILE and stats["ope_written_at_outcome"] == 40
