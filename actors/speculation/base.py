"""The speculation controller's state, and the helpers every part of it shares.

:class:`~actors.speculation.controller.SpeculationController` is one actor
built from parts, one module per concept, each a mixin over this base:
the front door (:mod:`.front_door`), suggestions (:mod:`.suggestions`), a
speculation's run (:mod:`.lifecycle`), its teardown (:mod:`.teardown`) and
the accept protocol (:mod:`.accept`). The state they share is created here,
in one ``__init__``; the methods one part calls in another are declared at
the end (for the type checker only) and defined in their own module.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from fore.actors.alerts import send_alert
from fore.actors.core.future import PooledFuture
from fore.actors.core.pooled import ForeActor
from fore.actors.core.subscribers import Subscribers
from fore.actors.core.timer import TimerHandle
from fore.actors.overlay.store import OverlayStore
from fore.actors.speculation.governor import LoadGovernor
from fore.actors.speculation.states import (
    TERMINAL,
    Continuation,
    Speculation,
    Teardown,
    accepting,
    offered,
)
from fore.actors.speculation.status import AbortTimings, StatusEvents, finished_event
from fore.actors.tools.base import ToolRegistry
from fore.actors.worker.hookrun import HookGate
from fore.actors.worker.worker import WorkerConfig
from fore.messages.alerts import AlertLevel
from fore.messages.llm import LlmRequest
from fore.messages.session import Submit
from fore.messages.speculation import (
    ForkSnapshot,
    SpeculationConfig,
    SpeculationOutcome,
    SpeculationResult,
    SpeculationStatus,
    Suggestion,
)

if TYPE_CHECKING:
    from fore.messages.speculation import SuggestionSource

__all__ = ["ControllerBase", "SpeculationBook", "SuggestionRequest"]


@dataclass(frozen=True)
class SuggestionRequest:
    """A suggestion request in flight, the epoch it belongs to, and its snapshot."""

    request: LlmRequest
    """Cancelled through its own scope (``request.scope``) when the epoch moves."""
    epoch: int
    snapshot: ForkSnapshot

    @property
    def request_id(self) -> str:
        return self.request.request_id


@dataclass(eq=False)
class SpeculationBook:
    """What a session keeps across a restart of its controller (owned by its supervisor).

    The session's speculation config (as last changed), the hook gate its
    speculations share, the session's subscribers (``Session`` subscribes
    once, when it opens), each with the event kinds it reads, and the status
    events' memory of what was last sent, so a restarted controller goes on
    emitting to the same front ends without repeating itself and speculating
    as the user last asked. Like the alert sink's state: built by
    the supervisor, handed to every incarnation.
    """

    session_id: str
    config: SpeculationConfig = field(default_factory=SpeculationConfig)
    """The session's speculation config as the user last set it (``SetApprovalMode``
    narrows it): a restarted controller speculates under it, not the opening one."""
    hook_gate: HookGate = field(default_factory=HookGate)
    """The session's speculations' admission to the hook lane, shared by all of them (apart
    from the main worker's): their abandoned hooks count against one cap, across restarts."""
    subscribers: Subscribers = field(default_factory=Subscribers)
    status_events: StatusEvents | None = None

    def emit(self, event: Any) -> None:
        """Tell every subscriber of the event's kind; one that is gone is dropped."""
        self.subscribers.emit(event)

    def __post_init__(self) -> None:
        if self.status_events is None:
            self.status_events = StatusEvents(self.session_id, self.emit)


class ControllerBase(ForeActor):
    """The controller's shared state and helpers (see the module docs)."""

    stop_timeout: ClassVar[float] = 10.0
    """Seconds a speculation's worker has to stop before it is killed."""
    settle_timeout: ClassVar[float] = 10.0
    """Seconds its LLM stream and tool calls have to confirm they stopped (then logged)."""
    remove_timeout: ClassVar[float] = 30.0
    """Seconds its overlay's removal waits for writes still in flight."""
    close_stop_timeout: ClassVar[float] = 15.0
    """Seconds a speculation's worker has to stop when the session closes before it is killed."""

    def __init__(
        self,
        *,
        name: str,
        session_id: str,
        worker: Any,
        worker_config: WorkerConfig,
        overlays: OverlayStore,
        workspace: Path,
        book: SpeculationBook,
        fast_model: Any = None,
        governor: LoadGovernor | None = None,
    ) -> None:
        super().__init__()
        self.name = name
        """The session supervisor's id: alerts name it, as they did when this was the supervisor."""
        self.session_id = session_id
        self.worker_config = worker_config
        self.overlays = overlays
        self.workspace = workspace
        self.fast_model = fast_model
        self.governor = governor
        """Runtime-wide admission control: speculate only with headroom (None: always)."""
        self.book = book
        self._worker = worker
        self._tools: ToolRegistry = worker_config.tools
        """The session's tools as this controller last forwarded them (speculations run these)."""
        # -- versions (see the controller's module docs) --------------------------------
        self._fork: ForkSnapshot | None = None
        self._fork_gen = 0
        self._config_gen = 0
        self._epoch = 0
        # -- the suggestion on offer -------------------------------------------------------
        self._suggestion: Suggestion | None = None
        self._shown = False
        self._show_timer: TimerHandle | None = None
        self._suggestion_request: SuggestionRequest | None = None
        # -- speculations: the only records of them ----------------------------------------
        self._specs: dict[str, Speculation] = {}
        self._status_spec: Speculation | None = None
        self._last_status = SpeculationStatus()
        # -- accepts -----------------------------------------------------------------------
        self._continuations: dict[str, Continuation] = {}
        """Run id -> the Tab waiting for that continuation's end (a boundary accept)."""
        self._last_accept = float("-inf")
        self._held: list[tuple[Submit, PooledFuture[Any] | None]] = []
        """Submits held for an accept in its critical section (they reach the worker after it)."""
        self._closing = False
        """Set when this actor stops: its speculations are let go, aborts report at once."""

    @property
    def spec_config(self) -> SpeculationConfig:
        """The session's speculation config (kept in the book: it outlives this actor)."""
        return self.book.config

    @spec_config.setter
    def spec_config(self, config: SpeculationConfig) -> None:
        self.book.config = config

    # -- queries over the records ---------------------------------------------------------

    @property
    def _current(self) -> Speculation | None:
        """The speculation behind the current suggestion (typing aborts it), if any."""
        return offered(self._specs.values())

    @property
    def _accepting(self) -> Speculation | None:
        """The speculation whose accept has not yet handed its items to the worker."""
        return accepting(self._specs.values())

    @property
    def _subscribers(self) -> Subscribers:
        return self.book.subscribers

    # -- shared helpers ---------------------------------------------------------------------

    def _emit(self, event: Any) -> None:
        self.book.emit(event)

    def _alert(self, level: AlertLevel, text: str) -> None:
        # Worded as the session supervisor's own alerts were (prefix and source).
        send_alert(
            self.system.alert_sink,
            level,
            f"{self.name}: {text}",
            session=self.session_id,
            source="supervisor",
        )

    def _release_slot(self, spec: Speculation) -> None:
        """Its run is over (done, aborted or gone): the governor's slot is free."""
        if spec.holds_slot and self.governor is not None:
            spec.holds_slot = False
            self.governor.release()

    def _forget(self, spec: Speculation) -> None:
        """Drop a speculation that has nothing left to report, deliver or tear down.

        Its pipelined suggestion may still be on the way after its worker and
        overlay are long gone (Tab came first): it is kept until that ends.
        """
        if (
            spec.teardown is Teardown.REMOVED
            and spec.phase in TERMINAL
            and spec.pipelined_request is None
        ):
            self._specs.pop(spec.id, None)

    def _report(
        self,
        spec: Speculation,
        outcome: SpeculationOutcome,
        *,
        result: SpeculationResult | None = None,
        reason: str | None = None,
        abort: AbortTimings | None = None,
        tokens: tuple[int, int] | None = None,
    ) -> None:
        """Emit the speculation's one :func:`~actors.speculation.status.finished_event`
        (once: a second report is dropped), end its span and log it."""
        if spec.reported:
            return
        spec.reported = True
        event = finished_event(
            self.session_id or "",
            spec,
            outcome,
            result=result or spec.result,
            reason=reason,
            abort=abort,
            tokens=tokens,
        )
        if spec.span is not None:
            spec.span.end(event)
        self.log.info(
            "speculation_finished",
            speculation=spec.id,
            outcome=outcome,
            turns=event.turns,
            tool_calls=event.tool_calls,
            files_written=event.files_written,
            tokens=event.tokens,
            duration_s=round(event.duration_s, 4),
            boundary_tool=event.boundary_tool,
            reason=reason,
        )
        self._emit(event)

    if TYPE_CHECKING:  # defined by the parts (see the module docs)

        def _invalidate(self, reason: str, at: float | None = None) -> None:
            raise NotImplementedError

        def _stale_reason(self, snapshot: ForkSnapshot, config_gen: int) -> str | None:
            raise NotImplementedError

        def _abort(
            self, spec: Speculation, reason: str, *, stale: bool = False, at: float | None = None
        ) -> None:
            raise NotImplementedError

        def _stop_worker(self, spec: Speculation) -> None:
            raise NotImplementedError

        def _start_speculation(self, suggestion: Suggestion, snapshot: ForkSnapshot) -> None:
            raise NotImplementedError

        def _continue_accept(self, spec: Speculation) -> None:
            raise NotImplementedError

        def _report_abort(self, spec: Speculation) -> None:
            raise NotImplementedError

        def _set_suggestion(
            self,
            text: str,
            source: SuggestionSource,
            snapshot: ForkSnapshot,
            *,
            show_now: bool = False,
        ) -> None:
            raise NotImplementedError

        def _ask_pipelined(self, spec: Speculation) -> None:
            raise NotImplementedError

        def _cancel_pipelined(self, spec: Speculation, reason: str) -> None:
            raise NotImplementedError

        def _fork_model(self) -> tuple[Any, str]:
            raise NotImplementedError

        def _take_reply(self) -> PooledFuture[Any] | None:
            raise NotImplementedError

        def _forward(self, message: Any, reply: PooledFuture[Any] | None) -> None:
            raise NotImplementedError

        def _relay_to_worker(
            self, message: Any, reply: PooledFuture[Any] | None, *, timeout: float
        ) -> None:
            raise NotImplementedError
