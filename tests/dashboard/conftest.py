"""The dashboard as a user runs it: ``python -m gigaevo.dashboard`` in its own process."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gigaevo.dashboard.headless import chromium, find_chromium


class Dashboard:
    """``python -m gigaevo.dashboard ARGS`` started in the background; ``url`` once it listens."""

    def __init__(self, *args: str, timeout: float = 120) -> None:
        cmd = [sys.executable, "-m", "gigaevo.dashboard", *args]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        line = self.proc.stdout.readline() if ready else ""
        if "http://" not in line:
            self.stop()
            raise AssertionError(f"dashboard did not start: {line!r} {self.proc.stderr.read()!r}")
        self.url = line.split()[2]

    def stop(self) -> int:
        """Ctrl-C, as a user stops it; the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        return self.proc.wait()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """A headless Chromium from the distribution (CI installs it; skipped elsewhere without it)."""
    if find_chromium() is None:
        message = "no chromium or chromedriver: apt-get install chromium chromium-driver"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    with chromium(width=1400, height=1100) as web:
        web.set_script_timeout(30)
        yield web


def console_errors(web: Any) -> list[str]:
    """The browser console's errors since the last call (warnings and info left out)."""
    return [e["message"] for e in web.get_log("browser") if e["level"] == "SEVERE"]


def start_run(out: Path, *overrides: str, cwd: Path | None = None) -> subprocess.Popen[str]:
    """``run.py`` on rastrigin in the background, writing to ``out`` (a real engine).

    Hydra's own output folder goes under ``cwd`` (``out``'s parent by default).
    """
    root = Path(__file__).resolve().parents[2]
    env = {k: v for k, v in os.environ.items() if not k.startswith("HYDRA_")}
    args = [sys.executable, str(root / "run.py"), "problem=rastrigin", "progress=false"]
    args += ["evaluator.max_workers=1", f"checkpoint_dir={out}", *overrides]
    return subprocess.Popen(
        args,
        cwd=cwd or out.parent,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
