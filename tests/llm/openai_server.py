"""A small OpenAI-compatible chat server for wire tests, scripted per request.

``OpenAIServer`` listens on 127.0.0.1 (a free port) in a background thread and
implements ``POST /v1/chat/completions``. Each request takes the next
behaviour from the script (the default one when the script is used up) and
answers like a model would, with ``usage`` token counts:

- ``diff``: a SEARCH/REPLACE answer that scales the numbers on the first
  numeric line inside the parent's EVOLVE block (found in the prompt);
- ``rewrite``: the same change as a whole program in a fenced python block;
- ``json``: the ``json_payload`` as the message content;
- ``garbage``: prose without any code;
- ``broken_diff``: a SEARCH block cut off before its REPLACE line;
- ``bad_search``: a SEARCH text that is not in the parent;
- ``rate_limit``: HTTP 429 with ``Retry-After``;
- ``server_error``: HTTP 500;
- ``slow``: sleeps ``slow_seconds`` and then answers like ``diff``;
- ``trickle``: a ``diff`` answer whose body is sent one byte every
  ``trickle_seconds`` (headers at once, as a stalled proxy would);
- ``huge_garbage``: ``huge_chars`` characters of prose without code;
- ``unauthorized``: HTTP 401 (its message echoes the bearer token, as a
  careless proxy might, so tests can check that nothing repeats it);
- ``forbidden``: HTTP 403; ``not_found``: HTTP 404 (an unknown model).
- ``malformed``: HTTP 200 whose body is no JSON (a proxy's HTML page, cut short).
- ``program``: the next of the ``programs`` given to the server, whole, in a
  fenced block (the new content of the parent's EVOLVE block): how the
  red-team tests feed attack programs into a run.

With ``latency=(median, sigma)`` every answer waits a log-normal time first
(seeded by ``seed`` and the request number, so a replayed script waits the
same), the heavy tail of a real model. ``closed_url()`` is an ``api_base``
where nothing listens.

Every request is recorded (``requests``: path, headers, JSON body, the
behaviour used) for assertions.
"""

from __future__ import annotations

import json
import math
import random
import re
import socket
import threading
import time
from collections import deque
from collections.abc import Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

BEHAVIOURS = (
    "diff",
    "rewrite",
    "json",
    "garbage",
    "broken_diff",
    "bad_search",
    "rate_limit",
    "server_error",
    "slow",
    "trickle",
    "huge_garbage",
    "unauthorized",
    "forbidden",
    "not_found",
    "program",
    "malformed",
)
_NUMBER = re.compile(r"(?<![\w.])-?\d+\.\d+|(?<![\w.])-?\d+(?![\w.])")
_PARENT = re.compile(r"## Parent program.*?```python\n(.*?)```", re.DOTALL)


def parent_program(prompt: str) -> str | None:
    """The parent program's code as the mutation prompt shows it, or None."""
    match = _PARENT.search(prompt)
    return match.group(1) if match else None


def changed_line(code: str, k: int) -> tuple[str, str] | None:
    """(old line, new line): the first numeric line inside the EVOLVE block, numbers scaled."""
    inside = False
    for line in code.split("\n"):
        if "EVOLVE-BLOCK-START" in line:
            inside = True
        elif "EVOLVE-BLOCK-END" in line:
            break
        elif inside and not line.lstrip().startswith("#") and _NUMBER.search(line):
            factor = 0.5 + 0.03 * (k % 13)
            return line, _NUMBER.sub(lambda m, f=factor: f"{float(m.group(0)) * f:.4f}", line)
    return None


