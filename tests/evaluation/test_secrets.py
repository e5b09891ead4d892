"""Credential-like environment variables never reach workers or children."""

from __future__ import annotations

import pytest

from gigaevo.evaluation import SandboxEvaluator
from gigaevo.evaluation.limits import is_secret_name, scrubbed_environment

from .conftest import MakeProblem
from .helpers import program

SECRETS = {
    "OPENAI_API_KEY": "sk-test-XYZ",
    "GITHUB_TOKEN": "ghp-test-TOKEN-123",
    "MY_PASSWORD": "hunter2-pass",
    "aws_secret_access_key": "aws-secret-777",
    "Gemini_Api_Key": "gem-key-555",
}

SNOOP = program(
    """
    import os

    def solve():
        texts = ["\\n".join(f"{k}={v}" for k, v in os.environ.items())]
        for path in ("/proc/self/environ", f"/proc/{os.getppid()}/environ"):
            try:
                with open(path, "rb") as handle:
                    texts.append(handle.read().replace(b"\\0", b"\\n").decode("latin-1"))
            except OSError as exc:
                texts.append(repr(exc))
        blob = "\\n".join(texts)
        print(blob)
        hits = [float(marker in blob) for marker in MARKERS]
        return hits
    """
)


@pytest.fixture
def secret_environment(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    return SECRETS


def test_secrets_are_invisible_to_children(
    secret_environment: dict[str, str], make_problem: MakeProblem
) -> None:
    markers = [*secret_environment.values(), *secret_environment.keys()]
    code = f"MARKERS = {markers!r}\n" + SNOOP
    with SandboxEvaluator(make_problem(), max_workers=1, memory_mb=512) as ev:
        result = ev.evaluate(code)
    assert result.valid, result.reason
    assert result.metrics["count"] == len(markers)
    assert result.metrics["score"] == 0.0  # not one marker was found
    assert "OMP_NUM_THREADS=1" in result.stdout_tail or "PATH" in result.stdout_tail
    for text in (*secret_environment.values(), *secret_environment.keys()):
        assert text not in result.stdout_tail
        assert all(text not in name for name in result.metrics)


def test_thread_variables_are_pinned(make_problem: MakeProblem) -> None:
    code = program(
        """
        import os

        def solve():
            names = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
            return [float(os.environ[name]) for name in names]
        """
    )
    with SandboxEvaluator(make_problem(), max_workers=1, memory_mb=512) as ev:
        result = ev.evaluate(code)
    assert result.valid, result.reason
    assert result.metrics == {"score": 3.0, "count": 3.0}


def test_scrubbed_environment() -> None:
    env = scrubbed_environment({"PATH": "/bin", "api_key": "x", "MyToken": "y", "HOME": "/r"})
    assert env["PATH"] == "/bin" and env["HOME"] == "/r"
    assert "api_key" not in env and "MyToken" not in env
    assert env["OMP_NUM_THREADS"] == "1"
    assert is_secret_name("Secret_Thing")
    assert is_secret_name("KEYBOARD_LAYOUT")  # names are matched by substring, on purpose
    assert not is_secret_name("HOME")
