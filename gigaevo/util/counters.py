"""Counters that add up across a run's sessions (a resumed run continues its totals)."""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from typing import Any

_MISSING = object()


def add_counters(
    earlier: Mapping[str, Any] | None, now: Mapping[str, Any], counters: Iterable[str]
) -> dict[str, Any]:
    """``now`` with every counter increased by its value in ``earlier``.

    Args:
        earlier: the totals of the earlier sessions (None: this is the first).
        now: this session's figures.
        counters: dotted paths of the counters; a path naming a mapping adds it
            up key by key. Every other field of ``now`` is kept as it is (it
            describes the state now, not something counted).
    """
    out = copy.deepcopy(dict(now))
    if not earlier:
        return out
    for path in counters:
        keys = path.split(".")
        before, after = _get(earlier, keys), _get(out, keys)
        if before is not _MISSING and after is not _MISSING:
            _set(out, keys, _add(before, after))
    return out


def _get(node: Any, keys: list[str]) -> Any:
    for key in keys:
        if not isinstance(node, Mapping) or key not in node:
            return _MISSING
        node = node[key]
    return node


def _set(node: dict[str, Any], keys: list[str], value: Any) -> None:
    for key in keys[:-1]:
        node = node[key]
    node[keys[-1]] = value


def _add(before: Any, after: Any) -> Any:
    if isinstance(before, Mapping) and isinstance(after, Mapping):
        keys = sorted({*before, *after})
        return {k: _add(before.get(k, 0), after.get(k, 0)) for k in keys}
    numbers = (int, float)
    if isinstance(before, bool) or isinstance(after, bool):
        return after
    if isinstance(before, numbers) and isinstance(after, numbers):
        total = before + after
        return round(total, 6) if isinstance(total, float) else total
    return after
