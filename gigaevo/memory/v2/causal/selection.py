"""One selection decision from fitted heads (memory-model.md "Policy"), composed from the pure
pieces.

No I/O: the caller supplies fitted heads, the decision context and the candidate cards.
"""

from __future__ import annotations

import itertools
import os
import threading
import weakref
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from gigaevo.memory.v2.causal.arrowhead import BlockDesign
from gigaevo.memory.v2.causal.blr import BayesianLinearHead
from gigaevo.memory.v2.causal.cardrows import (  # (tests and callers import them from here too)
    AcceptanceMap,
    CandidateCard,
    CandidateSet,
    _take,
    card_rows,
)
from gigaevo.memory.v2.causal.chance import acceptance_arrays
from gigaevo.memory.v2.causal.errors import DesignError
from gigaevo.memory.v2.causal.exchangeable import (
    ExchangeableCards,
    block_votes,
    exchangeable_top_two,
)
from gigaevo.memory.v2.causal.features import DesignSpace
from gigaevo.memory.v2.causal.invalidity import Acceptance, LogisticLaplaceHead
from gigaevo.memory.v2.causal.policy import (
    CardSummary,
    Draw,
    Proposal,
    WorldVotes,
    abstain_proposal,
    control_values,
    draw_decision,
    head_allows_selection,
    hurdle_values,
    match_worlds,
    proposal_distribution,
    rng_stream,
    summarise_card,
    world_effects,
)
from gigaevo.memory.v2.causal.projection import (
    BlockStack,
    CardLayout,
    block_stack,
    draw_arm_pairs,
    head_latents,
    head_worlds,
    projector,
    row_groups,
)


@dataclass(frozen=True)
class SelectionConfig:
    """Policy constants (defaults of memory-model.md "Symbols and defaults")."""

    offer_probability: float = 0.7
    epsilon: float = 0.05
    delta: float = 0.10
    alpha: float = 0.10
    summary_draws: int = 1024
    world_draws: int = 512
    draw_threads: int = 2  # heads whose worlds are drawn at once (1: one after another)


@dataclass(frozen=True)
class Selection:
    """Outcome of one decision.

    Attributes:
        proposal: rho over the safe set; draw: proposal / offer draw and propensities.
        acceptance: P_acc per candidate id; summary: S_p summary of the proposed card (or None).
        abstain_reason: why rho_0 = 1 was forced ("" when the policy ran).
    """

    proposal: Proposal
    draw: Draw
    acceptance: Mapping[str, Acceptance] = field(default_factory=dict)
    summary: CardSummary | None = None
    abstain_reason: str = ""
    # each candidate's position among the proposal's cards (-1: not proposable), in the
    # order of ``acceptance`` (None: looked up from the ids when built)
    proposal_at: np.ndarray | None = None

    def __post_init__(self) -> None:
        if self.proposal_at is None:
            at = {cid: i for i, cid in enumerate(self.proposal.card_ids)}
            n = len(self.acceptance)
            where = np.fromiter((at.get(cid, -1) for cid in self.acceptance), np.intp, count=n)
            object.__setattr__(self, "proposal_at", where)

    def candidate_columns(self) -> tuple[list[str], np.ndarray]:
        """(every candidate's id ascending, its position among the proposal's cards or -1):
        the candidates a decision logs are those of ``acceptance``, or the proposal's when
        no acceptance was computed."""
        ids = list(self.acceptance) if self.acceptance else list(self.proposal.card_ids)
        at = self.proposal_at if self.acceptance else np.arange(len(ids), dtype=np.intp)
        assert at is not None
        ordered = sorted(ids)
        if ordered != ids:
            order = sorted(range(len(ids)), key=ids.__getitem__)
            at = at[np.asarray(order, dtype=np.intp)]
        return ordered, np.asarray(at, dtype=np.intp)


