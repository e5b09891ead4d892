"""Errors of LLM clients, named after the condition (no API key text ever appears in them)."""

from __future__ import annotations


class LLMError(Exception):
    """Base of every error an LLM client raises on purpose."""


class LLMConfigError(LLMError, ValueError):
    """A client cannot be built: a bad option, or the API key variable is not set.

    The message is one line naming the key or the environment variable.
    """


class LLMStopError(LLMError):
    """Every later call would fail the same way: the run stops, resumable, with exit code 2.

    Not a failed mutation: the attempt that met it stays dispatched and is
    replayed on resume. ``stop_reason`` goes into ``summary.json``; ``remedy``
    ends the command line's one-line message.
    """

    stop_reason = "llm_stopped"
    remedy = "add resume=true to continue"


class LLMAuthenticationError(LLMStopError):
    """The provider refused the credentials (HTTP 401 or 403); retrying cannot help.

    The CLI prints the message and exits with code 2; the run stays resumable.

    Attributes:
        model: the model the call went to.
        key_env: the environment variable the key came from ("" when none).
        status: the HTTP status, when known.
    """

    stop_reason = "llm_authentication_failed"
    remedy = "fix the key and add resume=true to continue"

    def __init__(self, model: str, key_env: str, status: int | None = None) -> None:
        hint = (
            f" (check ${key_env})" if key_env else " (the server needs an API key: set api_key_env)"
        )
        super().__init__(f"authentication failed for model {model}{hint}")
        self.model = model
        self.key_env = key_env
        self.status = status


class LLMUnreachableError(LLMStopError):
    """The model server cannot be reached, or it has no such model or route.

    Raised after ``unreachable_after`` consecutive connection failures (or 404
    answers) with no answer in between, so that a run against a server that is
    down or misconfigured stops before it spends its budget.

    Attributes:
        model: the model the calls went to.
        api_base: the server URL (None: the provider's default).
        kind: the last error's class name.
    """

    stop_reason = "llm_unreachable"
    remedy = "start the server or fix llm.api_base / llm.model, then add resume=true to continue"

    def __init__(self, model: str, api_base: str | None, kind: str, failures: int) -> None:
        base = api_base if api_base else "null (the provider's default)"
        super().__init__(
            f"cannot reach the model: llm.api_base={base}, model {model} "
            f"({kind}: no answer to {failures} requests in a row)"
        )
        self.model = model
        self.api_base = api_base
        self.kind = kind


class LLMCallError(LLMError):
    """One call failed for good: retries were used up, or the error cannot be retried.

    Attributes:
        model: the model the call went to.
        kind: the provider error's class name (``RateLimitError``, ``Timeout``, ...).
        attempts: how many requests were sent.
        retryable: whether the last error was of a retryable kind.
    """

    def __init__(
        self, model: str, kind: str, detail: str, *, attempts: int, retryable: bool
    ) -> None:
        super().__init__(f"{kind} from {model} after {attempts} attempt(s): {detail}")
        self.model = model
        self.kind = kind
        self.attempts = attempts
        self.retryable = retryable
