"""A decision's candidates (``Candidate``) and their columnar, immutable table.

A decision over a bank of J cards logs J candidates (memory-model.md "Rows and eligibility"). Kept
as J frozen objects per decision, they are most of the reader's memory (~400
bytes a card, every decision kept for the heads' refits). ``CandidateTable``
holds them as columns instead and gives back ``Candidate`` objects on demand:
card ids as a tuple of str (shared between tables with the same ids), ``rho``
as a read-only float64 array, the safe flags as bytes, the offer as one common
value e (a safe card is offered e, an unsafe one None) with sparse exceptions,
the joint masses as arrays only when they are not exactly rho*e and
rho*(1 - e), the RAG labels as one byte a card, and the rarely set fields
(posterior summary, MC SE) sparse. Every float comes back bit for bit.
"""

from __future__ import annotations

import base64
import binascii
import itertools
import json
import math
import struct
import zlib
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, overload

import numpy as np

RagLabel = Literal["applicable", "not_applicable", "unassessed"]


@dataclass(frozen=True, slots=True)
class Candidate:
    """Per-candidate propensities: rho_j, e (None if unsafe), rho_j*e, rho_j*(1-e).

    ``mean_effect``, ``sd_effect`` and ``p_positive`` summarise the posterior
    of Delta_j; ``mc_se`` is the Monte Carlo standard error of ``rho``.
    """

    card_id: str
    rho: float
    offer: float | None
    offer_joint: float
    control_joint: float
    safe: bool
    mean_effect: float | None = None
    sd_effect: float | None = None
    p_positive: float | None = None
    mc_se: float | None = None
    # RAG label the card was decided under (applicable / not_applicable / unassessed);
    # None when agentic applicability is off (and in rows written before the field)
    rag: RagLabel | None = None


FIELDS = (
    "card_id",
    "rho",
    "offer",
    "offer_joint",
    "control_joint",
    "safe",
    "mean_effect",
    "sd_effect",
    "p_positive",
    "mc_se",
    "rag",
)
SPARSE = ("mean_effect", "sd_effect", "p_positive", "mc_se")  # None unless set
RAG_CODES: tuple[RagLabel | None, ...] = (None, "applicable", "not_applicable", "unassessed")
_RAG_INDEX = {label: i for i, label in enumerate(RAG_CODES)}
_RECENT_IDS: deque[tuple[str, ...]] = deque(maxlen=4)  # id tuples shared between tables


def _bits(value: float) -> bytes:
    return struct.pack("<d", value)


def _same(a: float | None, b: float | None) -> bool:
    """Bit-exact equality of two optional floats (-0.0 is not 0.0, NaN is itself)."""
    if a is None or b is None:
        return a is b
    return _bits(float(a)) == _bits(float(b))


def _frozen(values: Any) -> np.ndarray:
    out = np.array(values, dtype=np.float64).reshape(-1)
    out.flags.writeable = False
    return out


def _derived(rho: np.ndarray, given: np.ndarray, factor: float | None) -> np.ndarray | None:
    """None when ``given`` is bit for bit ``rho * factor`` (stored implicitly), else it."""
    if factor is not None and np.array_equal((rho * factor).view(np.int64), given.view(np.int64)):
        return None
    return given


def shared_ids(ids: Sequence[str]) -> tuple[str, ...]:
    """``ids`` as a tuple, the same object as a recent equal one (tables rarely differ)."""
    out = tuple(ids)
    for recent in _RECENT_IDS:
        if recent is out or (len(recent) == len(out) and recent == out):
            return recent
    _RECENT_IDS.appendleft(out)
    return out


