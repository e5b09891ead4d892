"""Background imports (``gigaevo.llm.preload``): what loads first, and what waits for a call."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import sys
from gigaevo.llm import preload
thread = preload.start_loading([], "colorsys", first=["{first}"], after_first_call=True)
thread.join(timeout=2)
print("waiting:", thread.is_alive(), "colorsys" in sys.modules)
preload.{then}()
thread.join(timeout=60)
print("after:", thread.is_alive(), "colorsys" in sys.modules, "{first}" in sys.modules)
"""


def _run(first: str, then: str) -> list[str]:
    code = PROBE.format(first=first, then=then)
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.strip().splitlines()


def test_deferred_imports_start_with_the_first_call() -> None:
    assert _run("wave", "call_started") == [
        "waiting: True False",  # "first" is loaded at once, "then" waits
        "after: False True True",
    ]


def test_deferred_imports_are_dropped_when_the_run_ends_first() -> None:
    assert _run("wave", "stop_loading") == ["waiting: True False", "after: False False True"]


def test_a_module_names_what_its_first_use_needs() -> None:
    # memory=v2 lists scipy's modules for its first decision; they load right after it,
    # and wait_for_first (the engine, before its first decision) returns once they have
    code = (
        "import sys\n"
        "from gigaevo.llm import preload\n"
        "t = preload.start_loading([], 'colorsys', first=['gigaevo.memory.v2'],\n"
        "                          after_first_call=True)\n"
        "preload.wait_for_first()\n"
        "import gigaevo.memory.v2 as m\n"
        "print(all(name in sys.modules for name in m.BACKGROUND_IMPORTS), t.is_alive())\n"
        "preload.stop_loading()\n"
        "t.join(timeout=60)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=180
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "True"]  # the thread still waits for a call
