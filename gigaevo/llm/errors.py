"""Errors of LLM clients, named after the condition (no API key text ever appears in them)."""

from __future__ import annotations


class LLMError(Exception):
    """Base of every error an LLM client raises on purpose."""


class LLMConfigError(LLMError, ValueError):
    """A client cannot be built: a bad option, or the API key variable is not set.

    The message is one line naming the key or the environment variable.
    """


class LLMAuthenticationError(LLMError):
    """The provider refused the credentials (HTTP 401 or 403); retrying cannot help.

    Not a failed mutation: it stops the run (the CLI prints the message and
    exits with code 2; the run stays resumable).

    Attributes:
        model: the model the call went to.
        key_env: the environment variable the key came from ("" when none).
        status: the HTTP status, when known.
    """

    def __init__(self, model: str, key_env: str, status: int | None = None) -> None:
        hint = (
            f" (check ${key_env})" if key_env else " (the server needs an API key: set api_key_env)"
        )
        super().__init__(f"authentication failed for model {model}{hint}")
        self.model = model
        self.key_env = key_env
        self.status = status


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
