"""A speculation's worker: the real agent loop, configured so that nothing real can change.

A speculation runs the suggestion as a :class:`~actors.worker.worker.Worker`
with purpose ``speculation``; :func:`speculation_worker_config` builds its
configuration from the session's (a plain function: the controller starts
the worker and owns everything it is given):

* its filesystem view is the speculation's fresh copy-on-write overlay;
* its interceptor is the speculation gate: read tools run, writes go to the
  overlay only in auto-edit/yolo (and only while they fit its size bound),
  everything else stops the run at a boundary; the gate also pins every
  request's tools to the fork snapshot's. The session's own interceptor runs
  after the gate with strict semantics (:mod:`actors.speculation.gate`);
* the session's ``pre_tool_call`` and ``post_tool_call`` hooks also run, and
  any answer but Continue is a boundary -- speculation never bypasses
  permission policy; they pass one hook gate the session's speculations
  share (kept in the controller's book), so their hung hooks count against
  one ``max_in_flight`` cap, apart from the main worker's;
* its history is the session's fork snapshot trimmed at a cache-safe point,
  its model the session's fast model when one is configured (model object
  *and* name), wrapped in a :class:`~actors.speculation.metered.MeteredModel`;
* its turn limit is the speculation's own (the other budgets are the
  controller's: :mod:`actors.speculation.lifecycle`).
"""

from __future__ import annotations

from pathlib import Path

from fore.actors.overlay.fs import OverlayFs
from fore.actors.resolve.pending import PendingActions
from fore.actors.speculation.fork import trim_history
from fore.actors.speculation.gate import SpeculationGate
from fore.actors.speculation.metered import MeteredModel
from fore.actors.tools.base import ToolRegistry, ToolServices
from fore.actors.worker.hookrun import HookGate
from fore.actors.worker.hooks import HookEvent, HooksView
from fore.actors.worker.state import SessionState
from fore.actors.worker.worker import WorkerConfig
from fore.messages.speculation import ForkSnapshot, SpeculationConfig

__all__ = ["speculation_gate", "speculation_worker_config"]


def speculation_gate(
    main: WorkerConfig,
    config: SpeculationConfig,
    snapshot: ForkSnapshot,
    overlay: OverlayFs,
    workspace: Path,
) -> SpeculationGate:
    """The gate every call and request of the speculation passes (see module docs)."""
    return SpeculationGate(
        config.approval_mode,
        overlay,
        workspace,
        tools=snapshot.tools,
        policy=main.policy,
        approval=main.state.approval,
    )


def speculation_worker_config(
    main: WorkerConfig,
    config: SpeculationConfig,
    snapshot: ForkSnapshot,
    *,
    tools: ToolRegistry,
    overlay: OverlayFs,
    gate: SpeculationGate,
    model: MeteredModel,
    model_name: str,
    hook_gate: HookGate,
) -> WorkerConfig:
    """The speculation worker's configuration (see module docs).

    ``tools``: the session's tools when the speculation started (they execute
    its calls; what the requests *describe* is always ``snapshot.tools``).
    ``model_name``: the wire name to send (empty: the snapshot's, i.e. the
    main request's). ``hook_gate``: the one the session's speculations share, so
    together they hold at most the session's ``max_in_flight`` lane threads with
    their hooks (hung ones included) and never take the lane from the user's turn.
    """
    history = trim_history(snapshot.history, config.max_history, config.history_trim_step)
    return WorkerConfig(
        session_id=main.session_id,
        model=model,
        gateway=main.gateway,
        tool_pool=main.tool_pool,
        fs=overlay,
        tools=tools,
        hooks=HooksView(main.hooks, frozenset({HookEvent.PRE_TOOL_CALL, HookEvent.POST_TOOL_CALL})),  # type: ignore[arg-type]
        interceptor=gate,
        state=SessionState(history=list(history), hook_gate=hook_gate),
        services=ToolServices(blobs=main.services.blobs, pending_actions=PendingActions()),
        model_name=model_name or snapshot.model_name,
        system_prompt=snapshot.system_prompt,
        purpose="speculation",
        stream=config.stream_forks,
        max_turns=config.max_turns,
        call_timeout=main.call_timeout,
        tool_concurrency=main.tool_concurrency,
        max_batch_calls=main.max_batch_calls,
        max_argument_retries=main.max_argument_retries,
        hidden_tools=main.hidden_tools,
        strict_tool_hooks=True,
        blob_store=main.blob_store,
        blob_limits=main.blob_limits,
        telemetry=main.telemetry,
    )
