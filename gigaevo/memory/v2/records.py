"""Strict conversion between frozen dataclass records and JSON-ready dicts.

Records that cross a file boundary (cards, ledger rows) are frozen
dataclasses whose fields use only: ``str``, ``int``, ``float``, ``bool``,
``X | None``, ``Literal[...]``, ``tuple[X, ...]``, ``Sequence[X]`` and nested
record dataclasses. ``from_json`` refuses unknown keys, missing required keys
and wrong types (``extra="forbid"`` semantics), so a typo never passes silently.
A value that already is an instance of the record class is taken as is (JSON
never yields one; the ledger passes parts resolved from their own checked rows).
A ``Sequence[X]`` field is written as a list; read back, a list becomes a tuple
and a sequence that is not a list (a column table the ledger built from checked
columns) is taken as is.
"""

from __future__ import annotations

import dataclasses
import math
import operator
import sys
import types
import typing
from collections.abc import Callable, Collection, Mapping, Sequence
from functools import cache
from typing import Any, TypeVar

from gigaevo.memory.v2.errors import CardFormatError

R = TypeVar("R")

_Converter = Callable[[Any, str], Any]


def to_json(record: Any, exclude: Collection[str] = ()) -> dict[str, Any]:
    """The record as a dict of JSON values (tuples become lists, nested records dicts).

    Fields named in ``exclude`` are left out (a caller storing them another way).
    """
    names = _field_names(type(record))  # type: ignore[arg-type]
    return {name: _plain(getattr(record, name)) for name in names if name not in exclude}


@cache
def _field_names(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(cls))


_LEAVES = (str, int, float, type(None))  # bool is an int


def _plain(value: Any) -> Any:
    if isinstance(value, _LEAVES):  # fast path: a decision row holds ~10^5 scalars
        return value
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return to_json(value)
    if isinstance(value, Sequence) and not isinstance(value, str | bytes):
        return [_plain(v) for v in value]  # a column table standing for a tuple
    return value


def from_json(cls: type[R], data: Any, where: str = "") -> R:
    """Build ``cls`` from ``data``, checking every key and type.

    Raises:
        CardFormatError: ``data`` is not a dict, has an unknown or missing key,
            or a value of the wrong type; the message names the path ``where``.
    """
    convert = _record_converter(cls)  # type: ignore[arg-type]
    return convert(data, where or cls.__name__)


@cache
def _record_converter(cls: type) -> _Converter:
    hints = typing.get_type_hints(cls)
    fields = dataclasses.fields(cls)
    converters = {f.name: _converter(hints[f.name]) for f in fields}
    required = {
        f.name
        for f in fields
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    }
    allowed = sorted(converters)

    def convert(data: Any, where: str) -> Any:
        if type(data) is cls:  # a part already built from its own verified row
            return data
        if not isinstance(data, Mapping):
            raise CardFormatError(f"{where}: expected an object, got {type(data).__name__}")
        unknown = sorted(set(data) - set(converters))
        if unknown:
            raise CardFormatError(f"{where}: unknown key {unknown[0]!r} (allowed: {allowed})")
        missing = sorted(required - set(data))
        if missing:
            raise CardFormatError(f"{where}: missing key {missing[0]!r}")
        values = {k: converters[k](v, f"{where}.{k}") for k, v in data.items()}
        try:
            return recent.share(cls(**values))
        except ValueError as exc:
            raise CardFormatError(f"{where}: {exc}") from exc

    recent = _Recent()
    return convert


class _Recent:
    """The last value a converter built, handed out again for an identical one.

    Consecutive ledger rows repeat parts (a decision's reward definition, the fit
    diagnostics of the decisions between two fits, an empty pending list): a long-lived
    reader then keeps one copy. Identical means equal, of the same types and with the same
    sign on every zero (``_same_zeros``: 0.0 and -0.0 are equal but not identical); values
    are immutable records and tuples, so sharing one is never seen. A race between threads
    at worst shares less.
    """

    __slots__ = ("last",)

    def __init__(self) -> None:
        self.last: Any = None

    def share(self, value: Any) -> Any:
        last = self.last
        if last is not None and _identical(last, value):
            return last
        self.last = value
        return value

    def share_items(self, items: tuple[Any, ...]) -> tuple[Any, ...]:
        """``items``, or the last tuple if identical; short tuples of the same length also
        take each identical item from the last one (the diagnostics of two fits differ in
        a few values)."""
        last = self.last
        if last is None or len(last) != len(items) or len(items) > _SHARED_ITEMS:
            self.last = items
            return items
        shared = tuple(
            old if old is new or _identical(old, new) else new
            for old, new in zip(last, items, strict=True)
        )
        if all(map(operator.is_, shared, last)):
            return last
        self.last = shared
        return shared


