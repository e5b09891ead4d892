"""No key reaches the log through records the router does not write (issue 14's rule).

asyncio logs "Task exception was never retrieved" with the repr and traceback of the
exception; a 401 body that echoes the key makes that a leak (seen once in CI under load
in test_remote_run's refused-key test). ``protect_logs`` puts one filter on the root
handlers that redacts the message, the traceback and the stack.
"""

from __future__ import annotations

import asyncio
import gc
import io
import logging
from collections.abc import Iterator

import pytest

from gigaevo.llm.wire import protect_logs

# not shaped like an OpenAI key: litellm, when loaded, redacts those itself
KEY = "gk-filter-test-5a9c2e7b"


class EchoedKey(Exception):
    pass


@pytest.fixture
def root_stream() -> Iterator[io.StringIO]:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(name)s %(levelname)s %(message)s"))
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        yield stream
    finally:
        root.removeHandler(handler)


def test_an_unretrieved_task_exception_names_no_key(root_stream: io.StringIO) -> None:
    protect_logs((KEY,))

    async def refused() -> None:
        raise EchoedKey(f"401 unauthorised, echo={KEY}")

    async def main() -> None:
        task = asyncio.get_running_loop().create_task(refused())
        await asyncio.sleep(0.01)  # the task fails; nobody reads its exception
        del task
        gc.collect()

    asyncio.run(main())
    gc.collect()
    text = root_stream.getvalue()
    assert "Task exception was never retrieved" in text  # asyncio did log it
    assert "Traceback" in text and "EchoedKey" in text  # the traceback is kept
    assert KEY not in text and "echo=***" in text


def test_a_record_without_a_key_is_unchanged(root_stream: io.StringIO) -> None:
    protect_logs((KEY,))
    log = logging.getLogger("gigaevo.test_secret_filter")
    try:
        raise EchoedKey("no secret here")
    except EchoedKey:
        log.error("plain %s", "message", exc_info=True)
    text = root_stream.getvalue()
    assert "plain message" in text and "EchoedKey: no secret here" in text


def test_the_filter_is_put_once_per_handler(root_stream: io.StringIO) -> None:
    protect_logs((KEY,))
    protect_logs((KEY, "gk-second-key-77"))
    handler = logging.getLogger().handlers[-1]
    assert len([f for f in handler.filters if getattr(f, "name", "") == "gigaevo.secrets"]) == 1
    logging.getLogger("gigaevo.test_secret_filter").warning("both %s %s", KEY, "gk-second-key-77")
    text = root_stream.getvalue()
    assert "both *** ***" in text
