"""The Runtime: one actor system, its supervision tree, and the session API.

``Runtime`` owns an :class:`~actors.core.system.ActorSystem` (dispatcher,
timer, blocking lane, registry), the root supervisor, the shared actors every
session uses (tool pool, LLM gateway) with the threads behind them, and a
supervisor per open session. Closing it shuts the tree down and then stops
every runtime thread, so nothing outlives it::

    root (one_for_one)
    ├── alert_sink       AlertSink     (every user-facing warning and error)
    ├── blob_store       BlobStoreActor (disk: FsBlobStore, owned here)
    ├── tool_pool        ToolPool      (threads: ThreadRunner; async tools and MCP: ToolLoop)
    ├── llm_gateway      LlmGateway    (threads: two LlmLoops, main and background)
    └── sessions         Supervisor    (one_for_one)
        └── session:<id> SessionSupervisor (one_for_one)
            ├── worker       Worker
            └── speculation  SpeculationController (the session's front door; it
                             starts and watches one Speculator per speculation)

**Close order.** The sessions go first, and the close then waits -- with
everything their speculations' reapers need still running (tool pool, LLM
loops, timer, blocking lane) -- until every overlay the runtime created is
removed; only then are the shared actors and the threads stopped. Whatever
is still on disk after that (a reaper past its deadline) is removed by the
close itself, when nothing can write into it any more; what cannot be is
named, with the reason, in :attr:`Runtime.overlays_left` and the close
returns False. No cleanup runs after ``close()`` has returned.
"""

from __future__ import annotations

import functools
import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

from pykka import ActorRef

from fore.actors.alerts import AlertSink, AlertSinkState
from fore.actors.blobs.actor import BlobStoreActor
from fore.actors.blobs.fs_store import FsBlobStore
from fore.actors.blobs.inspect_tool import Inspect
from fore.actors.core import tuning
from fore.actors.core.logs import get_logger
from fore.actors.core.system import ActorSystem
from fore.actors.filerefs.resolver import prepare_submit
from fore.actors.llm.gateway import LlmGateway
from fore.actors.llm.loop import LlmLoop
from fore.actors.llm.models import ChatModel
from fore.actors.output.interceptor import OutputInterceptor
from fore.actors.overlay.store import OverlayLeft, OverlayStore
from fore.actors.resolve import MultiEdit, PendingActions, Resolve
from fore.actors.speculation.governor import LoadGovernor, LoadProbe
from fore.actors.store import SessionSnapshot, SessionStore, SessionSummary
from fore.actors.telemetry.config import Telemetry, instrumentation
from fore.actors.telemetry.limits import session_usage
from fore.actors.telemetry.usage import PriceTable, UsageLedger
from fore.actors.tools.aio import ToolLoop
from fore.actors.tools.base import Tool, ToolRegistry, ToolServices
from fore.actors.tools.builtin import builtin_tools
from fore.actors.tools.decorator import as_tool
from fore.actors.tools.fs import FsView, WorkspaceFs
from fore.actors.tools.mcp.config import MCPServer
from fore.actors.tools.mcp.manager import MCPManager
from fore.actors.tools.noworkspace import NoWorkspace
from fore.actors.tools.pool import DEFAULT_MAX_RUNNING, DEFAULT_PER_SESSION, ToolPool
from fore.actors.tools.runner import ThreadRunner
from fore.actors.tools.selection import builtin_argument, choose_builtins
from fore.actors.worker.approval import ApprovalPolicy, Approver, LiveApproval, as_policy
from fore.actors.worker.hooks import Hooks
from fore.actors.worker.interceptor import Interceptor, Interceptors
from fore.actors.worker.machinery import ResolveInterceptor
from fore.actors.worker.persistence import Persistence
from fore.actors.worker.state import SessionState
from fore.actors.worker.worker import (
    DEFAULT_MAX_ARGUMENT_RETRIES,
    DEFAULT_MAX_BATCH_CALLS,
    Worker,
    WorkerConfig,
)
from fore.messages.alerts import Alert, AlertLevel, ForgetSession
from fore.messages.blob_store import ReleaseSession
from fore.messages.blobs import BlobLimits
from fore.messages.gate import ApprovalMode
from fore.messages.llm import Purpose
from fore.messages.runtime import (
    ChildSpec,
    GetChild,
    RestartType,
    StartChild,
    StopChild,
    Strategy,
    TreeSnapshot,
    WhichChildren,
)
from fore.messages.speculation import SpeculationConfig
from fore.messages.usage import ModelPrice, UsageLimits, UsageSummary
from fore.supervision.handle import Handle
from fore.supervision.persist import RuntimeStore
from fore.supervision.resume import (
    SessionArgs,
    rebuild_model,
    stored_args,
    workspace_of,
)
from fore.supervision.session import Session
from fore.supervision.session_supervisor import CONTROLLER, SessionSupervisor
from fore.supervision.supervisor import Supervisor

