"""Card world: memory v2 (the real ``CardBankMemory``) against standard bandit baselines.

Usage:
    .venv/bin/python benchmarks/bench_card_world.py [--world mixed] [--seeds 20]
        [--rounds 600] [--measurement deterministic|noisy|unknown] [--variants ...]
        [--jobs 2] [--quick] [--first-seed 0] [--save runs.pkl] [--load runs.pkl]

``--save`` keeps every finished (seed, policy) run and is written after each one, so a
stopped benchmark resumes: the same command again runs only what is missing.

The world (``card_world.py``) is an evolving two-island MAP-Elites population on a [0, 1]
metric whose gains and invalid rates are step and quadratic functions of the parent's
fitness and behaviour (not linear in memory v2's features), with heteroscedastic noise; a
delivered card is cited with a card-specific probability and acts only when cited. Each
round the policy under test picks an action for the round's parent: abstain, or propose a
card that it delivers or (memory v2, Thompson-withholding) withholds as a control.

memory v2 is ``CardBankMemory`` as ``config/memory/v2.yaml`` composes it (production
settings: offer probability, epsilon, delta, alpha, priors, lineage head H = 3 / O = 32,
causal retirement every 25 outcomes), over a real bank (``cards.json``) of the world's
cards and its real causal ledger, with authoring off (a fixed card set). Each outcome is
reported with the measurement the problem declares: ``deterministic`` (omega = 0, the
built-ins), ``noisy`` (the evaluation adds N(0, 0.02^2) and the problem declares se =
0.02) or ``unknown`` (nothing declared: omega = memory.posterior_config.
unknown_measurement_sd, which every outcome got before issue 20).

Baselines on the same per-round random numbers (``card_world.round_numbers``): Gaussian
Thompson sampling over {no card, each card} on the realised value, with and without
withholding the same share (1 - e) of its proposals; epsilon-greedy (0.1); never offering;
a uniform card always delivered.

Reported per policy over the seeds: cumulative regret against the oracle (true expected
hurdle values, memory-model.md "Policy"; a delivered card's value counts its citation
probability) with a 95 % t interval and the paired difference to Thompson-withholding;
regret per round in the last quarter; abstention share; deliveries of the card that raises
invalidity most, and for memory v2 that card's exploration share (sum over decisions of e
* epsilon * chi_j: what the 5 % challenger exploration alone would deliver) and the share
of decisions where it was in the safe set. For memory v2 also: 95 % posterior intervals
(end of run) of each card's average gain, invalidity and hurdle effect over the contexts
where it was proposed, against the truth (coverage over cards and seeds); the ITT DR of
``ope_summary.json`` against the true ITT of the logged decisions (bias in SEs, interval
coverage over seeds with the i.i.d. and the parent-clustered SE); cards retired and when.

Variants of memory v2 (``--variants``, comma-separated; ``v2`` is production):
  v2            production settings
  omega-0.15    every outcome without a declared standard error (the old outcome path)
  no-clip       the delayed-lineage head's draws added unclipped (memory-model.md
                "Delayed-lineage head" clips at 0)
  no-lineage    the delayed-lineage head left out of the decisions
  model-priors  memory-model.md's invalidity priors (0.15 / 0.20 / 0.60) instead of the defaults
Each may be followed by settings ":key=value;...": a bare key is memory.posterior_config's
(``v2:invalidity_lineage_prior_sd=0.6``), a dotted one any memory group's
(``v2:excluder.kind=none``, ``v2:causal.epsilon=0.1``).
"""

from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import hashlib  # noqa: E402
import itertools  # noqa: E402
import math  # noqa: E402
import pickle  # noqa: E402
import shutil  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from concurrent.futures import ProcessPoolExecutor, as_completed  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
from scipy import stats  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from card_world import (  # noqa: E402
    EpsilonGreedy,
    Never,
    Policy,
    Population,
    Thompson,
    Uniform,
    World,
    mutate,
    round_numbers,
    worlds,
)
from memory_arm import Coverage, MemoryArm  # noqa: E402

from gigaevo.memory.v2.causal.ope import clustered_se  # noqa: E402

