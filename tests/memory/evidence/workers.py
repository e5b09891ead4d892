"""Process entry points of the concurrency tests (module level, so ``spawn`` can import them)."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

from gigaevo.memory.v2.evidence import EdgeRow, LeaseCapReachedError, SelectionEvidence
from gigaevo.memory.v2.read.leases import SelectionLeases
from tests.memory.evidence.factories import make_decision, make_terminal


def write_attempts(directory: str, run_id: str, n: int, start: Any) -> None:
    """Append n decisions, terminals and edges to the shared ledger as fast as possible."""
    ledger = SelectionEvidence(directory, busy_timeout_s=60.0).open(censor_orphans=False)
    start.wait()
    for attempt in range(n):
        d = make_decision(attempt, run_id=run_id, z=attempt % 2, owner=ledger.owner)
        ledger.append_decision(d)
        ledger.append_terminal(make_terminal(d, cited=("c1",) if d.z == 1 else ()))
        ledger.record_edge(
            EdgeRow(
                f"{run_id}-{attempt}",
                run_id,
                attempt,
                "p",
                f"{run_id}-{attempt}",
                0,
                0,
                "valid",
                0.1,
                "improved",
            )
        )
    ledger.close()


def hold_lease(bank: str, card: str, aliases: list[str], ready: Any) -> None:
    """Take a lease, report it, then wait to be killed."""
    leases = SelectionLeases(bank, run_id=f"holder-{os.getpid()}")
    leases.acquire(card, aliases, attempt=0)
    ready.set()
    while True:
        time.sleep(0.1)


def race_for_lease(bank: str, card: str, start: Any, results: Any, release: Any) -> None:
    """Try to lease ``card``; report success or refusal; hold it until ``release``."""
    leases = SelectionLeases(bank, run_id=f"racer-{os.getpid()}")
    start.wait()
    try:
        leases.acquire(card, [card], attempt=0)
        results.put("ok")
    except LeaseCapReachedError:
        results.put("refused")
    release.wait()


def churn_leases(bank: str, tag: str, n: int, start: Any, done: Any, stop: Any) -> None:
    """Acquire n leases on distinct cards, releasing every other one; stay alive until ``stop``."""
    leases = SelectionLeases(bank, run_id=tag)
    start.wait()
    for i in range(n):
        lease = leases.acquire(f"{tag}-{i}", [], attempt=i)
        if i % 2:
            leases.release(lease.lease_id)
    done.release()
    stop.wait()


def kill(pid: int) -> None:
    os.kill(pid, signal.SIGKILL)


__all__ = ["Path", "churn_leases", "hold_lease", "kill", "race_for_lease", "write_attempts"]


def owe_release(bank: str) -> None:
    """Take a lease, owe its release (not written), die by SIGKILL."""
    leases = SelectionLeases(bank, run_id="r")
    leases.acquire("c1", [], attempt=0)
    leases.release_attempt(0, later=True)
    os.kill(os.getpid(), signal.SIGKILL)
