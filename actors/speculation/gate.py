"""The speculation gate as an interceptor of the speculation's worker.

Every tool call of a speculation passes :func:`~actors.gate.tool_gate.evaluate_tool_call`
before the session's own pre_tool_call hooks: read tools run, writes run
against the overlay (auto-edit / yolo), and anything else is a boundary that
stops the speculation. A shell command sees the real tree, so once a write
is pending -- in the overlay, or earlier in the same batch -- any shell call
is a boundary (its view would be stale). A write that would overflow the
overlay's size bound is a boundary too.

It also pins what every request of the speculation sends to the fork
snapshot's tools: the worker would otherwise describe the tools of whatever
registry it was given, and the cache-safe prefix (system prompt, tools,
history -- byte for byte the main request's) would silently differ from the
main request the moment the session's tools or an interceptor's edits did.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from actors.gate.tool_gate import evaluate_tool_call
from actors.worker.hooks import (
    Abort,
    Cancel,
    Continue,
    LlmRequestContext,
    PostToolCallContext,
    ToolCallContext,
)
from actors.worker.interceptor import Boundary, Interceptor
from messages.gate import ApprovalMode, GateAction
from messages.tools import ToolDefinition


class SpeculationGate(Interceptor):
    def __init__(
        self,
        mode: ApprovalMode,
        overlay: Any,
        workspace: Path,
        *,
        tools: Sequence[ToolDefinition] | None = None,
    ) -> None:
        self.mode = mode
        self.overlay = overlay
        self.workspace = workspace
        self.tools = None if tools is None else tuple(tools)
        """The fork snapshot's tool definitions, sent verbatim (None: leave the request's)."""
        self._batch_writes = False
        self.decisions: list[tuple[str, str, str]] = []

    def pre_llm_request(self, ctx: LlmRequestContext) -> Continue | Cancel:
        if self.tools is not None:
            ctx.tools = list(self.tools)
        return Continue()

    def pre_tool_call(self, ctx: ToolCallContext) -> Continue | Boundary:
        if ctx.meta.index == 0:
            self._batch_writes = False
        stale = bool(self.overlay.has_writes) or self._batch_writes
        decision = evaluate_tool_call(
            ctx.name, ctx.arguments, self.mode, cwd=self.workspace, overlay_has_writes=stale
        )
        self.decisions.append((ctx.name, decision.action.value, decision.reason))
        if decision.action is GateAction.BOUNDARY:
            return Boundary(decision.reason, ctx.name)
        if decision.action is GateAction.REDIRECT:
            if self.overlay.bytes_used >= self.overlay.max_bytes:
                return Boundary("the speculation's overlay is full", ctx.name)
            self._batch_writes = True
        return Continue()

    def post_tool_call(self, ctx: PostToolCallContext) -> Continue | Abort:
        if ctx.result.is_error and "overlay" in ctx.result.output and "full" in ctx.result.output:
            return Abort("the speculation's overlay is full")
        return Continue()
