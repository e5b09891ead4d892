"""A SIGKILL at any instant of a bank write leaves a parseable bank and a free lock."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from gigaevo.memory.v2.bankfile import read_bank
from tests.conftest import ROOT
from tests.memory.helpers import open_store
from tests.memory.test_card_model import card


@pytest.mark.parametrize(
    ("lock", "rounds"), [("os", 2), pytest.param("soft", 4, marks=pytest.mark.slow)]
)
def test_sigkill_during_writes_leaves_a_parseable_bank(
    tmp_path: Path, lock: str, rounds: int
) -> None:
    bank = tmp_path / "bank"
    rng = np.random.default_rng(0)
    generation = 0
    for _ in range(rounds):
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.memory.workers", str(bank), lock],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert proc.stdout is not None
        proc.stdout.readline()  # at least one write done: the next ones are in flight
        time.sleep(float(rng.uniform(0.0, 0.05)))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        loaded = read_bank(bank / "cards.json")
        assert loaded.header.n_cards == len(loaded.cards) >= 1
        assert loaded.header.generation >= generation
        generation = loaded.header.generation
        # the killed holder's lock is free again: a new process can write at once
        store = open_store(bank, lock=lock, lock_timeout_s=10.0)
        c = card(id=f"ins-after{generation:06d}")
        store.transaction(lambda cards, c=c: cards.__setitem__(c.id, c))
        generation = store.generation
    assert not list(bank.glob(".cards.json.*.tmp"))  # orphans are swept on open
