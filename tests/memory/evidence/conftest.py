"""Fixtures of the causal-ledger tests: an opened ledger in ``tmp_path``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from gigaevo.memory.v2.evidence import SelectionEvidence


@pytest.fixture
def ledger(tmp_path: Path) -> Iterator[SelectionEvidence]:
    led = SelectionEvidence(tmp_path).open()
    yield led
    led.close()
