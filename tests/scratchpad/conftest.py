"""Fixtures for the scratchpad tests: a file path under tmp_path and a fixed date."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from gigaevo.scratchpad import Scratchpad

DAY = dt.date(2025, 11, 30)


@pytest.fixture
def pad_path(tmp_path: Path) -> Path:
    """Where a session keeps its scratchpad: ``<tmp>/.agent/scratchpad.md``."""
    return tmp_path / ".agent" / "scratchpad.md"


@pytest.fixture
def pad(pad_path: Path) -> Scratchpad:
    """A fresh session on ``pad_path`` whose default provenance date is ``DAY``."""
    return Scratchpad(pad_path, today=lambda: DAY)


def new_session(path: Path) -> Scratchpad:
    """Another session on the same file (as after a reset)."""
    return Scratchpad(path, today=lambda: DAY)