def closed_url() -> str:
    """An ``api_base`` on 127.0.0.1 where nothing listens (a port just bound and released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


def _report(body: str) -> str:
    return (
        "## Change report\ntactic: perturb_constants\n- scaled the coordinates\n\n"
        "## Explanation\nSmaller coordinates lower the Rastrigin value.\n\n"
        f"card_ids_used: []\n\n## Code\n{body}"
    )


def mutation_answer(prompt: str, behaviour: str, k: int) -> str:
    """The text of a model answer of kind ``behaviour`` to a mutation prompt."""
    code = parent_program(prompt)
    change = changed_line(code, k) if code else None
    if behaviour == "garbage" or change is None or code is None:
        return "I am sorry, I cannot help with that. Perhaps try a different approach?"
    old, new = change
    if behaviour == "rewrite":
        return _report(f"```python\n{code.replace(old, new, 1)}```\n")
    if behaviour == "broken_diff":
        return _report(f"<<<<<<< SEARCH\n{old}\n=======\n{new}\n")
    if behaviour == "bad_search":
        return _report(
            f"<<<<<<< SEARCH\n    y = 12345  # not there\n=======\n{new}\n>>>>>>> REPLACE\n"
        )
    return _report(f"<<<<<<< SEARCH\n{old}\n=======\n{new}\n>>>>>>> REPLACE\n")


class OpenAIServer:
    """Scripted OpenAI-compatible server; use as a context manager.

    Args:
        script: behaviours for the first requests, in order of arrival.
        default: the behaviour once the script is used up.
        slow_seconds: how long ``slow`` waits before answering.
        trickle_seconds: the pause between two bytes of a ``trickle`` body.
        huge_chars: the length of a ``huge_garbage`` answer.
        latency: (median, sigma) of a log-normal wait before each answer, or None.
        seed: seeds the latency draws.
        retry_after: the ``Retry-After`` header value of a 429.
        json_payload: the content of ``json`` answers.
        programs: the code ``program`` answers return, in order of arrival.
    """

    def __init__(
        self,
        script: Iterable[str] = (),
        *,
        default: str = "diff",
        slow_seconds: float = 2.0,
        trickle_seconds: float = 0.5,
        huge_chars: int = 500_000,
        latency: tuple[float, float] | None = None,
        seed: int = 0,
        retry_after: str = "0",
        json_payload: Any = None,
        programs: Iterable[str] = (),
    ) -> None:
        for name in [*script, default]:
            if name not in BEHAVIOURS:
                raise ValueError(f"unknown behaviour {name!r}")
        self._script: deque[str] = deque(script)
        self.default = default
        self.slow_seconds = slow_seconds
        self.trickle_seconds = trickle_seconds
        self.huge_chars = huge_chars
        self.latency = latency
        self.seed = seed
        self.retry_after = retry_after
        self.json_payload = json_payload if json_payload is not None else {"ok": True}
        self.programs: deque[str] = deque(programs)
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        """The ``api_base`` to give a client: ``http://127.0.0.1:<port>/v1``."""
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def push(self, *behaviours: str) -> None:
        """Append behaviours to the script."""
        with self._lock:
            self._script.extend(behaviours)

    def behaviours(self) -> list[str]:
        """The behaviour used for each request so far, in order of arrival."""
        with self._lock:
            return [r["behaviour"] for r in self.requests]

    def __enter__(self) -> OpenAIServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def delay(self, k: int) -> float:
        """The log-normal wait before answer ``k`` (0 without ``latency``)."""
        if self.latency is None:
            return 0.0
        median, sigma = self.latency
        return random.Random(self.seed * 1_000_003 + k).lognormvariate(math.log(median), sigma)

    def _next(self, record: dict[str, Any]) -> tuple[str, int]:
        with self._lock:
            behaviour = self._script.popleft() if self._script else self.default
            record["behaviour"] = behaviour
            self.requests.append(record)
            return behaviour, len(self.requests)


def _handler_for(server: OpenAIServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # silence stderr
            return

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length)
            try:
                body = json.loads(raw or b"{}")
            except ValueError:
                body = {}
            record = {
                "path": self.path,
                "headers": {k.lower(): v for k, v in self.headers.items()},
                "body": body,
            }
            if not self.path.rstrip("/").endswith("/chat/completions"):
                self._send(404, {"error": {"message": f"no route {self.path}"}})
                return
            behaviour, k = server._next(record)
            self._answer(behaviour, k, body)

        def _answer(self, behaviour: str, k: int, body: dict[str, Any]) -> None:
            if behaviour == "rate_limit":
                error = {"message": "Rate limit reached", "type": "rate_limit_exceeded"}
                self._send(429, {"error": error}, {"Retry-After": server.retry_after})
                return
            if behaviour == "server_error":
                self._send(500, {"error": {"message": "internal error", "type": "server_error"}})
                return
            if behaviour == "unauthorized":
                token = self.headers.get("Authorization", "")
                message = f"Incorrect API key provided: {token}"
                self._send(401, {"error": {"message": message, "type": "invalid_request_error"}})
                return
            if behaviour in ("forbidden", "not_found"):
                status = 403 if behaviour == "forbidden" else 404
                self._send(
                    status, {"error": {"message": behaviour, "type": "invalid_request_error"}}
                )
                return
            if behaviour == "malformed":
                self._send_raw(200, b"<html><body><h1>502 Bad Gat", "text/html")
                return
            time.sleep(server.delay(k) + (server.slow_seconds if behaviour == "slow" else 0.0))
            prompt = "\n".join(str(m.get("content", "")) for m in body.get("messages", []))
            if behaviour == "json":
                text = json.dumps(server.json_payload)
            elif behaviour == "program":
                with server._lock:
                    code = server.programs.popleft() if server.programs else "pass\n"
                text = _report(f"```python\n{code}```\n")
            elif behaviour == "huge_garbage":
                line = "I cannot see a way to improve this program; let me think again. "
                text = (line * (server.huge_chars // len(line) + 1))[: server.huge_chars]
            else:
                kind = "diff" if behaviour in ("slow", "trickle") else behaviour
                text = mutation_answer(prompt, kind, k)
            payload = _completion(body.get("model", "model"), text, prompt, k)
            if behaviour == "trickle":
                self._trickle(json.dumps(payload).encode())
            else:
                self._send(200, payload)

        def _trickle(self, data: bytes) -> None:
            try:
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                for i in range(len(data)):
                    self.wfile.write(data[i : i + 1])
                    self.wfile.flush()
                    time.sleep(server.trickle_seconds)
            except (BrokenPipeError, ConnectionResetError):
                return  # the client gave up: the deadline worked

        def _send(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
            self._send_raw(status, json.dumps(payload).encode(), "application/json", headers)

        def _send_raw(
            self, status: int, data: bytes, kind: str, headers: dict[str, str] | None = None
        ) -> None:
            try:
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(data)))
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                return  # the client gave up (a timeout); nothing to tell it

    return Handler


def _completion(model: str, text: str, prompt: str, k: int) -> dict[str, Any]:
    prompt_tokens = max(1, len(prompt) // 4)
    completion_tokens = max(1, len(text) // 4)
    return {
        "id": f"chatcmpl-{k}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": "stop",
            }
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }
