"""The synthetic card world of benchmarks/card_world.py and bench_card_world.py, tiny sizes.

Ground truth comes from outside the code under test: the clipped-normal mean from
scipy's numerical integration, an oracle policy built from the world's own values must
have zero regret, and a cited card changes a child only through its declared effect.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
from scipy import integrate, stats

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def _load(name: str) -> ModuleType:
    """The benchmark module ``name``, imported with benchmarks/ on the path (for its siblings)."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses resolve their module by name
    sys.path.insert(0, str(BENCHMARKS))
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(BENCHMARKS))
    return module


@pytest.fixture(scope="module")
def cw() -> ModuleType:
    return _load("card_world")


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return _load("bench_card_world")


@pytest.mark.parametrize(("m", "s", "lo", "hi"), [(0.0, 1.0, -1.0, 1.0), (0.3, 0.05, -0.2, 0.4)])
def test_clipped_mean_matches_numerical_integration(
    cw: ModuleType, m: float, s: float, lo: float, hi: float
) -> None:
    density = stats.norm(m, s)
    inner, _ = integrate.quad(lambda y: y * density.pdf(y), lo, hi)
    truth = lo * density.cdf(lo) + inner + hi * density.sf(hi)
    assert cw.clipped_mean(m, s, lo, hi) == pytest.approx(truth, abs=1e-9)


def test_round_numbers_are_common_to_every_policy(cw: ModuleType) -> None:
    assert cw.round_numbers(3, 17) == cw.round_numbers(3, 17)
    assert cw.round_numbers(3, 17) != cw.round_numbers(3, 18)
    assert cw.round_numbers(3, 17) != cw.round_numbers(4, 17)


def test_an_uncited_card_does_nothing_and_a_cited_harmful_one_raises_invalidity(
    cw: ModuleType,
) -> None:
    world = cw.worlds()["mixed"]
    harmful = world.harmful()
    assert world.cards[harmful].card_id == "harmful"
    parent = cw.Program("p", 0.4, (0.2, 0.2), 0)
    base = cw.round_numbers(0, 0)
    uncited = dataclasses.replace(base, u_cite=0.99, u_invalid=0.5)
    assert (
        cw.mutate(world, parent, 0, uncited, harmful).y
        == cw.mutate(world, parent, 0, uncited, None).y
    )
    # between the baseline's invalid rate (6 %) and the harmful card's (36 %)
    cited = dataclasses.replace(base, u_cite=0.0, u_invalid=0.2)
    assert cw.mutate(world, parent, 0, cited, harmful).invalid
    assert not cw.mutate(world, parent, 0, cited, None).invalid
    assert world.p_invalid(parent.b, world.cards[harmful]) == pytest.approx(0.06 + 0.30)


class _Oracle:
    """Delivers the card of highest true value (None when no card is best)."""

    name = "oracle"

    def __init__(self, world: object) -> None:
        self.world = world

    def choose(self, t: int, parent: object, r: object) -> tuple[int | None, bool]:
        w = self.world
        actions = [None, *range(len(w.cards))]  # type: ignore[attr-defined]
        best = max(actions, key=lambda j: w.deliver_value(parent.fitness, parent.b, j))  # type: ignore[attr-defined]
        return best, best is not None

    def update(self, arm: int | None, value: float) -> None:
        return None


def test_oracle_has_zero_regret_and_the_baselines_order_as_expected(
    cw: ModuleType, bench: ModuleType
) -> None:
    world = cw.worlds()["mixed"]
    k = len(world.cards)
    for seed in (0, 1):
        oracle = bench.play(world, _Oracle(world), seed, 80)
        assert np.all(np.abs(oracle.regret) < 1e-12)
        never = bench.play(world, cw.Never(), seed, 80)
        uniform = bench.play(world, cw.Uniform(k, seed), seed, 80)
        assert never.abstain == 80 and never.harmful_delivered == 0
        assert (never.regret >= -1e-12).all() and never.regret.sum() > 0
        # showing the harmful card a sixth of the time costs more than showing nothing
        assert uniform.regret.sum() > never.regret.sum()
        assert uniform.harmful_delivered > 0


@pytest.fixture(scope="module")
def arm() -> ModuleType:
    return _load("memory_arm")


def test_baselines_use_the_composed_offer_probability_and_excluder_depth(
    cw: ModuleType, bench: ModuleType, arm: ModuleType
) -> None:
    settings = arm.production_settings()
    assert settings["causal"]["offer_probability"] == bench.OFFER
    # production's excluder reads the last EXCLUDER_DEPTH mutations and releases a use once
    # its lineage window has matured; the Thompson baseline's excluder is the full rule
    # (every citation of those mutations, matured or not: memory v2 with
    # ``v2:excluder.release_matured=false``)
    assert settings["excluder"] == {
        "kind": "lineage",
        "max_depth": cw.EXCLUDER_DEPTH,
        "release_matured": True,
    }


