"""The small readers behind the loaders: overrides and flattening."""

from __future__ import annotations

from gigaevo.analysis._files import flatten, parse_overrides


def test_overrides_are_parsed_as_yaml_scalars() -> None:
    parsed = parse_overrides(["seed=3", "+x.y=a b", "~memory", "lr=1e-3", "ok=true", "l=[1,2]"])
    assert parsed == {
        "seed": 3,
        "x.y": "a b",
        "memory": None,
        "lr": 0.001,
        "ok": True,
        "l": [1, 2],
    }


def test_flatten_dots_nested_keys_and_keeps_empty_dicts() -> None:
    assert flatten({"a": {"b": 1, "c": {}}, "d": 2}) == {"a.b": 1, "a.c": {}, "d": 2}
