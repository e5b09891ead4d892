"""Benchmark the search against a (1+1) hill-climb on the same model server.

Run from the repository root::

    nice .venv/bin/python benchmarks/bench_search_llm.py [--seeds 0 1 2 3 4]
        [--mutants 200] [--checkpoints 50 200] [--problem circle_packing]
        [--out DIR] [--baseline DIR] [override ...]

A local OpenAI-compatible server (``PerturbServer``, in this process) answers
every mutation prompt with a SEARCH/REPLACE diff of the parent shown in the
prompt that perturbs 1 to 3 numeric literals inside its EVOLVE-BLOCK: floats
move by a Gaussian step of 10 % of their size (at least 0.01), integers by
one. Its draws are seeded by the server seed and the request's ``seed``
field (gigaevo sends each attempt's seed), so an answer depends on the
prompt and the attempt, not on arrival order. It ignores everything else in
the prompt (inspirations, feedback, memory), like a model that only tweaks
numbers.

For each seed, on the same server and the same seed program:

- **ours**: ``run.py`` with ``llm=openai_compatible`` pointed at the server,
  ``memory=none`` and otherwise the default configuration (the overrides given
  on the command line are added);
- **main** (with ``--baseline DIR``, a checkout of another version, e.g.
  ``git archive main | tar -x -C /tmp/base``): the same run with that
  checkout's ``run.py`` and defaults, on the same server seed;
- **(1+1) hill-climb**: the current best program is sent in the same prompt
  (``build_messages``); the child replaces it when it is valid and strictly
  better.

It prints the best-so-far after each checkpoint (mutants, the seed program
not counted), per seed and as medians with the range over seeds, the archive
coverage (occupied cells per island) at the end of each run, and the load
average.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import subprocess
import sys
import threading
import tokenize
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_search import _archive, launch  # noqa: E402

from gigaevo.evaluation import SandboxEvaluator  # noqa: E402
from gigaevo.evolution.store import ProgramStore  # noqa: E402
from gigaevo.llm.answer_format import (  # noqa: E402
    editable_line_ranges,
    make_diff_blocks,
    render_answer,
    render_diff_blocks,
)
from gigaevo.llm.prompt_reader import read_prompt  # noqa: E402
from gigaevo.mutation import (  # noqa: E402
    AnswerError,
    MutationRequest,
    apply_answer,
    build_messages,
    parse_answer,
)
from gigaevo.problems import Problem, load_problem  # noqa: E402
from gigaevo.programs import Program  # noqa: E402
from gigaevo.util import derive_seed  # noqa: E402


def perturb(code: str, rng: np.random.Generator) -> str | None:
    """``code`` with 1 to 3 numeric literals of its EVOLVE-BLOCK changed; None without any."""
    ranges = editable_line_ranges(code)
    tokens = [
        t
        for t in tokenize.generate_tokens(io.StringIO(code).readline)
        if t.type == tokenize.NUMBER
        and any(lo <= t.start[0] - 1 < hi for lo, hi in ranges)
        and not t.string.lower().endswith("j")
    ]
    if not tokens:
        return None
    k = min(len(tokens), int(rng.integers(1, 4)))
    chosen = sorted(rng.choice(len(tokens), size=k, replace=False), reverse=True)
    lines = code.splitlines(keepends=True)
    for index in chosen:  # right to left, so earlier offsets stay valid
        tok = tokens[int(index)]
        value = float(tok.string.replace("_", ""))
        is_int = tok.string.isdigit()
        if is_int:
            new = str(max(0, int(value) + int(rng.choice([-1, 1]))))
        else:
            step = rng.normal(0.0, 0.1) * max(abs(value), 0.01)
            new = f"{value + step:.6g}"
            new = new if any(c in new for c in ".e") else new + ".0"
        row, col = tok.start[0] - 1, tok.start[1]
        line = lines[row]
        lines[row] = line[:col] + new + line[tok.end[1] :]
    return "".join(lines)


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionError):  # clients closing idle sockets
            super().handle_error(request, client_address)


class PerturbServer:
    """An OpenAI-compatible server answering with ``perturb`` of the prompt's parent."""

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed
        self.requests = 0
        self._lock = threading.Lock()
        self._http = _QuietServer(("127.0.0.1", 0), _handler(self))
        self._thread = threading.Thread(target=self._http.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._http.server_address[1]}/v1"

    def answer(self, body: dict[str, Any]) -> str:
        with self._lock:
            self.requests += 1
            k = self.requests
        prompt = "\n".join(str(m.get("content", "")) for m in body.get("messages", []))
        parent = read_prompt(prompt).parent_code
        call_seed = int(body.get("seed", k)) % 2**63
        rng = np.random.default_rng([self.seed, call_seed])
        child = perturb(parent, rng) if parent else None
        if parent is None or child is None or child == parent:
            return "I cannot find numbers to change."
        code_part = render_diff_blocks(make_diff_blocks(parent, child))
        return render_answer(
            "tactic: perturb_constants\n- perturbed a few numbers",
            "Small moves of the numeric parameters.",
            (),
            code_part,
        )

    def __enter__(self) -> PerturbServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._http.shutdown()
        self._http.server_close()


def _handler(server: PerturbServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            return

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
            text = server.answer(body)
            usage = {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}
            reply = {
                "id": "perturb",
                "object": "chat.completion",
                "created": 0,
                "model": body.get("model", "perturb"),
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": text},
                        "finish_reason": "stop",
                    }
                ],
                "usage": usage,
            }
            data = json.dumps(reply).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    return Handler


