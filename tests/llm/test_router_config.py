"""LiteLLMRouter construction: options, keys from the environment, seeded model choice."""

from __future__ import annotations

from collections import Counter

import pytest

from gigaevo.evaluation.limits import sandbox_environment
from gigaevo.llm import LiteLLMRouter, LLMConfigError
from tests.llm.conftest import KEY_ENV


def test_missing_key_variable_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GEMINI_API_KEY", raising=False)
    with pytest.raises(LLMConfigError, match=r"^environment variable GEMINI_API_KEY is not set"):
        LiteLLMRouter("gemini/gemini-3.8-flash", api_key_env="GEMINI_API_KEY")


def test_empty_key_counts_as_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, "  ")
    with pytest.raises(LLMConfigError, match=KEY_ENV):
        LiteLLMRouter("openai/x", api_key_env=KEY_ENV)


def test_a_key_variable_may_have_any_name_and_never_reaches_children(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("LLM_CREDENTIAL", "abc-credential")
    router = LiteLLMRouter("openai/x", api_key_env="LLM_CREDENTIAL")
    assert "abc-credential" not in repr(router)
    # children get an allow-listed environment: nothing of the engine's is copied
    child_env = sandbox_environment("/tmp/scratch")
    assert "LLM_CREDENTIAL" not in child_env
    assert "abc-credential" not in child_env.values()


def test_a_malformed_key_variable_name_is_refused() -> None:
    with pytest.raises(LLMConfigError, match="is not an environment variable name"):
        LiteLLMRouter("openai/x", api_key_env="MY-KEY")


def test_key_never_in_repr_or_name(api_key: str) -> None:
    router = LiteLLMRouter("openai/x", api_key_env=KEY_ENV)
    assert api_key not in repr(router) and api_key not in router.name


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({}, "exactly one of llm.model and llm.models"),
        ({"model": "a", "models": [{"model": "b"}]}, "exactly one"),
        ({"models": [{"model": "a", "wieght": 2}]}, r"unknown key\(s\) \['wieght'\]"),
        ({"models": [{"model": "a", "weight": 0}]}, "weight must be > 0"),
        ({"models": [{"model": ""}]}, "non-empty string"),
        ({"model": "a", "timeout_s": 0}, "timeout_s"),
        ({"model": "a", "max_retries": -1}, "max_retries"),
        ({"model": "a", "jitter": 2.0}, "jitter"),
        ({"model": "a", "structured_outputs": "maybe"}, "structured_outputs"),
    ],
)
def test_bad_options(kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(LLMConfigError, match=match):
        LiteLLMRouter(**kwargs)  # type: ignore[arg-type]


def test_entries_inherit_and_override_the_defaults(
    api_key: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTHER_API_KEY", "k2")
    router = LiteLLMRouter(
        models=[
            {"model": "a"},
            {"model": "b", "api_base": "http://b/v1", "api_key_env": "OTHER_API_KEY"},
        ],
        api_base="http://a/v1",
        api_key_env=KEY_ENV,
    )
    a, b = router.specs
    assert (a.api_base, a.api_key_env) == ("http://a/v1", KEY_ENV)
    assert (b.api_base, b.api_key_env) == ("http://b/v1", "OTHER_API_KEY")


def test_model_choice_is_seeded_and_follows_the_weights() -> None:
    models = [{"model": "a", "weight": 3}, {"model": "b", "weight": 1}]
    router = LiteLLMRouter(models=models, seed=5)
    picks = [router.choose(seed).model for seed in range(4000)]
    assert picks == [LiteLLMRouter(models=models, seed=5).choose(s).model for s in range(4000)]
    share = Counter(picks)["a"] / len(picks)
    assert 0.72 < share < 0.78
    other = [LiteLLMRouter(models=models, seed=6).choose(s).model for s in range(4000)]
    assert other != picks  # the router's own seed matters too
    assert router.name == "router(a|b)"


def test_construction_does_not_import_litellm() -> None:
    import subprocess
    import sys

    code = (
        "import sys; from gigaevo.llm import LiteLLMRouter; "
        "LiteLLMRouter('openai/x', api_base='http://127.0.0.1:9/v1'); "
        "print('litellm' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
