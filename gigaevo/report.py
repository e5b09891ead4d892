"""``python -m gigaevo.report DIR``: the run or sweep report (see ``gigaevo.analysis.report``)."""

from __future__ import annotations

from gigaevo.analysis.report import main, write_report

__all__ = ["main", "write_report"]

if __name__ == "__main__":
    raise SystemExit(main())
