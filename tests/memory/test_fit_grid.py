"""The fit grid (memory-model.md "The fit grid"): with ``fit_rows: grid`` the heads fit on the
usefulness-eligible rows (terminal order) up to ``grid_size(n)`` of the n so far and on the
lineage moves (ledger order) up to ``grid_size(m)`` of the m so far.

The tests grow one synthetic ledger (controls and cited A / B rows, one invalid row in seven,
a matured lineage row per valid root and a second version of some roots later) and check,
bit for bit, that a grid fitter holds the heads an ``every`` fitter held when the ledger had
exactly the grid's rows; that between two grid points the heads are the very same objects
and the fit-set link names exactly the grid's rows; that a fresh fitter on the same ledger
fits the same bits; and that ``memory=v2`` selects the grid.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pytest

from gigaevo.memory.v2 import CardBankMemory
from gigaevo.memory.v2.read.headrows import anchor_size, grid_size, near_size
from gigaevo.memory.v2.read.heads import HeadFit, HeadFitter
from gigaevo.memory.v2.read.reader import CausalReader, ReaderSettings
from gigaevo.memory.v2.settings import PosteriorSettings
from gigaevo.pipeline.build import build_run
from tests.conftest import compose_config, run_py
from tests.memory.helpers import open_store, runtime
from tests.memory.ledger_rows import context, decision, fast_dir, lineage, observe, put_card

FitRows = Literal["every", "grid"]
C = 4  # context width of the synthetic rows (``ledger_rows.context``)
CARDS = ("A", "B")


@pytest.fixture
def scratch(tmp_path: Path) -> Iterator[Path]:
    with fast_dir(tmp_path) as path:
        yield path


# -- grid_size ---------------------------------------------------------------------------


def _anchors(limit: int) -> list[int]:
    """The anchor points up to ``limit``, from their definition: 256, then each 1/16 more."""
    points = [256]
    while points[-1] <= limit:
        points.append(points[-1] + max(1, points[-1] // 16))
    return points


def test_grid_size_is_the_latest_near_anchor_point() -> None:
    top = 50_000
    anchors = _anchors(top)
    assert [grid_size(n) for n in range(256)] == list(range(256))
    last = 0
    k = 0  # index of the anchor at or below n
    for n in range(256, top + 1):
        while anchors[k + 1] <= n:
            k += 1
        anchor = anchors[k]
        step = max(16, anchor // 256)
        g = grid_size(n)
        assert anchor_size(n) == anchor
        assert g == anchor + (n - anchor) // step * step, n  # the documented formula
        assert near_size(g) == g and grid_size(g) == g, n  # a grid point, idempotent
        assert last <= g <= n, n  # monotone
        assert n - g < max(16, anchor_size(n) // 256), n  # at most one step waits
        last = g
    # a few points by hand: every 16th row past the anchors 256, 272, ..., 953, ...; every
    # 17th past the anchor 4,580 (the first with 4,580 // 256 > 16)
    hand = {255: 255, 256: 256, 271: 256, 272: 272, 288: 288, 1000: 985, 4595: 4580}
    assert {n: grid_size(n) for n in hand} == hand
    assert 4580 in anchors and grid_size(4580 + 16) == 4580 and grid_size(4580 + 17) == 4597


# -- a synthetic ledger --------------------------------------------------------------------


def _valid(i: int) -> bool:
    return i % 7 != 3


def _moves_of(i: int) -> list[int]:
    """The roots whose matured lineage row moves right after root ``i``'s terminal: its own
    first row (valid roots), and every fourth root a second version of root i - 8."""
    roots = [i] if _valid(i) else []
    if i >= 8 and i % 4 == 0 and _valid(i - 8):
        roots.append(i - 8)
    return roots


def _moves(n: int) -> list[tuple[int, int]]:
    """(root, version) of every lineage move after n roots, in ledger order."""
    out: list[tuple[int, int]] = []
    version: dict[int, int] = {}
    for i in range(n):
        for root in _moves_of(i):
            version[root] = version.get(root, 0) + 1
            out.append((root, version[root]))
    return out


def _reader(path: Path, fit_rows: FitRows) -> CausalReader:
    settings = ReaderSettings(posterior=PosteriorSettings(fit_rows=fit_rows))
    rt = runtime(path)
    return CausalReader(rt, open_store(rt.bank_dir), run_id="run-test", settings=settings)


def _grow(reader: CausalReader, n: int, seed: int) -> Iterator[tuple[int, int]]:
    """Append n roots (decision, terminal, lineage moves) to ``reader``'s ledger; after
    each append of a terminal or lineage row yield (eligible rows, lineage moves) so far."""
    rng = np.random.default_rng(seed)
    r = reader.causal_reward.range
    rows = []
    version: dict[int, int] = {}
    moves = 0
    for i in range(n):
        arm = i % 3  # 0: control, 1: cited A, 2: cited B
        x = [1.0, *rng.uniform(-1.0, 1.0, C - 1).tolist()]
        row = decision(reader, i, x, proposed=CARDS[(arm - 1) % 2], z=int(arm > 0))
        gain = float(rng.normal(0.02 * arm, 0.3))
        observe(reader, row, gain=gain, cited=arm > 0, status="valid" if _valid(i) else "invalid")
        rows.append(row)
        yield i + 1, moves
        for root in _moves_of(i):
            version[root] = version.get(root, 0) + 1
            lineage(reader, rows[root], abs(float(rng.normal(0.3, 0.1))) * r, version=version[root])
            moves += 1
            yield i + 1, moves


def _valid_rows(n: int) -> int:
    """The valid rows among the first n (the immediate head's rows)."""
    return sum(_valid(i) for i in range(n))


def _fitter(reader: CausalReader, fit_rows: FitRows) -> HeadFitter:
    """A head fitter of ``reader``'s ledger with ``fit_rows``, the other settings default."""
    post = dataclasses.replace(reader.settings.posterior, fit_rows=fit_rows)
    heads = reader.heads
    return HeadFitter(
        heads.evidence, heads.causal_reward, post, run_id=heads.run_id, task_key=heads.task_key
    )


def _fit(fitter: HeadFitter) -> HeadFit:
    fit = fitter.fitted(C, [])
    assert fit.failure == "", fit.failure
    assert fit.immediate is not None and fit.invalidity is not None
    return fit


def _bits(head: Any) -> list[np.ndarray]:
    """The numbers a head's draws use: a Gaussian head's mixture (nodes, weights, component
    means, mean, covariance, residual variance) or the invalidity head's MAP and covariance;
    and 64 draws at a fixed seed, the draws themselves."""
    draws = head.sample(64, np.random.default_rng(0))
    if hasattr(head, "coef_mean_"):
        return [
            np.asarray(head.log_sd_nodes_),
            np.asarray(head.weights_),
            np.asarray(head.component_means_),
            head.coef_mean_,
            head.coef_var_,
            np.asarray(head.residual_variance_),
            draws,
        ]
    assert head.coef_cov_ is not None
    return [head.coef_, head.coef_cov_, draws]


def _same(a: Any, b: Any) -> bool:
    return all(np.array_equal(x, y) for x, y in zip(_bits(a), _bits(b), strict=True))


def _counts(fit: HeadFit) -> dict[str, float]:
    return {d.name: d.value for d in fit.diagnostics}


# -- same rows, same bits --------------------------------------------------------------------


def _against_every(scratch: Path, points: tuple[int, ...], seed: int) -> list[HeadFitter]:
    """Grow a ledger to max(points) roots; at each N in ``points`` the live grid fitter (and
    a fresh one) holds the heads the ``every`` fitter held on the grid's rows. Returns the
    every and the live grid fitter."""
    reader = _reader(scratch, "every")
    every, grid = _fitter(reader, "every"), _fitter(reader, "grid")
    moves = {n: len(_moves(n)) for n in points}
    rows_at = {grid_size(n) for n in points}
    moves_at = {grid_size(moves[n]) for n in points}
    held: dict[tuple[str, int], Any] = {}
    checked = []
    for e, m in _grow(reader, max(points), seed=seed):
        if e in rows_at and ("rows", e) not in held:
            fit = _fit(every)
            held["rows", e] = (fit.immediate, fit.invalidity)
        if m in moves_at and ("moves", m) not in held:
            held["moves", m] = _fit(every).lineage
        if e % 50 == 0:  # the live grid fitter fits along the way too
            _fit(grid)
        if e not in points or m != moves[e]:
            continue
        live, fresh = _fit(grid), _fit(_fitter(reader, "grid"))
        immediate, invalidity = held["rows", grid_size(e)]
        lineage_head = held["moves", grid_size(m)]
        for fit in (live, fresh):
            assert _same(fit.immediate, immediate), e
            assert _same(fit.invalidity, invalidity), e
            assert fit.lineage is not None and _same(fit.lineage, lineage_head), e
            assert _counts(fit)["immediate.rows"] == _valid_rows(grid_size(e))
            assert _counts(fit)["invalidity.rows"] == grid_size(e)
        now = _fit(every)  # the waiting rows make a difference
        assert _same(now.invalidity, invalidity) == (grid_size(e) == e)
        assert _same(now.lineage, lineage_head) == (grid_size(m) == m)
        checked.append(e)
    assert checked == sorted(points)
    reader.evidence.close()
    return [every, grid]


def test_the_grid_fits_the_bits_every_fits_on_the_grid_rows(scratch: Path) -> None:
    """At N eligible rows the grid fitter's immediate and invalidity heads are the ``every``
    fitter's when the ledger held grid_size(N) of them, and its delayed-lineage head the one
    it held at grid_size(M) of the M moves; a fresh grid fitter opened on the ledger at N (a
    resumed run) fits the same bits. The moves pass 256 first (273 at N = 255: second
    versions), the rows from N = 256; at 300 and 700 rows and moves wait."""
    points = (255, 256, 300, 700)
    assert [len(_moves(n)) for n in points] == [273, 273, 320, 749]
    assert [grid_size(n) for n in points] == [255, 256, 289, 697]
    _against_every(scratch, points, seed=5)


def test_the_grid_fits_the_bits_every_fits_past_the_invalidity_prefix(scratch: Path) -> None:
    """As above past 1,024 rows, where the invalidity head fits in Laplace-prefix form
    (``invalidity_prefix_min_rows``; about 360 rows a lineage)."""
    assert grid_size(1100) == 1091
    for fitter in _against_every(scratch, (1100,), seed=7):
        assert fitter.invalidity.prefix_fits > 0


@pytest.mark.slow
def test_the_grid_fits_the_bits_every_fits_at_steps_of_17(scratch: Path) -> None:
    """As above past the anchor 4,580, where the grid steps 17 rows (4,580 // 256)."""
    points = (4600, 4700)
    assert [grid_size(n) for n in points] == [4597, 4699]
    for fitter in _against_every(scratch, points, seed=8):
        assert fitter.invalidity.prefix_fits > 0


# -- between two grid points ----------------------------------------------------------------


def _expected_ids(reader: CausalReader, e: int, m: int) -> list[str]:
    """The fit-set ids of the first e eligible rows and the rows of the first m lineage
    moves (each root's latest version among them), sorted."""
    every = [o.decision.decision_id for o in reader.evidence.eligible_since(0)]
    latest = dict(_moves(len(every))[:m])  # root -> its version after the first m moves
    lineage_ids = [f"lineage:{every[root]}:v{v}" for root, v in latest.items()]
    return sorted(every[:e] + lineage_ids)


def test_between_grid_points_the_heads_stand_and_the_link_names_the_grid_rows(
    scratch: Path,
) -> None:
    """From 240 to 300 roots, a fit after every append: each head is the very same object
    while its rows' grid point stands and a new one when the point moves (the rows that
    waited enter); the fit-set link names exactly the first grid_size(e) eligible rows and
    the rows of the first grid_size(m) lineage moves, and so do the drafted decisions'
    fitted row ids."""
    reader = _reader(scratch, "grid")
    for card in CARDS:
        put_card(reader.store, card)
    probe = context(10_000)
    last: tuple[int, int, HeadFit] | None = None
    seen_e, seen_m = set(), set()
    for e, m in _grow(reader, 300, seed=6):
        if e < 240:
            continue
        fits = reader.heads.head_fits
        fit = reader.heads_for(probe)
        assert fit.failure == "" and fit.lineage is not None
        expected = _expected_ids(reader, grid_size(e), grid_size(m))
        assert list(fit.row_ids) == expected, (e, m)
        if e % 8 == 1:  # a decision drafted here links the same rows
            assert list(reader.draft(context(10_000 + e)).fitted_row_ids) == expected, (e, m)
        if last is not None:
            e0, m0, before = last
            rows_stand, moves_stand = grid_size(e) == grid_size(e0), grid_size(m) == grid_size(m0)
            valid_stand = _valid_rows(grid_size(e)) == _valid_rows(grid_size(e0))
            assert (fit.immediate is before.immediate) == valid_stand, (e, m)
            assert (fit.invalidity is before.invalidity) == rows_stand, (e, m)
            assert (fit.lineage is before.lineage) == moves_stand, (e, m)
            refits = (not valid_stand) + (not rows_stand) + (not moves_stand)
            assert reader.heads.head_fits - fits == refits, (e, m)
            if rows_stand and moves_stand:
                assert list(fit.row_ids) == list(before.row_ids)
        seen_e.add(grid_size(e))
        seen_m.add(grid_size(m))
        last = e, m, fit
    assert {256, 272, 288} <= seen_e and {256, 272} <= seen_m
    reader.evidence.close()


# -- configuration ---------------------------------------------------------------------------


def test_fit_rows_is_validated_and_every_is_the_settings_default() -> None:
    assert PosteriorSettings().fit_rows == "every"
    with pytest.raises(ValueError, match="fit_rows") as info:
        PosteriorSettings(fit_rows="bogus")  # type: ignore[arg-type]
    assert "bogus" in str(info.value)


def test_memory_v2_fits_on_the_grid(tmp_path: Path) -> None:
    """The composed ``memory=v2`` sets ``grid`` and it reaches the reader's head rows."""
    cfg = compose_config(["memory=v2", f"checkpoint_dir={tmp_path}", "max_mutants=1"])
    assert cfg.memory.posterior_config.fit_rows == "grid"
    built = build_run(cfg, show_progress=False)
    try:
        assert isinstance(built.memory, CardBankMemory) and built.memory.reader is not None
        assert built.memory.reader.heads.rows.posterior.fit_rows == "grid"
    finally:
        built.close()
    every = compose_config(["memory=v2", "memory.posterior_config.fit_rows=every"])
    assert every.memory.posterior_config.fit_rows == "every"


def test_run_py_refuses_a_bad_fit_rows_in_one_line(tmp_path: Path) -> None:
    ckpt = tmp_path / "ck"
    code, out, err = run_py(
        "memory=v2",
        "problem=rastrigin",
        "memory.posterior_config.fit_rows=bogus",
        "max_mutants=1",
        f"checkpoint_dir={ckpt}",
        cwd=tmp_path,
    )
    assert code == 2
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert "memory.posterior_config.fit_rows" in lines[0] and "bogus" in lines[0]
    assert "Traceback" not in out + err
    assert not ckpt.exists()


def test_a_lineage_move_whose_root_row_waits_does_not_fail_the_fit(scratch: Path) -> None:
    """Past 256 rows a root's eligible row may wait for the next grid point while its
    lineage move (fewer than 256 moves: every one enters) is taken at once. When its
    proposed id is no card of the bank, the fit's lineages still hold it (the cards, the
    treated keys of the rows taken and the keys of the lineage rows taken), so the grid
    fits as ``every`` does instead of abstaining until the root's row enters."""
    reader = _reader(scratch, "grid")
    rng = np.random.default_rng(0)
    for i in range(260):  # cited A / B rows and controls, no lineage row yet
        arm = i % 3
        x = [1.0, *rng.uniform(-1.0, 1.0, C - 1).tolist()]
        row = decision(reader, i, x, proposed=CARDS[(arm - 1) % 2], z=int(arm > 0))
        observe(reader, row, gain=0.1, cited=arm > 0)
    row = decision(reader, 260, [1.0, 0.1, 0.2, 0.3], proposed="N", z=1)  # waits: grid 256
    observe(reader, row, gain=0.1, cited=True)
    lineage(reader, row, 0.3 * reader.causal_reward.range)  # the first move: taken
    every, grid = (_fitter(reader, rows).fitted(C, []) for rows in ("every", "grid"))
    reader.evidence.close()
    assert every.failure == ""
    assert grid.failure == "", grid.failure
