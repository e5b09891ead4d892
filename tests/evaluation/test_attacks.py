"""Red team at the evaluator level: every attack program ends invalid and changes nothing.

A module-wide "world" plays the engine's surroundings, owned by the engine's
user (as a real run's files are): a problem directory, a checkpoint with a
SQLite store, events and a summary, a card bank, a home with ``.bashrc``,
plus two listening sockets on 127.0.0.1 and credential-like variables in the
environment. The attacks (``attacks.py``) know all of it. After them every
file reads back byte for byte, no file named with the marker exists outside
a scratch, no connection reached a listener and no credential came back.

``test_unprivileged.py`` runs this module again as an ordinary user.
"""

from __future__ import annotations

import hashlib
import os
import re
import socket
import sqlite3
import tempfile
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest

import gigaevo
from gigaevo.evaluation import EvaluationResult, SandboxEvaluator

from .attacks import ATTACKS, Attack, as_program, render
from .helpers import write_problem

CANARIES = {
    "DATABASE_URL": "postgres://u:leak-canary-db@h/x",
    "GH_PAT": "ghp_leak-canary-pat",
    "MY_PASSWD": "leak-canary-pw",
}
MARKER = f"pwned-{os.getpid()}"


class Trap:
    """A TCP listener on 127.0.0.1 that counts every connection it accepts."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.hits = 0
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.hits += 1
            conn.close()

    def close(self) -> None:
        self.sock.close()


@dataclass
class World:
    root: Path
    paths: dict[str, object]
    watched: dict[Path, str] = field(default_factory=dict)
    results: dict[str, EvaluationResult] = field(default_factory=dict)


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _build_world(root: Path) -> dict[str, Path]:
    problem = write_problem(root / "problem").directory
    checkpoint = root / "checkpoint"
    checkpoint.mkdir()
    con = sqlite3.connect(checkpoint / "programs.sqlite3")
    con.execute("CREATE TABLE programs (id TEXT, data TEXT)")
    con.execute("INSERT INTO programs VALUES ('p0', '{\"valid\": false}')")
    con.commit()
    con.close()
    (checkpoint / "events.jsonl").write_text('{"event": "initial", "fitness": 3.0}\n')
    (checkpoint / "summary.json").write_text('{"llm_cost_usd": 0.0}\n')
    bank = root / "bank"
    bank.mkdir()
    (bank / "cards.json").write_text('{"cards": []}\n')
    home = root / "home"
    home.mkdir()
    (home / ".bashrc").write_text("# the engine user's shell\n")
    (home / ".netrc").write_text(f"machine api.example.com password {CANARIES['MY_PASSWD']}\n")
    (home / ".netrc").chmod(0o600)
    return {"problem_dir": problem, "checkpoint": checkpoint, "bank": bank, "home": home}


@pytest.fixture(scope="module")
def world() -> Iterator[World]:
    # Outside /tmp (each child gets its own /tmp): the problem directory is then
    # visible to children, read-only, rather than hidden behind the scratch.
    base = "/var/tmp" if os.access("/var/tmp", os.W_OK) else None
    root = Path(tempfile.mkdtemp(prefix="gigaevo-redteam-", dir=base))
    traps = [Trap(), Trap()]
    try:
        places = _build_world(root)
        package = Path(gigaevo.__file__).resolve().parent
        site = Path(sqlite3.__file__).parent  # the standard library stands in when read-only
        paths: dict[str, object] = {
            **places,
            "validator": places["problem_dir"] / "validator.py",
            "package": package,
            "site": Path(pytest.__file__).resolve().parent.parent,
            "port": traps[0].port,
            "trap_port": traps[1].port,
            "marker": MARKER,
        }
        assert site.is_dir()
        state = World(root, paths)
        for path in root.rglob("*"):
            if path.is_file():
                state.watched[path] = _digest(path)
        yield state
        assert sum(trap.hits for trap in traps) == 0  # no socket reached the host
    finally:
        for trap in traps:
            trap.close()
        _remove(root)


def _remove(root: Path) -> None:
    for path in sorted(root.rglob("*"), key=lambda p: -len(p.parts)):
        if path.is_dir() and not path.is_symlink():
            path.rmdir()
        else:
            path.unlink()
    root.rmdir()


@pytest.fixture(scope="module")
def evaluator(world: World) -> Iterator[SandboxEvaluator]:
    saved = {name: os.environ.get(name) for name in CANARIES}
    os.environ.update(CANARIES)
    problem = write_problem(Path(str(world.paths["problem_dir"])), timeout_s=3.0)
    try:
        with SandboxEvaluator(problem, max_workers=2, memory_mb=1024, scratch_mb=32) as ev:
            yield ev
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _run(evaluator: SandboxEvaluator, world: World, attack: Attack) -> EvaluationResult:
    code = as_program(render(attack, **world.paths))
    if attack.name == "other_childrens_scratch":  # two at once, on both workers
        with ThreadPoolExecutor(2) as pool:
            first, second = pool.map(evaluator.evaluate, [code, code])
        assert not second.valid, second.reason
        return first
    return evaluator.evaluate(code)


@pytest.mark.parametrize("attack", ATTACKS, ids=[a.name for a in ATTACKS])
def test_attack_is_invalid_with_a_clear_reason(
    evaluator: SandboxEvaluator, world: World, attack: Attack
) -> None:
    if not evaluator.isolation.get("filesystem") or not evaluator.isolation.get("seccomp"):
        pytest.skip(f"sandbox incomplete here: {evaluator.isolation_gaps}")
    result = _run(evaluator, world, attack)
    world.results[attack.name] = result
    assert not result.valid, f"{attack.name} succeeded: {result.stdout_tail[-500:]}"
    assert result.reason is not None and re.search(attack.expect, result.reason), result.reason
    # the run goes on: a plain program right after is judged correctly
    after = evaluator.evaluate("def solve():\n    return [1.0, 2.0]\n")
    assert after.valid and after.metrics == {"score": 3.0, "count": 2.0}, after.reason


def test_nothing_outside_the_scratch_changed(evaluator: SandboxEvaluator, world: World) -> None:
    if len(world.results) < len(ATTACKS):
        pytest.skip("runs after the attacks")
    for path, digest in world.watched.items():
        assert _digest(path) == digest, path
    places = [Path(p) for p in ("/", "/tmp", "/var/tmp", "/dev/shm", tempfile.gettempdir())]
    places += [Path(str(world.paths[k])) for k in ("home", "package", "site", "checkpoint")]
    places += [Path(str(world.paths["package"])) / "evaluation", Path.cwd(), world.root]
    for place in places:
        if place.is_dir():
            assert not [p for p in place.iterdir() if MARKER in p.name], place
    for result in world.results.values():
        for value in CANARIES.values():
            assert value not in result.stdout_tail and value not in (result.reason or "")


def test_timings_are_measured_not_reported(evaluator: SandboxEvaluator, world: World) -> None:
    forged = next(a for a in ATTACKS if a.name == "timing_forgery")
    result = evaluator.evaluate(as_program(render(forged, **world.paths)))
    assert not result.valid
    assert result.run_seconds >= 0.3  # it slept 0.3 s and claimed 0.0
    assert 0.0 < result.cpu_seconds < result.run_seconds
    assert result.peak_memory_bytes > 2**20


def test_layers_match_the_engine_identity(evaluator: SandboxEvaluator) -> None:
    """Root: a dedicated uid per worker. Anyone else: a user namespace of its own uid."""
    layers = evaluator.isolation
    assert evaluator.isolation_gaps is None, evaluator.isolation_gaps
    assert layers["namespaces"] and layers["filesystem"] and layers["network_namespace"]
    if os.geteuid() == 0:
        assert layers["dedicated_uid"] and not layers["user_namespace"]
        assert len(layers["child_uids"]) == 2  # one per worker, owning nothing
        assert all(uid >= 1 << 30 for uid in layers["child_uids"])
    else:
        assert layers["user_namespace"] and not layers["dedicated_uid"]
        assert layers["uid"] == os.geteuid() and layers["child_uids"] == [os.geteuid()]
