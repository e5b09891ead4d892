"""``python -m gigaevo.dashboard``: what it prints, where it listens, how it refuses bad input."""

from __future__ import annotations

import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from gigaevo.dashboard.__main__ import _allowed_hosts, _is_loopback
from tests.dashboard.conftest import Dashboard


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "gigaevo.dashboard", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def test_a_missing_folder_is_one_line_and_exit_2(tmp_path: Path) -> None:
    proc = _run(str(tmp_path), str(tmp_path / "nope"))
    assert proc.returncode == 2
    assert proc.stderr.strip() == f"error: {tmp_path / 'nope'}: not a directory"


def test_a_busy_port_is_one_line_and_exit_2(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        proc = _run(str(tmp_path), "--port", str(port))
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: cannot listen on 127.0.0.1:{port}")
    assert _run(str(tmp_path), "--port", "70000").returncode == 2


def test_serves_on_a_free_loopback_port_until_ctrl_c(tmp_path: Path) -> None:
    """An empty folder is watched (a run or sweep may start there later)."""
    server = Dashboard(str(tmp_path))
    try:
        assert server.url.startswith("http://127.0.0.1:") and server.url.endswith("/")
        port = int(server.url.rsplit(":", 1)[1].strip("/"))
        assert port > 0
        with urllib.request.urlopen(server.url + "api/runs", timeout=30) as response:
            assert response.status == 200 and b'"runs":[]' in response.read()
        listening = subprocess.run(["ss", "-ltnH"], capture_output=True, text=True).stdout
        if listening:  # only on loopback
            assert f"127.0.0.1:{port}" in listening and f"0.0.0.0:{port}" not in listening
    finally:
        assert server.stop() == 0
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("host", "loopback"),
    [("127.0.0.1", True), ("localhost", True), ("::1", True), ("192.168.1.5", False)],
)
def test_loopback_hosts_and_the_names_answered(host: str, loopback: bool) -> None:
    assert _is_loopback(host) is loopback
    allowed = _allowed_hosts(host)
    assert host in allowed or f"[{host}]" in allowed
    if loopback:
        assert {"127.0.0.1", "localhost"} <= set(allowed)
    else:
        assert allowed == [host]  # DNS-rebinding: no other name is answered
    assert _allowed_hosts("0.0.0.0") == ["*"]
