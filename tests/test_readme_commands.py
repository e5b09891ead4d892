"""The README's two commands and .ci/run agree, so CI tests what users run."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _first_two_commands() -> tuple[str, str]:
    text = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```bash\n(.*?)\n```", text, flags=re.S)
    assert len(blocks) >= 2
    return blocks[0].strip(), blocks[1].strip()


def test_readme_starts_with_setup_and_test_commands() -> None:
    setup, test = _first_two_commands()
    assert "pip install" in setup and "run.py" in setup
    assert "pytest" in test
    assert "pytest" not in setup


def test_ci_runs_the_readme_install_step_and_test_command() -> None:
    setup, test = _first_two_commands()
    install = setup.rsplit("&&", 1)[0].strip()
    assert "run.py" in setup.rsplit("&&", 1)[1]
    ci = (ROOT / ".ci" / "run").read_text()
    assert install in ci
    assert test in ci
    for check in (
        "ruff check .",
        "ruff format --check .",
        "mypy gigaevo/ --ignore-missing-imports",
    ):
        assert check in ci
