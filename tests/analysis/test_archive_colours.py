"""The report's archive map: one colour per fitness value, across cells and islands."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg

from gigaevo.analysis import load_run
from gigaevo.analysis.figures import archive_map


def _cell_colours(run_dir: Path, elites: list[tuple[int, tuple[int, int], float]]) -> list[tuple]:
    """The RGBA drawn at the centre of each elite's cell, in the order given."""
    run = load_run(run_dir)
    run.archive = pd.DataFrame(
        [{"island": i, "cell": c, "fitness": f, "program_id": "p"} for i, c, f in elites]
    )
    fig = archive_map(run)
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    pixels = np.asarray(canvas.buffer_rgba())
    height = pixels.shape[0]
    axes = [ax for ax in fig.axes if ax.get_images()]
    out = []
    for island, (row, col), _ in elites:
        x, y = axes[island].transData.transform((col, row))  # imshow: x is the column
        out.append(tuple(pixels[round(height - y), round(x)]))
    return out


def test_equal_elites_have_one_colour_on_every_island(plain_run: Path) -> None:
    # every elite equal (the case that was drawn in two colours): two islands, three cells
    colours = _cell_colours(
        plain_run, [(0, (6, 5), 1.2783), (1, (6, 5), 1.2783), (1, (2, 3), 1.2783)]
    )
    assert len(set(colours)) == 1
    assert colours[0] != (255, 255, 255, 255)  # a colour, not the blank of an empty cell


def test_different_values_differ_and_equal_values_match(plain_run: Path) -> None:
    elites = [
        (0, (0, 0), 5.0),
        (0, (0, 1), 7.0),  # next to a different value: no blending across the border
        (0, (3, 3), 5.0),
        (1, (0, 1), 7.0),
        (1, (5, 2), 6.0),
    ]
    c = _cell_colours(plain_run, elites)
    assert c[0] == c[2] and c[1] == c[3]
    assert len({c[0], c[1], c[4]}) == 3
