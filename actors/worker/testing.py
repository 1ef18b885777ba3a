"""Test utilities for hooks, importable by users: a recording hook and a scripted hook.

``RecordingHook`` remembers a snapshot of every input it sees (and returns a
fixed result); ``ScriptedHook`` returns a scripted sequence of results. Both
are thread-safe, since the worker calls hooks on blocking-lane threads.

A snapshot copies the input's *data* (text, arguments, messages, results)
deeply, so later edits by other hooks do not show in it, but never the objects
an input only refers to: ``tool`` (the live tool object, which may hold a lock
or a connection -- the seed's ``Arc<Mutex<..>>`` state access) and ``meta``
(frozen) are kept as they are.
"""

from __future__ import annotations

import copy
import dataclasses
import threading
from collections.abc import Iterable
from typing import Any

SHARED_FIELDS = frozenset({"tool", "meta"})
"""Input fields a snapshot shares instead of copying (not data; possibly not copyable)."""


def snapshot(ctx: Any) -> Any:
    """A copy of a hook input: data fields deep-copied, :data:`SHARED_FIELDS` shared.

    A data field that cannot be deep-copied is kept by reference rather than
    making the recording hook itself fail.
    """
    if not dataclasses.is_dataclass(ctx) or isinstance(ctx, type):
        try:
            return copy.deepcopy(ctx)
        except Exception:
            return copy.copy(ctx)
    values: dict[str, Any] = {}
    for f in dataclasses.fields(ctx):
        value = getattr(ctx, f.name)
        if f.name in SHARED_FIELDS:
            values[f.name] = value
            continue
        try:
            values[f.name] = copy.deepcopy(value)
        except Exception:
            values[f.name] = value
    clone = copy.copy(ctx)  # same class; fields are then replaced below
    for name, value in values.items():
        object.__setattr__(clone, name, value)  # read-only identity fields included
    return clone


class RecordingHook:
    """Records a :func:`snapshot` of each input; returns ``result`` or ``result(ctx)``."""

    def __init__(self, result: Any = None, *, name: str = "recording") -> None:
        self.result = result
        self.__name__ = name
        self.calls: list[Any] = []
        self._lock = threading.Lock()

    def __call__(self, ctx: Any) -> Any:
        with self._lock:
            self.calls.append(snapshot(ctx))
        return self.result(ctx) if callable(self.result) else self.result

    @property
    def count(self) -> int:
        with self._lock:
            return len(self.calls)


class ScriptedHook:
    """Returns the scripted results in order, then ``then`` for every later call.

    Each scripted entry may be a result or a callable ``ctx -> result``
    (which may also mutate the input).
    """

    def __init__(self, results: Iterable[Any], *, then: Any = None, name: str = "scripted") -> None:
        self._results = list(results)
        self._then = then
        self.__name__ = name
        self.seen: list[Any] = []
        self._lock = threading.Lock()

    def __call__(self, ctx: Any) -> Any:
        with self._lock:
            self.seen.append(snapshot(ctx))
            entry = self._results.pop(0) if self._results else self._then
        if isinstance(entry, Exception):
            raise entry
        return entry(ctx) if callable(entry) and not isinstance(entry, type) else entry
