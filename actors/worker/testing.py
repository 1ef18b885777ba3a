"""Test utilities for hooks, importable by users: a recording hook and a scripted hook.

``RecordingHook`` remembers a snapshot of every input it sees (and returns a
fixed result); ``ScriptedHook`` returns a scripted sequence of results. Both
are thread-safe, since the worker calls hooks on blocking-lane threads.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable, Iterable
from typing import Any


class RecordingHook:
    """Records a deep copy of each input; returns ``result`` (or ``result(ctx)``)."""

    def __init__(self, result: Any = None, *, name: str = "recording") -> None:
        self.result = result
        self.__name__ = name
        self.calls: list[Any] = []
        self._lock = threading.Lock()

    def __call__(self, ctx: Any) -> Any:
        with self._lock:
            self.calls.append(copy.deepcopy(ctx))
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
            self.seen.append(copy.deepcopy(ctx))
            entry = self._results.pop(0) if self._results else self._then
        if isinstance(entry, Exception):
            raise entry
        return entry(ctx) if callable(entry) and not isinstance(entry, type) else entry


def mutate(fn: Callable[[Any], None], result: Any = None) -> Callable[[Any], Any]:
    """A hook that applies ``fn`` to its input and returns ``result``."""

    def hook(ctx: Any) -> Any:
        fn(ctx)
        return result

    hook.__name__ = getattr(fn, "__name__", "mutate")
    return hook