_SHARED_ITEMS = 64


def _identical(a: Any, b: Any) -> bool:
    if type(a) is not type(b):
        return False
    try:
        return bool(a == b) and _same_zeros(a, b)
    except ValueError:  # an element whose == is not a truth value (an array)
        return False


def _same_zeros(a: Any, b: Any) -> bool:
    """Of two equal values: no float of one is 0.0 where the other has -0.0 (the one case
    where equal JSON-built values differ in bits; types are checked at every level)."""
    kind = type(a)
    if kind is not type(b):
        return False
    if kind is float:
        return a != 0.0 or math.copysign(1.0, a) == math.copysign(1.0, b)
    if kind in _EXACT:
        return True
    if kind is tuple:
        return all(map(_same_zeros, a, b))
    if dataclasses.is_dataclass(kind):
        return all(_same_zeros(getattr(a, n), getattr(b, n)) for n in _field_names(kind))
    return repr(a) == repr(b)  # anything else (a column table): its exact text


_EXACT = frozenset({str, int, bool, type(None)})


def _converter(hint: Any) -> _Converter:
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (types.UnionType, typing.Union):
        inner = [a for a in args if a is not type(None)]
        if len(inner) != 1:
            raise TypeError(f"unsupported union {hint}")
        return _optional(_converter(inner[0]))
    if origin is typing.Literal:
        return _literal(args)
    if origin is tuple:
        if len(args) != 2 or args[1] is not Ellipsis:
            raise TypeError(f"only tuple[X, ...] is supported, got {hint}")
        return _sequence(_converter(args[0]))
    if origin is Sequence:
        return _built_or_sequence(_sequence(_converter(args[0])))
    if dataclasses.is_dataclass(hint):
        return _record_converter(hint)  # type: ignore[arg-type]
    scalar = _SCALARS.get(hint)
    if scalar is None:
        raise TypeError(f"unsupported field type {hint}")
    return scalar


def _optional(inner: _Converter) -> _Converter:
    def convert(value: Any, where: str) -> Any:
        return None if value is None else inner(value, where)

    return convert


def _literal(choices: tuple[Any, ...]) -> _Converter:
    def convert(value: Any, where: str) -> Any:
        if value not in choices or isinstance(value, bool):
            raise CardFormatError(f"{where}: expected one of {list(choices)}, got {value!r}")
        return choices[choices.index(value)]  # the one object of the choice, not a copy

    return convert


def _sequence(inner: _Converter) -> _Converter:
    def convert(value: Any, where: str) -> tuple[Any, ...]:
        if not isinstance(value, list | tuple):
            raise CardFormatError(f"{where}: expected a list, got {type(value).__name__}")
        out = tuple(inner(v, f"{where}[{i}]") for i, v in enumerate(value))
        if isinstance(value, tuple) and all(map(operator.is_, out, value)):
            return value  # parts already built: the tuple is shared, not copied
        return recent.share_items(out) if out else out

    recent = _Recent()
    return convert


def _built_or_sequence(listed: _Converter) -> _Converter:
    def convert(value: Any, where: str) -> Any:
        if isinstance(value, Sequence) and not isinstance(value, list | tuple | str | bytes):
            return value  # built by the caller from checked data
        return listed(value, where)

    return convert


def _str(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise CardFormatError(f"{where}: expected a string, got {type(value).__name__}")
    # interned: a long-lived reader (the ledger keeps every row) holds each distinct string
    # once; ids, statuses and names repeat across rows (a 1,000-decision ledger reads ~40,000
    # strings, ~3,200 distinct)
    return sys.intern(value) if type(value) is str else value


def _int(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise CardFormatError(f"{where}: expected an integer, got {value!r}")
    return value


def _float(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise CardFormatError(f"{where}: expected a number, got {value!r}")
    if not math.isfinite(value):
        raise CardFormatError(f"{where}: expected a finite number, got {value!r}")
    return float(value)


def _bool(value: Any, where: str) -> bool:
    if not isinstance(value, bool):
        raise CardFormatError(f"{where}: expected true or false, got {value!r}")
    return value


_SCALARS: dict[Any, _Converter] = {str: _str, int: _int, float: _float, bool: _bool}
