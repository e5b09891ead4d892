"""A kill between a card's admission and the scratchpad's checkpoint loses no note.

The librarian stages a Hypothesis ``card.<id>`` when it admits a card; the run's
scratchpad writes staged notes at its next checkpoint. A resumed session stages
again, in admission order, the notes of the cards this run admitted that the
scratchpad lacks (the end-to-end case: tests/scratchpad/test_reset.py).
"""

from __future__ import annotations

from pathlib import Path

from gigaevo.memory.v2 import writer_outcome
from gigaevo.memory.v2.write.ledger import WriteLedger
from gigaevo.memory.v2.write.resume import added_cards
from gigaevo.scratchpad import Scratchpad
from tests.memory.helpers import METRICS, librarian, result


def test_a_resumed_librarian_restages_exactly_the_notes_the_scratchpad_lacks(
    bank: Path, tmp_path: Path
) -> None:
    ledger = tmp_path / "write_ledger.jsonl"
    first = librarian(bank, ledger, exemplars={"store_code": True})
    for r in [result(0, gain=0.05), result(1, gain=0.2, parent_fitness=5.5)]:
        first.submit(writer_outcome(r, METRICS))
        first.drain()
    added = added_cards(WriteLedger(ledger), "run-test")
    assert len(added) >= 2, added  # an insight and an exemplar, at least
    assert added_cards(WriteLedger(ledger), "another-run") == []

    pad = Scratchpad(tmp_path / "scratchpad.md")
    pad.add_hypothesis(f"card.{added[0]}", "written before the kill", source=added[0])
    resumed = librarian(bank, ledger, exemplars={"store_code": True}, store=first.store)
    resumed.notes = pad
    assert resumed.restage_notes(added) == len(added) - 1
    state = pad.state
    assert state.get(f"card.{added[0]}").text == "written before the kill"  # kept, not re-added
    for card_id in added[1:]:
        entry = state.get(f"card.{card_id}")
        assert entry is not None and entry.source == card_id
    assert resumed.restage_notes(added) == 0  # nothing twice
