"""The outcome recorder and a lease file it cannot use (memory-model.md "Eligibility"; the
lease file is the pending-outcome count's source).

A session abandoned without close leaves its lease for an attempt on file; the next session
on the checkpoint re-dispatches that attempt and, when its terminal is recorded, drops the
abandoned lease. If the lease file no longer parses at that moment, the outcome is still
recorded (a bad file never ends a run nor loses an outcome), the corrupt file is left as it
is for the user to inspect, and one warning names the attempt and the file's error.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from gigaevo.memory.base import MutationContext
from gigaevo.memory.v2.read.leases import LEASE_FILE
from tests.memory.helpers import memory_provider, result


def _context(attempt: int) -> MutationContext:
    coordinate = 0.1 + 0.8 * ((attempt * 37) % 100) / 100
    return MutationContext("toy", attempt, f"parent-{attempt}", 5.0, 0, (0,), (coordinate,), 0.0)


def test_an_unreadable_lease_file_costs_a_warning_naming_the_attempt_not_the_outcome(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    first = memory_provider(tmp_path, selection="causal")
    for a in range(8):
        first.decide(_context(a))
        first.observe(result(a, scope=f"f{a % 4}", gain=0.01 * (a + 1)))
    attempt = next(a for a in range(8, 200) if first.decide(_context(a)).record["proposed_id"])
    # abandoned without close; the next session re-dispatches the attempt
    second = memory_provider(tmp_path, selection="causal")
    assert second.reader is not None and second.recorder is not None
    record = second.decide(_context(attempt)).record
    did = str(record["decision_id"])
    lease_file = tmp_path / "run" / LEASE_FILE
    garbage = "{ not json"
    lease_file.write_text(garbage)
    with caplog.at_level(logging.WARNING, logger="gigaevo.memory.v2.read.outcomes"):
        second.observe(result(attempt, scope="f1"))
    warnings = [
        r.getMessage()
        for r in caplog.records
        if r.name == "gigaevo.memory.v2.read.outcomes" and r.levelno == logging.WARNING
    ]
    assert len(warnings) == 1, warnings
    prefix = f"memory v2 lease of attempt {attempt} not released: "
    assert warnings[0].startswith(prefix) and len(warnings[0]) > len(prefix) + 5
    # the outcome is recorded all the same, and the corrupt file is not overwritten
    terminal = second.reader.evidence.terminal(did)
    assert terminal is not None and terminal.censor_reason is None
    assert lease_file.read_text() == garbage
