"""memory=v2_multitask: trial stamps on shared cards, the transfer prior, startup checks,
and several runs (real processes, a Hydra joblib multirun) sharing one bank."""

from __future__ import annotations

import json
import math
import multiprocessing
import os
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hydra.utils import instantiate

from gigaevo.memory.base import MutationContext, MutationResult
from gigaevo.memory.v2 import CardBankMemory, HashingEmbedder, MemoryConfigError, read_bank
from gigaevo.memory.v2.bank.bankfile import card_line
from gigaevo.memory.v2.bank.cards import Card, UseTrial
from gigaevo.memory.v2.bank.store import BANK_FILE
from gigaevo.memory.v2.causal import DesignSpace
from gigaevo.memory.v2.causal.transfer import (
    TransferConfig,
    TransferTrial,
    fit_transfer,
    intercept_prior_mean,
    prior_shift,
    supported_strata,
    trial_digest,
)
from gigaevo.memory.v2.evidence import SelectionEvidence, usefulness_eligible
from gigaevo.memory.v2.read.leases import LEASE_FILE
from gigaevo.memory.v2.read.trials import owner_id, stamp_trial, trial_of
from tests.conftest import compose_config, run_py
from tests.memory.evidence.factories import make_decision, make_terminal
from tests.memory.helpers import open_store, result, runtime
from tests.memory.test_card_model import card

MAX_SHIFT = 0.5 * 0.25


def _card(cid: str, task: str = "toy", aliases: tuple[str, ...] = ()) -> Card:
    base = card()
    return replace(
        base,
        id=cid,
        task_key=task,
        aliases=aliases,
        description=f"{base.description} ({cid})",
    )


def _seed_bank(bank: Path, cards: list[Card]) -> None:
    store = open_store(bank)

    def add(working: dict[str, Card]) -> None:
        for c in cards:
            working[c.id] = c

    store.transaction(add)


# -- 2. trial stamps -------------------------------------------------------------

TABLE = [
    pytest.param(0, "valid", False, 0.1, (0, True), id="Z=0 valid gain>0"),
    pytest.param(0, "valid", False, -0.1, (0, False), id="Z=0 valid gain<0"),
    pytest.param(0, "valid", False, 0.0, (0, False), id="Z=0 valid gain=0"),
    pytest.param(0, "invalid", False, None, (0, False), id="Z=0 invalid"),
    pytest.param(1, "valid", True, 0.1, (1, True), id="Z=1 U=1 valid"),
    pytest.param(1, "invalid", True, None, (1, False), id="Z=1 U=1 invalid"),
    pytest.param(1, "valid", False, 0.1, None, id="Z=1 U=0 (uncited)"),
    pytest.param(None, "valid", False, 0.1, None, id="abstain"),
    pytest.param(0, "censored", False, None, None, id="Z=0 censored"),
    pytest.param(1, "censored", False, None, None, id="Z=1 censored"),
]


@pytest.mark.parametrize(("z", "status", "cited", "gain", "want"), TABLE)
def test_trials_follow_the_eligibility_table(
    z: int | None, status: str, cited: bool, gain: float | None, want: tuple[int, bool] | None
) -> None:
    d = make_decision(0, z=z, run_id="run-a")
    t = make_terminal(d, status, cited=("c1",) if cited else (), gain=gain)
    trial = trial_of(d, t)
    if want is None:
        assert trial is None
        return
    assert trial == UseTrial(d.decision_id, "run-a", "task", want[0], want[1])


def test_stamps_go_to_the_alias_owner_once(bank: Path) -> None:
    _seed_bank(bank, [_card("ins-a", aliases=("ins-merged",)), _card("ins-b")])
    store = open_store(bank)
    t = UseTrial("d-1", "run-a", "toy", 1, True)
    assert owner_id({c.id: c for c in store.cards()}, "ins-merged") == "ins-a"
    assert stamp_trial(store, "ins-merged", t) == "stamped"
    assert stamp_trial(store, "ins-a", t) == "duplicate"  # dedup by decision id
    assert stamp_trial(store, "ins-gone", replace(t, decision_id="d-2")) == "orphan"
    loaded = {c.id: c for c in read_bank(bank / BANK_FILE).cards}
    assert loaded["ins-a"].use_trials == (t,) and loaded["ins-a"].revision == 2
    assert loaded["ins-b"].use_trials == ()


