"""A submit turned into the user message and the items that follow it (``@path`` files).

:class:`PreparedInput` is what the worker's preparer (``resolver.prepare_submit``,
on the blocking lane) hands back; the worker's submit phase puts ``items`` into
history right after the user message, once the on_prompt_submit hooks let the
submit through. It lives here, below the worker, because the resolver builds it.
"""

from __future__ import annotations

from dataclasses import dataclass

from fore.actors.filerefs.tokenizer import parse_input, render_user_text
from fore.messages.alerts import AlertLevel
from fore.messages.conversation import Item, Segment
from fore.messages.session import Submit


@dataclass(frozen=True)
class PreparedInput:
    """A submit turned into the user message's text and segments.

    ``items`` go into history right after the user message (resolved file
    references, one system message each, in order); ``alerts`` are
    ``(level, text, source)`` to raise.
    """

    text: str
    segments: tuple[Segment, ...]
    items: tuple[Item, ...] = ()
    alerts: tuple[tuple[AlertLevel, str, str], ...] = ()


def submit_segments(submit: Submit) -> tuple[Segment, ...]:
    """The segments of a submit: given, or parsed from text (``@path`` recognised)."""
    if submit.segments is not None:
        return submit.segments
    return parse_input(submit.text or "")


def prepare_plain(submit: Submit) -> PreparedInput:
    """Prepare without resolving references (no file access)."""
    segments = submit_segments(submit)
    return PreparedInput(text=render_user_text(segments), segments=segments)
