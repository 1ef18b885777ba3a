"""``--provider``, ``fore run`` / ``bench`` against the Anthropic mock, and ``/cost``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fore.actors.llm.meter import UsageMeter
from fore.actors.llm.mock_server import MockLlmServer
from fore.actors.llm.providers import infer_provider, is_anthropic_url
from fore.actors.llm.script import ScriptFile
from fore.bench.report import sections, verdict
from fore.bench.report_cache import cache_summary
from fore.messages.llm import Usage
from fore.supervision.chat.status import cache_lines
from tests.bench.test_bench_report import fake_report
from tests.cli.test_cli import fore

ANTHROPIC_ONLY = {"ANTHROPIC_API_KEY": "sk-ant"}


@pytest.mark.parametrize(
    ("explicit", "base_url", "env", "expected"),
    [
        ("anthropic", None, {}, "anthropic"),
        ("openai", "https://api.anthropic.com", {}, "openai"),  # the flag wins
        (None, "https://api.anthropic.com", {}, "anthropic"),
        (None, "https://eu.api.anthropic.com/v1", {}, "anthropic"),
        (None, "https://anthropic.com.evil.example/v1", {}, "openai"),
        (None, "http://127.0.0.1:8000/v1", ANTHROPIC_ONLY, "openai"),  # a URL says more
        (None, None, ANTHROPIC_ONLY, "anthropic"),
        (None, None, {"ANTHROPIC_BASE_URL": "http://127.0.0.1:9"}, "anthropic"),
        (None, None, {**ANTHROPIC_ONLY, "OPENAI_API_KEY": "sk"}, "openai"),  # not clear
        (None, None, {}, "openai"),
    ],
)
def test_infer_provider(
    explicit: str | None, base_url: str | None, env: dict[str, str], expected: str
) -> None:
    assert infer_provider(explicit, base_url, env) == expected


def test_infer_provider_refuses_an_unknown_one() -> None:
    with pytest.raises(ValueError, match="provider must be one of"):
        infer_provider("gemini", None, {})
    assert not is_anthropic_url("not a url")


def test_run_with_provider_anthropic(tmp_path: Path) -> None:
    script = ScriptFile.model_validate({"replies": [{"text": "Hello from the Messages API."}]})
    key_file = tmp_path / "key"
    key_file.write_text("k\n")
    with MockLlmServer(script) as server:
        done = fore(
            "run", "--workspace", str(tmp_path), "--provider", "anthropic",
            "--base-url", server.root_url, "--model", "claude-mock",
            "--api-key-file", str(key_file), "hi",
        )  # fmt: skip
        # Inferred: ANTHROPIC_API_KEY and ANTHROPIC_BASE_URL, no OpenAI configuration.
        inferred = fore(
            "run", "--workspace", str(tmp_path), "hi",
            env={"ANTHROPIC_API_KEY": "k2", "ANTHROPIC_BASE_URL": server.root_url,
                 "OPENAI_API_KEY": "", "FORE_API_KEY": ""},
        )  # fmt: skip
        first, second = server.requests()
    assert done.returncode == 0, done.stderr
    assert "Hello from the Messages API." in done.stdout
    assert inferred.returncode == 0, inferred.stderr
    assert first.headers["x-api-key"] == "k" and second.headers["x-api-key"] == "k2"
    assert isinstance(first.body, dict) and first.body["model"] == "claude-mock"
    assert "max_tokens" in first.body and "system" not in first.body


def test_bench_with_provider_anthropic_reports_the_fork_cache_share(tmp_path: Path) -> None:
    out = tmp_path / "report.json"
    done = fore(
        "bench", "--provider", "anthropic", "--sessions", "6", "--turns", "3",
        "--think-ms", "300", "--duration", "40", "--no-progress", "--json", str(out),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    cache = json.loads(out.read_text())["speculation"]["cache"]
    assert cache["provider"] == "anthropic"
    forks = cache["forks"]
    assert forks["requests"] > 0 and forks["cache_read_tokens"] > 0
    # Three turns a session are short histories, against which each suggestion's own
    # prompt (never cached) weighs: most of the input is still read from the cache,
    # and the 90% target is not judged on so short a run (WARM_TURNS).
    assert forks["read_share"] >= 0.75
    assert "fork cache share" in done.stdout  # the verdict line (the table wraps)
    assert "prefixes mostly cold" in done.stdout
    assert "prompt cache (anthropic)" in done.stdout


def _meter() -> UsageMeter:
    meter = UsageMeter()
    meter.record(
        "main", Usage(prompt_tokens=2000, cached_tokens=0, cache_write_tokens=1900, total_tokens=1)
    )
    meter.record("suggestion", Usage(prompt_tokens=2400, cached_tokens=2300, cache_write_tokens=10))
    meter.record("speculation", Usage(prompt_tokens=2100, cached_tokens=2090))
    return meter


def test_cost_shows_the_cache_hits_of_forks() -> None:
    lines = cache_lines(_meter())
    assert lines[0].strip().startswith("prompt cache")
    assert "main requests" in lines[1] and "0% read from cache" in lines[1]
    forks = lines[2]
    assert "forks" in forks and "100 / 10 / 4,390" in forks and "(98% read from cache)" in forks
    assert cache_lines(None) == [] and cache_lines(UsageMeter()) == []


def test_bench_report_section_and_target() -> None:
    cache = cache_summary("anthropic", _meter())
    assert cache["forks"]["requests"] == 2 and cache["by_purpose"]["speculation"]["requests"] == 1
    report = fake_report(cache=cache)
    (section,) = [s for s in sections(report) if s.title == "prompt cache (anthropic)"]
    assert ("  fork requests: share of input read from cache", "97.6%") in section.rows
    # 100 full + 10 written x 1.25 + 4,390 read x 0.1 over 4,500: the same input unbilled.
    label = "  fork requests: input price with the cache / without (read 0.1×, write 1.25×)"
    assert (label, "0.123×") in section.rows
    (target,) = [t for t in verdict([report]) if t.short == "fork cache share"]
    assert target.passed is True
    short = fake_report(cache=cache, options={**report.options, "turns": 3})
    (target,) = [t for t in verdict([short]) if t.short == "fork cache share"]
    assert target.passed is None and "mostly cold" in target.missing
    # A run without a cache-keeping provider has neither.
    plain = fake_report()
    assert not [s for s in sections(plain) if s.title.startswith("prompt cache")]
    assert not [t for t in verdict([plain]) if t.short == "fork cache share"]


def test_the_readme_anthropic_example_runs(tmp_path: Path) -> None:
    from tests.project.test_readme import _block, _run

    assert _run(_block("AnthropicModel("), tmp_path).strip() == "completed True"
