"""Selection leases: acquire/release, the pending cap, aliases, reclaim, real-process races."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import time
from pathlib import Path

import pytest

from gigaevo.memory.v2.evidence import LeaseCapReachedError, LeaseFileCorruptError
from gigaevo.memory.v2.read.leases import LEASE_FILE, RELEASE_LAG_S, SelectionLeases
from tests.memory.evidence.workers import (
    churn_leases,
    hold_lease,
    kill,
    owe_release,
    race_for_lease,
)


def test_acquire_and_release(tmp_path: Path) -> None:
    leases = SelectionLeases(tmp_path, run_id="r")
    lease = leases.acquire("c1", ["a1"], attempt=4)
    assert lease.lineage_ids == ("a1", "c1") and lease.pid == os.getpid()
    assert leases.pending({"c1"}) == 1
    on_file = json.loads((tmp_path / LEASE_FILE).read_text())
    assert [held["lease_id"] for held in on_file["leases"]] == [lease.lease_id]
    assert leases.release(lease.lease_id)
    assert not leases.release(lease.lease_id)
    assert leases.active() == ()


def test_third_pending_outcome_is_refused(tmp_path: Path) -> None:
    leases = SelectionLeases(tmp_path, run_id="r")
    first = leases.acquire("c1", [], attempt=0)
    leases.acquire("c1", [], attempt=1)
    with pytest.raises(LeaseCapReachedError) as refused:
        leases.acquire("c1", [], attempt=2)
    assert refused.value.pending == 2 and refused.value.card_id == "c1"
    leases.acquire("c2", [], attempt=2)  # other cards are unaffected
    leases.release(first.lease_id)
    leases.acquire("c1", [], attempt=3)


def test_aliases_share_the_cap(tmp_path: Path) -> None:
    leases = SelectionLeases(tmp_path, run_id="r")
    leases.acquire("survivor", ["old-a", "old-b"], attempt=0)
    leases.acquire("old-a", [], attempt=1)  # an absorbed id is the same lineage
    with pytest.raises(LeaseCapReachedError):
        leases.acquire("old-b", [], attempt=2)
    assert leases.pending({"old-b"}) == 2


def _on_file(bank: Path) -> list[str]:
    return [held["card_id"] for held in json.loads((bank / LEASE_FILE).read_text())["leases"]]


def test_an_owed_release_is_out_of_every_view_and_written_with_the_next_change(
    tmp_path: Path,
) -> None:
    clock = [1000.0]
    leases = SelectionLeases(tmp_path, run_id="r", clock=lambda: clock[0])
    leases.acquire("c1", [], attempt=0)
    leases.acquire("c1", [], attempt=1)
    assert leases.release_attempt(0, later=True) == 0
    # not written: the file still holds both, every reader of this process sees one
    assert _on_file(tmp_path) == ["c1", "c1"]
    again = SelectionLeases(tmp_path, run_id="r", clock=lambda: clock[0])  # same process
    assert [h.attempt for h in again.active()] == [1] and again.pending({"c1"}) == 1
    assert _on_file(tmp_path) == ["c1", "c1"]  # a read wrote nothing
    leases.acquire("c1", [], attempt=2)  # the cap counts the view: room for one more
    assert _on_file(tmp_path) == ["c1", "c1"]  # attempts 1 and 2: the release went along
    assert sorted(h.attempt for h in leases.active()) == [1, 2]
    # with no change to write, an owed release waits RELEASE_LAG_S, then any read writes it
    leases.release_attempt(1, later=True)
    leases.active()
    assert len(_on_file(tmp_path)) == 2
    clock[0] += RELEASE_LAG_S
    assert [h.attempt for h in leases.active()] == [2] and len(_on_file(tmp_path)) == 1
    leases.release_attempt(2, later=True)
    leases.flush()
    assert _on_file(tmp_path) == []


def test_an_owed_release_dies_with_its_process(tmp_path: Path) -> None:
    """A process killed owing a release leaves the lease on file; the next reader reclaims it
    (dead pid), as a lease the killed process never released."""
    ctx = mp.get_context("spawn")
    proc = ctx.Process(target=owe_release, args=(str(tmp_path),))
    proc.start()
    proc.join(60)
    assert proc.exitcode == -9
    assert _on_file(tmp_path) == ["c1"]  # owed, never written
    assert SelectionLeases(tmp_path, run_id="r").active() == ()
    assert _on_file(tmp_path) == []


def test_release_attempt_drops_only_own_leases(tmp_path: Path) -> None:
    mine = SelectionLeases(tmp_path, run_id="r")
    other = SelectionLeases(tmp_path, run_id="s")
    mine.acquire("c1", [], attempt=1)
    mine.acquire("c2", [], attempt=1)
    other.acquire("c3", [], attempt=1)
    assert mine.release_attempt(1) == 2
    assert [held.card_id for held in mine.active()] == ["c3"]


def test_expired_leases_are_reclaimed(tmp_path: Path) -> None:
    now = [1000.0]
    leases = SelectionLeases(tmp_path, run_id="r", ttl_s=10.0, clock=lambda: now[0])
    leases.acquire("c1", [], attempt=0)
    leases.acquire("c1", [], attempt=1)
    now[0] += 11.0
    leases.acquire("c1", [], attempt=2)
    assert [held.attempt for held in leases.active()] == [2]


def test_lease_of_a_killed_process_is_reclaimed(tmp_path: Path) -> None:
    ctx = mp.get_context("fork")
    ready = ctx.Event()
    holder = ctx.Process(target=hold_lease, args=(str(tmp_path), "c1", ["a1"], ready))
    holder.start()
    assert ready.wait(30)
    leases = SelectionLeases(tmp_path, run_id="r")
    assert leases.pending({"a1"}) == 1
    kill(holder.pid or 0)
    holder.join(10)
    assert leases.pending({"a1"}) == 0
    leases.acquire("c1", [], attempt=0)
    leases.acquire("c1", [], attempt=1)


@pytest.mark.parametrize("text", ["{not json", '{"format": 1, "leases": [{"x": 1}]}', "[]"])
def test_corrupt_file_is_refused_and_left_alone(tmp_path: Path, text: str) -> None:
    path = tmp_path / LEASE_FILE
    path.write_text(text)
    leases = SelectionLeases(tmp_path, run_id="r")
    with pytest.raises(LeaseFileCorruptError):
        leases.acquire("c1", [], attempt=0)
    with pytest.raises(LeaseFileCorruptError):
        leases.active()
    assert path.read_text() == text


def test_racing_processes_never_exceed_the_cap(tmp_path: Path) -> None:
    ctx = mp.get_context("fork")
    start, release, results = ctx.Event(), ctx.Event(), ctx.Queue()
    procs = [
        ctx.Process(target=race_for_lease, args=(str(tmp_path), "c1", start, results, release))
        for _ in range(5)
    ]
    for p in procs:
        p.start()
    start.set()
    outcomes = sorted(results.get(timeout=30) for _ in procs)
    assert outcomes == ["ok", "ok", "refused", "refused", "refused"]
    assert SelectionLeases(tmp_path, run_id="x").pending({"c1"}) == 2
    release.set()
    for p in procs:
        p.join(30)
        assert p.exitcode == 0
    deadline = time.monotonic() + 10
    while SelectionLeases(tmp_path, run_id="x").pending({"c1"}) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert SelectionLeases(tmp_path, run_id="x").pending({"c1"}) == 0  # holders exited


def test_concurrent_writers_lose_no_lease(tmp_path: Path) -> None:
    ctx = mp.get_context("fork")
    start, stop, done = ctx.Event(), ctx.Event(), ctx.Semaphore(0)
    procs = [
        ctx.Process(target=churn_leases, args=(str(tmp_path), tag, 20, start, done, stop))
        for tag in ("p", "q")
    ]
    for p in procs:
        p.start()
    start.set()
    for _ in procs:
        assert done.acquire(timeout=60)
    try:  # the writers are still alive, so nothing is reclaimed
        held = SelectionLeases(tmp_path, run_id="x").active()
        cards = sorted(lease.card_id for lease in held)
        assert cards == sorted(f"{t}-{i}" for t in ("p", "q") for i in range(0, 20, 2))
    finally:
        stop.set()
        for p in procs:
            p.join(30)
    assert all(p.exitcode == 0 for p in procs)


@pytest.mark.parametrize("left", [b"", b"\0" * 300])
def test_a_file_a_power_loss_left_blank_holds_no_leases(tmp_path: Path, left: bytes) -> None:
    """Changes are not fsynced: a power loss can leave the file empty or zero-filled (every
    lease in it died with the power); it reads as no leases and the next change rewrites it."""
    (tmp_path / LEASE_FILE).write_bytes(left)
    leases = SelectionLeases(tmp_path, run_id="r")
    assert leases.active() == ()
    held = leases.acquire("c1", [], attempt=0)
    assert SelectionLeases(tmp_path, run_id="r").active() == (held,)


def test_the_file_is_the_json_of_its_leases_byte_for_byte(tmp_path: Path) -> None:
    """Each write renders the file from per-lease blocks encoded once: the text is
    ``json.dumps`` of the whole lease file (indent 2, sorted keys), for 0, 1 and many
    leases, aliases and releases included."""
    from gigaevo.memory.v2.read.leases import LEASE_FORMAT, LeaseFile
    from gigaevo.memory.v2.records import to_json

    leases = SelectionLeases(tmp_path, run_id="r", max_pending=3)
    path = tmp_path / LEASE_FILE
    held = []
    for attempt in range(7):
        held.append(leases.acquire(f"c{attempt % 3}", [f"a{attempt}", "b"][: attempt % 3], attempt))
        if attempt % 3 == 2:
            leases.release(held.pop(0).lease_id)
        body = to_json(LeaseFile(format=LEASE_FORMAT, leases=tuple(leases.active())))
        assert path.read_text() == json.dumps(body, indent=2, sort_keys=True) + "\n"
    for lease in held:
        leases.release(lease.lease_id)
    assert json.loads(path.read_text()) == {"format": LEASE_FORMAT, "leases": []}
    assert path.read_text() == json.dumps({"format": 1, "leases": []}, indent=2) + "\n"


def test_a_read_of_another_process_s_write_is_parsed_again(tmp_path: Path) -> None:
    """The parse of the bytes last seen is reused only for those very bytes: a lease
    another instance (another process) wrote is seen at the next read."""
    mine = SelectionLeases(tmp_path, run_id="r")
    other = SelectionLeases(tmp_path, run_id="s")
    first = mine.acquire("c1", [], attempt=0)
    assert mine.active() == (first,)
    second = other.acquire("c1", [], attempt=0)
    assert mine.active() == (first, second) and mine.pending({"c1"}) == 2
    with pytest.raises(LeaseCapReachedError):
        mine.acquire("c1", [], attempt=1)
    other.release(second.lease_id)
    assert mine.active() == (first,)