class CandidateTable(Sequence[Candidate]):
    """The candidates of one decision as columns; behaves as a tuple of ``Candidate``.

    Equal to (and hashing like) the tuple of ``Candidate`` it stands for; indexing
    and iteration build the ``Candidate`` objects on demand. Immutable. Build one
    with ``of`` (any sequence of ``Candidate``) or ``from_columns`` (the reader).
    """

    __slots__ = (
        "_cj",
        "_codes",
        "_extra",
        "_hash",
        "_ids",
        "_offer",
        "_offer_x",
        "_oj",
        "_rag",
        "_rho",
        "_safe",
    )

    _ids: tuple[str, ...]
    _rho: np.ndarray  # the masses, or their distinct values when ``_codes`` is set
    _codes: np.ndarray | None  # (J,) index of each mass in ``_rho`` (uint8 / uint16)
    _safe: bytes
    _offer: float | None
    _offer_x: Mapping[int, float | None]
    _oj: np.ndarray | None
    _cj: np.ndarray | None
    _rag: bytes | None
    _extra: Mapping[str, Mapping[int, float]]
    _hash: int | None

    def __init__(self) -> None:
        raise TypeError("build a CandidateTable with CandidateTable.of or .from_columns")

    @classmethod
    def _make(
        cls,
        ids: tuple[str, ...],
        rho: np.ndarray,
        safe: bytes,
        offer: float | None,
        offer_x: Mapping[int, float | None],
        oj: np.ndarray | None,
        cj: np.ndarray | None,
        rag: bytes | None,
        extra: Mapping[str, Mapping[int, float]],
    ) -> CandidateTable:
        n = len(ids)
        if not (len(rho) == len(safe) == n) or any(
            a is not None and len(a) != n for a in (oj, cj, rag)
        ):
            raise ValueError("candidate columns differ in length")
        self = object.__new__(cls)
        values, codes = _coded(rho)
        for name, value in (
            ("_ids", ids),
            ("_rho", values),
            ("_codes", codes),
            ("_safe", safe),
            ("_offer", offer),
            ("_offer_x", offer_x),
            ("_oj", oj),
            ("_cj", cj),
            ("_rag", rag),
            ("_extra", {k: v for k, v in extra.items() if v}),
            ("_hash", None),
        ):
            object.__setattr__(self, name, value)
        return self

    # ---- construction -----------------------------------------------------------

    @classmethod
    def of(cls, candidates: Sequence[Candidate]) -> CandidateTable:
        """The table of ``candidates`` (returned as is when it already is one)."""
        if isinstance(candidates, CandidateTable):
            return candidates
        cands = tuple(candidates)
        for c in cands:
            if not isinstance(c, Candidate):
                raise TypeError(f"expected Candidate, got {type(c).__name__}")
        return cls.from_columns(
            [c.card_id for c in cands],
            [c.rho for c in cands],
            [c.safe for c in cands],
            offers=[c.offer for c in cands],
            offer_joint=[c.offer_joint for c in cands],
            control_joint=[c.control_joint for c in cands],
            rag=[c.rag for c in cands],
            extra={f: {i: getattr(c, f) for i, c in enumerate(cands)} for f in SPARSE},
        )

    @classmethod
    def from_columns(
        cls,
        card_ids: Sequence[str],
        rho: Sequence[float] | np.ndarray,
        safe: Sequence[bool] | np.ndarray,
        offer: float | None = None,
        *,
        offers: Sequence[float | None] | None = None,
        offer_joint: Sequence[float] | np.ndarray | None = None,
        control_joint: Sequence[float] | np.ndarray | None = None,
        rag: Sequence[RagLabel | None] | None = None,
        extra: Mapping[str, Mapping[int, float | None]] | None = None,
    ) -> CandidateTable:
        """A table from columns (J candidates).

        Args:
            card_ids: (J,) card ids.
            rho: (J,) proposal masses. safe: (J,) safe flags.
            offer: the common offer e: a safe candidate is offered e, an unsafe one None.
            offers: (J,) per-candidate offers instead (the common value is then inferred).
            offer_joint, control_joint: (J,) joint masses; default rho*e and rho*(1 - e).
            rag: (J,) RAG labels (default None for every card).
            extra: ``SPARSE`` field -> {candidate index: value} (None values dropped).

        Raises:
            ValueError: columns of different lengths, a joint mass needed without an
                offer, an unknown RAG label or sparse field.
        """
        ids = shared_ids(card_ids)
        rho_a = _frozen(rho)
        flags = safe if isinstance(safe, np.ndarray) else np.fromiter(map(bool, safe), bool)
        safe_b = flags.astype(bool).astype(np.uint8).tobytes()
        offer_x: dict[int, float | None] = {}
        if offers is not None:
            if len(offers) != len(ids):
                raise ValueError("candidate columns differ in length")
            offer = _common_offer(offers, safe_b)
            expected = [offer if s else None for s in safe_b]
            if list(offers) != expected or offer == 0.0:  # else no exception (fast path)
                offer_x = {
                    i: o
                    for i, (o, x) in enumerate(zip(offers, expected, strict=True))
                    if not _same(o, x)
                }
        elif offer is not None:
            offer = float(offer)
        e = offer
        oj = None if offer_joint is None else _derived(rho_a, _frozen(offer_joint), e)
        cje = None if e is None else 1.0 - e
        cj = None if control_joint is None else _derived(rho_a, _frozen(control_joint), cje)
        if e is None and (oj is None or cj is None) and len(ids):
            raise ValueError("joint masses are needed when there is no common offer")
        rag_b = None
        if rag is not None and any(r is not None for r in rag):
            try:
                rag_b = bytes(_RAG_INDEX[r] for r in rag)
            except KeyError as exc:
                raise ValueError(f"unknown RAG label {exc.args[0]!r}") from None
        sparse: dict[str, dict[int, float]] = {}
        for name, values in (extra or {}).items():
            if name not in SPARSE:
                raise ValueError(f"unknown sparse candidate field {name!r}")
            sparse[name] = {int(i): v for i, v in values.items() if v is not None}
            if any(not 0 <= i < len(ids) for i in sparse[name]):
                raise ValueError(f"{name}: candidate index out of range")
        return cls._make(ids, rho_a, safe_b, e, offer_x, oj, cj, rag_b, sparse)

    # ---- columns ----------------------------------------------------------------

    @property
    def card_ids(self) -> tuple[str, ...]:
        return self._ids

    @property
    def rho(self) -> np.ndarray:
        """(J,) read-only proposal masses."""
        if self._codes is None:
            return self._rho
        out = self._rho[self._codes]
        out.flags.writeable = False
        return out

    def rho_sum(self) -> float:
        return float(sum(self.rho.tolist()))  # summed in order, as a tuple's masses were

    def position(self, card_id: str) -> int | None:
        """Index of the first candidate with ``card_id``, or None."""
        try:
            return self._ids.index(card_id)
        except ValueError:
            return None

    def get(self, card_id: str) -> Candidate | None:
        """The first candidate of ``card_id``, or None."""
        i = self.position(card_id)
        return None if i is None else self[i]

    def columns(self) -> dict[str, list[Any]]:
        """One list per ``Candidate`` field (JSON scalars, floats exact), in ``FIELDS`` order."""
        n = len(self._ids)
        rho = self.rho.tolist()
        safe = [b == 1 for b in self._safe]
        e = self._offer
        offers = [e if s else None for s in safe]
        for i, o in self._offer_x.items():
            offers[i] = o
        out: dict[str, list[Any]] = {
            "card_id": list(self._ids),
            "rho": rho,
            "offer": offers,
            "offer_joint": self._joint(self._oj, e).tolist(),
            "control_joint": self._joint(self._cj, None if e is None else 1.0 - e).tolist(),
            "safe": safe,
        }
        for name in SPARSE:
            column: list[float | None] = [None] * n
            for i, v in self._extra.get(name, {}).items():
                column[i] = v
            out[name] = column
        out["rag"] = [None] * n if self._rag is None else [RAG_CODES[b] for b in self._rag]
        return out

    def _joint(self, stored: np.ndarray | None, factor: float | None) -> np.ndarray:
        if stored is not None:
            return stored
        assert factor is not None or not len(self._ids)
        return self.rho * (factor if factor is not None else 0.0)

    # ---- Sequence protocol --------------------------------------------------------

    def __len__(self) -> int:
        return len(self._ids)

    def __bool__(self) -> bool:
        return bool(self._ids)

    @overload
    def __getitem__(self, index: int) -> Candidate: ...
    @overload
    def __getitem__(self, index: slice) -> tuple[Candidate, ...]: ...
    def __getitem__(self, index: int | slice) -> Candidate | tuple[Candidate, ...]:
        if isinstance(index, slice):
            return tuple(self[i] for i in range(*index.indices(len(self))))
        n = len(self._ids)
        i = int(index)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError("candidate index out of range")
        return self._candidate(i)

    def _candidate(self, i: int) -> Candidate:
        e = self._offer
        rho = float(self._rho[i if self._codes is None else self._codes[i]])
        safe = self._safe[i] == 1
        offer = self._offer_x.get(i, e if safe else None)
        e0 = e if e is not None else 0.0  # no common offer: both joints are stored
        oj = float(self._oj[i]) if self._oj is not None else rho * e0
        cj = float(self._cj[i]) if self._cj is not None else rho * (1.0 - e0)
        extra = {name: values[i] for name, values in self._extra.items() if i in values}
        rag = None if self._rag is None else RAG_CODES[self._rag[i]]
        return Candidate(self._ids[i], rho, offer, oj, cj, safe, rag=rag, **extra)

    def __iter__(self) -> Iterator[Candidate]:
        columns = self.columns()
        for values in zip(*(columns[f] for f in FIELDS), strict=True):
            yield Candidate(*values)

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if isinstance(other, CandidateTable):
            if self._ids != other._ids:
                return False
            mine, theirs = self.columns(), other.columns()
            return all(mine[f] == theirs[f] for f in FIELDS)
        if isinstance(other, tuple | list):
            return len(other) == len(self) and all(a == b for a, b in zip(self, other, strict=True))
        return NotImplemented

    def __ne__(self, other: object) -> bool:
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    def __hash__(self) -> int:
        if self._hash is None:  # as the tuple of Candidate it equals
            object.__setattr__(self, "_hash", hash(tuple(self)))
        assert self._hash is not None
        return self._hash

    def __repr__(self) -> str:
        if len(self) <= 3:
            return f"CandidateTable({tuple(self)!r})"
        return f"CandidateTable(<{len(self)} candidates: {self[0]!r}, ..., {self[-1]!r}>)"

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"CandidateTable is immutable (cannot set {name!r})")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"CandidateTable is immutable (cannot delete {name!r})")

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return _restore, (
            self._ids,
            self.rho,
            self._safe,
            self._offer,
            dict(self._offer_x),
            self._oj,
            self._cj,
            self._rag,
            dict(self._extra),
        )


