"""What ``fore chat`` draws: its style, its layout, and the lines printed above it.

The layout is the live area (the answer's current line, running tool
calls), an approval when one is asked, a hint, the prompt with the
suggestion as ghost text, and the status line; final lines are printed once
above the app and scroll away with the terminal (the module docs of
:mod:`~supervision.chat.app` draw it). Everything here only reads the state
(:class:`~supervision.chat.app_state.ChatState`) and prints; the session is
driven by :mod:`~supervision.chat.driver`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from typing import Any

from prompt_toolkit.application import Application, run_in_terminal
from prompt_toolkit.filters import Condition
from prompt_toolkit.formatted_text import FormattedText, StyleAndTextTuples
from prompt_toolkit.layout import (
    ConditionalContainer,
    Float,
    FloatContainer,
    HSplit,
    Layout,
    Window,
)
from prompt_toolkit.layout.controls import BufferControl, FormattedTextControl
from prompt_toolkit.layout.dimension import Dimension
from prompt_toolkit.layout.menus import CompletionsMenu
from prompt_toolkit.layout.processors import (
    BeforeInput,
    Processor,
    Transformation,
    TransformationInput,
)
from prompt_toolkit.renderer import print_formatted_text as render_formatted_text
from prompt_toolkit.styles import Style

from fore.supervision.chat.app_state import ChatState
from fore.supervision.chat.approval import short_arguments
from fore.supervision.chat.paths import at_word
from fore.supervision.chat.status import StatusInput, speculation_text, status_line
from fore.supervision.chat.text import format_duration, one_line
from fore.supervision.chat.transcript import SPINNER, Line

STYLE = Style.from_dict(
    {
        # The suggestion: grey (SGR 90), readable on dark and light backgrounds.
        "ghost": "fg:ansibrightblack",
        "prompt": "bold fg:ansicyan",
        "prompt.echo": "bold fg:ansicyan",
        "user": "bold",
        "answer": "",
        "dim": "fg:ansibrightblack",
        "note": "fg:ansibrightblack",
        "tool.name": "bold",
        "tool.args": "",
        "tool.running": "fg:ansiyellow",
        "tool.queued": "fg:ansibrightblack",
        "tool.done": "fg:ansigreen",
        "tool.failed": "fg:ansired",
        "tool.skipped": "fg:ansiyellow",
        "alert.info": "fg:ansibrightblack",
        "alert.warn": "fg:ansiyellow",
        "alert.error": "fg:ansired",
        "error": "fg:ansired",
        "diff.mark": "fg:ansiblue",
        "diff.path": "bold",
        "diff.stat": "fg:ansigreen",
        "accept": "fg:ansimagenta",
        "approval": "bold fg:ansiyellow",
        "approval.keys": "",
        "hint": "fg:ansibrightblack italic",
        "status": "bg:ansiblack fg:ansiwhite",
    }
)


TICK_S = 0.1
"""Redraw period while something on screen has a clock (spinners, durations)."""
MAX_ECHO = 1_000
"""The longest echo of a prompt (a paste of a whole file is sent whole, echoed short)."""
MAX_GHOST = 300
"""The longest suggestion drawn (one line, sanitized)."""


class GhostText(Processor):
    """Draws the suggestion after the cursor of the empty prompt, in the ghost style."""

    def __init__(self, ghost: Callable[[], str | None]) -> None:
        self._ghost = ghost

    def apply_transformation(self, transformation_input: TransformationInput) -> Transformation:
        ti = transformation_input
        ghost = self._ghost()
        if ghost and ti.lineno == 0 and not ti.document.text:
            # The session filters suggestions, but the screen does not rely on it.
            return Transformation([*ti.fragments, ("class:ghost", one_line(ghost, MAX_GHOST))])
        return Transformation(ti.fragments)


def styled_line(style: str, text: str) -> Line:
    return ((style, text),)


def to_fragments(lines: Sequence[Line]) -> StyleAndTextTuples:
    out: StyleAndTextTuples = []
    for index, line in enumerate(lines):
        if index:
            out.append(("", "\n"))
        out.extend(line)
    return out


class ChatScreen(ChatState):
    """The app's layout, its printing and its clocks (see the module docs)."""

    # -- layout ----------------------------------------------------------------------------

    def _layout(self) -> Layout:
        live = ConditionalContainer(
            Window(
                FormattedTextControl(self._live_fragments),
                wrap_lines=True,
                dont_extend_height=True,
            ),
            filter=Condition(lambda: self.busy is not None or bool(self.transcript.blocks)),
        )
        approval = ConditionalContainer(
            Window(
                FormattedTextControl(self._approval_fragments),
                wrap_lines=True,
                dont_extend_height=True,
            ),
            filter=Condition(lambda: bool(self.approvals)),
        )
        hint = ConditionalContainer(
            Window(FormattedTextControl(lambda: [("class:hint", f"  {self.hint}")]), height=1),
            filter=Condition(lambda: bool(self.hint)),
        )
        prompt = Window(
            BufferControl(
                self.buffer,
                input_processors=[
                    BeforeInput(self._prompt_fragments),
                    GhostText(self._visible_ghost),
                ],
            ),
            height=self._input_height,
            wrap_lines=True,
            dont_extend_height=True,
        )
        status = Window(FormattedTextControl(self._status_fragments), height=1)
        body = HSplit([live, approval, hint, prompt, status])
        menu = Float(
            xcursor=True,
            ycursor=True,
            transparent=True,
            content=CompletionsMenu(max_height=8, scroll_offset=1),
        )
        return Layout(FloatContainer(body, floats=[menu]), focused_element=prompt)

    def _input_height(self) -> Dimension:
        # Room below the prompt for the completion menu while it is open.
        if self.buffer.complete_state is not None and not self.app.is_done:
            return Dimension(min=9)
        return Dimension(min=1)

    def _prompt_fragments(self) -> StyleAndTextTuples:
        if self.approvals:
            return [("class:approval", "? ")]
        return [("class:prompt", "› ")]

    def _visible_ghost(self) -> str | None:
        return None if self.approvals else self.ghost

    def _live_fragments(self) -> StyleAndTextTuples:
        lines = self.transcript.live()
        if self.busy is not None and not self.transcript.running:
            elapsed = time.monotonic() - self.busy_since
            spin = SPINNER[int(time.monotonic() * 10) % len(SPINNER)]
            what = {
                "turn": "working",
                "accept": "applying the suggestion",
                "clear": "starting a new conversation",
            }.get(self.busy, self.busy)
            lines.append(
                (
                    ("class:tool.running", f"  {spin} "),
                    ("class:dim", f"{what} {format_duration(elapsed)}"),
                )
            )
        return to_fragments(lines)

    def _approval_fragments(self) -> StyleAndTextTuples:
        if not self.approvals:
            return []
        request = self.approvals[0].request
        more = f"  (+{len(self.approvals) - 1} waiting)" if len(self.approvals) > 1 else ""
        summary = short_arguments(request.tool, request.arguments)
        return [
            ("class:approval", f"  ? allow {one_line(request.tool, 40)}"),
            ("", f"  {summary}" if summary else ""),
            (
                "class:dim",
                f"   ({request.mode.value} mode asks: {one_line(request.reason, 70)}){more}\n",
            ),
            (
                "class:approval.keys",
                f"    y yes · n no · a always allow {one_line(request.tool, 40)} · Esc no",
            ),
        ]

    def _status_fragments(self) -> StyleAndTextTuples:
        width = self.app.output.get_size().columns
        busy = None
        if self.busy == "turn":
            busy = "turn running · Ctrl-C cancels"
        elif self.busy == "clear":
            busy = "starting a new conversation…"
        spec = speculation_text(
            self.spec_status, shown=self.ghost is not None, accepting=self.busy == "accept"
        )
        line = status_line(
            StatusInput(
                model=self.backend.model_label,
                mode=self.backend.mode,
                speculation=spec,
                totals=self.totals,
                busy=busy,
            ),
            width,
        )
        return list(line)

    def _completing_word(self) -> bool:
        before = self.buffer.document.text_before_cursor
        return at_word(before) is not None or (before.startswith("/") and " " not in before)

    # -- printing ------------------------------------------------------------------------------

    def _echo(self, text: str, note: str = "") -> None:
        line: Line = (("class:prompt.echo", "› "), ("class:user", one_line(text, MAX_ECHO)))
        if note:
            line = (*line, ("class:dim", f"  ({note})"))
        self.transcript.note(line)
        self._flush_transcript()

    def _print_text(self, lines: Sequence[str]) -> None:
        self._print_lines([(("class:note", line),) for line in lines])

    def _flush_transcript(self, extra: Sequence[Line] = (), mark: str | None = None) -> None:
        lines = self.transcript.commit()
        self._print_lines([*lines, *extra], mark=mark)
        self.app.invalidate()

    def _print_lines(self, lines: Sequence[Line], mark: str | None = None) -> None:
        if not lines:
            if mark is not None:
                self.trace.mark(mark)
            return
        self.printed.extend("".join(text for _style, text in line) for line in lines)
        fragments = FormattedText([*to_fragments(lines), ("", "\n")])

        def render() -> None:
            output = self.app.output
            render_formatted_text(output, fragments, STYLE, color_depth=self.app.color_depth)
            output.flush()

        if not self.app.is_running:
            render()
            if mark is not None:
                self.trace.mark(mark)
            return
        done = run_in_terminal(render)
        if mark is not None:
            trace = self.trace

            def printed(_future: Any) -> None:
                trace.mark(mark)

            asyncio.ensure_future(done).add_done_callback(printed)

    # -- clocks and rendering hooks -----------------------------------------------------------

    def _ensure_ticker(self) -> None:
        if self._ticker is None or self._ticker.done():
            self._ticker = self.app.create_background_task(self._tick())

    async def _tick(self) -> None:
        while not self._stop.is_set():
            if self.busy is None and not self.transcript.running:
                return
            self.app.invalidate()
            await asyncio.sleep(TICK_S)

    def _after_render(self, _app: Application[int]) -> None:
        seq = self._awaiting_ghost_removal
        if seq is not None and self.ghost is None:
            self._awaiting_ghost_removal = None
            self.trace.mark("ghost_removed", seq=seq)
        echo = self._awaiting_echo
        if echo is not None:
            self._awaiting_echo = None
            self.trace.mark("echo_rendered", seq=echo)

    def _set_hint(self, text: str) -> None:
        self.hint = text
        self.app.invalidate()

    def _leave(self) -> None:
        if not self.app.is_done:
            self.app.exit(result=self.exit_code)
