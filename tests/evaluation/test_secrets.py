"""Credential-like environment variables never reach workers or children."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path
from typing import Any

import pytest

from gigaevo.evaluation import SandboxEvaluator
from gigaevo.evaluation.limits import sandbox_environment

from .conftest import MakeProblem
from .helpers import program

SECRETS = {
    "OPENAI_API_KEY": "sk-test-XYZ",
    "GITHUB_TOKEN": "ghp-test-TOKEN-123",
    "MY_PASSWORD": "hunter2-pass",
    "aws_secret_access_key": "aws-secret-777",
    "Gemini_Api_Key": "gem-key-555",
}

SNOOP = program(
    """
    import os

    def solve():
        texts = ["\\n".join(f"{k}={v}" for k, v in os.environ.items())]
        for path in ("/proc/self/environ", f"/proc/{os.getppid()}/environ"):
            try:
                with open(path, "rb") as handle:
                    texts.append(handle.read().replace(b"\\0", b"\\n").decode("latin-1"))
            except OSError as exc:
                texts.append(repr(exc))
        blob = "\\n".join(texts)
        print(blob)
        hits = [float(marker in blob) for marker in MARKERS]
        return hits
    """
)


@pytest.fixture
def secret_environment(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    return SECRETS


def test_secrets_are_invisible_to_children(
    secret_environment: dict[str, str], make_problem: MakeProblem
) -> None:
    markers = [*secret_environment.values(), *secret_environment.keys()]
    code = f"MARKERS = {markers!r}\n" + SNOOP
    with SandboxEvaluator(make_problem(), max_workers=1, memory_mb=512) as ev:
        result = ev.evaluate(code)
    assert result.valid, result.reason
    assert result.metrics["count"] == len(markers)
    assert result.metrics["score"] == 0.0  # not one marker was found
    assert "OMP_NUM_THREADS=1" in result.stdout_tail or "PATH" in result.stdout_tail
    for text in (*secret_environment.values(), *secret_environment.keys()):
        assert text not in result.stdout_tail
        assert all(text not in name for name in result.metrics)


def test_thread_variables_are_pinned(make_problem: MakeProblem) -> None:
    code = program(
        """
        import os

        def solve():
            names = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
            return [float(os.environ[name]) for name in names]
        """
    )
    with SandboxEvaluator(make_problem(), max_workers=1, memory_mb=512) as ev:
        result = ev.evaluate(code)
    assert result.valid, result.reason
    assert result.metrics == {"score": 3.0, "count": 3.0}


def test_environment_is_an_allow_list() -> None:
    env = sandbox_environment("/tmp")
    assert env["HOME"] == env["TMPDIR"] == "/tmp"
    assert env["LANG"] == env["LC_ALL"] == "C.UTF-8"
    assert env["OMP_NUM_THREADS"] == env["OPENBLAS_NUM_THREADS"] == "1"
    assert set(env) == {
        "PATH", "HOME", "TMPDIR", "LANG", "LC_ALL", "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS",
        "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS", "VECLIB_MAXIMUM_THREADS", "BLIS_NUM_THREADS",
    }  # fmt: skip


# --- End to end: the engine's own launch environment -------------------------------------------
#
# A subprocess plays the engine: its *launch* environment holds the credentials, so they sit in
# its initial environ block (/proc/<pid>/environ) whatever it later deletes from os.environ. It
# builds a SandboxEvaluator and runs a program that looks for them everywhere it can reach.

LAUNCH_SECRETS = {
    "OPENAI_API_KEY": "sk-leak-test-123",
    "GH_TOKEN": "ghp-leak-test-456",
    "DB_PASSWORD": "pw-leak-test-789",
    "MY_SECRET": "sec-leak-test-000",
}

# The child searches for the names and for "leak-test" (shared by every value, so the program
# itself never holds a secret). It reports only matching entries, never other environ contents.
HUNTER = program(
    """
    import ctypes, errno, json, os

    MAIN_PID = 0  # replaced by the driver
    NAMES = (b"OPENAI_API_KEY", b"GH_TOKEN", b"DB_PASSWORD", b"MY_SECRET")
    MARKER = b"leak-test"

    def matches(data):
        return [
            entry.decode("latin-1")
            for entry in data.split(b"\\0")
            if MARKER in entry or entry.split(b"=", 1)[0] in NAMES
        ]

    def attempt(path):
        try:
            with open(path, "rb") as handle:
                data = handle.read()
        except OSError as exc:
            return type(exc).__name__, []
        return "read", matches(data)

    def ancestors():
        chain, pid = [], os.getpid()
        while pid > 0 and len(chain) < 64:
            try:
                with open(f"/proc/{pid}/status") as handle:
                    pid = int(handle.read().split("PPid:")[1].split()[0])
            except OSError:
                break
            chain.append(pid)
        return chain

    def solve():
        env = "\\0".join(f"{k}={v}" for k, v in os.environ.items()).encode()
        leaks = {"os.environ": matches(env)} if matches(env) else {}
        outcome = {}
        targets = {
            "self": "/proc/self/environ",
            "worker": f"/proc/{os.getppid()}/environ",
            "main": f"/proc/{MAIN_PID}/environ",
            "main_task": f"/proc/{MAIN_PID}/task/{MAIN_PID}/environ",
        }
        chain = ancestors()
        for pid in chain:
            targets[f"ancestor {pid}"] = f"/proc/{pid}/environ"
        visible = sorted(int(name) for name in os.listdir("/proc") if name.isdigit())
        for pid in visible:
            targets[f"pid {pid}"] = f"/proc/{pid}/environ"
        scan = {}
        for label, path in targets.items():
            outcome[label], found = attempt(path)
            scan[outcome[label]] = scan.get(outcome[label], 0) + 1
            if found:
                leaks[label] = found
        try:
            os.kill(MAIN_PID, 0)
            signal_main = "allowed"
        except OSError as exc:
            signal_main = type(exc).__name__
        libc = ctypes.CDLL(None, use_errno=True)
        seized = libc.ptrace(0x4206, MAIN_PID, 0, 0)  # PTRACE_SEIZE: never stops the target
        ptrace_main = "allowed" if seized == 0 else errno.errorcode[ctypes.get_errno()]
        with open("/proc/self/status") as handle:
            status = dict(line.split(":", 1) for line in handle.read().splitlines())
        fields = ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb", "NoNewPrivs")
        report = {
            "leaks": leaks,
            "main": outcome["main"],
            "main_task": outcome["main_task"],
            "worker": outcome["worker"],
            "self": outcome["self"],
            "ancestors": chain,
            "visible": visible if len(visible) < 20 else len(visible),
            "scan": scan,
            "signal_main": signal_main,
            "ptrace_main": ptrace_main,
            "status": {name: status[name].strip() for name in fields},
            "uid": os.getuid(),
        }
        print("REPORT " + json.dumps(report, sort_keys=True))
        return [float(sum(len(found) for found in leaks.values()))]
    """
)

IMPORTER = program(
    """
    import sys

    NAMES = ("scipy.optimize", "fractions", "statistics")

    def solve():
        preloaded = [float(name in sys.modules) for name in NAMES]
        import fractions, statistics
        import scipy.optimize

        best = scipy.optimize.minimize_scalar(lambda x: (x - 3.0) ** 2)
        half = float(fractions.Fraction(1, 2))
        middle = statistics.median([1.0, 5.0, 2.0])
        return [*preloaded, round(best.x, 6), half, middle]
    """
)

DRIVER = program(
    """
    import json, os, sys
    from pathlib import Path

    from gigaevo.evaluation import SandboxEvaluator
    from tests.evaluation.helpers import write_problem

    mode, workdir, caps = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
    if caps == "none":  # like an unprivileged engine: only non-dumpability guards its environ
        from gigaevo.evaluation.isolation import drop_capabilities

        drop_capabilities()
    for name in [n for n in os.environ if n != "PATH" and n != "PYTHONPATH"]:
        del os.environ[name]  # gone from os.environ, not from /proc/self/environ
    with open("/proc/self/environ", "rb") as handle:
        in_own_block = b"leak-test" in handle.read()
    hunter = (workdir / "hunter.py").read_text()
    hunter = hunter.replace("MAIN_PID = 0", f"MAIN_PID = {os.getpid()}")
    importer = (workdir / "importer.py").read_text()
    problem = write_problem(workdir / "problem", timeout_s=10.0)  # scipy imports slowly
    with SandboxEvaluator(
        problem, max_workers=2, memory_mb=1024, namespaces=mode == "namespace"
    ) as ev:
        hunt = ev.evaluate(hunter)
        imported = ev.evaluate(importer)
        namespaced = ev.uses_pid_namespaces
    report = [line for line in hunt.stdout_tail.splitlines() if line.startswith("REPORT ")]
    print(json.dumps({
        "main_pid": os.getpid(),
        "in_own_block": in_own_block,
        "namespaced": namespaced,
        "hunt": {"valid": hunt.valid, "reason": hunt.reason, "metrics": hunt.metrics},
        "report": json.loads(report[-1][len("REPORT "):]) if report else None,
        "tail": hunt.stdout_tail,
        "imported": {"valid": imported.valid, "reason": imported.reason,
                     "metrics": imported.metrics, "tail": imported.stdout_tail},
    }))
    """
)

REPO_ROOT = Path(__file__).resolve().parents[2]


def _run_engine(workdir: Path, mode: str, caps: str) -> tuple[dict[str, Any], str]:
    """Run DRIVER as a fresh engine process whose launch environment holds LAUNCH_SECRETS.

    ``caps="none"``: the engine first drops every capability, as if it were not root.
    """
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "driver.py").write_text(DRIVER)
    (workdir / "hunter.py").write_text(HUNTER)
    (workdir / "importer.py").write_text(IMPORTER)
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": str(REPO_ROOT)}
    env.update(LAUNCH_SECRETS)
    completed = subprocess.run(
        [sys.executable, str(workdir / "driver.py"), mode, str(workdir), caps],
        env=env,
        cwd=workdir,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    output = completed.stdout + completed.stderr
    return json.loads(completed.stdout.strip().splitlines()[-1]), output


ZERO_CAPS = "0000000000000000"


@pytest.mark.parametrize("mode", ["namespace", "flat"])
@pytest.mark.parametrize("caps", ["full", "none"], ids=["engine-caps", "engine-no-caps"])
def test_launch_credentials_never_reach_a_child(mode: str, caps: str) -> None:
    workdir = Path(tempfile.mkdtemp(prefix="gigaevo-secrets-"))
    try:
        out, output = _run_engine(workdir, mode, caps)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    # The test is meaningful: the engine's initial environ block still holds the credentials.
    assert out["in_own_block"] is True
    # Nothing the engine printed (results, tails, reasons, its stderr) contains one.
    for name, value in LAUNCH_SECRETS.items():
        assert value not in output, name
        assert name not in out["tail"]

    assert out["hunt"]["valid"], out["hunt"]["reason"]
    report = out["report"]
    assert report is not None, out["tail"]
    assert report["leaks"] == {}
    assert out["hunt"]["metrics"]["score"] == 0.0
    # The child held no capability at all and could not regain any.
    status = report["status"]
    assert [status[f] for f in ("CapInh", "CapPrm", "CapEff", "CapAmb")] == [ZERO_CAPS] * 4
    assert status["NoNewPrivs"] == "1"  # so no exec can refill them from the bounding set
    # Its own environ is clean (unreadable under a dedicated uid: the worker is non-dumpable);
    # the worker's and the engine's are closed.
    assert report["self"] in ("read", "PermissionError")
    assert report["worker"] == "PermissionError"
    if mode == "namespace" and out["namespaced"]:
        # The engine does not exist for the child: nothing to read, signal or trace.
        assert report["main"] == report["main_task"] == "FileNotFoundError"
        assert report["signal_main"] == "PermissionError"  # seccomp: only itself
        assert report["ptrace_main"] == "EPERM"  # seccomp: no ptrace at all
        assert report["ancestors"] == [1, 0]  # its worker, then the namespace's edge
        assert isinstance(report["visible"], list) and len(report["visible"]) <= 2
    else:
        # Same /proc as the engine: the engine's entries exist but are closed to the child.
        assert report["main"] == report["main_task"] == "PermissionError"
        assert report["ptrace_main"] == "EPERM"
        assert out["main_pid"] in report["ancestors"]
    if mode == "namespace" and caps == "full" and os.geteuid() == 0:
        assert out["namespaced"]  # root always gets its namespace

    # An ordinary program still imports modules the worker did not preload (without
    # namespaces, a dedicated uid can only read an installation open to other users).
    imported = out["imported"]
    if mode == "namespace" or caps == "none" or _open_to_others(sysconfig.get_path("stdlib")):
        assert imported["valid"], (imported["reason"], imported["tail"])
        assert imported["metrics"] == {"score": 3.0 + 0.5 + 2.0, "count": 6.0}
    else:
        assert imported["reason"].startswith("ModuleNotFoundError"), imported["reason"]


def _open_to_others(path: str) -> bool:
    """True when a user owning nothing can read ``path`` (every ancestor searchable)."""
    parts = Path(path).resolve().parts
    ancestors = [Path(*parts[: i + 1]) for i in range(len(parts))]
    return all(p.stat().st_mode & 0o001 for p in ancestors) and bool(
        Path(path).stat().st_mode & 0o004
    )
