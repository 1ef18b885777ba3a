"""The transcript: session events in, printable lines out (pure, no terminal).

``fore chat`` is a scrolling UI: what is final is printed once above the
prompt and scrolls away with the terminal; what is still changing -- the
answer's current line as it streams, a running tool call's line -- stays in a
small *live* area just above the prompt and is redrawn in place.
:class:`Transcript` keeps that split: :meth:`Transcript.event` folds one
session event in, :meth:`Transcript.commit` pops the lines that became final
(the app prints them), :meth:`Transcript.live` renders the rest.

A line is a tuple of ``(style, text)`` fragments (prompt_toolkit's formatted
text, but nothing here imports it). Every text that came from the model or a
tool is passed through :func:`sanitize` first: a hostile answer must not move
the cursor, clear the screen or retitle the terminal.
"""

from __future__ import annotations

import difflib
import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from fore.messages.alerts import AlertLevel
from fore.messages.conversation import AssistantMessage, Item, SystemMessage, ToolResult
from fore.messages.session import (
    AlertRaised,
    ItemAdded,
    LlmRetried,
    RunStarted,
    TextDelta,
    ToolFinished,
    ToolStarted,
    TurnFinished,
    TurnResult,
)
from fore.supervision.chat.approval import short_arguments
from fore.supervision.chat.text import format_duration, one_line, sanitize

Fragment = tuple[str, str]
Line = tuple[Fragment, ...]

SPINNER = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"
MAX_LIVE_CHARS = 1_000
"""A streaming line longer than this is printed even without a newline (the live area
stays a few rows tall)."""
MAX_TEXT_CHARS = 200_000
"""Text one answer may print; the rest is counted, not shown (the history keeps it)."""
MAX_LIVE_TOOLS = 10
"""Tool lines the live area shows; a bigger batch shows "… N more"."""

ToolState = Literal["queued", "running", "done", "failed", "skipped", "cancelled"]
_FINAL_TOOL_STATES = frozenset({"done", "failed", "skipped", "cancelled"})


@dataclass
class TextBlock:
    text: str
    style: str = "class:answer"
    open: bool = True
    """Still streaming (more text may come)."""
    size: int = 0
    """Characters taken so far (shown or still live)."""
    dropped: int = 0
    """Characters past :data:`MAX_TEXT_CHARS`, not shown."""

    def add(self, text: str) -> None:
        room = max(0, MAX_TEXT_CHARS - self.size)
        self.text += text[:room]
        self.size += min(len(text), room)
        self.dropped += max(0, len(text) - room)


@dataclass
class ToolBlock:
    call_id: str
    name: str
    args: str = ""
    state: ToolState = "queued"
    started: float | None = None
    duration_s: float | None = None
    detail: str = ""
    speculated: bool = False

    @property
    def final(self) -> bool:
        return self.state in _FINAL_TOOL_STATES


@dataclass
class NoteBlock:
    line: Line


Block = TextBlock | ToolBlock | NoteBlock


def tool_line(block: ToolBlock, now: float) -> Line:
    """One tool call as one line: mark, name, short arguments, state, duration."""
    name = one_line(block.name, 40)
    args = block.args
    if block.state == "running":
        elapsed = now - block.started if block.started is not None else 0.0
        mark = SPINNER[int(now * 10) % len(SPINNER)]
        tail = f"running {format_duration(elapsed)}"
        style = "class:tool.running"
    elif block.state == "queued":
        mark, tail, style = "·", "queued", "class:tool.queued"
    elif block.state == "done":
        mark, style = "✓", "class:tool.done"
        tail = "done" if block.duration_s is None else format_duration(block.duration_s)
    elif block.state == "skipped":
        mark, style = "⊘", "class:tool.skipped"
        tail = block.detail or "skipped"
    elif block.state == "cancelled":
        mark, tail, style = "⊘", "cancelled", "class:tool.skipped"
    else:
        mark, style = "✗", "class:tool.failed"
        tail = "failed" + (f" {format_duration(block.duration_s)}" if block.duration_s else "")
    if block.speculated and block.state == "done":
        tail = "done ahead of time"
    fragments: list[Fragment] = [(style, f"  {mark} "), ("class:tool.name", name)]
    if args:
        fragments.append(("class:tool.args", f"  {args}"))
    fragments.append(("class:dim", f"  {tail}"))
    return tuple(fragments)


