"""Hook events, what a hook may answer at each, and the errors a hook ends in.

The result types are the hooks' vocabulary (``Continue``, ``Skip``, ...);
:data:`ALLOWED` and :data:`NEUTRAL` say which of them an event accepts and
what ``None`` stands for. Kept apart from the registry and the chain so the
types a hook returns can be imported without the machinery that runs it.
Re-exported by :mod:`actors.worker.hooks` (the public home of these names).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from fore.errors import ConditionError, HookError, HookTimeout
from fore.messages.conversation import Item

# Defined in fore.errors (the one exception tree); re-exported for the importers of this module.
__all__ = ["ConditionError", "HookError", "HookTimeout"]


@dataclass(frozen=True, slots=True)
class Continue:
    """Go on (run the next hook, then the step itself)."""


@dataclass(frozen=True, slots=True)
class Cancel:
    """Cancel the submit or the LLM request; the run ends as ``rejected``."""

    reason: str = ""


@dataclass(frozen=True, slots=True)
class Skip:
    """Do not run this tool call; it gets a synthetic "skipped" result."""

    reason: str = ""


@dataclass(frozen=True, slots=True)
class Abort:
    """End the run now (status ``aborted``)."""

    reason: str = ""


@dataclass(frozen=True, slots=True)
class Pause:
    """Pause the run before this tool call; ``resume`` continues after this hook."""

    reason: str = ""


@dataclass(frozen=True, slots=True)
class Finish:
    """The turn is over."""


@dataclass(frozen=True, slots=True)
class ContinueWithMessages:
    """Append these items and ask the model again (counts against ``max_turns``)."""

    messages: tuple[Item, ...] = ()

    def __init__(self, messages: Sequence[Item] = ()) -> None:
        object.__setattr__(self, "messages", tuple(messages))


@dataclass(frozen=True, slots=True)
class Paused:
    """Pause at turn end; ``resume`` finishes the run or continues with messages."""

    reason: str = ""


OnPromptSubmitResult = Continue | Cancel
PreLlmRequestResult = Continue | Cancel
PreToolCallResult = Continue | Skip | Abort | Pause
PostToolCallResult = Continue | Abort
OnTurnEndResult = Finish | ContinueWithMessages | Paused
OnAbortResult = None


class HookEvent(StrEnum):
    ON_PROMPT_SUBMIT = "on_prompt_submit"
    PRE_LLM_REQUEST = "pre_llm_request"
    PRE_TOOL_CALL = "pre_tool_call"
    POST_TOOL_CALL = "post_tool_call"
    ON_TURN_END = "on_turn_end"
    ON_ABORT = "on_abort"


ALLOWED: dict[HookEvent, tuple[type, ...]] = {
    HookEvent.ON_PROMPT_SUBMIT: (Continue, Cancel),
    HookEvent.PRE_LLM_REQUEST: (Continue, Cancel),
    HookEvent.PRE_TOOL_CALL: (Continue, Skip, Abort, Pause),
    HookEvent.POST_TOOL_CALL: (Continue, Abort),
    HookEvent.ON_TURN_END: (Finish, ContinueWithMessages, Paused),
    HookEvent.ON_ABORT: (),
}

NEUTRAL: dict[HookEvent, Any] = {
    HookEvent.ON_PROMPT_SUBMIT: Continue(),
    HookEvent.PRE_LLM_REQUEST: Continue(),
    HookEvent.PRE_TOOL_CALL: Continue(),
    HookEvent.POST_TOOL_CALL: Continue(),
    HookEvent.ON_TURN_END: Finish(),
    HookEvent.ON_ABORT: None,
}
