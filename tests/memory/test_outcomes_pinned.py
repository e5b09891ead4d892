"""The reader's outcome recording pinned where a mutation run found it unchecked (issue 19:
the survivors of ``read/outcomes.py``'s mutation sample)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from gigaevo.memory.base import MutationContext
from tests.memory.helpers import memory_provider, result


def test_an_outcome_observed_twice_is_stored_once_and_says_why_in_the_log(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    mem = memory_provider(tmp_path, selection="causal")
    assert mem.reader is not None
    mem.decide(MutationContext("toy", 0, "parent-0", 5.0, 0, (0,), (0.5,), 0.0))
    with caplog.at_level(logging.INFO, logger="gigaevo.memory.v2.read.outcomes"):
        mem.observe(result(0, scope="f0"))
        mem.observe(result(0, scope="f0"))  # a resumed engine observes the attempt again
        mem.close()
    said = [
        r.getMessage()
        for r in caplog.records
        if r.name == "gigaevo.memory.v2.read.outcomes" and r.levelno == logging.INFO
    ]
    assert said == ["memory v2: edge 'child-0' already recorded"]


def test_an_outcome_of_an_attempt_without_a_decision_is_recorded_as_an_edge(
    tmp_path: Path,
) -> None:
    # attempt 0 decided, attempt 1 never was (no decision row): its child is still an edge
    mem = memory_provider(tmp_path, selection="causal")
    assert mem.reader is not None
    mem.decide(MutationContext("toy", 0, "parent-0", 5.0, 0, (0,), (0.5,), 0.0))
    mem.observe(result(0, scope="f0"))
    mem.observe(result(1, scope="f1"))
    edge = mem.reader.evidence.edge("child-1")
    assert edge is not None and edge.decision_id is None
    assert mem.reader.evidence.edge("child-0") is not None
    mem.close()
