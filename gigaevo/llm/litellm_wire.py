"""The litellm wire: import it lazily and quietly, send one request, classify what went wrong.

litellm costs seconds to import, so it is imported only for a remote client:
``load_litellm`` on the first call, or earlier in the background
(``start_loading``, which the pipeline calls before it loads the problem and
starts the sandbox, so that the import overlaps that work). Before the
import the model price map is pinned to the copy shipped in the package
(``LITELLM_LOCAL_MODEL_COST_MAP``) and litellm's offline mode is set, so it
fetches nothing on its own; its debug output and loggers are silenced, so
no request, header or key is ever printed.

Every request runs as ``litellm.acompletion`` on one event loop in a
background thread (``_IOLoop``), under ``asyncio.wait_for``: ``timeout_s``
bounds the whole request, a body trickled byte by byte included (the HTTP
client's own timeout applies per read, so a server sending a byte every few
seconds would otherwise hold a call for ever). ``abort_calls`` cancels every
request in flight (the engine calls it when the run is interrupted).
"""

from __future__ import annotations

import concurrent.futures
import email.utils
import importlib
import logging
import os
import threading
import time
from collections.abc import Coroutine
from dataclasses import dataclass
from types import ModuleType
from typing import Any, TypeVar

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
        _io_loop().run(
            litellm.acompletion(
                model="openai/warm-up",
                messages=[{"role": "user", "content": "warm-up"}],
                mock_response="ok",
            )
        )
    except Exception:  # only a warm-up: the first real call does the same work
        logging.getLogger("gigaevo").debug("litellm warm-up failed", exc_info=True)


def start_loading(*then_import: str) -> threading.Thread:
    """Import litellm (if not yet done), then the modules ``then_import``, in a thread.

    The first call then waits only for what is left of the import. One thread
    does it all, one module after the other, so that the background imports
    never race each other for a shared dependency. It is not a daemon: a
    process that ends early waits for it, because a daemon thread frozen at
    exit in the middle of an import keeps the import lock, and the next import
    (a finaliser's) would wait for ever.
    """
    thread = threading.Thread(target=_load_quietly, args=then_import, name="gigaevo-import")
    thread.start()
    return thread


def _load_quietly(*then_import: str) -> None:
    try:
        load_litellm()
        for name in then_import:
            importlib.import_module(name)
    except Exception:  # a broken install: the first use raises it again, where it is reported
        logging.getLogger("gigaevo").debug("background import failed", exc_info=True)


class DeadlineExceeded(TimeoutError):
    """A request did not complete within its total deadline (``timeout_s``)."""


class CallAborted(Exception):
    """``abort_calls`` cancelled the request (the run is stopping); never retried."""


_T = TypeVar("_T")


class _IOLoop:
    """One asyncio event loop in a daemon thread; blocking callers wait on its futures."""

    def __init__(self) -> None:
        import asyncio  # here, not at the top: an offline run never pays its import

        self._asyncio = asyncio
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self.loop.run_forever, name="gigaevo-llm-io", daemon=True
        )
        self._thread.start()
        self._pending: set[concurrent.futures.Future[Any]] = set()
        self._lock = threading.Lock()

    def run(self, coro: Coroutine[Any, Any, _T]) -> _T:
        future = self._asyncio.run_coroutine_threadsafe(coro, self.loop)
        with self._lock:
            self._pending.add(future)
        try:
            return future.result()
        except concurrent.futures.CancelledError:
            raise CallAborted("the request was aborted: the run is stopping") from None
        finally:
            with self._lock:
                self._pending.discard(future)

    def abort(self) -> int:
        """Cancel every request in flight; how many there were."""
        with self._lock:
            pending = list(self._pending)
        for future in pending:
            future.cancel()
        return len(pending)


_io: _IOLoop | None = None
_io_lock = threading.Lock()


def _io_loop() -> _IOLoop:
    global _io
    with _io_lock:
        if _io is None:
            _io = _IOLoop()
        return _io


def abort_calls() -> int:
    """Cancel every remote request in flight (their callers get ``CallAborted``)."""
    return 0 if _io is None else _io.abort()


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
    """One request through ``litellm.acompletion``, litellm's own retries off, ``timeout_s`` in all.

    Raises:
        DeadlineExceeded: no complete answer within ``timeout_s``.
        CallAborted: ``abort_calls`` cancelled it.
        Exception: whatever litellm raises (see ``classify``).
    """
    litellm = load_litellm()
    import asyncio

    async def call() -> Any:
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
        try:
            return await asyncio.wait_for(request, timeout_s)
        except TimeoutError:  # asyncio's (litellm's own Timeout is no TimeoutError)
            raise DeadlineExceeded(f"no complete answer within {timeout_s:g} s") from None

    response = _io_loop().run(call())
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

    kind: str  # the error class name, e.g. "RateLimitError" ("Timeout" for any deadline)
    status: int | None
    auth: bool  # credentials refused: stop, never retry
    retryable: bool  # rate limit, server error, timeout, connection error
    retry_after: float | None  # seconds the server asked us to wait
    unreachable: bool = False  # no connection, or no such route or model (HTTP 404)


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
    auth = isinstance(exc, auth_types) or status in (401, 403)
    retryable = not auth and (
        isinstance(exc, (*retry_types, TimeoutError, ConnectionError))
        or status in (408, 409, 429)
        or (status is not None and status >= 500)
    )
    return Failure(
        kind="Timeout" if timeout else type(exc).__name__,
        status=status,
        auth=auth,
        retryable=retryable,
        retry_after=retry_after_seconds(exc),
        unreachable=not timeout and (isinstance(exc, litellm.NotFoundError) or status == 404),
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