def _text_lines(text: str, style: str) -> list[Line]:
    return [((style, line),) for line in text.split("\n")]


def _committable(text: str) -> int:
    """Where a streaming text's final lines end (the newline after the last one), or -1.

    A whole line is final, except a blank line that only newlines follow: the run
    of newlines at the end may turn out to be the answer's trailing newlines, which
    are never shown. So ``"a\\n\\n"`` commits ``"a"`` and keeps one blank line
    pending, and an all-newline text commits nothing.
    """
    body = text.rstrip("\n")
    if body and len(body) < len(text):
        return len(body)
    return body.rfind("\n")


def _shown_live(text: str) -> str:
    """A streaming text as the live area shows it: pending trailing blank lines hidden.

    They are printed once text follows them (see :func:`_committable`); hiding them
    keeps the live area a few rows tall even when a model streams a flood of newlines.
    """
    body = text.rstrip("\n")
    if len(body) == len(text):
        return text
    return body + "\n" if body else ""


def _skip_reason(output: str) -> str:
    reason = output.removeprefix("Skipped:").strip()
    return "refused" if "refused" in reason else one_line(reason or "skipped", 60)


class Transcript:
    """Folds session events into final lines (printed once) and live lines (redrawn)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self.blocks: list[Block] = []
        self._calls: dict[str, ToolBlock] = {}
        self._committed: dict[str, None] = {}
        """Calls whose line is printed (bounded): their late result items change nothing."""
        self._streamed = False
        """Text was streamed since the last assistant item (its text is already shown)."""

    # -- input ---------------------------------------------------------------------------

    def note(self, line: Line) -> None:
        """A line of the app's own (an echo, a status): final at once, kept in order."""
        self.blocks.append(NoteBlock(line))

    def event(self, event: Any) -> None:
        """Fold one session event in (unknown kinds are ignored)."""
        if isinstance(event, TextDelta):
            self._text(event.text)
        elif isinstance(event, ItemAdded):
            if event.run_id is not None:  # inserted items (an accept) are shown from its result
                self._item(event.item, speculated=False)
        elif isinstance(event, ToolStarted):
            block = self._call(event.call_id, event.name)
            block.state = "running"
            block.started = self._clock()
        elif isinstance(event, ToolFinished):
            block = self._call(event.call_id, event.name)
            block.duration_s = event.duration_s
            if event.outcome == "cancelled":
                block.state = "cancelled"
            elif event.is_error or event.outcome != "ok":
                block.state = "failed"
            else:
                block.state = "done"
        elif isinstance(event, LlmRetried):
            self._retried(event)
        elif isinstance(event, AlertRaised):
            self.alert(event.alert.level, event.alert.text)
        elif isinstance(event, TurnFinished):
            self.turn_finished(event.result)
        elif isinstance(event, RunStarted):
            self._close_text()

    def alert(self, level: AlertLevel, text: str) -> None:
        mark, style = {
            AlertLevel.INFO: ("ℹ", "class:alert.info"),
            AlertLevel.WARN: ("⚠", "class:alert.warn"),
            AlertLevel.ERROR: ("✗", "class:alert.error"),
        }.get(level, ("ℹ", "class:alert.info"))
        self._close_text()
        self.note(((style, f"  {mark} {one_line(sanitize(text), 200)}"),))

    def items(self, items: Iterable[Item], *, speculated: bool) -> None:
        """Show history items that did not stream (an accepted speculation's transcript)."""
        self._close_text()
        for item in items:
            self._item(item, speculated=speculated)
        self._close_text()

    def turn_finished(self, result: TurnResult) -> None:
        """A run ended: nothing of it is live any more; say how it ended unless completed."""
        self._close_text()
        for block in self.blocks:
            if isinstance(block, ToolBlock) and not block.final:
                block.state = "cancelled"
        if result.status == "completed":
            return
        reason = one_line(sanitize(result.error or ""), 160)
        if result.status == "cancelled":
            self.note((("class:alert.warn", "  ⊘ cancelled"),))
        elif result.status == "error":
            self.note((("class:error", f"  ✗ error: {reason or 'the turn failed'}"),))
        elif result.status == "max_turns":
            self.note((("class:alert.warn", "  ⚠ stopped: the turn's LLM-call budget is spent"),))
        else:
            text = f"  ⚠ {result.status}" + (f": {reason}" if reason else "")
            self.note((("class:alert.warn", text),))

    # -- output --------------------------------------------------------------------------

    def commit(self) -> list[Line]:
        """Pop what became final, in order: whole blocks, and an open text's whole lines."""
        out: list[Line] = []
        while self.blocks:
            block = self.blocks[0]
            if isinstance(block, NoteBlock):
                out.append(block.line)
            elif isinstance(block, ToolBlock):
                if not block.final:
                    break
                out.append(tool_line(block, self._clock()))
                self._calls.pop(block.call_id, None)
                self._committed[block.call_id] = None
                if len(self._committed) > 4096:
                    self._committed.pop(next(iter(self._committed)))
            elif block.open:
                cut = _committable(block.text)
                if cut < 0 and "\n" not in block.text and len(block.text) > MAX_LIVE_CHARS:
                    cut = len(block.text)
                if cut >= 0:
                    out.extend(_text_lines(block.text[:cut], block.style))
                    block.text = block.text[cut + 1 :]
                break
            elif block.text:
                out.extend(_text_lines(block.text, block.style))
            if isinstance(block, TextBlock) and block.dropped:
                out.append((("class:dim", f"  … {block.dropped:,} more characters not shown"),))
            self.blocks.pop(0)
        return out

    def live(self) -> list[Line]:
        """The lines still changing (redrawn in place above the prompt)."""
        now = self._clock()
        out: list[Line] = []
        tools = hidden = 0
        for block in self.blocks:
            if isinstance(block, NoteBlock):
                out.append(block.line)
            elif isinstance(block, ToolBlock):
                tools += 1
                if tools > MAX_LIVE_TOOLS:
                    hidden += 1
                    continue
                out.append(tool_line(block, now))
            elif block.open:
                out.extend(_text_lines(_shown_live(block.text), block.style))
            elif block.text:
                out.extend(_text_lines(block.text, block.style))
        if hidden:
            out.append((("class:dim", f"  … {hidden} more tool calls"),))
        return out

    @property
    def running(self) -> bool:
        """Something live has a clock (a running tool call's duration, a spinner)."""
        return any(isinstance(b, ToolBlock) and b.state == "running" for b in self.blocks)

    def flush(self) -> list[Line]:
        """Close everything and pop it (the app is leaving, or a view reset)."""
        self._close_text()
        for block in self.blocks:
            if isinstance(block, ToolBlock) and not block.final:
                block.state = "cancelled"
        return self.commit()

    # -- internals -----------------------------------------------------------------------

    def _text(self, text: str) -> None:
        self._streamed = True
        text = sanitize(text)
        last = self.blocks[-1] if self.blocks else None
        if not (isinstance(last, TextBlock) and last.open):
            last = TextBlock("")
            self.blocks.append(last)
        if not last.size:  # an answer's leading newlines, over however many deltas, are not shown
            text = text.lstrip("\n")
        last.add(text)

    def _close_text(self) -> None:
        for block in self.blocks:
            if isinstance(block, TextBlock) and block.open:
                block.open = False
                block.text = block.text.rstrip("\n")

    def _retried(self, event: LlmRetried) -> None:
        if event.discard_streamed_text and event.discard_chars:
            left = event.discard_chars
            for block in reversed(self.blocks):
                if not isinstance(block, TextBlock) or not block.open or left <= 0:
                    break
                cut = min(left, len(block.text))
                block.text = block.text[: len(block.text) - cut]
                left -= cut
        self.note((("class:dim", f"  ↻ retrying: {one_line(sanitize(event.reason), 120)}"),))

    def _call(self, call_id: str, name: str) -> ToolBlock:
        block = self._calls.get(call_id)
        if block is None:
            self._close_text()
            block = ToolBlock(call_id=call_id, name=name)
            self._calls[call_id] = block
            self.blocks.append(block)
        return block

    def _item(self, item: Item, *, speculated: bool) -> None:
        if isinstance(item, AssistantMessage):
            if item.text and (speculated or not self._streamed):
                self._close_text()
                answer = TextBlock("", open=False)
                answer.add(sanitize(item.text).strip("\n"))
                self.blocks.append(answer)
            self._streamed = False
            self._close_text()
            for call in item.tool_calls:
                block = self._call(call.id, call.name)
                block.args = short_arguments(call.name, call.arguments)
                block.speculated = speculated
        elif isinstance(item, ToolResult):
            if item.call_id in self._committed:
                return
            block = self._call(item.call_id, item.name)
            if block.final:
                return
            if item.output.startswith("Skipped:"):
                block.state = "skipped"
                block.detail = _skip_reason(item.output)
            elif item.output.startswith("Cancelled"):
                block.state = "cancelled"
            else:
                block.state = "failed" if item.is_error else "done"
        elif isinstance(item, SystemMessage):
            first = sanitize(item.text).strip().split("\n", 1)[0]
            self._close_text()
            self.note((("class:dim", f"  · {one_line(first, 100)}"),))


