"""The plain HTTP wire: ``POST {api_base}/chat/completions`` with httpx, no litellm.

For any server that speaks the OpenAI chat protocol (vLLM, Ollama,
llama.cpp, SGLang, a proxy) litellm adds nothing but seconds of import and
milliseconds of CPU per request, so the router sends those requests itself
(``llm.client=auto`` picks this wire for ``openai/<name>`` models with an
``api_base``). One ``httpx.AsyncClient`` (a keep-alive connection pool) runs
on the shared I/O loop (``wire.IOLoop``) under the total deadline. The body
is read in chunks and refused past ``MAX_ANSWER_BYTES``, so a server pouring
out garbage cannot fill the memory. Errors are named as litellm names them
(``RateLimitError``, ``InternalServerError``, ``APIConnectionError``,
``Timeout``, ...), so call logs read the same whichever wire sent the call.
Prices and schema support come from litellm's price map file
(``price_map``), read without importing litellm. The key goes only into the
``Authorization`` header; httpx's own request log is silenced.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import logging
import threading
from typing import Any

from gigaevo.llm import price_map
from gigaevo.llm.wire import (
    AUTH_STATUSES,
    NO_ROUTE_STATUS,
    DeadlineExceeded,
    Failure,
    WireAnswer,
    io_loop,
    retry_after_seconds,
    retryable_status,
)

_FIRST_REQUEST_MODULES = ("anyio._backends._asyncio", "encodings.idna")
MAX_ANSWER_BYTES = 16 * 1024 * 1024  # far beyond any real completion; a flood is cut here
_PREFIX = "openai/"

# status -> the name litellm gives the same failure (the call log's error_type)
_KINDS = {
    400: "BadRequestError",
    401: "AuthenticationError",
    403: "PermissionDeniedError",
    404: "NotFoundError",
    408: "Timeout",
    409: "APIError",
    422: "UnprocessableEntityError",
    429: "RateLimitError",
    500: "InternalServerError",
    502: "BadGatewayError",
    503: "ServiceUnavailableError",
}


class HTTPStatusFailure(Exception):
    """The server answered with an error status."""

    def __init__(self, status: int, message: str, headers: Any) -> None:
        super().__init__(f"HTTP {status}: {message}")
        self.status = status
        self.headers = headers


class MalformedAnswer(Exception):
    """A 200 answer that is not a chat completion (not JSON, no choices)."""


class AnswerTooLarge(Exception):
    """The body went past ``MAX_ANSWER_BYTES``."""


def request_model(model: str) -> str:
    """The model name the server is asked for: ``openai/<name>`` sends ``<name>``."""
    return model[len(_PREFIX) :] if model.startswith(_PREFIX) else model


class HTTPWire:
    """``wire.Wire`` over httpx; one instance (``HTTP``) serves the process."""

    name = "httpx"

    def __init__(self) -> None:
        self._client: Any = None
        self._lock = threading.Lock()

    def prepare(self) -> None:
        """Import httpx, build the client (its TLS context), start the I/O loop, import
        what a first request loads on its own (anyio's asyncio back end, the IDNA codec:
        a third of a second that would count against its deadline), read the price map."""
        self._pool()
        io_loop()
        for name in _FIRST_REQUEST_MODULES:  # (another back end: the first request imports it)
            with contextlib.suppress(ImportError):
                importlib.import_module(name)
        price_map.load()

    def _pool(self) -> Any:
        with self._lock:
            if self._client is None:
                import httpx

                for name in ("httpx", "httpcore"):  # their request lines name the URL: quiet
                    logger = logging.getLogger(name)
                    logger.setLevel(logging.WARNING)
                    logger.propagate = False
                limits = httpx.Limits(max_connections=None, max_keepalive_connections=256)
                self._client = httpx.AsyncClient(limits=limits, follow_redirects=False)
            return self._client

    def send(
        self,
        *,
        model: str,
        messages: list[dict[str, str]],
        api_key: str,
        api_base: str | None,
        timeout_s: float,
        params: dict[str, Any],
    ) -> WireAnswer:
        """One chat completion; see the module docstring.

        Raises:
            DeadlineExceeded: no complete answer within ``timeout_s``.
            CallAborted: ``abort_calls`` cancelled it.
            HTTPStatusFailure, MalformedAnswer, AnswerTooLarge, httpx.TransportError.
        """
        if not api_base:
            raise ValueError("the plain HTTP client needs llm.api_base")
        client = self._pool()
        url = api_base.rstrip("/") + "/chat/completions"
        body = {**params, "model": request_model(model), "messages": messages}
        headers = {"Authorization": f"Bearer {api_key}", "Accept": "application/json"}
        raw = io_loop().run_within(_post(client, url, body, headers, timeout_s), timeout_s)
        return _answer(model, raw)

    def classify(self, exc: BaseException) -> Failure:
        """Sort an error of ``send``; names follow litellm's (see the module docstring)."""
        if isinstance(exc, HTTPStatusFailure):
            status = exc.status
            auth = status in AUTH_STATUSES
            kind = _KINDS.get(status, "InternalServerError" if status >= 500 else "APIError")
            return Failure(
                kind,
                status,
                auth,
                retryable_status(status) and not auth,
                retry_after_seconds(exc.headers),
                unreachable=status == NO_ROUTE_STATUS,
            )
        if isinstance(exc, (DeadlineExceeded, TimeoutError)) or _is_httpx(exc, "TimeoutException"):
            return Failure("Timeout", None, False, True, None)
        if isinstance(exc, ConnectionError) or _is_httpx(exc, "TransportError"):
            # refused, reset, DNS failure, dropped mid-answer: nobody answered
            return Failure("APIConnectionError", None, False, True, None, unreachable=True)
        if isinstance(exc, MalformedAnswer):  # a proxy's error page, a cut body: try again
            return Failure("APIError", 200, False, True, None)
        return Failure(type(exc).__name__, None, False, False, None)

    def supports_response_schema(self, model: str) -> bool:
        return price_map.supports_response_schema(model)


