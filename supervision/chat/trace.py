"""An optional trace of UI moments, for ``fore bench chat`` (``FORE_CHAT_TRACE=path``).

Each line is ``<time.monotonic_ns()> <event> <json fields>``. CLOCK_MONOTONIC
is one clock for every process of the machine, so the benchmark can compare
the moment it sent a key (``tmux send-keys``) with the moment the UI drew the
result. Off (a no-op) unless the variable is set; bounded in lines, so a
forgotten variable cannot fill a disk.
"""

from __future__ import annotations

import json
import os
import threading
import time
from typing import Any, TextIO

ENV = "FORE_CHAT_TRACE"
MAX_LINES = 200_000


class Trace:
    def __init__(self, path: str | None) -> None:
        self._file: TextIO | None = None
        self._lines = 0
        self._lock = threading.Lock()
        if path:
            self._file = open(path, "a", encoding="utf-8", buffering=1)  # noqa: SIM115

    @classmethod
    def from_env(cls) -> Trace:
        return cls(os.environ.get(ENV) or None)

    @property
    def enabled(self) -> bool:
        return self._file is not None

    def mark(self, event: str, at_ns: int | None = None, **fields: Any) -> None:
        if self._file is None:
            return
        when = time.monotonic_ns() if at_ns is None else at_ns
        with self._lock:
            if self._file is None or self._lines >= MAX_LINES:
                return
            self._lines += 1
            try:
                self._file.write(f"{when} {event} {json.dumps(fields, default=str)}\n")
            except (OSError, ValueError):
                self._file = None

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                try:
                    self._file.close()
                except OSError:
                    pass
                self._file = None


def read_trace(path: str) -> list[tuple[int, str, dict[str, Any]]]:
    """Parse a trace file (the benchmark's side)."""
    out: list[tuple[int, str, dict[str, Any]]] = []
    try:
        with open(path, encoding="utf-8") as handle:
            for line in handle:
                parts = line.rstrip("\n").split(" ", 2)
                if len(parts) < 2 or not parts[0].isdigit():
                    continue
                try:
                    fields = json.loads(parts[2]) if len(parts) == 3 else {}
                except ValueError:
                    fields = {}
                out.append((int(parts[0]), parts[1], fields if isinstance(fields, dict) else {}))
    except FileNotFoundError:
        return []
    return out