# -- the per-file summary of an accept ------------------------------------------------------


@dataclass
class FileChange:
    added: int = 0
    removed: int = 0
    written: bool = False
    """Replaced whole (write_file): the removed count is unknown."""
    known: bool = False


MAX_DIFF_WORK = 250_000
"""Line pairs a per-file count may compare; past it the count is the lines' own numbers
(a hostile edit of thousands of lines must not stall the UI in a quadratic diff)."""


def _count(old: str, new: str) -> tuple[int, int]:
    a, b = old.splitlines(), new.splitlines()
    if len(a) * len(b) > MAX_DIFF_WORK:
        return len(b), len(a)
    added = removed = 0
    matcher = difflib.SequenceMatcher(a=a, b=b, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag in ("replace", "delete"):
            removed += i2 - i1
        if tag in ("replace", "insert"):
            added += j2 - j1
    return added, removed


def _norm(path: Any) -> str | None:
    if not isinstance(path, str) or not path:
        return None
    return os.path.normpath(path)


def file_changes(items: Sequence[Item]) -> dict[str, FileChange]:
    """Per file, the lines the transcript's successful write calls added and removed."""
    ok = {i.call_id for i in items if isinstance(i, ToolResult) and not i.is_error}
    changes: dict[str, FileChange] = {}

    def edit(path: Any, old: Any, new: Any) -> None:
        key = _norm(path)
        if key is None or not isinstance(old, str) or not isinstance(new, str):
            return
        change = changes.setdefault(key, FileChange())
        added, removed = _count(old, new)
        change.added += added
        change.removed += removed
        change.known = True

    for item in items:
        if not isinstance(item, AssistantMessage):
            continue
        for call in item.tool_calls:
            if call.id not in ok:
                continue
            args: Mapping[str, Any] = call.arguments
            if call.name == "edit":
                edit(args.get("path"), args.get("old_string"), args.get("new_string"))
            elif call.name == "multi_edit":
                for spec in args.get("edits") or ():
                    if isinstance(spec, Mapping):
                        edit(spec.get("path"), spec.get("old_string"), spec.get("new_string"))
            elif call.name == "write_file":
                key = _norm(args.get("path"))
                content = args.get("content")
                if key is not None and isinstance(content, str):
                    changes[key] = FileChange(
                        added=len(content.splitlines()), written=True, known=True
                    )
    return changes


def diff_summary(items: Sequence[Item], files: Sequence[str]) -> list[Line]:
    """One line per applied file: ``~ path  +3 −1``."""
    changes = file_changes(items)
    lines: list[Line] = []
    for path in files:
        change = changes.get(os.path.normpath(path), FileChange())
        if not change.known:
            stat = "changed"
        elif change.written:
            stat = f"+{change.added} (written whole)"
        else:
            stat = f"+{change.added} −{change.removed}"
        lines.append(
            (
                ("class:diff.mark", "  ~ "),
                ("class:diff.path", sanitize(path)),
                ("class:diff.stat", f"  {stat}"),
            )
        )
    return lines


@dataclass
class Totals:
    """What the status line and ``/cost`` add up over a session."""

    main_tokens: int = 0
    speculation_tokens: int = 0
    wasted_tokens: int = 0
    accepted: int = 0
    aborted: int = 0
    time_saved_s: float = 0.0
    turns: int = 0
    outcomes: dict[str, int] = field(default_factory=dict)

    @property
    def tokens(self) -> int:
        return self.main_tokens + self.speculation_tokens
