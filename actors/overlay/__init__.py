"""The copy-on-write overlay a speculation writes into, and its apply.

* :class:`OverlayFs` -- the :class:`~actors.tools.fs.FsView` a speculation's
  tools run on (copy on first write, whiteouts, union listings);
* :func:`apply_overlay` / :func:`recover` -- the all-or-nothing, journaled,
  conflict-checked accept, and crash recovery;
* :class:`OverlayStore` / :func:`sweep_dead` -- where overlays live and how
  dead processes' overlays are cleaned up.

A speculation's overlay is owned by its session's speculation controller,
which applies it (on the blocking lane) and removes it, never both at once
(:mod:`actors.speculation.teardown`).
"""

from fore.actors.overlay.apply import OverlayApplyFailed, apply_overlay, recover
from fore.actors.overlay.fs import (
    DEFAULT_MAX_BYTES,
    OverlayClosed,
    OverlayFs,
    OverlayFull,
    PlannedEntry,
)
from fore.actors.overlay.store import (
    OverlayStore,
    OverlayStoreError,
    default_root,
    process_marker,
    sweep_dead,
)
from fore.actors.overlay.transaction import FaultHook

__all__ = [
    "DEFAULT_MAX_BYTES",
    "FaultHook",
    "OverlayApplyFailed",
    "OverlayClosed",
    "OverlayFs",
    "OverlayFull",
    "OverlayStore",
    "OverlayStoreError",
    "PlannedEntry",
    "apply_overlay",
    "default_root",
    "process_marker",
    "recover",
    "sweep_dead",
]
