"""The runtime's sessions: opening, resuming, forking and closing them.

:class:`RuntimeSessions` is the part of :class:`~supervision.runtime.Runtime`
that keeps its open sessions: ``open_session`` / ``resume_session`` (and a
session's ``fork()``) wire a session (:mod:`supervision.session_wiring`) and
start its supervisor under the runtime's ``sessions`` supervisor, on a store
first when the runtime has one (:mod:`supervision.persist`,
:mod:`supervision.resume`); a session's ``close()`` stops it and waits for
its speculations' overlays. A mixin rather than an object of its own: the
runtime's shared actors, its store and its close order are the Runtime's
(:mod:`supervision.runtime`), and :class:`~supervision.session.Session`
calls back into the runtime (``_fork``, ``_close_session``,
``_session_model_added``, ``_final_usage``).
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from fore.actors.alerts import AlertSink, AlertSinkState
from fore.actors.blobs.actor import BlobStoreActor
from fore.actors.blobs.fs_store import FsBlobStore
from fore.actors.core.logs import get_logger
from fore.actors.llm.gateway import LlmGateway
from fore.actors.llm.models import ChatModel
from fore.actors.overlay.store import OverlayLeft, OverlayStore
from fore.actors.speculation.governor import LoadGovernor
from fore.actors.store import SessionSnapshot, SessionStore, SessionSummary
from fore.actors.telemetry.usage import UsageLedger
from fore.actors.tools.aio import ToolLoop
from fore.actors.tools.base import Tool
from fore.actors.tools.fs import WorkspaceFs
from fore.actors.tools.mcp.config import MCPServer
from fore.actors.tools.mcp.manager import MCPManager
from fore.actors.tools.pool.actor import ToolPool
from fore.actors.tools.selection import builtin_argument
from fore.actors.worker.approval import ApprovalPolicy, Approver
from fore.actors.worker.hooks import Hooks
from fore.actors.worker.interceptor import Interceptor
from fore.actors.worker.persistence import Persistence
from fore.actors.worker.worker import (
    DEFAULT_MAX_ARGUMENT_RETRIES,
    DEFAULT_MAX_BATCH_CALLS,
    Worker,
)
from fore.messages.alerts import Alert, AlertLevel, ForgetSession
from fore.messages.blob_store import ReleaseSession
from fore.messages.blobs import BlobLimits
from fore.messages.gate import ApprovalMode
from fore.messages.llm import Purpose
from fore.messages.runtime import ChildSpec, GetChild, RestartType, StartChild, StopChild
from fore.messages.speculation import SpeculationConfig
from fore.messages.usage import UsageLimits, UsageSummary
from fore.supervision.handle import Handle
from fore.supervision.persist import RuntimeStore
from fore.supervision.resume import (
    SessionArgs,
    check_labels,
    rebuild_model,
    stored_args,
    workspace_of,
)
from fore.supervision.session import Session
from fore.supervision.session_supervisor import CONTROLLER, SessionSupervisor
from fore.supervision.session_wiring import wire_session
from fore.supervision.supervisor import Supervisor

if TYPE_CHECKING:  # tracing for typing only: it imports opentelemetry, an optional extra
    from fore.actors.telemetry.tracing import Instrumentation
    from fore.supervision.runtime import Runtime

# The runtime's own log: these are its events (supervision.runtime logs the rest).
log = get_logger("fore.supervision.runtime")


class RuntimeSessions:
    """The open sessions of a :class:`~supervision.runtime.Runtime` (see the module docs)."""

    # The Runtime's state this part uses (Runtime.__init__ sets every one).
    _store: RuntimeStore | None
    _closed: bool
    _sessions: dict[str, Session]
    _session_models: dict[str, tuple[Any, ...]]
    _session_args: dict[str, SessionArgs]
    _mcp: MCPManager | None
    tool_loop: ToolLoop
    alert_state: AlertSinkState
    alert_sink: Handle[AlertSink]
    blob_fs: FsBlobStore | None
    blob_store: Handle[BlobStoreActor] | None
    blob_limits: BlobLimits
    tool_pool: Handle[ToolPool]
    llm_gateway: Handle[LlmGateway]
    sessions_supervisor: Handle[Supervisor]
    overlays: OverlayStore
    speculation_governor: LoadGovernor
    telemetry: Instrumentation | None
    usage_ledger: UsageLedger

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
        labels: Mapping[str, str] | None = None,
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

        ``labels`` are the application's own facts about the session (strings
        to strings: who opened it, which machine has its workspace ...). They
        are stored with it, read back from the store's record, and copied by a
        fork; Fore itself does not read them.

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
            labels=check_labels(labels),
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
        wired = wire_session(
            sid,
            args,
            history=history,
            persist=persist,
            gateway=self.llm_gateway,
            tool_pool=self.tool_pool,
            alert_sink=self.alert_sink,
            blob_fs=self.blob_fs,
            blob_store=self.blob_store,
            blob_limits=self.blob_limits,
            telemetry=self.telemetry,
            mcp=lambda: self.mcp,
        )
        config, spec_config, fs = wired.config, wired.speculation, wired.fs
        model, fast_model = args.model, args.fast_model
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
            cast("Runtime", self),  # this part is only ever a Runtime's
            sid,
            worker=worker,
            hooks=wired.hooks,
            state=wired.state,
            alert_sink=self.alert_sink,
            pending_actions=wired.pending,
            front=controller,
            workspace=fs.root if isinstance(fs, WorkspaceFs) else None,
        )
        self._sessions[sid] = session
        self._session_models[sid] = (model, fast_model)
        if self._store is not None:
            self._store.attach(sid, self.alert_sink)
        for text in wired.mcp_failures:
            self.alert_sink.tell(
                Alert(level=AlertLevel.ERROR, text=text, session=sid, source="mcp")
            )
        return session

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
        # Its controller let its speculations go: each overlay is removed once
        # its worker stopped and its tool calls and stream were cancelled.
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
