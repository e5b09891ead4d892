"""Causal retirement of memory=v2 (``memory/evictor=causal``; memory-model.md "Retirement").

``CausalEvictor.sweep`` judges the cards of this run's task with the reader's
fitted heads (``causal.retirement``) and leaves one-use ``Verdict``s (V, the
exact card record). A sweep on the cadence is bounded (memory-model.md "A bounded
sweep"): every card whose support fails the cheap checks, every card cited among the
last ``sweep_every`` eligible rows, and a rotating window of ``sweep_budget`` of the
other supported cards; the sweep at close judges every card. A card judged again on the
same inputs (heads, V, support, controls, threshold) keeps its last judgement instead of
drawing the same worlds again (``_judge``). ``CausalEvictor.run`` then deletes through
the card store's transaction with a ``CardAdmissionGate`` as ``still_retirable``: inside
the bank lock the gate pops the card's verdict and keeps the card when the evidence
version moved, an outcome is pending, the card changed, its id or an alias is leased, or
another task holds positive evidence for it. Deleted cards are tombstoned, ledgered as
``retired`` and reported in a ``retired`` event whose ``retired_card_ids`` is exact.

The provider calls ``maybe_run`` after each observed outcome (every
``memory.evictor.sweep_every`` outcomes, live cadence) and ``run`` at close.
Sweeps are sequential posterior checks, not fixed-sample tests: a surviving
card is judged again at the next sweep with fresh evidence.

The SQLite ledger and the JSON bank are separate stores: between the gate's
last read of V and the bank write there is a short interval that cannot be
made atomic. The gate is fail-closed before it, and retired ids are exact.
"""

from __future__ import annotations

import bisect
import functools
import hashlib
import json
import logging
import math
import re
import time
from collections import Counter, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from gigaevo.memory.v2.bank.cards import Card
from gigaevo.memory.v2.causal.retirement import (
    CardSupport,
    Judgement,
    RetirementConfig,
    SupportContext,
    heads_gate,
    judge_supported,
    sorted_threshold,
    support_gate,
)
from gigaevo.memory.v2.causal.viability import RetirementHeads
from gigaevo.memory.v2.errors import CardFormatError, MemoryConfigError
from gigaevo.memory.v2.evidence import Observation
from gigaevo.memory.v2.read.events import retired_fields
from gigaevo.memory.v2.read.reader import CausalReader
from gigaevo.memory.v2.records import from_json, to_json

log = logging.getLogger(__name__)
_FIGURES = re.compile(r"\d+(?:\.\d+)?(?:e[-+]?\d+)?")

EVICTOR_MODES = ("causal", "none")
VETO_MASS = 3.0  # foreign-task help-weighted evidence mass that vetoes a deletion
VETO_SHARE = 0.5  # ... together with a help share above this

Retire = Callable[[list[str], str, Callable[[Card], bool]], list[str]]
_Cell = tuple[int, tuple[int, ...]]  # a support context: (island, cell)
_Key = tuple[int, str]  # a treated row's order: (attempt, decision id)


