"""Check a component's config node against the signature of its ``_target_``, naming the key.

A typo (``+llm.foo=1``), a word where a number belongs (``evaluator.timeout_s=abc``)
or a constructor's own refusal (``evaluator.memory_mb=-1``) becomes one
``ConfigError`` line naming the full key, with the closest valid key for a typo,
before the component is built.
"""

from __future__ import annotations

import difflib
import inspect
import types
import typing
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal, Union

from hydra.utils import get_object

# keys Hydra reads itself, never passed to the target
_HYDRA_KEYS = frozenset({"_target_", "_partial_", "_convert_", "_recursive_", "_args_"})
_KIND = {int: "an integer", float: "a number", bool: "true or false", str: "a string"}


class ConfigError(ValueError):
    """A configuration value is unusable; the message names the key."""


def closest(name: str, candidates: Iterable[str]) -> str | None:
    """The candidate most like ``name`` (a typo's intended key), or None when none is close."""
    found = difflib.get_close_matches(name, sorted(set(candidates)), n=1, cutoff=0.6)
    return found[0] if found else None


def did_you_mean(name: str, candidates: Iterable[str]) -> str:
    """`` (did you mean X?)`` for the closest candidate, or an empty string."""
    near = closest(name, candidates)
    return f" (did you mean {near}?)" if near else ""


def check_node(node: Any, key: str) -> None:
    """Check every option of a ``_target_`` node (and of nested ones) before it is built.

    Args:
        node: the node as plain containers (``OmegaConf.to_container(..., resolve=True)``).
        key: its dotted key in the run config, e.g. ``evaluator``.

    Raises:
        ConfigError: an unknown option (with the closest one) or a value of the wrong type.
    """
    if not isinstance(node, dict):
        return
    for name, value in node.items():
        if isinstance(value, dict):
            check_node(value, f"{key}.{name}")
    target = node.get("_target_")
    if not isinstance(target, str):
        return
    try:
        fn = get_object(target)
    except Exception as exc:  # an unknown class: Hydra's message names it
        raise ConfigError(f"{key}._target_: cannot import {target!r} ({exc})") from None
    params = _parameters(fn)
    if params is None:
        return
    hints = _hints(fn)
    for name, value in node.items():
        if name in _HYDRA_KEYS:
            continue
        if name not in params:
            hint = did_you_mean(name, params) or f" (options: {', '.join(sorted(params))})"
            raise ConfigError(f"{key}.{name} is not an option of {target.rsplit('.', 1)[-1]}{hint}")
        wanted = _describe_mismatch(hints.get(name), value)
        if wanted is not None:
            raise ConfigError(f"{key}.{name} must be {wanted}, got {value!r}")


@contextmanager
def naming(key: str, node: Any) -> Iterator[None]:
    """Turn a component's ``ValueError``/``TypeError`` at construction into a ``ConfigError``.

    ``memory_mb must be positive, got -1`` raised while building ``evaluator``
    becomes ``evaluator.memory_mb must be positive, got -1``; a message that
    names no option is prefixed with the component's key.
    """
    try:
        yield
    except ConfigError:
        raise
    except (ValueError, TypeError) as exc:
        message = str(exc).splitlines()[0] if str(exc) else repr(exc)
        raise ConfigError(qualify(message, key, node)) from exc


def qualify(message: str, key: str, node: Any) -> str:
    """``message`` with its leading option name expanded to the full key."""
    names = [n for n in node if n not in _HYDRA_KEYS] if isinstance(node, dict) else []
    head = message.split(" ", 1)[0].rstrip(":=,")
    if head in names:
        return f"{key}.{message}"
    return f"{key}: {message}"


def _parameters(fn: Callable[..., Any]) -> set[str] | None:
    """Keyword parameters of ``fn`` (its ``__init__`` for a class); None when it takes **kwargs."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return None
    if any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values()):
        return None
    return {p.name for p in sig.parameters.values() if p.kind is not p.VAR_POSITIONAL}


def _hints(fn: Callable[..., Any]) -> dict[str, Any]:
    """Parameter annotations of ``fn``, evaluated one by one (those that do not resolve
    outside ``TYPE_CHECKING`` are left out)."""
    target = fn.__init__ if inspect.isclass(fn) else fn
    try:
        return typing.get_type_hints(target)
    except Exception:
        pass
    scope = dict(getattr(inspect.getmodule(target), "__dict__", {}))
    hints: dict[str, Any] = {}
    for name, text in getattr(target, "__annotations__", {}).items():
        try:
            hints[name] = eval(text, scope) if isinstance(text, str) else text
        except Exception:
            continue
    return hints


def _describe_mismatch(hint: Any, value: Any) -> str | None:
    """What ``hint`` wants in words, when ``value`` is not that; None when it fits or is opaque."""
    options = _alternatives(hint)
    if options is None:
        return None
    if any(_fits(option, value) for option in options):
        return None
    words = [_words(option) for option in options]
    if any(w is None for w in words):
        return None
    return " or ".join(dict.fromkeys(w for w in words if w))


def _alternatives(hint: Any) -> list[Any] | None:
    origin = typing.get_origin(hint)
    if origin in (Union, types.UnionType):
        return list(typing.get_args(hint))
    if hint is None:
        return None
    return [hint]


def _fits(option: Any, value: Any) -> bool:
    if option is type(None):
        return value is None
    if typing.get_origin(option) is Literal:
        return value in typing.get_args(option)
    if option is bool:
        return isinstance(value, bool)
    if option is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if option is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if option in (str, Path):
        return isinstance(value, str)
    return True  # containers, classes, callables: not checked here


def _words(option: Any) -> str | None:
    if option is type(None):
        return "null"
    if typing.get_origin(option) is Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(option))
    if option is Path:
        return "a path"
    return _KIND.get(option)
