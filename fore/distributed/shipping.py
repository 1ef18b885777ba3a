"""Sending a session's Python objects to a shard: a copy, with fresh locks.

A session's model, fast model, tools, hooks and interceptor are Python
objects of the caller's process; a shard runs them in its own. They travel
by value (cloudpickle, as Ray sends any argument, so closures and lambdas
work), and what runs in the shard is a *copy*: state the object changes
there (a scripted model's cursor, a hook's counter) is the shard's, not the
caller's.

Most of Fore's own objects guard their state with a lock (``Hooks``,
``ScriptedModel``, ``FunctionModel``), and a lock cannot be pickled. The copy
gets fresh, released synchronisation primitives instead: a lock means
"one thread at a time *in this process*", which is what the shard's copy
needs. Only this module's own pickler does that; Ray's serialization of
anything else (and of the host's own objects) is left as it is.

Everything else that cannot cross a process boundary (an open socket, a
running thread pool, a generator) fails here with one clear error naming the
object, before any shard is asked.
"""

from __future__ import annotations

import io
import pickle
import threading
from typing import Any

from fore.errors import NotShippable

__all__ = ["NotShippable", "dumps", "loads"]

_LOCK = type(threading.Lock())
_RLOCK = type(threading.RLock())


def _fresh_lock() -> Any:
    return threading.Lock()


def _fresh_rlock() -> Any:
    return threading.RLock()


def _fresh_condition() -> threading.Condition:
    return threading.Condition()


def _fresh_event(was_set: bool) -> threading.Event:
    event = threading.Event()
    if was_set:
        event.set()
    return event


def _pickler_class() -> type[pickle.Pickler]:
    try:
        from ray import cloudpickle
    except ImportError:  # pragma: no cover - the ray extra brings it
        import cloudpickle  # type: ignore[import-not-found,no-redef]

    base: type[pickle.Pickler] = cloudpickle.CloudPickler

    class _Pickler(base):  # type: ignore[valid-type,misc]
        def reducer_override(self, obj: Any) -> Any:
            kind = type(obj)
            if kind is _LOCK:
                return _fresh_lock, ()
            if kind is _RLOCK:
                return _fresh_rlock, ()
            if kind is threading.Condition:
                return _fresh_condition, ()
            if kind is threading.Event:
                return _fresh_event, (obj.is_set(),)
            return super().reducer_override(obj)

    return _Pickler


def dumps(obj: Any, *, what: str = "object") -> bytes:
    """``obj`` as bytes a shard can load; :class:`NotShippable` saying what could not go."""
    buffer = io.BytesIO()
    try:
        _pickler_class()(buffer, protocol=pickle.HIGHEST_PROTOCOL).dump(obj)
    except Exception as exc:
        detail = " ".join(str(exc).split())[:200] or type(exc).__name__
        raise NotShippable(
            f"the session's {what} ({type(obj).__name__}) cannot be sent to a shard: {detail}"
        ) from exc
    return buffer.getvalue()


def loads(data: bytes) -> Any:
    """The copy :func:`dumps` made (in the shard's process)."""
    return pickle.loads(data)
