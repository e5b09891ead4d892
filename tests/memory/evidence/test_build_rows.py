"""Rows built from engine records: grounding of citations, raw gains, censoring."""

from __future__ import annotations

import dataclasses
import math

import pytest

from gigaevo.memory.base import MutationContext, MutationResult
from gigaevo.memory.v2.evidence import (
    SelectionEvidence,
    edge_from_result,
    frozen_context,
    reward_definition,
    terminal_from_result,
)
from gigaevo.problems.spec import MetricsSpec
from tests.memory.evidence.factories import make_decision

SPEC = MetricsSpec("score", False, 0.0, 10.0, 10.0)


def _result(**kw: object) -> MutationResult:
    base: dict[str, object] = dict(
        attempt=0,
        child_id="kid",
        parent_id="p0",
        status="accepted",
        valid=True,
        parent_fitness=0.5,
        child_fitness=0.3,
        normalised_gain=0.02,
        cited_card_ids=("c1", "invented"),
        accepted=True,
        archive_status="improved",
    )
    base.update(kw)
    return MutationResult(**base)  # type: ignore[arg-type]


def test_reward_and_context_are_frozen_from_engine_records() -> None:
    reward = reward_definition(SPEC)
    assert (reward.direction, reward.lower, reward.upper) == ("lower", 0.0, 10.0)
    ctx = MutationContext("t", 4, "p", 1.0, 2, (1, 3), (0.5, 0.25), 0.1)
    frozen = frozen_context(ctx, [1.0, 0.2, 0.0])
    assert frozen.cell == (1, 3) and frozen.features == (1.0, 0.2, 0.0)


def test_only_the_shown_proposed_card_can_be_cited() -> None:
    shown = make_decision(0, z=1)
    assert terminal_from_result(shown, _result()).cited_ids == ("c1",)
    withheld = make_decision(1, z=0)
    assert terminal_from_result(withheld, _result()).cited_ids == ()
    other = make_decision(2, z=1, proposed="c2")
    assert terminal_from_result(other, _result()).cited_ids == ()


def test_valid_invalid_and_discarded_results(ledger: SelectionEvidence) -> None:
    d = make_decision(0, z=1)
    lower = dataclasses.replace(d, reward=reward_definition(MetricsSpec("score", False, 0, 1, 1)))
    valid = terminal_from_result(lower, _result())
    assert valid.status == "valid" and math.isclose(valid.gain or 0.0, 0.2)
    invalid = terminal_from_result(d, _result(valid=False, normalised_gain=None))
    assert invalid.status == "invalid" and invalid.gain is None
    dup = terminal_from_result(d, _result(normalised_gain=None, status="duplicate"))
    assert dup.status == "censored" and dup.cited_ids == ()
    ledger.append_decision(d)
    ledger.append_terminal(terminal_from_result(d, _result(child_fitness=0.6)))
    assert ledger.head_rows("immediate")[0].cited


@pytest.mark.parametrize(
    ("kw", "status"),
    [({}, "valid"), ({"valid": False}, "invalid"), ({"normalised_gain": None}, "censored")],
)
def test_edges_from_results(ledger: SelectionEvidence, kw: dict[str, object], status: str) -> None:
    edge = edge_from_result(_result(**kw), run_id="r", decision_id=None, metrics=SPEC)
    assert edge.status == status
    stored = ledger.record_edge(edge)
    assert stored.ordinal == 1 and ledger.edges() == (stored,)
    if status == "valid":
        assert math.isclose(stored.gain or 0.0, 0.2)  # lower is better: 0.5 -> 0.3


@pytest.mark.parametrize(
    ("kw", "recorded"),
    [
        ({"se": 0.0, "measurement": "deterministic"}, (0.0, "deterministic")),
        ({"se": 0.02, "measurement": "scalar"}, (0.02, "scalar")),
        ({"se": 0.03, "measurement": "paired"}, (0.03, "paired")),
        ({}, (None, "scalar")),  # nothing declared: unknown se
        ({"se": -1.0, "measurement": "scalar"}, (None, "scalar")),  # unusable: unknown
        ({"se": math.nan, "measurement": "scalar"}, (None, "scalar")),
    ],
)
def test_valid_terminals_record_the_results_measurement(
    ledger: SelectionEvidence, kw: dict[str, object], recorded: tuple[object, str]
) -> None:
    d = make_decision(0, z=0)
    row = terminal_from_result(d, _result(child_fitness=0.6, **kw))
    assert (row.se, row.measurement) == recorded
    invalid = terminal_from_result(d, _result(valid=False, normalised_gain=None, **kw))
    assert (invalid.se, invalid.measurement) == (None, None)
    ledger.append_decision(d)
    ledger.append_terminal(row)
    assert ledger.terminal(d.decision_id) == row  # read back from the ledger as written


def test_a_terminal_refuses_an_unusable_or_misplaced_measurement() -> None:
    d = make_decision(0, z=0)
    valid = terminal_from_result(d, _result(child_fitness=0.6))
    with pytest.raises(ValueError, match="finite and >= 0"):
        dataclasses.replace(valid, se=-0.1)
    invalid = terminal_from_result(d, _result(valid=False, normalised_gain=None))
    with pytest.raises(ValueError, match="valid terminals and only"):
        dataclasses.replace(invalid, se=0.1)
