"""Usage and cost (issue 28): per session and per runtime, by purpose, priced per model.

The pure parts (prices, the cost formula, the token mapping) have property
tests; the ledger is read back through ``session.usage`` / ``Runtime.usage``
after real sessions (a speculating one: every purpose), ``fore run --json``'s
last line and ``/cost``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fore.actors.llm import ScriptedModel
from fore.actors.speculation.governor import LoadGovernor
from fore.actors.telemetry.usage import (
    PriceTable,
    TokenCounts,
    UsageLedger,
    cost_of,
    counts_of,
    parse_price,
    usage_json,
)
from fore.messages.gate import ApprovalMode
from fore.messages.llm import Usage
from fore.supervision.chat.status import cost_lines
from fore.supervision.chat.transcript import Totals
from fore.supervision.runtime import Runtime
from fore.telemetry import ModelPrice, TokenUsage, UsageSummary
from fore.testing import FunctionModel
from tests.cli.test_cli import SCRIPT, fore
from tests.speculation.test_speculation import WAIT, bump_script, settled, spec

PRICE = ModelPrice(input=3.0, cached_input=0.3, cache_write=3.75, output=15.0)

prices_st = st.builds(
    ModelPrice,
    input=st.floats(0, 100),
    output=st.floats(0, 100),
    cached_input=st.none() | st.floats(0, 100),
    cache_write=st.none() | st.floats(0, 100),
)


@st.composite
def counts_st(draw: st.DrawFn) -> TokenCounts:
    total = draw(st.integers(0, 10**7))
    cached = draw(st.integers(0, total))
    written = draw(st.integers(0, total - cached))
    return TokenCounts(total, cached, written, draw(st.integers(0, 10**6)))


@given(counts_st(), prices_st)
def test_the_cost_is_each_kind_of_token_at_its_rate(counts: TokenCounts, price: ModelPrice) -> None:
    cost = cost_of(counts, price)
    assert cost >= 0 and math.isfinite(cost)
    cached = price.input if price.cached_input is None else price.cached_input
    written = price.input if price.cache_write is None else price.cache_write
    plain = counts.input - counts.cached_input - counts.cache_write
    expected = (
        plain * price.input
        + counts.cached_input * cached
        + counts.cache_write * written
        + counts.output * price.output
    ) / 1e6
    assert cost == pytest.approx(expected)
    # Caching never costs more than it saves when it is the cheaper rate.
    if cached <= price.input:
        uncached = TokenCounts(counts.input, 0, counts.cache_write, counts.output)
        assert cost <= cost_of(uncached, price) + 1e-9


@given(
    st.integers(-5, 10**6), st.integers(-5, 10**6), st.integers(-5, 10**6), st.integers(-5, 10**6)
)
def test_provider_usage_maps_to_consistent_counts(
    prompt: int, completion: int, cached: int, written: int
) -> None:
    usage = Usage.model_construct(
        prompt_tokens=prompt,
        completion_tokens=completion,
        cached_tokens=cached,
        cache_write_tokens=written,  # Anthropic's cache_creation_input_tokens
        total_tokens=0,
    )
    counts = counts_of(usage)
    assert counts.input == max(0, prompt)
    assert 0 <= counts.cached_input + counts.cache_write <= counts.input
    if cached >= 0 and written >= 0 and cached + written <= prompt:  # a consistent report
        assert (counts.cached_input, counts.cache_write) == (cached, written)
        assert counts.input - counts.cached_input - counts.cache_write == (
            usage.uncached_input_tokens
        )
    assert counts.output == max(0, completion)


def test_prices_exact_then_patterns_in_order_then_star() -> None:
    a, b, c, d = (ModelPrice(input=i, output=i) for i in (1, 2, 3, 4))
    table = PriceTable({"gpt-4o*": b, "gpt-4o-mini": a, "gpt-*": c, "*": d})
    assert table.price("gpt-4o-mini") is a  # exact wins over an earlier pattern
    assert table.price("gpt-4o-2024") is b  # the first pattern that matches
    assert table.price("gpt-5") is c
    assert table.price("claude") is d
    assert PriceTable({"x": a}).price("y") is None
    assert not PriceTable()


def test_parse_price_is_one_line_on_every_mistake() -> None:
    assert parse_price("2.5,10") == ModelPrice(input=2.5, output=10)
    assert parse_price("3, 15, 0.3, 3.75") == PRICE
    for bad in ("", "1", "1,2,3,4,5", "a,b", "1,-2", "1,nan", "1,inf"):
        with pytest.raises(ValueError) as info:
            parse_price(bad)
        assert "\n" not in str(info.value)


def test_the_ledger_adds_up_by_session_and_purpose_and_forgets_closed_sessions() -> None:
    ledger = UsageLedger({"m": PRICE})
    one = Usage(prompt_tokens=1000, completion_tokens=100, cached_tokens=400)
    assert ledger.record("s1", "main", "m", one) == pytest.approx(
        (600 * 3 + 400 * 0.3 + 100 * 15) / 1e6
    )
    assert ledger.record("s1", "speculation", "other", one) is None  # no price
    ledger.record("s2", "main", "m", one, ModelPrice(input=0, output=0))  # the model's own
    s1 = ledger.session("s1")
    assert s1.of("main").requests == 1 and s1.of("main").cached_input_tokens == 400
    assert s1.of("speculation").unpriced_requests == 1
    assert s1.of("suggestion") == TokenUsage()
    assert ledger.session("s2").of("main").cost_usd == 0
    assert ledger.forget("s1") == s1
    assert ledger.session("s1") == UsageSummary()
    ledger.record("s1", "main", "m", one)  # a late answer of a closed session
    assert ledger.session("s1") == UsageSummary()  # ... counts in the total only
    assert ledger.total().of("main").requests == 3
    assert ledger.total().total.requests == 4


def test_session_usage_has_every_purpose_and_its_cost(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "app.py").write_text("x = 1\n")
    with Runtime(
        overlay_root=tmp_path / "overlays",
        speculation_governor=LoadGovernor(enabled=False),
        prices={"scripted": PRICE},
    ) as rt:
        s = rt.open_session(
            workspace=ws,
            model=ScriptedModel(bump_script()),
            speculation=spec(approval_mode=ApprovalMode.AUTO_EDIT),
        )
        turns = [s.submit("hi", timeout=WAIT), s.submit("what is x?", timeout=WAIT)]
        assert settled(s) == "completed"
        assert s.accept(timeout=WAIT).outcome == "accepted"
        live = s.usage
        s.close()
        closed = s.usage
        total = rt.usage
    main = live.of("main")
    assert main.requests == 2
    assert main.input_tokens == sum(t.usage.prompt_tokens for t in turns)
    assert main.output_tokens == sum(t.usage.completion_tokens for t in turns)
    assert main.cost_usd == pytest.approx(
        cost_of(TokenCounts(main.input_tokens, 0, 0, main.output_tokens), PRICE)
    )
    assert live.of("suggestion").requests == 1
    assert live.of("speculation").requests >= 2  # the edit, the answer
    assert closed.by_purpose.keys() >= live.by_purpose.keys()
    assert closed.of("main") == main  # kept after close
    assert total.of("main") == main  # the runtime's total includes closed sessions
    assert live.total.cost_usd == pytest.approx(sum(u.cost_usd for u in live.by_purpose.values()))


def test_an_unpriced_model_counts_tokens_not_money() -> None:
    with Runtime() as rt, rt.open_session(model=FunctionModel(lambda r: "ok")) as s:
        s.submit("hi", timeout=WAIT)
        usage = s.usage.of("main")
    assert usage.requests == 1 and usage.unpriced_requests == 1 and usage.cost_usd == 0


def test_fore_run_json_ends_with_the_usage_line(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    script = tmp_path / "script.json"
    script.write_text(json.dumps(SCRIPT))
    done = fore(
        "run", "--workspace", str(ws), "--script", str(script), "--json",
        "--price", "3,15,0.3", "go",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    last = lines[-1]
    assert last["kind"] == "usage"
    finished = next(e for e in lines if e["kind"] == "turn_finished")["result"]
    main = last["usage"]["by_purpose"]["main"]
    assert main["requests"] == finished["turns"] == 2
    assert main["input_tokens"] == finished["usage"]["prompt_tokens"]
    assert main["output_tokens"] == finished["usage"]["completion_tokens"]
    expected = (main["input_tokens"] * 3 + main["output_tokens"] * 15) / 1e6
    assert main["cost_usd"] == pytest.approx(expected) and expected > 0
    assert last["usage"]["total"]["total_tokens"] == main["input_tokens"] + main["output_tokens"]
    bad = fore("run", "--workspace", str(ws), "--script", str(script), "--price", "x", "go")
    assert bad.returncode == 2 and "INPUT,OUTPUT" in bad.stderr


def test_cost_lines_show_the_usage_by_purpose() -> None:
    usage = UsageSummary(
        by_purpose={
            "main": TokenUsage(requests=2, input_tokens=1200, output_tokens=80, cost_usd=0.0048),
            "speculation": TokenUsage(requests=1, input_tokens=600, unpriced_requests=1),
        }
    )
    lines = cost_lines(Totals(), "m", usage)
    text = "\n".join(lines)
    assert "by purpose" in text
    table = lines[lines.index(next(x for x in lines if "by purpose" in x)) :]
    main = next(line for line in table if line.strip().startswith("main "))
    assert "1,200" in main and "$0.0048" in main
    spec_line = next(line for line in table if line.strip().startswith("speculation"))
    assert "no price" in spec_line
    total = next(line for line in table if line.strip().startswith("total "))
    assert "$0.0048+" in total  # one of its requests had no price
    assert cost_lines(Totals(), "m") == cost_lines(Totals(), "m", UsageSummary())
    assert usage_json(usage)["total"]["requests"] == 3


def test_the_bench_report_shows_costs_and_the_waste_in_money() -> None:
    from fore.bench.load_report import wasted_cost
    from fore.bench.report import sections
    from tests.bench.test_bench_report import fake_report

    usage = UsageSummary(
        by_purpose={
            "main": TokenUsage(requests=4, input_tokens=4000, output_tokens=400, cost_usd=0.018),
            "speculation": TokenUsage(
                requests=10, input_tokens=9000, output_tokens=1000, cost_usd=0.042
            ),
        }
    )
    # 10,000 speculation tokens cost $0.042: 2,500 wasted ones cost a quarter of it.
    assert wasted_cost(usage, 2500) == pytest.approx(0.0105)
    assert wasted_cost(UsageSummary(), 2500) == 0.0
    # Every speculation cut off before its usage came: the run's whole blend prices them.
    main_only = UsageSummary(by_purpose={"main": usage.of("main")})
    assert wasted_cost(main_only, 2200) == pytest.approx(2200 * 0.018 / 4400)
    report = fake_report(
        wasted_tokens=2500,
        wasted_tokens_estimated=100,
        usage=usage_json(usage),
        wasted_cost_usd=wasted_cost(usage, 2500),
    )
    report.options["price"] = (3.0, 15.0, 0.3)
    rows = dict(row for section in sections(report) for row in section.rows)
    waste = rows["tokens spent on discarded speculations (of which estimated)"]
    assert waste == "2,500 (100) ≈ $0.0105"
    [cost_label] = [k for k in rows if k.startswith("cost by purpose")]
    assert "$3 / $15 / $0.3 per M input / output / cached tokens" in cost_label
    assert rows[cost_label] == "main $0.0180 · speculation $0.0420 · total $0.0600"
    # A report from before issue 28 (no usage) shows neither.
    old = dict(row for section in sections(fake_report()) for row in section.rows)
    assert not any(k.startswith("cost by purpose") for k in old)
    assert "$" not in old["tokens spent on discarded speculations (of which estimated)"]
