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

import struct
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, overload

import numpy as np

RagLabel = Literal["applicable", "not_applicable", "unassessed"]


@dataclass(frozen=True)
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
    _rho: np.ndarray
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
        for name, value in (
            ("_ids", ids),
            ("_rho", rho),
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
        safe_b = bytes(bool(s) for s in safe)
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
        return self._rho

    def rho_sum(self) -> float:
        return float(sum(self._rho.tolist()))  # summed in order, as a tuple's masses were

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
        rho = self._rho.tolist()
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
        return self._rho * (factor if factor is not None else 0.0)

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
        rho = float(self._rho[i])
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
            self._rho,
            self._safe,
            self._offer,
            dict(self._offer_x),
            self._oj,
            self._cj,
            self._rag,
            dict(self._extra),
        )


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
