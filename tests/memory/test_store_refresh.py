"""LocalMemoryStore: cheap change detection, index refresh, no lost updates, scoped search."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from gigaevo.memory.v2 import LocalMemoryStore
from gigaevo.memory.v2.bank.cards import pool_into
from tests.memory.helpers import open_store
from tests.memory.test_card_model import card, evidence


def _put(store: LocalMemoryStore, **changes: object) -> None:
    c = card(**changes)
    store.transaction(lambda cards: cards.__setitem__(c.id, c))


def test_refresh_costs_nothing_when_nobody_wrote(store: LocalMemoryStore) -> None:
    _put(store, id="ins-a")
    reloads = store.stats.reloads
    assert store.refresh() is False
    assert store.stats.reloads == reloads


def test_refresh_sees_another_writer_and_updates_the_index(bank: Path) -> None:
    reader, writer = open_store(bank), open_store(bank)
    assert reader.search("loop bound", kind="insight", task_key="toy", k=3) == []
    _put(
        writer,
        id="ins-loop",
        description="When a range() loop fixes the count, try to move its bound "
        "(tactic: change_loop_bounds) because counts matter.",
    )
    assert reader.refresh() is True
    hits = reader.search("move the loop bound", kind="insight", task_key="toy", k=3)
    assert [c.id for c, _ in hits] == ["ins-loop"]
    writer.transaction(lambda cards: cards.pop("ins-loop"))
    assert reader.refresh() is True
    assert reader.search("move the loop bound", kind="insight", task_key="toy", k=3) == []


def test_a_transaction_builds_on_the_newest_bank(bank: Path) -> None:
    a, b = open_store(bank), open_store(bank)
    _put(a, id="ins-a")
    _put(b, id="ins-b")  # b never refreshed: the transaction re-reads under the lock
    assert sorted(c.id for c in open_store(bank).cards()) == ["ins-a", "ins-b"]
    # pooling through a stale instance does not lose the other's pooled evidence
    a.transaction(
        lambda cards: cards.update({"ins-b": pool_into(cards["ins-b"], evidence(1), (), 2.0)})
    )
    b.transaction(
        lambda cards: cards.update({"ins-b": pool_into(cards["ins-b"], evidence(2), (), 3.0)})
    )
    final = open_store(bank).get("ins-b")
    assert final is not None and final.n_evidence == 3 and final.revision == 3


def test_a_transaction_that_changes_nothing_writes_nothing(store: LocalMemoryStore) -> None:
    _put(store, id="ins-a")
    generation = store.generation
    store.transaction(lambda cards: None)
    assert store.generation == generation and store.stats.writes == 1


def test_a_failing_mutation_writes_nothing(store: LocalMemoryStore) -> None:
    _put(store, id="ins-a")
    before = store.path.read_bytes()

    def broken(cards: dict) -> None:
        cards.pop("ins-a")
        raise KeyError("boom")

    with pytest.raises(KeyError):
        store.transaction(broken)
    assert store.path.read_bytes() == before and "ins-a" in store


def test_orphaned_temp_files_are_removed_on_open(bank: Path) -> None:
    open_store(bank)
    orphan = bank / ".cards.json.abc123.tmp"
    orphan.write_text("half a bank")
    open_store(bank)
    assert not orphan.exists()


def test_search_respects_kind_and_task_scope(store: LocalMemoryStore) -> None:
    _put(store, id="ins-toy")
    _put(store, id="ins-other", task_key="other")
    _put(
        store,
        id="prg-toy",
        kind="program",
        representatives=(),
    )
    query = card().brief
    task_hits = store.search(query, kind="insight", task_key="toy", k=5)
    assert [c.id for c, _ in task_hits] == ["ins-toy"]
    bank_hits = store.search(query, kind="insight", task_key=None, k=5)
    assert sorted(c.id for c, _ in bank_hits) == ["ins-other", "ins-toy"]
    assert [c.id for c, _ in store.search(query, kind="program", task_key="toy", k=5)] == [
        "prg-toy"
    ]
    assert bank_hits[0][1] >= 0.999  # the same brief: cosine 1


def test_a_new_revision_with_the_same_text_keeps_its_vector(store: LocalMemoryStore) -> None:
    _put(store, id="ins-a")
    embedded = store.stats.embedded
    store.transaction(
        lambda cards: cards.update({"ins-a": replace(cards["ins-a"], revision=2, updated_at=9.0)})
    )
    assert store.stats.embedded == embedded


def test_the_cards_version_moves_exactly_when_the_loaded_cards_change(bank: Path) -> None:
    """``cards_version`` (issue 16: the reader keeps its bank view while it stands) moves on
    this process's write and on another writer's once refreshed, not on a refresh or a
    transaction that changes nothing; while it stands ``cards`` lists the same objects."""
    reader, writer = open_store(bank), open_store(bank)
    _put(writer, id="ins-a")
    v0 = reader.cards_version
    assert reader.refresh() is True and reader.cards_version > v0
    v1 = reader.cards_version
    listed = reader.cards()
    assert reader.refresh() is False and reader.cards_version == v1
    reader.transaction(lambda cards: None)  # nothing changed: nothing written
    assert reader.cards_version == v1
    assert all(a is b for a, b in zip(reader.cards(), listed, strict=True))
    _put(reader, id="ins-b")
    v2 = reader.cards_version
    assert v2 > v1 and [c.id for c in reader.cards()] == ["ins-a", "ins-b"]
    writer.refresh()
    writer.transaction(lambda cards: cards.pop("ins-a"))
    assert reader.cards_version == v2  # not seen before a refresh
    assert reader.refresh() is True and reader.cards_version > v2
    assert [c.id for c in reader.cards()] == ["ins-b"]
