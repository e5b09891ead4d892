"""A latency-emulating OpenAI-compatible chat server for the dispatch benchmark.

Run as a process of its own (so its threads never share a GIL with the
framework being measured):

    python benchmarks/_latency_server.py --log requests.jsonl [--median 0.5 --sigma 1 --seed 0]

It prints ``port <n>`` once it listens on 127.0.0.1. Request ``k`` (in order
of arrival) waits a log-normal time (median ``--median`` s, log-sd
``--sigma``, drawn from ``Random(seed, k)``: the same sequence every run),
then answers a SEARCH/REPLACE block that scales the decimal numbers on one
line inside the EVOLVE block of the program to improve, with a short change
report: the shape of answer both gigaevo and OpenEvolve parse. The program to
improve is the first fenced python block holding an EVOLVE-BLOCK-START marker
after the last "# Parent program" or "# Current Program" heading line (else
the first such block). Each answered request is one JSON line in ``--log``: ``k``,
``arrival``, ``latency`` (the emulated wait), ``done`` (epoch seconds).

``--behaviour`` turns it into a misbehaving server (``bench_remote_failures.py``):
``trickle`` sends the answer one byte every ``--trickle-seconds``; ``huge``
answers ``--huge-chars`` characters of prose without any code.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import random
import re
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

_FENCE = re.compile(r"```(?:python|py)?\n(.*?)```", re.DOTALL)
_DECIMAL = re.compile(r"(?<![\w.])\d+\.\d+")
_HEADING = re.compile(r"^#+\s*(parent program|current program)\s*$", re.IGNORECASE | re.MULTILINE)


def program_to_improve(prompt: str) -> str | None:
    """The parent program's code in a mutation prompt (gigaevo's or OpenEvolve's)."""
    headings = list(_HEADING.finditer(prompt))
    for start in ([headings[-1].end()] if headings else []) + [0]:
        for match in _FENCE.finditer(prompt, start):
            if "EVOLVE-BLOCK-START" in match.group(1):
                return match.group(1)
    return None


def answer(prompt: str, rng: random.Random) -> str:
    """A SEARCH/REPLACE answer scaling the decimals on one line of the EVOLVE block."""
    code = program_to_improve(prompt)
    lines: list[str] = []
    inside = False
    for line in (code or "").split("\n"):
        if "EVOLVE-BLOCK-START" in line:
            inside = True
        elif "EVOLVE-BLOCK-END" in line:
            break
        elif inside and not line.lstrip().startswith("#") and _DECIMAL.search(line):
            lines.append(line)
    if not lines:
        return "I could not find a program to improve."
    old = rng.choice(lines)

    def scale(m: re.Match[str]) -> str:
        return f"{float(m.group(0)) * (1.0 + rng.gauss(0.0, 0.08)):.4f}"

    new = _DECIMAL.sub(scale, old)
    return (
        "## Change report\ntactic: perturb_constants\n- nudged the constants on one line\n\n"
        "## Explanation\nSmall moves of the layout constants may free room for larger circles.\n\n"
        "card_ids_used: []\n\n## Code\n"
        f"<<<<<<< SEARCH\n{old}\n=======\n{new}\n>>>>>>> REPLACE\n"
    )


def completion(
    answer_id: str, model: str, text: str, prompt_chars: int, created: float
) -> dict[str, Any]:
    """An OpenAI chat completion holding ``text``, tokens counted as 4 characters each."""
    n_in, n_out = max(1, prompt_chars // 4), max(1, len(text) // 4)
    return {
        "id": answer_id,
        "object": "chat.completion",
        "created": int(created),
        "model": model,
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
        ],
        "usage": {"prompt_tokens": n_in, "completion_tokens": n_out, "total_tokens": n_in + n_out},
    }


class LatencyServer:
    """The server (see the module docstring)."""

    def __init__(
        self,
        log: Path,
        median: float,
        sigma: float,
        seed: int,
        behaviour: str = "answer",
        trickle_seconds: float = 0.5,
        huge_chars: int = 350_000,
    ) -> None:
        self.log = log.open("a", encoding="utf-8")
        self.median, self.sigma, self.seed = median, sigma, seed
        self.behaviour = behaviour
        self.trickle_seconds, self.huge_chars = trickle_seconds, huge_chars
        self._k = 0
        self._lock = threading.Lock()
        self.http = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self.http.daemon_threads = True
        self.http.request_queue_size = 256

    def next_request(self) -> tuple[int, float, random.Random]:
        with self._lock:
            k, self._k = self._k, self._k + 1
        rng = random.Random(self.seed * 1_000_003 + k)
        return k, rng.lognormvariate(math.log(self.median), self.sigma), rng

    def record(self, **fields: Any) -> None:
        with self._lock:
            self.log.write(json.dumps(fields) + "\n")
            self.log.flush()


def _handler(server: LatencyServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            return

        def do_GET(self) -> None:  # /v1/models, for clients that look first
            self._send(200, {"object": "list", "data": [{"id": "bench-model", "object": "model"}]})

        def do_POST(self) -> None:
            arrival = time.time()
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
            k, latency, rng = server.next_request()
            time.sleep(latency)
            prompt = "\n".join(str(m.get("content", "")) for m in body.get("messages", []))
            if server.behaviour == "huge":
                line = "Let me think about this program again from the start. "
                text = (line * (server.huge_chars // len(line) + 1))[: server.huge_chars]
            else:
                text = answer(prompt, rng)
            model = body.get("model", "bench-model")
            self._send(200, completion(f"chatcmpl-{k}", model, text, len(prompt), arrival))
            server.record(k=k, arrival=arrival, latency=latency, done=time.time())

        def _send(self, status: int, payload: Any) -> None:
            data = json.dumps(payload).encode()
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if server.behaviour != "trickle" or status != 200:
                    self.wfile.write(data)
                    return
                for i in range(len(data)):  # one byte at a time, for ever if need be
                    self.wfile.write(data[i : i + 1])
                    self.wfile.flush()
                    time.sleep(server.trickle_seconds)
            except (BrokenPipeError, ConnectionResetError):
                return

    return Handler


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--log", type=Path, required=True)
    parser.add_argument("--median", type=float, default=0.5)
    parser.add_argument("--sigma", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--behaviour", choices=("answer", "trickle", "huge"), default="answer")
    parser.add_argument("--trickle-seconds", type=float, default=0.5)
    parser.add_argument("--huge-chars", type=int, default=350_000)
    args = parser.parse_args()
    server = LatencyServer(
        args.log,
        args.median,
        args.sigma,
        args.seed,
        args.behaviour,
        args.trickle_seconds,
        args.huge_chars,
    )
    print(f"port {server.http.server_address[1]}", flush=True)
    with contextlib.suppress(KeyboardInterrupt):
        server.http.serve_forever()
    sys.exit(0)


if __name__ == "__main__":
    main()
