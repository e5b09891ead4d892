"""Red team end to end: a real run whose model (a local OpenAI-compatible server) writes attacks.

``run.py`` runs the built-in rastrigin problem (a copy, pinned) with memory v2
and a card bank, two workers and two attempts in flight; the server answers
two ordinary diffs and then every attack of ``attacks.py`` as whole programs.
The engine's launch environment holds credentials, its HOME a ``.bashrc``, and
a trap listens on 127.0.0.1 beside the model server. Afterwards:

* the run exited 0 and finished; every attack is invalid with its expected reason;
* the store, the events and the summary agree (metrics, statuses, best, cost);
* the validator, ``.bashrc`` and the bank read back as the engine left them;
* no file named with the attack marker exists outside a scratch, the trap saw
  no connection, the model server only the engine's own calls, no credential
  appears in any file or output, no child process outlived the run;
* a following clean run of the same problem scores its initial program as the
  genuine validator does.

Run once as the test's own user (root in CI) and once as an ordinary user.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

import gigaevo
from gigaevo.problems.loader import builtin_root
from tests.conftest import ROOT
from tests.llm.openai_server import OpenAIServer

from .attacks import ATTACKS, render
from .helpers import ORDINARY_UID, as_ordinary_user
from .test_attacks import CANARIES, Trap

pytestmark = pytest.mark.slow

KEY_ENV = "GIGAEVO_TEST_API_KEY"
KEY = "sk-redteam-7f3a"
MARKER = f"pwned-e2e-{os.getpid()}"
# The scratch attacks run twice so that two children are alive at the same time.
PLAN = [*ATTACKS, next(a for a in ATTACKS if a.name == "other_childrens_scratch")]


@pytest.fixture(scope="module")
def seeded_bank(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A card bank written by an ordinary offline run, as users share banks between runs."""
    base = tmp_path_factory.mktemp("seed")
    args = ["problem=rastrigin", "max_mutants=12", "progress=false"]
    args += [f"checkpoint_dir={base / 'run'}", f"memory_bank_dir={base / 'bank'}"]
    done = subprocess.run(
        [sys.executable, str(ROOT / "run.py"), *args],
        cwd=base,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads((base / "bank" / "cards.json").read_text())["n_cards"] > 0
    return base / "bank"


def _world(as_user: bool, bank: Path) -> dict[str, Path]:
    base = "/var/tmp" if os.access("/var/tmp", os.W_OK) else None
    root = Path(tempfile.mkdtemp(prefix="gigaevo-e2e-", dir=base))
    problem = root / "problem"
    shutil.copytree(builtin_root() / "rastrigin", problem)
    shutil.copytree(bank, root / "bank")
    home = root / "home"
    home.mkdir()
    (home / ".bashrc").write_text("# the engine user's shell\n")
    places = {"root": root, "problem_dir": problem, "home": home}
    places |= {"checkpoint": root / "run", "bank": root / "bank", "clean": root / "clean"}
    if as_user:
        for path in [root, *root.rglob("*")]:
            os.chown(path, ORDINARY_UID, ORDINARY_UID, follow_symlinks=False)
    return places


def _programs(world: dict[str, Path], port: int, trap_port: int) -> list[str]:
    paths = {
        **{k: v for k, v in world.items() if k not in ("root", "clean")},
        "validator": world["problem_dir"] / "validator.py",
        "package": Path(gigaevo.__file__).resolve().parent,
        "site": Path(sysconfig.get_paths()["purelib"]),
        "port": port,
        "trap_port": trap_port,
        "marker": MARKER,
    }
    return [
        f"# red-team: {attack.name}\nCOPY = {i}\n{render(attack, **paths)}"
        for i, attack in enumerate(PLAN)
    ]


def _run(world: dict[str, Path], as_user: bool, *args: str) -> subprocess.CompletedProcess[str]:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(world["home"])}
    env |= {KEY_ENV: KEY, **CANARIES}
    command = [sys.executable, str(ROOT / "run.py"), *args]
    if as_user:
        command = as_ordinary_user(
            command, [Path(sys.base_prefix), Path(sys.prefix), ROOT], world["root"] / "hold"
        )
        (world["root"] / "hold").mkdir(exist_ok=True)
    return subprocess.run(
        command, cwd=world["root"], env=env, capture_output=True, text=True, timeout=600
    )


