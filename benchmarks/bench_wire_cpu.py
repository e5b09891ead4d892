"""CPU per model request of each wire: the plain HTTP client (httpx) against litellm.

Usage:
    .venv/bin/python benchmarks/bench_wire_cpu.py [--requests 300] [--threads 8]

``benchmarks/_latency_server.py`` (a process of its own, answering at once)
serves ``LiteLLMRouter("openai/bench-model", client=...)`` for each wire in
turn, in this process: ``--threads`` threads send ``--requests`` mutation
prompts in all, as the engine's workers do. The import and warm-up of each
wire (and five warm-up requests) are left out; what is printed is this
process's CPU time (every thread: the callers and the I/O loop) per request,
and the wall time per request, with the load average. CPU time is what a
loaded machine distorts least, and what a loop at 32 in flight on two cores
runs short of (issue 13: about 30 ms per mutant in all).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import threading
import time
from pathlib import Path

from bench_dispatch import Server

from gigaevo.llm import LiteLLMRouter
from gigaevo.llm.base import Message

PROGRAM = (
    "# Parent program\n```python\n# EVOLVE-BLOCK-START\nimport numpy as np\n\n"
    "def run_packing():\n    centers = np.array([[0.25, 0.25], [0.75, 0.75]])\n"
    "    radii = np.array([0.1, 0.1])\n    return centers, radii\n# EVOLVE-BLOCK-END\n```\n"
)


def measure(url: str, client: str, requests: int, threads: int) -> tuple[float, float]:
    """(CPU ms, wall ms) per request of ``requests`` sent by ``threads`` threads."""
    router = LiteLLMRouter("openai/bench-model", api_base=url, client=client, max_retries=0)
    prompt = [Message("system", "You improve programs.\n" * 40), Message("user", PROGRAM * 8)]
    for seed in range(5):
        router.complete(prompt, seed=seed)
    share = [requests // threads + (i < requests % threads) for i in range(threads)]

    def send(n: int, first: int) -> None:
        for seed in range(first, first + n):
            router.complete(prompt, seed=seed)

    workers = [threading.Thread(target=send, args=(n, 1000 * (i + 1))) for i, n in enumerate(share)]
    cpu, wall = time.process_time(), time.perf_counter()
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    return 1000 * cpu / requests, 1000 * wall / requests


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--threads", type=int, default=8)
    args = parser.parse_args()
    print(f"load average before: {os.getloadavg()[0]:.2f}")
    print("| wire | requests | threads | CPU ms/request | wall ms/request |")
    print("|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        server = Server(Path(tmp), 0, 0.001, 0.0)
        try:
            for client in ("httpx", "litellm"):
                cpu, wall = measure(server.url, client, args.requests, args.threads)
                print(f"| {client} | {args.requests} | {args.threads} | {cpu:.2f} | {wall:.2f} |")
        finally:
            server.close()
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