OFFER = 0.7  # memory.causal.offer_probability (tests/analysis/test_bench_card_world.py checks it)
NOISY_SE = 0.02


@dataclass
class Trace:
    """One policy on one seed."""

    policy: str
    regret: np.ndarray
    abstain: int = 0
    # regret by what was done: abstained, proposed and withheld, delivered (summed)
    regret_by: dict[str, float] = field(default_factory=dict)
    harmful_delivered: int = 0
    harmful_exploration: float = 0.0
    harmful_safe: float = float("nan")
    coverage: Coverage | None = None
    itt: tuple[float, float, float] | None = None  # (estimate, se, truth)
    # per OPE row: psi, true ITT, parent, island, round, z (``MemoryArm.itt_rows``)
    itt_rows: dict[str, np.ndarray] | None = None
    retired: list[tuple[int, str]] = field(default_factory=list)
    seconds: float = 0.0
    # per round: proposed card index (-1: abstained), delivered, the oracle's action (-1: none)
    proposed: np.ndarray | None = None
    delivered: np.ndarray | None = None
    best: np.ndarray | None = None
    # per round, the regret of every action (no card, card 0, ...): (rounds, K + 1)
    action_regret: np.ndarray | None = None
    # memory v2 per round (``MemoryArm.log``): rho_0, |A|, the harmful card's rho, chi, safe flag
    decisions: dict[str, np.ndarray] = field(default_factory=dict)
    seed: int | None = None  # the run's seed (``complete`` sets it on runs saved without it)


def itt_se(trace: Trace, kind: str) -> float | None:
    """The SE of a memory run's ITT DR: ``iid`` as ``ope_summary.json``'s ``se``, ``parent``
    its ``se_parent`` (recomputed from the run's OPE rows, so runs saved before it existed
    report it too)."""
    if trace.itt is None:
        return None
    if kind == "iid":
        return trace.itt[1]
    rows = trace.itt_rows
    if rows is None:
        return None
    return clustered_se(np.asarray(rows["psi"], dtype=float), rows["parent"])[0]


def play(world: World, policy: Policy, seed: int, rounds: int) -> Trace:
    """Run ``policy`` for ``rounds`` rounds of ``world`` (regret from the known truth)."""
    started = time.perf_counter()
    pop = Population.seeded()
    regret = np.zeros(rounds)
    harmful = world.harmful()
    trace = Trace(policy.name, regret, seed=seed)
    trace.proposed = np.full(rounds, -1, dtype=np.int16)
    trace.delivered = np.zeros(rounds, dtype=bool)
    trace.best = np.full(rounds, -1, dtype=np.int16)
    trace.action_regret = np.zeros((rounds, len(world.cards) + 1), dtype=np.float32)
    for t in range(rounds):
        r = round_numbers(seed, t)
        parent = pop.parent(t, r)
        proposed, delivered = policy.choose(t, parent, r)
        card = proposed if delivered else None
        out = mutate(world, parent, t, r, card)
        if not out.invalid:
            disposition = pop.add(out.child)
            out = type(out)(out.child, False, out.cited, out.y, disposition)
        f, b = parent.fitness, parent.b
        recent = parent.recent
        values = [world.deliver_value(f, b, j, recent) for j in [None, *range(len(world.cards))]]
        regret[t] = max(values) - world.deliver_value(f, b, card, recent)
        trace.best[t] = int(np.argmax(values)) - 1
        trace.action_regret[t] = max(values) - np.asarray(values)
        trace.proposed[t] = -1 if proposed is None else proposed
        trace.delivered[t] = card is not None
        trace.abstain += proposed is None
        kind = "abstained" if proposed is None else ("delivered" if delivered else "withheld")
        trace.regret_by[kind] = trace.regret_by.get(kind, 0.0) + float(regret[t])
        trace.harmful_delivered += card == harmful
        value = -f if out.invalid else float(out.y or 0.0)
        if isinstance(policy, MemoryArm):
            policy.observe(t, parent, out)
        else:
            policy.update(card, value)
    if isinstance(policy, MemoryArm):
        trace.harmful_exploration = policy.exploration.get(world.cards[harmful].card_id, 0.0)
        trace.harmful_safe = policy.safe_share(world.cards[harmful].card_id)
        trace.coverage = policy.coverage(world, seed)
        trace.itt = policy.itt()
        trace.itt_rows = policy.itt_rows()
        trace.retired = policy.retired
        trace.decisions = policy.decision_log()
        policy.close()
    trace.seconds = time.perf_counter() - started
    return trace


