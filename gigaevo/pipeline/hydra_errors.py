"""Hydra's and OmegaConf's own errors as one line naming the key, with the closest valid key.

``max_mutant=5`` -> ``max_mutant is not a key of the config (did you mean max_mutants?)``;
``llm=nope`` -> ``llm=nope: no such option (choose one of: ...)``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from hydra.errors import (
    ConfigCompositionException,
    HydraException,
    MissingConfigException,
    OverrideParseException,
)
from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from gigaevo.pipeline.options import did_you_mean

_OVERRIDE = re.compile(r"Could not (?:override|append to|delete from) ['\"]?([\w.\-/]+)")


def _first_line(text: str) -> str:
    lines = [ln.strip() for ln in str(text).splitlines() if ln.strip()]
    return lines[0] if lines else ""


def config_keys(config_dir: Path, overrides: list[str]) -> list[str]:
    """Every dotted key of the composed config (and the config groups), for suggestions.

    Composes with the command's group choices (``memory=none``), falling back to
    the defaults when they do not compose either.
    """
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    choices = [o for o in overrides if "=" in o and "." not in o.split("=", 1)[0]]
    choices = [o for o in choices if not o.startswith(("+", "~", "hydra"))]
    groups = sorted(p.name for p in config_dir.iterdir() if p.is_dir() and p.name != "hydra")
    for attempt in (choices, []):
        GlobalHydra.instance().clear()
        try:
            with initialize_config_dir(config_dir=str(config_dir), version_base="1.3"):
                cfg = compose("config", overrides=attempt)
        except Exception:
            continue
        return [*groups, *_flatten(cfg, "")]
    return groups


def _flatten(node: Any, prefix: str) -> list[str]:
    out: list[str] = []
    if isinstance(node, DictConfig):
        for key in node:
            full = f"{prefix}{key!s}"
            out.append(full)
            child = node._get_node(key)  # no resolution: interpolations stay unresolved
            if isinstance(child, (DictConfig, ListConfig)) and not OmegaConf.is_missing(node, key):
                out.extend(_flatten(child, f"{full}."))
    return out


def hydra_error_line(exc: BaseException, config_dir: Path, overrides: list[str]) -> str | None:
    """One line for a Hydra or OmegaConf error about the command line; None for anything else."""
    if isinstance(exc, MissingConfigException):
        return _missing_option(exc)
    if isinstance(exc, OverrideParseException):
        return f"{exc.override}: not a valid override ({_first_line(exc.message)})"
    if isinstance(exc, ConfigCompositionException):
        return _composition(exc, config_dir, overrides)
    if isinstance(exc, OmegaConfBaseException):
        return _omegaconf(exc)
    if isinstance(exc, HydraException):
        cause = exc.__cause__
        tail = f" ({_first_line(str(cause))})" if cause is not None else ""
        return f"{_first_line(str(exc))}{tail}"
    return None


def _missing_option(exc: MissingConfigException) -> str:
    missing = str(getattr(exc, "missing_cfg_file", "") or "")
    options = [str(o) for o in (getattr(exc, "options", None) or [])]
    if "/" in missing and options:
        group, name = missing.rsplit("/", 1)
        return (
            f"{group}={name}: no such option{did_you_mean(name, options)}; "
            f"choose one of: {', '.join(options)}"
        )
    return _first_line(str(exc))


def _composition(exc: ConfigCompositionException, config_dir: Path, overrides: list[str]) -> str:
    text = str(exc)
    cause = exc.__cause__
    key = getattr(cause, "full_key", None) or None
    found = _OVERRIDE.search(text)
    if key is None and found:
        key = found.group(1)
    detail = _first_line(str(cause)) if cause is not None else ""
    if key and ("not in struct" in detail or "not in struct" in text):
        near = did_you_mean(str(key), config_keys(config_dir, overrides))
        return f"{key} is not a key of the config{near}"
    if key and isinstance(cause, OmegaConfBaseException):
        return f"{key}: {detail}"
    first = _first_line(text)
    return f"{first} ({detail})" if detail and detail not in first else first


def _omegaconf(exc: OmegaConfBaseException) -> str:
    key = getattr(exc, "full_key", None)
    message = _first_line(str(exc))
    return f"{key}: {message}" if key else message