def select(
    decision_key: str,
    space: DesignSpace,
    x: np.ndarray,
    gain_bounds: tuple[float, float],
    metric_range: float,
    cards: Sequence[CandidateCard],
    immediate: BayesianLinearHead,
    invalidity: LogisticLaplaceHead,
    config: SelectionConfig | None = None,
    pending: Mapping[str, int] | None = None,
    lineage: BayesianLinearHead | None = None,
) -> Selection:
    """Gate, safety, probability matching, exploration and draws for one mutation attempt.

    Args:
        x: (C,) decision context; gain_bounds: (G-, G+) of the parent.
        cards: candidates after lineage exclusion and the pending filter.
        pending: nu_j (pending immediate + lineage outcomes) per card id.
        lineage: the delayed-lineage head when active (>= 1 lineage row,
            memory-model.md "Delayed-lineage head");
            its draws share each world with the immediate and invalidity draws.
    """
    cfg = config or SelectionConfig()
    reason = ""
    if not head_allows_selection(immediate.health_):
        reason = "immediate head not OK or at boundary"
    elif not invalidity.ok_:
        reason = f"invalidity head failed: {invalidity.failure_}"
    if reason or not cards:
        return _abstain(decision_key, cfg, reason or "no candidates")
    cset = CandidateSet.of(cards)
    z0 = space.row(x, 0)
    ids = cset.ids
    rows = card_rows(space, x, cset)
    heads = (immediate, invalidity) if lineage is None else (immediate, invalidity, lineage)
    blocks, hot = exchangeable_blocks(heads, rows, cset.codes()[0])
    # the cards of a block share their rows and their blocks' posterior, so their invalidity
    # moments and P_acc: one representative each. All at once: batched (eta-bar, Sigma_eta),
    # vectorised integral (memory-model.md "Invalidity head and chance constraint")
    rep = np.empty(len(cards), dtype=int)
    rep[hot] = np.arange(len(hot))
    for b, members in enumerate(blocks):
        rep[members] = len(hot) + b
    firsts = np.array([members[0] for members in blocks], dtype=int)
    means, covs = invalidity.linear_predictors(z0, _take(rows, np.r_[hot, firsts]))
    # a card whose certified bound clears alpha is admitted without its integral
    accepted = acceptance_arrays(
        means, covs, delta=cfg.delta, shared_control=True, certify=cfg.alpha
    )
    admitted = accepted.admitted(cfg.alpha)
    acceptance = AcceptanceMap(ids, rep, accepted)
    safe_at = np.flatnonzero(admitted[rep])
    if not len(safe_at):
        return _abstain(decision_key, cfg, "no safe card", acceptance)
    if not cset.ascending and any(a > b for a, b in itertools.pairwise(ids[j] for j in safe_at)):
        safe_at = np.array(sorted(safe_at.tolist(), key=ids.__getitem__), dtype=int)
    safe = cset.id_list(safe_at)
    z1 = _take(rows, safe_at)
    # world draws project each head on the rows; one shared-block draw per world and head
    at_safe = np.full(len(cards), -1)
    at_safe[safe_at] = np.arange(len(safe_at))
    safe_blocks = [np.sort(at_safe[m]) for b, m in enumerate(blocks) if admitted[len(hot) + b]]
    safe_hot = np.sort(at_safe[hot[admitted[: len(hot)]]])
    votes = world_votes(decision_key, heads, z0, z1, safe, safe_blocks, safe_hot, gain_bounds, cfg)
    proposal = proposal_distribution(votes, pending, cfg.epsilon)
    # the proposal's cards are the safe ones in ascending id order, as ``safe``
    proposal_at = at_safe if tuple(safe) == proposal.card_ids else None
    draw = _draw(decision_key, proposal, cfg)
    summary = None
    if draw.proposed is not None:
        i = ids.index(draw.proposed)
        r = rep[i]
        summary = _summary(
            rng_stream(decision_key, "summary"), space, x, cards[i], (means[r], covs[r]),
            immediate, lineage, gain_bounds, metric_range, cfg.summary_draws,
        )  # fmt: skip
    return Selection(proposal, draw, acceptance, summary, proposal_at=proposal_at)


def world_votes(
    decision_key: str,
    heads: Sequence[BayesianLinearHead | LogisticLaplaceHead],
    z0: np.ndarray,
    z1: np.ndarray | BlockDesign,
    safe: Sequence[str],
    blocks: Sequence[np.ndarray],
    hot: np.ndarray,
    gain_bounds: tuple[float, float],
    cfg: SelectionConfig,
) -> WorldVotes:
    """Winner and challenger of each of the S_w worlds over the safe cards (memory-model.md
    "Policy").

    Args:
        safe: the safe cards' ids, ascending; z1: their rows.
        blocks: blocks of exchangeable safe cards (``exchangeable_blocks``), as ascending
            positions among ``safe``; hot: the other positions, ascending.

    A block's cards are not drawn card by card: its two best in every world come from
    ``exchangeable_top_two`` on the ``worlds`` stream ``EXCHANGEABLE_STREAM``, the other
    cards' latents from the heads' streams. Which cards form blocks depends on the fit and
    the cards only, so a decision draws the same whatever is cached.
    """
    n = cfg.world_draws
    if not blocks:
        latents = world_latents(decision_key, heads, z0, z1, n, cfg.draw_threads)
        lineage = latents[2] if len(heads) > 2 else None
        return match_worlds(safe, world_effects(latents[0], latents[1], gain_bounds, lineage))
    assert isinstance(z1, BlockDesign)
    z1_hot = _take(z1, hot)
    assert isinstance(z1_hot, BlockDesign)
    draws = world_draws(decision_key, heads, z0, z1_hot, n, cfg.draw_threads)
    lineage = (draws[2][0], draws[2][1]) if len(heads) > 2 else None
    q0 = control_values(
        draws[0][0], draws[1][0], gain_bounds, None if lineage is None else lineage[0]
    )
    effect = world_effects(draws[0][:2], draws[1][:2], gain_bounds, lineage)
    stream = rng_stream(decision_key, "worlds", EXCHANGEABLE_STREAM)
    tops = []
    for members in blocks:
        law = block_law(heads, z1, members, [d[2] for d in draws])
        tops.append(exchangeable_top_two(law, q0, gain_bounds, stream))
    return block_votes(tuple(safe), hot, effect, tops)


EXCHANGEABLE_MIN = 32  # exchangeable safe cards from which a block is drawn by its two best
EXCHANGEABLE_STREAM = 3  # ``worlds`` counter of the blocks' stream (heads use 0, 1, 2)


def exchangeable_blocks(
    heads: Sequence[BayesianLinearHead | LogisticLaplaceHead],
    z1: np.ndarray | BlockDesign,
    codes: np.ndarray | None = None,
) -> tuple[list[np.ndarray], np.ndarray]:
    """Blocks of exchangeable cards among the rows ``z1``, and the other rows (ascending).

    Cards are exchangeable when each is alone in its lineage block, that block has no rows
    in any head and the same posterior in every node (``BlockStack.steady``: its prior),
    and their rows, the blocks' means and prior sds are equal. Groups smaller than
    ``EXCHANGEABLE_MIN`` stay with the other cards.

    ``codes`` (optional, one per row): equal codes mean equal rows (``card_rows``: a card's
    row is its (kind, RAG label)'s). The rows are then compared once per distinct code, in
    order of first appearance, not row by row: ``row_groups`` numbers equal rows by their
    first appearance (or, past a few, by sorting the distinct rows), and the first row of
    each distinct row is the first row of one of its codes, so the numbers are the same.
    """
    everyone = np.arange(len(z1.lineage) if isinstance(z1, BlockDesign) else len(z1))
    if not isinstance(z1, BlockDesign) or len(everyone) < EXCHANGEABLE_MIN:
        return [], everyone
    stacks = [st for st in map(block_stack, heads) if st is not None]
    if len(stacks) < len(heads):  # a head not in block form
        return [], everyone
    steady = [st.steady for st in stacks]
    if codes is None:
        cand = _steady_singles(z1, steady)
        if len(cand) < EXCHANGEABLE_MIN:
            return [], everyone
        rows = row_groups(np.hstack([z1.shared[cand], z1.lineage_part[cand]]))
        return _group_blocks(cand, rows, steady, z1.lineage, len(everyone))
    # (kind, RAG label) codes: everything but the distinct codes' rows (which move with the
    # context) is kept from the last call on the same fit and cards (``_BlockMemo``)
    memo = _BLOCK_MEMO.get(stacks, z1, codes)
    if len(memo.cand) < EXCHANGEABLE_MIN:
        return [], everyone
    per_code = row_groups(np.hstack([z1.shared[memo.reps], z1.lineage_part[memo.reps]]))
    found = memo.blocks.get(per_code.tobytes())
    if found is None:
        rows = per_code[memo.code_rank]
        found = _group_blocks(memo.cand, rows, steady, z1.lineage, len(everyone))
        for members in (*found[0], found[1]):  # handed to every later decision: read-only
            members.flags.writeable = False
        memo.blocks[per_code.tobytes()] = found
    return list(found[0]), found[1]


def _steady_singles(z1: BlockDesign, steady: Sequence[np.ndarray]) -> np.ndarray:
    """The rows alone in their lineage block whose block is steady in every head
    (``BlockStack.steady`` of each, given), ascending."""
    lin = z1.lineage
    counts = np.bincount(lin[lin >= 0], minlength=z1.n_lineages)
    ok = lin >= 0
    ok[ok] = counts[lin[ok]] == 1
    for st in steady:
        ok[ok] = st[lin[ok]] >= 0
    return np.flatnonzero(ok)


def _group_blocks(
    cand: np.ndarray, rows: np.ndarray, steady: Sequence[np.ndarray], lin: np.ndarray, n: int
) -> tuple[list[np.ndarray], np.ndarray]:
    """Blocks of ``cand`` with equal row numbers ``rows`` and equal steady numbers in every
    head, of at least ``EXCHANGEABLE_MIN`` rows; and the other rows of ``n`` (ascending)."""
    key = np.column_stack([rows] + [st[lin[cand]] for st in steady])
    group = row_groups(key)
    sizes = np.bincount(group)
    blocks = [cand[group == g] for g in np.flatnonzero(sizes >= EXCHANGEABLE_MIN)]
    taken = np.zeros(n, dtype=bool)
    for members in blocks:
        taken[members] = True
    return blocks, np.flatnonzero(~taken)


@dataclass(eq=False)
class _BlockMemo:
    """What ``exchangeable_blocks`` finds from one fit (the heads' stacks), one design's
    lineage column and one set of row codes, none of which depends on the decision's
    context: the candidate rows, each distinct code's first row among them (``reps``) and
    the rank of each candidate's code, and the blocks found per numbering of the distinct
    codes' rows. Kept only for read-only lineage and code columns (a ``CandidateSet``'s);
    the fit and the columns are held by weak reference, so the memo keeps none of them
    alive and a freed one never matches."""

    sources: tuple[weakref.ref[object], ...]  # the stacks, the lineage column, the codes
    threshold: int  # the EXCHANGEABLE_MIN it was built under
    cand: np.ndarray
    reps: np.ndarray
    code_rank: np.ndarray
    blocks: dict[bytes, tuple[list[np.ndarray], np.ndarray]] = field(default_factory=dict)

    @classmethod
    def of(cls, sources: tuple[object, ...], codes: np.ndarray, cand: np.ndarray) -> _BlockMemo:
        _, first, inverse = np.unique(codes[cand], return_index=True, return_inverse=True)
        order = np.argsort(first)  # the distinct codes by first appearance among ``cand``
        rank = np.empty(len(order), dtype=int)
        rank[order] = np.arange(len(order))
        reps = cand[first[order]]  # each distinct code's first row
        refs = tuple(weakref.ref(x) for x in sources)
        return cls(refs, EXCHANGEABLE_MIN, cand, reps, rank[np.reshape(inverse, -1)])

    def matches(self, sources: tuple[object, ...]) -> bool:
        return (
            self.threshold == EXCHANGEABLE_MIN
            and len(self.sources) == len(sources)
            and all(ref() is x for ref, x in zip(self.sources, sources, strict=True))
        )


