"""The heads' training rows, kept as the ledger grows.

(memory-model.md "Immediate head", "Delayed-lineage head", "Invalidity head and
chance constraint".)

``HeadRows`` reads each new usefulness-eligible observation once (``eligible_since``, in
terminal order) and each move of a root's matured lineage row with the row it moved to
(``matured_moves_since``, in ledger order), and keeps, per context width:

- the immediate head's exact sufficient statistics (valid rows: y = g / R, omega per row),
  and a copy of them at its latest plan point (``anchor_size``: 256, 272, 289, ... rows, in
  terminal order), on which the fitter plans the residual-scale integration;
- the delayed-lineage head's (the latest matured row of each eligible valid root:
  y^L = g^L / R, omega^L); a new row version replaces the old one's terms exactly, and a
  copy at its latest plan point (the 256th, 272nd, 289th, ... move of its rows): replayed
  from the start the moves pass through the states the live reader saw, so a resumed run
  holds the same copies;
- the invalidity head's rows as growing arrays (shared part, lineage part, block key,
  D): the logistic MAP needs the rows themselves, but never their rebuild;
- the ids of the rows fitted on, and how they changed since the last fit.

With ``fit_rows: grid`` (``memory=v2``'s configuration) it takes the eligible observations
and the lineage moves up to the latest point of the fit grid (``grid_size``) only; the
rest wait in the ledger for the next point (memory-model.md "The fit grid").

Block keys are the proposed card ids the rows were decided under; a fit maps them to
its lineage blocks through the bank's aliases, so a card absorbing another sums both
blocks exactly. A design row is the one ``DesignSpace.row`` gives in a one-lineage space
with the same contrasts, as the batch design did.
"""

from __future__ import annotations

import bisect
import dataclasses
import functools
import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from gigaevo.memory.v2.causal import (
    BlockDesign,
    DesignSpace,
    LogisticLaplaceHead,
    measurement_sd,
)
from gigaevo.memory.v2.causal import RewardDefinition as CausalReward
from gigaevo.memory.v2.causal.arrowhead import DENSE_MAX_SIZE, BlockHessian, row_products
from gigaevo.memory.v2.causal.invalidity import Chord, Cubic, Precision, Quadratic, ShiftLevels
from gigaevo.memory.v2.causal.suffstats import GaussianStatistics, RowTerms
from gigaevo.memory.v2.evidence import LineageRow, Observation, SelectionEvidence
from gigaevo.memory.v2.settings import PosteriorSettings


class RowTable:
    """Growing arrays of the invalidity head's rows (terminal order), with each row's
    products u u' and u s' (``row_products``), so a Fisher information weighs and sums
    them instead of forming them again on every Newton step of every fit."""

    def __init__(self, p_shared: int, width: int) -> None:
        self.n = 0
        self.shared = np.zeros((16, p_shared))
        self.part = np.zeros((16, width))
        self.products = np.zeros((16, width * width + width * p_shared))
        self.key = np.full(16, -1, dtype=int)  # index into ``keys``, -1 for a control
        self.invalid = np.zeros(16)
        self.keys: list[str] = []
        self._key_index: dict[str, int] = {}

    def append(self, row: RowTerms, invalid: bool) -> None:
        if self.n == len(self.invalid):  # grow by doubling
            self.shared, self.part, self.products, self.invalid = (
                np.concatenate([a, np.zeros_like(a)])
                for a in (self.shared, self.part, self.products, self.invalid)
            )
            self.key = np.concatenate([self.key, np.full(len(self.key), -1, dtype=int)])
        i = self.n
        self.shared[i] = row.shared
        if row.part is not None and row.key is not None:
            self.part[i] = row.part
            self.products[i] = row_products(row.shared[None, :], row.part[None, :])[0]
            if row.key not in self._key_index:
                self._key_index[row.key] = len(self.keys)
                self.keys.append(row.key)
            self.key[i] = self._key_index[row.key]
        self.invalid[i] = 1.0 if invalid else 0.0
        self.n += 1

    def design(
        self,
        block_of: dict[str, int],
        n_lineages: int,
        rows: int | None = None,
        start: int = 0,
        index: np.ndarray | None = None,
    ) -> BlockDesign:
        """Rows ``start`` to ``rows`` (all), or the rows ``index``, as a ``BlockDesign`` (block
        key -> lineage position)."""
        n = self.n if rows is None else rows
        sel: slice | np.ndarray = slice(start, n) if index is None else index
        to_block = np.array([block_of.get(k, -1) for k in self.keys] + [-1], dtype=int)
        block = to_block[self.key[sel]]  # key -1 reads the trailing -1
        part = self.part[sel]
        block[~np.any(part != 0.0, axis=1)] = -1  # as BlockDesign.from_dense
        return BlockDesign(self.shared[sel], block, part, n_lineages, self.products[sel])


