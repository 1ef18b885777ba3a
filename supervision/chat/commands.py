"""Slash commands: what ``/help``, ``/model``, ``/approval``, ``/clear``, ``/cost`` are.

Parsing is pure: :func:`parse_command` says whether a line is a command (and
which); the app carries it out. A line is a command when it starts with ``/``
and a lowercase word followed by whitespace or the end -- so a prompt that
starts with a path (``/tmp/x is broken``) is still sent as a prompt.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from prompt_toolkit.completion import CompleteEvent, Completer, Completion
from prompt_toolkit.document import Document

from fore.errors import UnknownCommand

# Defined in fore.errors (the one exception tree); re-exported for the importers of this module.
__all__ = ["UnknownCommand"]

COMMANDS: dict[str, str] = {
    "help": "keys and commands",
    "model": "the model this session talks to",
    "approval": "show the approval mode, or set it: /approval default|auto-edit|yolo|plan",
    "clear": "start a new conversation (clears the screen and the history)",
    "cost": "tokens and their cost by purpose (main, suggestion, speculation), the wasted "
    "tokens, prompt-cache hits of forks and the time saved by Tab",
    "exit": "leave (also Ctrl-D)",
}

ALIASES = {"quit": "exit", "q": "exit", "?": "help"}

_COMMAND = re.compile(r"^/([a-z?]+)(?:\s+(.*))?$", re.S)

KEYS: tuple[tuple[str, str], ...] = (
    ("Enter", "send the prompt"),
    ("Tab", "accept the grey suggestion (apply its speculated work); complete an @path"),
    ("any key", "throw the suggestion away (its speculation is aborted)"),
    ("Esc", "throw the suggestion away"),
    ("Shift-Tab", "cycle the approval mode: default → auto-edit → yolo → plan"),
    ("Ctrl-C", "cancel the running turn; twice: leave"),
    ("Ctrl-D", "leave"),
    ("↑ / ↓", "prompt history"),
    ("@path", "attach a workspace file (Tab completes)"),
    ("y / n / a", "answer an approval prompt: yes / no / always for this tool"),
)


@dataclass(frozen=True)
class Command:
    name: str
    argument: str = ""


def parse_command(line: str) -> Command | None:
    """The command on ``line``, ``None`` for a prompt; raises :class:`UnknownCommand`."""
    match = _COMMAND.match(line.strip())
    if match is None:
        return None
    name = ALIASES.get(match.group(1), match.group(1))
    if name not in COMMANDS:
        raise UnknownCommand(f"unknown command /{match.group(1)}: /help lists them")
    return Command(name, (match.group(2) or "").strip())


def help_lines() -> list[str]:
    width = max(len(k) for k, _ in KEYS)
    lines = ["Keys:"]
    lines += [f"  {key.ljust(width)}  {what}" for key, what in KEYS]
    lines.append("Commands:")
    cwidth = max(len(c) for c in COMMANDS) + 1
    lines += [f"  /{name.ljust(cwidth)} {what}" for name, what in COMMANDS.items()]
    return lines


class CommandCompleter(Completer):
    """Completes ``/name`` at the start of the prompt."""

    def get_completions(
        self, document: Document, complete_event: CompleteEvent
    ) -> Iterable[Completion]:
        text = document.text_before_cursor
        if not text.startswith("/") or " " in text:
            return
        for name, what in COMMANDS.items():
            if name.startswith(text[1:]):
                yield Completion(f"/{name}", start_position=-len(text), display_meta=what)
