"""docs/memory-model.md stays true: its worked-example numbers are what the code computes,
and every citation of the page in code, tests and benchmarks names one of its headings."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from gigaevo.memory.v2.causal import (
    BayesianLinearHead,
    DesignSpace,
    LineageEdge,
    LineageRoot,
    LogisticLaplaceHead,
    RewardDefinition,
    WorldVotes,
    acceptance_probability,
    arm_values,
    context_features,
    draw_decision,
    gate_value,
    itt_scores,
    itt_summary,
    lineage_outcomes,
    match_worlds,
    proposal_distribution,
    raw_feasible_interval,
    rng_stream,
)
from gigaevo.memory.v2.causal.retirement import practical_threshold, wilson_upper

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "memory-model.md"
REWARD = RewardDefinition(0.0, 1.0)


Row = tuple[list[float], list[int], float | None]


def _table() -> dict[str, Row]:
    """key -> (values, decimals shown, tolerance; None: half a unit of the last digit)."""
    text = DOC.read_text()
    body = text.split("<!-- worked-example:begin -->")[1].split("<!-- worked-example:end -->")[0]
    rows: dict[str, Row] = {}
    for line in body.strip().splitlines()[2:]:
        key, values, tol, _ = (c.strip() for c in line.strip("|").split("|"))
        shown = [v.strip() for v in values.split(",")]
        decimals = [len(v.split(".")[1]) if "." in v else 0 for v in shown]
        rows[key] = ([float(v) for v in shown], decimals, None if tol == "-" else float(tol))
    return rows


def _example() -> dict[str, Callable[[], list[float]]]:
    x = context_features(REWARD, 0.80, 50, [0.25, 0.50])
    space = DesignSpace(5, lineages=("A", "B"), kind_contrast=False)
    empty = np.zeros((0, space.size))
    mu, v = space.invalidity_prior()
    invalidity = LogisticLaplaceHead(mu, v).fit(empty, np.zeros(0))
    eta, cov = invalidity.linear_predictor(space.row(x, 0), space.row(x, 1, "A"))

    def prior_worlds() -> np.ndarray:
        blr = BayesianLinearHead(space.utility_prior_variance()).fit(empty, np.zeros(0))
        rng = rng_stream("cold", "worlds")
        beta, gamma = blr.sample(20000, rng), invalidity.sample(20000, rng)
        z1 = np.array([space.row(x, 1, "A"), space.row(x, 1, "B")])
        bounds = REWARD.feasible_interval(0.80)
        return arm_values(beta, gamma, space.row(x, 0), z1, bounds).effect

    votes = WorldVotes(
        ("A", "B"),
        np.r_[np.zeros(134, int), np.ones(136, int), -np.ones(242, int)],
        np.r_[np.zeros(257, int), np.ones(255, int)],
    )
    proposal = proposal_distribution(votes, pending={}, epsilon=0.05)

    def lineage() -> list[float]:
        root = LineageRoot("dA", "c1", 0, 0, 0.03, raw_feasible_interval(REWARD, 0.80))
        edges = [
            LineageEdge("p", "c1", 0, 0, "valid", 0.03, "accepted"),
            LineageEdge("c1", "c2", 0, 1, "valid", 0.05, "accepted"),
            LineageEdge("c2", "c3", 0, 2, "valid", -0.02, "accepted"),
            *(LineageEdge(f"o{i}", f"q{i}", 0, 3 + i, "valid", 0.0, "rejected") for i in range(30)),
        ]
        (out,) = lineage_outcomes([root], edges, depth=3, budget=32)
        assert out.status == "outcome" and out.best_descendant_id == "c2"
        return [float(out.best_gain or 0.0), float(out.residual or 0.0)]

    theta = practical_threshold([0, 0, 0.02, -0.01, 0.05, -0.03, 0.004])
    ope = ([1, 0, 1, 0], [0.03, -0.02, -0.80, 0.01], [0.01] * 4, [0.0] * 4, [0.7] * 4)
    always = gate_value(1.0, *ope)
    return {
        "x": lambda: list(x),
        "x_norm2": lambda: [float(x @ x)],
        "gain_bounds": lambda: list(REWARD.feasible_interval(0.80)),
        "eta_mean": lambda: list(eta),
        "eta_cov": lambda: [cov[0, 0], cov[0, 1], cov[1, 1]],
        "p_acc": lambda: [acceptance_probability(eta, cov).probability],
        "p_effect_positive": lambda: [float(np.mean(prior_worlds()[:, 0] > 0))],
        "abstain_share": lambda: [match_worlds(["A", "B"], prior_worlds()).abstentions / 20000],
        "chi": lambda: list(proposal.chi),
        "rho": lambda: list(proposal.rho),
        "rho0": lambda: [proposal.rho0],
        "joint_shown": lambda: [draw_decision(proposal, 0.7, 0.52, 0.41).joint_propensity],
        "joint_withheld": lambda: [draw_decision(proposal, 0.7, 0.52, 0.95).joint_propensity],
        "y": lambda: [REWARD.normalise_gain(0.80, 0.83 - 0.80)],
        "lineage_best": lambda: lineage()[:1],
        "lineage_residual": lambda: lineage()[1:],
        "theta": lambda: [theta],
        "assessable": lambda: [
            float(sum(REWARD.feasible_interval(f)[1] > theta for f in (0.80, 0.70, 0.995)))
        ],
        "wilson_371": lambda: [wilson_upper(371, 4096)],
        "wilson_372": lambda: [wilson_upper(372, 4096)],
        "psi": lambda: list(itt_scores(*ope)),
        "dr": lambda: [float(itt_summary(*ope).dr or 0.0)],
        "ips": lambda: [float(itt_summary(*ope).ips or 0.0)],
        "gate_always": lambda: [always.value],
        "gate_never": lambda: [gate_value(0.0, *ope).value],
        "ess_always": lambda: [always.ess],
        "max_weight_always": lambda: [always.max_weight],
    }


EXAMPLE = _example()
TABLE = _table()


def test_the_table_and_the_code_name_the_same_quantities() -> None:
    assert sorted(TABLE) == sorted(EXAMPLE)


@pytest.mark.parametrize("key", sorted(EXAMPLE))
def test_worked_example_number_matches_the_code(key: str) -> None:
    printed, decimals, tol = TABLE[key]
    computed = EXAMPLE[key]()
    assert len(computed) == len(printed), key
    for value, shown, d in zip(computed, printed, decimals, strict=True):
        bound = tol if tol is not None else 0.5 * 10.0**-d + 1e-12
        assert abs(value - shown) <= bound, f"{key}: code {value!r}, document {shown}"


def test_the_example_steps_agree_with_each_other() -> None:
    """Step 4: u_1 = 0.52 falls in [rho_0, rho_0 + rho_A) and the joints are rho_A e, rho_A (1 -
    e)."""
    rho_a, rho0 = TABLE["rho"][0][0], TABLE["rho0"][0][0]  # values as printed
    assert rho0 <= 0.52 < rho0 + rho_a
    assert TABLE["joint_shown"][0][0] == pytest.approx(0.7 * rho_a, abs=1e-5)
    assert TABLE["joint_withheld"][0][0] == pytest.approx(0.3 * rho_a, abs=1e-5)
    dr = TABLE["dr"][0][0]
    assert TABLE["gate_always"][0][0] - TABLE["gate_never"][0][0] == pytest.approx(dr, abs=2e-6)
    assert np.mean(TABLE["psi"][0]) == pytest.approx(dr, abs=2e-6)


CITATION = re.compile(r'memory-model\.md\s+((?:"[^"]+"(?:,\s+|\s+and\s+|;\s+)?)+)')


def _headings() -> set[str]:
    return {
        m.group(1).strip() for m in re.finditer(r"^#{2,3} (.+)$", DOC.read_text(), re.MULTILINE)
    }


def test_every_citation_of_the_page_names_a_heading() -> None:
    headings = _headings()
    cited: dict[str, list[str]] = {}
    for folder in ("gigaevo", "tests", "benchmarks", "docs", "notebooks"):
        for path in (ROOT / folder).rglob("*"):
            if path.suffix not in (".py", ".md", ".ipynb", ".yaml") or not path.is_file():
                continue
            for group in CITATION.findall(path.read_text(errors="replace")):
                for name in re.findall(r'"([^"]+)"', group):
                    name = " ".join(name.split())  # a citation may wrap across lines
                    cited.setdefault(name, []).append(str(path.relative_to(ROOT)))
    unknown = {name: where for name, where in cited.items() if name not in headings}
    assert cited, "nothing cites docs/memory-model.md"
    assert not unknown, f"citations of headings that do not exist: {unknown}"


def test_no_file_cites_the_internal_model_notes() -> None:
    """Users have docs/memory-model.md, not the design notes' MODEL.md."""
    pattern = re.compile(r"\bMODEL(\.md\b| \d| section)")
    offenders = []
    for folder in ("gigaevo", "tests", "benchmarks", "docs", "notebooks"):
        for path in (ROOT / folder).rglob("*"):
            if path.suffix not in (".py", ".md", ".ipynb", ".yaml") or not path.is_file():
                continue
            if path != Path(__file__) and pattern.search(path.read_text(errors="replace")):
                offenders.append(str(path.relative_to(ROOT)))
    assert not offenders, f"cite docs/memory-model.md by section name instead: {offenders}"
