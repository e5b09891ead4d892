"""Card revisions go to ``cards.records.jsonl`` once ``cards.json`` is large (issue 16.3).

A write appends the changed records as one line instead of rewriting the bank;
``cards.json`` is compacted once the journal outgrows it; readers (the store, ``read_bank``,
the analysis loader) see the same bank either way; a line torn by a kill, or left by a
compaction killed halfway, is ignored and cut; four processes writing records and stamps
at once lose nothing; a SIGKILL at any instant loses no acknowledged write.
"""

from __future__ import annotations

import json
import multiprocessing
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from gigaevo.analysis.ledgers import load_cards
from gigaevo.analysis.ledgers import read_bank as read_bank_dicts
from gigaevo.memory.v2 import CorruptBankError, LocalMemoryStore, read_bank
from gigaevo.memory.v2.bank.bankfile import card_line
from gigaevo.memory.v2.bank.cards import Card, UseTrial, pool_into
from gigaevo.memory.v2.bank.recordjournal import RECORDS_FILE, RUN_JOURNAL_FROM_BYTES
from gigaevo.memory.v2.bank.store import BANK_FILE
from gigaevo.memory.v2.read.trials import stamp_trial
from gigaevo.memory.v2.records import to_json
from tests.conftest import ROOT
from tests.memory.helpers import memory_provider, open_store, result
from tests.memory.test_card_model import card

WRITERS = 4


def _card(cid: str) -> Card:
    base = card()
    return replace(base, id=cid, task_key="toy", description=f"{base.description} ({cid})")


def _journaling(bank: Path, **kwargs: Any) -> LocalMemoryStore:
    store = open_store(bank, **kwargs)
    store.journal_from_bytes = 0  # journal at any size (the default waits for 64 KiB)
    return store


def _seeded(bank: Path, n: int = 20) -> LocalMemoryStore:
    store = _journaling(bank)
    store.transaction(lambda w: w.update({f"ins-{i:03d}": _card(f"ins-{i:03d}") for i in range(n)}))
    return store


def _pool(store: LocalMemoryStore, cid: str, tag: str) -> None:
    ev = card().evidence[0]
    store.transaction(lambda w: w.update({cid: pool_into(w[cid], ev, (tag,), 1.0)}))


def _same_bank(store: LocalMemoryStore, bank: Path) -> None:
    """The store, a fresh process's view, ``read_bank`` and the analysis loader agree."""
    want = [to_json(c) for c in store.cards()]
    assert [to_json(c) for c in read_bank(bank / BANK_FILE).cards] == want
    assert [to_json(c) for c in open_store(bank).cards()] == want
    header, dicts = read_bank_dicts(bank)
    assert header["generation"] == store.generation and header["n_cards"] == len(want)
    assert dicts == [{**w, "use_trials": []} for w in want]  # records: trials are apart


def test_a_card_write_appends_one_line_and_leaves_cards_json_alone(tmp_path: Path) -> None:
    store = _seeded(tmp_path)
    before = (tmp_path / BANK_FILE).read_bytes()
    _pool(store, "ins-003", "p1")
    new = _card("ins-new")
    store.transaction(lambda w: (w.update({new.id: new}), w.pop("ins-007")))
    assert (tmp_path / BANK_FILE).read_bytes() == before  # not rewritten: O(what changed)
    lines = (tmp_path / RECORDS_FILE).read_text().splitlines()
    assert len(lines) == 2  # one line per transaction
    assert [c["id"] for c in json.loads(lines[1])["set"]] == ["ins-new"]
    assert json.loads(lines[1])["removed"] == ["ins-007"]
    assert store.generation == 3 and store.stats.journaled == 2
    ids = [c.id for c in store.cards()]
    assert ids[-1] == "ins-new" and "ins-007" not in ids and len(ids) == 20
    _same_bank(store, tmp_path)
    assert load_cards(tmp_path).set_index("id").loc["ins-003", "n_evidence"] == 2


def test_another_process_sees_journaled_writes_incrementally(tmp_path: Path) -> None:
    writer = _seeded(tmp_path)
    reader = open_store(tmp_path)
    reloads, embedded = reader.stats.reloads, reader.stats.embedded
    _pool(writer, "ins-001", "p1")
    assert reader.refresh()  # it changed
    assert reader.get("ins-001") == writer.get("ins-001")
    assert reader.stats.reloads == reloads  # new lines only, not a reload
    assert reader.stats.embedded == embedded  # same text: the vector is kept
    assert reader.generation == writer.generation
    # and a write from the reader lands on the writer's lines
    _pool(reader, "ins-002", "p2")
    writer.refresh()
    assert writer.get("ins-002") == reader.get("ins-002")
    assert not reader.refresh()