@dataclass(frozen=True)
class EvictorSettings:
    """``memory.evictor.*`` (``memory/evictor=causal|none``).

    The config keeps every key flat under ``memory.evictor``; the statistical
    constants (``RetirementConfig``'s fields but the safety constraint's
    ``delta`` and ``alpha``, with its defaults) are gathered into ``rules``.
    ``max_viability_probability`` is ``${memory.causal.alpha}`` in the config: the
    safety constraint's alpha, one number. ``sweep_every``: observed outcomes
    between sweeps. ``allow_cross_task`` must stay false for causal retirement.
    ``pending_lineage_blocks``: an unmatured lineage window of the card keeps it, as
    memory-model.md's reference rule; false (the default) judges it on its matured rows
    (a window matures at a fixed edge count, whatever its value, so the missing rows are
    ignorable). An open decision (pending immediate outcome) always keeps the card.
    ``sweep_budget``: supported cards judged per sweep on the cadence besides those cited
    since the last sweep, in a window that rotates through them by sweep ordinal (0:
    every card at every sweep, memory-model.md's reference rule).
    """

    mode: Literal["causal", "none"] = "none"
    sweep_every: int = 50
    sweep_budget: int = 32
    allow_cross_task: bool = False
    pending_lineage_blocks: bool = False
    rules: RetirementConfig = field(default_factory=RetirementConfig)

    @classmethod
    def parse(cls, raw: dict[str, Any] | None) -> EvictorSettings:
        """Validated settings; every error is one line naming ``memory.evictor.<key>``.

        Raises:
            MemoryConfigError: an unknown key, a wrong type or a value out of range.
        """
        raw = dict(raw or {})
        rule_keys = set(RetirementConfig.__dataclass_fields__) - {"delta", "alpha"}
        allowed = sorted(rule_keys | set(cls.__dataclass_fields__) - {"rules"})
        unknown = sorted(set(raw) - set(allowed))
        if unknown:
            raise MemoryConfigError(
                f"memory.evictor: unknown key {unknown[0]!r} (allowed: {allowed})"
            )
        rules = {k: raw.pop(k) for k in sorted(rule_keys & set(raw))}
        try:
            s = from_json(cls, raw, "memory.evictor")
            parsed = from_json(RetirementConfig, rules, "memory.evictor")
        except CardFormatError as exc:  # a range error reads "memory.evictor: <key> must ..."
            raise MemoryConfigError(
                str(exc).replace("memory.evictor: ", "memory.evictor.", 1)
            ) from exc
        s = replace(s, rules=parsed)
        if s.mode not in EVICTOR_MODES:
            raise MemoryConfigError(f"memory.evictor.mode must be one of {list(EVICTOR_MODES)}")
        if s.sweep_every < 1:
            raise MemoryConfigError(f"memory.evictor.sweep_every must be >= 1, got {s.sweep_every}")
        if s.sweep_budget < 0:
            raise MemoryConfigError(
                f"memory.evictor.sweep_budget must be >= 0, got {s.sweep_budget}"
            )
        if s.mode == "causal" and s.allow_cross_task:
            raise MemoryConfigError(
                "memory.evictor.allow_cross_task=true: production causal retirement requires "
                "false (retirement evidence is not identified per source task)"
            )
        return s

    def retirement(self, *, delta: float, alpha: float) -> RetirementConfig:
        """The pure statistics' constants, with the safety constraint's delta and alpha."""
        return replace(self.rules, delta=delta, alpha=alpha)


@dataclass(frozen=True)
class Verdict:
    """One-use permission to delete one exact card revision under one evidence version."""

    card_id: str
    evidence_version: str
    snapshot: str  # card_digest of the judged record


