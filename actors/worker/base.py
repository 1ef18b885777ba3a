"""The worker's shared core: its state, and what every phase uses.

The worker is one actor (one mailbox, one owner of the run's state), but its
code is one module per phase (:mod:`~actors.worker.submit`,
:mod:`~actors.worker.llm_turn`, :mod:`~actors.worker.tools_phase`,
:mod:`~actors.worker.outputs`, :mod:`~actors.worker.turn_end`,
:mod:`~actors.worker.ending`, :mod:`~actors.worker.chain_driver`), each a
mixin over :class:`WorkerBase`, composed into
:class:`~actors.worker.worker.Worker`. Mixins rather than phase objects
because the phases hand the run to one another dozens of times per turn
(``_llm_turn`` -> ``_start_tools`` -> ``_post_tools`` -> ``_llm_turn``): as
methods of one actor those hand-offs stay plain calls on the dispatcher
thread, with no extra object or indirection on the hot path, and each phase
still reads as one concept in one file.

:class:`WorkerBase` holds the actor's state (``__init__``), the helpers every
phase uses (``_emit``, ``alert``, ``_append``) and, for the type checker only,
the signatures of the methods one phase calls in another, so ``mypy --strict``
checks every hand-off.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from pykka import ActorDeadError

from fore.actors.core.future import PooledFuture
from fore.actors.core.pooled import ForeActor
from fore.actors.worker.config import WorkerConfig
from fore.actors.worker.hooks import (
    DEFAULT_MAX_IN_FLIGHT,
    DEFAULT_START_TIMEOUT,
    ChainState,
    HookError,
    HookEvent,
    HookSpec,
    LlmRequestContext,
)
from fore.actors.worker.persistence import TurnWriter
from fore.actors.worker.run import Call, ChainRun, Run, blob_texts
from fore.messages.alerts import Alert, AlertLevel
from fore.messages.blob_store import ReferenceBlobs
from fore.messages.conversation import AssistantMessage, Item, ToolCall
from fore.messages.session import (
    AlertRaised,
    ErrorKind,
    HookFailure,
    ItemAdded,
    RunStatus,
    Submit,
    TurnResult,
)


class WorkerBase(ForeActor):
    """The worker's state and shared helpers (see module docs)."""

    def __init__(self, config: WorkerConfig) -> None:
        super().__init__()
        self.config = config
        self.session_id = config.session_id
        self.state = config.state
        self._run: Run | None = None
        self._chain_run: ChainRun | None = None
        self._chain_token: object | None = None
        self._continuations: deque[tuple[Callable[..., Any], tuple[Any, ...]]] = deque()
        self._draining = False
        self._writer = None if config.persist is None else TurnWriter(self, config.persist)
        self._held: list[tuple[Any, PooledFuture[Any] | None]] | None = None
        """Messages that arrived while a restarted worker reloads from the store."""
        self._stopping = False

    def _hooks_config(self) -> tuple[float, float, int]:
        """``(default_timeout, start_timeout, max_in_flight)`` of the session's hooks."""
        hooks = self.config.hooks
        return (
            hooks.default_timeout,
            getattr(hooks, "start_timeout", DEFAULT_START_TIMEOUT),
            getattr(hooks, "max_in_flight", DEFAULT_MAX_IN_FLIGHT),
        )

    def _emit(self, event: Any) -> None:
        self.state.subscribers.emit(event)

    def alert(self, level: AlertLevel, text: str, source: str) -> Alert:
        alert = Alert(level=level, text=text, session=self.config.session_id, source=source)
        self.state.alerts.append(alert)
        sink = self.config.alert_sink
        if sink is not None:
            try:
                sink.tell(alert)  # subscribers (the session's event stream) get it from there
                return alert
            except ActorDeadError:
                pass
        self._emit(AlertRaised(session_id=self.config.session_id, alert=alert))
        return alert

    def _append(self, run: Run | None, item: Item, *, pinned: bool = False) -> None:
        """Append ``item`` to history; pin the blobs its text references (unless ``pinned``).

        Retention never removes a blob a live session references: a tool
        output converted by the blob store is pinned by the store itself;
        anything else that quotes ``[blob:<id>]`` -- a user submit, a model
        answer, an inline tool output, items a hook or a speculation added --
        is pinned here with a :class:`ReferenceBlobs` (a tell; the store scans
        the text off its dispatcher thread).
        """
        self.state.history.append(item)
        if not pinned:
            self._reference_blobs(item)
        self._emit(
            ItemAdded(session_id=self.config.session_id, run_id=run and run.run_id, item=item)
        )

    def _reference_blobs(self, item: Item) -> None:
        store = self.config.blob_store
        if store is None:
            return
        texts = blob_texts(item)
        if not texts:
            return
        try:
            store.tell(ReferenceBlobs(session_id=self.config.session_id, texts=texts))
        except ActorDeadError:
            self.log.warning("blob_reference_not_sent", reason="the blob store is gone")

    if TYPE_CHECKING:
        # The hand-offs between phases: implemented in the phase modules.

        def _abort_calls(self, run: Run, status: RunStatus, reason: str) -> None:
            raise NotImplementedError

        def _abort_detached(self, run: Run, status: RunStatus, reason: str) -> None:
            raise NotImplementedError

        def _answer_unstarted(self, run: Run, status: RunStatus, reason: str) -> None:
            raise NotImplementedError

        def _begin(self, run: Run, message: Submit) -> None:
            raise NotImplementedError

        def _cancel_inflight(self, run: Run, reason: str) -> None:
            raise NotImplementedError

        def _cancel_run(self, run: Run, reason: str) -> None:
            raise NotImplementedError

        def _chain(
            self,
            run: Run,
            event: HookEvent,
            ctx: Any,
            done: Callable[[ChainState], None],
            *,
            start: int = 0,
            abort_chain: bool = False,
            specs: tuple[HookSpec, ...] | None = None,
            give_errors: bool = False,
        ) -> None:
            raise NotImplementedError

        def _close_call(self, item: Call, text: str) -> None:
            raise NotImplementedError

        def _close_open_calls(self, run: Run, text: str, withheld: str | None = None) -> None:
            raise NotImplementedError

        def _complete(self, run: Run, status: RunStatus, error: str | None) -> None:
            raise NotImplementedError

        def _fail(
            self,
            run: Run,
            error: str,
            *,
            kind: ErrorKind = "worker",
            failure: HookFailure | None = None,
        ) -> None:
            raise NotImplementedError

        def _finish(self, run: Run, status: RunStatus, error: str | None, *, abort: bool) -> None:
            raise NotImplementedError

        def _flush_pending_messages(self, run: Run) -> None:
            raise NotImplementedError

        def _hook_failed(self, run: Run, error: HookError) -> None:
            raise NotImplementedError

        def _interrupt(self, run: Run, successor: tuple[Run, Submit]) -> None:
            raise NotImplementedError

        def _llm_turn(self, run: Run, retry: LlmRequestContext | None = None) -> None:
            raise NotImplementedError

        def _observe(self, run: Run, message: Submit | None) -> None:
            raise NotImplementedError

        def _pause(
            self, run: Run, reason: str, where: str, point: tuple[Any, ...], *, saved: bool = False
        ) -> None:
            raise NotImplementedError

        def _plan_calls(
            self, run: Run, assistant: AssistantMessage, only: Sequence[ToolCall] | None = None
        ) -> None:
            raise NotImplementedError

        def _post_tools(self, run: Run) -> None:
            raise NotImplementedError

        def _pre_tools(self, run: Run, resume_from: int | None) -> None:
            raise NotImplementedError

        def _result(self, run: Run, status: RunStatus, error: str | None) -> TurnResult:
            raise NotImplementedError

        def _save_then(self, run: Run | None, then: Callable[[str | None], None]) -> bool:
            raise NotImplementedError

        def _start_tools(self, run: Run, assistant: AssistantMessage) -> None:
            raise NotImplementedError

        def _store_failed(self, problem: str, what: str) -> str:
            raise NotImplementedError

        def _submit_cancelled(self) -> None:
            raise NotImplementedError

        def _truncated(self, output: str, reason: str) -> str:
            raise NotImplementedError

        def _turn_end(self, run: Run, assistant: AssistantMessage) -> None:
            raise NotImplementedError
