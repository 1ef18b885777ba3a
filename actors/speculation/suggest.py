"""Suggestion requests: one model call that predicts the user's next input.

The request is a cache-safe fork: the snapshot's system prompt, tools and
trimmed history, then one user message carrying the suggestion prompt. The
tools stay in the request (same prefix as the main request) but
``tool_choice`` is ``none``. The answer is JSON ``{"suggestion": ...}``,
parsed leniently and then filtered by the seed's rules.

The request goes to the model the caller resolved (the session's fast model
when configured) under that model's wire name: a provider uses
``request.model_name`` when it is set, so leaving the snapshot's (main) name
there would silently send every fork to the main model.
"""

from __future__ import annotations

from typing import Any

from fore.actors.speculation.fork import fork_prefix
from fore.actors.speculation.suggestion_filter import (
    SuggestionVerdict,
    filter_suggestion,
    parse_suggestion_reply,
)
from fore.actors.speculation.suggestion_prompt import SUGGESTION_PROMPT
from fore.messages.conversation import UserMessage
from fore.messages.llm import LlmRequest, Purpose
from fore.messages.speculation import ForkSnapshot, SpeculationConfig


def suggestion_request(
    snapshot: ForkSnapshot,
    *,
    max_history: int,
    trim_step: int = 1,
    request_id: str,
    purpose: Purpose,
    model: Any,
    model_name: str,
    reply_to: Any,
    stream: bool = True,
    max_tokens: int | None = SpeculationConfig().suggestion_max_tokens,
) -> LlmRequest:
    """The fork request asking for the next input.

    ``model_name`` is the wire name to send; empty means the snapshot's (the
    main request's) name. ``max_tokens`` bounds the answer (a suggestion is one
    short line; ``SpeculationConfig.suggestion_max_tokens``).
    """
    messages = [*fork_prefix(snapshot, max_history, trim_step), UserMessage(text=SUGGESTION_PROMPT)]
    return LlmRequest.model_construct(
        request_id=request_id,
        session_id=snapshot.session_id,
        purpose=purpose,
        model_name=model_name or snapshot.model_name,
        messages=tuple(messages),
        tools=snapshot.tools,
        tool_choice="none" if snapshot.tools else "auto",
        stream=stream,
        stream_deltas=False,
        max_tokens=max_tokens,
        temperature=None,
        json_response=False,
        model=model,
        reply_to=reply_to,
    )


def suggestion_from_reply(raw: str) -> SuggestionVerdict:
    """Parse the model's JSON answer and apply the filter (silence is a rejection)."""
    text = parse_suggestion_reply(raw)
    return filter_suggestion(text or "")
