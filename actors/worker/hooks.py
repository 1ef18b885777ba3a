"""Hooks: user policy at each decision point of the agent loop.

Six events, each with its own input and result type (the seed's design):

=================  ============================  =====================================
event              input (mutable where noted)   result
=================  ============================  =====================================
on_prompt_submit   :class:`PromptContext`        ``Continue`` | ``Cancel``
pre_llm_request    :class:`LlmRequestContext`    ``Continue`` | ``Cancel``
pre_tool_call      :class:`ToolCallContext`      ``Continue`` | ``Skip`` | ``Abort`` | ``Pause``
post_tool_call     :class:`PostToolCallContext`  ``Continue`` | ``Abort``
on_turn_end        :class:`TurnEndContext`       ``Finish`` | ``ContinueWithMessages`` | ``Paused``
on_abort           :class:`AbortContext`         (ignored)
=================  ============================  =====================================

Hooks of one event run in order: higher ``priority`` first, then registration
order. A hook may have a ``when`` condition (and tool hooks a ``tools``
pattern) that decides whether it applies. The condition is user code too: it
is evaluated by :func:`run_hook` inside the hook's blocking-lane call, under
the hook's deadline, and a condition that raises or hangs is a hook error like
any other. (The ``tools`` pattern is Fore's own ``fnmatch`` and is checked
inline.) Propagation: ``Continue`` (and
``Finish``, the neutral turn-end result) runs the next hook; any other result
stops the chain for that call or event (``Skip``
skips the call, ``Abort`` ends the run, ``Pause`` / ``Paused`` pause it).
Returning ``None`` means the event's neutral result (``Continue`` / ``Finish``).

Hooks are user code: the worker runs each one on the hook lane with a
timeout, never on a dispatcher thread (see :mod:`actors.worker.hookrun`). The
timeout starts when the hook starts running, not while it waits for a lane
thread; that wait has its own deadline (``Hooks(start_timeout=...)``), and a
hook that has not started when its run no longer needs it is cancelled and
never runs. A hook that is already running cannot be stopped (Python cannot
kill a thread): after its timeout it is abandoned -- it finishes whenever it
returns and its answer is ignored -- so a session may hold at most
``Hooks(max_in_flight=...)`` lane threads with its hooks; past that its next
hook waits for one of its own to finish. A hook that raises, times out,
returns a result its event does not allow, or leaves its input invalid is a
:class:`HookError` naming the event and the hook (its :meth:`HookError.failure`
is the typed :class:`~messages.session.HookFailure` a ``TurnResult``
carries), never a crash of the worker and never an invalid history.

Inputs are mutable only where the seed says so, and every edit is checked
when the hook answers (:func:`edit_problem`): ``on_prompt_submit`` may
rewrite ``text`` (a ``str``) and ``segments``; ``pre_llm_request`` may edit
its copy's ``messages`` (items), ``tools`` (tool definitions) and
``tool_choice``; a pre_tool_call hook may rewrite ``arguments`` (a JSON
object) but not the call's id or tool name (a renamed id would leave the
model's call without a result and a result without a call); a
post_tool_call hook may rewrite ``result`` (a :class:`ToolOutcome`) only.
The identity fields raise ``AttributeError`` when assigned.
``ContinueWithMessages`` items must be items that keep history well paired.

``on_abort`` runs exactly once for every run that *started* -- whose user
message entered history -- and ended early (see
:data:`~messages.session.RunStatus`). A submit that ends before that (cancelled
while its ``@file`` references were read or its on_prompt_submit hooks ran,
rejected or failed at on_prompt_submit, cancelled before it was even
received) never started: nothing of it is in history, so there is nothing to
clean up and no on_abort runs. A failing or timed-out on_abort hook is
reported (a log line and an alert) and the next on_abort hook still runs.

:func:`advance` is the chain's pure step function; the worker drives it.

This module is the hooks' public home; the code lives beside it, one concept a
module: :mod:`~actors.worker.hook_results` (events, results, errors),
:mod:`~actors.worker.hook_contexts` (each event's input),
:mod:`~actors.worker.hook_registry` (:class:`Hooks`, :class:`HooksView`) and
:mod:`~actors.worker.hook_chain` (the step function and the edit checks).
"""

from __future__ import annotations

from fore.actors.worker.hook_chain import (
    NOT_APPLICABLE,
    ChainState,
    advance,
    edit_problem,
    final_outcome,
    messages_problem,
    next_hook,
    outcome_problem,
    raised_error,
    run_hook,
)
from fore.actors.worker.hook_contexts import (
    AbortContext,
    LlmRequestContext,
    PostToolCallContext,
    PromptContext,
    ToolCallContext,
    ToolMeta,
    ToolOutcome,
    TurnEndContext,
)
from fore.actors.worker.hook_registry import (
    DEFAULT_MAX_IN_FLIGHT,
    DEFAULT_START_TIMEOUT,
    Condition,
    HookFn,
    Hooks,
    HookSpec,
    HooksView,
)
from fore.actors.worker.hook_results import (
    ALLOWED,
    NEUTRAL,
    Abort,
    Cancel,
    ConditionError,
    Continue,
    ContinueWithMessages,
    Finish,
    HookError,
    HookEvent,
    HookTimeout,
    OnAbortResult,
    OnPromptSubmitResult,
    OnTurnEndResult,
    Pause,
    Paused,
    PostToolCallResult,
    PreLlmRequestResult,
    PreToolCallResult,
    Skip,
)

__all__ = [
    "ALLOWED",
    "DEFAULT_MAX_IN_FLIGHT",
    "DEFAULT_START_TIMEOUT",
    "NEUTRAL",
    "NOT_APPLICABLE",
    "Abort",
    "AbortContext",
    "Cancel",
    "ChainState",
    "Condition",
    "ConditionError",
    "Continue",
    "ContinueWithMessages",
    "Finish",
    "HookError",
    "HookEvent",
    "HookFn",
    "HookSpec",
    "HookTimeout",
    "Hooks",
    "HooksView",
    "LlmRequestContext",
    "OnAbortResult",
    "OnPromptSubmitResult",
    "OnTurnEndResult",
    "Pause",
    "Paused",
    "PostToolCallContext",
    "PostToolCallResult",
    "PreLlmRequestResult",
    "PreToolCallResult",
    "PromptContext",
    "Skip",
    "ToolCallContext",
    "ToolMeta",
    "ToolOutcome",
    "TurnEndContext",
    "advance",
    "edit_problem",
    "final_outcome",
    "messages_problem",
    "next_hook",
    "outcome_problem",
    "raised_error",
    "run_hook",
]