def _is_httpx(exc: BaseException, name: str) -> bool:
    """Whether ``exc`` is an ``httpx.<name>`` (httpx is surely imported once it raised one)."""
    import sys

    httpx = sys.modules.get("httpx")
    return httpx is not None and isinstance(exc, getattr(httpx, name))


async def _post(
    client: Any, url: str, body: dict[str, Any], headers: dict[str, str], timeout_s: float
) -> bytes:
    """The body of a 200 answer; HTTPStatusFailure for any other status."""
    async with client.stream("POST", url, json=body, headers=headers, timeout=timeout_s) as reply:
        chunks: list[bytes] = []
        size = 0
        async for chunk in reply.aiter_bytes():
            size += len(chunk)
            if size > MAX_ANSWER_BYTES:
                raise AnswerTooLarge(f"the answer passed {MAX_ANSWER_BYTES} bytes")
            chunks.append(chunk)
        data = b"".join(chunks)
        if reply.status_code != 200:
            raise HTTPStatusFailure(reply.status_code, _error_message(data), reply.headers)
        return data


def _error_message(data: bytes) -> str:
    """The ``error.message`` of an error body, else its first 200 characters."""
    text = data[:4096].decode("utf-8", "replace")
    try:
        error = json.loads(text).get("error")
        message = error.get("message") if isinstance(error, dict) else error
        if isinstance(message, str) and message:
            return message[:300]
    except (ValueError, AttributeError):
        pass
    return " ".join(text.split())[:200]


def _answer(model: str, raw: bytes) -> WireAnswer:
    """The text and token counts of a chat completion body."""
    try:
        payload = json.loads(raw)
        choice = payload["choices"][0]
        text = choice["message"].get("content") or ""
    except (ValueError, KeyError, IndexError, TypeError, AttributeError):
        raise MalformedAnswer(f"not a chat completion ({len(raw)} bytes)") from None
    usage = payload.get("usage") if isinstance(payload.get("usage"), dict) else {}
    prompt_tokens = _count(usage.get("prompt_tokens"))
    completion_tokens = _count(usage.get("completion_tokens"))
    return WireAnswer(
        text=str(text),
        prompt_tokens=prompt_tokens,
        completion_tokens=completion_tokens,
        cost_usd=price_map.cost(model, prompt_tokens, completion_tokens),
    )


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


HTTP = HTTPWire()
