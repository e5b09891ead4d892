"""The chance constraint of many cards at once (memory-model.md "Invalidity head and chance
constraint"), vectorised.

``acceptance_probability`` integrates one card with adaptive quadrature (a few ms each).
Here every card is integrated together on two fixed composite Gauss-Legendre rules over
[-10, 10] (coarse: 20 panels, fine: 40 panels, 8 nodes each). A card takes the fast
result only when it is plainly resolved:

- the fine and coarse rules agree to ``tolerance / 100`` (the reported error bound is
  that difference plus the 2 Phi(-10) tail, as in the careful path), and
- the inner normal cdf moves by at most ``MAX_STEP`` between neighbouring fine nodes
  (a sharp transition that both rules could straddle alike is never trusted).

Every other card (singular, non-finite, unresolved, or the "credible joint safe" cap)
goes through the careful ``acceptance_probability``, so the conservative guarantee is
unchanged: P_acc - error is reported and failures give P_acc = 0. Cards whose
(eta-bar, Sigma_eta) coincide exactly (all cold cards of one kind share them) are
integrated once.

A decision needs only which cards are admitted. Most cards are admitted by a wide
margin, which a closed-form lower bound of P_acc (``certified``: two normal cdfs a card)
proves without integrating; only the cards it cannot certify are integrated at once, the
others when their floats are asked for.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from gigaevo.memory.v2.causal.invalidity import Acceptance, acceptance_probability

MAX_STEP = 0.05
_TANH_DELTA = 1e-6  # below this margin p_0 is computed with expit (full relative accuracy)
_TAIL = 1.523970604832094e-23  # 2.0 * scipy.special.ndtr(-10.0), bit for bit (no scipy import)


def _composite(panels: int, order: int = 8) -> tuple[np.ndarray, np.ndarray]:
    x, w = np.polynomial.legendre.leggauss(order)
    edges = np.linspace(-10.0, 10.0, panels + 1)
    half = 0.5 * np.diff(edges)
    mid = 0.5 * (edges[:-1] + edges[1:])
    nodes = (mid[:, None] + half[:, None] * x[None, :]).reshape(-1)
    weights = (half[:, None] * w[None, :]).reshape(-1) * np.exp(-0.5 * nodes**2)
    return nodes, weights / math.sqrt(2.0 * math.pi)


_FINE_T, _FINE_W = _composite(40)
_COARSE_T, _COARSE_W = _composite(20)


def _inner(
    t: np.ndarray, m0: np.ndarray, sd0: np.ndarray, m1: np.ndarray, zeta: np.ndarray,
    vs: np.ndarray, delta: float, out: np.ndarray | None = None, work: np.ndarray | None = None,
) -> np.ndarray:  # fmt: skip
    """Phi(gap(t) / varsigma) for cards (rows of m1, zeta, vs) at nodes t (columns): (J, K).

    (m0, sd0) are the control arm's (eta-bar_0, sd_0): one per card, or one pair for every
    card (length 1; a decision's cards share one control row). Shared, logit(p_0(t) + delta)
    is taken once, a row of nodes, instead of once per card (elementwise the same operations
    on the same floats). ``out`` receives the result and ``work`` is scratch, both (J, K)
    (new arrays when not given): each element is ((lam - m1) - zeta t) / varsigma."""
    from scipy.special import ndtr

    shape = (len(m1), len(t))
    lam = _control_logit(t, m0, sd0, delta)
    if out is None:  # each card's own control row: its logits are the output's space
        out = lam if lam.shape == shape else np.empty(shape)
    work = np.empty(shape) if work is None else work
    np.subtract(lam, m1[:, None], out=out)
    np.multiply(zeta[:, None], t[None, :], out=work)
    out -= work
    out /= vs[:, None]
    return ndtr(out, out=out)


def _control_logit(t: np.ndarray, m0: np.ndarray, sd0: np.ndarray, delta: float) -> np.ndarray:
    """logit(expit(m0 + sd0 t) + delta) for rows (m0, sd0) at nodes t (columns); +inf where
    p_1 may be anything (p_0 + delta >= 1: the whole gap is admissible)."""
    from scipy.special import expit

    if delta >= _TANH_DELTA:
        # expit(x) = (1 + tanh(x / 2)) / 2, several times faster; its absolute error
        # (~1e-16 where expit is tiny) is nothing next to delta
        p = np.multiply(sd0[:, None], 0.5 * t[None, :])
        p += 0.5 * m0[:, None]
        np.tanh(p, out=p)
        p *= 0.5
        p += 0.5 + delta
    else:
        p = expit(m0[:, None] + sd0[:, None] * t[None, :]) + delta
    over = p >= 1.0
    with np.errstate(divide="ignore", invalid="ignore"):
        lam = np.log(p / (1.0 - p))
    lam[over] = np.inf
    return lam


def _fast(
    means: np.ndarray, covs: np.ndarray, delta: float, tolerance: float, shared: bool = False
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(value, error, resolved) of the fixed rules for well-posed cards (J,) each; ``shared``:
    every card has the first card's (eta-bar_0, Sigma_00) (one control row)."""
    m0, m1 = means[:, 0], means[:, 1]
    s00, s11, s01 = covs[:, 0, 0], covs[:, 1, 1], covs[:, 0, 1]
    sd0 = np.sqrt(s00)
    zeta = s01 / sd0
    vs = np.sqrt(s11 - zeta * zeta)
    c0, c_sd = (m0[:1], sd0[:1]) if shared else (m0, sd0)
    j, kf, kc = len(m1), len(_FINE_T), len(_COARSE_T)
    work = np.empty(j * kf)  # scratch of both rules and of the step check, in turn
    fine_phi = _inner(_FINE_T, c0, c_sd, m1, zeta, vs, delta, work=work.reshape(j, kf))
    coarse_phi = _inner(
        _COARSE_T, c0, c_sd, m1, zeta, vs, delta, work=work[: j * kc].reshape(j, kc)
    )
    fine = fine_phi @ _FINE_W
    coarse = coarse_phi @ _COARSE_W
    error = np.abs(fine - coarse) + _TAIL
    step = _largest_step(fine_phi, work)
    resolved = np.isfinite(fine) & (np.abs(fine - coarse) <= tolerance / 100.0) & (step <= MAX_STEP)
    return fine, error, resolved


def _largest_step(phi: np.ndarray, work: np.ndarray) -> np.ndarray:
    """max_k |phi[j, k + 1] - phi[j, k]| per row j of phi (J, K), with ``work`` (J K,) scratch.

    One pass over phi flattened (a contiguous subtraction, not J strided ones); the
    differences that straddle two rows land in each row's last column and are set to 0,
    which no maximum of absolute values can tell from absent (K >= 2)."""
    flat = phi.reshape(-1)
    np.subtract(flat[1:], flat[:-1], out=work[:-1])
    jumps = work.reshape(phi.shape)
    jumps[:, -1] = 0.0
    return np.max(np.abs(jumps, out=jumps), axis=1)


def _well_posed(means: np.ndarray, covs: np.ndarray) -> np.ndarray:
    """Cards the careful path would not reject outright (finite, non-singular)."""
    finite = np.all(np.isfinite(means), axis=1) & np.all(np.isfinite(covs), axis=(1, 2))
    s00, s11 = covs[:, 0, 0], covs[:, 1, 1]
    ok = finite & (s00 > 0.0) & (s11 > 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        zeta = covs[:, 0, 1] / np.sqrt(s00)
        varsigma2 = s11 - zeta * zeta
        ok &= varsigma2 > 0.0
        ok &= np.sqrt(np.where(ok, varsigma2 / s11, 0.0)) >= 1e-5
    return np.asarray(ok, dtype=bool)


def acceptance_probabilities(
    eta_means: np.ndarray,
    eta_covs: np.ndarray,
    delta: float = 0.10,
    tolerance: float = 1e-8,
    absolute_cap: float | None = None,
) -> list[Acceptance]:
    """P(p_1 - p_0 <= delta) for J cards; agrees with ``acceptance_probability`` to tolerance.

    Args:
        eta_means: (J, 2) means of (z_0'gamma, z_1'gamma).
        eta_covs: (J, 2, 2) covariances.
        absolute_cap: optional c_abs (then every card takes the careful path).

    Returns:
        One ``Acceptance`` per card, in input order.
    """
    return acceptance_arrays(eta_means, eta_covs, delta, tolerance, absolute_cap).results()


@dataclass
class _Deferred:
    """Cards admitted by ``certified`` alone, their integrals not taken yet: the distinct
    rows (``means``, ``covs``), each card's place among them (``of_card``: -1 for the cards
    integrated at once) and the level ``alpha`` the bound was checked against."""

    means: np.ndarray
    covs: np.ndarray
    of_card: np.ndarray
    alpha: float
    args: tuple[float, float, bool]  # delta, tolerance, shared_control
    done: bool = False


@dataclass(frozen=True)
class AcceptanceArrays:
    """``acceptance_probabilities`` as arrays (J,) in input order: P_acc, its error bound,
    failed. A decision reads only which cards are admitted (``admitted``), so the per-card
    ``Acceptance`` records are made when asked for (``at``), not for every card.

    ``deferred``: the cards a decision admitted by the certified bound (``certified``)
    without integrating them; their floats are NaN until a record or a stricter level asks
    for them, when they are integrated together (``acceptance_arrays`` of their rows)."""

    probability: np.ndarray
    error: np.ndarray
    failed: np.ndarray
    deferred: _Deferred | None = None

    def admitted(self, alpha: float = 0.10) -> np.ndarray:
        """Admit iff P_acc > alpha (``Acceptance.admitted``), per card."""
        late = self.deferred
        if late is not None and not late.done:
            if alpha <= late.alpha:  # the bound proved P_acc > late.alpha >= alpha
                out = np.asarray(self.probability > alpha, dtype=bool)  # NaN: False
                out[late.of_card >= 0] = True
                return out
            self._integrate_deferred()
        return np.asarray(self.probability > alpha, dtype=bool)

    def at(self, i: int) -> Acceptance:
        """Card i's ``Acceptance`` (the same floats as the list's)."""
        if self.deferred is not None and not self.deferred.done:
            self._integrate_deferred()
        return Acceptance(float(self.probability[i]), float(self.error[i]), bool(self.failed[i]))

    def results(self) -> list[Acceptance]:
        return [self.at(i) for i in range(len(self.probability))]

    def __len__(self) -> int:
        return len(self.probability)

    def _integrate_deferred(self) -> None:
        late = self.deferred
        assert late is not None
        delta, tolerance, shared = late.args
        got = acceptance_arrays(late.means, late.covs, delta, tolerance, None, shared)
        cards = np.flatnonzero(late.of_card >= 0)
        at = late.of_card[cards]
        self.probability[cards] = got.probability[at]
        self.error[cards] = got.error[at]
        self.failed[cards] = got.failed[at]
        late.done = True


# a certified card's bound must clear alpha by this much: the integral it replaces is
# reported minus an error bound of at most 1e-8, and the bound's own floats are exact to
# far better than this
CERTIFY_MARGIN = 1e-6
_CERTIFY_T = 8.0  # the bound keeps eta_0 within 8 sd of its mean (2 Phi(-8) ~ 1.2e-15)


def certified(means: np.ndarray, covs: np.ndarray, delta: float) -> np.ndarray:
    """A lower bound of each card's P_acc (J,), from two normal cdfs, no integral.

    lambda(eta) - eta = logit(p + delta) - logit(p) with p = expit(eta) is the integral of
    1 / (u (1 - u)) over [p, p + delta]: it falls until p = (1 - delta) / 2 and rises after
    (+inf once p + delta >= 1), its least value 2 log((1 + delta) / (1 - delta)). On the
    interval I of eta_0 within ``_CERTIFY_T`` sd of its mean it is at least D_I (that least
    value when the turn is inside I, else the smaller end's), so every world with
    eta_1 - eta_0 <= D_I and eta_0 in I is acceptable and

        P_acc >= Phi((D_I - (mean_1 - mean_0)) / sd(eta_1 - eta_0)) - 2 Phi(-8).

    The quadrature's P_acc integrates t over [-10, 10], which holds I, so the bound is below
    it too. A card whose eta_1 - eta_0 has almost no variance next to its parts' (the
    difference of two close floats) gets 0: its bound would not be trustworthy."""
    from scipy.special import expit, ndtr

    m0, m1 = means[:, 0], means[:, 1]
    s00, s11, s01 = covs[:, 0, 0], covs[:, 1, 1], covs[:, 0, 1]
    sd0 = np.sqrt(s00)
    ends = np.stack([m0 - _CERTIFY_T * sd0, m0 + _CERTIFY_T * sd0])  # (2, J)
    p = expit(ends) + delta
    with np.errstate(divide="ignore", invalid="ignore"):
        rise = np.where(p >= 1.0, np.inf, np.log(p) - np.log1p(-p)) - ends
    turn = math.log((1.0 - delta) / (1.0 + delta))  # logit((1 - delta) / 2)
    inside = (ends[0] <= turn) & (turn <= ends[1])
    least = np.where(inside, 2.0 * math.log((1.0 + delta) / (1.0 - delta)), rise.min(axis=0))
    with np.errstate(invalid="ignore"):  # (+inf: every eta_0 of I is acceptable; stays)
        least = np.where(np.isinf(least), least, least - 1e-9 * (1.0 + np.abs(least)))
    var = s11 + s00 - 2.0 * s01
    sure = var > 1e-8 * (s00 + s11)
    with np.errstate(divide="ignore", invalid="ignore"):
        z = (least - (m1 - m0)) / np.sqrt(np.where(sure, var, 1.0))
    return np.where(sure, np.maximum(ndtr(z) - 2.0 * ndtr(-_CERTIFY_T), 0.0), 0.0)


def acceptance_arrays(
    eta_means: np.ndarray,
    eta_covs: np.ndarray,
    delta: float = 0.10,
    tolerance: float = 1e-8,
    absolute_cap: float | None = None,
    shared_control: bool = False,
    certify: float | None = None,
) -> AcceptanceArrays:
    """``acceptance_probabilities`` without a record per card: the resolved cards' P_acc =
    max(0, value - error) and error elementwise (the same floats), the careful path's
    results copied in.

    ``shared_control``: the caller's promise that every card has the same control arm
    (eta_means[:, 0] and eta_covs[:, 0, 0] equal, as a decision's cards with their one
    control row): logit(p_0(t) + delta) is then taken once for every card, not checked.

    ``certify``: a decision's alpha. A well-posed card whose ``certified`` bound exceeds it
    by ``CERTIFY_MARGIN`` is admitted without its integral (the integral, at least the
    bound less its 1e-8 error, would admit it too); its floats are taken when asked for
    (``AcceptanceArrays.deferred``). Every other card is integrated as without it."""
    means = np.asarray(eta_means, dtype=float).reshape(-1, 2)
    covs = np.asarray(eta_covs, dtype=float).reshape(-1, 2, 2)
    if len(means) != len(covs):
        raise ValueError("eta_means and eta_covs must describe the same cards")
    if not len(means):
        return AcceptanceArrays(np.zeros(0), np.zeros(0), np.zeros(0, dtype=bool))
    packed = np.concatenate([means, covs.reshape(-1, 4)], axis=1)
    unique, inverse = _distinct_rows(packed)
    u_means, u_covs = unique[:, :2], unique[:, 2:].reshape(-1, 2, 2)
    prob, err = np.empty(len(unique)), np.empty(len(unique))
    failed = np.zeros(len(unique), dtype=bool)
    done = np.zeros(len(unique), dtype=bool)
    fast = _well_posed(u_means, u_covs) if absolute_cap is None else np.zeros(len(unique), bool)
    sure = np.zeros(len(unique), dtype=bool)
    if certify is not None and np.any(fast):
        sure[fast] = certified(u_means[fast], u_covs[fast], delta) > certify + CERTIFY_MARGIN
        prob[sure], err[sure] = np.nan, np.nan
        done |= sure
        fast &= ~sure
    idx = np.flatnonzero(fast)
    if len(idx):
        value, error, resolved = _fast(u_means[idx], u_covs[idx], delta, tolerance, shared_control)
        at = idx[resolved]
        # max(0.0, v - e) as floats: v - e is finite (value finite, error > 0), so no NaN
        # or signed zero tells np.maximum from max
        prob[at] = np.maximum(0.0, value[resolved] - error[resolved])
        err[at] = error[resolved]
        done[at] = True
    for k in np.flatnonzero(~done).tolist():
        acc = acceptance_probability(u_means[k], u_covs[k], delta, tolerance, absolute_cap)
        prob[k], err[k], failed[k] = acc.probability, acc.error, acc.failed
    deferred = None
    if np.any(sure):
        assert certify is not None  # (no card is certified without it)
        place = np.full(len(unique), -1)
        place[sure] = np.arange(int(np.count_nonzero(sure)))
        deferred = _Deferred(
            u_means[sure], u_covs[sure], place[inverse], float(certify),
            (delta, tolerance, shared_control),
        )  # fmt: skip
    return AcceptanceArrays(prob[inverse], err[inverse], failed[inverse], deferred)


def _distinct_rows(packed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(packed, axis=0, return_inverse=True)`` for rows packed (J, W): the distinct
    rows (U, W) in np.unique's lexicographic order and each row's index among them (J,).

    Without NaN or -0.0, two rows compare equal exactly when their bits are equal, so a
    lexsort of the columns finds np.unique's rows in np.unique's order (the order matters:
    the fixed rules' matrix-vector products round a row by its position). Otherwise
    np.unique itself."""
    if np.isnan(packed).any() or (np.signbit(packed) & (packed == 0.0)).any():
        unique, inverse = np.unique(packed, axis=0, return_inverse=True)
        return unique, np.asarray(inverse).reshape(-1)
    order = np.lexsort(packed.T[::-1])  # the first column is the primary key
    rows = packed[order]
    new = np.empty(len(rows), dtype=bool)
    new[:1] = True
    np.any(rows[1:] != rows[:-1], axis=1, out=new[1:])
    inverse = np.empty(len(rows), dtype=np.intp)
    inverse[order] = np.cumsum(new) - 1
    return rows[new], inverse
