"""A SIGKILL at any instant of a bank write leaves a parseable bank and a free lock."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from gigaevo.memory.v2.bank.bankfile import read_bank
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


@pytest.mark.parametrize("marker", [b"", b"1234\nhost"])  # empty, or torn mid-write
def test_soft_lock_marker_left_by_a_killed_holder_is_broken_by_age(
    tmp_path: Path, marker: bytes
) -> None:
    bank = tmp_path / "bank"
    open_store(bank, lock="soft")  # the bank exists; its lock is free
    # a holder killed between creating the marker and writing its pid leaves
    # a marker that names no owner: only its age can free it
    lock_file = bank / "cards.json.lock"
    lock_file.write_bytes(marker)
    # a marker that were never broken would end the transaction with a lock timeout after
    # 10 s: that the card is written shows it was broken by age (no wall-clock bound)
    store = open_store(bank, lock="soft", lock_timeout_s=10.0, soft_lock_lifetime_s=0.5)
    c = card(id="ins-after-stranded")
    store.transaction(lambda cards: cards.__setitem__(c.id, c))
    assert c.id in {x.id for x in read_bank(bank / "cards.json").cards}
