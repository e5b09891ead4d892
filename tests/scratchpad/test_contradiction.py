"""A contradicted finding is replaced by key and the change is recorded in Decisions."""

from __future__ import annotations

from pathlib import Path

from gigaevo.scratchpad import DECISIONS, FINDINGS, HYPOTHESES, Scratchpad


def test_contradicted_finding_is_replaced_and_recorded(pad: Scratchpad, pad_path: Path) -> None:
    pad.record_finding("cache", "the prompt cache is cold", source="log:1")
    result = pad.record_finding("cache", "the prompt cache is warm", source="log:2")
    assert "added rev:cache to Decisions" in result.notes
    findings = pad.state.section(FINDINGS)
    assert [(e.key, e.text) for e in findings] == [("cache", "the prompt cache is warm")]
    (record,) = pad.state.section(DECISIONS)
    assert record.key == "rev:cache" and record.source == "log:2"
    assert '"the prompt cache is cold"' in record.text
    assert '"the prompt cache is warm"' in record.text
    assert pad_path.read_text().count("prompt cache is cold") == 1  # only in the record


def test_repeated_revisions_collapse_into_one_decision(pad: Scratchpad) -> None:
    for i in range(4):
        pad.record_finding("x", f"value {i}", source=f"s{i}")
    decisions = pad.state.section(DECISIONS)
    assert [e.key for e in decisions] == ["rev:x"]
    assert 'was "value 2"; now "value 3"' in decisions[0].text


def test_superseding_a_running_value_records_nothing(pad: Scratchpad) -> None:
    pad.record_finding("best", "best 1.0 by a", source="a")
    pad.record_finding("best", "best 2.0 by b", source="b", record_change=False)
    assert pad.state.section(DECISIONS) == ()


def test_same_claim_new_source_is_not_a_contradiction(pad: Scratchpad) -> None:
    pad.record_finding("f", "same claim", source="a")
    pad.record_finding("f", "same claim", source="b")
    assert pad.state.section(DECISIONS) == ()
    assert pad.state.get("f").source == "b"  # type: ignore[union-attr]


def test_demoting_a_finding_is_recorded(pad: Scratchpad) -> None:
    pad.record_finding("f", "x helps", source="a")
    pad.add_hypothesis("f", "x might help after all")
    (record,) = pad.state.section(DECISIONS)
    assert "now in Hypotheses" in record.text
    assert pad.state.get("f").section == HYPOTHESES  # type: ignore[union-attr]
