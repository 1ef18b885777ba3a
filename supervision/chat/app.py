"""The ``fore chat`` terminal: a scrolling prompt_toolkit application over a :class:`ChatBackend`.

Layout (not full screen: the transcript scrolls in the terminal's own
history, so it can be scrolled back, searched and copied like any output)::

    … final lines, printed once above the app (answers, finished tool calls) …
      ⠹ shell  python3 -m unittest -q  running 1.2 s      ← live: redrawn in place
      ? allow shell python3 -m unittest -q?  y / n / a    ← an approval, when asked
    › add a test for an empty title                       ← the prompt; the suggestion
                                                            is grey ghost text here
     demo │ auto-edit ⇧Tab │ ready: 2 calls, 1 file · Tab applies │ 1.2k tok │ Tab saved 3.1 s

Threads. The UI thread (prompt_toolkit's asyncio loop) never waits on the
runtime: turns and Tab are awaited (``Session.asubmit`` / ``aaccept``), the
session's events arrive through ``async for event in Session.stream()`` --
the speculation's state among them, as ``SpeculationStatusChanged`` events,
so nothing is polled -- and a key binding only ever *tells* the runtime
something (``dismiss``, ``cancel``, the approval mode: no wait). The two calls
that do wait (``/model``, ``/clear``) run on a small executor. The runtime
asks for approvals on its hook lane (``open_session(approver=...)``), where
:meth:`ChatApp.approver` waits -- within the request's deadline -- for the
person's answer, which the loop delivers.

The code. :class:`ChatApp` is one object on that loop, built in layers, each
a module that calls only the layers under it: the state
(:mod:`~supervision.chat.app_state`), what is drawn and printed
(:mod:`~supervision.chat.screen`), how the session is driven -- turns, Tab,
approvals, events (:mod:`~supervision.chat.driver`) -- and, here, the
person's input (keys, slash commands) and the app's run. The pure parts are
modules of their own (transcript, status line, commands, paths).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

from prompt_toolkit.application import Application, run_in_terminal
from prompt_toolkit.buffer import Buffer
from prompt_toolkit.completion import ThreadedCompleter, merge_completers
from prompt_toolkit.filters import Condition
from prompt_toolkit.history import InMemoryHistory
from prompt_toolkit.input import Input
from prompt_toolkit.key_binding import KeyBindings, KeyPressEvent, merge_key_bindings
from prompt_toolkit.key_binding.defaults import load_key_bindings
from prompt_toolkit.keys import Keys
from prompt_toolkit.output import Output

from fore.actors.worker.approval import ApprovalDecision
from fore.messages.gate import ApprovalMode
from fore.supervision.chat.app_state import APPROVAL_WAIT_S
from fore.supervision.chat.approval import MODE_HELP, next_mode
from fore.supervision.chat.backend import ChatBackend
from fore.supervision.chat.commands import (
    CommandCompleter,
    UnknownCommand,
    help_lines,
    parse_command,
)
from fore.supervision.chat.driver import ChatDriver
from fore.supervision.chat.paths import PathCompleter
from fore.supervision.chat.screen import STYLE, styled_line
from fore.supervision.chat.status import cache_lines, cost_lines
from fore.supervision.chat.text import one_line
from fore.supervision.chat.trace import Trace
from fore.supervision.chat.transcript import Transcript


class ChatApp(ChatDriver):
    """The terminal UI (see the module docs); :meth:`run` blocks until the person leaves."""

    def __init__(
        self,
        backend: ChatBackend,
        *,
        banner: Sequence[str] = (),
        opening: str | None = None,
        trace: Trace | None = None,
        input: Input | None = None,
        output: Output | None = None,
        approval_wait_s: float = APPROVAL_WAIT_S,
    ) -> None:
        super().__init__(
            backend,
            banner=banner,
            opening=opening,
            trace=trace,
            approval_wait_s=approval_wait_s,
        )
        self.buffer = Buffer(
            completer=ThreadedCompleter(
                merge_completers([CommandCompleter(), PathCompleter(backend.workspace)])
            ),
            complete_while_typing=Condition(self._completing_word),
            history=InMemoryHistory(),
            multiline=False,
        )
        self.buffer.on_text_changed += self._text_changed
        self.buffer.on_completions_changed += self._completions_changed
        self.app = Application(
            layout=self._layout(),
            key_bindings=merge_key_bindings([load_key_bindings(), self._bindings()]),
            style=STYLE,
            full_screen=False,
            erase_when_done=True,
            mouse_support=False,
            input=input,
            output=output,
            after_render=self._after_render,
        )
        # A lone Esc is told from an Alt-key sequence after this long (default 0.5 s).
        self.app.ttimeoutlen = 0.05

    # -- key bindings -------------------------------------------------------------------------

    def _bindings(self) -> KeyBindings:
        kb = KeyBindings()

        @kb.add(Keys.Any)
        def _typed(event: KeyPressEvent) -> None:
            self._on_char(event.data, event)

        @kb.add("enter")
        def _enter(event: KeyPressEvent) -> None:
            self._keypress()
            if self.approvals:
                return
            buf = self.buffer
            state = buf.complete_state
            if state is not None:
                buf.complete_state = None
                if state.current_completion is not None:
                    return  # Enter took the completion; the next Enter sends
            self._send_buffer()

        @kb.add("tab")
        def _tab(event: KeyPressEvent) -> None:
            self._keypress()
            if self.approvals:
                return
            buf = self.buffer
            if self.ghost is not None and not buf.text:
                self._accept_suggestion()
            elif buf.complete_state is not None and buf.complete_state.completions:
                buf.complete_next()
            elif self._completing_word():
                # The listing may still run (completion while typing): take its
                # first answer when it comes; if none runs, start one.
                self._tab_pending = True
                buf.start_completion(select_first=True)

        @kb.add("s-tab")
        def _cycle(event: KeyPressEvent) -> None:
            self._set_mode(next_mode(self.backend.mode))

        @kb.add("escape", eager=True)
        def _escape(event: KeyPressEvent) -> None:
            self._keypress()
            if self.approvals:
                self._answer(ApprovalDecision.DENY)
            elif self.buffer.complete_state is not None:
                self.buffer.cancel_completion()
            elif self.ghost is not None:
                self._dismiss("esc")

        @kb.add("c-c")
        def _interrupt(event: KeyPressEvent) -> None:
            self._interrupt()

        @kb.add("c-d")
        def _eof(event: KeyPressEvent) -> None:
            if self.buffer.text:
                self.buffer.delete()
                return
            self._leave()

        return kb

    def _keypress(self) -> None:
        """Any key but Ctrl-C disarms the second Ctrl-C and clears a hint."""
        self._exit_armed = False
        if self.hint:
            self.hint = ""

    def _on_char(self, data: str, event: KeyPressEvent) -> None:
        self._keypress()
        if not data.isprintable():
            return  # an unbound control key: nothing to type
        if self.approvals:
            decision = {
                "y": ApprovalDecision.ALLOW,
                "n": ApprovalDecision.DENY,
                "a": ApprovalDecision.ALWAYS,
            }.get(data.lower())
            if decision is not None:
                self._answer(decision)
            return
        self._key_seq += 1
        at_ns = time.monotonic_ns()
        if self.ghost is not None:
            self.trace.mark("key", at_ns, key="char", ghost=True, seq=self._key_seq)
            self._dismiss("typed")
        else:
            self.trace.mark("key", at_ns, key="char", ghost=False, seq=self._key_seq)
            self._awaiting_echo = self._key_seq
            if self._suggestion_possible:
                self._suggestion_possible = False
                self.backend.dismiss()  # a suggestion still on its way is not wanted now
        event.current_buffer.insert_text(data)

    def _completions_changed(self, buffer: Buffer) -> None:
        state = buffer.complete_state
        if self._tab_pending and state is not None and state.completions:
            self._tab_pending = False
            if state.complete_index is None:
                buffer.go_to_completion(0)

    def _text_changed(self, _buffer: Buffer) -> None:
        # Paste, history (↑/↓), a completion: anything that fills the prompt is
        # not Tab, so it throws the suggestion away too.
        if self.buffer.complete_state is None:
            self._tab_pending = False
        if self.buffer.text and self.ghost is not None:
            self._dismiss("edited")

    def _send_buffer(self) -> None:
        text = self.buffer.text.strip()
        if not text:
            return
        try:
            command = parse_command(text)
        except UnknownCommand as exc:
            self._set_hint(str(exc))
            return
        if command is not None:
            self.buffer.reset(append_to_history=True)
            self._command(command.name, command.argument)
            return
        if self.busy is not None:
            if self.queued is not None:
                self._set_hint("a prompt is already queued: Ctrl-C cancels the turn")
                return
            # Typed while a turn runs: it goes when the turn ends (Ctrl-C takes it back).
            self.buffer.reset(append_to_history=True)
            self.queued = text
            self._set_hint(f"queued: {one_line(text, 60)}")
            return
        self.buffer.reset(append_to_history=True)
        self._send(text)

    # -- commands --------------------------------------------------------------------------

    def _command(self, name: str, argument: str) -> None:
        if name == "help":
            self._print_text(help_lines())
        elif name == "exit":
            self._leave()
        elif name == "cost":
            usage = getattr(self.backend, "usage", None)  # issue 28: by purpose, with cost
            model = getattr(getattr(self.backend, "config", None), "model", None)
            meter = getattr(model, "meter", None)  # prompt-cache figures (issue 27)
            self._print_text(
                cost_lines(self.totals, self.backend.model_label, usage() if usage else None)
                + cache_lines(meter)
            )
        elif name == "model":
            if not argument:
                self._print_text([f"model: {self.backend.model_label}"])
            elif self.busy is not None:
                self._set_hint("a turn is running: switch models when it ends")
            else:
                self.app.create_background_task(self._switch_model(argument))
        elif name == "approval":
            if not argument:
                mode = self.backend.mode
                self._print_text([f"approval mode {mode.value}: {MODE_HELP[mode]}"])
                return
            try:
                mode = ApprovalMode(argument)
            except ValueError:
                allowed = ", ".join(m.value for m in ApprovalMode)
                self._set_hint(f"unknown approval mode {argument!r}; one of {allowed}")
                return
            self._set_mode(mode)
        elif name == "clear":
            if self.busy is not None:
                self._set_hint("a turn is running: Ctrl-C cancels it first")
                return
            if self.ghost is not None:
                self._dismiss("clear")
            self._begin("clear")
            self.app.create_background_task(self._clear())

    async def _switch_model(self, name: str) -> None:
        loop = asyncio.get_running_loop()
        old = self.backend.model_label
        try:
            label = await loop.run_in_executor(self._executor, self.backend.set_model, name)
        except Exception as exc:
            why = one_line(str(exc) or type(exc).__name__, 160)
            self._print_lines(
                [styled_line("class:error", f"  ✗ /model {one_line(name, 60)}: {why}")]
            )
            return
        if self.ghost is not None:  # the old model's suggestion is withdrawn
            self.ghost = None
            self.spec_status = None
        self._print_text([f"model: {one_line(label, 60)} (was {one_line(old, 60)})"])

    async def _clear(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(self._executor, self.backend.reset)
        except Exception as exc:
            why = one_line(str(exc), 120)
            self._print_lines(
                [styled_line("class:error", f"  ✗ could not start a new conversation: {why}")]
            )
            self._end()
            return
        await self._streaming_generation(self.backend.generation)
        self.transcript = Transcript()

        def wipe() -> None:
            output = self.app.output
            output.erase_screen()
            output.cursor_goto(0, 0)
            output.flush()

        await run_in_terminal(wipe)
        self._print_text(["(a new conversation)"])
        self._end()
        self._suggestion_possible = False

    # -- running -------------------------------------------------------------------------------

    def _started(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._pump = self.app.create_background_task(self._pump_events())
        if self.opening:
            self._send(self.opening, "sent by the demo")

    def run(self) -> int:
        """Run until the person leaves; returns the exit code."""
        for line in self.banner:
            self._print_text([line])
        try:
            code = self.app.run(pre_run=self._started)
        finally:
            self.shutdown()
        return code

    async def run_async(self) -> int:
        for line in self.banner:
            self._print_text([line])
        try:
            return await self.app.run_async(pre_run=self._started)
        finally:
            self.shutdown()

    def shutdown(self) -> None:
        """Deny what waits on the person, cancel what runs, stop the event thread."""
        self._stop.set()
        while self.approvals:
            pending = self.approvals.popleft()
            if not pending.answer.done():
                pending.answer.set_result(ApprovalDecision.DENY)
        if self.busy in ("turn", "accept"):
            self.backend.cancel()
        if self.ghost is not None:
            self.backend.dismiss()
        if self._pump is not None:
            self._pump.cancel()  # prompt_toolkit cancels its background tasks too
        self._executor.shutdown(wait=False, cancel_futures=True)
