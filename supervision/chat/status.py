"""The status line and ``/cost``: what the speculation is doing, what it cost, what it saved.

Pure functions of the app's state, so every wording is unit-tested without a
terminal. The speculation part is the one that changes while the person reads:
*speculating: 2 tool calls, 1 file* → *ready: … Tab applies* (or *stopped at
shell: … Tab runs the rest*, *not speculated: … Tab runs it*).
"""

from __future__ import annotations

from dataclasses import dataclass

from fore.actors.llm.meter import UsageMeter
from fore.messages.gate import ApprovalMode
from fore.messages.speculation import SpeculationStatus
from fore.messages.usage import UsageSummary
from fore.supervision.chat.text import format_duration, one_line, plural
from fore.supervision.chat.transcript import Line, Totals

FINAL_STATES = frozenset({"completed", "boundary", "failed", "skipped", "stale", "aborted"})
"""States after which a speculation's status stops changing until Tab or a keystroke."""


def speculation_text(status: SpeculationStatus | None, *, shown: bool, accepting: bool) -> str:
    """The speculation part of the status line."""
    if accepting:
        return "applying the suggestion…"
    if not shown:
        return "no suggestion"
    if status is None or status.state == "idle":
        return "suggestion shown · Tab runs it"
    work = f"{plural(status.tool_calls, 'call')}, {plural(status.files_written, 'file')}"
    state = status.state
    if state == "running":
        return f"speculating: {work}"
    if state == "completed":
        return f"ready: {work} · Tab applies"
    if state == "boundary":
        where = status.boundary_tool or "a boundary"
        why = one_line(status.boundary_reason or "", 60)
        return f"stopped at {where}" + (f": {why}" if why else "") + " · Tab runs the rest"
    if state == "skipped":
        return f"not speculated ({one_line(status.reason or 'no headroom', 40)}) · Tab runs it"
    if state == "stale":
        return "speculation stale · Tab runs it afresh"
    if state == "failed":
        return f"speculation failed ({one_line(status.reason or '', 40)}) · Tab runs it"
    return f"speculation {state}"


def tokens_text(tokens: int) -> str:
    if tokens < 1000:
        return f"{tokens} tok"
    if tokens < 1_000_000:
        return f"{tokens / 1000:.1f}k tok"
    return f"{tokens / 1_000_000:.1f}M tok"


@dataclass(frozen=True)
class StatusInput:
    model: str
    mode: ApprovalMode
    speculation: str
    totals: Totals
    busy: str | None = None


def status_line(state: StatusInput, width: int) -> Line:
    """One line, at most ``width`` columns (the speculation part is shortened first)."""
    left = f" {one_line(state.model, 24)} │ {state.mode.value} ⇧Tab │ "
    saved = format_duration(state.totals.time_saved_s)
    right = f" │ {tokens_text(state.totals.tokens)} │ Tab saved {saved} "
    middle = one_line(state.busy or state.speculation, 300)
    room = max(0, width - len(left) - len(right))
    if len(middle) > room:
        middle = middle[: max(0, room - 1)] + "…" if room > 0 else ""
    text = (left + middle.ljust(room) + right)[:width]
    return (("class:status", text),)


def cache_lines(meter: UsageMeter | None) -> list[str]:
    """``/cost``'s prompt-cache lines: input tokens of main and fork requests by how the
    provider billed them (a model with a :class:`~actors.llm.meter.UsageMeter`, e.g.
    ``AnthropicModel``; none otherwise)."""
    if meter is None:
        return []
    lines = ["  prompt cache       input tokens: full price / cache write / cache read"]
    for label, share in (("main requests", meter.share(("main",))), ("forks", meter.forks())):
        if not share.requests:
            continue
        read = share.read_share
        hits = f" ({read * 100:.0f}% read from cache)" if read is not None else ""
        lines.append(
            f"    {label:<15}{share.uncached_tokens:>10,} / {share.cache_write_tokens:,}"
            f" / {share.cache_read_tokens:,}{hits}"
        )
    return lines if len(lines) > 1 else []


def cost_lines(totals: Totals, model: str, usage: UsageSummary | None = None) -> list[str]:
    wasted = totals.wasted_tokens
    return [
        f"model {model}",
        f"  main turns         {totals.main_tokens:>10,} tokens ({plural(totals.turns, 'turn')})",
        f"  speculation        {totals.speculation_tokens:>10,} tokens "
        f"({totals.accepted} accepted, {totals.aborted} thrown away)",
        f"    of which wasted  {wasted:>10,} tokens",
        f"  total              {totals.tokens:>10,} tokens",
        f"  time saved by Tab  {format_duration(totals.time_saved_s):>10}",
        *usage_lines(usage),
    ]


def usage_lines(usage: UsageSummary | None) -> list[str]:
    """``/cost``'s table of what the provider reported, by purpose, with the cost (issue 28)."""
    if usage is None or not usage.by_purpose:
        return []
    lines = ["  by purpose        requests   input (cached)     output        cost"]
    rows = [*usage.by_purpose.items(), ("total", usage.total)]
    for name, u in rows:
        cached = f"({u.cached_input_tokens:,})"
        cost = f"${u.cost_usd:,.4f}" if u.requests > u.unpriced_requests else "no price"
        if 0 < u.unpriced_requests < u.requests:
            cost += "+"  # some of its requests' models have no price
        lines.append(
            f"    {name:<14}{u.requests:>8,} {u.input_tokens:>9,} {cached:<9}"
            f"{u.output_tokens:>8,} {cost:>11}"
        )
    return lines
