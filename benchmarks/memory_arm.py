"""memory v2 as a card-world policy: the real ``CardBankMemory`` over a real bank and ledger.

Used by ``bench_card_world.py``. The provider is built from ``config/memory/v2.yaml`` as
Hydra composes it (production settings), with authoring and program exemplars off (the
bank is the world's fixed card set). The only instrumentation is a wrapper around the
reader's selection step that keeps each decision's proposal (rho, chi, safe set): nothing
the policy does is changed, except in the named ablation variants.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from card_world import Outcome, Policy, Program, Round, World
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf
from scipy.special import expit

from gigaevo.memory.base import MemoryRuntime, MutationContext, MutationResult
from gigaevo.memory.v2 import CardBankMemory, HashingEmbedder, LocalMemoryStore
from gigaevo.memory.v2.bank.cards import Evidence, founding_card
from gigaevo.memory.v2.causal import selection as selection_module
from gigaevo.memory.v2.causal.ope import itt_scores
from gigaevo.memory.v2.causal.policy import hurdle_values, world_effects
from gigaevo.memory.v2.read.heads import HeadFit
from gigaevo.problems.spec import MetricsSpec

ROOT = Path(__file__).resolve().parents[1]
TASK = "card-world"
METRICS = MetricsSpec("score", True, 0.0, 1.0, 0.0)
MODEL_INVALIDITY_PRIORS = {
    "invalidity_baseline_prior_sd": 0.15,
    "invalidity_shared_prior_sd": 0.20,
    "invalidity_lineage_prior_sd": 0.60,
    "invalidity_baseline_intercept_prior_sd": None,
    "invalidity_lineage_intercept_prior_sd": None,
}
VARIANTS = ("v2", "omega-0.15", "no-clip", "no-lineage", "model-priors")


@functools.cache
def _composed() -> str:
    """``memory=v2`` as composed from ``config/`` (YAML; composed once per process)."""
    with initialize_config_dir(config_dir=str(ROOT / "config"), version_base="1.3"):
        cfg = compose("config", overrides=["memory=v2", "checkpoint_dir=/unused"])
    return OmegaConf.to_yaml(cfg.memory, resolve=True)


def production_settings() -> dict[str, Any]:
    """``memory=v2`` as composed from ``config/`` (plain values), authoring off."""
    node = OmegaConf.to_container(OmegaConf.create(_composed()))
    assert isinstance(node, dict)
    for key in ("_target_", "_partial_", "_convert_", "llm", "embedder"):
        node.pop(key, None)
    node["writer"] = {**node["writer"], "authoring_enabled": False}
    node["program_exemplars"] = {**node["program_exemplars"], "enabled": False}
    return {str(k): v for k, v in node.items()}


def bank_cards(world: World, directory: Path) -> None:
    """Write the world's cards into ``directory/cards.json`` (insight cards of TASK)."""
    store = LocalMemoryStore(directory, embedder=HashingEmbedder()).open()
    cards = {}
    for spec in world.cards:
        evidence = Evidence(
            TASK, "bank", 0, "p", "c", 0.3, 0.31, 0.01, "improved", spec.card_id, 0.0
        )
        cards[spec.card_id] = founding_card(
            card_id=spec.card_id,
            kind="insight",
            task_key=TASK,
            task_context="The card world.",
            text=(f"When {spec.card_id} holds, try {spec.card_id}.", f"mechanism {spec.card_id}"),
            evidence=evidence,
            provenance=("p", "c"),
            representative=None,
            lineage=(),
            author_model="bench",
            run_id="bank",
        )
    store.transaction(lambda live: live.update(cards))


@dataclass
class Coverage:
    """Per card: whether the 95 % interval covered the true average effect."""

    gain: dict[str, bool] = field(default_factory=dict)
    invalid: dict[str, bool] = field(default_factory=dict)
    hurdle: dict[str, bool] = field(default_factory=dict)


