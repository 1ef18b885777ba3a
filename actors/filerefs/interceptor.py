"""Deprecated: the file-reference interceptor, now a neutral placeholder.

Resolved ``@path`` files used to wait in a per-submit stash that this
interceptor drained back into the worker (``ContinueWith``). The worker's
submit phase now puts ``PreparedInput.items`` into history itself, right after
the user message, so there is nothing left to drain: this class answers
neutrally everywhere. It stays only because the Runtime's wiring and the
speculation gate (``supervision/runtime.py``, ``actors/speculation/gate.py``)
still name it; delete it, and its line in tests/project/layer_allowlist.txt,
once they no longer do.
"""

from __future__ import annotations

from fore.actors.worker.interceptor import Interceptor


class FileRefInterceptor(Interceptor):
    """Neutral at every decision point (see the module docs)."""

    def __init__(self, state: object = None) -> None:
        del state  # the stash it drained is gone
