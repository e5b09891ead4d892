"""The litellm wire: import litellm lazily and quietly, send one request, classify what went wrong.

Used for the providers that need litellm (Gemini, OpenAI's own API,
DeepInfra, OpenRouter, ...: every model id the plain HTTP wire does not
take, or any model with ``llm.client=litellm``). litellm costs seconds to
import, so it is imported only for such a client: ``load_litellm`` on the
first call, or earlier in the background (``preload.start_loading``, which
the pipeline calls before it loads the problem and starts the sandbox).
Before the import the model price map is pinned to the copy shipped in the
package (``LITELLM_LOCAL_MODEL_COST_MAP``) and litellm's offline mode is set,
so it fetches nothing on its own; its debug output and loggers are silenced,
so no request, header or key is ever printed. Requests run as
``litellm.acompletion`` on the shared I/O loop under the total deadline
(``wire.IOLoop.run_within``).
"""

from __future__ import annotations

import logging
import os
import threading
from types import ModuleType
from typing import Any

from gigaevo.llm.wire import (
    AUTH_STATUSES,
    NO_ROUTE_STATUS,
    Failure,
    WireAnswer,
    io_loop,
    retry_after_seconds,
    retryable_status,
)

_lock = threading.Lock()
_module: ModuleType | None = None
_QUIET_LOGGERS = ("LiteLLM", "LiteLLM Router", "LiteLLM Proxy", "litellm", "httpx", "httpcore")


def load_litellm() -> ModuleType:
    """The litellm module, imported and warmed up once (thread-safe), offline and quiet."""
    global _module
    with _lock:
        if _module is None:
            os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
            os.environ.setdefault("LITELLM_OFFLINE_MODE", "true")
            import litellm

            litellm.suppress_debug_info = True
            litellm.set_verbose = False
            litellm.turn_off_message_logging = True
            for name in _QUIET_LOGGERS:
                logger = logging.getLogger(name)
                logger.setLevel(logging.CRITICAL)
                logger.propagate = False
            _warm_up(litellm)
            _module = litellm
        return _module


def _warm_up(litellm: ModuleType) -> None:
    """One mocked completion (no network): litellm loads what a call needs on first use.

    That first use costs about a second; done here it never counts against a
    request's deadline.
    """
    try:
        io_loop().run(
            litellm.acompletion(
                model="openai/warm-up",
                messages=[{"role": "user", "content": "warm-up"}],
                mock_response="ok",
            )
        )
    except Exception:  # only a warm-up: the first real call does the same work
        logging.getLogger("gigaevo").debug("litellm warm-up failed", exc_info=True)


def send(
    *,
    model: str,
    messages: list[dict[str, str]],
    api_key: str,
    api_base: str | None,
    timeout_s: float,
    params: dict[str, Any],
) -> WireAnswer:
    """One request through ``litellm.acompletion``, litellm's own retries off, ``timeout_s`` in all.

    Raises:
        DeadlineExceeded: no complete answer within ``timeout_s``.
        CallAborted: ``abort_calls`` cancelled it.
        Exception: whatever litellm raises (see ``classify``).
    """
    litellm = load_litellm()
    request = litellm.acompletion(
        model=model,
        messages=messages,
        api_key=api_key,
        api_base=api_base,
        timeout=timeout_s,
        max_retries=0,
        num_retries=0,
        drop_params=True,
        **params,
    )
    response = io_loop().run_within(request, timeout_s)
    choice = response.choices[0] if response.choices else None
    text = (choice.message.content if choice is not None else None) or ""
    usage = getattr(response, "usage", None)
    hidden = getattr(response, "_hidden_params", None) or {}
    cost = hidden.get("response_cost") if isinstance(hidden, dict) else None
    return WireAnswer(
        text=str(text),
        prompt_tokens=int(getattr(usage, "prompt_tokens", 0) or 0),
        completion_tokens=int(getattr(usage, "completion_tokens", 0) or 0),
        cost_usd=float(cost) if isinstance(cost, (int, float)) else None,
    )


def supports_response_schema(model: str) -> bool:
    """Whether litellm's price map says ``model`` accepts a JSON-schema ``response_format``."""
    litellm = load_litellm()
    try:
        return bool(litellm.supports_response_schema(model=model))
    except Exception:  # litellm raises plain Exception for models it does not know
        return False


_RETRYABLE_NAMES = (
    "RateLimitError",
    "Timeout",
    "APIConnectionError",
    "InternalServerError",
    "ServiceUnavailableError",
    "BadGatewayError",
)


def classify(exc: BaseException) -> Failure:
    """Sort a provider error into authentication / retryable / fatal, and reachability."""
    litellm = load_litellm()
    status = getattr(exc, "status_code", None)
    status = status if isinstance(status, int) else None
    timeout = isinstance(exc, (litellm.Timeout, TimeoutError))
    if not timeout and _no_connection(exc):
        # litellm reports a refused connection as InternalServerError with status 500
        return Failure("APIConnectionError", None, False, True, None, unreachable=True)
    auth_types = (litellm.AuthenticationError, litellm.PermissionDeniedError)
    retry_types = tuple(getattr(litellm, name) for name in _RETRYABLE_NAMES)
    auth = isinstance(exc, auth_types) or status in AUTH_STATUSES
    retryable = not auth and (
        isinstance(exc, (*retry_types, TimeoutError, ConnectionError)) or retryable_status(status)
    )
    headers = getattr(getattr(exc, "response", None), "headers", None)
    return Failure(
        kind="Timeout" if timeout else type(exc).__name__,
        status=status,
        auth=auth,
        retryable=retryable,
        retry_after=retry_after_seconds(headers),
        unreachable=not timeout
        and (isinstance(exc, litellm.NotFoundError) or status == NO_ROUTE_STATUS),
    )


_CONNECTION_ERRORS = ("APIConnectionError", "ConnectError", "ClientConnectorError")
_TIMEOUT_ERRORS = ("APITimeoutError", "Timeout", "ReadTimeout", "ConnectTimeout")


def _no_connection(exc: BaseException) -> bool:
    """Whether ``exc`` (or what caused it) says no connection could be made or was lost."""
    seen: BaseException | None = exc
    for _ in range(12):  # causes chain through litellm, openai, httpx / aiohttp, the socket
        if seen is None:
            return False
        names = {cls.__name__ for cls in type(seen).__mro__}
        if isinstance(seen, TimeoutError) or names & set(_TIMEOUT_ERRORS):
            return False
        if isinstance(seen, ConnectionError) or names & set(_CONNECTION_ERRORS):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


class LiteLLMWire:
    """``wire.Wire`` over litellm (the functions above); one instance (``LITELLM``)."""

    name = "litellm"
    send = staticmethod(send)
    classify = staticmethod(classify)
    supports_response_schema = staticmethod(supports_response_schema)

    def prepare(self) -> None:
        load_litellm()


LITELLM = LiteLLMWire()