class MemoryArm(Policy):
    """``CardBankMemory`` deciding each round (see the module docstring)."""

    def __init__(
        self, world: World, directory: Path, seed: int, rounds: int, *, measurement: str,
        variant: str = "v2",
    ) -> None:  # fmt: skip
        self.name = f"memory {variant}"
        variant, _, overrides = variant.partition(":")
        if variant not in VARIANTS:
            raise ValueError(f"unknown memory variant {variant!r} (choose from {VARIANTS})")
        self.world, self.rounds, self.variant = world, rounds, variant
        self.measurement = "unknown" if variant == "omega-0.15" else measurement
        settings = production_settings()
        if variant == "model-priors":
            settings["posterior_config"] = {
                **settings["posterior_config"],
                **MODEL_INVALIDITY_PRIORS,
            }
        for item in filter(None, overrides.split(";")):
            # "key=value": memory.posterior_config.key (none: None); "group.key=value":
            # memory.group.key (null: None)
            key, _, value = item.partition("=")
            group, _, key = key.rpartition(".")
            node = settings[group or "posterior_config"]
            if key not in node:
                raise ValueError(f"unknown memory setting {group or 'posterior_config'}.{key}")
            node[key] = None if value == "none" and not group else _parse(value)
        self.offer = float(settings["causal"]["offer_probability"])
        self.epsilon = float(settings["causal"]["epsilon"])
        bank_cards(world, directory)
        runtime = MemoryRuntime(
            task_key=TASK,
            task_description="The card world.",
            metrics=METRICS,
            checkpoint_dir=directory,
            bank_dir=directory,
            seed=seed,
            max_mutants=rounds,
        )
        self.mem = CardBankMemory(runtime, llm=None, embedder=HashingEmbedder(), **settings)
        assert self.mem.reader is not None
        self.index = {c.card_id: i for i, c in enumerate(world.cards)}
        # per proposed card: (f, b, x, re-applied inside its lineage) of each proposal
        self.proposals: dict[str, list[tuple[float, tuple[float, float], np.ndarray, bool]]] = {}
        self.itt_truth: dict[int, float] = {}
        self.row_state: dict[int, tuple[float, float, float, int, float]] = {}  # f, b, card, reused
        self.exploration: dict[str, float] = {}
        self.safe: dict[str, list[bool]] = {}
        self.retired: list[tuple[int, str]] = []
        self.log: list[dict[str, Any]] = []  # one entry per decision (``decision_log``)
        self.harm_rows = [0, 0]  # the harmful card's cited rows, invalid ones among them
        self._last: dict[str, Any] = {}
        self._live = set(self.index)
        self._wrap_selection()

    # -- instrumentation and ablations -------------------------------------------
    def _wrap_selection(self) -> None:
        reader = self.mem.reader
        assert reader is not None
        original = reader._select
        arm = self

        def select(decision_id: str, fit: HeadFit, x: np.ndarray, *args: Any) -> Any:
            # (context, bank, eligible, pending): eligible holds positions in bank.cards
            bank, positions = args[1], args[2]
            eligible = [bank.cards[i] for i in np.asarray(positions, dtype=int).tolist()]
            if arm.variant == "no-lineage":
                fit = dataclasses.replace(fit, lineage=None)
            if arm.variant == "no-clip":
                with _unclipped_lineage():
                    sel = original(decision_id, fit, x, *args)
            else:
                sel = original(decision_id, fit, x, *args)
            arm._last_x = x
            arm._note(sel, [c.id for c in eligible])
            arm._note_harmful(sel, fit)
            return sel

        reader._select = select  # type: ignore[method-assign]

    def _note(self, sel: Any, eligible: list[str]) -> None:
        prop = sel.proposal
        safe = set(prop.card_ids)
        harm = self.world.cards[self.world.harmful()].card_id
        rho = dict(zip(prop.card_ids, prop.rho, strict=True))
        chi = dict(zip(prop.card_ids, prop.chi, strict=True))
        self._last = {
            "rho0": float(prop.rho0),
            "safe": sum(1 << self.index[c] for c in safe),
            "eligible": sum(1 << self.index[c] for c in eligible),
            "harm_rho": float(rho.get(harm, 0.0)),
            "harm_chi": float(chi.get(harm, 0.0)),
            "reason": sel.abstain_reason,
            "safe_ids": safe,
            "chi_all": dict(zip(prop.card_ids, prop.chi, strict=True)),
        }

    def _note_harmful(self, sel: Any, fit: HeadFit) -> None:
        """The harmful card's P_acc, whether its shift has the wide level, and its cited and
        invalid cited rows so far (memory-model.md "Card shift levels")."""
        harm = self.world.cards[self.world.harmful()].card_id
        acc = sel.acceptance.get(harm) if sel.acceptance else None
        self._last["harm_pacc"] = np.nan if acc is None else float(acc.probability)
        space, inv = fit.space, fit.invalidity
        wide = np.nan
        if inv is not None and harm in space.lineages:
            col = space.shared_size + space.lineages.index(harm) * space.n_context
            wide = float(col in set(np.asarray(inv.wide_columns_).tolist()))
        self._last["harm_wide"] = wide
        self._last["harm_cited"] = self.harm_rows[0]
        self._last["harm_invalid"] = self.harm_rows[1]

    def decision_log(self) -> dict[str, np.ndarray]:
        """Per round: rho_0, safe and eligible sets (bit j = world card j), the harmful card's
        rho, chi, P_acc, wide level (1/0), cited and invalid cited rows so far, and the
        abstention reason ("" when the policy ran)."""
        keys = ("rho0", "safe", "eligible", "harm_rho", "harm_chi", "reason", "harm_pacc",
                "harm_wide", "harm_cited", "harm_invalid")  # fmt: skip
        blank = {"rho0": np.nan, "safe": 0, "eligible": 0, "harm_rho": np.nan,
                 "harm_chi": np.nan, "reason": "not selected", "harm_pacc": np.nan,
                 "harm_wide": np.nan, "harm_cited": -1, "harm_invalid": -1}  # fmt: skip
        return {k: np.array([entry.get(k, blank[k]) for entry in self.log]) for k in keys}

    def safe_share(self, card_id: str) -> float:
        flags = self.safe.get(card_id, [])
        return float(np.mean(flags)) if flags else float("nan")

    # -- the policy ---------------------------------------------------------------
    def choose(self, t: int, parent: Program, r: Round) -> tuple[int | None, bool]:
        ctx = MutationContext(
            TASK, t, parent.pid, parent.fitness, parent.island, parent.cell, parent.b,
            t / self.rounds,
        )  # fmt: skip
        self._last = {}
        decision = self.mem.decide(ctx)
        # counted here, once per committed decision (a lease redraft selects twice)
        last = self._last
        selected = "safe_ids" in last
        safe, chi = last.pop("safe_ids", set()), last.pop("chi_all", {})
        for cid in self._live if selected else ():
            self.safe.setdefault(cid, []).append(cid in safe)
        for cid, c in chi.items():
            self.exploration[cid] = self.exploration.get(cid, 0.0) + self.offer * self.epsilon * c
        self.log.append(last)
        pid = decision.record.get("proposed_id")
        if not isinstance(pid, str):
            return None, False
        j = self.index[pid]
        f, b = parent.fitness, parent.b
        reused = j in parent.recent
        self.proposals.setdefault(pid, []).append((f, b, np.asarray(self._last_x), reused))
        self.itt_truth[t] = self.world.deliver_value(f, b, j, parent.recent) - self.world.value(
            f, b, None
        )
        self.row_state[t] = (f, b[0], b[1], j, float(reused))
        return j, bool(decision.card_ids)

    def observe(self, t: int, parent: Program, out: Outcome) -> None:
        delivered = self.mem.reader.evidence.decision(_decision_id(self.mem, t))  # type: ignore[union-attr]
        cited: tuple[str, ...] = ()
        if out.cited and delivered is not None and delivered.z == 1 and delivered.proposed_id:
            cited = (delivered.proposed_id,)
            if delivered.proposed_id == self.world.cards[self.world.harmful()].card_id:
                self.harm_rows[0] += 1
                self.harm_rows[1] += int(out.invalid)
        se, kind = {
            "deterministic": (0.0, "deterministic"),
            "noisy": (self.world.measurement_se, "scalar"),
        }.get(self.measurement, (None, None))
        valid = not out.invalid
        self.mem.observe(
            MutationResult(
                attempt=t,
                child_id=out.child.pid,
                parent_id=parent.pid,
                status="invalid"
                if out.invalid
                else ("rejected" if out.disposition == "rejected" else "accepted"),
                valid=valid,
                parent_fitness=parent.fitness,
                child_fitness=out.child.fitness if valid else 0.0,
                normalised_gain=out.y,
                cited_card_ids=cited,
                accepted=valid and out.disposition != "rejected",
                island=parent.island,
                parent_cell=parent.cell,
                child_cell=out.child.cell if valid else None,
                archive_status=out.disposition,
                se=se if valid else None,
                measurement=kind if valid else None,
            )
        )
        live = {c.id for c in self.mem.store.cards(task_key=TASK)}
        for cid in sorted(self._live - live):
            self.retired.append((t, cid))
        self._live &= live

    # -- end of run ---------------------------------------------------------------
    def coverage(self, world: World, seed: int, draws: int = 2000) -> Coverage:
        """95 % posterior intervals of each proposed card's average effects vs the truth."""
        reader = self.mem.reader
        assert reader is not None
        ctx = MutationContext(TASK, self.rounds, "probe", 0.5, 0, (1, 1), (0.5, 0.5), 1.0)
        fit = reader.heads_for(ctx)
        out = Coverage()
        if fit.immediate is None or fit.invalidity is None:
            return out
        rng = np.random.default_rng([seed, 99])
        beta = fit.immediate.sample(draws, rng)
        gamma = fit.invalidity.sample(draws, rng)
        space = fit.space
        for spec in world.cards:
            rows = self.proposals.get(spec.card_id)
            if not rows or spec.card_id not in space.lineages:
                continue
            z0 = np.array([space.row(x, 0) for _, _, x, _ in rows])
            z1 = np.array([space.row(x, 1, spec.card_id, "insight") for _, _, x, _ in rows])
            lo = np.array([-f for f, _, _, _ in rows])
            hi = 1.0 + lo
            u0, u1 = beta @ z0.T, beta @ z1.T
            p0, p1 = expit(gamma @ z0.T), expit(gamma @ z1.T)
            q0 = (1 - p0) * np.clip(u0, lo, hi) + p0 * lo
            q1 = (1 - p1) * np.clip(u1, lo, hi) + p1 * lo
            model = {"gain": u1 - u0, "invalid": p1 - p0, "hurdle": q1 - q0}
            truth = {
                "gain": np.mean([spec.gain_at(f, b, r) for f, b, _, r in rows]),
                "invalid": np.mean(
                    [world.p_invalid(b, spec) - world.p_invalid(b, None) for _, b, _, _ in rows]
                ),
                "hurdle": np.mean(
                    [world.value(f, b, spec, r) - world.value(f, b, None) for f, b, _, r in rows]
                ),
            }
            for kind, draws_ in model.items():
                avg = draws_.mean(axis=1)
                low, high = np.quantile(avg, [0.025, 0.975])
                getattr(out, kind)[spec.card_id] = bool(low <= truth[kind] <= high)
        return out

    def itt(self) -> tuple[float, float, float] | None:
        """(ITT DR, its SE, the true ITT of the same decisions) from ``ope_summary``."""
        assert self.mem.recorder is not None and self.mem.reader is not None
        summary = self.mem.recorder.ope_summary()
        if summary.get("insufficient_data") or summary.get("se") is None:
            return None
        attempts = [o.decision.attempt for o in self.mem.reader.evidence.ope_rows()]
        truth = float(np.mean([self.itt_truth[a] for a in attempts]))
        return float(summary["dr"]), float(summary["se"]), truth

    def itt_rows(self) -> dict[str, np.ndarray]:
        """Per OPE row (ledger order): its DR score psi (memory-model.md "Off-policy
        evaluation"), the true ITT of its decision, its parent, island and round: what the
        benchmark's alternative standard errors of the ITT DR are computed from, with the row's
        own columns (z, y, q1, q0, e) and its parent's state (f, b0, b1, proposed card,
        re-applied inside its lineage)."""
        assert self.mem.reader is not None
        rows = self.mem.reader.evidence.ope_rows()
        cols = self.mem.recorder._ope  # type: ignore[union-attr]
        assert cols.n == len(rows)
        d = [o.decision for o in rows]
        assert np.array_equal(cols.z, [float(x.z or 0) for x in d])  # the same rows, in order
        return {
            "psi": itt_scores(cols.z, cols.y, cols.q1, cols.q0, cols.e),
            "truth": np.array([self.itt_truth[x.attempt] for x in d]),
            "parent": np.array([x.context.parent_id for x in d], dtype=object),
            "island": np.array([x.context.island for x in d]),
            "t": np.array([x.attempt for x in d]),
            **{k: np.asarray(getattr(cols, k)).copy() for k in ("z", "y", "q1", "q0", "e")},
            **dict(
                zip(
                    ("f", "b0", "b1", "card", "reused"),
                    np.array([self.row_state[x.attempt] for x in d]).reshape(-1, 5).T,
                    strict=True,
                )
            ),
        }

    def close(self) -> None:
        self.mem.close()