def test_the_journal_is_compacted_once_it_outgrows_cards_json(tmp_path: Path) -> None:
    store = _seeded(tmp_path)
    size = (tmp_path / BANK_FILE).stat().st_size
    for i in range(60):
        _pool(store, f"ins-{i % 20:03d}", f"p{i}")
        assert (tmp_path / RECORDS_FILE).stat().st_size <= (tmp_path / BANK_FILE).stat().st_size
    assert store.stats.compactions >= 2 and store.stats.journaled >= 50
    assert (tmp_path / BANK_FILE).stat().st_size > size
    _same_bank(store, tmp_path)
    assert sum(c.n_evidence for c in store.cards()) == 20 + 60


def test_a_write_that_reorders_the_cards_rewrites_cards_json(tmp_path: Path) -> None:
    store = _seeded(tmp_path, 3)
    compactions = store.stats.compactions

    def move_first_last(w: dict[str, Card]) -> None:
        first = w.pop("ins-000")
        w["ins-000"] = replace(first, revision=first.revision + 1)

    store.transaction(move_first_last)
    assert store.stats.compactions == compactions + 1
    assert [c.id for c in read_bank(tmp_path / BANK_FILE).cards] == [
        "ins-001",
        "ins-002",
        "ins-000",
    ]


def test_a_small_bank_is_rewritten_whole_as_before(tmp_path: Path) -> None:
    store = open_store(tmp_path)  # the default threshold: 64 KiB
    store.transaction(lambda w: w.update({"ins-a": _card("ins-a")}))
    _pool(store, "ins-a", "p1")
    assert not (tmp_path / RECORDS_FILE).exists() and store.stats.compactions == 2
    assert json.loads((tmp_path / BANK_FILE).read_text())["cards"][0]["n_evidence"] == 2