def _rows(checkpoint: Path) -> list[dict[str, Any]]:
    con = sqlite3.connect(checkpoint / "programs.sqlite3")
    try:
        return [json.loads(d) for (d,) in con.execute("SELECT data FROM programs ORDER BY ordinal")]
    finally:
        con.close()


def _genuine_fitness(code: str) -> float:
    """The initial program scored outside any sandbox, with the pristine built-in validator."""
    namespace: dict[str, Any] = {}
    exec(compile(code, "initial", "exec"), namespace)
    validator: dict[str, Any] = {}
    source = (builtin_root() / "rastrigin" / "validator.py").read_text()
    exec(compile(source, "validator", "exec"), validator)
    return float(validator["validate"](namespace["solve"]())["rastrigin_value"])


def _check_store_matches_events(checkpoint: Path, rows: list[dict[str, Any]]) -> None:
    events = [json.loads(x) for x in (checkpoint / "events.jsonl").read_text().splitlines()]
    by_id = {e["program_id"]: e for e in events if e["event"] in ("initial", "mutant")}
    assert len(by_id) == len(rows)
    for row in rows:
        event = by_id[row["id"]]
        assert event["fitness"] == row["fitness"], row["id"]
        if event["event"] == "mutant":
            assert event["status"] == row["status"] and event["reason"] == row["invalid_reason"]
    fitness = {row["id"]: row["fitness"] for row in rows}
    for best in (e for e in events if e["event"] == "new_best"):
        assert fitness[best["program_id"]] == best["fitness"]
    summary = json.loads((checkpoint / "summary.json").read_text())
    valid = [row["fitness"] for row in rows if row["valid"]]
    assert summary["best_fitness"] == min(valid)
    assert summary["llm_cost_usd"] == 0.0 and summary["finished"]


def _check_no_trace_outside(world: dict[str, Path]) -> None:
    places = [Path(p) for p in ("/", "/tmp", "/var/tmp", "/dev/shm")]
    package = Path(gigaevo.__file__).resolve().parent
    places += [package, package / "evaluation", Path(sysconfig.get_paths()["purelib"])]
    places += [world[k] for k in ("root", "home", "problem_dir", "checkpoint", "bank")]
    for place in places:
        if place.is_dir():
            assert not [p for p in place.iterdir() if MARKER in p.name], place
    assert (world["home"] / ".bashrc").read_text() == "# the engine user's shell\n"
    for path in [*world["checkpoint"].rglob("*"), *world["bank"].rglob("*")]:
        if path.is_file():
            data = path.read_bytes()
            assert all(v.encode() not in data for v in (*CANARIES.values(), KEY)), path
            assert MARKER.encode() not in data or path.suffix in (".sqlite3", ".jsonl", ".md")


def _check_no_child_left(checkpoint: Path) -> None:
    """No process runs under the uids the run's children had (the run has exited)."""
    con = sqlite3.connect(checkpoint / "programs.sqlite3")
    try:
        (meta,) = con.execute("SELECT value FROM meta WHERE key = 'sandbox'").fetchone()
    finally:
        con.close()
    uids = set(json.loads(meta)["child_uids"]) - {0, os.getuid()}
    assert uids
    # a namespace's last processes are torn down by the kernel after the run exits:
    # give that a few seconds, then no live (non-zombie) process may hold those uids
    deadline = time.monotonic() + 10.0
    while (left := _processes_of(uids)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not left, f"children outlived the run: {left}"


def _processes_of(uids: set[int]) -> list[str]:
    found = []
    for entry in Path("/proc").iterdir():
        try:
            status = entry.joinpath("status").read_text()
            uid = int(status.split("Uid:")[1].split()[0])
            state = status.split("State:")[1].split()[0]
        except (OSError, ValueError, IndexError):
            continue
        if uid in uids and state != "Z":
            found.append(f"{entry} (uid {uid}, state {state})")
    return found


def _attack_run(world: dict[str, Path], as_user: bool) -> tuple[str, list[dict[str, Any]], int]:
    """The run whose model answers the attacks; returns its output, the requests, trap hits."""
    trap = Trap()
    try:
        with OpenAIServer(["diff", "diff"], default="program") as server:
            server.programs.extend(_programs(world, int(server.url.split(":")[2][:-3]), trap.port))
            done = _run(
                world,
                as_user,
                f"problem.dir={world['problem_dir']}",
                "llm=openai_compatible",
                f"llm.api_base={server.url}",
                "llm.model=openai/test-model",
                f"llm.api_key_env={KEY_ENV}",
                "llm.timeout_s=5",
                f"checkpoint_dir={world['checkpoint']}",
                f"memory_bank_dir={world['bank']}",
                f"max_mutants={len(PLAN) + 2}",
                "evolution.max_in_flight=2",
                "evaluator.max_workers=2",
                "evaluator.memory_mb=1024",
                "evaluator.scratch_mb=64",
                "progress=false",
            )
            requests = list(server.requests)
    finally:
        trap.close()
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-4000:]
    return output, requests, trap.hits


