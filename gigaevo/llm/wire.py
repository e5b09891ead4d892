"""What every wire (the plain HTTP client, litellm) shares: the answer, the failure, the I/O loop.

A wire sends one chat request and reports what came back (``WireAnswer``) or
what went wrong (``Failure``, from ``classify``); the router above it does the
retries, the counting of unreachable servers and the call log. Every request
of every wire runs as a coroutine on one event loop in a background thread
(``IOLoop``), under ``asyncio.wait_for``: ``timeout_s`` bounds the whole
request, a body trickled byte by byte included (an HTTP client's own timeout
applies per read, so a server sending a byte every few seconds would
otherwise hold a call for ever). ``abort_calls`` cancels every request in
flight (the engine calls it when the run is interrupted). asyncio itself is
imported only when the first remote request is made: an offline run never
pays for it.
"""

from __future__ import annotations

import concurrent.futures
import email.utils
import logging
import threading
import time
from collections.abc import Awaitable, Coroutine
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

_T = TypeVar("_T")


class DeadlineExceeded(TimeoutError):
    """A request did not complete within its total deadline (``timeout_s``)."""


class CallAborted(Exception):
    """``abort_calls`` cancelled the request (the run is stopping); never retried."""


@dataclass(frozen=True)
class WireAnswer:
    """One successful completion as it came off the wire."""

    text: str
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float | None


@dataclass(frozen=True)
class Failure:
    """What a provider error means for the caller."""

    kind: str  # the error class name, e.g. "RateLimitError" ("Timeout" for any deadline)
    status: int | None
    auth: bool  # credentials refused: stop, never retry
    retryable: bool  # rate limit, server error, timeout, connection error
    retry_after: float | None  # seconds the server asked us to wait
    unreachable: bool = False  # no connection, or no such route or model (HTTP 404)


class Wire(Protocol):
    """One way of sending a chat request (``http_wire.HTTP``, ``litellm_wire.LITELLM``)."""

    name: str

    def prepare(self) -> None:
        """Do the slow once-only work (imports, price map) so no request pays for it."""

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
        """One request, ``timeout_s`` in all; raises what ``classify`` understands."""

    def classify(self, exc: BaseException) -> Failure:
        """Sort an error of ``send`` into authentication / retryable / fatal, and reachability."""

    def supports_response_schema(self, model: str) -> bool:
        """Whether ``model`` accepts a JSON-schema ``response_format`` (``structured=auto``)."""


class IOLoop:
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
        """Run ``coro`` on the loop and wait for its result (CallAborted when aborted)."""
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

    def run_within(self, request: Awaitable[_T], timeout_s: float) -> _T:
        """``run`` with a total deadline: DeadlineExceeded once ``timeout_s`` has passed."""
        asyncio = self._asyncio

        async def bounded() -> _T:
            try:
                return await asyncio.wait_for(request, timeout_s)
            except TimeoutError:  # asyncio's own (a client's Timeout may be no TimeoutError)
                raise DeadlineExceeded(f"no complete answer within {timeout_s:g} s") from None

        return self.run(bounded())

    def abort(self) -> int:
        """Cancel every request in flight; how many there were."""
        with self._lock:
            pending = list(self._pending)
        for future in pending:
            future.cancel()
        return len(pending)


_io: IOLoop | None = None
_io_lock = threading.Lock()


def io_loop() -> IOLoop:
    """The process's one I/O loop (started on first use)."""
    global _io
    with _io_lock:
        if _io is None:
            _io = IOLoop()
        return _io


def abort_calls() -> int:
    """Cancel every remote request in flight (their callers get ``CallAborted``)."""
    return 0 if _io is None else _io.abort()


AUTH_STATUSES = (401, 403)  # credentials refused: stop the run, never retry
NO_ROUTE_STATUS = 404  # no such route or model: counts as unreachable


def retryable_status(status: int | None) -> bool:
    """Whether an HTTP status is worth another try: timeout, conflict, rate limit, 5xx."""
    return status is not None and (status in (408, 409, 429) or status >= 500)


def retry_after_seconds(headers: Any) -> float | None:
    """The wait a 429/503 response asked for (``retry-after-ms``, or ``Retry-After``
    seconds or an HTTP date), from its headers (any mapping with ``get``), if any."""
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


class SecretFilter(logging.Filter):
    """Redacts the keys of this process from every record a handler emits.

    The router redacts its own messages, but some records are written by others: asyncio's
    "Task exception was never retrieved" logs the repr of an exception whose text is the
    server's answer, and a 401 body may echo the key (a request still in flight when the
    run stopped, under load). The message, the formatted traceback and the stack are
    redacted; a record that names no key passes unchanged.
    """

    def __init__(self) -> None:
        super().__init__("gigaevo.secrets")
        self.secrets: tuple[str, ...] = ()

    def filter(self, record: logging.LogRecord) -> bool:
        if not self.secrets:
            return True
        try:
            message = record.getMessage()
        except (TypeError, ValueError):  # a malformed record: the handler reports it
            return True
        trace = record.exc_text or ""
        if record.exc_info and not trace:
            trace = logging.Formatter().formatException(record.exc_info)
        stack = record.stack_info or ""
        if not any(k in t for k in self.secrets for t in (message, trace, stack)):
            return True
        record.msg, record.args = redact(message, self.secrets), ()
        record.exc_info, record.exc_text = None, redact(trace, self.secrets) or None
        record.stack_info = redact(stack, self.secrets) or None
        return True


_SECRET_FILTER = SecretFilter()


def protect_logs(secrets: tuple[str, ...]) -> None:
    """Add ``secrets`` (4 characters or more) to the keys redacted from the log, and put
    the filter on every handler of the root logger (idempotent: one filter per handler)."""
    new = tuple(k for k in secrets if len(k) >= 4 and k not in _SECRET_FILTER.secrets)
    _SECRET_FILTER.secrets += new
    for handler in logging.getLogger().handlers:
        if _SECRET_FILTER not in handler.filters:
            handler.addFilter(_SECRET_FILTER)