class _LastBlockMemo:
    """The process's last ``_BlockMemo`` (one bank state and fit at a time: a decision
    after a refit or a bank change builds a new one)."""

    def __init__(self) -> None:
        self._last: _BlockMemo | None = None

    def get(self, stacks: Sequence[BlockStack], z1: BlockDesign, codes: np.ndarray) -> _BlockMemo:
        """The memo of (``stacks``, ``z1``'s lineage column, ``codes``), built when the last
        one is of others (and kept only when both columns are read-only)."""
        sources = (*stacks, z1.lineage, codes)
        kept = not z1.lineage.flags.writeable and not codes.flags.writeable
        last = self._last  # one read: another thread may replace it
        if kept and last is not None and last.matches(sources):
            return last
        memo = _BlockMemo.of(sources, codes, _steady_singles(z1, [st.steady for st in stacks]))
        if kept:
            self._last = memo
        return memo


_BLOCK_MEMO = _LastBlockMemo()


def block_law(
    heads: Sequence[BayesianLinearHead | LogisticLaplaceHead],
    z1: BlockDesign,
    members: np.ndarray,
    shared: Sequence[np.ndarray],
) -> ExchangeableCards:
    """The law of a block's latents in each world: per head, centre = the world's shared
    coefficients (S, P_s) on the members' shared row plus the block mean on their lineage
    part, sd = the prior sd of the lineage block on that part."""
    j = members[0]
    u, c = z1.lineage_part[j], z1.lineage_part.shape[1]
    centres, sds = [], []
    for head, beta in zip(heads, shared, strict=True):
        st = block_stack(head)
        assert st is not None
        ps = st.inv_s.shape[1]
        cols = slice(ps + z1.lineage[j] * c, ps + (z1.lineage[j] + 1) * c)
        centres.append(beta @ z1.shared[j] + float(st.means[0, cols] @ u))
        sds.append(float(np.sqrt(np.sum(st.components[0].prior_sd[cols] ** 2 * u**2))))
    if min(sds) <= 0.0:
        raise DesignError("an exchangeable block needs a positive prior sd in every head")
    return ExchangeableCards(members, tuple(centres), tuple(sds))


def world_draws(
    decision_key: str,
    heads: Sequence[BayesianLinearHead | LogisticLaplaceHead],
    z0: np.ndarray,
    z1: BlockDesign,
    n: int,
    threads: int = 1,
) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """``world_latents`` of block-arrowhead heads with the worlds' shared coefficients."""
    streams = [rng_stream(decision_key, "worlds", i) for i in range(len(heads))]
    for head in heads:
        block_stack(head)
    layout = CardLayout.of(z1)  # how the rows fall in blocks: the same for every head
    if threads <= 1 or len(heads) < 2 or len(z1.lineage) * n < THREADED_DRAWS:
        return [
            head_worlds(h, z0, z1, n, rng, layout) for h, rng in zip(heads, streams, strict=True)
        ]
    jobs = [
        _draw_pool(threads).submit(head_worlds, h, z0, z1, n, rng, layout)
        for h, rng in zip(heads, streams, strict=True)
    ]
    return [job.result() for job in jobs]


