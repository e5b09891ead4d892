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
