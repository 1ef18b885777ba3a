"""What a worker is built with: :class:`WorkerConfig` and its defaults.

Built by the Runtime for each session (and by the speculation controller for
a speculation's worker); the worker's phases read it, ``SetModel`` and
``AddTool`` change it between runs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from fore.actors.filerefs.prepare import PreparedInput
from fore.actors.telemetry.limits import SessionUsage
from fore.actors.tools.base import ToolRegistry, ToolServices
from fore.actors.worker.hooks import Hooks
from fore.actors.worker.interceptor import Interceptor
from fore.actors.worker.persistence import Persistence
from fore.actors.worker.state import SessionState
from fore.messages.address import Address, Recipient
from fore.messages.alerts import Alert
from fore.messages.blob_store import ReferenceBlobs, StoreToolOutput
from fore.messages.blobs import BlobLimits
from fore.messages.llm import LlmRequest, Purpose
from fore.messages.session import Submit
from fore.messages.tools import CancelToolCalls, RunToolBatch

if TYPE_CHECKING:
    # Annotations only (never evaluated: ``from __future__ import annotations``).
    from fore.actors.telemetry.tracing import Instrumentation
    from fore.actors.tools.fs import FsView


class WorkerModel(Protocol):
    """What the worker needs of its model: only its name.

    The worker hands the model to the gateway inside each ``LlmRequest``
    (which calls it as an :class:`~actors.llm.chat_model.ChatModel`); it
    reads nothing of it but the name a ``SetModel`` without one falls back
    to. Read-only, so a wrapper that exposes ``name`` as a property (the
    speculation's ``MeteredModel``) fits too.
    """

    @property
    def name(self) -> str: ...


DEFAULT_MAX_BATCH_CALLS = 128
"""Tool calls of one answer that may run (``WorkerConfig.max_batch_calls``)."""


DEFAULT_MAX_ARGUMENT_RETRIES = 3
"""Answers with unusable tool arguments a run hands back to the model
(``WorkerConfig.max_argument_retries``)."""


@dataclass
class WorkerConfig:
    """Everything a worker needs; built by the Runtime for each session."""

    session_id: str
    model: WorkerModel
    """The model provider its LLM requests name (``SetModel`` switches it between runs)."""
    gateway: Recipient[LlmRequest]
    """The LLM gateway: requests go there, their stream events come back as messages."""
    tool_pool: Recipient[RunToolBatch | CancelToolCalls]
    """The shared tool pool: batches go there, their results come back as messages."""
    fs: FsView
    """The view of the workspace the session's tool calls run against."""
    tools: ToolRegistry
    hooks: Hooks = field(default_factory=Hooks)
    interceptor: Interceptor = field(default_factory=Interceptor)
    """The trusted chain the worker runs: Fore's machinery (structured output, the
    ``resolve`` queue), then :attr:`policy`."""
    policy: Interceptor | None = None
    """The session's own interceptor (``open_session(interceptor=...)``), kept apart from
    the machinery: a speculation's gate takes this one alone, never picking the chain apart."""
    state: SessionState = field(default_factory=SessionState)
    services: ToolServices = field(default_factory=ToolServices)
    model_name: str = ""
    system_prompt: str | None = None
    purpose: Purpose = "main"
    max_turns: int = 50
    call_timeout: float = 120.0
    tool_concurrency: int | None = None
    hidden_tools: frozenset[str] = frozenset()
    strict_tool_hooks: bool = False
    """Any pre_tool_call result but Continue is a boundary (speculation)."""
    preparer: Callable[[Submit], PreparedInput] | None = None
    """Turns a submit into the user message (e.g. resolving ``@path`` references)."""
    blob_store: Address[StoreToolOutput | ReferenceBlobs] | None = None
    """The blob-store actor: large outputs are stored there and summarised in history."""
    blob_limits: BlobLimits = field(default_factory=BlobLimits)
    alert_sink: Recipient[Alert] | None = None
    """Where the worker's alerts go (the session's event stream gets them from there);
    ``None``: straight to the subscribers as ``AlertRaised``."""
    stream: bool = True
    """Ask the model for a streamed answer (text shown as it arrives). A speculation's
    worker follows ``SpeculationConfig.stream_forks`` (on by default, so that an abort
    closes the stream and the server stops generating)."""
    max_batch_calls: int = DEFAULT_MAX_BATCH_CALLS
    """Tool calls of one answer that may run; each call past it gets an error result
    saying so (it is not run, not shown to hooks). A model is not trusted to stay
    reasonable: this bounds what one answer can set in motion."""
    max_argument_retries: int = DEFAULT_MAX_ARGUMENT_RETRIES
    """How many answers with tool arguments that are not a JSON object
    (``ToolCall.arguments_error``) a run hands back to the model as error results,
    so it can correct itself; the next one ends the run as an LLM protocol error.
    ``0``: the first one does."""
    wrap_up: bool = False
    """Make the last LLM call the run's budget allows with ``tool_choice: "none"``.

    A model that keeps calling tools (small local models in llama.cpp's
    function-calling mode do) otherwise ends every run at ``max_turns`` with
    no answer; with ``wrap_up`` its last call must answer from what the tools
    returned -- LangChain's ``early_stopping_method="generate"``. A hook or
    interceptor that sets its own ``tool_choice`` still wins."""
    # -- telemetry (issue 28) --
    telemetry: Instrumentation | None = None
    """The runtime's :class:`~actors.telemetry.tracing.Instrumentation` (``None``: off)."""
    session_usage: SessionUsage | None = None
    """The session's usage limits and its main requests so far (kept across restarts)."""
    persist: Persistence | None = None
    """The session's write-ahead to its session store (:mod:`actors.worker.persistence`);
    ``None``: history lives in memory only (no store, or a speculation's worker)."""

    def __post_init__(self) -> None:
        if self.max_batch_calls < 1:
            raise ValueError("max_batch_calls must be at least 1")
        if self.max_argument_retries < 0:
            raise ValueError("max_argument_retries must not be negative")
