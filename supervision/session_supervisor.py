"""The session supervisor: a session's worker and its speculation controller, supervised.

It only supervises (one_for_one, at most 5 restarts in 30 s). Its two
children are both permanent, started in this order::

    session:<id>   SessionSupervisor
    ├── worker       Worker                  the session's agent loop
    └── speculation  SpeculationController   the session's front door

The worker starts first, so the controller is handed the worker's
:class:`~supervision.handle.Handle` (stable across the worker's restarts) and
subscribes to its events. Everything about suggestions, speculations, accepts
and status events is the controller's (see
:mod:`actors.speculation.controller`); what must outlive a restart of the
controller -- the speculation config as last set, the hook gate its
speculations share, the session's subscribers and the status last sent -- is a
:class:`~actors.speculation.controller.SpeculationBook` kept here and handed to
every incarnation, in the manner of the alert sink's state.

On close the controller stops first (reverse start order): it stops its
speculations' workers, leaves each overlay's removal to the settling of its
run's work (under a deadline), and fails held submits; then the worker stops.
A Tab's apply still running completes and its items go to the worker, or --
the worker gone by then -- to the session's store, so closing waits for them
(the overlay is removed only after). After a crash of the controller, held
submits go to the worker instead (after the items of an apply still running).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fore.actors.overlay.store import OverlayStore
from fore.actors.speculation.controller import SpeculationBook, SpeculationController
from fore.actors.speculation.governor import LoadGovernor
from fore.actors.worker.worker import WorkerConfig
from fore.messages.runtime import ChildSpec
from fore.messages.speculation import SpeculationConfig
from fore.supervision.supervisor import Supervisor

CONTROLLER = "speculation"
"""The controller's child id (``Session`` talks to it; the worker's is ``worker``)."""


class SessionSupervisor(Supervisor):
    """Supervises a session's worker and its speculation controller (see module docs)."""

    def __init__(
        self,
        sup_id: str,
        *,
        session_id: str,
        worker_config: WorkerConfig,
        speculation: SpeculationConfig,
        overlays: OverlayStore,
        workspace: Path,
        fast_model: Any = None,
        worker_spec: ChildSpec,
        governor: LoadGovernor | None = None,
    ) -> None:
        super().__init__(
            sup_id,
            session_id=session_id,
            max_restarts=5,
            period=30.0,
            children=[worker_spec],
        )
        self.book = SpeculationBook(session_id=session_id or "", config=speculation)
        """The session state that survives a restart of the controller."""
        worker = self._children[worker_spec.id].handle

        def start_controller() -> Any:
            return SpeculationController.start(
                name=sup_id,
                session_id=session_id,
                worker=worker,
                worker_config=worker_config,
                overlays=overlays,
                workspace=workspace,
                book=self.book,
                fast_model=fast_model,
                governor=governor,
            )

        self._add(ChildSpec(id=CONTROLLER, shutdown_timeout=15.0, start=start_controller))
