"""add_counters: counters add up across sessions, state fields keep their latest value."""

from __future__ import annotations

from gigaevo.util import add_counters


def test_counters_add_up_and_state_is_the_latest() -> None:
    earlier = {"n": 3, "secs": 0.25, "bank": {"writes": 2, "size": 10}, "why": {"a": 1}}
    now = {"n": 4, "secs": 0.5, "bank": {"writes": 1, "size": 12}, "why": {"b": 2}, "new": 1}
    total = add_counters(earlier, now, ["n", "secs", "bank.writes", "why", "absent"])
    assert total == {
        "n": 7,
        "secs": 0.75,
        "bank": {"writes": 3, "size": 12},
        "why": {"a": 1, "b": 2},
        "new": 1,
    }
    assert now["n"] == 4 and now["why"] == {"b": 2}  # the session's figures are not touched


def test_first_session_and_odd_values_are_kept() -> None:
    now = {"n": 1, "flag": True, "name": "x"}
    assert add_counters(None, now, ["n"]) == now
    assert add_counters({"flag": True, "name": "y"}, now, ["flag", "name"]) == now