@dataclass
class WidthRows:
    """The rows of one context width C."""

    immediate: GaussianStatistics
    lineage: GaussianStatistics
    invalidity: RowTable
    lineage_terms: dict[str, tuple[str, RowTerms]] = field(default_factory=dict)  # root -> id
    ids: set[str] = field(default_factory=set)  # fitted row ids
    added: set[str] = field(default_factory=set)  # since the last ``take_changes``
    removed: set[str] = field(default_factory=set)
    link: Sequence[str] = ()  # the fit-set link of the last fit (``fitted_row_link``)
    # the immediate head's statistics at its latest plan point (``anchor_size``): (rows, sums)
    plan_rows: tuple[int, GaussianStatistics] | None = None
    # the delayed-lineage head's: its rows are replaced as windows mature, so its plan points
    # count the moves of its rows (a row added, replaced or withdrawn), in ledger order
    lineage_moves: int = 0
    lineage_plan_rows: tuple[int, GaussianStatistics] | None = None

    def take_changes(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """(ids added, ids removed) since the last call, each sorted."""
        out = tuple(sorted(self.added)), tuple(sorted(self.removed))
        self.added, self.removed = set(), set()
        return out

    def change(self, added: str | None = None, removed: str | None = None) -> None:
        if removed is not None:
            self.ids.discard(removed)
            if removed in self.added:
                self.added.discard(removed)
            else:
                self.removed.add(removed)
        if added is not None:
            self.ids.add(added)
            if added in self.removed:
                self.removed.discard(added)
            else:
                self.added.add(added)


class HeadRows:
    """The heads' rows of one run's ledger (see the module docstring).

    Args:
        evidence: the run's causal ledger.
        reward: gain normalisation and range.
        posterior: measurement sds and the kind contrast.
        rag_contrast: whether RAG labels enter the design.
    """

    def __init__(
        self,
        evidence: SelectionEvidence,
        reward: CausalReward,
        posterior: PosteriorSettings,
        *,
        rag_contrast: bool = False,
    ) -> None:
        self.evidence = evidence
        self.reward = reward
        self.posterior = posterior
        self.rag_contrast = rag_contrast
        self.widths: dict[int, WidthRows] = {}
        self.treated_keys: Counter[str] = Counter()  # proposed ids of eligible Z = 1 rows
        # proposed ids of the Z = 1 roots of lineage rows taken: on the fit grid a root's move
        # can be taken while its eligible row still waits (under ``every`` it never adds one)
        self.lineage_keys: set[str] = set()
        self.last_width = 0  # context width of the newest eligible row
        self._row_failure = ""  # an eligible row that could not be taken (for good)
        self._lineage_failures: dict[str, str] = {}  # root -> its current row's failure
        self._seen = 0
        self._changes = 0
        self._units: dict[int, DesignSpace] = {}

    def sync(self) -> None:
        """Take the eligible observations and lineage changes since the last call."""
        new = self.evidence.eligible_since(self._seen)
        for obs in new[: self._admitted(self._seen + len(new)) - self._seen]:
            self._seen += 1
            try:
                self._observation(obs)
            except ValueError as exc:  # a gain outside its interval, a bad design value
                self._row_failure = self._row_failure or f"row {obs.decision.decision_id}: {exc}"
        # every move of a matured row in ledger order, each with the row it moved to: a
        # resumed reader replays the states (and plan points) the live one passed through
        moves = self.evidence.matured_moves_since(self._changes)
        for root, found in moves[: self._admitted(self._changes + len(moves)) - self._changes]:
            self._changes += 1
            self._lineage_failures.pop(root, None)
            try:
                self._lineage(root, found)
            except ValueError as exc:  # fails the fits while it is the root's row
                self._lineage_failures[root] = f"lineage row of {root}: {exc}"

    def _admitted(self, n: int) -> int:
        return rows_taken(self.posterior.fit_rows, n)

    @property
    def failure(self) -> str:
        """Why the current rows cannot be fitted ("" when they can): an eligible row that
        could not be taken, or a root's current matured lineage row that could not (a row
        version superseded since does not count: it is no longer among the rows)."""
        return self._row_failure or next(iter(self._lineage_failures.values()), "")

    def rows(self, n_context: int) -> WidthRows:
        """The rows of width ``n_context`` (empty when there are none)."""
        return self._width(n_context)

    # -- internals -----------------------------------------------------------------
    def _width(self, c: int) -> WidthRows:
        if c not in self.widths:
            ps = self._unit(c).shared_size
            self.widths[c] = WidthRows(
                GaussianStatistics(ps, c), GaussianStatistics(ps, c), RowTable(ps, c)
            )
        return self.widths[c]

    def _unit(self, c: int) -> DesignSpace:
        if c not in self._units:
            post = self.posterior
            self._units[c] = DesignSpace(
                c, ("",), kind_contrast=post.kind_contrast, rag_contrast=self.rag_contrast
            )
        return self._units[c]

    def _terms(self, obs: Observation, y: float, omega: float) -> RowTerms:
        """The design row of ``obs`` (as ``DesignSpace.row`` in a one-lineage space)."""
        x = np.asarray(obs.decision.context.features, dtype=float)
        unit = self._unit(len(x))
        ps = unit.shared_size
        if obs.z != 1:
            return RowTerms(unit.row(x, 0)[:ps], None, None, y, omega * omega)
        pid = obs.decision.proposed_id or ""
        snap = obs.decision.snapshot(pid)
        kind = snap.kind if snap is not None else "insight"
        cand = obs.decision.candidate(pid)  # the RAG label frozen in the decision row
        rag = cand.rag if cand is not None else None
        row = unit.row(x, 1, "", kind, rag)
        return RowTerms(row[:ps], row[ps:], pid, y, omega * omega)

    def _observation(self, obs: Observation) -> None:
        width = self._width(len(obs.decision.context.features))
        self.last_width = len(obs.decision.context.features)
        y, omega = 0.0, 0.0
        if obs.valid:
            r = self.reward
            t = obs.terminal
            y = r.normalise_gain(obs.decision.context.parent_fitness, float(t.gain or 0.0))
            omega = self._omega(obs)
        terms = self._terms(obs, y, omega)
        width.invalidity.append(terms, obs.invalid)
        if obs.valid:
            width.immediate.add(terms)
            n = width.immediate.n
            if anchor_size(n) == n:  # a plan point: the quadrature is re-planned on these rows
                width.plan_rows = (n, width.immediate.copy())
        if obs.z == 1:
            self.treated_keys[obs.decision.proposed_id or ""] += 1
        width.change(added=obs.decision.decision_id)

    def _omega(self, obs: Observation) -> float:
        """The measurement sd of a valid row (memory-model.md "Rows and eligibility")."""
        t = obs.terminal
        return measurement_sd(
            self.reward.range,
            t.se,
            t.measurement == "deterministic",
            self.posterior.unknown_measurement_sd,
        )

    def _lineage(self, root: str, found: tuple[Observation, LineageRow] | None) -> None:
        """One move of a root's matured row: its old terms leave, the new ones (if any)
        come; each width it touched counts the move, and a width whose moves reach a plan
        point (``anchor_size``) keeps a copy of its delayed-lineage statistics."""
        moved: list[WidthRows] = []
        for width in self.widths.values():
            old = width.lineage_terms.pop(root, None)
            if old is not None:
                width.lineage.remove(old[1])
                width.change(removed=old[0])
                moved.append(width)
        try:
            if found is None:
                return
            obs, row = found
            width = self._width(len(obs.decision.context.features))
            y = float(row.residual or 0.0) / self.reward.range
            fixed = self.posterior.lineage_measurement_sd  # None: the root's own omega
            terms = self._terms(obs, y, self._omega(obs) if fixed is None else fixed)
            if not math.isfinite(y):
                raise ValueError(f"lineage residual {row.residual} is not finite")
            width.lineage.add(terms)
            if terms.key is not None:
                self.lineage_keys.add(terms.key)
            row_id = f"lineage:{root}:v{row.version}"
            width.lineage_terms[root] = (row_id, terms)
            width.change(added=row_id)
            if not any(w is width for w in moved):
                moved.append(width)
        finally:
            for width in moved:
                width.lineage_moves += 1
                n = width.lineage_moves
                if anchor_size(n) == n:  # a plan point of the delayed-lineage head
                    width.lineage_plan_rows = (n, width.lineage.copy())


ANCHOR_MIN = 256  # below this many rows every invalidity fit starts at the prior mean
ANCHOR_STEP = 16  # anchors every 1/16 growth of the rows: Newton from one takes 2-3 steps


_ANCHORS = [ANCHOR_MIN]  # the anchor points so far, in order (``anchor_size``)


def anchor_size(n: int) -> int:
    """The largest anchor point <= n (0 below ``ANCHOR_MIN``): 256, 272, 289, ... rows
    (the points made once, in order, and looked up by bisection: a fit asks several times,
    and the walk from 256 took ~70 steps at 10,000 rows)."""
    global _ANCHORS
    if n < ANCHOR_MIN:
        return 0
    points = _ANCHORS
    if points[-1] <= n:  # extended on a copy, then swapped in whole (readers in threads)
        points = list(points)
        while points[-1] <= n:
            points.append(points[-1] + max(1, points[-1] // ANCHOR_STEP))
        _ANCHORS = points
    return points[bisect.bisect_right(points, n) - 1]


WIDE_EXACT_ROWS = 256  # laplace_prefix: a wide card with fewer near-anchor rows is fitted exactly
# laplace_prefix: a card whose expanded rows' curvature the left-out fourth-order term would
# change by more than this share at the fit's MAP has its near-anchor rows fitted exactly
# (``LogisticLaplaceHead.expansion_error``; the control rows: the exact fit)
EXPANSION_ERROR = 1e-3
NEAR_STEP = 256  # near anchors every 1/256 of the anchor's rows past it ...
NEAR_MIN = 16  # ... and at least this many rows apart
# laplace_prefix: the near anchor keeps its row groups' z z' products (``_Near.outers``) while
# they take at most this many numbers (32 MB: about 30,000 rows at P_s + C = 16)
OUTERS_MAX = 1 << 22


def near_size(n: int) -> int:
    """The largest near-anchor point <= n: the anchor ``k = anchor_size(n)`` plus a whole
    number of steps of max(``NEAR_MIN``, k // ``NEAR_STEP``) rows (0 below ``ANCHOR_MIN``)."""
    k = anchor_size(n)
    if not k:
        return 0
    step = max(NEAR_MIN, k // NEAR_STEP)
    return k + (n - k) // step * step


def grid_size(n: int) -> int:
    """The latest point of the fit grid <= n (memory-model.md "The fit grid"): n itself
    below ``ANCHOR_MIN`` rows, then the near-anchor points (``near_size``)."""
    return n if n < ANCHOR_MIN else near_size(n)


def rows_taken(fit_rows: str, n: int) -> int:
    """How many of the first ``n`` rows (or lineage moves) the heads fit on under
    ``memory.posterior_config.fit_rows``: all of them (``every``), or the latest point of
    the fit grid (``grid``, ``grid_size``)."""
    return grid_size(n) if fit_rows == "grid" else n


Prior = Callable[[DesignSpace], tuple[np.ndarray, np.ndarray]]


class InvalidityFitter:
    """The invalidity head's MAP from a deterministic nearby start.

    (memory-model.md "Invalidity head and chance constraint": the same MAP and Laplace
    posterior, found in fewer steps.)

    The logistic MAP needs every row at each step, so each fit should take few steps.
    It starts from an anchor: the MAP on the first ``anchor_size(n)`` rows (terminal
    order), fitted from the prior mean once per anchor in its own space (its rows'
    lineages only), then mapped into the fit's space (new blocks at their prior mean).
    The anchor depends only on those rows and the aliases of their cards, so a resumed
    run starts every fit where the uninterrupted run did and finds the same MAP, bit for
    bit. Below ``ANCHOR_MIN`` rows a fit starts at the prior mean, as before. The
    wide-level refit (memory-model.md "Card shift levels") starts from the narrow MAP moved
    by the anchor rows' own move between the levels (``_wide_move``: Newton from the anchor
    MAP on the anchor rows with the anchor's cards among the wide ones at the wide level,
    kept with the anchor per set of wide cards), a function of the same rows.

    On the exact path a fit starts nearer still: from the near anchor (``_near_start``), the
    MAP on the first ``near_size(n)`` rows (the anchor's rows plus whole steps of
    max(``NEAR_MIN``, k // ``NEAR_STEP``) rows), Newton from the anchor's MAP mapped into its
    own space, once per near anchor; its wide-level refit from the near anchor rows' own
    move (``_near_move``: Newton on those rows from the near anchor's MAP moved by the anchor
    rows' move). Both are functions of their rows, their cards' aliases and the levels.
    The near anchor's factored F at its MAP (and at each of its wide fits') is the first
    Newton steps' F of the fit (``LogisticLaplaceHead.fit``'s ``chord``).

    ``method="laplace_prefix"`` (``memory.posterior_config.invalidity_fit``; memory-model.md
    "The prefix in Laplace form"): with an anchor, the near anchor's rows enter the fit as
    their loss's third-order expansion at their MAP under the fit's levels (the near
    anchor's fit, or its wide fit: kept with it; on a wide design, P > ``DENSE_MAX_SIZE``,
    its Hessian in block-arrowhead form), so Newton passes over the rows since the near
    anchor only (and over the near-anchor rows of the wide cards with fewer than
    ``WIDE_EXACT_ROWS`` of them, ``LogisticLaplaceHead.fit_prefix``), its first steps with
    the near anchor's factored F at the same levels. A card whose expanded rows the MAP
    moved far (their left-out fourth-order term past ``EXPANSION_ERROR`` of their
    curvature) has its near-anchor rows fitted exactly too (``_far_blocks``). Fits below
    ``prefix_min_rows`` rows
    (1,024: below, the Fisher information, taken at the near anchor's point, is off by
    several per cent and the exact fit is cheap) and a prefix fit that fails take the
    exact fit, and so do the fits with fewer than ``prefix_rows_per_lineage`` rows per
    lineage holding rows (``invalidity_prefix_rows_per_lineage``, 256 in production; 0 here:
    no such limit): the third-order term costs O(lineages) per Newton point, the exact fit
    O(rows) per pass. Those fits are the exact method's fits, bit for bit.
    """

    def __init__(
        self,
        kind_contrast: bool,
        rag_contrast: bool,
        shift_levels: Callable[[DesignSpace], ShiftLevels | None] | None = None,
        method: str = "exact",
        prefix_min_rows: int = 1024,
        prefix_rows_per_lineage: int = 0,
    ) -> None:
        if method not in INVALIDITY_FITS:
            raise ValueError(f"invalidity_fit must be one of {INVALIDITY_FITS}, got {method!r}")
        self.kind_contrast, self.rag_contrast = kind_contrast, rag_contrast
        self.shift_levels = shift_levels  # memory-model.md "Card shift levels"
        self.method, self.prefix_min_rows = method, max(ANCHOR_MIN, prefix_min_rows)
        self.prefix_rows_per_lineage = prefix_rows_per_lineage
        self._anchor: tuple[object, DesignSpace, np.ndarray] | None = None
        # the anchor's design, indicators and prior (mu, v) in its own space, and its rows'
        # MAP's move per set of wide anchor columns (``_wide_move``)
        self._anchor_rows: _AnchorRows | None = None
        self._wide_maps: dict[frozenset[int], np.ndarray | None] = {}
        # the near anchor (exact path): see ``_near_start``
        self._near: _Near | None = None
        # per anchor kind: (anchor space, fit space, their lineage columns): see ``_columns``
        self._mapped: dict[str, tuple[DesignSpace, DesignSpace, np.ndarray, np.ndarray]] = {}
        self.anchors = 0  # anchor fits so far
        self.near_anchors = 0  # near-anchor fits so far
        self.prefix_fits = 0  # fits made with the prefix in Laplace form

    def fit(
        self,
        table: RowTable,
        space: DesignSpace,
        alias: dict[str, str],
        prior: Prior,
    ) -> LogisticLaplaceHead:
        mu, var = prior(space)
        start = self._start(table, space, alias, prior)
        block_of = {k: space.lineage_position(alias.get(k, k)) for k in table.keys}
        levels = self.shift_levels(space) if self.shift_levels is not None else None
        layout = (space.shared_size, space.n_context)
        if (
            self.method == "laplace_prefix"
            and start is not None
            and table.n >= self.prefix_min_rows
            and table.n >= self.prefix_rows_per_lineage * len(set(block_of.values()))
        ):
            rows = self._prefix(table, space, alias, prior, block_of, levels)
            if rows is not None:
                prefixed = LogisticLaplaceHead(mu, var, layout, levels).fit_prefix(rows, rows.point)
                far = _far_blocks(prefixed)
                if far:  # those cards' near-anchor rows fitted exactly, the others expanded
                    rows = self._prefix(table, space, alias, prior, block_of, levels, far)
                    assert rows is not None  # the same near anchor and levels as above
                    if prefixed.narrow_error() <= EXPANSION_ERROR:  # its levels stand
                        prefixed = prefixed.refit_prefix(rows)
                    else:
                        head = LogisticLaplaceHead(mu, var, layout, levels)
                        prefixed = head.fit_prefix(rows, rows.point)
                    far = _far_blocks(prefixed)
                if prefixed.ok_ and far is not None and not far:
                    self.prefix_fits += 1
                    return prefixed
        head = LogisticLaplaceHead(mu, var, layout, levels)
        move = None
        near = None
        if start is not None:  # exact, or a prefix fit not taken: the same exact fit
            near = self._near_start(table, space, alias, prior)
        chord = wide_chord = None
        if near is not None:
            start, chord = near
            if levels is not None:
                move = functools.partial(self._near_move, space, levels.wide_variance)
                wide_chord = functools.partial(self._near_chord, space, levels.wide_variance)
        elif start is not None and levels is not None:
            move = functools.partial(self._wide_move, space, levels.wide_variance)
        x = _design(table, block_of, space)
        return head.fit(
            x,
            table.invalid[: table.n],
            start=start,
            wide_move=move,
            chord=chord,
            wide_chord=wide_chord,
        )

    def _wide_move(
        self,
        space: DesignSpace,
        wide_variance: float,
        wide: np.ndarray,
        slot: str = "anchor",
        state: _AnchorState | None = None,
    ) -> np.ndarray | None:
        """How far the anchor rows' MAP moves when the shift columns ``wide`` (of ``space``)
        go wide, in ``space``'s columns (None: none of them is an anchor card's, or the
        anchor rows' fit at those levels failed). The anchor rows' fit at each set of wide
        anchor blocks is Newton from the anchor MAP, made once and kept with the anchor: a
        function of the anchor's rows and the levels. ``state``: that anchor (the current
        one when None)."""
        if state is None:
            state = self._anchor_state()
        (_, own, gamma), (x, d, mu, var), wide_maps = state
        key = self._own_key(own, space, wide, slot)
        if not key:
            return None
        if key not in wide_maps:
            var = var.copy()
            var[sorted(key)] = wide_variance
            head = LogisticLaplaceHead(mu, var, (own.shared_size, own.n_context))
            head.fit(x, d, start=gamma)
            wide_maps[key] = head.coef_ - gamma if head.ok_ else None
        moved = wide_maps[key]
        if moved is None:
            return None
        return self._carried(moved, own, space, np.zeros(space.size), slot)

    def _anchor_state(self) -> _AnchorState:
        """The current anchor: (key, own space, MAP), its rows, its rows' wide moves."""
        assert self._anchor is not None and self._anchor_rows is not None
        return self._anchor, self._anchor_rows, self._wide_maps

    def _prefix(
        self,
        table: RowTable,
        space: DesignSpace,
        alias: dict[str, str],
        prior: Prior,
        block_of: dict[str, int],
        levels: ShiftLevels | None,
        far: frozenset[int] = frozenset(),
    ) -> _PrefixRows | None:
        """The rows of a ``laplace_prefix`` fit: the near anchor's rows in Laplace form at its
        MAP under the fit's levels, the rows since fitted exactly, and so are the near-anchor
        rows of the lineage blocks ``far`` (of ``space``: ``_far_blocks``) (None: the near
        anchor's fit failed)."""
        near = self._near_anchor(table, space, alias, prior)
        if near.coef is None or near.expansion is None:
            return None
        own = near.own
        target, _ = self._columns(own, space, "near")
        ps = space.shared_size
        columns = np.concatenate([np.arange(ps), target])  # near column j -> fit column j
        blocks = (target[:: space.n_context] - ps) // space.n_context  # near -> fit block
        point = self._carried(near.coef, own, space, prior(space)[0], "near")
        wide = None if levels is None else levels.wide_variance
        to_near = np.full(len(space.lineages), -1)
        to_near[blocks] = np.arange(len(blocks))
        own_far = frozenset(j for j in to_near[sorted(far)].tolist() if j >= 0)
        level = functools.partial(self._near_level, near, wide, far=own_far)
        factor = functools.partial(self._near_factor, near)
        return _PrefixRows(table, space, own, block_of, len(near.rows[1]), point, columns, blocks,
                           level, factor, near.mapped, own_far)  # fmt: skip

    def _near_factor(self, near: _Near, blocks: frozenset[int]) -> Precision | None:
        """The near anchor ``near``'s factored F at its MAP with its lineage ``blocks`` wide
        (made with ``_near_level``'s expansion; None: none)."""
        if not blocks:
            return near.precision
        own = near.own
        return near.wide_chords.get(frozenset(own.shared_size + j * own.n_context for j in blocks))

    def _near_level(
        self,
        near: _Near,
        wide_variance: float | None,
        blocks: frozenset[int],
        far: frozenset[int] = frozenset(),
    ) -> tuple[Quadratic, np.ndarray] | None:
        """(the near anchor ``near``'s rows' loss to third order at their MAP with its lineage
        ``blocks`` (of its own space) at the wide level, without the rows of the wide blocks
        with fewer than ``WIDE_EXACT_ROWS`` near-anchor rows and of the blocks ``far``; those
        rows, which the fit takes exactly) (None: that fit failed). ``near`` is bound when
        the fit is made: a head's ``with_level`` asked later, after the fitter moved on to
        another near anchor, still expands at its own."""
        level = (blocks, far)
        kept = near.levels.get(level)
        if kept is not None or level in near.levels:
            return kept
        if far:
            near.levels[level] = self._near_far(near, wide_variance, blocks, far)
            return near.levels[level]
        if not blocks:
            quad = near.expansion
        else:
            assert wide_variance is not None
            own = near.own
            key = frozenset(own.shared_size + j * own.n_context for j in blocks)
            quad = None
            if self._near_wide(key, wide_variance, near) is not None:
                quad = near.wide_expansions[key]
        if quad is None:
            near.levels[level] = None
            return None
        assert near.design is not None
        lineage = near.design.lineage
        counts = np.bincount(lineage[lineage >= 0], minlength=len(near.own.lineages))
        small = [j for j in sorted(blocks) if counts[j] < WIDE_EXACT_ROWS]
        rows = np.flatnonzero(np.isin(lineage, small))
        quad = _without_own_rows(quad, near, small)
        # the expanded rows' third-order term at the same point (the wide fit's point moves
        # the shared coefficients too: every group's weights are taken there); their rows
        # without the products the term does not read (a copy of ~80 numbers a row)
        expanded = near.design
        if small:
            keep = np.flatnonzero(~np.isin(lineage, small))
            expanded = BlockDesign(expanded.shared[keep], lineage[keep],
                                   expanded.lineage_part[keep], expanded.n_lineages)  # fmt: skip
        cubic = Cubic.of_rows(expanded, quad.point, near.outers)
        quad = dataclasses.replace(quad, cubic=cubic)
        near.levels[level] = (quad, rows)
        return quad, rows

    def _near_far(
        self,
        near: _Near,
        wide_variance: float | None,
        blocks: frozenset[int],
        far: frozenset[int],
    ) -> tuple[Quadratic, np.ndarray] | None:
        """``_near_level`` with the rows of the blocks ``far`` fitted exactly too: the level's
        expansion without those blocks' own expansions at the same point (one pass over
        their rows) and without their groups' third-order terms (the other groups' sums are
        the level's own: no pass)."""
        base = self._near_level(near, wide_variance, blocks)
        if base is None:
            return None
        quad, rows = base
        assert near.design is not None and quad.cubic is not None
        lineage = near.design.lineage
        taken = set(lineage[rows].tolist())
        extra = [j for j in sorted(far) if j not in taken and np.any(lineage == j)]
        cubic = quad.cubic
        quad = _without_own_rows(dataclasses.replace(quad, cubic=None), near, extra)
        rows = np.flatnonzero(np.isin(lineage, sorted(taken | set(extra))))
        return dataclasses.replace(quad, cubic=cubic.without(extra)), rows

    def _start(
        self, table: RowTable, space: DesignSpace, alias: dict[str, str], prior: Prior
    ) -> np.ndarray | None:
        k = anchor_size(table.n)
        if not k:
            return None
        key = _rows_key(table, space, alias, k)
        if self._anchor is None or self._anchor[0] != key:
            own, x, mu, var = self._own_rows(table, key, prior)
            head = LogisticLaplaceHead(mu, var, (own.shared_size, own.n_context))
            anchor = head.fit(x, table.invalid[:k], start=mu)
            self.anchors += 1
            self._wide_maps = {}
            if not anchor.ok_:
                self._anchor = self._anchor_rows = None
                return None
            self._anchor = (key, own, anchor.coef_)
            self._anchor_rows = (x, table.invalid[:k].copy(), mu, var)
        _, own, gamma = self._anchor
        return self._carried(gamma, own, space, prior(space)[0], "anchor")

    def _own_rows(
        self, table: RowTable, key: tuple[int, int, tuple[tuple[str, str], ...]], prior: Prior
    ) -> tuple[DesignSpace, np.ndarray | BlockDesign, np.ndarray, np.ndarray]:
        """(own space, design, prior mean, prior variances) of an anchor's rows (``key``: the
        width, the first ``rows`` rows and their cards' aliases): the space of their own
        lineages only, as a resumed run builds it again from the same rows."""
        width, rows, mapping = key
        lineages = tuple(sorted({lin for _, lin in mapping}))
        own = DesignSpace(
            width, lineages, kind_contrast=self.kind_contrast, rag_contrast=self.rag_contrast
        )
        mu, var = prior(own)
        block_of = {name: own.lineage_position(lin) for name, lin in mapping}
        return own, _design(table, block_of, own, rows=rows), mu, var

    def _carried(
        self, coef: np.ndarray, own: DesignSpace, space: DesignSpace, base: np.ndarray, slot: str
    ) -> np.ndarray:
        """``coef`` of an anchor's space ``own`` carried into ``space``: the shared columns and
        its lineages' blocks (``_columns`` kept per ``slot``), ``base`` elsewhere."""
        out = base.copy()
        ps = space.shared_size
        out[:ps] = coef[:ps]
        target, source = self._columns(own, space, slot)
        out[target] = coef[source]
        return out

    def _columns(
        self, own: DesignSpace, space: DesignSpace, slot: str
    ) -> tuple[np.ndarray, np.ndarray]:
        """(columns in ``space``, columns in ``own``) of the lineage blocks of an anchor's space
        ``own`` (its lineages are all in ``space``), kept per ``slot`` (the anchor, the near
        anchor, the near anchor's space seen from the anchor) while the two spaces stand (the
        reader keeps one space object per layout), instead of a slice per lineage per fit."""
        kept = self._mapped.get(slot)
        if kept is not None and kept[0] is own and (kept[1] is space or kept[1] == space):
            return kept[2], kept[3]
        width = np.arange(space.n_context)
        at = np.array([space.lineage_position(lin) for lin in own.lineages], dtype=int)
        target = (space.shared_size + at[:, None] * space.n_context + width).reshape(-1)
        source = own.shared_size + np.arange(len(own.lineages))[:, None] * own.n_context + width
        self._mapped[slot] = (own, space, target, source.reshape(-1))
        return target, self._mapped[slot][3]

    def _near_start(
        self,
        table: RowTable,
        space: DesignSpace,
        alias: dict[str, str],
        prior: Prior,
    ) -> tuple[np.ndarray, Chord] | None:
        """The fit's start from the near anchor (None: the near anchor is the anchor, or its
        fit failed; the fit then starts from the anchor).

        The near anchor is the MAP on the first ``near_size(n)`` rows in its own space (its
        rows' lineages), Newton from the anchor's MAP mapped into that space (new blocks at
        their prior mean): the rows since the anchor are at most 1/16 of its rows, so a few
        steps, made once per near anchor. A function of those rows, the aliases of their
        cards and the anchor (itself a function of its rows and their aliases), so a resumed
        run starts every fit where the uninterrupted one did. With the start comes the near
        anchor's factored F at its MAP and its columns' places in the fit, the first Newton
        steps' F (a ``Chord``): the fit then factors F at its own MAP only."""
        if near_size(table.n) == anchor_size(table.n):
            return None
        near = self._near_anchor(table, space, alias, prior)
        if near.coef is None or near.precision is None:
            return None
        start = self._carried(near.coef, near.own, space, prior(space)[0], "near")
        target, _ = self._columns(near.own, space, "near")
        return start, (near.precision, np.r_[np.arange(space.shared_size), target])

    def _near_anchor(
        self, table: RowTable, space: DesignSpace, alias: dict[str, str], prior: Prior
    ) -> _Near:
        """The near anchor on the first ``near_size(n)`` rows (fitted now unless kept): Newton
        from the anchor's MAP mapped into its own space (the anchor's own rows when they are
        the same rows). With ``laplace_prefix`` its rows' loss to second order at its MAP comes
        with it (the fit's kept likelihood and X'WX: no pass)."""
        assert self._anchor is not None
        m = near_size(table.n)
        key = _rows_key(table, space, alias, m)
        if self._near is None or self._near.key != key:
            own, x, mu, var = self._own_rows(table, key, prior)
            d = table.invalid[:m].copy()
            _, anchor_own, gamma = self._anchor
            start = self._carried(gamma, anchor_own, own, mu, "anchor->near")
            head = LogisticLaplaceHead(mu, var, (own.shared_size, own.n_context))
            head.fit(x, d, start=start)
            self.near_anchors += 1
            coef, precision = (head.coef_, head.precision) if head.ok_ else (None, None)
            if self._near is not None:  # its products are not asked for again, or rarely
                self._near.outers = None
            self._near = _Near(key, own, coef, (x, d, mu, var), precision, self._anchor_state())
            if head.ok_ and self.method == "laplace_prefix":
                self._near.expansion = head.expansion()
                if isinstance(x, BlockDesign):  # wide: its fit's design is that block form
                    self._near.design = x
                else:
                    block_of = {name: own.lineage_position(lin) for name, lin in key[2]}
                    self._near.design = table.design(block_of, len(own.lineages), m)
                q = own.shared_size + own.n_context
                if m * q * (q + 1) // 2 > OUTERS_MAX:
                    self._near.outers = None  # formed at each expansion instead
        return self._near

    def _near_chord(
        self, space: DesignSpace, wide_variance: float, wide: np.ndarray
    ) -> Chord | None:
        """The wide-level refit's ``Chord``: the factored F of the near anchor rows' fit with
        the same cards wide (made by ``_near_move``; None when there is none)."""
        if self._near_move(space, wide_variance, wide) is None:
            return None
        assert self._near is not None
        precision = self._near.wide_chords[self._own_key(self._near.own, space, wide, "near")]
        target, _ = self._columns(self._near.own, space, "near")
        return precision, np.r_[np.arange(space.shared_size), target]

    def _own_key(
        self, own: DesignSpace, space: DesignSpace, wide: np.ndarray, slot: str
    ) -> frozenset[int]:
        """The columns of an anchor's space ``own`` (the anchor's or the near anchor's, kept
        per ``slot`` as in ``_columns``) among the fit's shift columns ``wide``: the key of
        that anchor's rows' fit with those cards wide."""
        target, source = self._columns(own, space, slot)
        to_own = np.full(space.size, -1)
        to_own[target] = source
        cols = to_own[np.asarray(wide, dtype=int)]
        return frozenset(int(c) for c in cols[cols >= 0])

    def _near_move(
        self, space: DesignSpace, wide_variance: float, wide: np.ndarray
    ) -> np.ndarray | None:
        """``_wide_move`` of the near anchor: how far the near anchor rows' MAP moves when the
        shift columns ``wide`` (of ``space``) go wide, in ``space``'s columns (None: none of
        them is a near-anchor card's, or that fit failed). Newton on the near anchor's rows
        from its MAP moved by the anchor rows' own move between the same levels (``_wide_move``
        in the near anchor's space), once per near anchor and set of wide cards: a function of
        the two anchors' rows and the levels."""
        near = self._near
        assert near is not None and near.coef is not None
        own = near.own
        key = self._own_key(own, space, wide, "near")
        if not key:
            return None
        moved = self._near_wide(key, wide_variance)
        if moved is None:
            return None
        return self._carried(moved, own, space, np.zeros(space.size), "near")

    def _near_wide(
        self, key: frozenset[int], wide_variance: float, near: _Near | None = None
    ) -> np.ndarray | None:
        """The near anchor rows' MAP's move when the columns ``key`` of its own space go wide
        (None: that fit failed): Newton from its MAP moved by its anchor rows' own move, made
        once per near anchor and set of wide columns and kept with it (with its factored F,
        and with ``laplace_prefix`` its rows' loss to second order there). ``near``: that near
        anchor (the current one when None)."""
        near = self._near if near is None else near
        assert near is not None and near.coef is not None
        own = near.own
        if key not in near.wide_maps:
            x, d, mu, var = near.rows
            var = var.copy()
            var[sorted(key)] = wide_variance
            start = near.coef.copy()
            wide_own = np.array(sorted(key), dtype=int)
            moved = self._wide_move(own, wide_variance, wide_own, "anchor->near", near.anchor)
            if moved is not None and np.all(np.isfinite(start + moved)):
                start = start + moved
            head = LogisticLaplaceHead(mu, var, (own.shared_size, own.n_context))
            head.fit(x, d, start=start)
            near.wide_maps[key] = head.coef_ - near.coef if head.ok_ else None
            if head.ok_:
                near.wide_chords[key] = head.precision
                if self.method == "laplace_prefix":
                    near.wide_expansions[key] = head.expansion()
        return near.wide_maps[key]


INVALIDITY_FITS = ("exact", "laplace_prefix")
# an anchor's design, 0/1 indicators and prior (mu, v), in the anchor's own space
_AnchorRows = tuple[np.ndarray | BlockDesign, np.ndarray, np.ndarray, np.ndarray]
# an anchor: (key, own space, MAP), its rows, its rows' MAP's move per set of wide columns
_AnchorState = tuple[
    tuple[object, DesignSpace, np.ndarray], _AnchorRows, dict[frozenset[int], np.ndarray | None]
]


@dataclass
class _Near:
    """The near anchor (``InvalidityFitter._near_start``): its key (width, rows, aliases of
    its cards), its own space, its MAP (None: the fit failed), its rows, its factored F at
    the MAP, and per set of wide columns of its space its rows' MAP's move and factored F
    there (``_near_move``)."""

    key: object
    own: DesignSpace
    coef: np.ndarray | None
    rows: _AnchorRows
    precision: Precision | None  # its factored F at its MAP (None: the fit failed)
    anchor: _AnchorState  # the anchor it was fitted from (its wide moves start its wide fits)
    wide_maps: dict[frozenset[int], np.ndarray | None] = field(default_factory=dict)
    wide_chords: dict[frozenset[int], Precision] = field(default_factory=dict)
    # ``laplace_prefix``: its rows' loss to second order at its MAP, and at each wide fit's
    expansion: Quadratic | None = None
    wide_expansions: dict[frozenset[int], Quadratic] = field(default_factory=dict)
    design: BlockDesign | None = None  # its rows in block form (``laplace_prefix``)
    # per (set of wide blocks, set of far blocks): ``InvalidityFitter._near_level``'s
    # expansion and exact rows
    levels: dict[tuple[frozenset[int], frozenset[int]], tuple[Quadratic, np.ndarray] | None] = (
        field(default_factory=dict)
    )
    # those expansions mapped into a fit's space (``_PrefixRows.terms``), per set of wide
    # blocks and mapping: made once for the fits of one near anchor in one space
    mapped: dict[tuple[object, ...], Quadratic] = field(default_factory=dict)
    # each row group's z z' products (``Cubic.of_rows``'s ``outers``): the near anchor's rows
    # expanded at each set of wide cards (and at retirement's other levels) form them once;
    # dropped when the fitter moves on to the next near anchor (m q (q + 1) / 2 numbers at
    # most, q = P_s + C: 5.7 MB at 6,662 rows and q = 16; None past ``OUTERS_MAX``)
    outers: dict[int, np.ndarray] | None = field(default_factory=dict)


_Terms = tuple[np.ndarray | BlockDesign, np.ndarray, Quadratic]


class _PrefixRows:
    """``invalidity.PrefixRows`` of one ``laplace_prefix`` fit on the first ``table.n`` rows.

    ``terms(wide)``, ``wide`` the lineage blocks at the wide level: the rows since the near
    anchor (its ``m`` rows) are fitted exactly; the near anchor's rows are their loss's
    expansion at their own MAP under the same levels (``level``: the near anchor's fit, or
    its fit with its blocks among ``wide`` wide, kept with it), mapped into the fit's space:
    near column j -> ``columns[j]``; a fit column no near-anchor row touches gets no
    curvature. A card's level moves the problem's own invalid logit too, so the point must
    have the fit's levels. When the near anchor rows' fit under those levels fails, every row
    is fitted exactly. On a wide fit space (P > ``DENSE_MAX_SIZE``) the rows come as a
    ``BlockDesign`` and the quadratic's Hessian as a ``BlockHessian`` (a near block j -> fit
    block ``blocks[j]``). Everything here is a function of the rows, their cards' aliases and
    the levels, so a resumed run fits the same bits.
    """

    def __init__(
        self,
        table: RowTable,
        space: DesignSpace,
        own: DesignSpace,
        block_of: dict[str, int],
        m: int,
        point: np.ndarray,
        columns: np.ndarray,
        blocks: np.ndarray,
        level: Callable[[frozenset[int]], tuple[Quadratic, np.ndarray] | None],
        factor: Callable[[frozenset[int]], Precision | None],
        mapped: dict[tuple[object, ...], Quadratic] | None = None,
        far: frozenset[int] = frozenset(),
    ) -> None:
        self.table, self.block_of, self.lineages = table, block_of, len(space.lineages)
        self.n = table.n  # the table grows on; a later ``with_level`` asks for these rows
        self.m, self.size, self.point = m, space.size, point
        self.columns, self.level, self.factor = columns, level, factor
        self.width = space.n_context
        self.blocks = blocks  # near block j -> fit block blocks[j]
        # fit block -> near block, -1 for none ([-1] reads the trailing -1)
        to_near = np.full(len(space.lineages) + 1, -1)
        to_near[blocks] = np.arange(len(blocks))
        self.to_near, self.near_space = to_near, own
        self._terms: dict[frozenset[int], _Terms] = {}
        # the near anchor's expansions in this space, kept with it across fits (``terms``)
        self._kept = {} if mapped is None else mapped
        self.far = far  # the near blocks whose near-anchor rows are fitted exactly too

    def terms(self, exact: frozenset[int]) -> _Terms:
        kept = self._terms.get(exact)
        if kept is not None:
            return kept
        table = self.table
        own = frozenset(j for j in self.to_near[sorted(exact)].tolist() if j >= 0)
        level = self.level(own)
        if level is None:  # the near anchor rows' fit at these levels failed: every row exactly
            zero = Quadratic(self.point, 0.0, np.zeros(self.size), self._empty())
            design = table.design(self.block_of, self.lineages, self.n)
            kept = self._terms[exact] = (self._form(design), table.invalid[: self.n], zero)
            return kept
        quad, small = level
        rows = np.concatenate([small, np.arange(self.m, self.n)])
        design = table.design(self.block_of, self.lineages, index=rows)
        kept = (self._form(design), table.invalid[rows], self._expansion(own, quad))
        self._terms[exact] = kept
        return kept

    def _expansion(self, own: frozenset[int], quad: Quadratic) -> Quadratic:
        """The near anchor's expansion ``quad`` at its levels ``own`` mapped into the fit's
        space: made once per mapping and kept with the near anchor (the next fits of the
        same near anchor in the same space map the same arrays the same way)."""
        key = (own, self.far, self.size, self.columns.tobytes(), self.blocks.tobytes(),
               self.point.tobytes())  # fmt: skip
        mapped = self._kept.get(key)
        if mapped is not None:
            return mapped
        point = self.point.copy()
        point[self.columns] = quad.point
        grad = np.zeros(self.size)
        grad[self.columns] = quad.grad
        cubic = None if quad.cubic is None else quad.cubic.mapped(self.blocks, self.size)
        mapped = Quadratic(point, quad.value, grad, self._mapped(quad.hess), cubic)
        self._kept[key] = mapped
        return mapped

    def chord(self, exact: frozenset[int]) -> Chord | None:
        """The near anchor rows' factored F at the quadratic's point (its MAP at these levels)
        and its columns' places in the fit: the Newton steps' first F."""
        own = frozenset(j for j in self.to_near[sorted(exact)].tolist() if j >= 0)
        precision = self.factor(own)
        return None if precision is None else (precision, self.columns)

    def _mapped(self, hess: np.ndarray | BlockHessian) -> np.ndarray | BlockHessian:
        """A near-anchor-space Hessian in the fit's space and form (a fit column no near-anchor
        row touches: no curvature)."""
        if self.size <= DENSE_MAX_SIZE:  # then the near anchor's design is dense too
            assert isinstance(hess, np.ndarray)
            out = np.zeros((self.size, self.size))
            out[np.ix_(self.columns, self.columns)] = hess
            return out
        if isinstance(hess, np.ndarray):
            hess = BlockHessian.of_dense(hess, self.near_space.shared_size, self.width)
        return hess.mapped(self.blocks, self.size)

    def _empty(self) -> np.ndarray | BlockHessian:
        """A zero Hessian in the fit's form."""
        if self.size <= DENSE_MAX_SIZE:
            return np.zeros((self.size, self.size))
        ps, c = self.near_space.shared_size, self.width
        none = np.zeros(0, dtype=int)
        return BlockHessian(np.zeros((ps, ps)), none, np.zeros((0, c, c)), np.zeros((0, c, ps)),
                            self.size)  # fmt: skip

    def _form(self, design: BlockDesign) -> np.ndarray | BlockDesign:
        """``design`` in the fit's form: a ``BlockDesign`` when wide, else dense."""
        return design if self.size > DENSE_MAX_SIZE else design.to_dense()


def _without_own_rows(quad: Quadratic, near: _Near, blocks: Sequence[int]) -> Quadratic:
    """``quad`` without the expansion at its point of the near anchor's rows of each lineage
    block of ``blocks`` (of the near anchor's space), one pass over each block's rows: the
    rows a fit then takes exactly."""
    assert near.design is not None
    lineage = near.design.lineage
    x, d = near.rows[0], near.rows[1]
    for j in blocks:
        mine = np.flatnonzero(lineage == j)
        part = x.take(mine) if isinstance(x, BlockDesign) else x[mine]
        quad = quad.minus(Quadratic.of_rows(part, d[mine], quad.point))
    return quad


def _far_blocks(head: LogisticLaplaceHead) -> frozenset[int] | None:
    """The lineage blocks of a ``laplace_prefix`` fit whose expanded rows' truncation error
    at its MAP is past ``EXPANSION_ERROR`` (``LogisticLaplaceHead.expansion_error``): empty
    when none is, None when the fit failed or the control rows' is (they are the
    expansion's rows in every fit: the exact fit then)."""
    if not head.ok_:
        return None
    control, lineages, error = head.expansion_error()
    if control > EXPANSION_ERROR:
        return None
    return frozenset(lineages[error > EXPANSION_ERROR].tolist())


def _rows_key(
    table: RowTable, space: DesignSpace, alias: dict[str, str], rows: int
) -> tuple[int, int, tuple[tuple[str, str], ...]]:
    """An anchor's key: the width, its first ``rows`` rows and the aliases of their cards."""
    mapping = tuple((name, alias.get(name, name)) for name in _names(table, rows))
    return (space.n_context, rows, mapping)


def _names(table: RowTable, rows: int) -> list[str]:
    """The block keys of the first ``rows`` rows of ``table``, in key order (one pass in C)."""
    present = np.flatnonzero(np.bincount(table.key[:rows] + 1, minlength=1)[1:])
    return [table.keys[i] for i in present.tolist()]


def _design(
    table: RowTable, block_of: dict[str, int], space: DesignSpace, rows: int | None = None
) -> np.ndarray | BlockDesign:
    """The first ``rows`` (all) rows of ``table`` in ``space``: block form when wide."""
    design = table.design(block_of, len(space.lineages), rows)
    return design if space.size > DENSE_MAX_SIZE else design.to_dense()