def test_a_line_torn_by_a_kill_is_ignored_then_cut(tmp_path: Path) -> None:
    store = _seeded(tmp_path)
    _pool(store, "ins-001", "p1")
    good = (tmp_path / RECORDS_FILE).read_bytes()
    with open(tmp_path / RECORDS_FILE, "ab") as f:
        f.write(good[: len(good) // 2])  # half a transaction, no newline
    fresh = _journaling(tmp_path)
    assert fresh.get("ins-001") == store.get("ins-001")
    _pool(fresh, "ins-002", "p2")
    lines = (tmp_path / RECORDS_FILE).read_text().splitlines()
    assert len(lines) == 2 and all(json.loads(ln) for ln in lines)
    store.refresh()
    _same_bank(store, tmp_path)


def test_lines_left_by_a_compaction_killed_halfway_are_ignored_then_cut(tmp_path: Path) -> None:
    store = _seeded(tmp_path)
    _pool(store, "ins-001", "p1")
    old_lines = (tmp_path / RECORDS_FILE).read_bytes()
    store.journal_from_bytes = 10**9  # the next write compacts (rewrites cards.json)
    _pool(store, "ins-002", "p2")
    assert (tmp_path / RECORDS_FILE).read_bytes() == b""
    # a kill between the new cards.json and emptying the journal leaves the old lines
    (tmp_path / RECORDS_FILE).write_bytes(old_lines)
    fresh = _journaling(tmp_path)
    _same_bank(store, tmp_path)  # the old lines name the old base: ignored
    _pool(fresh, "ins-003", "p3")
    lines = (tmp_path / RECORDS_FILE).read_text().splitlines()
    assert len(lines) == 1 and json.loads(lines[0])["set"][0]["id"] == "ins-003"
    store.refresh()
    _same_bank(store, tmp_path)
    assert sum(c.n_evidence for c in store.cards()) == 20 + 3


def test_a_journal_line_that_does_not_parse_stops_the_bank(tmp_path: Path) -> None:
    store = _seeded(tmp_path)
    _pool(store, "ins-001", "p1")
    path = tmp_path / RECORDS_FILE
    path.write_text(path.read_text().replace('"kind":"insight"', '"kind":"note"', 1))
    before = path.read_bytes()
    with pytest.raises(CorruptBankError, match="is not a card revision") as info:
        open_store(tmp_path)
    assert "\n" not in str(info.value) and "left untouched" in str(info.value)
    with pytest.raises(CorruptBankError):
        store.refresh()
    with pytest.raises(CorruptBankError):  # latched: the store never writes again
        _pool(store, "ins-002", "p2")
    assert path.read_bytes() == before


def test_a_bank_written_before_the_journal_opens_and_journals_its_next_write(
    tmp_path: Path,
) -> None:
    cards = [_card(f"ins-{i:03d}") for i in range(5)]
    head = {"format": "gigaevo.cards/1", "generation": 4, "write_id": "ab", "written_at": "t"}
    text = json.dumps({**head, "n_cards": 5}, separators=(",", ":"))[:-1]
    body = ",\n".join(card_line(c) for c in cards)
    (tmp_path / BANK_FILE).write_text(text + ',"cards":[\n' + body + "\n]}\n")
    before = (tmp_path / BANK_FILE).read_bytes()
    store = _journaling(tmp_path)
    _pool(store, "ins-002", "p1")
    assert (tmp_path / BANK_FILE).read_bytes() == before and store.generation == 5
    _same_bank(store, tmp_path)


def _stamp_worker(bank: str, run: str, n: int, start: Any) -> None:
    store = _journaling(Path(bank), lock_timeout_s=180.0)
    start.wait()
    for i in range(n):
        trial = UseTrial(f"{run}-d{i}", run, "toy", i % 2, i % 3 == 0)
        assert stamp_trial(store, ("ins-000", "ins-001")[i % 2], trial) == "stamped"


def _record_worker(bank: str, run: str, n: int, start: Any) -> None:
    """Pools outcomes into the cards and admits new ones while the others stamp."""
    store = _journaling(Path(bank), lock_timeout_s=180.0)
    start.wait()
    for i in range(n):
        _pool(store, f"ins-{i % 4:03d}", f"{run}-p{i}")
        new = _card(f"ins-{run}-{i}")
        store.transaction(lambda w, c=new: w.update({c.id: c}))


def _run_writers(procs: list[Any], bank: Path) -> tuple[Any, dict[str, Any], list[str]]:
    """Start the writer processes, wait for each to exit cleanly, and read the bank back:
    (the bank, its cards by id, the decision ids of every use trial stamped on them)."""
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=240)
        assert p.exitcode == 0
    loaded = read_bank(bank / BANK_FILE)
    cards = {c.id: c for c in loaded.cards}
    return loaded, cards, [t.decision_id for c in cards.values() for t in c.use_trials]


@pytest.mark.slow  # processes: seconds, not milliseconds
def test_four_processes_writing_records_and_stamps_lose_nothing(tmp_path: Path) -> None:
    _seeded(tmp_path, 4)
    ctx = multiprocessing.get_context("spawn")
    n, pools = 16, 12
    start = ctx.Barrier(WRITERS + 1)
    procs = [
        ctx.Process(target=_stamp_worker, args=(str(tmp_path), f"run-{k}", n, start))
        for k in range(WRITERS // 2)
    ]
    procs += [
        ctx.Process(target=_record_worker, args=(str(tmp_path), f"rec-{k}", pools, start))
        for k in range(WRITERS // 2)
    ]
    procs.append(ctx.Process(target=start.wait))
    loaded, cards, ids = _run_writers(procs, tmp_path)
    assert len(ids) == len(set(ids)) == WRITERS // 2 * n  # every stamp, exactly once
    seeds = [cards[f"ins-{i:03d}"] for i in range(4)]
    assert sum(c.n_evidence for c in seeds) == 4 + WRITERS // 2 * pools  # every pool
    assert {f"ins-rec-{k}-{i}" for k in range(2) for i in range(pools)} <= cards.keys()
    assert loaded.header.n_cards == len(cards) == 4 + WRITERS // 2 * pools
    assert (tmp_path / RECORDS_FILE).stat().st_size > 0  # the journal was in use


def test_sigkill_at_any_instant_loses_no_acknowledged_write(tmp_path: Path) -> None:
    """A writer revising and adding cards prints each generation once it returned; after a
    SIGKILL every printed write is in the bank, which parses, and a new writer goes on."""
    rng = np.random.default_rng(1)
    seen: set[str] = set()
    for _ in range(3):
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.memory.test_record_journal", str(tmp_path)],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert proc.stdout is not None
        # two writes acknowledged before the kill, however slow a loaded machine makes them
        # (a fixed window after the first one saw no second write at load 37), then the
        # kill at a random instant of the writes that follow
        acknowledged = [proc.stdout.readline() for _ in range(2)]
        assert all(a.endswith("\n") for a in acknowledged)  # the writer was still writing
        time.sleep(float(rng.uniform(0.05, 0.3)))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        acknowledged += proc.stdout.read().splitlines()
        acknowledged = [a.strip() for a in acknowledged if a.strip()]
        store = open_store(tmp_path)
        cards = {c.id: c for c in store.cards()}
        for entry in acknowledged:  # "<new card id> <pooled card id> <its n_evidence>"
            new, pooled, n_evidence = entry.split()
            assert new in cards and cards[pooled].n_evidence >= int(n_evidence)
        seen.update(a.split()[0] for a in acknowledged)
        assert seen <= cards.keys()
        assert read_bank(tmp_path / BANK_FILE).header.n_cards == len(cards)
    assert open_store(tmp_path).stats.reloads == 1


SEED = [f"ins-{i:03d}" for i in range(8)]


def _churn(bank: str) -> None:
    store = _journaling(Path(bank))
    if not len(store):
        store.transaction(
            lambda w: w.update({f"ins-{i:03d}": _card(f"ins-{i:03d}") for i in range(8)})
        )
    i = len(store)
    while True:
        new = _card(f"ins-k{i:06d}")
        store.transaction(lambda w, c=new: w.update({c.id: c}))
        pooled = f"ins-{i % 8:03d}"
        _pool(store, pooled, f"k{i}")
        got = store.get(pooled)
        assert got is not None
        print(new.id, pooled, got.n_evidence, flush=True)
        i += 1


if __name__ == "__main__":
    _churn(sys.argv[1])


def _run_store(bank: Path, **kwargs: Any) -> LocalMemoryStore:
    """A store as a run opens it (every write journaled; ``compact`` at its end), with a
    small compaction floor so that compactions also happen under contention."""
    return open_store(
        bank, journal_from_bytes=RUN_JOURNAL_FROM_BYTES, compact_from_bytes=4096, **kwargs
    )


def test_a_run_journals_a_small_bank_and_leaves_it_whole_at_close(tmp_path: Path) -> None:
    """A run's store does not rewrite a small ``cards.json`` on every write (issue 16.3: a
    rewrite, fsync, replace and directory fsync per pooled outcome); the provider compacts at
    close, so the plain JSON of ``cards.json`` alone is the whole bank after the run."""
    memory = memory_provider(tmp_path)
    for a in range(16):
        memory.observe(result(a, tactic=("perturb_constants", "crossover")[a % 2], scope="f0"))
    store = memory.store
    assert store.journal_from_bytes == RUN_JOURNAL_FROM_BYTES
    assert store.stats.writes >= 10 and store.stats.journaled >= store.stats.writes - 2
    assert (store.bank_dir / RECORDS_FILE).stat().st_size > 0  # mid-run: the journal holds them
    want = [to_json(replace(c, use_trials=())) for c in store.cards()]
    generation = store.generation
    memory.close()
    plain = json.loads((store.bank_dir / BANK_FILE).read_text())
    assert plain["cards"] == want and plain["generation"] == generation
    assert plain["n_cards"] == len(want) and (store.bank_dir / RECORDS_FILE).stat().st_size == 0
    assert [to_json(replace(c, use_trials=())) for c in open_store(store.bank_dir).cards()] == want
    assert not store.compact()  # nothing left to fold


def _run_worker(bank: str, run: str, n: int, start: Any) -> None:
    """Stamps, pools and admits through a run's store, then compacts as a run's close does."""
    store = _run_store(Path(bank), lock_timeout_s=180.0)
    start.wait()
    for i in range(n):
        _pool(store, f"ins-{i % 4:03d}", f"{run}-p{i}")
        trial = UseTrial(f"{run}-d{i}", run, "toy", i % 2, i % 3 == 0)
        assert stamp_trial(store, ("ins-000", "ins-001")[i % 2], trial) == "stamped"
        new = _card(f"ins-{run}-{i}")
        store.transaction(lambda w, c=new: w.update({c.id: c}))
    store.compact()


@pytest.mark.slow  # processes: seconds, not milliseconds
def test_four_run_stores_journaling_and_compacting_lose_nothing(tmp_path: Path) -> None:
    """Four processes write through run stores (journaled small bank, compactions on the way
    and at the end) at once: every pool, stamp and card lands once, and after the last
    close the plain ``cards.json`` is the whole bank."""
    _run_store(tmp_path).transaction(
        lambda w: w.update({f"ins-{i:03d}": _card(f"ins-{i:03d}") for i in range(4)})
    )
    ctx = multiprocessing.get_context("spawn")
    n = 12
    start = ctx.Barrier(WRITERS + 1)
    procs = [
        ctx.Process(target=_run_worker, args=(str(tmp_path), f"run-{k}", n, start))
        for k in range(WRITERS)
    ]
    procs.append(ctx.Process(target=start.wait))
    loaded, cards, ids = _run_writers(procs, tmp_path)
    assert len(ids) == len(set(ids)) == WRITERS * n  # every stamp, exactly once
    assert sum(cards[f"ins-{i:03d}"].n_evidence for i in range(4)) == 4 + WRITERS * n
    assert loaded.header.n_cards == len(cards) == 4 + WRITERS * n
    assert (tmp_path / RECORDS_FILE).stat().st_size == 0  # the last close folded the journal
    plain = json.loads((tmp_path / BANK_FILE).read_text())
    assert [c["id"] for c in plain["cards"]] == list(cards)
    assert sum(c["n_evidence"] for c in plain["cards"][:4]) == 4 + WRITERS * n