def run_one(args: tuple[str, str, str, int, int, str]) -> Trace:
    world_name, measurement, name, seed, rounds, scratch = args
    world = worlds(NOISY_SE if measurement == "noisy" else 0.0)[world_name]
    k = len(world.cards)
    factories: dict[str, Callable[[], Policy]] = {
        "Thompson, withholding": lambda: Thompson(k, seed, withhold=1.0 - OFFER),
        "Thompson, withholding, excluder": lambda: Thompson(
            k, seed, withhold=1.0 - OFFER, exclude=True
        ),
        "Thompson": lambda: Thompson(k, seed),
        "epsilon-greedy": lambda: EpsilonGreedy(k, seed),
        "never offer": lambda: Never(),
        "uniform": lambda: Uniform(k, seed),
    }
    if name in factories:
        trace = play(world, factories[name](), seed, rounds)
        trace.policy = name
        return trace
    variant = name.removeprefix("memory ")
    with tempfile.TemporaryDirectory(dir=scratch) as tmp:
        arm = MemoryArm(world, Path(tmp), seed, rounds, measurement=measurement, variant=variant)
        trace = play(world, arm, seed, rounds)
    trace.policy = name
    return trace


KINDS = ("abstained", "withheld", "delivered")
BASELINES = (
    "Thompson, withholding",
    "Thompson, withholding, excluder",
    "Thompson",
    "epsilon-greedy",
    "never offer",
    "uniform",
)


def t_interval(values: list[float]) -> tuple[float, float]:
    v = np.asarray(values, dtype=float)
    if len(v) < 2:
        return float(v.mean()), 0.0
    return float(v.mean()), float(
        stats.t.ppf(0.975, len(v) - 1) * v.std(ddof=1) / math.sqrt(len(v))
    )


