"""Rows read back share their repeated parts (issue 16, footprint) and stay exact."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest

from gigaevo.memory.v2.errors import CardFormatError
from gigaevo.memory.v2.evidence import SelectionEvidence
from gigaevo.memory.v2.evidence.rows import Diagnostic, LineageRow, RewardDefinition
from gigaevo.memory.v2.records import from_json, to_json
from tests.memory.evidence.factories import make_decision, make_terminal


def test_a_reopened_ledger_shares_strings_and_repeated_parts(tmp_path):
    with SelectionEvidence(tmp_path) as ledger:
        ledger.open(censor_orphans=False)
        for attempt in range(6):
            d = make_decision(attempt, z=attempt % 2)
            ledger.append_decision(d)
            ledger.append_terminal(make_terminal(d))
    with SelectionEvidence(tmp_path).open(censor_orphans=False) as again:
        decisions, terminals = again.decisions(), again.terminals()
        assert len(decisions) == 6
        # the same reward definition, read six times, is one object
        assert len({id(d.reward) for d in decisions}) == 1
        # a decision id is one string in its decision and in its terminal
        for d, t in zip(decisions, terminals, strict=True):
            assert d.decision_id == t.decision_id
            assert d.decision_id is t.decision_id
            assert t.status is terminals[0].status
        assert len({id(d.run_id) for d in decisions}) == 1
        # what was shared is what was written: every row re-encodes to its stored form
        fresh = SelectionEvidence(tmp_path).open(censor_orphans=False)
        assert [to_json(t) for t in terminals] == [to_json(t) for t in fresh.terminals()]
        fresh.close()


def test_a_zero_of_another_sign_is_not_shared():
    one = from_json(LineageRow, _lineage(0.0))
    other = from_json(LineageRow, _lineage(-0.0))
    assert one == other  # equal as values ...
    assert math.copysign(1.0, other.best_gain) == -1.0  # ... but -0.0 kept bit for bit
    assert json.dumps(to_json(other)["best_gain"]) == "-0.0"


def test_a_fit_tuple_takes_the_identical_diagnostics_of_the_last_one():
    def read(values: list[float]) -> tuple[Diagnostic, ...]:
        row = from_json(LineageRow, _lineage(1.0))  # unrelated reads in between do not matter
        assert row.version == 1
        data = {"items": [{"name": f"d{i}", "value": v} for i, v in enumerate(values)]}
        holder = from_json(_Fits, data)
        return holder.items

    first = read([1.0, 2.0, 3.0])
    second = read([1.0, 2.5, 3.0])
    assert [d.value for d in second] == [1.0, 2.5, 3.0]
    assert second[0] is first[0] and second[2] is first[2]
    assert second[1] is not first[1]
    third = read([1.0, 2.5, 3.0])
    assert third is second  # identical tuple: the same object
    fourth = read([1.0, -0.0, 3.0])
    assert math.copysign(1.0, fourth[1].value) == -1.0


def test_strict_reads_still_refuse_what_they_refused():
    good = to_json(RewardDefinition("m", "higher", 0.0, 1.0))
    assert from_json(RewardDefinition, good) == RewardDefinition("m", "higher", 0.0, 1.0)
    with pytest.raises(CardFormatError, match=r"RewardDefinition.direction: expected one of"):
        from_json(RewardDefinition, {**good, "direction": "up"})
    with pytest.raises(CardFormatError, match=r"RewardDefinition.metric: expected a string"):
        from_json(RewardDefinition, {**good, "metric": 3})
    with pytest.raises(CardFormatError, match="unknown key 'extra'"):
        from_json(RewardDefinition, {**good, "extra": 1})


@dataclasses.dataclass(frozen=True, slots=True)
class _Fits:
    items: tuple[Diagnostic, ...]


def _lineage(gain: float) -> dict[str, object]:
    return to_json(
        LineageRow(
            root_decision_id="d-1",
            version=1,
            status="outcome",
            depth=3,
            budget=32,
            maturity_ordinal=4,
            best_descendant_id="p",
            best_depth=1,
            best_gain=gain,
            residual=0.0,
        )
    )