def world_latents(
    decision_key: str,
    heads: Sequence[BayesianLinearHead | LogisticLaplaceHead],
    z0: np.ndarray,
    z1: np.ndarray | BlockDesign,
    n: int,
    threads: int = 1,
) -> list[tuple[np.ndarray, np.ndarray]]:
    """The S_w world draws of every head (memory-model.md "Policy"), head i from ``worlds`` stream
    i.

    The heads are independent given the data, so each has its own stream (counter = its
    position) and the draws do not depend on ``threads``: with more than one, and at least
    ``THREADED_DRAWS`` latent values per head (a small bank is drawn faster than a thread
    hand-off), the heads are drawn at once on a small shared thread pool (numpy releases the
    GIL in the heavy parts).
    """
    streams = [rng_stream(decision_key, "worlds", i) for i in range(len(heads))]
    # per-fit factors built here, only read by the workers; block rows: how they fall in
    # lineage blocks found once for every head (``CardLayout``), as ``world_draws`` does
    stacks = [block_stack(head) for head in heads]
    layout = None
    if isinstance(z1, BlockDesign) and any(st is not None for st in stacks):
        layout = CardLayout.of(z1)
    n_cards = len(z1.lineage) if isinstance(z1, BlockDesign) else len(z1)
    if threads <= 1 or len(heads) < 2 or n_cards * n < THREADED_DRAWS:
        return [
            head_latents(h, z0, z1, n, rng, layout) for h, rng in zip(heads, streams, strict=True)
        ]
    jobs = [
        _draw_pool(threads).submit(head_latents, h, z0, z1, n, rng, layout)
        for h, rng in zip(heads, streams, strict=True)
    ]
    return [job.result() for job in jobs]


THREADED_DRAWS = 64 * 512  # cards x worlds per head from which the heads go to threads
_POOL: tuple[int, ThreadPoolExecutor] | None = None
_POOL_LOCK = threading.Lock()


def _draw_pool(threads: int) -> ThreadPoolExecutor:
    """The process's world-draw pool with ``threads`` workers (made once, remade on resize)."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is None or _POOL[0] != threads:
            if _POOL is not None:
                _POOL[1].shutdown(wait=True)
            _POOL = (threads, ThreadPoolExecutor(threads, thread_name_prefix="memory-worlds"))
        return _POOL[1]


def _forget_pool_in_child() -> None:
    """A forked child has none of the pool's threads: it makes its own on first use."""
    global _POOL, _POOL_LOCK
    _POOL = None
    _POOL_LOCK = threading.Lock()  # the parent may have held it at the fork


os.register_at_fork(after_in_child=_forget_pool_in_child)


def _summary(
    stream: np.random.Generator,
    space: DesignSpace,
    x: np.ndarray,
    card: CandidateCard,
    invalid_moments: tuple[np.ndarray, np.ndarray],
    immediate: BayesianLinearHead,
    lineage: BayesianLinearHead | None,
    gain_bounds: tuple[float, float],
    metric_range: float,
    n: int,
) -> CardSummary:
    """S_p summary draws of the proposed card from the exact law of its arm predictors.

    Per head only (z_0'theta, z_1'theta) enters the summary (memory-model.md "Policy"), so each
    pair is drawn
    from its bivariate law (a normal mixture over the sigma nodes, one normal for the Laplace
    head) instead of projecting full coefficient vectors: same law, O(S_p) normals.
    """
    z0 = space.row(x, 0)
    z1 = space.row(x, 1, card.lineage, card.kind, card.rag)

    def pair(head: BayesianLinearHead) -> tuple[np.ndarray, np.ndarray]:
        draws = projector(head, space).draw(card.lineage, z0, z1, n, stream)
        return draws[:, 0], draws[:, 1:]

    beta = pair(immediate)
    eta = draw_arm_pairs(*invalid_moments, n, stream)
    beta_lineage = None if lineage is None else pair(lineage)
    values = hurdle_values(beta, (eta[:, 0], eta[:, 1:]), gain_bounds, beta_lineage)
    return summarise_card(values, 0, metric_range)


def _draw(decision_key: str, proposal: Proposal, cfg: SelectionConfig) -> Draw:
    u1 = float(rng_stream(decision_key, "proposal").random())
    u2 = float(rng_stream(decision_key, "offer").random())
    return draw_decision(proposal, cfg.offer_probability, u1, u2)


def _abstain(
    decision_key: str,
    cfg: SelectionConfig,
    reason: str,
    acceptance: Mapping[str, Acceptance] | None = None,
) -> Selection:
    proposal = abstain_proposal()
    acc = acceptance or {}
    at = np.full(len(acc), -1, dtype=np.intp)  # no card is proposable
    return Selection(proposal, _draw(decision_key, proposal, cfg), acc, None, reason, at)
