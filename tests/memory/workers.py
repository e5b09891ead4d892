"""Entry points of the real processes the concurrency and crash tests start."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from gigaevo.memory.v2 import writer_outcome
from tests.memory.helpers import METRICS, librarian, open_store, result
from tests.memory.test_card_model import card

TACTICS = ("perturb_constants", "change_loop_bounds", "change_operators", "crossover")


def ingest_worker(
    bank: str, ledger: str, run_id: str, plan: list[tuple[int, int, int]], start: Any
) -> None:
    """Ingest ``plan`` = [(attempt, tactic index, scope index)] into the shared bank.

    Waits at the ``start`` barrier so that all workers contend at once.
    """
    lib = librarian(
        Path(bank),
        Path(ledger),
        run_id=run_id,
        writer={"audit_duplicates": False, "ingest_call_timeout_s": 60},
    )
    start.wait()
    for attempt, tactic, scope in plan:
        r = result(
            attempt, tactic=TACTICS[tactic], scope=f"f{scope}", child_id=f"{run_id}-c{attempt}"
        )
        lib.submit(writer_outcome(r, METRICS))
        lib.drain()
    lib.drain(final=True)


def churn(bank: str, lock: str) -> None:
    """Write big cards to the bank forever (until killed); prints each generation written."""
    store = open_store(Path(bank), lock=lock)
    filler = "x" * 200_000  # a slow write widens the window a kill can land in
    i = 0
    while True:
        c = replace(card(), id=f"ins-churn{i:06d}", explanation_summary=filler)
        store.transaction(lambda cards, c=c: cards.__setitem__(c.id, c))
        print(store.generation, flush=True)
        i += 1


if __name__ == "__main__":
    churn(sys.argv[1], sys.argv[2])