def report(traces: dict[str, list[Trace]], world: World) -> None:
    ts = [float(t.regret.sum()) for t in traces["Thompson, withholding"]]
    n = len(traces[next(iter(traces))][0].regret)
    quarter = max(1, n // 4)
    print(
        f"  {'policy':<24} {'regret [95% CI]':>20} {'- TS-withhold [95% CI]':>24} "
        f"{'last 1/4':>9} {'abstain':>8} {'harm dlv':>9} {'harm expl':>9} {'harm safe':>9}"
    )
    for name, runs in traces.items():
        total = [float(t.regret.sum()) for t in runs]
        mean, half = t_interval(total)
        dm, dh = t_interval([a - b for a, b in zip(total, ts, strict=True)])
        tail = float(np.mean([t.regret[-quarter:].mean() for t in runs]))
        abstain = float(np.mean([t.abstain for t in runs])) / n
        dlv = float(np.mean([t.harmful_delivered for t in runs]))
        memory = name.startswith("memory")
        expl = f"{np.mean([t.harmful_exploration for t in runs]):9.1f}" if memory else f"{'':>9}"
        safe = f"{np.nanmean([t.harmful_safe for t in runs]):9.0%}" if memory else f"{'':>9}"
        print(
            f"  {name:<24} {mean:>9.2f} +- {half:<7.2f} {dm:>+11.2f} +- {dh:<9.2f} "
            f"{tail:>9.4f} {abstain:>8.0%} {dlv:>9.1f} {expl} {safe}"
        )
    print("  regret by action (no card chosen / proposed but withheld / delivered):")
    for name, runs in traces.items():
        parts = [np.mean([t.regret_by.get(k, 0.0) for t in runs]) for k in KINDS]
        print(f"    {name:<24} " + " / ".join(f"{v:.2f}" for v in parts))
    memories = [n for n in traces if n.startswith("memory")]
    if len(memories) > 1:  # variants against the first one, paired by seed
        first = [float(t.regret.sum()) for t in traces[memories[0]]]
        for name in memories[1:]:
            other = [float(t.regret.sum()) for t in traces[name]]
            dm, dh = t_interval([a - b for a, b in zip(other, first, strict=True)])
            print(f"  {name} - {memories[0]}: {dm:+.2f} +- {dh:.2f} (paired by seed)")
    for name in memories:
        memory_details(name, traces[name], world)


@dataclass(frozen=True)
class HarmfulLife:
    """The harmful card in one memory v2 run (``harmful_life``)."""

    delivered: int
    cited: int
    cited_invalid: int
    out_round: int | None  # first decision where it was a candidate and not safe
    cited_at_out: int | None
    delivered_at_out: int | None
    returns: int  # candidate decisions where it was safe again after being unsafe
    flat_cited: int | None  # cited rows at which the flat Beta-binomial would exclude it
    flat_delivered: int | None


def harmful_life(world: World, trace: Trace, delta: float = 0.10, alpha: float = 0.10
                 ) -> HarmfulLife:  # fmt: skip
    """Replay ``trace``'s world side (its actions and the round numbers decide every child)
    and follow the harmful card: its cited rows and deliveries when it first left the safe
    set, how often it came back, and when a flat Beta-binomial on the same rows (Beta(1, 1)
    on its cited rows' invalid rate and on the withheld controls', looked at after each
    cited row) would have excluded it: P(p_1 - p_0 > delta) >= 1 - alpha, the chance
    constraint's event (memory-model.md "Invalidity head and chance constraint")."""
    assert trace.proposed is not None and trace.delivered is not None and trace.seed is not None
    h, pop = world.harmful(), Population.seeded()
    bit = 1 << h
    safe = [(int(v) & bit) != 0 for v in trace.decisions.get("safe", ())]
    elig = [(int(v) & bit) != 0 for v in trace.decisions.get("eligible", ())]
    rng = np.random.default_rng([trace.seed, 5])
    n1 = k1 = n0 = k0 = dlv = 0
    out = cited_out = dlv_out = flat = None
    returns, was_safe = 0, None
    for t in range(len(trace.proposed)):
        if t < len(safe) and elig[t]:
            if not safe[t] and out is None:
                out, cited_out, dlv_out = t, n1, dlv
            returns += bool(was_safe is False and safe[t])
            was_safe = safe[t]
        r = round_numbers(trace.seed, t)
        parent = pop.parent(t, r)
        card = int(trace.proposed[t]) if trace.delivered[t] else None
        child = mutate(world, parent, t, r, card)
        if not child.invalid:
            pop.add(child.child)
        if trace.proposed[t] >= 0 and card is None:  # a withheld control
            n0, k0 = n0 + 1, k0 + child.invalid
        dlv += card == h
        if card == h and child.cited:
            n1, k1 = n1 + 1, k1 + child.invalid
            if flat is None:
                p1 = rng.beta(1 + k1, 1 + n1 - k1, 20_000)
                p0 = rng.beta(1 + k0, 1 + n0 - k0, 20_000)
                if np.mean(p1 - p0 > delta) >= 1 - alpha:
                    flat = (n1, dlv)
    return HarmfulLife(dlv, n1, k1, out, cited_out, dlv_out, returns,
                       flat[0] if flat else None, flat[1] if flat else None)  # fmt: skip


def level_flips(trace: Trace, alpha: float = 0.10) -> tuple[list[float], int, int]:
    """Over the decisions that integrated the harmful card: |change of its P_acc| at each
    change of its shift level, and its returns to the safe set (P_acc from <= alpha to
    > alpha between such decisions) with a wide -> narrow flip and with the level unchanged."""
    d = trace.decisions
    p, wide = np.asarray(d["harm_pacc"], dtype=float), np.asarray(d["harm_wide"], dtype=float)
    at = np.flatnonzero(~np.isnan(p) & ~np.isnan(wide))
    jumps, by_flip, same = [], 0, 0
    for a, b in itertools.pairwise(at):
        if wide[a] != wide[b]:
            jumps.append(abs(float(p[b] - p[a])))
        if p[a] <= alpha < p[b]:
            by_flip += int(wide[a] == 1 and wide[b] == 0)
            same += int(wide[a] == wide[b])
    return jumps, by_flip, same


def memory_details(name: str, runs: list[Trace], world: World) -> None:
    print(f"  {name}:")
    lives = [harmful_life(world, t) for t in runs if t.seed is not None and t.decisions]
    if lives:
        out = [x for x in lives if x.out_round is not None]
        flat = [x for x in lives if x.flat_cited is not None]
        after = [x.delivered - (x.delivered_at_out or 0) for x in out]
        invalid = np.mean([x.cited_invalid for x in lives])
        print(
            f"    harmful card: delivered {np.mean([x.delivered for x in lives]):.1f}, cited "
            f"{np.mean([x.cited for x in lives]):.1f} ({invalid:.1f} invalid) per run; left the "
            f"safe set in {len(out)} of {len(lives)} runs, at "
            f"{np.mean([x.cited_at_out for x in out]) if out else math.nan:.1f} cited rows / "
            f"{np.mean([x.delivered_at_out for x in out]) if out else math.nan:.1f} deliveries, "
            f"then delivered {np.mean(after) if out else math.nan:.1f} more (safe again "
            f"{np.mean([x.returns for x in out]) if out else math.nan:.0f} times); a flat "
            f"Beta-binomial on the same rows excludes it in {len(flat)} runs, at "
            f"{np.mean([x.flat_cited for x in flat]) if flat else math.nan:.1f} cited rows / "
            f"{np.mean([x.flat_delivered for x in flat]) if flat else math.nan:.1f} deliveries"
        )  # fmt: skip
    levels = [level_flips(t) for t in runs if "harm_wide" in t.decisions]
    if levels:
        flips = [j for x in levels for j in x[0]]
        print(
            f'    harmful card\'s shift level (memory-model.md "Card shift levels"): '
            f"{len(flips) / len(levels):.1f} narrow/wide flips per run, P_acc moving by a median "
            f"{np.median(flips) if flips else math.nan:.2f} at a flip; of "
            f"{sum(x[1] + x[2] for x in levels)} returns to the safe set (P_acc above alpha "
            f"again), {sum(x[1] for x in levels)} came with a wide -> narrow flip"
        )
    cov = [t.coverage for t in runs if t.coverage is not None]
    for kind in ("gain", "invalid", "hurdle"):
        hits = [h for c in cov for h in getattr(c, kind).values()]
        per_card = {
            card.card_id: np.mean(
                [c.__dict__[kind][card.card_id] for c in cov if card.card_id in c.__dict__[kind]]
            )
            for card in world.cards
        }
        cards = ", ".join(f"{k} {v:.0%}" for k, v in per_card.items() if not math.isnan(v))
        print(f"    95% interval covers the true {kind} effect: {np.mean(hits):.0%} ({cards})")
    itt = [t.itt for t in runs if t.itt is not None]
    if itt:
        err = np.array([e - truth for e, _, truth in itt])
        ses = np.array([se for _, se, _ in itt])
        # the mean error in units of its own standard error, from each seed's SE (the
        # across-seed spread of a handful of seeds is no yardstick: 4 seeds once read
        # "+3.8 SE" where the pooled z was +0.7)
        pooled = err.sum() / math.sqrt(float(np.sum(ses**2)))
        print(
            f"    ITT DR - truth: {err.mean():+.4f}, pooled z {pooled:+.2f} over "
            f"{len(err)} seeds (sum of errors / sqrt(sum of SE^2))"
        )
        for kind, label in (
            ("iid", "i.i.d. SE sd(psi)/sqrt(n)"),
            ("parent", "parent-clustered SE"),
        ):
            pairs = [(t.itt[0] - t.itt[2], itt_se(t, kind)) for t in runs if t.itt is not None]
            pairs = [(e, se) for e, se in pairs if se is not None and se > 0]
            if not pairs:
                continue
            z = np.array([e / se for e, se in pairs])
            print(
                f"    ITT 95% CI with the {label}: covers the truth in "
                f"{np.mean(np.abs(z) <= 1.96):.0%} of {len(z)} seeds; sd of (DR - truth) / SE "
                f"{z.std(ddof=1) if len(z) > 1 else math.nan:.2f}"
            )
    retired = [r for t in runs for r in t.retired]
    by_card: dict[str, list[int]] = {}
    for when, cid in retired:
        by_card.setdefault(cid, []).append(when)
    text = ", ".join(
        f"{c} in {len(w)} runs (median round {int(np.median(w))})"
        for c, w in sorted(by_card.items())
    )
    print(f"    retired: {text or 'none'}; wall {np.mean([t.seconds for t in runs]):.0f} s per run")


SAVE_VERSION = 2
CODE = ("gigaevo/memory", "config/memory", "benchmarks/card_world.py", "benchmarks/memory_arm.py")


def code_digest() -> str:
    """SHA-256 of the code a memory run depends on (a resumed file must match it)."""
    h = hashlib.sha256()
    for top in CODE:
        path = ROOT / top
        for f in sorted(path.rglob("*")) if path.is_dir() else [path]:
            if f.is_file() and f.suffix in (".py", ".yaml"):
                h.update(str(f.relative_to(ROOT)).encode() + b"\0" + f.read_bytes())
    return h.hexdigest()[:16]


def load_saved(path: Path) -> dict:
    """A ``--save`` file: {"version", "world", "rounds", "measurement", "runs": {(seed, policy):
    Trace}}; the first format (world name, {policy: [Trace per seed]}) is converted."""
    data = pickle.loads(path.read_bytes())
    if isinstance(data, tuple):  # the first format: only whole seeds, seed numbers lost
        world_name, traces = data
        runs = {(i, n): t for n, ts in traces.items() for i, t in enumerate(ts)}
        rounds = len(next(iter(runs.values())).regret) if runs else 0
        return {"version": 1, "world": world_name, "rounds": rounds, "measurement": None,
                "code": None, "runs": runs}  # fmt: skip
    return data


def merge_saved(items: list[str]) -> dict:
    """``--save`` files given as ``[LABEL=]FILE``, merged: memory runs renamed "memory <variant>
    [LABEL]", baselines from the first file. Exit 2 if they differ in world, rounds or
    measurement."""
    merged: dict = {}
    for i, item in enumerate(items):
        label, _, path = item.rpartition("=")
        data = load_saved(Path(path))
        keys = ("world", "rounds", "measurement")
        if merged and any(data[k] != merged[k] for k in keys):
            print(f"bench_card_world: {path} holds world {data['world']!r}, {data['rounds']} "
                  f"rounds, measurement {data['measurement']}: not the runs of {items[0]}",
                  file=sys.stderr)  # fmt: skip
            sys.exit(2)
        if not merged:
            merged = {**data, "runs": {}}
        for (seed, name), trace in data["runs"].items():
            if name.startswith("memory"):
                name = f"{name} [{label}]" if label else name
                merged["runs"][(seed, name)] = trace
            elif i == 0:
                merged["runs"][(seed, name)] = trace
    return merged


def save(path: Path, data: dict) -> None:
    """Write ``data`` atomically (a kill mid-write leaves the previous file)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(pickle.dumps(data))
    os.replace(tmp, path)


def complete(runs: dict[tuple[int, str], Trace], names: list[str]) -> dict[str, list[Trace]]:
    """Per policy, the traces of the seeds every policy in ``names`` finished (paired reports)."""
    seeds = sorted({s for s, _ in runs if all((s, n) in runs for n in names)})
    for (s, _), trace in runs.items():
        if getattr(trace, "seed", None) is None:  # saved before traces kept their seed
            trace.seed = s
    return {n: [runs[(s, n)] for s in seeds] for n in names}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--world", default="mixed", choices=sorted(worlds()))
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument(
        "--first-seed", type=int, default=0, help="run seeds first-seed .. first-seed + seeds - 1"
    )
    parser.add_argument("--rounds", type=int, default=600)
    parser.add_argument(
        "--measurement", default="deterministic", choices=("deterministic", "noisy", "unknown")
    )
    parser.add_argument("--variants", default="v2", help="memory v2 variants, comma-separated")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="4 seeds x 200 rounds")
    parser.add_argument(
        "--save", type=Path,
        help="keep every finished (seed, policy) run here, written after each one; an "
        "existing file of the same world, rounds, measurement and memory code (a digest of "
        "gigaevo/memory, config/memory and the world) is resumed: its finished runs are not "
        "run again",
    )  # fmt: skip
    parser.add_argument(
        "--load", nargs="+", metavar="[LABEL=]FILE",
        help="report the runs kept by --save; several files (e.g. the same seeds run on two "
        "trees) are merged and paired by seed: each file's memory runs are named with its "
        "LABEL, the baselines (which no memory code touches) come from the first file",
    )  # fmt: skip
    args = parser.parse_args()
    seeds, rounds = (4, 200) if args.quick else (args.seeds, args.rounds)
    seed_range = range(args.first_seed, args.first_seed + seeds)
    variants = [f"memory {v}" for v in args.variants.split(",") if v]
    names = [*variants, *BASELINES]
    if args.load:
        data = merge_saved(args.load)
        kept = list(dict.fromkeys(n for _, n in data["runs"]))  # in the order they finished
        wanted = [n for n in kept if n.startswith("memory")] + [n for n in BASELINES if n in kept]
        traces = complete(data["runs"], wanted)
        print(f"loaded {' '.join(args.load)}: world {data['world']!r}, {data['rounds']} "
              f"rounds, {len(traces[wanted[0]])} seeds finished by every policy")  # fmt: skip
        report(traces, worlds()[data["world"]])
        return
    world = worlds()[args.world]
    data = {"version": SAVE_VERSION, "world": args.world, "rounds": rounds,
            "measurement": args.measurement, "code": code_digest(), "runs": {}}  # fmt: skip
    if args.save and args.save.exists():
        old = load_saved(args.save)
        keys = ("world", "rounds", "measurement", "code")
        if any(old.get(k) != data[k] for k in keys):
            print(f"bench_card_world: {args.save} holds world {old['world']!r}, "
                  f"{old['rounds']} rounds, measurement {old['measurement']}, memory code "
                  f"{old.get('code')}: not this run (code {data['code']}); choose another "
                  "--save file", file=sys.stderr)  # fmt: skip
            sys.exit(2)
        data = old
    runs: dict[tuple[int, str], Trace] = data["runs"]
    scratch = "/dev/shm" if Path("/dev/shm").is_dir() else tempfile.gettempdir()
    work = [
        (args.world, args.measurement, n, s, rounds, scratch)
        for s in seed_range
        for n in names
        if (s, n) not in runs
    ]
    print(
        f"card world {world.name!r}: {len(world.cards)} cards "
        f"({', '.join(c.card_id for c in world.cards)}), seeds {seed_range.start}.."
        f"{seed_range.stop - 1} x {rounds} rounds, measurement {args.measurement}; "
        f"{len(names) * seeds - len(work)} of {len(names) * seeds} runs already kept; "
        f"memory code {data['code']}; "
        f"load {os.getloadavg()[0]:.1f}", flush=True,
    )  # fmt: skip
    started = time.perf_counter()
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        futures = {pool.submit(run_one, w): w for w in work}
        for done in as_completed(futures):
            seed, trace = futures[done][3], done.result()
            runs[(seed, trace.policy)] = trace
            if args.save:  # after every run: a killed benchmark resumes where it stopped
                save(args.save, data)
            if all((seed, n) in runs for n in names):
                finished = sum(all((s, n) in runs for n in names) for s in seed_range)
                print(f"  seed {seed} done ({finished}/{seeds}); load "
                      f"{os.getloadavg()[0]:.1f}", flush=True)  # fmt: skip
    mine = {key: t for key, t in runs.items() if key[0] in seed_range}
    report(complete(mine, names), world)
    print(f"  wall {time.perf_counter() - started:.0f} s; load {os.getloadavg()[0]:.1f}")
    shutil.rmtree(Path(scratch) / "gigaevo-card-world", ignore_errors=True)


if __name__ == "__main__":
    main()
