"""``memory/applicability=agentic``: RAG labels from the memory LLM, cached, bounded, fail-open."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from omegaconf import DictConfig

from gigaevo.llm.offline_applicability import code_vocabulary, condition_overlap, condition_words
from gigaevo.llm.offline_memory import OfflineMemoryLLM
from gigaevo.memory.base import MutationContext
from gigaevo.memory.v2 import CardBankMemory, HashingEmbedder, LocalMemoryStore
from gigaevo.memory.v2.causal.features import RAG_CONTRAST
from gigaevo.memory.v2.errors import MemoryConfigError
from gigaevo.memory.v2.evidence import Observation, SelectionEvidence
from gigaevo.memory.v2.read.applicability import (
    ApplicabilityAssessor,
    ApplicabilitySettings,
    Assessment,
)
from gigaevo.memory.v2.read.events import EVENTS_FILE, read_events
from gigaevo.memory.v2.write.agents import AgentUsage, TaskView
from gigaevo.pipeline.build import STORE_FILE, ConfigError, run_from_config
from tests.conftest import program_ids, run_py
from tests.memory.fakes import ScriptedMemoryLLM
from tests.memory.helpers import program, result, runtime
from tests.memory.ledger_rows import commit_delivered
from tests.memory.test_card_model import card

AGENT = "applicability_assessor"
LOOP_CARD = "When the loop in `solve` sums the `weights`, try to unroll it because it is short."
LOOP_PARENT = (
    "def solve(weights):\n    total = 0\n    for w in weights:\n        total += w\n"
    "    return total\n"
)
TEXT_PARENT = "def render(text):\n    return text.upper()\n"


def put(store: LocalMemoryStore, card_id: str, description: str) -> None:
    c = card(id=card_id, description=description)
    store.transaction(lambda cards: cards.__setitem__(c.id, c))


def assessor(store: LocalMemoryStore, llm: Any, **settings: Any) -> ApplicabilityAssessor:
    return ApplicabilityAssessor(
        llm,
        store=store,
        task=TaskView("toy", "Maximise the toy score."),
        settings=ApplicabilitySettings(mode="agentic", **settings),
        usage=AgentUsage(),
        seed=0,
    )


def ctx(attempt: int, parent_id: str, code: str) -> MutationContext:
    return MutationContext("toy", attempt, parent_id, 5.0, 0, (0,), (0.5,), 0.0, parent_code=code)


# -- the offline rule ------------------------------------------------------------------
def test_condition_words_and_overlap_follow_the_rule() -> None:
    assert condition_words(LOOP_CARD) == {"loop", "solve", "sums", "weights"}
    # LOOP_PARENT shows solve, weights and a for loop, not "sums": 3 of 4
    assert condition_overlap(LOOP_CARD, code_vocabulary(LOOP_PARENT)) == pytest.approx(0.75)
    assert condition_overlap(LOOP_CARD, code_vocabulary(TEXT_PARENT)) == 0.0
    # backticked names count whatever their length; `_` parts of identifiers count
    short = "When `f0` reads max_depth, try x."
    assert condition_words(short) == {"f0", "reads", "max_depth"}
    assert condition_overlap(short, code_vocabulary("def f0(max_depth): pass")) == pytest.approx(
        2 / 3
    )


def test_offline_labels_are_deterministic_and_parent_dependent(store: LocalMemoryStore) -> None:
    put(store, "ins-loop", LOOP_CARD)
    put(store, "ins-text", "When `render` upper-cases the `text`, try caching because x.")
    cards = sorted(store.cards(), key=lambda c: c.id)
    first = {
        seed: assessor(store, OfflineMemoryLLM(seed=seed)).assess(ctx(0, "p1", LOOP_PARENT), cards)
        for seed in (0, 1, 7)
    }
    labels = {seed: dict(a.labels) for seed, a in first.items()}
    assert (
        labels[0]
        == labels[1]
        == labels[7]
        == {
            "ins-loop": "applicable",
            "ins-text": "not_applicable",
        }
    )
    other = assessor(store, OfflineMemoryLLM(seed=0)).assess(ctx(0, "p2", TEXT_PARENT), cards)
    assert dict(other.labels) == {"ins-loop": "not_applicable", "ins-text": "applicable"}
    assert other.calls == 1 and other.failures == 0


def test_only_the_max_cards_nearest_to_the_parent_are_labelled(store: LocalMemoryStore) -> None:
    near = {f"ins-near{i}" for i in range(4)}
    for i in range(4):
        put(store, f"ins-near{i}", f"When the loop in `solve` sums the `weights` ({i}), try x{i}.")
    for i in range(20):
        put(store, f"ins-far{i:02d}", f"When a banner string is printed in colour {i}, try y{i}.")
    cards = store.cards()
    a = assessor(store, OfflineMemoryLLM(), max_cards=4).assess(ctx(0, "p", LOOP_PARENT), cards)
    assert set(a.labels) == near
    assert a.counts() == {"applicable": 4, "not_applicable": 0, "unassessed": 20}
    assert a.label("ins-far00") == "unassessed"


# -- cache and failures ----------------------------------------------------------------
def test_the_cache_avoids_repeat_calls(store: LocalMemoryStore) -> None:
    put(store, "ins-loop", LOOP_CARD)
    llm = ScriptedMemoryLLM()
    labeller = assessor(store, llm)
    cards = store.cards()
    first = labeller.assess(ctx(0, "p1", LOOP_PARENT), cards)
    again = labeller.assess(ctx(1, "p1", LOOP_PARENT), cards)
    assert llm.calls == {AGENT: 1}
    assert again.labels == first.labels and again.cache_hits == 1 and again.calls == 0
    labeller.assess(ctx(2, "p2", TEXT_PARENT), cards)  # another parent asks again
    assert llm.calls == {AGENT: 2}
    put(store, "ins-loop", "When `render` upper-cases the `text`, try caching because x.")
    store.refresh()
    changed = labeller.assess(ctx(3, "p1", LOOP_PARENT), store.cards())  # new text: ask again
    assert llm.calls == {AGENT: 3} and changed.labels == {"ins-loop": "not_applicable"}
    assert labeller.summary()["cache_hits"] == 1


@pytest.mark.parametrize(
    "behaviour",
    [
        "garbage",
        "raise",
        {"labels": [{"card_id": "ins-invented", "label": "applicable"}], "reason": "x"},
        {"labels": [], "reason": "forgot them"},
        ("sleep", 1.0),
    ],
    ids=["garbage", "transport-error", "invented-id", "missing-ids", "timeout"],
)
def test_a_failed_answer_leaves_cards_unassessed(store: LocalMemoryStore, behaviour: Any) -> None:
    put(store, "ins-loop", LOOP_CARD)
    llm = ScriptedMemoryLLM({AGENT: behaviour})
    labeller = assessor(store, llm, timeout_s=0.2)
    a = labeller.assess(ctx(0, "p", LOOP_PARENT), store.cards())
    assert a.labels == {} and a.label("ins-loop") == "unassessed"
    assert (a.calls, a.failures) == (1, 1) and a.error
    assert labeller.summary()["failures"] == 1
    # nothing was cached: the next attempt from the same parent asks again
    labeller.assess(ctx(1, "p", LOOP_PARENT), store.cards())
    assert llm.calls[AGENT] >= 2


def test_settings_are_validated_naming_the_key() -> None:
    with pytest.raises(MemoryConfigError, match=r"memory\.applicability: max_cards must be >= 1"):
        ApplicabilitySettings.parse({"mode": "agentic", "max_cards": 0})
    with pytest.raises(MemoryConfigError, match=r"memory\.applicability: unknown key 'k'"):
        ApplicabilitySettings.parse({"k": 1})
    with pytest.raises(MemoryConfigError, match=r"memory\.applicability\.mode"):
        ApplicabilitySettings.parse({"mode": "sometimes"})
    assert ApplicabilitySettings.parse(None).mode == "none"


# -- through the reader: labels frozen in the decision and used by the design ---------
def provider(tmp_path: Path, llm: Any) -> CardBankMemory:
    return CardBankMemory(
        runtime(tmp_path),
        llm=llm,
        embedder=HashingEmbedder(),
        write={"cadence": "live"},
        selection="causal",
        applicability={"mode": "agentic"},
    )


def _bank(mem: CardBankMemory) -> None:
    for a, scope in enumerate(["f0", "f1", "f2"]):
        mem.decide(ctx(a, f"parent-{a}", program()))
        mem.observe(result(a, scope=scope, gain=0.02 * (a + 1)))


def _treated(mem: CardBankMemory, attempt: int, code: str) -> Observation:
    """Commit a delivered, cited decision drafted for a parent with source ``code``."""
    reader = mem.reader
    assert reader is not None
    row = commit_delivered(
        reader,
        range(attempt, attempt + 100),
        lambda a: ctx(a, f"parent-{a}", code),
        cite=True,
        gain=0.1,
        child_prefix="child-",
    )
    return next(
        o for o in reader.evidence.observations() if o.decision.decision_id == row.decision_id
    )


def test_labels_are_frozen_in_the_decision_and_reach_the_design_rows(tmp_path: Path) -> None:
    mem = provider(tmp_path, OfflineMemoryLLM(seed=0))
    reader = mem.reader
    assert reader is not None and reader.assessor is not None
    _bank(mem)
    cards = {c.id: c for c in mem.store.cards(task_key="toy")}
    assert cards
    for code, attempt in ((program(), 100), (TEXT_PARENT, 300)):
        obs = _treated(mem, attempt, code)
        pid = obs.decision.proposed_id or ""
        # ground truth: the offline rule on this card and this parent
        truth = (
            "applicable"
            if condition_overlap(cards[pid].description, code_vocabulary(code)) >= 0.5
            else "not_applicable"
        )
        frozen = {c.card_id: c.rag for c in obs.decision.candidates}
        assert frozen[pid] == truth
        assert set(frozen.values()) <= {"applicable", "not_applicable", "unassessed"}
        fit = reader.heads.fitted(len(obs.decision.context.features), list(cards.values()))
        assert fit.space.rag_contrast
        r_col = fit.space.shared_size - 1  # r is the last shared column
        alias = {c: c for c in cards}
        z = reader.heads.design_row(fit.space, obs, alias)
        assert z[r_col] == RAG_CONTRAST[truth] != 0.0
        # the frozen label rules, whatever the labeller says now
        reader.assessment = Assessment({pid: "unassessed"}, candidates=1)
        assert reader.heads.design_row(fit.space, obs, alias)[r_col] == RAG_CONTRAST[truth]
    assert {RAG_CONTRAST["applicable"], RAG_CONTRAST["not_applicable"]} == {0.5, -0.5}
    mem.close()


def test_a_garbage_labeller_leaves_every_card_unassessed_and_the_run_goes_on(
    tmp_path: Path,
) -> None:
    llm = ScriptedMemoryLLM({AGENT: "garbage"})
    mem = provider(tmp_path, llm)
    assert mem.reader is not None
    _bank(mem)
    for a in range(3, 20):
        mem.decide(ctx(a, f"parent-{a}", program()))
        mem.observe(result(a, scope="f0"))
    mem.close()
    with SelectionEvidence(tmp_path / "run").open(censor_orphans=False) as ev:
        decisions = ev.decisions()
    assert len(decisions) == 20
    rags = {c.rag for d in decisions for c in d.candidates}
    assert rags == {"unassessed"}
    events = [
        e for e in read_events(tmp_path / "run" / EVENTS_FILE) if e["event"] == "applicability"
    ]
    assert events and all(e["failures"] == 1 and e["labels"] == {} for e in events)
    assert all(e["counts"]["unassessed"] == e["candidates"] > 0 for e in events)
    stats = json.loads((tmp_path / "run" / "memory_stats.json").read_text())
    assert stats["decide"]["applicability"]["failures"] == len(events)
    assert llm.calls[AGENT] == 2 * len(events)  # llm_max_attempts answers per failed call


def test_agentic_needs_a_memory_llm(tmp_path: Path) -> None:
    with pytest.raises(MemoryConfigError, match=r"memory\.applicability\.mode=agentic"):
        CardBankMemory(
            runtime(tmp_path),
            llm=None,
            embedder=HashingEmbedder(),
            write={"cadence": "none"},
            selection="causal",
            applicability={"mode": "agentic"},
        )


# -- end to end -----------------------------------------------------------------------
def _decisions(ckpt: Path) -> list[tuple[Any, ...]]:
    with SelectionEvidence(ckpt).open(censor_orphans=False) as ev:
        return sorted(
            (d.attempt, d.proposed_id, d.z, d.rho0, d.rho, d.joint, d.fitted_row_ids)
            for d in ev.decisions()
        )


@pytest.mark.slow
def test_applicability_none_leaves_decisions_as_the_default(
    make_cfg: Callable[..., DictConfig],
) -> None:
    runs = {}
    for name, extra in (("default", ()), ("none", ("memory/applicability=none",))):
        cfg = make_cfg("max_mutants=30", "memory=v2", "pipeline=memory_guided", *extra, run=name)
        assert cfg.memory.applicability.mode == "none"
        run_from_config(cfg, show_progress=False)
        ckpt = Path(str(cfg.checkpoint_dir))
        events = read_events(ckpt / EVENTS_FILE)
        assert not [e for e in events if e["event"] == "applicability"]
        with SelectionEvidence(ckpt).open(censor_orphans=False) as ev:
            assert all(c.rag is None for d in ev.decisions() for c in d.candidates)
        runs[name] = (_decisions(ckpt), program_ids(ckpt))
    assert runs["default"] == runs["none"]
    assert any(d[1] is not None for d in runs["none"][0])  # cards were proposed


def test_bad_applicability_setting_is_a_config_error(make_cfg: Callable[..., DictConfig]) -> None:
    cfg = make_cfg(
        "max_mutants=1",
        "memory=v2",
        "memory/applicability=agentic",
        "memory.applicability.timeout_s=0",
    )
    with pytest.raises(ConfigError, match=r"memory\.applicability: timeout_s must be > 0"):
        run_from_config(cfg, show_progress=False)


@pytest.mark.slow
def test_agentic_run_end_to_end_writes_applicability_events(tmp_path: Path) -> None:
    ckpt = tmp_path / "agentic"
    code, _, err = run_py(
        "problem=rastrigin",
        "max_mutants=40",
        "memory=v2",
        "memory/applicability=agentic",
        f"checkpoint_dir={ckpt}",
        "progress=false",
        "evaluator.max_workers=1",
        cwd=tmp_path,
    )
    assert code == 0, err[-2000:]
    assert (ckpt / STORE_FILE).exists()
    events = read_events(ckpt / EVENTS_FILE)
    labels = [e for e in events if e["event"] == "applicability"]
    assert labels, [e["event"] for e in events][:10]
    for e in labels:
        assert sum(e["counts"].values()) == e["candidates"] > 0
        assert e["failures"] == 0 and e["calls"] in (0, 1)
    assert any(e["cache_hits"] for e in labels)  # a parent chosen twice is not asked again
    with SelectionEvidence(ckpt).open(censor_orphans=False) as ev:
        frozen = [c.rag for d in ev.decisions() for c in d.candidates]
    assert frozen and None not in frozen
    stats = json.loads((ckpt / "memory_stats.json").read_text())["decide"]["applicability"]
    assert stats["calls"] == sum(e["calls"] for e in labels)
    assert stats["decisions"] >= len(labels)
    assert stats["cache_hits"] == sum(e["cache_hits"] for e in labels)


@pytest.mark.parametrize("option", ["agentic", "none"])
def test_each_applicability_option_builds_the_provider(option: str, tmp_path: Path) -> None:
    from gigaevo.pipeline.build import build_run
    from tests.conftest import compose_config

    cfg = compose_config(
        ["memory=v2", f"memory/applicability={option}", f"checkpoint_dir={tmp_path}"]
    )
    built = build_run(cfg, show_progress=False)
    try:
        assert isinstance(built.memory, CardBankMemory) and built.memory.reader is not None
        assessor = built.memory.reader.assessor
        assert (assessor is not None) == (option == "agentic")
        if assessor is not None:
            assert assessor.settings.max_cards == cfg.memory.applicability.max_cards == 24
    finally:
        built.close()
