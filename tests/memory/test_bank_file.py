"""cards.json: canonical layout, cheap header, hand-formatted files, corrupt banks untouched."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gigaevo.memory.v2 import CorruptBankError, LocalMemoryStore
from gigaevo.memory.v2.bank.bankfile import FORMAT, read_bank, read_header
from tests.memory.helpers import open_store
from tests.memory.test_card_model import card


def _fill(store: LocalMemoryStore, n: int) -> None:
    for i in range(n):
        c = card(
            id=f"ins-{i:012d}", description=f"When case {i} holds, try action {i} because {i}."
        )
        store.transaction(lambda cards, c=c: cards.__setitem__(c.id, c))


def test_layout_is_one_json_document_with_a_header_line(store: LocalMemoryStore) -> None:
    _fill(store, 3)
    text = store.path.read_text()
    lines = text.split("\n")
    assert lines[0].startswith(f'{{"format":"{FORMAT}","generation":3,')
    assert len(lines) == 3 + 3  # header, 3 cards, "]}", ""
    data = json.loads(text)
    assert data["n_cards"] == 3 and data["cards"][0]["id"] == "ins-000000000000"
    assert read_header(store.path).generation == 3


def test_a_missing_bank_is_empty_and_is_not_created_by_opening(bank: Path) -> None:
    store = open_store(bank)
    assert len(store) == 0 and store.generation == 0
    assert not store.path.exists()
    assert (bank / "cards.json.lock").exists()


def test_a_hand_reformatted_bank_still_loads(store: LocalMemoryStore, bank: Path) -> None:
    _fill(store, 2)
    data = json.loads(store.path.read_text())
    store.path.write_text(json.dumps(data, indent=4))
    reopened = open_store(bank)
    assert sorted(c.id for c in reopened.cards()) == ["ins-000000000000", "ins-000000000001"]
    assert read_header(store.path).generation == 2


@pytest.mark.parametrize(
    "damage",
    [
        lambda t: t[: len(t) // 2],  # truncated
        lambda t: "",  # emptied
        lambda t: t.replace('"kind":"insight"', '"kind":"note"', 1),  # bad value
        lambda t: t.replace('"aliases":[]', '"aliases":[],"keywords":[]', 1),  # unknown key
        lambda t: t.replace(FORMAT, "other/9"),  # foreign format
        lambda t: t.replace("ins-000000000001", "ins-000000000000"),  # duplicate id
        lambda t: "\xff\xfe" + t,  # not UTF-8 text after the write below
    ],
)
def test_a_corrupt_bank_stops_with_a_named_error_and_is_never_overwritten(
    bank: Path, damage: object
) -> None:
    store = open_store(bank)
    _fill(store, 2)
    damaged = damage(store.path.read_text())  # type: ignore[operator]
    store.path.write_bytes(
        damaged.encode("latin-1") if damaged.startswith("\xff") else damaged.encode()
    )
    before = store.path.read_bytes()
    with pytest.raises(CorruptBankError, match="is not a readable card bank") as info:
        open_store(bank)
    assert "\n" not in str(info.value) and "left untouched" in str(info.value)
    with pytest.raises(CorruptBankError):
        store.refresh()
    c = card(id="ins-999999999999")
    with pytest.raises(CorruptBankError):
        store.transaction(lambda cards: cards.__setitem__(c.id, c))
    with pytest.raises(CorruptBankError):  # latched: the store never writes again
        store.refresh()
    assert store.path.read_bytes() == before


def test_damage_behind_an_unchanged_header_is_caught_before_a_write(
    store: LocalMemoryStore,
) -> None:
    _fill(store, 2)
    text = store.path.read_text()
    first, rest = text.split("\n", 1)
    store.path.write_text(first + "\n" + rest.replace('"revision":1', '"revision":"x"', 1))
    c = card(id="ins-999999999999")
    with pytest.raises(CorruptBankError):
        store.transaction(lambda cards: cards.__setitem__(c.id, c))


def test_unchanged_lines_are_reused_on_reread(store: LocalMemoryStore, bank: Path) -> None:
    _fill(store, 3)
    loaded = read_bank(store.path)
    again = read_bank(store.path, loaded.lines)
    assert all(a is b for a, b in zip(loaded.cards, again.cards, strict=True))
