"""The optional search keys of ``problem.yaml``: ``descriptors`` and ``cascade``.

Each parser raises ``ProblemError`` with one line naming the file and key.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from gigaevo.problems.descriptors import Descriptor
from gigaevo.problems.spec import CascadeSpec, ProblemError

_CASCADE_KEYS = frozenset({"entry_function", "threshold", "timeout_s"})


def parse_descriptors(
    raw: dict[str, Any], metric_names: tuple[str, ...], path: Path
) -> tuple[Descriptor, ...]:
    """``descriptors:``, a list of descriptor mappings; ``()`` when absent.

    A ``metric`` descriptor must name the primary metric or one listed in
    ``metrics.extra`` (``metric_names``), so that the validator reports it.
    """
    items = raw.get("descriptors")
    if items is None:
        return ()
    if not isinstance(items, list) or not items:
        raise ProblemError(f"{path}: descriptors must be a non-empty list of mappings")
    out = []
    for i, item in enumerate(items):
        where = f"{path}: descriptors[{i}]"
        if not isinstance(item, dict):
            raise ProblemError(f"{where} must be a mapping (name, source, scale, bins, ...)")
        try:
            descriptor = Descriptor.from_mapping(item)
        except (TypeError, ValueError) as exc:
            raise ProblemError(f"{where}: {exc}") from exc
        if descriptor.source == "metric" and descriptor.name not in metric_names:
            raise ProblemError(
                f"{where}: metric {descriptor.name!r} is neither the primary metric nor "
                "listed in metrics.extra"
            )
        out.append(descriptor)
    names = [d.name for d in out]
    if len(set(names)) != len(names):
        raise ProblemError(f"{path}: descriptors repeat a name ({names})")
    return tuple(out)


def mapping_section(
    raw: dict[str, Any], key: str, allowed: frozenset[str], path: Path, hint: str = ""
) -> dict[str, Any] | None:
    """``raw[key]`` checked to be a mapping of ``allowed`` keys; None when absent."""
    section = raw.get(key)
    if section is None:
        return None
    if not isinstance(section, dict):
        raise ProblemError(f"{path}: {key} must be a mapping{hint}")
    unknown = sorted(str(k) for k in section if k not in allowed)
    if unknown:
        names = ", ".join(sorted(allowed))
        raise ProblemError(f"{path}: unknown key {key}.{unknown[0]} (allowed: {names})")
    return section


def parse_cascade(raw: dict[str, Any], path: Path) -> CascadeSpec | None:
    """``cascade:`` (entry_function, threshold, optional timeout_s); None when absent."""
    section = mapping_section(raw, "cascade", _CASCADE_KEYS, path, " (entry_function, threshold)")
    if section is None:
        return None
    entry = section.get("entry_function")
    if not isinstance(entry, str) or not entry.isidentifier():
        raise ProblemError(f"{path}: cascade.entry_function must be a Python identifier")
    threshold = _finite(section, "threshold", path)
    if threshold is None:
        raise ProblemError(f"{path}: cascade.threshold is missing")
    timeout = _finite(section, "timeout_s", path)
    if timeout is not None and timeout <= 0:
        raise ProblemError(f"{path}: cascade.timeout_s must be positive")
    return CascadeSpec(entry_function=entry, threshold=threshold, timeout_s=timeout)


def _finite(section: dict[str, Any], key: str, path: Path) -> float | None:
    value = section.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ProblemError(f"{path}: cascade.{key} must be a finite number")
    return float(value)