def test_a_bank_written_before_trials_existed_still_loads(bank: Path) -> None:
    _seed_bank(bank, [_card("ins-a")])
    path = bank / BANK_FILE
    lines = path.read_text().split("\n")
    old = json.loads(lines[1])
    assert old.pop("use_trials") == []
    lines[1] = json.dumps(old, separators=(",", ":"))
    path.write_text("\n".join(lines))
    loaded = read_bank(path).cards
    assert len(loaded) == 1 and loaded[0].use_trials == ()
    assert '"use_trials":[]' in card_line(loaded[0])


def stamp_worker(bank: str, run_id: str, n: int, start: Any) -> None:
    """Stamp ``n`` trials (and re-stamp each previous one) onto two shared cards."""
    store = open_store(Path(bank))
    start.wait(timeout=240)  # a partner that never starts breaks the barrier, not this process
    for i in range(n):
        t = UseTrial(f"{run_id}-d{i}", run_id, "toy", i % 2, i % 3 == 0)
        assert stamp_trial(store, ("ins-a", "ins-b")[i % 2], t) == "stamped"
        if i:
            again = UseTrial(f"{run_id}-d{i - 1}", run_id, "toy", (i - 1) % 2, (i - 1) % 3 == 0)
            assert stamp_trial(store, ("ins-a", "ins-b")[(i - 1) % 2], again) == "duplicate"


def test_two_processes_stamping_lose_no_trial(bank: Path) -> None:
    _seed_bank(bank, [_card("ins-a"), _card("ins-b")])
    ctx = multiprocessing.get_context("spawn")
    n = 30
    start = ctx.Barrier(2)
    procs = [
        ctx.Process(target=stamp_worker, args=(str(bank), f"run-{k}", n, start)) for k in range(2)
    ]
    for p in procs:
        p.start()
    try:
        for p in procs:  # spawned: each imports the stack afresh (minutes at load 35)
            p.join(timeout=300)
            assert p.exitcode == 0
    finally:
        for p in procs:  # never leave a stamper behind a failed assertion
            if p.is_alive():
                p.kill()
                p.join(timeout=10)
    cards = {c.id: c for c in read_bank(bank / BANK_FILE).cards}
    assert set(cards) == {"ins-a", "ins-b"}
    ids = [t.decision_id for c in cards.values() for t in c.use_trials]
    assert len(ids) == len(set(ids)) == 2 * n  # every stamp landed, exactly once
    assert {t.decision_id for t in cards["ins-a"].use_trials} == {
        f"run-{k}-d{i}" for k in range(2) for i in range(0, n, 2)
    }


def _context(attempt: int, task: str = "toy") -> MutationContext:
    rng = np.random.default_rng(attempt)
    return MutationContext(
        task_key=task,
        attempt=attempt,
        parent_id=f"parent-{attempt}",
        parent_fitness=float(rng.uniform(2.0, 8.0)),
        island=0,
        cell=(attempt % 3,),
        coordinates=(float(rng.uniform()),),
        progress=attempt / 100,
    )


def _outcome(attempt: int, decision_record: dict[str, object], rng: np.random.Generator):
    """A child for this attempt: cites the delivered card half the time; some invalid."""
    cite = decision_record.get("z") == 1 and rng.uniform() < 0.5
    proposed = str(decision_record.get("proposed_id") or "")
    valid = rng.uniform() > 0.2
    r = result(
        attempt,
        gain=float(rng.normal(0.0, 0.02)),
        valid=valid,
        parent_fitness=5.0,
        cited=(proposed,) if cite else (),
    )
    return replace(r, parent_id=f"parent-{attempt}")


def _memory(tmp_path: Path, bank: Path, **kwargs: Any) -> CardBankMemory:
    return CardBankMemory(
        runtime(tmp_path, bank=bank),
        llm=None,
        embedder=HashingEmbedder(),
        writer={"authoring_enabled": False},
        selection="causal",
        causal={"summary_draws": 128, "world_draws": 64},
        **kwargs,
    )