def _check_every_attack_failed(rows: list[dict[str, Any]]) -> None:
    expected = {attack.name: attack.expect for attack in PLAN}
    attacked = set()
    for row in rows[1:]:
        name = re.search(r"# red-team: (\w+)", row["code"])
        if name is None:  # one of the two ordinary diffs
            continue
        attacked.add(name.group(1))
        assert not row["valid"], f"{name.group(1)} was scored valid"
        reason = row["invalid_reason"] or ""
        assert re.search(expected[name.group(1)], reason), (name.group(1), reason)
    assert attacked == set(expected)


def _check_clean_run(world: dict[str, Path], as_user: bool) -> float:
    """A fresh run of the same problem; returns its initial fitness."""
    clean = _run(
        world,
        as_user,
        f"problem.dir={world['problem_dir']}",
        f"checkpoint_dir={world['clean']}",
        "max_mutants=0",
        "memory=none",
        "progress=false",
    )
    assert clean.returncode == 0, clean.stderr[-3000:]
    return float(json.loads((world["clean"] / "summary.json").read_text())["initial_fitness"])


def _red_team(as_user: bool, bank: Path) -> None:
    world = _world(as_user, bank)
    try:
        output, requests, trap_hits = _attack_run(world, as_user)
        assert "sandbox weaker than configured" not in output, output[-2000:]
        rows = _rows(world["checkpoint"])
        assert len(rows) == len(PLAN) + 3
        _check_every_attack_failed(rows)
        _check_store_matches_events(world["checkpoint"], rows)
        pristine = (builtin_root() / "rastrigin" / "validator.py").read_bytes()
        assert (world["problem_dir"] / "validator.py").read_bytes() == pristine
        cards = json.loads((world["bank"] / "cards.json").read_text())  # the engine's JSON
        assert cards["format"] == "gigaevo.cards/1" and cards["n_cards"] > 0
        assert trap_hits == 0
        assert len(requests) == len(PLAN) + 2  # the engine's own calls, nothing else
        assert all(r["body"]["model"] == "test-model" for r in requests)
        assert all(r["headers"]["authorization"] == f"Bearer {KEY}" for r in requests)
        assert all(v not in output for v in CANARIES.values())
        _check_no_trace_outside(world)
        _check_no_child_left(world["checkpoint"])
        genuine = _genuine_fitness(rows[0]["code"])
        assert rows[0]["fitness"] == pytest.approx(genuine, rel=1e-12)
        initial = _check_clean_run(world, as_user)
        assert initial == pytest.approx(genuine, rel=1e-12)
    finally:
        shutil.rmtree(world["root"], ignore_errors=True)


def test_red_team_run_as_this_user(seeded_bank: Path) -> None:
    _red_team(as_user=False, bank=seeded_bank)


def test_red_team_run_as_an_ordinary_user(seeded_bank: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("already an ordinary user: the run above was one")
    if not (shutil.which("unshare") and shutil.which("setpriv") and shutil.which("mountpoint")):
        pytest.skip("needs util-linux (unshare, setpriv, mountpoint)")
    _red_team(as_user=True, bank=seeded_bank)
