"""The ``resolve`` tool's forcing rules as plain functions: reminder and alert texts.

Used by the worker's machinery that forces ``resolve`` while a preview waits
(:class:`fore.actors.worker.machinery.ResolveInterceptor`) and by structured
output, which forces its own tool the same way (:func:`rejects_forced_choice`).
No actor, no worker: just the texts and the provider-error rule.
"""

from __future__ import annotations

from fore.actors.resolve.pending import PendingAction
from fore.messages.llm import LlmError

RESOLVE = "resolve"


def reminder_text(pending: list[PendingAction]) -> str:
    newest = pending[0]
    more = (
        f" ({len(pending)} previews are pending; the newest comes first.)"
        if len(pending) > 1
        else ""
    )
    failed = (
        f" Its last attempt failed: {newest.last_error}" if newest.last_error is not None else ""
    )
    return (
        f"A staged preview is waiting for your decision: {newest.label!r} "
        f"(from {newest.source_tool_name}). Call the resolve tool with action 'apply' or "
        f"'discard' and a reason before continuing.{more}{failed}"
    )


def exhausted_text(action: PendingAction) -> str:
    """The Warn alert when forcing stops for ``action`` (its budget of misses is spent)."""
    if action.failures == 0:
        cause = f"The model ignored {action.ignored} requests to resolve the preview"
    else:
        parts = []
        if action.ignored:
            parts.append(f"{action.ignored} forced turns were ignored")
        parts.append(
            f"{action.failures} attempt{'s' if action.failures != 1 else ''} to resolve it failed"
        )
        cause = f"{' and '.join(parts)} for the preview"
    return (
        f"{cause} {action.label!r}; it is no longer forced and stays pending until it is "
        "applied or discarded."
    )


def rejects_forced_choice(error: LlmError) -> bool:
    """Whether a provider error says it will not accept a forced tool choice."""
    if error.kind != "bad_request":
        return False
    text = f"{error.message} {error.provider_message or ''}".lower()
    return error.param == "tool_choice" or "tool_choice" in text or "tool choice" in text