log = get_logger(__name__)


class Runtime:
    """An actor system, a supervision tree and the sessions on it."""

    def __init__(
        self,
        *,
        name: str = "fore",
        dispatcher_threads: int | None = None,
        throughput: int = 32,
        blocking_threads: int = 16,
        hook_threads: int = 16,
        max_restarts: int = 10,
        restart_period: float = 10.0,
        max_running_tools: int = DEFAULT_MAX_RUNNING,
        tools_per_session: int = DEFAULT_PER_SESSION,
        blobs: bool = True,
        blob_dir: str | os.PathLike[str] | None = None,
        blob_limits: BlobLimits | None = None,
        blob_max_bytes: int | None = 2 * 1024**3,
        blob_max_age_s: float | None = 7 * 24 * 3600.0,
        overlay_root: str | os.PathLike[str] | None = None,
        tune_process: bool = False,
        speculation_governor: LoadGovernor | None = None,
        store: str | SessionStore | None = None,
        telemetry: Telemetry | None = None,
        prices: Mapping[str, ModelPrice] | None = None,
    ) -> None:
        self.name = name
        self._tuned = False
        # -- the session store (supervision/persist.py): opened before anything
        # starts, so a bad URL, an unreachable server, a newer schema or a damaged
        # file is one StoreError from here and nothing is left half-open.
        self._store = RuntimeStore.open(store)
        self._session_args: dict[str, SessionArgs] = {}
        """How each open session was opened (its fork opens the same way)."""
        if blob_dir is None and self._store is not None:
            blob_dir = self._store.blob_dir  # blobs must outlive the process, like history
        # -- telemetry (issue 28): spans and metrics when asked for; usage always --
        self.telemetry = instrumentation(telemetry)
        """The actors' :class:`~actors.telemetry.tracing.Instrumentation` (``None``: off)."""
        self.usage_ledger = UsageLedger(PriceTable(prices))
        self.system = ActorSystem(
            name=name,
            dispatcher_threads=dispatcher_threads,
            throughput=throughput,
            blocking_threads=blocking_threads,
            hook_threads=hook_threads,
        )
        self.runner = ThreadRunner(name=f"{name}-tool")
        # async def tools and MCP connections; its thread starts with the first use.
        self.tool_loop = ToolLoop(name=f"{name}-tool-aio")
        self._mcp: MCPManager | None = None
        tel, usage = self.telemetry, self.usage_ledger
        self.llm_loop = LlmLoop(name=f"{name}-llm", telemetry=tel, usage=usage)
        # Suggestions and speculation stream on a loop of their own, so the
        # user's main turns never queue behind them (actors.llm.gateway).
        self.llm_background_loop = LlmLoop(name=f"{name}-llm-bg", telemetry=tel, usage=usage)
        self._sessions: dict[str, Session] = {}
        self._session_models: dict[str, tuple[Any, ...]] = {}
        """Each open session's model and fast model: told to forget it when it closes."""
        self._closed = False
        self.overlays = OverlayStore(overlay_root)
        self.overlays_left: tuple[OverlayLeft, ...] = ()
        """Overlays the last close could not remove, each with its reason (normally none)."""
        swept = self.overlays.sweep_dead()  # overlays (and journals) of dead processes
        recovered = self.overlays.recover()  # our own interrupted applies (normally none)
        if swept.removed or swept.recovered or recovered:
            log.info(
                "overlays_swept",
                removed=len(swept.removed),
                recovered=len(swept.recovered) + len(recovered),
            )
        # A roll-forward that left a file alone (the user edited it between
        # the crash and now) is the user's business: they are told below,
        # once the alert sink runs.
        recovery_alerts = [
            Alert(
                level=AlertLevel.WARN,
                source="overlay",
                text=(
                    f"an interrupted accept in {record.workspace} was completed, except for "
                    f"{', '.join(record.skipped)}: changed since, so left as they are"
                ),
            )
            for record in (*swept.recovered, *recovered)
            if record.skipped
        ]
        self.blob_limits = blob_limits or BlobLimits()
        self._owned_blob_dir: Path | None = None
        self.blob_fs: FsBlobStore | None = None
        if blobs:
            if blob_dir is None:
                self._owned_blob_dir = Path(tempfile.mkdtemp(prefix=f"{name}-blobs-"))
                blob_dir = self._owned_blob_dir
            self.blob_fs = FsBlobStore(
                Path(blob_dir),
                max_total_bytes=blob_max_bytes,
                max_age_s=blob_max_age_s,
                grace_s=60.0,
            )
        with self.system.activated():
            self.root: ActorRef[Supervisor] = Supervisor.start(
                "root",
                strategy=Strategy.ONE_FOR_ONE,
                max_restarts=max_restarts,
                period=restart_period,
                registry_name=f"{name}:root",
            )
        # Subscribers and alert history live outside the sink actor, so a
        # restarted sink keeps every session's alert stream.
        self.alert_state = AlertSinkState()
        self.alert_sink = self.start_child(
            ChildSpec(
                id="alert_sink", start=functools.partial(AlertSink.start, state=self.alert_state)
            )
        )
        self.system.alert_sink = self.alert_sink
        for alert in recovery_alerts:
            self.alert_sink.tell(alert)
        self.blob_store: Handle[BlobStoreActor] | None = None
        if self.blob_fs is not None:
            blob_fs = self.blob_fs
            # Retention keeps what stored (not only live) sessions quote.
            referenced = None if self._store is None else self._store.referenced_blobs
            self.blob_store = self.start_child(
                ChildSpec(
                    id="blob_store",
                    start=lambda: BlobStoreActor.start(
                        blob_fs, limits=self.blob_limits, referenced=referenced
                    ),
                )
            )
        self.tool_pool = self.start_child(
            ChildSpec(
                id="tool_pool",
                start=lambda: ToolPool.start(
                    runner=self.runner,
                    aio=self.tool_loop,
                    max_running=max_running_tools,
                    per_session=tools_per_session,
                    telemetry=self.telemetry,
                ),
            )
        )
        self.llm_gateway = self.start_child(
            ChildSpec(
                id="llm_gateway",
                start=lambda: LlmGateway.start(self.llm_loop, background=self.llm_background_loop),
            )
        )
        self.sessions_supervisor = self.start_child(
            ChildSpec(
                id="sessions",
                kind="supervisor",
                shutdown_timeout=60.0,
                start=lambda: Supervisor.start("sessions", max_restarts=1000, period=10.0),
            )
        )
        # Speculation runs only while the runtime has headroom: sampled
        # scheduling waits of the actors and the foreground LLM loop.
        self.speculation_governor = speculation_governor or LoadGovernor()
        self._load_probe = LoadProbe(
            self.speculation_governor,
            self.system,
            loops=(self.llm_loop.call_soon_threadsafe,),
        )
        # GC and GIL settings for a long-running, allocation-heavy host
        # (actors.core.tuning); undone on close.
        if tune_process:
            tuning.tune()
            self._tuned = True

    # -- context manager ----------------------------------------------------

    def __enter__(self) -> Runtime:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- supervision ----------------------------------------------------------

    def start_child(self, spec: ChildSpec, *, timeout: float = 30.0) -> Handle[Any]:
        """Start a child under the root supervisor; returns its stable handle."""
        handle: Handle[Any] = self.root.ask(StartChild(spec=spec), block=True, timeout=timeout)
        return handle

    def child(self, child_id: str, *, timeout: float = 10.0) -> Handle[Any] | None:
        handle: Handle[Any] | None = self.root.ask(
            GetChild(child_id=child_id), block=True, timeout=timeout
        )
        return handle

    def tree(self, *, timeout: float = 10.0) -> TreeSnapshot:
        """A typed snapshot of the whole supervision tree."""
        snapshot: TreeSnapshot = self.root.ask(WhichChildren(), block=True, timeout=timeout)
        return snapshot

    # -- sessions ----------------------------------------------------------------

    def open_session(
        self,
        *,
        workspace: str | os.PathLike[str] | None = None,
        model: ChatModel,
        session_id: str | None = None,
        system_prompt: str | None = None,
        tools: Iterable[Tool[Any] | Callable[..., Any]] = (),
        builtin: bool | Iterable[str] | None = None,
        mcp_servers: Iterable[MCPServer] = (),
        hooks: Hooks | None = None,
        interceptor: Interceptor | None = None,
        model_name: str = "",
        max_turns: int = 50,
        wrap_up: bool = False,
        call_timeout: float = 120.0,
        tool_concurrency: int | None = None,
        max_batch_calls: int = DEFAULT_MAX_BATCH_CALLS,
        max_argument_retries: int = DEFAULT_MAX_ARGUMENT_RETRIES,
        purpose: Purpose = "main",
        file_ref_cap: int = 16_384,
        speculation: SpeculationConfig | None = None,
        fast_model: ChatModel | None = None,
        approval: ApprovalPolicy | ApprovalMode | str | None = None,
        approver: Approver | None = None,
        usage_limits: UsageLimits | None = None,
    ) -> Session:
        """Open a session on ``workspace`` talking to ``model``.

        ``model`` is a :class:`~actors.llm.ScriptedModel`, a
        :class:`~actors.llm.FunctionModel` or an
        :class:`~actors.llm.OpenAICompatible` endpoint configuration.
        ``max_batch_calls`` and ``max_argument_retries`` bound what a model's
        answer can do (see :class:`~actors.worker.worker.WorkerConfig`).
        ``wrap_up`` makes the last LLM call of a run's ``max_turns`` one
        without tools (``tool_choice: "none"``), so a model that would call
        tools forever still answers.

        ``tools`` are :class:`~actors.tools.base.Tool` instances or plain
        functions (made tools as by ``@tool``). ``builtin`` picks the built-in
        file and shell tools: all of them (``True``), none (``False``) or
        those named (``("read_file", "grep")``); by default all of them when
        there is a ``workspace``. ``workspace=None`` opens a session that
        touches no files (no built-ins, no ``@path`` references, no
        speculation). ``mcp_servers`` are MCP server configurations
        (:mod:`actors.tools.mcp`): their tools join the session's; a server
        that does not start is one alert, and the session opens without it.

        ``approval`` holds the tool calls of normal turns to an
        :class:`~actors.worker.approval.ApprovalPolicy` (or just a mode:
        ``"default"``, ``"auto-edit"``, ``"yolo"``, ``"plan"``), asking
        ``approver`` (called on the hook lane; it may wait for a person up to
        the policy's ``timeout_s``) where the mode says to ask. ``approver``
        alone means the ``default`` mode. The mode is also the speculation
        gate's (it replaces ``speculation.approval_mode``). Without either,
        calls run unasked and ``speculation.approval_mode`` gates speculation.

        ``usage_limits`` bound the session's main requests and tokens, all its
        turns together (:class:`~messages.usage.UsageLimits`; a turn's own go
        to ``submit``).

        On a runtime with a store (``Runtime(store=...)``) the session is
        created in the store first (its id, when not given, is the store's
        time-ordered one) and its history is written there turn by turn, so
        :meth:`resume_session` can open it again in another process.
        """
        args = SessionArgs(
            model=model,
            workspace=workspace,
            system_prompt=system_prompt,
            tools=tuple(tools),
            builtin=builtin_argument(builtin),
            mcp_servers=tuple(mcp_servers),
            hooks=hooks,
            interceptor=interceptor,
            model_name=model_name,
            max_turns=max_turns,
            wrap_up=wrap_up,
            call_timeout=call_timeout,
            tool_concurrency=tool_concurrency,
            max_batch_calls=max_batch_calls,
            max_argument_retries=max_argument_retries,
            purpose=purpose,
            file_ref_cap=file_ref_cap,
            speculation=speculation,
            fast_model=fast_model,
            approval=approval,
            approver=approver,
            usage_limits=usage_limits,
        )
        return self._open(args, session_id=session_id)

    # -- the session store (supervision/persist.py, supervision/resume.py) ------------------

    @property
    def store(self) -> SessionStore | None:
        """The session store (``Runtime(store=...)``), or ``None``."""
        return None if self._store is None else self._store.store

    def _stored(self) -> RuntimeStore:
        if self._closed:
            raise RuntimeError("the runtime is closed")
        if self._store is None:
            raise RuntimeError(
                "this runtime has no session store: open it with Runtime(store='sqlite:///"
                "path/sessions.db') or a postgresql:// URL"
            )
        return self._store

    def list_sessions(
        self, *, limit: int = 20, workspace: str | os.PathLike[str] | None = None
    ) -> tuple[SessionSummary, ...]:
        """The stored sessions, most recently updated first (optionally of one workspace)."""
        return self._stored().list_sessions(limit=limit, workspace=workspace)

    def resume_session(
        self,
        session_id: str,
        model: ChatModel | None = None,
        *,
        workspace: str | os.PathLike[str] | None = None,
        system_prompt: str | None = None,
        tools: Iterable[Tool[Any] | Callable[..., Any]] = (),
        builtin: bool | Iterable[str] | None = None,
        mcp_servers: Iterable[MCPServer] = (),
        hooks: Hooks | None = None,
        interceptor: Interceptor | None = None,
        max_turns: int | None = None,
        call_timeout: float | None = None,
        speculation: SpeculationConfig | None = None,
        fast_model: ChatModel | None = None,
        wrap_up: bool | None = None,
        approval: ApprovalPolicy | ApprovalMode | str | None = None,
        approver: Approver | None = None,
        usage_limits: UsageLimits | None = None,
    ) -> Session:
        """Open a stored session again: the same id, its history, ready for the next prompt.

        ``model`` may be left out when the stored settings can rebuild it (an
        OpenAI-compatible endpoint: its base URL and model name; the API key
        comes from the environment); an in-process model (``ScriptedModel``,
        ``FunctionModel``) is passed again. Every other setting is the stored
        one unless given here; tools given as objects, hooks, an interceptor
        and MCP servers live in the process and are passed again (an alert
        names those the session had and the resume did not pass).

        :class:`~actors.store.errors.SessionNotFound` if the store has no such
        session, :class:`~actors.store.errors.SessionLeased` if another live
        process has it open. Pending actions that were waiting are gone (their
        callbacks lived in the old process): an alert lists their labels.
        """
        store = self._stored()
        if session_id in self._sessions:
            raise ValueError(f"session {session_id!r} is already open in this runtime")
        snapshot = store.resume(session_id)
        try:
            record = snapshot.record
            if model is None:
                model = rebuild_model(record.model_settings, session_id)
            overrides: dict[str, Any] = {
                "system_prompt": system_prompt,
                "tools": tuple(tools),
                "builtin": builtin_argument(builtin),
                "mcp_servers": tuple(mcp_servers),
                "hooks": hooks,
                "interceptor": interceptor,
                "max_turns": max_turns,
                "call_timeout": call_timeout,
                "speculation": speculation,
                "fast_model": fast_model,
                "wrap_up": wrap_up,
                "approval": approval,
                "approver": approver,
                "usage_limits": usage_limits,
            }
            place = (
                workspace
                if workspace is not None
                else workspace_of(record.workspace, record.session_config)
            )
            args, notes = stored_args(
                record.session_config, model=model, workspace=place, overrides=overrides
            )
            if snapshot.pending_actions:
                labels = "; ".join(snapshot.pending_actions)
                notes.append(
                    f"{len(snapshot.pending_actions)} staged action(s) were waiting when the "
                    f"session was saved and are gone with that process: {labels}"
                )
            return self._open(args, session_id=session_id, snapshot=snapshot, notes=notes)
        except BaseException:
            store.discard(session_id, delete=False)
            raise

    def _fork(self, session_id: str) -> Session:
        """``session.fork()``: a new session (new id), opened like this one, on its history.

        With a store, the copy is the store's (what is saved: every reported
        turn); without one, the history in memory.
        """
        args = self._session_args.get(session_id)
        source = self._sessions.get(session_id)
        if args is None or source is None:
            raise ValueError(f"session {session_id!r} is not open in this runtime")
        if self._store is None:
            if self._closed:
                raise RuntimeError("the runtime is closed")
            return self._open(args, session_id=None, history=source.history)
        snapshot = self._stored().fork(session_id)
        try:
            return self._open(args, session_id=snapshot.record.session_id, snapshot=snapshot)
        except BaseException:
            self._stored().discard(snapshot.record.session_id, delete=True)
            raise

    def _open(
        self,
        args: SessionArgs,
        *,
        session_id: str | None,
        snapshot: SessionSnapshot | None = None,
        history: Iterable[Any] = (),
        notes: Iterable[str] = (),
    ) -> Session:
        """Start a session's actors: new (on a store: created there first), resumed or forked."""
        if self._closed:
            raise RuntimeError("the runtime is closed")
        if session_id is not None and session_id in self._sessions:
            raise ValueError(f"session {session_id!r} is already open")
        notes = list(notes)
        persistence: Persistence | None = None
        created = False
        if self._store is not None:
            if snapshot is None:
                session_id, persistence, more = self._store.create(args, session_id)
                notes.extend(more)
                created = True
            else:
                persistence = self._store.persistence(snapshot)
                history = snapshot.items
                for alert in snapshot.alerts:  # shown again, never stored twice
                    self.alert_state.keep(alert)
        sid = session_id or uuid.uuid4().hex[:12]
        try:
            session = self._start_session(sid, args, history=list(history), persist=persistence)
        except BaseException:
            if self._store is not None:
                self._store.discard(sid, delete=created)
            raise
        self._session_args[sid] = args
        for text in notes:
            self.alert_sink.tell(
                Alert(level=AlertLevel.WARN, text=text, session=sid, source="store")
            )
        return session

    def _start_session(
        self,
        sid: str,
        args: SessionArgs,
        *,
        history: list[Any],
        persist: Persistence | None,
    ) -> Session:
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
        fast_model, wrap_up = args.fast_model, args.wrap_up
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
        if self.blob_store is not None:
            extra.append(Inspect(self.blob_limits))
        own = [as_tool(item) for item in tools]
        base = [*(t for t in builtin_tools() if t.name in chosen), *extra, *own]
        servers = list(mcp_servers)
        mcp_failures: list[str] = []
        if servers:
            mcp_tools, mcp_failures = self.mcp.session_tools(servers, taken=[t.name for t in base])
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
            gateway=self.llm_gateway,
            tool_pool=self.tool_pool,
            fs=fs,
            tools=registry,
            hooks=hooks,
            interceptor=Interceptors(trusted),
            policy=interceptor,
            preparer=(
                None
                if workspace is None
                else functools.partial(prepare_submit, fs, cap=file_ref_cap)
            ),
            alert_sink=self.alert_sink,
            state=state,
            services=ToolServices(blobs=self.blob_fs, pending_actions=pending),
            hidden_tools=frozenset({"resolve"}),
            blob_store=self.blob_store,
            blob_limits=self.blob_limits,
            model_name=model_name or getattr(model, "name", ""),
            system_prompt=system_prompt,
            purpose=purpose,
            max_turns=max_turns,
            wrap_up=wrap_up,
            call_timeout=call_timeout,
            tool_concurrency=tool_concurrency,
            max_batch_calls=max_batch_calls,
            max_argument_retries=max_argument_retries,
            telemetry=self.telemetry,
            session_usage=session_usage(usage_limits),
            persist=persist,
        )
        supervisor_id = f"session:{sid}"
        # Only a speculation uses it, and a session without a workspace has none.
        workspace_path = fs.root if isinstance(fs, WorkspaceFs) else Path(".")
        session_sup: Handle[SessionSupervisor] = self.sessions_supervisor.ask(
            StartChild(
                spec=ChildSpec(
                    id=supervisor_id,
                    kind="supervisor",
                    restart=RestartType.TEMPORARY,
                    shutdown_timeout=30.0,
                    start=lambda: SessionSupervisor.start(
                        supervisor_id,
                        session_id=sid,
                        worker_config=config,
                        speculation=spec_config,
                        overlays=self.overlays,
                        workspace=workspace_path,
                        fast_model=fast_model,
                        worker_spec=ChildSpec(id="worker", start=lambda: Worker.start(config)),
                        governor=self.speculation_governor,
                    ),
                )
            ),
            timeout=30,
        )
        worker = self._wait_child(session_sup, "worker")
        controller = self._wait_child(session_sup, CONTROLLER)
        session = Session(
            self,
            sid,
            worker=worker,
            hooks=hooks,
            state=state,
            alert_sink=self.alert_sink,
            pending_actions=pending,
            front=controller,
            workspace=fs.root if isinstance(fs, WorkspaceFs) else None,
        )
        self._sessions[sid] = session
        self._session_models[sid] = (model, fast_model)
        if self._store is not None:
            self._store.attach(sid, self.alert_sink)
        for text in mcp_failures:
            self.alert_sink.tell(
                Alert(level=AlertLevel.ERROR, text=text, session=sid, source="mcp")
            )
        return session

    @property
    def usage(self) -> UsageSummary:
        """Every session's model usage and cost so far, by purpose (closed sessions included)."""
        return self.usage_ledger.total()

    @property
    def mcp(self) -> MCPManager:
        """The runtime's MCP connections (created with the first session that names a server)."""
        if self._mcp is None:
            self._mcp = MCPManager(self.tool_loop, alert=self._mcp_alert)
        return self._mcp

    def _mcp_alert(self, level: AlertLevel, text: str) -> None:
        """A runtime-wide alert about a shared MCP server (it serves several sessions)."""
        try:
            self.alert_sink.tell(Alert(level=level, text=text, source="mcp"))
        except Exception as exc:  # the sink is restarting or gone: the log has it
            log.debug("mcp_alert_dropped", text=text, error=repr(exc))

    def _wait_child(self, supervisor: Handle[Any], child_id: str) -> Handle[Any]:
        deadline = time.monotonic() + 30
        while True:
            handle: Handle[Any] | None = supervisor.ask(GetChild(child_id=child_id), timeout=10)
            if handle is not None:
                return handle
            if time.monotonic() > deadline:
                raise RuntimeError(f"{child_id} did not start")
            time.sleep(0.001)

    def session(self, session_id: str) -> Session | None:
        return self._sessions.get(session_id)

    def _session_model_added(self, session_id: str, model: Any) -> None:
        """``Session.set_model``: the new model forgets the session with the others."""
        if session_id in self._session_models:
            self._session_models[session_id] = (*self._session_models[session_id], model)

    def _forget_models(self, session_id: str) -> None:
        """Per-session model state (a script's cursor, ...) dies with the session."""
        seen: set[int] = set()
        for model in self._session_models.pop(session_id, ()):
            forget = getattr(model, "forget", None)
            if model is None or id(model) in seen or not callable(forget):
                continue
            seen.add(id(model))
            try:
                forget(session_id)
            except Exception as exc:  # a model's bookkeeping must not break a close
                log.warning("model_forget_failed", session=session_id, error=repr(exc))

    def _close_session(self, session_id: str, *, timeout: float = 30.0) -> list[OverlayLeft]:
        """Stop a session's actors and wait for its speculations' overlays to be removed.

        Returns the overlays still on disk at ``timeout`` (each with its reason).
        """
        self._sessions.pop(session_id, None)
        if self._closed:
            self._forget_models(session_id)
            self._session_args.pop(session_id, None)
            return []
        deadline = time.monotonic() + timeout
        try:
            self.sessions_supervisor.ask(
                StopChild(child_id=f"session:{session_id}"), timeout=timeout
            )
        except Exception as exc:
            log.warning("session_close_incomplete", session=session_id, error=repr(exc))
        # Its speculators are stopped; their reapers remove the overlays in
        # order (worker stopped, tools and stream cancelled, then the overlay).
        left = self.overlays.wait_removed(session_id, timeout=max(0.0, deadline - time.monotonic()))
        if left:
            log.warning(
                "session_close_overlays_left",
                session=session_id,
                overlays=[str(item) for item in left],
            )
        try:
            self.alert_sink.tell(ForgetSession(session=session_id))
        except Exception as exc:
            log.debug("alert_forget_skipped", session=session_id, error=repr(exc))
        if self.blob_store is not None:
            try:
                self.blob_store.tell(ReleaseSession(session_id=session_id))
            except Exception as exc:  # the store is restarting or gone: nothing is pinned
                log.debug("blob_release_skipped", session=session_id, error=repr(exc))
        self._forget_models(session_id)
        self._session_args.pop(session_id, None)
        if self._store is not None:  # its last append is done; the lease goes
            self._store.detach(session_id, self.alert_sink)
        return left

    def _final_usage(self, session_id: str) -> UsageSummary:
        """A closing session's usage, taken out of the ledger (it keeps only open sessions)."""
        return self.usage_ledger.forget(session_id)

    # -- shutdown ---------------------------------------------------------------

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self, timeout: float = 30.0) -> bool:
        """Orderly shutdown: sessions, their overlays, the rest of the tree, every thread.

        Returns whether everything stopped within ``timeout`` and every overlay
        the runtime created is gone (see the module docs for the order; what
        is left is named in :attr:`overlays_left`).
        """
        if self._closed:
            return True
        for session in list(self._sessions.values()):
            session._closed = True
            session._events.close()
        self._closed = True
        deadline = time.monotonic() + timeout
        clean = True
        self._load_probe.close()
        # 1. The sessions, while what their speculations' reapers use still runs.
        try:
            self.root.ask(
                StopChild(child_id="sessions"), timeout=max(0.1, deadline - time.monotonic())
            )
        except Exception as exc:
            clean = False
            log.warning("runtime_sessions_shutdown_incomplete", error=repr(exc))
        # 2. The reapers finish: every overlay removed, each after its worker
        # stopped and its tool calls and stream were cancelled. Half of what is
        # left at most, so the rest of the shutdown keeps its time.
        self.overlays.wait_removed(timeout=max(0.0, (deadline - time.monotonic()) / 2))
        # 3. The rest of the tree, then every thread.
        try:
            self.root.stop(timeout=max(0.1, deadline - time.monotonic()))
        except Exception as exc:
            clean = False
            log.warning("runtime_tree_shutdown_incomplete", error=repr(exc))
        clean = self.system.shutdown(max(0.5, deadline - time.monotonic())) and clean
        if self._store is not None:  # no append can run any more: every lease goes
            self._store.close()
        clean = self.llm_loop.close(max(0.5, deadline - time.monotonic())) and clean
        clean = self.llm_background_loop.close(max(0.5, deadline - time.monotonic())) and clean
        clean = self.runner.shutdown(max(0.5, deadline - time.monotonic())) and clean
        # async tools and MCP servers (each server's process is stopped here)
        clean = self.tool_loop.close(max(0.5, deadline - time.monotonic())) and clean
        # 4. Nothing runs any more that could write into an overlay: what a
        # reaper did not finish (past its deadline, stopped early, its removal
        # dropped by the shut-down lane) is removed here, or named.
        left = self.overlays.remove_outstanding(timeout=max(0.1, deadline - time.monotonic()))
        self.overlays_left = tuple(left)
        if left:
            clean = False
            log.warning("runtime_overlays_left", overlays=[str(item) for item in left])
        self._sessions.clear()
        self._session_args.clear()
        for session_id in list(self._session_models):
            self._forget_models(session_id)
        if self.blob_fs is not None:
            self.blob_fs.close()  # withdraw the pins it publishes for other processes
        if self._owned_blob_dir is not None:
            shutil.rmtree(self._owned_blob_dir, ignore_errors=True)
        self._drop_empty_overlay_dir()
        if self._tuned:
            tuning.untune()
        return clean

    def _drop_empty_overlay_dir(self) -> None:
        """Remove this process's overlay directory if nothing is left in it.

        Several runtimes of one process share it, so only an empty one goes;
        a later process sweeps a leftover of a dead one.
        """
        process_dir = self.overlays.process_dir
        journal_dir = self.overlays.journal_dir
        try:
            entries = list(process_dir.iterdir()) if process_dir.exists() else []
        except OSError:
            return
        if any(e != journal_dir for e in entries):
            return
        try:
            if journal_dir.exists() and not any(journal_dir.iterdir()):
                journal_dir.rmdir()
            process_dir.rmdir()
        except OSError:
            pass