def card_digest(card: Card) -> str:
    """SHA-256 of the card's whole record (any change, e.g. a pooled outcome, moves it)."""
    text = json.dumps(to_json(card), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def foreign_support(card: Card, task_key: str) -> dict[str, tuple[float, float]]:
    """Per other task: (help-weighted evidence mass, help share) of the card's evidence.

    Evidence items are the card's pooled outcomes and its usefulness-eligible use
    trials (stamped only for withheld controls and cited deliveries). An outcome
    helps when its normalised gain is positive, a trial when it succeeded (valid
    and g > 0); the mass counts helping items.
    """
    items: dict[str, list[bool]] = {}
    for ev in card.evidence:
        items.setdefault(ev.task_key, []).append(ev.normalised_gain > 0)
    for t in card.use_trials:  # stamped only for usefulness-eligible terminals
        items.setdefault(t.task_key, []).append(t.success)
    return {
        task: (float(sum(helps)), sum(helps) / len(helps))
        for task, helps in items.items()
        if task != task_key and helps
    }


def foreign_veto(card: Card, task_key: str) -> str:
    """The other task whose positive evidence vetoes deleting ``card`` ("" for none)."""
    for task, (mass, share) in sorted(foreign_support(card, task_key).items()):
        if mass >= VETO_MASS and share > VETO_SHARE:
            return task
    return ""


@dataclass
class EvictorCounts:
    """What the evictor did in this process (``memory_stats.json``)."""

    sweeps: int = 0
    judged: int = 0
    reused: int = 0  # judgements of ``judged`` taken from the card's last one (same inputs)
    not_due: int = 0  # supported cards a bounded sweep left to a later one
    evaluations: int = 0
    verdicts: int = 0
    retired: int = 0
    disabled: int = 0
    sweep_seconds: float = 0.0
    keep_reasons: Counter[str] = field(default_factory=Counter)
    gate: Counter[str] = field(default_factory=Counter)


class CardAdmissionGate:
    """The last check, run on the newest card revision inside the bank transaction.

    Consumes (pops) the card's verdict. Keeps the card (False) on: no verdict
    (never judged, or already consumed), a changed evidence version, a pending
    outcome, a changed card record, a live lease on its id or any alias, or a
    foreign-task positive-evidence veto. Every keep is counted by reason.
    """

    def __init__(self, evictor: CausalEvictor) -> None:
        self.evictor = evictor
        self.sweep = ""  # the retirement's event key (``start``)
        self.verdicts = 0
        self.before: Counter[str] = Counter()
        self.removed: list[str] = []  # ids the gate let go, in the order asked

    def __call__(self, card: Card) -> bool:
        ev = self.evictor
        verdict = ev.verdicts.pop(card.id, None)
        reason = self._rescue(card, verdict)
        ev.counts.gate[reason or "deleted"] += 1
        if not reason:
            self.removed.append(card.id)
        self.save()  # inside the bank transaction: the event is saved before the bank is
        return not reason

    def start(self, sweep: str, verdicts: int) -> None:
        """Begin one retirement (``sweep``: its event's key) and save its event as an intent."""
        self.sweep, self.verdicts = sweep, verdicts
        self.before = Counter(self.evictor.counts.gate)
        self.removed = []
        self.save()

    def fields(self) -> dict[str, Any]:
        """The retirement's event so far: the ids deleted and why the others were kept."""
        kept = self.evictor.counts.gate - self.before
        kept.pop("deleted", None)
        return retired_fields(
            self.removed,
            evidence_version=self.evictor.version,
            verdicts=self.verdicts,
            kept=kept,
            sweep=self.sweep,
        )

    def save(self) -> dict[str, Any]:
        """Save the event so far as an intent witnessed by the ids deleted so far."""
        events = self.evictor.reader.events
        return events.intend("retired", self.fields(), {"absent": list(self.removed)})

    def _rescue(self, card: Card, verdict: Verdict | None) -> str:
        ev = self.evictor
        if verdict is None:
            return "no_verdict"
        if ev.reader.evidence.evidence_version() != verdict.evidence_version:
            return "rescued_evidence_changed"
        ids = (card.id, *card.aliases)
        if ev.pending(ids):
            return "rescued_pending"
        if card_digest(card) != verdict.snapshot:
            return "rescued_card_changed"
        if ev.reader.leases.pending(ids):
            return "skipped_leased"
        if foreign_veto(card, ev.task_key):
            return "skipped_foreign_veto"
        return ""


class CausalEvictor:
    """Sweeps and gated deletions for one run (see the module docstring).

    Args:
        reader: the causal reader (ledger, leases, fitted heads, reward bounds).
        settings: ``memory.evictor``.
        retire: deletes ids in one bank transaction, asking the gate about each
            (``librarian.retire_cards`` bound to the run's store, ledger, tombstones).
        task_key: this run's task; empty refuses retirement (warned once).
    """

    def __init__(
        self, reader: CausalReader, settings: EvictorSettings, *, retire: Retire, task_key: str
    ) -> None:
        self.reader = reader
        self.settings = settings
        policy = reader.settings.policy
        self.config = settings.retirement(delta=policy.delta, alpha=policy.alpha)
        self.retire = retire
        self.task_key = task_key
        self.verdicts: dict[str, Verdict] = {}
        self.counts = EvictorCounts()
        self.version = ""
        self._warned: set[str] = set()
        self._heads: tuple[object, RetirementHeads] | None = None
        self._seen = 0  # eligible rows taken into the two lists below
        self._controls: list[float] = []
        # the non-zero finite |y| of the valid controls, ascending (kept as rows arrive, for
        # ``practical_threshold`` without a sort of every control per sweep)
        self._magnitudes: list[float] = []
        self._treated: dict[str, list[Observation]] = {}
        # per proposed id and context (island, cell): (first row's key, latest row's key,
        # latest row), keys (attempt, decision id); kept as rows arrive (``support``)
        self._contexts: dict[str, dict[_Cell, tuple[_Key, _Key, Observation]]] = {}
        # proposed id of each of the last sweep_every eligible rows ("" unless cited)
        self._cited: deque[str] = deque(maxlen=settings.sweep_every)
        # per card: (its ids and their cited-row counts, the support) of the last support
        # built (``support``); a card's contexts move only with its rows or aliases
        self._supports: dict[str, tuple[tuple[tuple[str, int], ...], CardSupport]] = {}
        self._undeclared = 0  # valid eligible rows whose omega is the unknown stand-in
        self._retirements: Counter[str] = Counter()  # retirements run, by evidence version
        # per card: (V, support, valid controls, theta) of its last judgement under the current
        # heads, and that judgement (``_judge``); cleared when the heads are rebuilt
        self._judged: dict[str, tuple[tuple[str, CardSupport, int, float], Judgement]] = {}

    # -- cadence ---------------------------------------------------------------
    def maybe_run(self, outcomes: int) -> list[str]:
        """``run`` every ``sweep_every`` observed outcomes; the ids deleted."""
        if outcomes % self.settings.sweep_every:
            return []
        return self.run(outcomes // self.settings.sweep_every)

    def run(self, ordinal: int | None = None) -> list[str]:
        """Sweep, then delete the judged cards through the gate; the ids deleted.

        ``ordinal``: the sweep's place on the cadence (outcomes // sweep_every), which
        bounds it (``sweep``); None (at close) judges every card.
        """
        self.sweep(ordinal)
        if not self.verdicts:
            return []
        judged = sorted(self.verdicts)
        gate = CardAdmissionGate(self)
        events = self.reader.events
        # the event is an intent from here on, updated by the gate inside the bank
        # transaction: a kill after the deletion cannot lose it (``MemoryEvents.recover``)
        gate.start(self._sweep_id(), len(judged))
        try:
            removed = self.retire(
                judged, f"causal retirement (evidence version {self.version[:12]})", gate
            )
        except BaseException:
            events.drop_intent(gate.fields() | {"event": "retired"})
            raise
        finally:
            self.verdicts.clear()  # one use: whatever the gate did not consume is void
        self.counts.retired += len(removed)
        gate.removed = list(removed)
        events.emit_intent(gate.save())
        return removed

    def _sweep_id(self) -> str:
        """The key of this retirement's event: a digest of the run, the evidence version
        and how many retirements this session ran at that version. The same seeded run
        gives the same ids, and a resumed session repeating a retirement a kill cut short
        gets the id of the one it repeats (so its event is not written twice)."""
        n = self._retirements[self.version]
        self._retirements[self.version] += 1
        key = f"{self.reader.run_id}\0{self.version}\0{n}"
        return hashlib.sha256(key.encode()).hexdigest()[:32]

    # -- sweep -----------------------------------------------------------------
    def sweep(self, ordinal: int | None = None) -> dict[str, Verdict]:
        """Judge the cards of the task; the fresh one-use verdicts (old ones are cleared).

        With ``ordinal`` (the sweep's place on the cadence) and a ``sweep_budget`` the
        sweep is bounded (``due``); without, every card is judged.
        """
        started = time.perf_counter()
        self.verdicts.clear()
        self.counts.sweeps += 1
        try:
            self._sweep(ordinal)
        finally:
            self.counts.sweep_seconds += time.perf_counter() - started
        return dict(self.verdicts)

    def _sweep(self, ordinal: int | None) -> None:
        if not self.task_key:
            self._disable("empty task key: retirement refused (never a wildcard)")
            return
        store = self.reader.store
        store.refresh()
        if any(not c.task_key for c in store.cards()):
            self._warn_once(
                "legacy cards without a task key are never retirement candidates "
                "(restamp them with their task key)"
            )
        cards = sorted(store.cards(task_key=self.task_key), key=lambda c: c.id)
        if not cards:
            return
        fitted = self.reader.fitted_heads(cards)
        if fitted is None:  # no usefulness-eligible row yet: nothing to judge
            return
        if fitted[1].immediate is None or fitted[1].invalidity is None:
            self._disable(f"posterior fit failed ({fitted[1].failure}): no verdicts")
            return
        version, fit = fitted
        assert fit.immediate is not None and fit.invalidity is not None
        if self._heads is None or self._heads[0] is not fit:  # reuse projections until a refit
            self._heads = (
                fit,
                RetirementHeads(fit.space, fit.immediate, fit.invalidity, fit.lineage),
            )
            self._judged.clear()  # judgements of other heads
        heads = self._heads[1]
        controls, _ = self._rows()
        reason = heads_gate(heads, self.config.alpha, declared=self._undeclared == 0)
        if reason:
            self._disable(f"retirement disabled: {reason}")
            return
        self.version = version
        theta = sorted_threshold(
            self._magnitudes, self.config.min_global_control, self.config.practical_effect_quantile
        )
        pending = self.pending_by_proposal()
        supports = [self.support(card, pending) for card in cards]
        n_controls = len(controls)
        gates = [support_gate(s, n_controls, theta, self.config) for s in supports]
        due = self.due(cards, supports, n_controls, theta, ordinal, gates)
        for card, support, gate in zip(cards, supports, gates, strict=True):
            if not due[card.id]:
                self.counts.not_due += 1
                continue
            self.counts.judged += 1
            if gate:  # ``judge_card``'s gate keeps the card: no worlds to draw
                self.counts.keep_reasons[_reason_key(gate)] += 1
                continue
            out = self._judge(heads, support, (version, support, n_controls, theta))
            self.counts.evaluations += len(out.evaluations)
            if out.retire:
                self.verdicts[card.id] = Verdict(card.id, version, card_digest(card))
                self.counts.verdicts += 1
            else:
                self.counts.keep_reasons[_reason_key(out.reason)] += 1

    def _judge(
        self, heads: RetirementHeads, support: CardSupport, key: tuple[str, CardSupport, int, float]
    ) -> Judgement:
        """``judge_card`` of one card that passed ``support_gate`` (so ``judge_supported``),
        or its last judgement when the inputs it is a function of stand: the heads (the memo
        is cleared when they are rebuilt), V (the draws' RNG key), the card's support
        (lineage, kind, pending outcomes, treated rows, contexts), the valid controls and
        theta (the settings are the evictor's). The same inputs draw the same worlds, so the
        judgement is the one judging afresh gives; V moves with every usefulness-eligible
        row, so this spares a sweep that finds no new evidence (as the sweep at close after
        one on the cadence)."""
        known = self._judged.get(support.card_id)
        if known is not None and known[0] == key:
            self.counts.reused += 1
            return known[1]
        version, _, _, theta = key
        out = judge_supported(
            heads, support, theta=theta, evidence_version=version, cfg=self.config
        )
        self._judged[support.card_id] = (key, out)
        return out

    def due(
        self,
        cards: Sequence[Card],
        supports: Sequence[CardSupport],
        n_controls: int,
        theta: float,
        ordinal: int | None,
        gates: Sequence[str] | None = None,
    ) -> dict[str, bool]:
        """Which cards this sweep judges (memory-model.md "A bounded sweep").

        Every card, unless the sweep is on the cadence (``ordinal``), has a budget, and more
        cards pass the cheap support checks than the budget. Then: every card failing those
        checks (judging it costs nothing and keeps it), every card cited (any of its ids)
        among the last ``sweep_every`` eligible rows (each outcome adds at most one, so these
        hold every row since the last sweep), and the ``sweep_budget`` supported cards from
        position ordinal x budget (mod their number) in id order. Each is a function of the
        ledger and the bank at the sweep, so a resumed run judges what the uninterrupted
        run judged. ``gates``: the cards' ``support_gate`` reasons when the sweep has them.
        """
        budget = self.settings.sweep_budget
        everyone = dict.fromkeys((c.id for c in cards), True)
        if ordinal is None or budget <= 0:
            return everyone
        if gates is None:
            gates = [support_gate(s, n_controls, theta, self.config) for s in supports]
        supported = [c.id for c, gate in zip(cards, gates, strict=True) if not gate]
        if len(supported) <= budget:
            return everyone
        out = dict(everyone)
        recent = set(self._cited) - {""}
        start = (ordinal * budget) % len(supported)
        window = {supported[(start + j) % len(supported)] for j in range(budget)}
        left = set(supported) - window
        for card in cards:
            if card.id in left:
                out[card.id] = bool(recent.intersection((card.id, *card.aliases)))
        return out

    def _disable(self, reason: str) -> None:
        self.counts.disabled += 1
        self._warn_once(reason)

    def _warn_once(self, message: str) -> None:
        """Log ``message`` the first time its kind is seen (the figures in it may move)."""
        kind = _FIGURES.sub("#", message)
        if kind not in self._warned:
            self._warned.add(kind)
            log.warning("memory v2 evictor: %s", message)

    # -- evidence --------------------------------------------------------------
    def _rows(self) -> tuple[list[float], dict[str, list[Observation]]]:
        """Valid control gains and cited treated rows per proposed id, kept as eligible
        rows arrive (a sweep does not walk the ledger); counts the valid rows without a
        declared measurement (``heads_gate``'s ``declared``)."""
        for o in self.reader.evidence.eligible_since(self._seen):
            self._seen += 1
            if o.valid and o.terminal.se is None and o.terminal.measurement != "deterministic":
                self._undeclared += 1
            if o.z == 0 and o.valid:
                y = self._gain(o)
                self._controls.append(y)
                if math.isfinite(y) and y != 0.0:
                    bisect.insort(self._magnitudes, abs(y))
            if o.cited:
                pid = o.decision.proposed_id or ""
                self._treated.setdefault(pid, []).append(o)
                cells = self._contexts.setdefault(pid, {})
                ctx, key = o.decision.context, (o.decision.attempt, o.decision.decision_id)
                cell = (ctx.island, tuple(ctx.cell))
                known = cells.get(cell)
                if known is None:
                    cells[cell] = (key, key, o)
                else:
                    first, last, _ = known
                    cells[cell] = (min(first, key), *((key, o) if key > last else known[1:]))
            self._cited.append((o.decision.proposed_id or "") if o.cited else "")
        return self._controls, self._treated

    def _gain(self, obs: Observation) -> float:
        r = self.reader.causal_reward
        return r.normalise_gain(obs.decision.context.parent_fitness, float(obs.terminal.gain or 0))

    def support(self, card: Card, pending: Counter[str]) -> CardSupport:
        """The support of ``card``'s lineage from its cited treated rows (all its ids): each
        distinct context (island, cell) with its latest row, in the order of their first
        rows (by attempt, decision id). From the contexts kept as rows arrive (``_rows``),
        so a sweep does not sort every card's rows again; the last support itself while its
        kind and pending count stand too."""
        ids = (card.id, *card.aliases)
        key = tuple((i, len(self._treated.get(i, ()))) for i in ids)
        n_pending = sum(pending[i] for i in set(ids))
        known = self._supports.get(card.id)
        if known is None or known[0] != key:
            treated, contexts = self._contexts_of(ids)
        else:
            last = known[1]
            if last.pending == n_pending and last.kind == card.kind:
                return last
            treated, contexts = last.treated, last.contexts
        out = CardSupport(card.id, card.id, card.kind, n_pending, treated, contexts)
        self._supports[card.id] = (key, out)
        return out

    def _contexts_of(self, ids: Sequence[str]) -> tuple[int, tuple[SupportContext, ...]]:
        """The cited treated rows of ``ids`` and their distinct contexts (``support``)."""
        merged: dict[_Cell, tuple[_Key, _Key, Observation]] = {}
        treated = 0
        for i in ids:
            treated += len(self._treated.get(i, ()))
            for cell, (first, last, o) in self._contexts.get(i, {}).items():
                known = merged.get(cell)
                if known is None:
                    merged[cell] = (first, last, o)
                else:
                    top = (last, o) if last > known[1] else known[1:]
                    merged[cell] = (min(first, known[0]), *top)
        reward = self.reader.causal_reward
        order = sorted(merged.items(), key=lambda kv: kv[1][0])
        contexts = tuple(
            SupportContext(
                island,
                cell,
                tuple(o.decision.context.features),
                reward.feasible_interval(o.decision.context.parent_fitness),
            )
            for (island, cell), (_, _, o) in order
        )
        return treated, contexts

    def pending_by_proposal(self) -> Counter[str]:
        """Per proposed id: pending immediate outcomes (no terminal), plus unmatured lineage
        outcomes when ``pending_lineage_blocks``.

        A lineage outcome is pending while a usefulness-eligible valid root (either
        arm) has no lineage row yet or its latest row is ``pending``. By default such a
        root does not keep its card (memory-model.md "Eligibility"): the lineage head is
        fitted on the matured rows, and a window's maturity is fixed by the island's edge
        count, not by its value, so leaving the unmatured rows out keeps the posterior
        honest. Blocking on them kept every card the policy still proposed (a window
        stays open for 32 edges of its island): in a real rastrigin run every judgement
        of every card was ``pending``.
        """
        evidence = self.reader.evidence
        counts: Counter[str] = Counter(evidence.pending_by_proposal())
        if self.settings.pending_lineage_blocks:
            counts.update(evidence.unmatured_by_proposal())  # kept row by row by the ledger
        return counts

    def pending(self, ids: Sequence[str]) -> int:
        """Pending outcomes on any of ``ids`` (re-read from the ledger)."""
        counts = self.pending_by_proposal()
        return sum(counts[i] for i in set(ids))

    def stats(self) -> dict[str, Any]:
        c = self.counts
        return {
            "mode": "causal",
            "sweeps": c.sweeps,
            "cards_judged": c.judged,
            "cards_not_due": c.not_due,
            "viability_evaluations": c.evaluations,
            "verdicts": c.verdicts,
            "retired": c.retired,
            "disabled_sweeps": c.disabled,
            "sweep_seconds": round(c.sweep_seconds, 6),
            "keep_reasons": dict(sorted(c.keep_reasons.items())),
            "gate": dict(sorted(c.gate.items())),
            "max_viability_probability": self.config.max_viability_probability,
        }


@functools.lru_cache(maxsize=1024)  # a sweep keeps most cards for a few distinct reasons
def _reason_key(reason: str) -> str:
    """A keep reason without its numbers, for counting."""
    for key in (
        "pending",
        "min_treated",
        "min_global_control",
        "min_contexts",
        "min_assessable",
        "invalid gain bounds",
        "safety integration",
        "prediction",
        "viable",
    ):
        if key in reason:
            return key.replace(" ", "_")
    return "other"