def _parse(value: str) -> Any:
    """An override's value: null -> None, a number, true / false, else the string."""
    if value.lower() == "null":
        return None
    if value.lower() in ("true", "false"):
        return value.lower() == "true"
    try:
        number = float(value)
    except ValueError:
        return value
    return int(number) if number.is_integer() and "." not in value else number


def _decision_id(mem: CardBankMemory, attempt: int) -> str:
    from gigaevo.memory.v2.evidence import decision_key_id

    return decision_key_id(mem.run_id, attempt)


class _unclipped_lineage:
    """Ablation: the delayed-lineage draws enter the world values without the clip at 0."""

    def __enter__(self) -> None:
        self.saved = (selection_module.world_effects, selection_module.hurdle_values)
        selection_module.world_effects = _signed(world_effects)  # type: ignore[assignment]
        selection_module.hurdle_values = _signed(hurdle_values)  # type: ignore[assignment]

    def __exit__(self, *exc: object) -> None:
        selection_module.world_effects, selection_module.hurdle_values = self.saved


def _signed(fn: Any) -> Any:
    """``fn`` with the lineage latents folded into the immediate ones (no clip at 0)."""

    def call(immediate: Any, invalidity: Any, bounds: Any, lineage: Any = None) -> Any:
        if lineage is None:
            return fn(immediate, invalidity, bounds, None)
        u0 = immediate[0] + lineage[0]
        u1 = np.asarray(immediate[1]) + np.asarray(lineage[1]).reshape(np.shape(immediate[1]))
        return fn((u0, u1), invalidity, bounds, None)

    return call
