"""Tolerant readers for a run's files (missing or torn files never raise), all read-only."""

from __future__ import annotations

import json
import re
import warnings
from pathlib import Path
from typing import Any

import yaml


class PartialRunWarning(UserWarning):
    """A run file was only partly readable (a torn last line, bad JSON); what parsed was kept."""


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """The JSON objects of a JSONL file, one per line.

    A missing file gives ``[]``. A line that does not parse (typically the last
    one of a run still writing, or killed mid-write) is skipped with a
    ``PartialRunWarning`` naming the file and line.
    """
    if not path.is_file():
        return []
    rows: list[dict[str, Any]] = []
    bad: list[int] = []
    with path.open(encoding="utf-8", errors="replace") as fh:
        for n, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                bad.append(n)
                continue
            if isinstance(row, dict):
                rows.append(row)
            else:
                bad.append(n)
    if bad:
        shown = ", ".join(str(n) for n in bad[:5]) + (" ..." if len(bad) > 5 else "")
        warnings.warn(
            f"{path}: skipped {len(bad)} unreadable line(s) ({shown})",
            PartialRunWarning,
            stacklevel=2,
        )
    return rows


def read_json(path: Path) -> Any:
    """The parsed JSON file, or None when it is missing or unreadable (with a warning)."""
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError, OSError) as exc:
        warnings.warn(f"{path}: not readable JSON ({exc})", PartialRunWarning, stacklevel=2)
        return None


def read_yaml(path: Path) -> Any:
    """The parsed YAML file, or None when it is missing or unreadable (with a warning)."""
    if not path.is_file():
        return None
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError, OSError) as exc:
        warnings.warn(f"{path}: not readable YAML ({exc})", PartialRunWarning, stacklevel=2)
        return None


def flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested dicts flattened to dotted keys (``{"a": {"b": 1}}`` -> ``{"a.b": 1}``)."""
    out: dict[str, Any] = {}
    for key, value in d.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            out.update(flatten(value, f"{name}."))
        else:
            out[name] = value
    return out


_NUMBER = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?")


def _scalar(text: str) -> Any:
    """A YAML scalar, with ``1e-3`` read as a float (as Hydra does; YAML 1.1 says str)."""
    if _NUMBER.fullmatch(text.strip()) and not text.strip().lstrip("+-").isdigit():
        return float(text)
    try:
        return yaml.safe_load(text) if text else text
    except yaml.YAMLError:
        return text


def parse_overrides(items: list[str]) -> dict[str, Any]:
    """Hydra override strings (``seed=1``, ``+x=y``, ``~z``) as ``{key: value}``.

    Values are parsed as YAML scalars (``seed=1`` gives the int 1); a deletion
    (``~key``) gives None.
    """
    out: dict[str, Any] = {}
    for item in items:
        text = str(item)
        if text.startswith("~"):
            out[text[1:].split("=", 1)[0]] = None
            continue
        key, _, value = text.lstrip("+").partition("=")
        out[key] = _scalar(value)
    return out
