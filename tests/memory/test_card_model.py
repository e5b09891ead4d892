"""The card model: strict JSON round trip, immutable revisions, pooling bounds, ids."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gigaevo.memory.v2 import Card, CardFormatError, Evidence, Representative, payload_digest
from gigaevo.memory.v2.bank.cards import (
    MAX_EVIDENCE,
    MAX_PROVENANCE,
    new_card_id,
    pool_into,
    render_card,
    with_representative,
)
from gigaevo.memory.v2.records import from_json, to_json


def evidence(i: int, task: str = "toy") -> Evidence:
    return Evidence(task, "run-a", i, f"p{i}", f"c{i}", 1.0, 1.5, 0.05, "improved", f"cand{i}", 1.0)


def card(kind: str = "insight", **changes: object) -> Card:
    base = Card(
        id="ins-000000000001",
        kind=kind,  # type: ignore[arg-type]
        revision=1,
        task_key="toy",
        task_context="Maximise the toy score.",
        description="When literals in `f0` set the result, try to nudge them "
        "(tactic: perturb_constants) because small moves help.",
        explanation_summary="Small moves explore a working solution's neighbourhood.",
        provenance=("p0", "c0"),
        evidence=(evidence(0),),
        n_evidence=1,
        derived_from=(),
        aliases=(),
        representatives=(),
        use_trials=(),
        author_model="offline-memory",
        created_by="run-a",
        created_at=1.0,
        updated_at=1.0,
    )
    return replace(base, **changes)  # type: ignore[arg-type]


def test_json_round_trip_is_exact() -> None:
    rep = Representative("toy", "run-a", "c0", 2.0, True, None)
    original = card("program", id="prg-1", representatives=(rep,))
    assert from_json(Card, to_json(original)) == original


def test_unknown_key_is_refused() -> None:
    data = to_json(card())
    data["keywords"] = ["free", "form"]
    with pytest.raises(CardFormatError, match="unknown key 'keywords'"):
        from_json(Card, data)


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("revision", "2", "expected an integer"),
        ("revision", True, "expected an integer"),
        ("kind", "note", "expected one of"),
        ("provenance", "p0", "expected a list"),
        ("description", "", "needs an id and a description"),
        ("revision", 0, "revision must be >= 1"),
    ],
)
def test_wrong_values_are_refused(key: str, value: object, message: str) -> None:
    data = to_json(card())
    data[key] = value
    with pytest.raises(CardFormatError, match=message):
        from_json(Card, data)


def test_missing_key_and_non_finite_number_are_refused() -> None:
    data = to_json(card())
    del data["aliases"]
    with pytest.raises(CardFormatError, match="missing key 'aliases'"):
        from_json(Card, data)
    data = to_json(card())
    data["evidence"][0]["normalised_gain"] = float("nan")
    with pytest.raises(CardFormatError, match="finite"):
        from_json(Card, data)


def test_pooling_keeps_the_treatment_and_bumps_the_revision() -> None:
    c = card()
    pooled = pool_into(c, evidence(1), ("p1", "c1", "p0"), now=2.0)
    assert (pooled.description, pooled.explanation_summary) == (
        c.description,
        c.explanation_summary,
    )
    assert pooled.text_digest == c.text_digest
    assert pooled.revision == 2 and pooled.n_evidence == 2
    assert pooled.provenance == ("p0", "c0", "p1", "c1")
    assert c.revision == 1  # the old revision is unchanged (immutable records)


def test_pooled_evidence_and_provenance_stay_bounded() -> None:
    c = card()
    for i in range(1, 200):
        c = pool_into(c, evidence(i), (f"p{i}", f"c{i}"), now=float(i))
    assert c.n_evidence == 200 and len(c.evidence) == MAX_EVIDENCE
    assert c.evidence[0].attempt == 0 and c.evidence[-1].attempt == 199  # founding row kept
    assert len(c.provenance) == MAX_PROVENANCE and c.provenance[:2] == ("p0", "c0")


def test_representatives_compare_within_one_task_only() -> None:
    a = Representative("toy", "r", "x", 2.0, True)
    b = Representative("toy", "r", "y", 1.0, True)
    assert a.beats(b) and not b.beats(a)
    low = Representative("toy", "r", "z", 1.0, False)
    assert low.beats(Representative("toy", "r", "w", 2.0, False))
    with pytest.raises(ValueError, match="across tasks"):
        a.beats(Representative("other", "r", "y", 1.0, True))


def test_one_representative_per_task_and_none_on_insights() -> None:
    rep = Representative("toy", "r", "x", 2.0, True)
    prog = card("program", representatives=(rep,))
    better = with_representative(prog, Representative("toy", "r", "y", 3.0, True), now=2.0)
    assert [r.program_id for r in better.representatives] == ["y"]
    with pytest.raises(ValueError, match="one representative per task"):
        card("program", representatives=(rep, rep))
    with pytest.raises(ValueError, match="insight cards have no program"):
        card("insight", representatives=(rep,))


def test_ids_are_deterministic_per_run_and_distinct_across_runs() -> None:
    a = new_card_id("insight", "run-a", 3, "insight")
    assert a == new_card_id("insight", "run-a", 3, "insight") and a.startswith("ins-")
    assert a != new_card_id("insight", "run-b", 3, "insight")
    assert new_card_id("program", "run-a", 3, "program").startswith("prg-")


def test_payload_digest_normalises_case_space_and_edge_punctuation() -> None:
    assert payload_digest("insight", "When A,  try B.", "Because M") == payload_digest(
        "insight", "when a, try b", "because m."
    )
    assert payload_digest("insight", "When A", "M") != payload_digest("program", "When A", "M")


def test_rendered_card_starts_with_its_id_for_the_mutator() -> None:
    from gigaevo.llm.offline import card_tactic
    from gigaevo.llm.prompt_reader import read_prompt

    text = render_card(card())
    assert text.startswith("[ins-000000000001] When")
    view = read_prompt(f"## Memory cards\n{text}\n")
    assert [c.id for c in view.cards] == ["ins-000000000001"]
    assert card_tactic(view.cards[0].text) == "perturb_constants"


def test_use_trials_are_compact_and_bounded() -> None:
    from gigaevo.memory.v2 import UseTrial
    from gigaevo.memory.v2.bank.cards import MAX_USE_TRIALS, with_use_trial

    c = card()
    for i in range(MAX_USE_TRIALS + 10):
        trial = UseTrial(f"d{i}", "run-a", "toy", i % 2, i % 3 == 0)
        c = with_use_trial(c, trial, float(i))
    last = f"d{MAX_USE_TRIALS + 9}"
    assert len(c.use_trials) == MAX_USE_TRIALS and c.use_trials[-1].decision_id == last
    assert c.use_trials[0].decision_id == "d10" and c.updated_at == float(MAX_USE_TRIALS + 9)
    assert c.revision == MAX_USE_TRIALS + 11 and c.description == card().description