CODED_FROM = 64  # candidates from which repeated masses are kept as codes


def _coded(rho: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """(distinct masses, the code of each) when that is smaller, else (``rho``, None).

    Most cards of a large bank share one mass (never the winner or a challenger in
    any world), so a decision's 8 bytes a card shrink to one; values are compared by
    their bits (-0.0 is not 0.0), so every mass comes back exactly.
    """
    n = len(rho)
    if n < CODED_FROM:
        return rho, None
    bits = np.ascontiguousarray(rho).view(np.int64)
    distinct, codes = np.unique(bits, return_inverse=True)
    if len(distinct) > 65536 or len(distinct) * 8 > n * 4:
        return rho, None
    values = distinct.view(np.float64).copy()
    values.flags.writeable = False
    out = codes.astype(np.uint8 if len(distinct) <= 256 else np.uint16)
    out.flags.writeable = False
    return values, out


def _restore(*state: Any) -> CandidateTable:
    ids, rho, safe, offer, offer_x, oj, cj, rag, extra = state
    oj, cj = (None if a is None else _frozen(a) for a in (oj, cj))
    return CandidateTable._make(
        shared_ids(ids), _frozen(rho), safe, offer, offer_x, oj, cj, rag, extra
    )


def _common_offer(offers: Sequence[float | None], safe: bytes) -> float | None:
    """The offer of the first safe candidate that has one, else of any candidate, else None."""
    first = None
    for o, s in zip(offers, safe, strict=True):
        if o is not None:
            if s:
                return float(o)
            first = float(o) if first is None else first
    return first


# ---- packed form (schema version 3, bodies with ``candidate_pack``) -------------------
#
# A decision over J cards logs J candidates; as JSON columns that is ~120 bytes a card
# (118 KiB a decision at 1,000 cards), most of the ledger. The packed form keeps every
# field bit for bit in a few bytes a card: the ids as a bitmap over the decision's
# universe (when the candidates are a subsequence of it; else listed), the masses as
# float64, the flags as bits, the offer and the joints implicit when they follow from
# rho and the common e (as in ``CandidateTable``), the sparse fields as (index, value)
# pairs; zlib-compressed (cards never proposed share one mass, which compresses well)
# and base64-encoded. Layout, little-endian, after zlib:
#
#   u8 version (1) | u32 J | u8 id mode: 1 -> u32 U + ceil(U/8) bytes mask over the
#   universe, 0 -> u32 L + L bytes of the JSON list of ids | J f64 rho | ceil(J/8) bytes
#   safe bits | u8 has e [+ f64 e] | u32 K + K x (u32 i, u8 is None, f64 offer) |
#   u8 has joints [+ J f64] (offer, then control) | u8 has rag [+ J bytes] |
#   per sparse field in SPARSE order: u32 K + K x (u32 i, f64 value)

PACK_VERSION = 1
_U8, _U32, _F64 = struct.Struct("<B"), struct.Struct("<I"), struct.Struct("<d")
_OFFER_X, _SPARSE_X = struct.Struct("<IBd"), struct.Struct("<Id")


class PackError(ValueError):
    """A packed candidate table that does not decode (truncated, ragged, out of range)."""


def pack(table: CandidateTable, universe_ids: Sequence[str]) -> str:
    """The packed text (base64 of zlib) of ``table`` for a decision over ``universe_ids``."""
    out = bytearray(_U8.pack(PACK_VERSION) + _U32.pack(len(table._ids)))
    mask = _universe_mask(table._ids, universe_ids)
    if mask is None:
        listed = json.dumps(list(table._ids), separators=(",", ":")).encode()
        out += _U8.pack(0) + _U32.pack(len(listed)) + listed
    else:
        out += _U8.pack(1) + _U32.pack(len(universe_ids)) + mask
    out += table.rho.astype("<f8").tobytes()
    out += np.packbits(np.frombuffer(table._safe, dtype=np.uint8), bitorder="little").tobytes()
    out += _U8.pack(table._offer is not None)
    if table._offer is not None:
        out += _F64.pack(table._offer)
    out += _U32.pack(len(table._offer_x))
    for i, o in sorted(table._offer_x.items()):
        out += _OFFER_X.pack(i, o is None, 0.0 if o is None else o)
    for joint in (table._oj, table._cj):
        out += _U8.pack(joint is not None)
        if joint is not None:
            out += joint.astype("<f8").tobytes()
    out += _U8.pack(table._rag is not None)
    if table._rag is not None:
        out += table._rag
    for name in SPARSE:
        values = table._extra.get(name, {})
        out += _U32.pack(len(values))
        for i, v in sorted(values.items()):
            out += _SPARSE_X.pack(i, v)
    return base64.b64encode(zlib.compress(bytes(out), 6)).decode("ascii")


def unpack(text: str, universe_ids: Sequence[str]) -> CandidateTable:
    """The table ``pack`` wrote (ids taken from ``universe_ids``, so shared with it).

    Raises:
        PackError: not base64 / zlib, an unknown version, a truncated or over-long
            body, a mask that does not fit the universe, a non-finite float, an
            index or RAG code out of range.
    """
    try:
        raw = zlib.decompress(base64.b64decode(text.encode("ascii"), validate=True))
    except (binascii.Error, zlib.error, UnicodeEncodeError, AttributeError) as exc:
        raise PackError(f"not a packed candidate table ({exc})") from None
    r = _Reader(raw)
    version = r.u8()
    if version != PACK_VERSION:
        raise PackError(f"packed candidate table version {version}, expected {PACK_VERSION}")
    n = r.u32()
    mode = r.u8()
    ids: list[str]
    if mode == 1:
        u = r.u32()
        if u != len(universe_ids):
            raise PackError(f"mask over {u} cards, the universe has {len(universe_ids)}")
        bits = np.unpackbits(
            np.frombuffer(r.take((u + 7) // 8), dtype=np.uint8), count=u, bitorder="little"
        )
        ids = [universe_ids[i] for i in np.flatnonzero(bits).tolist()]
    elif mode == 0:
        try:
            ids = json.loads(r.take(r.u32()).decode())
        except ValueError as exc:
            raise PackError(f"candidate ids do not parse ({exc})") from None
        if not isinstance(ids, list) or not all(isinstance(c, str) for c in ids):
            raise PackError("candidate ids are not a list of strings")
    else:
        raise PackError(f"unknown candidate id mode {mode}")
    if len(ids) != n:
        raise PackError(f"{len(ids)} candidate ids for {n} candidates")
    rho = r.floats(n)
    safe = bytes(
        np.unpackbits(
            np.frombuffer(r.take((n + 7) // 8), dtype=np.uint8), count=n, bitorder="little"
        )
    )
    offer = r.f64() if r.u8() else None
    offer_x: dict[int, float | None] = {}
    for _ in range(r.u32()):
        i, none, value = r.unpack(_OFFER_X)
        offer_x[r.index(i, n)] = None if none else r.finite(value)
    oj = r.floats(n) if r.u8() else None
    cj = r.floats(n) if r.u8() else None
    rag = r.take(n) if r.u8() else None
    if rag is not None and max(rag, default=0) >= len(RAG_CODES):
        raise PackError(f"RAG code {max(rag)} out of range")
    extra: dict[str, dict[int, float]] = {}
    for name in SPARSE:
        for _ in range(r.u32()):
            i, value = r.unpack(_SPARSE_X)
            extra.setdefault(name, {})[r.index(i, n)] = r.finite(value)
    if r.left():
        raise PackError(f"{r.left()} bytes after the packed candidate table")
    if offer is None and (oj is None or cj is None) and n:
        raise PackError("joint masses are needed when there is no common offer")
    return CandidateTable._make(shared_ids(ids), rho, safe, offer, offer_x, oj, cj, rag, extra)


_POSITIONS: list[tuple[Sequence[str], dict[str, int] | None]] = []  # the last universe's


def _positions(universe_ids: Sequence[str]) -> dict[str, int] | None:
    """Card id -> position in ``universe_ids``, or None when an id is there twice (kept for
    the last universe object: the decisions of one bank state share it)."""
    if _POSITIONS and _POSITIONS[0][0] is universe_ids:
        return _POSITIONS[0][1]
    at: dict[str, int] | None = {}
    for i, cid in enumerate(universe_ids):
        if at.setdefault(cid, i) != i:  # type: ignore[union-attr]
            at = None  # an id twice in the universe: positions would be ambiguous
            break
    _POSITIONS[:] = [(universe_ids, at)]
    return at


def _universe_mask(ids: Sequence[str], universe_ids: Sequence[str]) -> bytes | None:
    """The bitmap of ``ids`` over ``universe_ids`` when they are a subsequence of it
    (ascending positions, each id once in the universe), else None."""
    at = _positions(universe_ids)
    if at is None:
        return None
    pos = np.fromiter(map(at.get, ids, itertools.repeat(-1)), dtype=np.int64, count=len(ids))
    if len(pos) and (pos[0] < 0 or (np.diff(pos) <= 0).any()):
        return None
    bits = np.zeros(len(universe_ids), dtype=np.uint8)
    bits[pos] = 1
    return np.packbits(bits, bitorder="little").tobytes()


class _Reader:
    """Sequential reads of a packed table; every read past the end raises ``PackError``."""

    def __init__(self, raw: bytes) -> None:
        self.raw, self.at = raw, 0

    def take(self, n: int) -> bytes:
        if n < 0 or self.at + n > len(self.raw):
            raise PackError("packed candidate table is truncated")
        out = self.raw[self.at : self.at + n]
        self.at += n
        return out

    def unpack(self, fmt: struct.Struct) -> tuple[Any, ...]:
        return fmt.unpack(self.take(fmt.size))

    def u8(self) -> int:
        return int(self.unpack(_U8)[0])

    def u32(self) -> int:
        return int(self.unpack(_U32)[0])

    def f64(self) -> float:
        return self.finite(self.unpack(_F64)[0])

    def floats(self, n: int) -> np.ndarray:
        out = np.frombuffer(self.take(8 * n), dtype="<f8").astype(np.float64)
        if not np.isfinite(out).all():
            raise PackError("packed candidate table holds a non-finite number")
        out.flags.writeable = False
        return out

    @staticmethod
    def finite(value: float) -> float:
        if not math.isfinite(value):
            raise PackError("packed candidate table holds a non-finite number")
        return float(value)

    @staticmethod
    def index(i: int, n: int) -> int:
        if not 0 <= i < n:
            raise PackError(f"candidate index {i} out of range ({n} candidates)")
        return int(i)

    def left(self) -> int:
        return len(self.raw) - self.at