def _ask(url: str, messages: list[dict[str, str]], seed: int) -> str:
    body = json.dumps({"model": "perturb", "messages": messages, "seed": seed}).encode()
    request = urllib.request.Request(
        url + "/chat/completions", body, {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        return str(json.loads(response.read())["choices"][0]["message"]["content"])


def hill_climb(url: str, problem: Problem, seed: int, n: int) -> list[float]:
    """Best-so-far after each of ``n`` mutants of a (1+1) hill-climb (index 0: the seed)."""
    metrics = problem.metrics
    with SandboxEvaluator(problem, max_workers=1) as evaluator:
        code = problem.initial_programs[0]
        first = evaluator.evaluate(code)
        best, best_metrics = float(first.metrics[metrics.primary]), dict(first.metrics)
        curve = [best]
        for i in range(n):
            parent = Program(id="hc", code=code, ordinal=i, fitness=best, metrics=best_metrics)
            request = MutationRequest(
                task_description=problem.description,
                metrics=metrics,
                parent=parent,
                inspirations=(),
                seed=derive_seed(seed, "hill_climb", i),
            )
            messages = [
                {"role": m.role, "content": m.content} for m in build_messages(request, "diff")
            ]
            try:
                child = apply_answer(code, parse_answer(_ask(url, messages, request.seed)), "diff")
            except AnswerError:
                curve.append(best)
                continue
            result = evaluator.evaluate(child)
            if result.valid and metrics.better(result.metrics[metrics.primary], best):
                code, best = child, float(result.metrics[metrics.primary])
                best_metrics = dict(result.metrics)
            curve.append(best)
    return curve


def ours(
    url: str, root: Path, problem: str, seed: int, n: int, out: Path, extra: list[str]
) -> tuple[list[float], tuple[int, ...]]:
    """Best-so-far after each mutant of a gigaevo run of checkout ``root`` on the server
    (index 0: the seed), and the occupied cells of each island at the end."""
    ckpt = out / f"{root.name}_{problem}_s{seed}"
    subprocess.run(["rm", "-rf", str(ckpt)], check=True)
    llm = [
        "llm=openai_compatible",
        f"llm.api_base={url}",
        "llm.model=openai/perturb",
        "llm.max_retries=0",
    ]
    launch(root, problem, seed, n, ckpt, out, [*llm, *extra])
    store = ProgramStore(ckpt / "programs.sqlite3")
    try:
        programs = sorted(store.iter_programs(), key=lambda p: p.ordinal)
    finally:
        store.close()
    spec = load_problem(name=problem).metrics
    n_initial = sum(1 for p in programs if not p.parent_ids)
    best = programs[0].fitness
    for p in programs[:n_initial]:
        best = p.fitness if spec.better(p.fitness, best) else best
    curve = [best]
    for p in programs[n_initial:]:
        if p.valid and spec.better(p.fitness, best):
            best = p.fitness
        curve.append(best)
    cells, _ = _archive(ckpt, json.loads((ckpt / "summary.json").read_text()))
    return curve, cells


def _median_range(values: list[float]) -> str:
    return f"{statistics.median(values):.5g} [{min(values):.5g}..{max(values):.5g}]"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--mutants", type=int, default=200)
    parser.add_argument("--checkpoints", type=int, nargs="+", default=[50, 200])
    parser.add_argument("--problem", default="circle_packing")
    parser.add_argument("--out", type=Path, default=Path("/tmp/gigaevo-bench-search-llm"))
    parser.add_argument("--baseline", type=Path, help="another checkout to run beside ours")
    parser.add_argument("overrides", nargs="*", help="extra Hydra overrides for ours")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    problem = load_problem(name=args.problem)
    print(f"load average at start: {os.getloadavg()}")
    checkouts = {"ours": (ROOT, list(args.overrides))}
    if args.baseline is not None:
        checkouts["main"] = (args.baseline.resolve(), [])
    table: dict[str, dict[int, list[float]]] = {name: {} for name in [*checkouts, "hill-climb"]}
    coverage: dict[str, list[float]] = {name: [] for name in checkouts}
    for seed in args.seeds:
        with PerturbServer(seed=1000 + seed) as server:
            for name, (root, extra) in checkouts.items():
                curve, cells = ours(
                    server.url, root, args.problem, seed, args.mutants, args.out, extra
                )
                table[name][seed] = curve
                coverage[name].extend(float(c) for c in cells)
            table["hill-climb"][seed] = hill_climb(server.url, problem, seed, args.mutants)
        row = "  ".join(
            f"{name} @{c}: {curves[seed][c]:.5g}"
            for name, curves in table.items()
            for c in args.checkpoints
        )
        print(f"seed {seed}: {row}", flush=True)
    print(f"load average at end: {os.getloadavg()}")
    print(f"\nbest-so-far over {len(args.seeds)} seeds ({args.problem}), median [min..max]:")
    for name, curves in table.items():
        cells = "  ".join(
            f"@{c}: {_median_range([curve[c] for curve in curves.values()])}"
            for c in args.checkpoints
        )
        cover = f"  cells/island {_median_range(coverage[name])}" if name in coverage else ""
        print(f"  {name:10} {cells}{cover}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
