"""The plain HTTP wire (``llm.client=httpx``): what only it does, over real HTTP.

The behaviours both wires share (retries, deadlines, unreachable servers,
refused keys) are tested over each wire in test_router_wire.py and
test_wire_failures.py; here: which wire a config picks, malformed and
oversized bodies, and that an OpenAI-compatible run never imports litellm.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gigaevo.llm import LiteLLMRouter, LLMCallError, LLMConfigError, config_wires, http_wire
from gigaevo.llm.http_wire import HTTP
from gigaevo.llm.litellm_wire import LITELLM
from tests.llm.conftest import KEY_ENV, PROMPT
from tests.llm.openai_server import OpenAIServer

ROOT = Path(__file__).resolve().parents[2]
FAST = {"backoff_initial_s": 0.01, "backoff_max_s": 0.05, "timeout_s": 5.0}


@pytest.mark.parametrize(
    ("node", "wires"),
    [
        ({"model": "openai/m", "api_base": "http://h/v1"}, [HTTP]),
        ({"model": "openai/m", "api_base": "http://h/v1", "client": "litellm"}, [LITELLM]),
        ({"model": "openai/m", "api_base": None}, [LITELLM]),  # OpenAI's own API: litellm
        ({"model": "gemini/gemini-3.8-flash", "api_base": None}, [LITELLM]),
        ({"model": "hosted_vllm/m", "api_base": "http://h/v1"}, [LITELLM]),
        ({"model": "m", "api_base": "http://h/v1", "client": "httpx"}, [HTTP]),
        (
            {
                "model": None,
                "api_base": "http://h/v1",
                "models": [{"model": "openai/a"}, {"model": "gpt-5"}],
            },
            [HTTP, LITELLM],
        ),
    ],
)
def test_the_config_picks_the_wire(node: dict[str, object], wires: list[object]) -> None:
    assert config_wires({"_target_": "gigaevo.llm.LiteLLMRouter", **node}) == wires
    assert config_wires({"_target_": "gigaevo.llm.OfflineMutatorLLM", "seed": 0}) == []


def test_bad_client_options_are_config_errors() -> None:
    with pytest.raises(LLMConfigError, match=r"llm\.client must be one of"):
        LiteLLMRouter("openai/x", api_base="http://127.0.0.1:9/v1", client="requests")
    with pytest.raises(LLMConfigError, match=r"llm\.client=httpx needs llm\.api_base"):
        LiteLLMRouter("openai/x", client="httpx")


def test_a_malformed_body_is_retried_and_named(api_key: str, tmp_path: Path) -> None:
    log = tmp_path / "calls.jsonl"
    with OpenAIServer(["malformed", "diff"]) as server:
        router = LiteLLMRouter(
            "openai/m", api_base=server.url, api_key_env=KEY_ENV, call_log=log, **FAST
        )
        response = router.complete(PROMPT, seed=1)
    assert "SEARCH" in response.text
    (record,) = [json.loads(line) for line in log.read_text().splitlines()]
    assert record["retried_on"] == ["APIError"] and record["attempts"] == 2


def test_an_oversized_answer_is_cut_and_not_retried(
    api_key: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(http_wire, "MAX_ANSWER_BYTES", 50_000)
    with OpenAIServer(default="huge_garbage", huge_chars=200_000) as server:
        router = LiteLLMRouter("openai/m", api_base=server.url, api_key_env=KEY_ENV, **FAST)
        with pytest.raises(LLMCallError) as caught:
            router.complete(PROMPT, seed=1)
        assert len(server.requests) == 1
    assert caught.value.kind == "AnswerTooLarge" and not caught.value.retryable


def test_an_openai_compatible_call_never_imports_litellm() -> None:
    script = (
        "import sys\n"
        "from gigaevo.llm import LiteLLMRouter, start_loading, config_wires\n"
        "from gigaevo.llm.base import Message\n"
        "from tests.llm.openai_server import OpenAIServer\n"
        "node = {'_target_': 'gigaevo.llm.LiteLLMRouter', 'model': 'openai/m', 'api_base': 'x'}\n"
        "start_loading(config_wires(node)).join()\n"
        "with OpenAIServer() as server:\n"
        "    router = LiteLLMRouter('openai/gpt-4o-mini', api_base=server.url)\n"
        "    answer = router.complete([Message('user', 'hello')], seed=1)\n"
        "print(answer.cost_usd is not None, 'litellm' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert out.stdout.split() == ["True", "False"]  # priced from the map, litellm never loaded
