"""``resolve``: the hidden tool that applies or discards a staged preview.

Offered to the model only while something is pending or a standing handler is
installed (the resolve interceptor adds it to the request). Exclusive, so two
``resolve`` calls in one answer run one after the other and each consumes at
most one action.

A callback that raises never loses the action: after a failed ``apply`` or
``reject`` it is pending again (directive and reminder pushed again, as the
seed says for apply), so the model can retry or choose differently. Each
failure spends the action's forcing budget (:mod:`actors.resolve.pending`),
so a permanently failing apply cannot force ``resolve`` forever; a failure
whose exception has ``retryable = False`` (a stale preview) is not forced
again at all.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, Literal

from pydantic import BaseModel, Field, JsonValue

from fore.actors.resolve.pending import (
    PendingAction,
    PendingActions,
    StandingHandler,
    call_with_reason,
)
from fore.actors.tools.base import Tool, ToolArgs, ToolContext, ToolError

NOTHING_PENDING = "No pending action to resolve. Nothing to apply or discard."


class ResolveArgs(ToolArgs):
    action: Literal["apply", "discard"] = Field(
        description="Apply the staged preview, or discard it."
    )
    reason: str = Field(min_length=1, description="Why (shown to the user).")
    extra: dict[str, JsonValue] | None = Field(
        default=None, description="Optional free-form metadata for the producer."
    )


def retryable(exc: BaseException) -> bool:
    """Whether retrying the callback could succeed (``retryable = False`` on the exception: no)."""
    return bool(getattr(exc, "retryable", True))


def result_text(value: Any) -> Any:
    """A callback's result as something JSON can carry."""
    if value is None or isinstance(value, str | int | float | bool | list | dict):
        return value
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    return str(value)


class Resolve(Tool[ResolveArgs]):
    name = "resolve"
    description = (
        "Apply or discard the staged preview that is waiting for a decision. "
        "Call it with action 'apply' or 'discard' and a reason."
    )
    args_model = ResolveArgs
    exclusive = True

    def execute(self, args: ResolveArgs, ctx: ToolContext) -> Any:
        store: PendingActions | None = ctx.services.pending_actions
        if store is None:
            raise ToolError(NOTHING_PENDING)
        action = store.take()
        if action is None:
            standing = store.standing
            if standing is None:
                raise ToolError(NOTHING_PENDING)
            return self._run(standing, args, requeue=None)

        def requeue(exc: Exception) -> None:
            store.requeue(action, retryable=retryable(exc), error=str(exc))

        return self._run(action, args, requeue=requeue)

    def _run(
        self,
        target: PendingAction | StandingHandler,
        args: ResolveArgs,
        *,
        requeue: Callable[[Exception], object] | None,
    ) -> str:
        details = {
            "action": args.action,
            "reason": args.reason,
            "source_tool": target.source_tool_name,
            "label": target.label,
            "extra": args.extra,
        }
        if target.details is not None:
            details["details"] = result_text(target.details)
        if args.action == "apply":
            try:
                outcome = call_with_reason(target.apply, args.reason, args.extra)
            except Exception as exc:
                if requeue is not None:
                    requeue(exc)  # still pending: it can be retried or discarded
                raise ToolError(f"Apply failed: {exc}") from None
            return json.dumps(
                {"result": result_text(outcome), "resolve": details}, ensure_ascii=False
            )
        if target.reject is not None:
            try:
                outcome = call_with_reason(target.reject, args.reason, args.extra)
            except Exception as exc:
                if requeue is not None:
                    requeue(exc)  # not discarded: it stays pending
                    raise ToolError(
                        f"Discard failed: {exc}. The preview {target.label!r} is still "
                        "pending; call resolve again to apply or discard it."
                    ) from None
                raise ToolError(f"Discard failed: {exc}") from None
            if outcome is not None:
                return json.dumps(
                    {"result": result_text(outcome), "resolve": details}, ensure_ascii=False
                )
        return f"Discarded: {target.label}. Reason: {args.reason}"
