"""One session's wiring: from how it was opened to its worker's configuration.

What a session gets -- its tools (the built-ins chosen, ``resolve``,
``multi_edit``, ``inspect``, its own, its MCP servers'), its approval policy
(one mode for normal turns and the speculation gate), its interceptors
(Fore's own machinery first, then the session's policy, kept apart) -- and
the :class:`~actors.worker.config.WorkerConfig` that ties it to the
runtime's shared actors. Plain code, no actor: the runtime
(:mod:`supervision.runtime_sessions`) starts the session's supervisor on
what :func:`wire_session` returns.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fore.actors.alerts import AlertSink
from fore.actors.blobs.actor import BlobStoreActor
from fore.actors.blobs.fs_store import FsBlobStore
from fore.actors.blobs.inspect_tool import Inspect
from fore.actors.filerefs.resolver import prepare_submit
from fore.actors.llm.gateway import LlmGateway
from fore.actors.output.interceptor import OutputInterceptor
from fore.actors.resolve import MultiEdit, PendingActions, Resolve
from fore.actors.telemetry.limits import session_usage
from fore.actors.tools.base import Tool, ToolRegistry, ToolServices
from fore.actors.tools.builtin import builtin_tools
from fore.actors.tools.decorator import as_tool
from fore.actors.tools.fs import FsView, WorkspaceFs
from fore.actors.tools.mcp.manager import MCPManager
from fore.actors.tools.noworkspace import NoWorkspace
from fore.actors.tools.pool.actor import ToolPool
from fore.actors.tools.selection import choose_builtins
from fore.actors.worker.approval import LiveApproval, as_policy
from fore.actors.worker.config import WorkerConfig
from fore.actors.worker.hooks import Hooks
from fore.actors.worker.interceptor import Interceptor, Interceptors
from fore.actors.worker.machinery import ResolveInterceptor
from fore.actors.worker.persistence import Persistence
from fore.actors.worker.state import SessionState
from fore.messages.blobs import BlobLimits
from fore.messages.gate import ApprovalMode
from fore.messages.speculation import SpeculationConfig
from fore.supervision.handle import Handle
from fore.supervision.resume import SessionArgs

if TYPE_CHECKING:  # for typing only: tracing imports opentelemetry, an optional extra
    from fore.actors.telemetry.tracing import Instrumentation


@dataclass(frozen=True)
class SessionWiring:
    """A session's parts, ready for its supervisor to start."""

    config: WorkerConfig
    """The worker's configuration (tools, hooks, interceptors, the runtime's actors)."""
    speculation: SpeculationConfig
    """The session's speculation settings, its approval mode applied."""
    fs: FsView
    """Its workspace (:class:`~actors.tools.noworkspace.NoWorkspace` without one)."""
    hooks: Hooks
    state: SessionState
    pending: PendingActions
    mcp_failures: list[str]
    """MCP servers that did not start, each one line (the session opens without them)."""


def wire_session(
    sid: str,
    args: SessionArgs,
    *,
    history: list[Any],
    persist: Persistence | None,
    gateway: Handle[LlmGateway],
    tool_pool: Handle[ToolPool],
    alert_sink: Handle[AlertSink],
    blob_fs: FsBlobStore | None,
    blob_store: Handle[BlobStoreActor] | None,
    blob_limits: BlobLimits,
    telemetry: Instrumentation | None,
    mcp: Callable[[], MCPManager],
) -> SessionWiring:
    """Session ``sid``'s parts, as ``args`` asks, on the runtime's shared actors.

    ``mcp`` gives the runtime's MCP connections: asked for only when the
    session names a server. Raises ``ValueError`` for speculation without a
    workspace.
    """
    workspace, model, system_prompt = args.workspace, args.model, args.system_prompt
    tools, builtin, mcp_servers = args.tools, args.builtin, args.mcp_servers
    hooks, interceptor, model_name = args.hooks, args.interceptor, args.model_name
    max_turns, call_timeout, tool_concurrency = (
        args.max_turns,
        args.call_timeout,
        args.tool_concurrency,
    )
    max_batch_calls, max_argument_retries = args.max_batch_calls, args.max_argument_retries
    purpose, file_ref_cap, speculation = args.purpose, args.file_ref_cap, args.speculation
    wrap_up = args.wrap_up
    approval, approver, usage_limits = args.approval, args.approver, args.usage_limits
    spec_config = speculation or SpeculationConfig()
    fs: FsView = NoWorkspace() if workspace is None else WorkspaceFs(Path(workspace))
    # -- approvals (issue 24): one mode for normal turns and the speculation gate --
    live_approval: LiveApproval | None = None
    if approval is not None or approver is not None:
        policy = as_policy(approval if approval is not None else ApprovalMode.DEFAULT)
        live_approval = LiveApproval(
            policy, approver, workspace=fs.root if isinstance(fs, WorkspaceFs) else None
        )
        spec_config = spec_config.model_copy(update={"approval_mode": policy.mode})
    if workspace is None and spec_config.enabled:
        raise ValueError("speculation needs a workspace (open_session(workspace=...))")
    resolve_tool = Resolve()
    extra: list[Tool[Any]] = [resolve_tool]
    chosen = choose_builtins(builtin, has_workspace=workspace is not None)
    if "multi_edit" in chosen:
        extra.insert(0, MultiEdit())
    if blob_store is not None:
        extra.append(Inspect(blob_limits))
    own = [as_tool(item) for item in tools]
    base = [*(t for t in builtin_tools() if t.name in chosen), *extra, *own]
    servers = list(mcp_servers)
    mcp_failures: list[str] = []
    if servers:
        mcp_tools, mcp_failures = mcp().session_tools(servers, taken=[t.name for t in base])
        base.extend(mcp_tools)
    registry = ToolRegistry(base)
    hooks = hooks or Hooks()
    state = SessionState(history=history, approval=live_approval)
    pending = PendingActions()
    trusted: list[Interceptor] = [
        OutputInterceptor(state, model),  # structured output (submit(output_type=...))
        ResolveInterceptor(pending, resolve_tool.definition()),
    ]
    if interceptor is not None:
        trusted.append(interceptor)
    config = WorkerConfig(
        session_id=sid,
        model=model,
        gateway=gateway,
        tool_pool=tool_pool,
        fs=fs,
        tools=registry,
        hooks=hooks,
        interceptor=Interceptors(trusted),
        policy=interceptor,
        preparer=(
            None if workspace is None else functools.partial(prepare_submit, fs, cap=file_ref_cap)
        ),
        alert_sink=alert_sink,
        state=state,
        services=ToolServices(blobs=blob_fs, pending_actions=pending),
        hidden_tools=frozenset({"resolve"}),
        blob_store=blob_store,
        blob_limits=blob_limits,
        model_name=model_name or getattr(model, "name", ""),
        system_prompt=system_prompt,
        purpose=purpose,
        max_turns=max_turns,
        wrap_up=wrap_up,
        call_timeout=call_timeout,
        tool_concurrency=tool_concurrency,
        max_batch_calls=max_batch_calls,
        max_argument_retries=max_argument_retries,
        telemetry=telemetry,
        session_usage=session_usage(usage_limits),
        persist=persist,
    )
    return SessionWiring(
        config=config,
        speculation=spec_config,
        fs=fs,
        hooks=hooks,
        state=state,
        pending=pending,
        mcp_failures=mcp_failures,
    )
