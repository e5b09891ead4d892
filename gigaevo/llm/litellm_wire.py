"""The litellm wire: import it lazily and quietly, send one request, classify what went wrong.

litellm costs seconds to import, so nothing imports this module's
``load_litellm`` until a remote client makes its first call. Before the
import the model price map is pinned to the copy shipped in the package
(``LITELLM_LOCAL_MODEL_COST_MAP``) and litellm's offline mode is set, so it
fetches nothing on its own; its debug output and loggers are silenced, so
no request, header or key is ever printed.
"""

from __future__ import annotations

import email.utils
import logging
import os
import threading
import time
from dataclasses import dataclass
from types import ModuleType
from typing import Any

_lock = threading.Lock()
_module: ModuleType | None = None
_QUIET_LOGGERS = ("LiteLLM", "LiteLLM Router", "LiteLLM Proxy", "litellm", "httpx", "httpcore")


def load_litellm() -> ModuleType:
    """The litellm module, imported once (thread-safe), offline and quiet."""
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
            _module = litellm
        return _module


@dataclass(frozen=True)
class WireAnswer:
    """One successful completion as it came off the wire."""

    text: str
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float | None


def send(
    *,
    model: str,
    messages: list[dict[str, str]],
    api_key: str,
    api_base: str | None,
    timeout_s: float,
    params: dict[str, Any],
) -> WireAnswer:
    """One request through ``litellm.completion`` with litellm's own retries off.

    Raises:
        Exception: whatever litellm raises (see ``classify``).
    """
    litellm = load_litellm()
    response = litellm.completion(
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


@dataclass(frozen=True)
class Failure:
    """What a provider error means for the caller."""

    kind: str  # the error class name, e.g. "RateLimitError"
    status: int | None
    auth: bool  # credentials refused: stop, never retry
    retryable: bool  # rate limit, server error, timeout, connection error
    retry_after: float | None  # seconds the server asked us to wait


_RETRYABLE_NAMES = (
    "RateLimitError",
    "Timeout",
    "APIConnectionError",
    "InternalServerError",
    "ServiceUnavailableError",
    "BadGatewayError",
)


def classify(exc: BaseException) -> Failure:
    """Sort a provider error into authentication / retryable / fatal."""
    litellm = load_litellm()
    status = getattr(exc, "status_code", None)
    status = status if isinstance(status, int) else None
    auth_types = (litellm.AuthenticationError, litellm.PermissionDeniedError)
    retry_types = tuple(getattr(litellm, name) for name in _RETRYABLE_NAMES)
    auth = isinstance(exc, auth_types) or status in (401, 403)
    retryable = not auth and (
        isinstance(exc, (*retry_types, TimeoutError, ConnectionError))
        or status in (408, 409, 429)
        or (status is not None and status >= 500)
    )
    return Failure(
        kind=type(exc).__name__,
        status=status,
        auth=auth,
        retryable=retryable,
        retry_after=retry_after_seconds(exc),
    )


def retry_after_seconds(exc: BaseException) -> float | None:
    """The wait a 429/503 response asked for (``Retry-After`` seconds or date), if any."""
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None)
    if headers is None:
        return None
    try:
        millis = headers.get("retry-after-ms")
        if millis is not None:
            return float(millis) / 1000.0
        value = headers.get("retry-after")
    except (AttributeError, TypeError, ValueError):
        return None
    if value is None:
        return None
    try:
        return float(value)
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(str(value))
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def redact(text: str, secrets: tuple[str, ...]) -> str:
    """``text`` with every secret replaced by ``***`` (secrets shorter than 4 are ignored)."""
    for secret in secrets:
        if len(secret) >= 4:
            text = text.replace(secret, "***")
    return text
