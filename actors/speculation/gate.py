"""The speculation gate as an interceptor of the speculation's worker.

Every tool call of a speculation passes :func:`~actors.gate.tool_gate.evaluate_tool_call`
before the session's own policy: read tools run, writes run against the
overlay (auto-edit / yolo), and anything else is a boundary that stops the
speculation. A shell command sees the real tree, so once a write is pending
-- in the overlay, or earlier in the same batch -- any shell call is a
boundary (its view would be stale).

**The size bound.** A write that would push the overlay past its size bound is
a boundary *before* it runs: its size is estimated from its arguments
(``write_file``: the content; ``edit``: the file's current size plus what one
replacement adds), summed over the writes already allowed in the same batch.
Should a write still hit the bound while running (an estimate is an
estimate), its ``OverlayFull`` error is not the end of the speculation
either: the call is recorded as a *late boundary*, the batch finishes, and
the run stops before its next LLM request; the run's outcome
(:mod:`actors.speculation.outcome`) then takes that call (and its error
result) out of the transcript and hands it over as the boundary call, so
after Tab it runs for real -- exactly as if the gate had refused it up front.

**The session's own interceptor** (``open_session(interceptor=...)``) runs
too, after the gate, with strict semantics: at ``pre_tool_call`` anything but
Continue -- or Continue with rewritten arguments, which the gate never saw --
is a boundary; an ``Abort`` at ``post_tool_call`` is a late boundary (above);
a ``Cancel`` at ``on_prompt_submit`` / ``pre_llm_request`` ends the run, and
the run's outcome is a boundary (or, before the prompt was even in
history, as nothing to offer). The policy object is shared with the main
worker, so it is called from two threads when both run: a policy must be
thread-safe (the built-in ones are stateless per call).

It also pins what every request of the speculation sends to the fork
snapshot's tools: the worker would otherwise describe the tools of whatever
registry it was given, and the cache-safe prefix (system prompt, tools,
history -- byte for byte the main request's) would silently differ from the
main request the moment the session's tools or an interceptor's edits did.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fore.actors.gate.tool_gate import (
    declared_read_only,
    evaluate_tool_call,
)
from fore.actors.worker.approval import LiveApproval
from fore.actors.worker.hooks import (
    Abort,
    AbortContext,
    Cancel,
    Continue,
    ContinueWithMessages,
    Finish,
    LlmRequestContext,
    Paused,
    PostToolCallContext,
    ToolCallContext,
    TurnEndContext,
)
from fore.actors.worker.interceptor import (
    Boundary,
    Interceptor,
    InterceptorSubmitResult,
    RetryRequest,
)
from fore.messages.alerts import AlertLevel
from fore.messages.conversation import AssistantMessage, UserMessage
from fore.messages.gate import ApprovalMode, GateAction
from fore.messages.llm import LlmError
from fore.messages.tools import ToolDefinition

OVERLAY_FULL = "the speculation's overlay is full"


@dataclass(frozen=True, slots=True)
class LateBoundary:
    """A call that ran but must be handed over as a boundary (see module docs)."""

    call_id: str
    tool: str
    reason: str


def _is_overlay_full(output: str) -> bool:
    return "speculation overlay is full" in output or (
        "no space left for the speculation overlay" in output
    )


class SpeculationGate(Interceptor):
    def __init__(
        self,
        mode: ApprovalMode,
        overlay: Any,
        workspace: Path,
        *,
        tools: Sequence[ToolDefinition] | None = None,
        policy: Interceptor | None = None,
        approval: LiveApproval | None = None,
    ) -> None:
        self.mode = mode
        self.approval = approval
        """The session's live approval state: a file tool the person said "always" to
        goes to the overlay in ``default`` mode too (``LiveApproval.speculation_mode``)."""
        self.overlay = overlay
        self.workspace = workspace
        self.tools = None if tools is None else tuple(tools)
        """The fork snapshot's tool definitions, sent verbatim (None: leave the request's)."""
        self.policy = policy
        """The session's own interceptor, run after the gate with strict semantics."""
        self._batch_writes = False
        self._batch_bytes = 0
        self.decisions: list[tuple[str, str, str]] = []
        self.late: list[LateBoundary] = []
        """Calls that ran but end the speculation at a boundary (read by the run's outcome)."""
        self.refused: str | None = None
        """Why the policy cancelled the prompt or a request (the run ended ``rejected``)."""

    # -- the policy's plumbing ---------------------------------------------------------

    def attach(self, alert: Callable[[AlertLevel, str, str], Any]) -> None:
        """Not passed on: the policy stays attached to its main worker, where its
        alerts belong (re-attaching it here would redirect them into a speculation)."""

    def on_prompt_submit(self, message: UserMessage) -> InterceptorSubmitResult:
        if self.policy is None:
            return Continue()
        verdict = self.policy.on_prompt_submit(message)
        if isinstance(verdict, Cancel):
            self.refused = _named("on_prompt_submit", self.policy, verdict, verdict.reason)
        return verdict

    def on_submit_cancelled(self) -> None:
        if self.policy is not None:
            self.policy.on_submit_cancelled()

    def on_llm_response(self, ctx: LlmRequestContext, message: AssistantMessage) -> None:
        if self.policy is not None:
            self.policy.on_llm_response(ctx, message)

    def on_llm_error(self, ctx: LlmRequestContext, error: LlmError) -> RetryRequest | None:
        return None if self.policy is None else self.policy.on_llm_error(ctx, error)

    def on_turn_end(self, ctx: TurnEndContext) -> Finish | ContinueWithMessages | Paused:
        return Finish() if self.policy is None else self.policy.on_turn_end(ctx)

    def on_abort(self, ctx: AbortContext) -> None:
        if self.policy is not None:
            self.policy.on_abort(ctx)

    def on_run_end(self, status: str) -> None:
        if self.policy is not None:
            self.policy.on_run_end(status)

    # -- requests ------------------------------------------------------------------------

    def pre_llm_request(self, ctx: LlmRequestContext) -> Continue | Cancel:
        if self.late:
            # A call of the last batch must run for real: stop before asking again.
            return Cancel(self.late[0].reason)
        if self.policy is not None:
            verdict = self.policy.pre_llm_request(ctx)
            if isinstance(verdict, Cancel):
                self.refused = _named("pre_llm_request", self.policy, verdict, verdict.reason)
                return verdict
        if self.tools is not None:
            ctx.tools = list(self.tools)
        return Continue()

    # -- tool calls ----------------------------------------------------------------------

    def pre_tool_call(self, ctx: ToolCallContext) -> Continue | Boundary:
        if ctx.meta.index == 0:
            self._batch_writes = False
            self._batch_bytes = 0
        stale = bool(self.overlay.has_writes) or self._batch_writes
        mode = self.mode
        if self.approval is not None:
            mode = self.approval.speculation_mode(ctx.name, mode)
        decision = evaluate_tool_call(
            ctx.name, ctx.arguments, mode, cwd=self.workspace, overlay_has_writes=stale
        )
        decision = declared_read_only(decision, ctx.tool, stale)
        self.decisions.append((ctx.name, decision.action.value, decision.reason))
        if decision.action is GateAction.BOUNDARY:
            return Boundary(decision.reason, ctx.name)
        needed = 0
        if decision.action is GateAction.REDIRECT:
            needed = self._write_size(ctx.name, ctx.arguments)
            if needed + self._batch_bytes > self.overlay.bytes_free:
                return Boundary(
                    f"{OVERLAY_FULL} (this write needs about {needed} more bytes)", ctx.name
                )
        if self.policy is not None:
            refused = self._policy_pre_tool(ctx)
            if refused is not None:
                return refused
        if decision.action is GateAction.REDIRECT:
            self._batch_writes = True
            self._batch_bytes += needed
        return Continue()

    def _policy_pre_tool(self, ctx: ToolCallContext) -> Boundary | None:
        assert self.policy is not None
        before = copy.deepcopy(ctx.arguments)
        verdict = self.policy.pre_tool_call(ctx)
        if not isinstance(verdict, Continue):
            reason = getattr(verdict, "reason", "")
            return Boundary(_named("pre_tool_call", self.policy, verdict, reason), ctx.name)
        if ctx.arguments != before:
            # The gate judged the model's arguments, not these: never run them here.
            ctx.arguments.clear()
            ctx.arguments.update(before)
            name = type(self.policy).__name__
            return Boundary(f"the session's interceptor {name} rewrote the arguments", ctx.name)
        return None

    def _write_size(self, name: str, arguments: dict[str, Any]) -> int:
        """Bytes a redirected write will add to the overlay (an estimate; module docs)."""
        path = arguments.get("path")
        if not isinstance(path, str):
            return 0
        try:
            held = int(self.overlay.held_bytes(path))
            if name == "write_file":
                content = arguments.get("content")
                size = len(content.encode()) if isinstance(content, str) else 0
            else:
                stat = self.overlay.stat(path)
                current = stat.size if stat is not None and stat.kind == "file" else 0
                old, new = arguments.get("old_string"), arguments.get("new_string")
                growth = (
                    len(new.encode()) - len(old.encode())
                    if isinstance(old, str) and isinstance(new, str)
                    else 0
                )
                size = current + max(0, growth)
        except Exception:  # a bad path: the write itself reports it
            return 0
        return max(0, size - held)

    def post_tool_call(self, ctx: PostToolCallContext) -> Continue | Abort:
        if ctx.result.is_error and _is_overlay_full(ctx.result.output):
            self.late.append(LateBoundary(ctx.call_id, ctx.name, OVERLAY_FULL))
            return Continue()
        if self.policy is not None:
            verdict = self.policy.post_tool_call(ctx)
            if not isinstance(verdict, Continue):
                reason = _named("post_tool_call", self.policy, verdict, verdict.reason)
                self.late.append(LateBoundary(ctx.call_id, ctx.name, reason))
        return Continue()


def _named(event: str, policy: Interceptor, verdict: Any, reason: str) -> str:
    text = f"the session's interceptor {type(policy).__name__} returned {type(verdict).__name__}"
    text += f" at {event}"
    return f"{text}: {reason}" if reason else text


__all__ = [
    "OVERLAY_FULL",
    "LateBoundary",
    "SpeculationGate",
    "declared_read_only",
]