def test_thompson_with_the_excluder_never_proposes_a_card_cited_on_recent_ancestors(
    cw: ModuleType,
) -> None:
    world = cw.worlds()["mixed"]
    k, seed = len(world.cards), 3
    pop = cw.Population.seeded()
    policy = cw.Thompson(k, seed, withhold=0.3, exclude=True)
    skipped = 0
    for t in range(300):
        r = cw.round_numbers(seed, t)
        parent = pop.parent(t, r)
        proposed, delivered = policy.choose(t, parent, r)
        assert proposed is None or proposed not in parent.recent
        skipped += any(j is not None for j in parent.recent)
        card = proposed if delivered else None
        out = cw.mutate(world, parent, t, r, card)
        assert out.child.recent[0] == (card if out.cited else None)
        assert out.child.recent[1:] == parent.recent[: cw.EXCLUDER_DEPTH - 1]
        if not out.invalid:
            pop.add(out.child)
        policy.update(card, -parent.fitness if out.invalid else float(out.y))
    assert skipped > 50  # the constraint was exercised


def _figures(out: str) -> list[str]:
    """The report's lines without the progress, wall-time and load lines."""
    return [
        line
        for line in out.splitlines()
        if line.startswith("  ") and "seed " not in line and "wall" not in line
    ]


def test_save_keeps_each_run_and_the_same_command_resumes(
    bench: ModuleType,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture,
) -> None:
    save = tmp_path / "runs.pkl"
    args = ["bench_card_world.py", "--seeds", "2", "--rounds", "6", "--jobs", "1", "--variants", ""]

    def run(*extra: str) -> str:
        monkeypatch.setattr(sys, "argv", [*args, *extra])
        bench.main()
        return capsys.readouterr().out

    first = run("--save", str(save), "--first-seed", "1")
    assert "0 of 12 runs already kept" in first
    kept = bench.load_saved(save)
    assert sorted({s for s, _ in kept["runs"]}) == [1, 2]
    assert len(kept["runs"]) == 12 and kept["code"] == bench.code_digest()
    again = run("--save", str(save), "--first-seed", "1")
    assert "12 of 12 runs already kept" in again
    # the resumed report has the same figures (nothing was run again)
    assert _figures(again) == _figures(first) and len(_figures(first)) > 5
    wider = run("--save", str(save), "--first-seed", "2")  # seed 2 kept, seed 3 new
    assert "6 of 12 runs already kept" in wider
    assert len(bench.load_saved(save)["runs"]) == 18
    monkeypatch.setattr(sys, "argv", [*args[:4], "7", *args[5:], "--save", str(save)])
    with pytest.raises(SystemExit) as stop:
        bench.main()
    assert stop.value.code == 2
    assert "not this run" in capsys.readouterr().err


def test_harmful_life_follows_the_card_through_a_replay_of_the_world(
    cw: ModuleType, bench: ModuleType
) -> None:
    """A policy that delivers the harmful card every round, safe for the first 30 decisions
    and unsafe after: its deliveries, cited rows (counted from the round numbers directly: a
    delivered card is cited iff u_cite < cite), the first exclusion and the returns."""
    world = cw.worlds()["no-good"]
    h, rounds, seed = world.harmful(), 60, 4
    trace = bench.Trace("memory test", np.zeros(rounds), seed=seed)
    trace.proposed = np.full(rounds, h, dtype=np.int16)
    trace.delivered = np.ones(rounds, dtype=bool)
    bit = 1 << h
    trace.decisions = {
        "eligible": np.full(rounds, bit),
        "safe": np.array([bit if t < 30 else 0 for t in range(rounds)]),
    }
    life = bench.harmful_life(world, trace)
    cite = world.cards[h].cite
    cited = [cw.round_numbers(seed, t).u_cite < cite for t in range(rounds)]
    assert life.delivered == rounds and life.cited == sum(cited)
    assert life.out_round == 30 and life.delivered_at_out == 30
    assert life.cited_at_out == sum(cited[:30]) and life.returns == 0
    # no withheld control: p_0 ~ Beta(1, 1), and P(p_1 - p_0 > 0.1) = E[max(p_1 - 0.1, 0)]
    # stays under 0.9 unless nearly every cited row failed
    assert life.flat_cited is None
    # unsafe, then safe again twice: two returns
    trace.decisions["safe"] = np.array([0 if t in (10, 11, 20) else bit for t in range(rounds)])
    again = bench.harmful_life(world, trace)
    assert again.out_round == 10 and again.returns == 2
    assert again.cited == life.cited and again.cited_invalid == life.cited_invalid