def _drive(memory: CardBankMemory, n: int, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    for attempt in range(n):
        ctx = _context(attempt)
        decision = memory.decide(ctx)
        res: MutationResult = _outcome(attempt, decision.record, rng)
        res = replace(res, parent_fitness=ctx.parent_fitness, child_fitness=ctx.parent_fitness)
        if res.valid:
            gain = float(rng.normal(0.0, 0.02))
            res = replace(res, child_fitness=ctx.parent_fitness + gain * 10.0, normalised_gain=gain)
        memory.observe(res)


def _stamped(bank: Path) -> dict[str, list[UseTrial]]:
    return {c.id: list(c.use_trials) for c in read_bank(bank / BANK_FILE).cards}


def _eligible(ckpt: Path) -> dict[str, tuple[str, int]]:
    """decision id -> (proposed id, Z) of every usefulness-eligible terminal of a run."""
    with SelectionEvidence(ckpt).open(censor_orphans=False) as ev:
        return {
            o.decision.decision_id: (o.decision.proposed_id or "", int(o.decision.z or 0))
            for o in ev.observations()
            if usefulness_eligible(o)
        }


def test_the_provider_stamps_every_eligible_terminal_once(tmp_path: Path, bank: Path) -> None:
    _seed_bank(bank, [_card("ins-a"), _card("ins-b"), _card("ins-c")])
    memory = _memory(tmp_path, bank)
    _drive(memory, 40)
    memory.close()
    eligible = _eligible(tmp_path / "run")
    stamped = {t.decision_id: (cid, t.z) for cid, ts in _stamped(bank).items() for t in ts}
    assert len(eligible) >= 5 and stamped == eligible
    assert sum(len(v) for v in _stamped(bank).values()) == len(eligible)  # no duplicate
    stats = json.loads((tmp_path / "run" / "memory_stats.json").read_text())["decide"]
    assert stats["trials_stamped"] == len(eligible) and stats["trials_deferred"] == 0
    assert json.loads((bank / LEASE_FILE).read_text())["leases"] == []


def test_a_resumed_run_stamps_what_a_kill_left_unstamped(tmp_path: Path, bank: Path) -> None:
    _seed_bank(bank, [_card("ins-a"), _card("ins-b")])
    memory = _memory(tmp_path, bank)
    _drive(memory, 30)
    memory.close()
    eligible = _eligible(tmp_path / "run")
    assert eligible

    def forget(cards: dict[str, Card]) -> None:  # as if killed between terminal and stamp
        for cid, c in list(cards.items()):
            cards[cid] = replace(c, use_trials=c.use_trials[: len(c.use_trials) // 2])

    open_store(bank).transaction(forget)
    resumed = _memory(tmp_path, bank)
    assert resumed.stamper is not None and resumed.stamper.counts.recovered > 0
    resumed.close()
    stamped = {t.decision_id: (cid, t.z) for cid, ts in _stamped(bank).items() for t in ts}
    assert stamped == eligible and sum(len(v) for v in _stamped(bank).values()) == len(eligible)
    again = _memory(tmp_path, bank)
    assert again.stamper is not None and again.stamper.counts.recovered == 0
    again.close()


def test_write_none_stamps_nothing(tmp_path: Path, bank: Path) -> None:
    _seed_bank(bank, [_card("ins-a")])
    memory = _memory(tmp_path, bank, write={"cadence": "none"})
    _drive(memory, 10)
    memory.close()
    assert memory.stamper is None and _stamped(bank) == {"ins-a": []}


# -- 1. the preset and its startup checks ----------------------------------------


def _build(tmp_path: Path, bank: Path, *overrides: str) -> CardBankMemory:
    cfg = compose_config(
        [
            "memory=v2_multitask",
            f"checkpoint_dir={tmp_path / 'run'}",
            f"memory_bank_dir={bank}",
            *overrides,
        ]
    )
    rt = runtime(tmp_path, bank=bank)
    built: CardBankMemory = instantiate(cfg.memory)(runtime=rt)
    return built


def test_the_preset_builds_no_agent_and_adds_no_card(tmp_path: Path, bank: Path) -> None:
    _seed_bank(bank, [_card("ins-a"), _card("ins-b")])
    memory = _build(
        tmp_path, bank, "memory.causal.summary_draws=128", "memory.causal.world_draws=64"
    )
    assert memory.librarian is None and memory.judge is None  # no author, judge or exemplars
    assert memory.evictor is None  # memory/evictor=none: nothing is retired
    assert memory.transfer.enabled and memory.transfer.cross_task_candidates
    assert memory.settings.writer.scope == "bank" and memory.settings.write.cadence == "live"
    _drive(memory, 25)
    memory.close()
    assert memory.usage.calls == 0
    assert sorted(_stamped(bank)) == ["ins-a", "ins-b"]  # the card set is fixed
    assert sum(len(v) for v in _stamped(bank).values()) == len(_eligible(tmp_path / "run"))


def test_the_preset_refuses_write_none(tmp_path: Path, bank: Path) -> None:
    with pytest.raises(MemoryConfigError, match=r"memory/write=none.*trial updater"):
        _build(tmp_path, bank, "memory/write=none")


def test_the_preset_warns_when_the_bank_is_not_shared(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level("WARNING", logger="gigaevo.memory.v2.provider"):
        _build(tmp_path, tmp_path / "run").close()
    assert "memory_bank_dir is this run's checkpoint_dir" in caplog.text


@pytest.mark.parametrize("name", [BANK_FILE, LEASE_FILE, f"{BANK_FILE}.lock"])
def test_an_unwritable_bank_file_is_refused_by_name(tmp_path: Path, bank: Path, name: str) -> None:
    (bank / name).mkdir(parents=True)  # not a writable file, even for root
    with pytest.raises(MemoryConfigError, match=rf"memory_bank_dir: .*{name} is not a writable"):
        _build(tmp_path, bank)


def test_a_bank_dir_that_is_a_file_is_refused(tmp_path: Path) -> None:
    bank = tmp_path / "bank"
    bank.write_text("")
    with pytest.raises(MemoryConfigError, match=r"memory_bank_dir: .* is not a directory"):
        _build(tmp_path, bank)


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write read-only files")
def test_a_read_only_bank_is_refused(tmp_path: Path, bank: Path) -> None:
    _seed_bank(bank, [_card("ins-a")])
    (bank / BANK_FILE).chmod(0o444)
    with pytest.raises(MemoryConfigError, match=r"cards\.json is not a writable file"):
        _build(tmp_path, bank)
    (bank / BANK_FILE).chmod(0o644)
    bank.chmod(0o555)
    try:
        with pytest.raises(MemoryConfigError, match="is not writable"):
            _build(tmp_path, bank)
    finally:
        bank.chmod(0o755)


def test_a_bad_transfer_setting_names_the_key(tmp_path: Path, bank: Path) -> None:
    with pytest.raises(MemoryConfigError, match=r"memory\.transfer.*card_sd"):
        _build(tmp_path, bank, "memory.transfer.card_sd=0")
    with pytest.raises(MemoryConfigError, match=r"memory\.transfer.*unknown key 'typo'"):
        _build(tmp_path, bank, "+memory.transfer.typo=1")


# -- 3. transfer prior: ground truth (memory-model.md "Ground-truth tests" (13))
# ---------------------------


def _trials(
    card_id: str,
    *,
    task: str,
    run: str,
    n: int,
    p_treated: float,
    p_control: float,
    rng: np.random.Generator,
) -> list[TransferTrial]:
    out = []
    for i in range(n):
        z = i % 2
        p = p_treated if z else p_control
        out.append(
            TransferTrial(f"{run}-{card_id}-{i}", task, run, card_id, z, bool(rng.uniform() < p))
        )
    return out


def test_no_supported_strata_means_no_shift() -> None:
    rng = np.random.default_rng(0)
    # one treated trial per stratum, and a well-supported stratum from this very run
    sparse = [TransferTrial(f"d{i}", "other", f"r{i}", "A", i % 2, True) for i in range(6)]
    own = _trials("A", task="other", run="me", n=40, p_treated=0.9, p_control=0.1, rng=rng)
    fit = fit_transfer([*sparse, *own], "toy", exclude_run="me")
    assert fit.strata == 0 and fit.help_probability("A") == 0.5
    space = DesignSpace(3, ("A",))
    assert intercept_prior_mean(space, fit) is None
    assert prior_shift(fit.help_probability("A")) == 0.0


def test_a_card_helpful_in_another_task_shifts_up() -> None:
    rng = np.random.default_rng(1)
    trials = [
        t
        for run in ("r1", "r2", "r3")
        for t in _trials("A", task="other", run=run, n=40, p_treated=0.8, p_control=0.2, rng=rng)
    ]
    fit = fit_transfer(trials, "toy", exclude_run="me")
    assert fit.strata == 3 and not fit.failure
    p = fit.help_probability("A")
    shift = prior_shift(p)
    assert 0.5 < p < 1.0 and 0.0 < shift <= MAX_SHIFT
    space = DesignSpace(3, ("B", "A"))
    mu = intercept_prior_mean(space, fit)
    assert mu is not None
    start = space.lineage_slice("A").start
    assert mu[start] == pytest.approx(shift) and np.count_nonzero(mu) == 1
    # an unseen target task is shrunk harder than the task the evidence came from
    assert fit_transfer(trials, "other", exclude_run="me").help_probability("A") > p


def test_a_harmful_card_shifts_down_and_a_null_card_barely_moves() -> None:
    rng = np.random.default_rng(2)
    harmful = [
        t
        for run in ("r1", "r2")
        for t in _trials("H", task="other", run=run, n=60, p_treated=0.1, p_control=0.6, rng=rng)
    ]
    null = [
        t
        for run in ("r1", "r2")
        for t in _trials("N", task="other", run=run, n=400, p_treated=0.4, p_control=0.4, rng=rng)
    ]
    fit = fit_transfer([*harmful, *null], "toy", exclude_run="me")
    assert -MAX_SHIFT <= prior_shift(fit.help_probability("H")) < 0.0
    assert abs(prior_shift(fit.help_probability("N"))) < 0.03


def test_p_help_matches_the_closed_form_of_one_stratum_per_arm_pattern() -> None:
    """With perfectly balanced counts the MAP solves a 3-parameter logistic problem.

    Check P_help against an independent Newton-Laplace solution of the same
    posterior, computed here from its closed-form gradient and Hessian.
    """
    trials = []
    for i in range(20):  # treated: 15 of 20 succeed; control: 5 of 20
        trials.append(TransferTrial(f"t{i}", "other", "r1", "A", 1, i < 15))
        trials.append(TransferTrial(f"c{i}", "other", "r1", "A", 0, i < 5))
    fit = fit_transfer(trials, "toy", exclude_run="me")
    var = np.array([1.5**2, 0.75**2, 1.0**2])
    g = np.zeros(3)
    x = np.array([[1, 1, 1]] * 20 + [[1, 0, 0]] * 20, dtype=float)
    y = np.array([1.0] * 15 + [0.0] * 5 + [1.0] * 5 + [0.0] * 15)
    for _ in range(50):
        p = 1 / (1 + np.exp(-x @ g))
        grad = x.T @ (p - y) + g / var
        hess = x.T @ (x * (p * (1 - p))[:, None]) + np.diag(1 / var)
        g = g - np.linalg.solve(hess, grad)
    cov = np.linalg.inv(hess)
    want = 0.5 * (1 + math.erf(g[1] / math.sqrt(cov[1, 1] + 1.0) / math.sqrt(2)))
    assert fit.help_probability("A") == pytest.approx(want, abs=1e-6)


def test_a_failed_transfer_fit_means_no_shift(monkeypatch: pytest.MonkeyPatch) -> None:
    from gigaevo.memory.v2.causal import transfer

    class Failing(transfer.LogisticLaplaceHead):
        def fit(self, x: Any, d: Any) -> Failing:
            super().fit(x, d)
            self.ok_, self.failure_ = False, "MAP not converged (forced)"
            return self

    monkeypatch.setattr(transfer, "LogisticLaplaceHead", Failing)
    rng = np.random.default_rng(5)
    trials = _trials("A", task="other", run="r1", n=40, p_treated=0.9, p_control=0.1, rng=rng)
    fit = fit_transfer(trials, "toy", exclude_run="me")
    assert fit.failure == "A: MAP not converged (forced)" and fit.help_probability("A") == 0.5
    assert intercept_prior_mean(DesignSpace(3, ("A",)), fit) is None


def test_the_fit_cache_refits_only_changed_cards(monkeypatch: pytest.MonkeyPatch) -> None:
    from gigaevo.memory.v2.causal import transfer

    rng = np.random.default_rng(6)
    trials = [
        t
        for cid in ("A", "B")
        for t in _trials(cid, task="other", run="r1", n=20, p_treated=0.7, p_control=0.3, rng=rng)
    ]
    cache: dict[str, Any] = {}
    first = fit_transfer(trials, "toy", exclude_run="me", cache=cache)
    # private on purpose: the point is which cards the cache refits, which only a spy on
    # the per-card fit can see (the results are equal either way)
    fitted: list[str] = []
    real = transfer._card_help

    def counting(strata: Any, task: str, c: Any) -> Any:
        fitted.append(next(iter(strata))[2])
        return real(strata, task, c)

    monkeypatch.setattr(transfer, "_card_help", counting)
    assert fit_transfer(trials, "toy", exclude_run="me", cache=cache) == first and fitted == []
    more = [*trials, TransferTrial("new", "other", "r1", "B", 1, True)]
    again = fit_transfer(more, "toy", exclude_run="me", cache=cache)
    assert fitted == ["B"] and again.p_help["A"] == first.p_help["A"]
    assert again.p_help["B"] > first.p_help["B"]  # one more treated success


def test_strata_need_two_trials_per_arm_from_other_runs() -> None:
    t = [
        TransferTrial("a", "x", "r1", "A", 1, True),
        TransferTrial("b", "x", "r1", "A", 1, False),
        TransferTrial("c", "x", "r1", "A", 0, True),
        TransferTrial("d", "x", "r1", "A", 0, False),
        TransferTrial("e", "x", "r2", "A", 1, True),
        TransferTrial("f", "x", "r2", "A", 0, True),
        TransferTrial("g", "x", "r2", "A", 0, True),
    ]
    assert list(supported_strata(t, exclude_run="me")) == [("x", "r1", "A")]
    assert supported_strata(t, exclude_run="r1") == {}
    assert trial_digest(t) == trial_digest(reversed(t)) != trial_digest(t[:-1])


def test_the_reader_shifts_the_immediate_prior_and_refits_on_foreign_trials(
    tmp_path: Path, bank: Path
) -> None:
    rng = np.random.default_rng(3)
    foreign = _trials("ins-a", task="other", run="r1", n=40, p_treated=0.8, p_control=0.2, rng=rng)
    a = replace(
        _card("ins-a", task="other"),
        use_trials=tuple(UseTrial(t.decision_id, t.run, t.task, t.z, t.success) for t in foreign),
    )
    _seed_bank(bank, [a, _card("ins-b")])
    memory = _memory(tmp_path, bank, transfer={"enabled": True, "cross_task_candidates": True})
    reader = memory.reader
    assert reader is not None
    cards = sorted(memory.store.cards(), key=lambda c: c.id)
    fit = reader.heads.fitted(5 - 1, cards)
    assert fit.immediate is not None and fit.immediate.prior_mean is not None
    p = reader.transfer_fit.help_probability("ins-a")
    start = fit.space.lineage_slice("ins-a").start
    assert fit.immediate.prior_mean[start] == pytest.approx(prior_shift(p)) and p > 0.5
    assert fit.immediate.prior_mean[fit.space.lineage_slice("ins-b").start] == 0.0
    fits = reader.fits
    own = replace(a, use_trials=(*a.use_trials, UseTrial("mine", memory.run_id, "toy", 1, True)))
    # this run's own trial does not move the transfer prior: no refit
    assert reader.heads.fitted(4, [own, cards[1]]) is fit and reader.fits == fits
    other = replace(a, use_trials=(*a.use_trials, UseTrial("theirs", "r9", "toy", 1, True)))
    reader.heads.fitted(4, [other, cards[1]])
    assert reader.fits == fits + 1  # the trial digest joins the cache key
    # cross-task candidates: the card authored for "other" is in this task's universe
    row = reader.draft(_context(0))
    assert {s.card_id for s in row.universe} == {"ins-a", "ins-b"}
    memory.close()


def test_transfer_off_keeps_the_zero_prior_and_this_task_only(tmp_path: Path, bank: Path) -> None:
    rng = np.random.default_rng(4)
    foreign = _trials("ins-a", task="toy", run="r1", n=40, p_treated=0.8, p_control=0.2, rng=rng)
    a = replace(
        _card("ins-a"),
        use_trials=tuple(UseTrial(t.decision_id, t.run, t.task, t.z, t.success) for t in foreign),
    )
    _seed_bank(bank, [a, _card("ins-z", task="other")])
    memory = _memory(tmp_path, bank)
    reader = memory.reader
    assert reader is not None and not memory.transfer.enabled
    fit = reader.heads.fitted(4, [a])
    assert fit.immediate is not None and fit.immediate.prior_mean is None
    assert {s.card_id for s in reader.draft(_context(0)).universe} == {"ins-a"}
    memory.close()


def test_transfer_config_defaults_are_model_9() -> None:
    c = TransferConfig()
    assert (c.baseline_sd, c.card_sd, c.task_card_sd, c.min_trials_per_arm) == (1.5, 0.75, 1.0, 2)
    assert prior_shift(1.0, c) == MAX_SHIFT and prior_shift(0.0, c) == -MAX_SHIFT


# -- 4. several runs sharing one bank (real processes) ----------------------------


@pytest.mark.slow
def test_a_joblib_multirun_shares_one_bank(tmp_path: Path) -> None:
    bank = tmp_path / "bank"
    common = ["pipeline=memory_guided", "problem=rastrigin", "progress=false"]
    code, _, err = run_py(
        "memory=v2", *common, "max_mutants=30", f"memory_bank_dir={bank}",
        f"checkpoint_dir={tmp_path / 'seed_run'}", cwd=tmp_path,
    )  # fmt: skip
    assert code == 0, err[-3000:]
    before = {c.id: c for c in read_bank(bank / BANK_FILE).cards}
    assert before, "the seeding run authored no card"
    code, _, err = run_py(
        "-m", "memory=v2_multitask", *common, f"memory_bank_dir={bank}", "seed=0,1",
        "max_mutants=25", "hydra/launcher=joblib", "hydra.launcher.n_jobs=2",
        f"hydra.sweep.dir={tmp_path / 'sweep'}", cwd=tmp_path, timeout=600,
    )  # fmt: skip
    assert code == 0, err[-3000:]
    runs = [tmp_path / "sweep" / str(k) for k in range(2)]
    after = {c.id: c for c in read_bank(bank / BANK_FILE).cards}  # parses
    assert set(after) == set(before)  # no card added (or retired)
    assert all(after[k].description == before[k].description for k in after)
    stamped: dict[str, tuple[str, int]] = {}
    n_stamps = 0
    for cid, c in after.items():
        new = [
            t
            for t in c.use_trials
            if t.decision_id not in {b.decision_id for b in before[cid].use_trials}
        ]
        n_stamps += len(new)
        stamped.update({t.decision_id: (cid, t.z) for t in new})
    eligible: dict[str, tuple[str, int]] = {}
    for ckpt in runs:
        ledger = _eligible(ckpt)
        assert ledger, f"{ckpt} has no eligible terminal"
        assert not set(ledger) & set(eligible)  # each run's ledger is its own
        eligible.update(ledger)
        stats = json.loads((ckpt / "memory_stats.json").read_text())
        assert stats["authoring_enabled"] is False and stats["decide"]["trials_deferred"] == 0
    assert stamped == eligible and n_stamps == len(eligible)  # every stamp, exactly once
    assert json.loads((bank / LEASE_FILE).read_text())["leases"] == []
